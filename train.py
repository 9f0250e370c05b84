"""Train a candidate-scoring MaskablePPO scheduler.

    python train.py --config configs/train/ppo.yaml --out runs/NAME [--device auto|cpu|cuda]
                    [--seed N] [--total-timesteps N] [--resume runs/NAME] [--compare]
    python train.py --backend ray --seeds 0-4 [--ray-address ADDRESS] --config ... --out runs/NAME
    python train.py --backend ray --sweep configs/train/sweep.yaml --out runs/sweep

Every hyper-parameter, the cluster and the workload come from the YAML config; flags override
it. `--resume runs/NAME` continues a killed run from its last checkpoint (its own config).
`--compare` evaluates the trained model beside every baseline and every shipped model (models/NAME,
as deployed) afterwards, on the scenario's test seeds (else 0-9; `--compare-seeds` chooses), and
prints the table and the path of the HTML report.
The best model is exported for serving into runs/NAME/export/ (agents/export.py, docs/export.md).

`--backend ray` runs several runs at once as Ray Tune trials (agents/tuning.py, docs/ray.md):
`--seeds 0-4` trains each seed into runs/NAME/seed-N, `--sweep FILE` searches hyperparameters
into runs/NAME/trial-K and reports the best trial on the validation seeds. Each trial is
`train_and_export` (agents/run.py), exactly what a plain run does. Ray starts on this machine, or
`--ray-address` joins a cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.run import ExportError, apply_overrides, train_and_export
from envs.cluster.config import ConfigError

DEFAULT_CONFIG = "configs/train/ppo.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help=f"train config: name in configs/train/ or YAML path ({DEFAULT_CONFIG})")
    ap.add_argument("--out", help="run directory (default runs/<config name>)")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides the config)")
    ap.add_argument("--seed", type=int, help="overrides the config's seed")
    ap.add_argument("--total-timesteps", type=int, help="overrides the config's total_timesteps")
    ap.add_argument("--torch-threads", type=int, metavar="N", help="torch threads for the updates (overrides the config's torch_threads; "
                    "the same seed gives the same run only with the same count)")
    ap.add_argument("--compare", action="store_true", help="evaluate against every baseline afterwards")
    ap.add_argument("--compare-seeds", help="test seeds for --compare (default: the scenario's test seeds, else 0-9)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ray = ap.add_argument_group("several runs as Ray Tune trials (docs/ray.md)")
    ray.add_argument("--backend", choices=("local", "ray"), default="local", help="local: one run in this process; ray: Ray Tune trials")
    ray.add_argument("--seeds", help="with --backend ray: train these seeds in parallel (0-4, 0,3,5), each into OUT/seed-N")
    ray.add_argument("--sweep", metavar="SWEEP", help="with --backend ray: search hyperparameters as this sweep file says (configs/train/sweep.yaml), each trial into OUT/trial-K")
    ray.add_argument("--ray-address", metavar="ADDRESS", help="with --backend ray: join this Ray cluster (auto, HOST:6379, ray://HOST:10001); default: start Ray here")
    ray.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs Ray reserves for each trial (1)")
    ray.add_argument("--gpus-per-trial", type=float, default=0.0, help="GPUs Ray reserves for each trial (0)")
    return ap.parse_args(argv)


def _ray_usage(args: argparse.Namespace) -> str | None:
    """The first misuse of the Ray flags, as one line, or None."""
    if args.backend != "ray":
        for flag, value in (("--seeds", args.seeds), ("--sweep", args.sweep), ("--ray-address", args.ray_address)):
            if value is not None:
                return f"{flag} needs --backend ray"
        return None
    for flag, value in (("--resume", args.resume), ("--compare", args.compare or None)):
        if value is not None:
            return f"{flag} is for one plain run, not with --backend ray"
    if args.seeds is not None and args.sweep is not None:
        return "--seeds and --sweep: give one (a sweep trains the config's seed, or --seed)"
    if args.seeds is not None and args.seed is not None:
        return "--seed conflicts with --seeds"
    if args.sweep is not None and args.config is not None:
        return "--config conflicts with --sweep (the sweep file names its train config)"
    if args.cpus_per_trial <= 0:
        return f"--cpus-per-trial must be > 0, got {args.cpus_per_trial:g}"
    if args.gpus_per_trial < 0:
        return f"--gpus-per-trial must be >= 0, got {args.gpus_per_trial:g}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Validate everything before importing torch-heavy modules or doing any work.
    from agents.config import load_train_config
    from agents.device import resolve_device
    from agents.parallel import BackendError

    try:
        problem = _ray_usage(args)
        if problem:
            raise ValueError(problem)
        sweep = None
        if args.sweep is not None:
            from agents.tuning import load_sweep

            sweep = load_sweep(args.sweep)
            args.config = sweep.config
        args.config = args.config or DEFAULT_CONFIG
        if args.resume:
            run = Path(args.resume)
            if not (run / "config.yaml").is_file():
                raise ConfigError(str(run), "", "not a run directory (no config.yaml)")
            cfg = load_train_config(run / "config.yaml")
            out = run
        else:
            cfg = load_train_config(args.config)
            out = Path(args.out or f"runs/{Path(args.sweep or args.config).stem}")
        apply_overrides(cfg, device=args.device, seed=args.seed, total_timesteps=args.total_timesteps, torch_threads=args.torch_threads)
        seeds = None
        if args.backend == "ray":
            from envs.cluster.config import parse_seeds

            try:
                seeds = parse_seeds(args.seeds) if args.seeds is not None else [cfg.seed]
            except ValueError as e:
                raise ValueError(f"--seeds: {e}") from None
        resolve_device(cfg.device)
        import gymnasium as gym

        import envs  # noqa: F401

        gym.make("gangsched/GpuCluster-v0", **cfg.env_kwargs()).close()  # config errors surface now
        if args.backend == "ray":
            from agents.parallel import import_ray

            import_ray()
    except (ConfigError, ValueError, TypeError, BackendError) as e:  # BackendError: --backend ray without Ray installed
        print(f"error: {e}", file=sys.stderr)
        return 2

    if args.backend == "ray":
        return _train_on_ray(args, out, seeds, sweep)
    try:
        summary = train_and_export(cfg, out, resume=bool(args.resume), progress_bar=not args.no_progress)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.compare:
        from agents.shipped import shipped_models
        from baselines import BASELINES
        from evaluate import main as evaluate_main

        ppo = f"ppo={summary['model']}"
        # every baseline, not only those model selection compared with, and the shipped models as deployed
        policies = ",".join([*BASELINES, ppo, *(f"learned={m}" for m in shipped_models())])
        where = ["--scenario", cfg.scenario] if cfg.scenario else ["--cluster", cfg.cluster, "--workload", cfg.workload]
        return evaluate_main([
            *where, "--policies", policies, *(["--seeds", args.compare_seeds] if args.compare_seeds else []),
            "--out", str(out / "compare"), "--reference", ppo, "--workers", "2",
            *(["--num-jobs", str(cfg.env["num_jobs"])] if "num_jobs" in cfg.env else []),
        ])
    return 0


def _train_on_ray(args: argparse.Namespace, out: Path, seeds: list[int], sweep) -> int:
    """--backend ray: the seeds, or the sweep's trials, as Ray Tune trials; a table of them and
    the best on the validation seeds. Exit code 1 when a trial failed (the others are kept)."""
    from agents.parallel import BackendError, ray_session
    from agents.tuning import METRIC, run_trials
    from envs.cluster.config import resolve_config

    overrides = {"device": args.device, "total_timesteps": args.total_timesteps, "torch_threads": args.torch_threads, **({"seed": args.seed} if args.seed is not None else {})}
    try:
        with ray_session(args.ray_address):
            report = run_trials(str(resolve_config(args.config, "train")), out, overrides=overrides, seeds=None if sweep else seeds, sweep=sweep,
                                cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial)
    except BackendError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for t in report.trials:
        settings = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t["settings"].items())
        what = f"seed {t['seed']}" + (f" ({settings})" if settings else "")
        if t.get("error"):
            print(f"trial failed: {what}: {t['error']}", file=sys.stderr)
        else:
            print(f"{what}: best validation objective {t['best_validation_objective']:.4g} (baseline {t['baseline']} {t['baseline_objective']:.4g}) in {t['run_dir']}")
    if report.best is not None:
        b = report.best
        settings = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in b["settings"].items())
        print(f"best trial on the validation seeds: {b['run_dir']} (seed {b['seed']}{', ' + settings if settings else ''}): "
              f"objective {b['best_validation_objective']:.4g} vs {b['baseline']} {b['baseline_objective']:.4g}")
    print(f"wrote {report.path}")
    if report.failed:
        print(f"error: {len(report.failed)} of {len(report.trials)} trials failed; the others' run folders are complete", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
