"""One model from a run's kept models by averaging their weights (a "model soup"), without training.

    python -m agents.average runs/NAME [--models all|ahead] [--out average-all.zip]

A run's evaluated models (RUN/stages/, named by eval.json) are one lineage: each distillation
round fits the same network further, and PPO goes on from it. Their weights can then be
averaged element-wise into one network of the same shape, which decides in one forward pass
like any other model (Wortsman et al., "Model soups", ICML 2022, average fine-tuned models of
one starting point). `--models all` averages every kept model; `--models ahead` those whose
score in eval.json is better than the run's validation baseline (all of them when none is,
which leaves the soup the run's pick alone). The result is written in the run directory, so
evaluate.py and export apply the run's own settings to it (its bound on WAIT, for one).

Measured on 15 runs (docs/research/2026-12-03-model-selection-measured.md): no better than train.py's pick on
average, so it is a tool for experiments, not a default.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agents.reselect import check_out_name, require_models
from envs.cluster.config import ConfigError

RULES = ("all", "ahead")


def soup_members(run: Path, rule: str) -> list[str]:
    """The models of `run` that rule `rule` averages (paths relative to `run`)."""
    history = json.loads((run / "eval.json").read_text()) if (run / "eval.json").is_file() else []
    if not history or not all("model" in h for h in history):
        raise ConfigError(str(run / "eval.json"), "", "no evaluated models (a run made before stages/ existed, or no run)")
    if rule not in RULES:
        raise ConfigError(str(run), "--models", f"must be one of {', '.join(RULES)}, got {rule!r}")
    models = [h["model"] for h in history if rule == "all" or h["rel_diff"] < 0]
    if not models:  # none ahead of the baseline: the run's pick alone
        models = [min(history, key=lambda h: h["score"])["model"]]
    require_models(run, models)
    return models


def average(run: Path, rule: str = "all", out_name: str | None = None) -> tuple[Path, list[str]]:
    """Write the element-wise mean of the weights of `soup_members(run, rule)` as a model file in
    `run` (`average-RULE.zip` unless `out_name`); returns its path and the members. ConfigError
    when the members' networks differ in shape or in any non-float entry."""
    import torch as th

    from agents.policy import load_model

    name = out_name or f"average-{rule}.zip"
    check_out_name(run, name, ".zip", ("model.zip", "last_model.zip"))
    members = soup_members(run, rule)
    model = load_model(run / members[0], device="cpu")
    states = [model.policy.state_dict()] + [load_model(run / m, device="cpu").policy.state_dict() for m in members[1:]]
    mean = {}
    for key, first in states[0].items():
        values = [s.get(key) for s in states]
        if any(v is None or v.shape != first.shape for v in values):
            raise ConfigError(str(run), "", f"{key}: the models' networks differ in shape; they are not one lineage")
        if first.is_floating_point():
            mean[key] = sum(values[1:], values[0]) / len(values)  # summed in the models' order
        elif all(th.equal(v, first) for v in values):
            mean[key] = first
        else:
            raise ConfigError(str(run), "", f"{key}: differs between the models and cannot be averaged")
    model.policy.load_state_dict(mean)
    path = run / name
    model.save(path)
    return path, members


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.average", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories written by train.py")
    ap.add_argument("--models", default="all", choices=RULES, help="which kept models to average (all)")
    ap.add_argument("--out", default=None, metavar="FILE", help="the file to write in each run directory (average-RULE.zip)")
    args = ap.parse_args(argv)
    try:
        for run in args.runs:
            path, members = average(run, args.models, args.out)
            print(f"{path}: the mean of {len(members)} models ({', '.join(members)})")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
