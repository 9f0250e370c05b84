"""Several training runs at once as Ray Tune trials: the seeds of one config (`train.py --backend
ray --seeds 0-4`), or a hyperparameter search from a sweep file (`train.py --backend ray --sweep
configs/train/sweep.yaml`). docs/ray.md.

Each trial is a normal run: `agents.run.train_and_export`, exactly what a plain `train.py --seed N
--out DIR` runs, into its own folder, OUT/seed-N or OUT/trial-K (config.yaml, model.zip, tb/,
eval.json, export/, ...). Tune's own records go to OUT/tune/, and OUT/trials.json lists every
trial: its settings, its run folder, its best validation objective (the mean objective on the
config's validation seeds of its model.zip) or its error. The best trial is the one with the
lowest. A failed trial is reported and not retried (Tune's `FailureConfig(max_failures=0)`); the
other trials go on.

A sweep file (YAML, validated at load time, errors name the file and field):

    config: research/ppo-quick   # the train config every trial starts from (name or path)
    num_samples: 6               # settings drawn
    search_seed: 0               # the draw is reproducible (omit for a fresh one)
    search:                      # dotted train-config keys, one distribution each
      ppo.learning_rate: {loguniform: [1.0e-4, 2.0e-3]}
      ppo.clip_range: {choice: [0.1, 0.2, 0.3]}
      ppo.ent_coef: {uniform: [0.0, 0.03]}
      ppo.n_epochs: {randint: [2, 8]}      # Tune's randint: the upper end is excluded

Every key is checked against the train config's own validation with each choice and both ends
of each range, so a misspelt or mistyped key stops the sweep before Ray starts.

Paths: the config and the run folders are absolute paths, and trials run in the directory the
command was started from, so they must exist on every node of a cluster (a shared file system);
Ray itself is imported only when trials run.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.cluster.config import ConfigError, Fields, read_yaml, resolve_config

# train()'s summary: the score that selected model.zip (lower is better): the mean objective on the
# validation seeds, or on an env_mix the mean paired difference against each setting's best heuristic.
METRIC = "best_validation_score"
DISTRIBUTIONS = {"choice": None, "uniform": 2, "loguniform": 2, "randint": 2}  # name -> number of arguments (None: a list)
_SWEEP_KEYS = {"description", "config", "num_samples", "search_seed", "search"}


@dataclass(frozen=True)
class Sweep:
    config: str  # the base train config, as resolved (a path)
    num_samples: int
    search_seed: int | None
    search: dict[str, tuple[str, list]] = field(default_factory=dict)  # dotted key -> (distribution, arguments)
    source: str = "<sweep>"


def set_dotted(data: dict, key: str, value: Any) -> dict:
    """A deep copy of a train config mapping with `key` ("ppo.learning_rate", "n_envs") set."""
    out = copy.deepcopy(data)
    *parents, last = key.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise TypeError(f"{key}: '{p}' is not a section")
    node[last] = value
    return out


def _test_values(dist: str, args: list) -> list:
    if dist == "choice":
        return list(args)
    if dist == "randint":
        return [args[0], args[1] - 1]
    return list(args)


def load_sweep(name_or_path: str | Path) -> Sweep:
    """A sweep file (name in configs/train/ or a YAML path), validated: every search key is tried
    on the base train config with each choice and each range's ends. ConfigError otherwise."""
    from agents.config import read_train_yaml, train_config_from_dict

    path = resolve_config(name_or_path, "train")
    source = str(path)
    top = Fields(read_yaml(path), source, "")
    top.check_keys(_SWEEP_KEYS)
    base_path = resolve_config(top.get("config", str), "train")
    base = read_train_yaml(base_path)
    num_samples = top.get("num_samples", int, min_value=1)
    search_seed = top.get("search_seed", (int, type(None)), None)
    search_f = top.sub("search")
    if not search_f.data:
        raise ConfigError(source, "search", "needs at least one key")
    search: dict[str, tuple[str, list]] = {}
    for key, spec in search_f.data.items():
        f = Fields(spec, source, search_f.path(str(key)))
        if len(f.data) != 1 or next(iter(f.data)) not in DISTRIBUTIONS:
            raise ConfigError(source, f.prefix, f"must be one distribution of {', '.join(DISTRIBUTIONS)}, e.g. {{loguniform: [1.0e-4, 1.0e-3]}}")
        dist = next(iter(f.data))
        args = f.get(dist, list)
        n = DISTRIBUTIONS[dist]
        if (n is None and not args) or (n is not None and len(args) != n):
            raise f.error(dist, "needs a non-empty list" if n is None else f"needs [low, high], got {args!r}")
        if dist != "choice":
            number = int if dist == "randint" else (int, float)
            if not all(isinstance(a, number) and not isinstance(a, bool) for a in args):
                raise f.error(dist, f"needs {'integers' if dist == 'randint' else 'numbers'}, got {args!r}")
            if not args[0] < args[1] or (dist == "randint" and args[1] - args[0] < 1):
                raise f.error(dist, f"needs low < high, got {args!r}")
            if dist == "loguniform" and args[0] <= 0:
                raise f.error(dist, f"needs low > 0, got {args!r}")
            if dist != "randint":
                args = [float(a) for a in args]
        for value in _test_values(dist, args):
            try:
                train_config_from_dict(set_dotted(base, str(key), value), str(base_path))
            except (ConfigError, ValueError, TypeError) as e:
                raise ConfigError(source, f.prefix, f"{value!r} is not a valid setting: {e}") from None
        search[str(key)] = (dist, args)
    return Sweep(str(base_path), num_samples, search_seed, search, source)


