"""Train a candidate-scoring MaskablePPO scheduler.

    python train.py --config configs/train/ppo.yaml --out runs/NAME [--device auto|cpu|cuda]
                    [--seed N] [--total-timesteps N] [--resume runs/NAME] [--compare]

Every hyper-parameter, the cluster and the workload come from the YAML config; flags override
it. `--resume runs/NAME` continues a killed run from its last checkpoint (its own config).
`--compare` evaluates the trained model beside every baseline afterwards and prints the table.
The best model is exported for serving into runs/NAME/export/ (agents/export.py, docs/export.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envs.config import ConfigError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/train/ppo.yaml", help="train config: name in configs/train/ or YAML path")
    ap.add_argument("--out", help="run directory (default runs/<config name>)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides the config)")
    ap.add_argument("--seed", type=int, help="overrides the config's seed")
    ap.add_argument("--total-timesteps", type=int, help="overrides the config's total_timesteps")
    ap.add_argument("--compare", action="store_true", help="evaluate against every baseline afterwards")
    ap.add_argument("--compare-seeds", default="0-9", help="test seeds for --compare (default 0-9)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Validate everything before importing torch-heavy modules or doing any work.
    from agents.config import load_train_config
    from agents.device import resolve_device

    try:
        if args.resume:
            run = Path(args.resume)
            if not (run / "config.yaml").is_file():
                raise ConfigError(str(run), "", "not a run directory (no config.yaml)")
            cfg = load_train_config(run / "config.yaml")
            out = run
        else:
            cfg = load_train_config(args.config)
            out = Path(args.out or f"runs/{Path(args.config).stem}")
        if args.device:
            cfg.device = args.device
        if args.seed is not None:
            cfg.seed = args.seed
        if args.total_timesteps is not None:
            if args.total_timesteps < 1:
                raise ConfigError("--total-timesteps", "", "must be >= 1")
            cfg.total_timesteps = args.total_timesteps
        resolve_device(cfg.device)
        import gymnasium as gym

        import envs  # noqa: F401

        gym.make("gangsched/GpuCluster-v0", **cfg.env_kwargs()).close()  # config errors surface now
    except (ConfigError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from agents.training import train

    summary = train(cfg, out, resume=bool(args.resume), progress_bar=not args.no_progress)
    print(f"trained {summary['timesteps']} steps in {summary['wall_s']:.0f} s ({summary['env_steps_per_s']:.0f} env steps/s) on {summary['device']}")
    print(f"best validation avg JCT {summary['best_validation_avg_jct_h']:.2f} h vs {summary['baseline']} {summary['baseline_avg_jct_h']:.2f} h")
    for key in ("model", "last_model", "config", "tensorboard", "checkpoint"):
        print(f"  {key:11s} {summary[key]}")
    from agents.export import export_model

    export_dir = out / "export"
    try:  # the serving files of the best model: policy.onnx and policy.json (docs/export.md)
        export_model(summary["model"], export_dir)
    except (ValueError, RuntimeError, ImportError, OSError) as e:
        print(f"error: the model is saved, but exporting it to {export_dir} failed: {e}", file=sys.stderr)
        return 1
    print(f"  {'export':11s} {export_dir} (policy.onnx, policy.json)")
    if args.compare:
        from evaluate import main as evaluate_main

        seeds = args.compare_seeds
        ppo = f"ppo={summary['model']}"
        policies = ",".join([*cfg.eval["baselines"], ppo])
        return evaluate_main([
            "--cluster", cfg.cluster, "--workload", cfg.workload, "--policies", policies,
            "--seeds", seeds, "--out", str(out / "compare"), "--reference", ppo, "--workers", "2",
            *(["--num-jobs", str(cfg.env["num_jobs"])] if "num_jobs" in cfg.env else []),
        ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
