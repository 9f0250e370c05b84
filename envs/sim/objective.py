"""The scheduling objective: a weighted sum of documented per-job terms, lower is better.

One objective defines both what an evaluation reports first and what the env rewards, so a
policy is trained on the quantity it is judged by. Its terms, each averaged over the jobs of the
workload (so the default objective *is* the average JCT in hours):

| term | weight key | unit per job |
|---|---|---|
| average JCT | `avg_jct` | hours |
| priority-weighted average JCT: sum of w(priority class) x JCT / jobs | `weighted_jct` | hours |
| SLO misses: jobs that started or finished later than their kind's SLO | `slo_misses` | misses |
| GPU-hours lost to preemption (checkpoint + restore) | `preemption_gpu_h` | GPU-hours |
| energy drawn by powered-on nodes | `energy_kwh` | kWh |

`objective = sum(weight x term)`. The env's reward is minus its increase between decisions
(times jobs, in units of `time_scale_s`), so an episode's return is `-jobs x objective` with the
default time scale: the reward-to-go of a decision is exactly what it does to the objective.

SLOs are per job kind: `start_within_s` (a serving replica that is not up within this long of
its arrival misses) and `finish_slowdown` (a job whose JCT exceeds this multiple of its ideal
runtime misses: a deadline). A job misses at most once, and the miss is counted the moment it
becomes certain (a deadline passes while the job is still queued or running), so the count is
monotone during an episode and exact at its end. The ideal runtime is the job's true work: the
SLO is measured, it never reaches the scheduler's observation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from envs.cluster.config import ConfigError, Fields
from envs.jobs import JOB_KIND_BY_NAME, JOB_KIND_NAMES, PRIORITY_BY_NAME, PRIORITY_NAMES, JobKind


@dataclass(frozen=True)
class Slo:
    """One job kind's service-level objective; inf disables a bound."""

    start_within_s: float = math.inf
    finish_slowdown: float = math.inf


# The SLO of `inference_slo_misses` and of the default objective: a replica that finishes later
# than 3x its ideal runtime (queueing, slow GPUs, bad placement and interference all count).
DEFAULT_SLOS: tuple[tuple[int, Slo], ...] = ((int(JobKind.INFERENCE), Slo(finish_slowdown=3.0)),)

OBJECTIVE_TERMS = ("avg_jct", "weighted_jct", "slo_misses", "preemption_gpu_h", "energy_kwh")


@dataclass(frozen=True)
class Objective:
    """Weights of the objective's terms (see the module docstring), the priority weights of the
    weighted-JCT term (low, normal, high) and the SLOs per job kind."""

    avg_jct: float = 1.0
    weighted_jct: float = 0.0
    slo_misses: float = 0.0
    preemption_gpu_h: float = 0.0
    energy_kwh: float = 0.0
    priority_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    slos: tuple[tuple[int, Slo], ...] = DEFAULT_SLOS
    time_scale_s: float = 3600.0  # reward unit: one job in the system for this long costs 1
    _slo_arrays: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        start = np.full(len(JobKind), np.inf)
        finish = np.full(len(JobKind), np.inf)
        for kind, slo in self.slos:
            start[kind], finish[kind] = slo.start_within_s, slo.finish_slowdown
        object.__setattr__(self, "_slo_arrays", (start, finish))

    @property
    def slo_start_s(self) -> np.ndarray:
        """(kinds,) s: start deadline after arrival per job kind (inf: none)."""
        return self._slo_arrays[0]

    @property
    def slo_finish_slowdown(self) -> np.ndarray:
        """(kinds,) finish deadline per job kind as a multiple of the ideal runtime (inf: none)."""
        return self._slo_arrays[1]

    def weights(self) -> dict[str, float]:
        return {t: float(getattr(self, t)) for t in OBJECTIVE_TERMS}

    def to_dict(self) -> dict:
        """Plain data, as written into results.json."""
        return {
            **self.weights(),
            "priority_weights": {PRIORITY_NAMES[p]: w for p, w in enumerate(self.priority_weights)},
            "slos": {JOB_KIND_NAMES[JobKind(k)]: {"start_within_s": s.start_within_s if math.isfinite(s.start_within_s) else None,
                                                  "finish_slowdown": s.finish_slowdown if math.isfinite(s.finish_slowdown) else None}
                     for k, s in self.slos},
        }