def _search_space(sweep: Sweep) -> dict[str, Any]:
    from ray import tune

    make = {"choice": lambda a: tune.choice(a), "uniform": lambda a: tune.uniform(*a), "loguniform": lambda a: tune.loguniform(*a),
            "randint": lambda a: tune.randint(*a)}
    return {key: make[dist](args) for key, (dist, args) in sweep.search.items()}


def _trial(params: dict, *, config: str, overrides: dict, out_root: str, cwd: str, kind: str) -> None:
    """One Tune trial: the train config with this trial's settings, trained and exported as
    train.py does it, into OUT/seed-N (kind "seeds") or OUT/trial-K (kind "sweep")."""
    from ray import tune

    from agents.config import load_train_config, read_train_yaml, train_config_from_dict
    from agents.run import apply_overrides, train_and_export

    if os.path.isdir(cwd):  # relative paths in the config mean what they mean to train.py
        os.chdir(cwd)

    settings = {k: v for k, v in params.items() if k != "seed"}
    if settings:
        data = read_train_yaml(Path(config))
        for key, value in settings.items():
            data = set_dotted(data, key, value)
        cfg = train_config_from_dict(data, config)
    else:
        cfg = load_train_config(config)
    apply_overrides(cfg, **{**overrides, **({"seed": params["seed"]} if "seed" in params else {})})
    if kind == "seeds":
        name = f"seed-{cfg.seed}"
    else:
        name = f"trial-{tune.get_context().get_trial_id().rsplit('_', 1)[-1]}"
    out = Path(out_root) / name
    summary = train_and_export(cfg, out, progress_bar=False)
    numbers = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    tune.report({**numbers, "run_dir": str(out), "seed": cfg.seed, "baseline": summary.get("baseline")})


@dataclass
class TrialsReport:
    kind: str  # "seeds" or "sweep"
    trials: list[dict]  # {"run_dir", "seed", "settings", METRIC, ...} or {"settings", "error"}; in seed / trial order
    best: dict | None  # the trial with the lowest METRIC
    path: Path  # OUT/trials.json

    @property
    def failed(self) -> list[dict]:
        return [t for t in self.trials if t.get("error")]


def _one_line(error: Any) -> str:
    """Tune wraps the trial's exception with its traceback; the last line is the trial's own
    "Type: message"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def run_trials(config: str, out_root: Path, *, overrides: dict, seeds: list[int] | None = None, sweep: Sweep | None = None,
               cpus_per_trial: float = 1, gpus_per_trial: float = 0, log=print) -> TrialsReport:
    """Train `seeds` of the train config at `config` (a path), or the sweep's drawn settings, as
    Ray Tune trials on the Ray session this process is connected to (`agents.parallel.ray_init`).
    `overrides` (device, seed, total_timesteps, torch_threads) apply to every trial as train.py's flags do.
    Writes OUT/trials.json and returns its content."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    out_root = out_root.resolve()
    kind = "sweep" if sweep is not None else "seeds"
    if sweep is not None:
        space, samples = _search_space(sweep), sweep.num_samples
        search_alg = BasicVariantGenerator(random_state=sweep.search_seed) if sweep.search_seed is not None else None
    else:
        space, samples, search_alg = {"seed": tune.grid_search(list(seeds or []))}, 1, None
    trainable = tune.with_resources(
        tune.with_parameters(_trial, config=str(Path(config).resolve()), overrides=overrides, out_root=str(out_root), cwd=os.getcwd(), kind=kind),
        {"cpu": cpus_per_trial, "gpu": gpus_per_trial},
    )
    out_root.mkdir(parents=True, exist_ok=True)
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(metric=METRIC, mode="min", num_samples=samples, search_alg=search_alg),
        run_config=tune.RunConfig(name="tune", storage_path=str(out_root), failure_config=tune.FailureConfig(max_failures=0), verbose=1),
    )
    grid = tuner.fit()
    trials = []
    for r in grid:
        settings = {k: v for k, v in (r.config or {}).items() if k != "seed"}
        seed = (r.config or {}).get("seed", overrides.get("seed"))
        if r.error is not None:
            trials.append({"seed": seed, "settings": settings, "error": _one_line(r.error), "tune_dir": r.path})
            continue
        m = r.metrics or {}
        trials.append({"run_dir": m.get("run_dir"), "seed": m.get("seed"), "settings": settings, METRIC: m.get(METRIC),
                       "best_validation_objective": m.get("best_validation_objective"), "baseline": m.get("baseline"), "baseline_objective": m.get("baseline_objective"),
                       "timesteps": m.get("timesteps"), "wall_s": m.get("wall_s"), "tune_dir": r.path})
    trials.sort(key=lambda t: (t["seed"] if kind == "seeds" and t["seed"] is not None else -1, t.get("run_dir") or "~", t["tune_dir"]))
    finished = [t for t in trials if not t.get("error") and t.get(METRIC) is not None and math.isfinite(t[METRIC])]
    best = min(finished, key=lambda t: t[METRIC]) if finished else None
    doc = {"kind": kind, "metric": METRIC, "mode": "min", "config": str(Path(config).resolve()), "sweep": sweep.source if sweep else None,
           "trials": trials, "best": best}
    path = out_root / "trials.json"
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return TrialsReport(kind, trials, best, path)
