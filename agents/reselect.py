"""Model selection redone on a finished run, without training.

    python -m agents.reselect runs/NAME [runs/NAME2 ...] [--seeds 100-119] [--workers 2] [--wait-guard K] [--out FILE]

train.py keeps every model it evaluates (RUN/stages/, named by eval.json's "model"). This scores
each of them again by train.py's own rule (agents.selection: `setting_result` on each setting's
validation seeds, `validation_score`), on the run's validation seeds or on `--seeds`, and picks
the lowest score, the earlier stage on a tie as in training. It writes RUN/reselect.json (the
seeds, every stage's entry, the pick) and prints the pick. It never changes model.zip: evaluate
the pick with `evaluate.py --policies ppo=RUN/stages/...zip`.

Seeds are checked as a train config's `eval.seeds` are (agents.config): none may be a scenario's
test seed. A run made before stages/ existed kept only some of its models: the student of each
distillation round (distill/student-rK.zip), model.zip and last_model.zip; the pick is then
among those.

`--wait-guard K` (or `overdue_factor=K,min_wait_s=S`, or `off`) scores every stage with that
bound on WAIT in its masks (envs.decision.candidates.WaitGuard) instead of the run's own `env: wait_guard:`:
the selection for a model that will be evaluated, exported or served with that guard. It writes
RUN/reselect-wait-guard.json (with the guard recorded), leaving reselect.json as it was.

`--out FILE` names the file written in each run directory instead (a selection on other seeds
kept beside the first: `--seeds 120-139 --out reselect-120-139.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agents.config import train_config_from_dict
from agents.parallel import run_tasks
from envs.cluster.config import ConfigError, read_yaml
from envs.decision.candidates import wait_guard_of

LEGACY_MODELS = ("distill/student-r*.zip", "model.zip", "last_model.zip")
RUN_FILES = ("eval.json", "summary.json", "distill.json", "version.json", "bc.json")  # what train.py writes: never overwritten


def stage_models(run: Path) -> list[str]:
    """The run's evaluated models, in the order they were evaluated, as paths relative to `run`."""
    history = json.loads((run / "eval.json").read_text()) if (run / "eval.json").exists() else []
    if history and all("model" in h for h in history):
        return [h["model"] for h in history]
    return [str(p.relative_to(run)) for pattern in LEGACY_MODELS for p in sorted(run.glob(pattern))]


def check_out_name(run: Path, name: str, suffix: str, reserved: tuple[str, ...]) -> None:
    """`--out`: a plain file name ending in `suffix`, written in `run`, none of the run's own
    files (`reserved`); ConfigError naming the field otherwise."""
    if Path(name).name != name or not name.endswith(suffix):
        raise ConfigError(str(run), "--out", f"must be a file name ending in {suffix} (written in the run directory), got {name!r}")
    if name in reserved:
        raise ConfigError(str(run), "--out", f"{name} is the run's own; name another file")


def require_models(run: Path, models: list[str]) -> None:
    """ConfigError naming eval.json where a model it names is not in `run`."""
    missing = [m for m in models if not (run / m).is_file()]
    if missing:
        raise ConfigError(str(run / "eval.json"), "", f"names models that are not there: {', '.join(missing)}")


def _setting_result(task: tuple) -> dict:
    """One model on one setting's validation seeds (a worker task: everything in it pickles)."""
    import torch as th

    from agents.policy import load_model
    from agents.selection import Validation, eval_setting, setting_result

    th.set_num_threads(1)
    path, name, env_kwargs, seeds, baseline, baseline_objective = task
    v = Validation(name, env_kwargs, tuple(seeds), eval_setting(env_kwargs), baseline, baseline_objective)
    return setting_result(load_model(path, device="cpu"), v)


def reselect(run: Path, seeds: str | None = None, workers: int = 1, log=print, wait_guard: str | None = None,
             out_name: str | None = None) -> dict:
    """Score every stage model of `run` (its config, validation seeds or `seeds`; with
    `wait_guard`, that bound on WAIT: see the module's docstring); write and return
    reselect.json's content (reselect-wait-guard.json's with a guard; `out_name` instead when
    given, a file name inside `run`). ConfigError names a bad run directory, seeds, guard or
    output name."""
    if out_name is not None:
        check_out_name(run, out_name, ".json", RUN_FILES)
    from agents.selection import validation_score, validations

    config = run / "config.yaml"
    if not config.is_file():
        raise ConfigError(str(run), "", "not a run directory (no config.yaml)")
    data = read_yaml(config)
    if seeds is not None:
        data.setdefault("eval", {})["seeds"] = seeds
    guard_data = None  # the guard asked for, as plain data (None: none)
    if wait_guard is not None:
        try:
            guard = wait_guard_of(wait_guard, "--wait-guard")
        except ValueError as e:
            raise ConfigError(str(run), "", str(e)) from None
        guard_data = None if guard is None else guard.to_dict()
        data.setdefault("env", {})["wait_guard"] = guard_data
    cfg = train_config_from_dict(data, f"{config}{' with --seeds ' + seeds if seeds is not None else ''}")
    models = stage_models(run)
    if not models:
        raise ConfigError(str(run), "", "no evaluated models to choose from (no stages/ and no model.zip)")
    require_models(run, models)
    vals = validations(cfg)
    for v in vals:
        log(f"{run}: {v.name}: validation seeds {v.seeds[0]}-{v.seeds[-1]} ({len(v.seeds)}), best baseline '{v.baseline}' "
            f"{v.baseline_objective:.4g}")
    tasks = [(str(run / m), v.name, v.env_kwargs, list(v.seeds), v.baseline, v.baseline_objective) for m in models for v in vals]
    t0 = time.perf_counter()
    results = run_tasks(_setting_result, tasks, workers=workers, desc=f"reselect {run.name}")
    n = len(vals)
    entries = [{"model": m, **validation_score(results[i * n:(i + 1) * n])} for i, m in enumerate(models)]
    pick = min(entries, key=lambda e: e["score"])["model"]  # min keeps the first of equals: the earlier stage
    out = {"config": str(config), "seeds": {v.name: list(v.seeds) for v in vals}, "stages": entries, "pick": pick,
           "wall_s": time.perf_counter() - t0}
    name = "reselect.json"
    if wait_guard is not None:
        out["wait_guard"] = guard_data
        name = "reselect-wait-guard.json"
    name = out_name or name
    (run / name).write_text(json.dumps(out, indent=1))
    for e in entries:
        log(f"  {e['model']:40s} score {e['score']:.4f}  vs baseline {e['rel_diff']:+.1%}{'   <- pick' if e['model'] == pick else ''}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.reselect", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories written by train.py")
    ap.add_argument("--seeds", help="validation seeds (0-9, 100-119, ...); default: the run's own")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (1)")
    ap.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                    help="score with this bound on WAIT instead of the run's own (writes reselect-wait-guard.json)")
    ap.add_argument("--out", default=None, metavar="FILE",
                    help="the file to write in each run directory (default reselect.json, or reselect-wait-guard.json)")
    args = ap.parse_args(argv)
    try:
        for run in args.runs:
            out = reselect(run, args.seeds, args.workers, wait_guard=args.wait_guard, out_name=args.out)
            print(f"{run}: pick {run / out['pick']}")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