def objective_from_dict(data: dict | None, source: str, prefix: str = "objective") -> Objective:
    """An `Objective` from plain data (a scenario's `objective:` mapping); ConfigError names the
    file and field."""
    if data is None:
        return Objective()
    f = Fields(data, source, prefix)
    f.check_keys({*OBJECTIVE_TERMS, "priority_weights", "slos", "time_scale_s"})
    weights = {t: f.get(t, float, 1.0 if t == "avg_jct" else 0.0, min_value=0.0) for t in OBJECTIVE_TERMS}
    if not any(weights.values()):
        raise f.error("avg_jct", "every weight is 0: the objective would rank every policy equal")
    pw = f.sub("priority_weights", {})
    pw.check_keys(set(PRIORITY_BY_NAME))
    priority_weights = tuple(pw.get(name, float, 1.0, min_value=0.0) for name in PRIORITY_NAMES.values())
    slos = []
    if "slos" in data:
        sf = f.sub("slos")
        for kname in sf.data:
            if kname not in JOB_KIND_BY_NAME:
                raise sf.error(kname, f"unknown job kind (known: {', '.join(JOB_KIND_BY_NAME)})")
            k = sf.sub(kname)
            k.check_keys({"start_within_s", "finish_slowdown"})
            slo = Slo(k.get("start_within_s", float, math.inf, min_value=0.0), k.get("finish_slowdown", float, math.inf, min_value=1.0))
            slos.append((int(JOB_KIND_BY_NAME[kname]), slo))
    return Objective(**weights, priority_weights=priority_weights, slos=tuple(sorted(slos)) if "slos" in data else DEFAULT_SLOS,
                     time_scale_s=f.get("time_scale_s", float, 3600.0, min_value=1.0))


def objective_config(value, name: str = "objective") -> Objective:
    """An `Objective` from None (the default), an Objective or a dict of its YAML form."""
    if value is None:
        return Objective()
    if isinstance(value, Objective):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict or Objective, got {type(value).__name__}")
    try:
        return objective_from_dict(value, "<objective>", name)
    except ConfigError as e:
        raise ValueError(str(e)) from None


# ---------------------------------------------------------------- the terms, from a simulator


def slo_miss_flags(sim, objective: Objective | None = None) -> np.ndarray:
    """(arrived,) bool: the arrived jobs whose SLO miss is certain now (see the module
    docstring). The one implementation of an SLO miss: metrics and rewards both call it."""
    obj = objective or Objective()
    n = sim.num_arrived
    kind, arrival, now = sim.kind[:n], sim.arrival[:n], sim.now
    started = sim.first_start[:n]
    ended = sim.end[:n]
    late_start = (np.where(np.isnan(started), now, started) - arrival) > obj.slo_start_s[kind]
    late_finish = (np.where(np.isnan(ended), now, ended) - arrival) > obj.slo_finish_slowdown[kind] * sim.work_total[:n]
    return late_start | late_finish


def weighted_jct_s(sim, objective: Objective) -> float:
    """Sum over arrived jobs of w(priority class) x time in the system so far (s): the
    priority-weighted JCT sum once every job has finished."""
    n = sim.num_arrived
    ended = sim.end[:n]
    in_system = np.where(np.isnan(ended), sim.now, ended) - sim.arrival[:n]
    return float((np.asarray(objective.priority_weights)[sim.priority[:n]] * in_system).sum())


def objective_sums(sim, objective: Objective) -> dict[str, float]:
    """Each term summed over the jobs so far (not yet divided by the job count): JCT-hours,
    weighted JCT-hours, misses, GPU-hours lost, kWh. Jobs still in the system count for their
    time so far."""
    return {
        "avg_jct": sim.jobs_in_system_s / 3600.0,
        "weighted_jct": weighted_jct_s(sim, objective) / 3600.0,
        "slo_misses": float(slo_miss_flags(sim, objective).sum()),
        "preemption_gpu_h": sim.preemption_gpu_s / 3600.0,
        "energy_kwh": sim.energy_j / 3.6e6,
    }


def weighted_total(sums: dict[str, float], objective: Objective) -> float:
    """`jobs x objective` from `objective_sums`: the weighted sum of the terms' sums."""
    return sum(getattr(objective, t) * sums[t] for t in OBJECTIVE_TERMS if getattr(objective, t))


def objective_total(sim, objective: Objective) -> float:
    """`jobs x objective` so far, from a simulator (what a lookahead's rollouts compare)."""
    return weighted_total(objective_sums(sim, objective), objective)


def objective_value(sim, objective: Objective) -> float:
    """The objective of an episode (per job of the workload), from a finished or truncated simulator."""
    return objective_total(sim, objective) / max(sim.num_jobs, 1)


class RewardTracker:
    """Turns the simulator's running integrals into per-step rewards: minus the increase of
    `jobs x objective` between two decisions, in units of `time_scale_s`."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self._last = 0.0

    def reset(self, sim) -> None:
        self._last = self._potential(sim)

    def _potential(self, sim) -> float:
        o = self.objective
        jobs_s = 0.0
        if o.avg_jct:
            jobs_s += o.avg_jct * sim.jobs_in_system_s
        if o.weighted_jct:
            jobs_s += o.weighted_jct * weighted_jct_s(sim, o)
        value = -jobs_s / o.time_scale_s
        hours = 3600.0 / o.time_scale_s  # the other terms are per job, in hours of JCT
        if o.slo_misses:
            value -= o.slo_misses * hours * float(slo_miss_flags(sim, o).sum())
        if o.preemption_gpu_h:
            value -= o.preemption_gpu_h * hours * sim.preemption_gpu_s / 3600.0
        if o.energy_kwh:
            value -= o.energy_kwh * hours * sim.energy_j / 3.6e6
        return value

    def step(self, sim) -> float:
        now = self._potential(sim)
        reward, self._last = now - self._last, now
        return reward
