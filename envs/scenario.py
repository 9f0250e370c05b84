"""Scenarios: a cluster, a workload, an objective and the seeds to judge policies on.

A scenario (configs/scenarios/NAME.yaml) fixes everything a comparison needs, so that "policy X
on scenario Y" means one thing:

    name: slo-preempt
    cluster: mixed-64gpu              # a config name in configs/clusters/ or a YAML path
    workload: slo-preempt             # a config name in configs/workloads/ or a YAML path
    num_jobs: null                    # the workload's own count unless set
    queue_window: 8
    max_checkpoint_s: 60
    objective: {avg_jct: 0.0, weighted_jct: 1.0, slo_misses: 4.0, ...}   # envs.sim.objective
    seeds: {test: 0-9, validation: 100-119}
    lookahead: {k: 3, preempt_k: 2, samples: 4, horizon_s: 10800}       # agents.lookahead

Test seeds are for reported results only; validation seeds for model selection and tuning;
training draws its workloads from seeds >= 1,000,000 (envs.gym.env.TRAIN_SEEDS), so the three never
meet. Each scenario file says in a comment what it stresses and why a real cluster looks so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from envs.cluster.config import CONFIG_ROOT, ConfigError, Fields, parse_seeds, read_yaml, resolve_config
from envs.sim.objective import Objective, objective_from_dict

TRAINING_SEEDS_FROM = 1_000_000


@dataclass(frozen=True)
class LookaheadConfig:
    """How the lookahead policies search at one decision (agents.lookahead)."""

    k: int = 3  # best non-preempting candidates by the base rule's key
    preempt_k: int = 2  # best preempting candidates
    samples: int = 4  # sampled futures per candidate (the non-clairvoyant form; the oracle uses 1: the truth)
    horizon_s: float = 10800.0  # simulate this far ahead (inf: to the episode's end; then a trace's sampled future has no arrivals)
    base: str = "sect"  # the heuristic followed after the first step
    min_gain: float = 0.0  # leave the base rule's choice only for a mean gain above this share of its cost
    # Where the search would leave the base rule's choice: draw this many more futures for the two
    # (the base's choice and the departure) and leave only if the same test holds over all of them.
    # Meant to drop departures won on a few lucky futures; on slo-preempt it made the teacher
    # 8% worse (docs/research/2026-12-01-confirmed-departures.md). 0: off; the oracle ignores it.
    confirm_samples: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    cluster: str
    workload: str
    num_jobs: int | None
    queue_window: int
    max_checkpoint_s: float
    objective: Objective
    test_seeds: list[int]
    validation_seeds: list[int]
    lookahead: LookaheadConfig = field(default_factory=LookaheadConfig)
    source: str = "<inline>"

    def env_kwargs(self) -> dict:
        """Keyword arguments of `GpuClusterEnv` for this scenario."""
        return {
            "cluster": self.cluster, "workload": self.workload, "num_jobs": self.num_jobs, "queue_window": self.queue_window,
            "objective": self.objective, "max_checkpoint_s": self.max_checkpoint_s,
        }


def _seeds(f: Fields, key: str, default: str) -> list[int]:
    value = f.get(key, (str, int, list), default)
    try:
        seeds = parse_seeds(value)
    except ValueError as e:
        raise f.error(key, str(e)) from None
    if any(s >= TRAINING_SEEDS_FROM for s in seeds):
        raise f.error(key, f"seeds must be < {TRAINING_SEEDS_FROM:,} (training draws its workloads from there)")
    return seeds


def lookahead_from_fields(la: Fields) -> LookaheadConfig:
    """A `lookahead:` mapping (a scenario's, or a training config's `distill.lookahead`) checked
    field by field; the fields it leaves out keep LookaheadConfig()'s defaults."""
    from baselines import BASELINES  # here: baselines import envs

    b = LookaheadConfig()
    la.check_keys({f.name for f in dataclasses.fields(LookaheadConfig)})
    name = la.get("base", str, b.base)
    if name not in BASELINES:
        raise la.error("base", f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    return LookaheadConfig(
        k=la.get("k", int, b.k, min_value=1), preempt_k=la.get("preempt_k", int, b.preempt_k, min_value=0),
        samples=la.get("samples", int, b.samples, min_value=1), horizon_s=la.get("horizon_s", float, b.horizon_s, min_value=1.0),
        base=name, min_gain=la.get("min_gain", float, b.min_gain, min_value=0.0),
        confirm_samples=la.get("confirm_samples", int, b.confirm_samples, min_value=0),
    )


def lookahead_search(scenario: Scenario | None, overrides: dict | None = None) -> LookaheadConfig:
    """The lookahead's search settings for `scenario` (LookaheadConfig() without one), with
    `overrides` (field -> value, e.g. a training config's `distill.lookahead`) over them."""
    base = scenario.lookahead if scenario is not None else LookaheadConfig()
    return dataclasses.replace(base, **overrides) if overrides else base


def scenario_from_dict(data: dict, source: str) -> Scenario:
    top = Fields(data, source, "")
    top.check_keys({"name", "description", "cluster", "workload", "num_jobs", "queue_window", "max_checkpoint_s", "objective", "seeds", "lookahead"})
    seeds = top.sub("seeds", {})
    seeds.check_keys({"test", "validation"})
    test, validation = _seeds(seeds, "test", "0-9"), _seeds(seeds, "validation", "100-119")
    if set(test) & set(validation):
        raise seeds.error("validation", f"shares seeds with test: {sorted(set(test) & set(validation))}")
    lookahead = lookahead_from_fields(top.sub("lookahead", {}))
    num_jobs = top.get("num_jobs", (int, type(None)), None)
    if num_jobs is not None and num_jobs < 1:
        raise top.error("num_jobs", f"must be >= 1, got {num_jobs}")
    return Scenario(
        name=top.get("name", str, Path(source).stem),
        description=top.get("description", str, ""),
        cluster=top.get("cluster", str),
        workload=top.get("workload", str),
        num_jobs=num_jobs,
        queue_window=top.get("queue_window", int, 8, min_value=1),
        max_checkpoint_s=top.get("max_checkpoint_s", float, 60.0, min_value=0.0),
        objective=objective_from_dict(data.get("objective"), source),
        test_seeds=test,
        validation_seeds=validation,
        lookahead=lookahead,
        source=source,
    )


def load_scenario(name_or_path: str | Path | Scenario) -> Scenario:
    """A scenario by name (configs/scenarios/NAME.yaml) or YAML path; ConfigError names the file
    and field. Its cluster and workload are checked to load too."""
    if isinstance(name_or_path, Scenario):
        return name_or_path
    path = resolve_config(name_or_path, "scenarios")
    sc = scenario_from_dict(read_yaml(path), str(path))
    from envs.cluster.config import load_cluster
    from envs.workload.generator import check_workload_fits, load_workload_spec

    for key, name, kind in (("cluster", sc.cluster, "clusters"), ("workload", sc.workload, "workloads")):
        try:
            resolve_config(name, kind)
        except ConfigError as e:
            raise ConfigError(str(path), key, str(e)) from None
    spec = load_workload_spec(sc.workload)
    if spec.trace is None:
        check_workload_fits(spec, load_cluster(sc.cluster))
    return sc


def scenario_names() -> list[str]:
    """The shipped scenarios, in file-name order."""
    return sorted(p.stem for p in (CONFIG_ROOT / "scenarios").glob("*.yaml"))
