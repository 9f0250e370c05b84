"""Synthetic LLM workload generator and workload loading.

A workload is a list of `Job`s sorted by arrival. The generator draws each job's kind from a
mix, then its gang size, tensor-parallel degree, memory, work, communication profile and
priority from that kind's distributions; arrivals follow a Poisson process, optionally
modulated by bursts (a two-state Markov-modulated Poisson process), and are rescaled so the
offered load on the target cluster equals `target_load` exactly.

A workload YAML with a `trace:` mapping replays a trace instead (`make_workload` hands it to
`envs.workload.traces.workload_from_trace`). This module imports envs.workload.traces, never the reverse: the
capacity measures both use live in envs.workload.capacity (and are re-exported here).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from envs.workload.capacity import capacity_ref_gpus, job_fits_cluster, offered_load, segment_capacity  # noqa: F401  (two re-exported)
from envs.cluster.config import ConfigError, Fields, read_yaml, resolve_config
from envs.cluster.topology import Cluster
from envs.jobs import JOB_KIND_BY_NAME, PRIORITY_BY_NAME, Job, JobKind, segment_problem
from envs.workload.traces import workload_from_trace


@dataclass(frozen=True)
class KindProfile:
    """Distributions of one job kind. Durations in seconds."""

    share: float
    gpus: dict[int, float]  # gang size -> probability
    tp_max: int  # tp_degree = min(gpus, tp_max)
    work_median_s: float
    work_sigma: float  # lognormal spread of work
    work_min_s: float
    work_max_s: float
    comm_fraction: tuple[float, float]  # uniform range
    tp_comm_share: tuple[float, float]
    mem_per_gpu_gb: dict[float, float]  # memory -> probability
    mem_per_gpu_gb_tp: dict[float, float]  # the same for tensor-parallel jobs (bigger models)
    priority: dict[int, float]  # class -> probability
    preemptible: float  # probability
    checkpoint_s: float
    restore_s: float
    tenants: tuple[str, ...] = ("default",)
    segment_gpus: int = 0  # GPUs per segment for the kind's gangs larger than it (Job.segment_gpus); 0 none


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    num_jobs: int
    target_load: float
    kinds: dict[JobKind, KindProfile]
    estimate_noise: float = 0.5  # sigma of the multiplicative lognormal error of estimate_s
    durations_known: bool = False
    burst_multiplier: float = 1.0  # arrival rate during a burst / rate outside
    burst_fraction: float = 0.0  # share of time spent in bursts
    mean_burst_s: float = 3600.0
    trace: dict | None = None  # replay a trace instead of generating (see envs.workload.traces)
    source: str = "<inline>"
    extra: dict = field(default_factory=dict)


def _cdf(dist: dict) -> tuple[list, list[float]]:
    """(keys, cumulative probabilities as floats) of a distribution, the last exactly 1.0.
    `keys[bisect_right(cdf, rng.random())]` draws a key: the same draw as
    `rng.choice(len(keys), p=...)`, which inverts the same CDF with one `rng.random()`, without
    its argument checks (the spec was validated at load time)."""
    keys = list(dist)
    p = np.array([dist[k] for k in keys], dtype=float)
    cdf = (p / p.sum()).cumsum()
    cdf /= cdf[-1]
    return keys, cdf.tolist()


class _KindDraws:
    """One kind's distributions as CDFs, built once per workload instead of once per draw."""

    def __init__(self, p: KindProfile):
        self.p = p
        self.gpus = _cdf(p.gpus)
        self.mem = _cdf(p.mem_per_gpu_gb)
        self.mem_tp = _cdf(p.mem_per_gpu_gb_tp)
        self.priority = _cdf(p.priority)


def _arrival_times(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    """Unit-mean-rate arrival times with optional bursts; rescaled to the target load later."""
    n = spec.num_jobs
    if spec.burst_fraction <= 0 or spec.burst_multiplier == 1.0:
        return np.cumsum(rng.exponential(1.0, size=n))
    f, m = spec.burst_fraction, spec.burst_multiplier
    base_rate = 1.0 / ((1 - f) + f * m)  # overall mean rate stays 1
    mean_burst = spec.mean_burst_s / 3600.0  # durations in the same unit-rate time frame
    mean_calm = mean_burst * (1 - f) / f
    times, t, in_burst = [], 0.0, False
    phase_end = rng.exponential(mean_calm)
    while len(times) < n:
        rate = base_rate * (m if in_burst else 1.0)
        nxt = t + rng.exponential(1.0 / rate)
        if nxt >= phase_end:
            t, in_burst = phase_end, not in_burst
            phase_end = t + rng.exponential(mean_burst if in_burst else mean_calm)
            continue
        t = nxt
        times.append(t)
    return np.array(times)


def generate(spec: WorkloadSpec, cluster: Cluster, seed: int) -> list[Job]:
    """Draw a workload; the same spec, cluster and seed give the same jobs.

    Each job's draws come from one generator in a fixed order (the stream is the workload's
    identity), so the per-job loop stays scalar; it works on plain floats and precomputed CDFs."""
    rng = np.random.default_rng([seed, 0x5EED])
    kinds = list(spec.kinds)
    shares = np.array([spec.kinds[k].share for k in kinds])
    kind_idx = rng.choice(len(kinds), size=spec.num_jobs, p=shares / shares.sum()).tolist()
    draws = [_KindDraws(spec.kinds[k]) for k in kinds]
    random, lognormal, uniform = rng.random, rng.lognormal, rng.uniform
    bisect_right = bisect.bisect_right
    drafts = []
    for k in kind_idx:
        kind, d = kinds[k], draws[k]
        p = d.p
        keys, cdf = d.gpus
        gpus = int(keys[bisect_right(cdf, random())])
        # np.clip on a scalar, in floats: min(max(x, low), high).
        work = min(max(p.work_median_s * lognormal(0.0, p.work_sigma), p.work_min_s), p.work_max_s)
        noise = 1.0 if spec.durations_known else lognormal(0.0, spec.estimate_noise)
        tp = min(gpus, p.tp_max)
        keys, cdf = d.mem_tp if tp > 1 else d.mem
        mem = float(keys[bisect_right(cdf, random())])
        comm_fraction = uniform(*p.comm_fraction)
        tp_comm_share = uniform(*p.tp_comm_share) if tp > 1 else 0.0
        keys, cdf = d.priority
        priority = int(keys[bisect_right(cdf, random())])
        preemptible = random() < p.preemptible
        # integers(1) draws no bits (a range of one value), so one tenant needs no call.
        tenant = str(p.tenants[rng.integers(len(p.tenants))] if len(p.tenants) > 1 else p.tenants[0])
        extra = {"segment_gpus": p.segment_gpus} if 0 < p.segment_gpus < gpus else {}  # no draw: the stream is unchanged
        drafts.append(
            dict(
                kind=kind,
                gpus=gpus,
                tp_degree=tp,
                mem_per_gpu_gb=mem,
                work_s=round(work, 1),
                estimate_s=round(max(work * noise, 1.0), 1),
                comm_fraction=comm_fraction,
                tp_comm_share=tp_comm_share,
                priority=priority,
                preemptible=preemptible,
                checkpoint_s=p.checkpoint_s,
                restore_s=p.restore_s,
                tenant=tenant,
                **extra,
            )
        )
    unit_times = _arrival_times(spec, rng)
    # Scale arrivals so that offered_load(jobs) == target_load exactly.
    gpu_work = sum(d["gpus"] * d["work_s"] for d in drafts)
    n = spec.num_jobs
    unit_span = (unit_times[-1] - unit_times[0]) * n / max(n - 1, 1)
    scale = gpu_work / (spec.target_load * capacity_ref_gpus(cluster) * unit_span) if unit_span > 0 else 1.0
    arrivals = np.round((unit_times - unit_times[0]) * scale, 3).tolist()
    jobs = [Job(job_id=i, arrival_s=arrivals[i], **d) for i, d in enumerate(drafts)]
    eligible: dict[float, int] = {}  # GPUs with at least this much memory (job_fits_cluster), per memory size
    for j in jobs:
        j.validate()
        if j.mem_per_gpu_gb not in eligible:
            eligible[j.mem_per_gpu_gb] = int((cluster.gpu_memory_gb >= j.mem_per_gpu_gb).sum())
        if eligible[j.mem_per_gpu_gb] < j.gpus:
            raise ConfigError(
                spec.source,
                f"kinds.{j.kind.name.lower()}",
                f"a {j.gpus}-GPU job needing {j.mem_per_gpu_gb:g} GB per GPU can never fit cluster "
                f"'{cluster.name}' ({eligible[j.mem_per_gpu_gb]} eligible GPUs)",
            )
        if j.segment_gpus:
            key = (j.tp_degree, j.segment_gpus, j.mem_per_gpu_gb)
            if key not in eligible:
                eligible[key] = segment_capacity(cluster, *key)
            if eligible[key] < j.gpus:
                raise ConfigError(
                    spec.source, f"kinds.{j.kind.name.lower()}.segment_gpus",
                    f"a {j.gpus}-GPU job in segments of {j.segment_gpus} GPUs can never fit cluster '{cluster.name}' "
                    f"({eligible[key]} GPUs in whole segments inside its blocks)",
                )
    return jobs


# ---------------------------------------------------------------- YAML


def _range(f: Fields, key: str, default: tuple[float, float]) -> tuple[float, float]:
    v = f.get(key, (list, float, int), list(default))
    if isinstance(v, (int, float)):
        v = [float(v), float(v)]
    if len(v) != 2 or not all(isinstance(x, (int, float)) for x in v) or v[0] > v[1] or v[0] < 0:
        raise f.error(key, f"must be [low, high] with 0 <= low <= high, got {v!r}")
    return float(v[0]), float(v[1])


def _dist(f: Fields, key: str, default, cast, names: dict | None = None) -> dict:
    v = f.get(key, (dict, int, float, str), default)
    if not isinstance(v, dict):
        v = {v: 1.0}
    out = {}
    for k, p in v.items():
        if names is not None and isinstance(k, str):
            if k not in names:
                raise f.error(key, f"unknown value '{k}' (known: {', '.join(names)})")
            k = names[k]
        try:
            k = cast(k)
        except (TypeError, ValueError):
            raise f.error(key, f"bad value {k!r}") from None
        if not isinstance(p, (int, float)) or p < 0:
            raise f.error(key, f"probability of {k!r} must be a number >= 0, got {p!r}")
        out[k] = float(p)
    if not out or sum(out.values()) <= 0:
        raise f.error(key, "needs at least one value with a positive probability")
    return out


_KIND_KEYS = {
    "share", "gpus", "tp_max", "work_median_s", "work_sigma", "work_min_s", "work_max_s", "comm_fraction",
    "tp_comm_share", "mem_per_gpu_gb", "mem_per_gpu_gb_tp", "priority", "preemptible", "checkpoint_s", "restore_s", "tenants",
    "segment_gpus",
}


def _kind_profile(f: Fields) -> KindProfile:
    f.check_keys(_KIND_KEYS)
    gpus = _dist(f, "gpus", ..., int)
    if min(gpus) < 1:
        raise f.error("gpus", "gang sizes must be >= 1")
    work_min = f.get("work_min_s", float, 60.0, min_value=1.0)
    work_max = f.get("work_max_s", float, 7 * 86400.0, min_value=work_min)
    preemptible = f.get("preemptible", (bool, float), True)
    tp_max = f.get("tp_max", int, 1, min_value=1)
    segment = f.get("segment_gpus", int, 0, min_value=0)
    for g in sorted(gpus):
        if segment and g > segment:  # a gang within one segment is left alone, as Slurm's --segment does
            problem = segment_problem(g, min(g, tp_max), segment)
            if problem:
                raise f.error("segment_gpus", f"{segment} {problem}, for the kind's {g}-GPU gangs")
    return KindProfile(
        share=f.get("share", float, min_value=0.0),
        gpus=gpus,
        tp_max=tp_max,
        work_median_s=f.get("work_median_s", float, min_value=1.0),
        work_sigma=f.get("work_sigma", float, 0.8, min_value=0.0),
        work_min_s=work_min,
        work_max_s=work_max,
        comm_fraction=_range(f, "comm_fraction", (0.1, 0.3)),
        tp_comm_share=_range(f, "tp_comm_share", (0.5, 0.8)),
        mem_per_gpu_gb=_dist(f, "mem_per_gpu_gb", 40.0, float),
        mem_per_gpu_gb_tp=_dist(f, "mem_per_gpu_gb_tp", f.data.get("mem_per_gpu_gb", 40.0), float),
        priority=_dist(f, "priority", "normal", int, PRIORITY_BY_NAME),
        preemptible=float(preemptible),
        checkpoint_s=f.get("checkpoint_s", float, 30.0, min_value=0.0),
        restore_s=f.get("restore_s", float, 60.0, min_value=0.0),
        tenants=tuple(f.get("tenants", list, ["default"])),
        segment_gpus=segment,
    )


def workload_spec_from_dict(data: dict, source: str) -> WorkloadSpec:
    top = Fields(data, source, "")
    top.check_keys({"name", "description", "num_jobs", "target_load", "estimate_noise", "durations_known", "arrivals", "kinds", "trace"})
    name = top.get("name", str, Path(source).stem)
    if "trace" in data:
        if "kinds" in data:
            raise top.error("kinds", "a workload either replays a 'trace' or generates from 'kinds', not both")
        top.sub("trace")
        return WorkloadSpec(name=name, num_jobs=0, target_load=0.0, kinds={}, trace=data["trace"], source=source)
    arrivals = top.sub("arrivals", {})
    arrivals.check_keys({"process", "burst_multiplier", "burst_fraction", "mean_burst_s"})
    arrivals.get("process", str, "poisson", choices=("poisson",))
    kinds_f = top.sub("kinds")
    kinds = {}
    for kname in kinds_f.data:
        if kname not in JOB_KIND_BY_NAME:
            raise kinds_f.error(kname, f"unknown job kind (known: {', '.join(JOB_KIND_BY_NAME)})")
        kinds[JOB_KIND_BY_NAME[kname]] = _kind_profile(kinds_f.sub(kname))
    if not kinds or sum(k.share for k in kinds.values()) <= 0:
        raise top.error("kinds", "needs at least one kind with share > 0")
    burst_fraction = arrivals.get("burst_fraction", float, 0.0, min_value=0.0)
    if burst_fraction >= 1.0:
        raise arrivals.error("burst_fraction", "must be < 1")
    target_load = top.get("target_load", float, min_value=1e-3)
    return WorkloadSpec(
        name=name,
        num_jobs=top.get("num_jobs", int, min_value=1),
        target_load=target_load,
        kinds=kinds,
        estimate_noise=top.get("estimate_noise", float, 0.5, min_value=0.0),
        durations_known=top.get("durations_known", bool, False),
        burst_multiplier=arrivals.get("burst_multiplier", float, 1.0, min_value=1.0),
        burst_fraction=burst_fraction,
        mean_burst_s=arrivals.get("mean_burst_s", float, 3600.0, min_value=1.0),
        source=source,
    )


def check_workload_fits(spec: WorkloadSpec, cluster: Cluster) -> None:
    """Fail at load time, naming the file and field, when some job the spec can draw could
    never run on the cluster."""
    for kind, p in spec.kinds.items():
        name = kind.name.lower()
        for mem in {**p.mem_per_gpu_gb, **p.mem_per_gpu_gb_tp}:
            eligible = int((cluster.gpu_memory_gb >= mem).sum())
            too_big = [g for g in p.gpus if g > eligible]
            if eligible == 0:
                raise ConfigError(spec.source, f"kinds.{name}.mem_per_gpu_gb", f"no GPU of cluster '{cluster.name}' has {mem:g} GB")
            if too_big:
                raise ConfigError(
                    spec.source, f"kinds.{name}.gpus",
                    f"a {max(too_big)}-GPU job needing {mem:g} GB per GPU can never fit cluster '{cluster.name}' "
                    f"({eligible} GPUs with enough memory)",
                )
            for g in sorted(p.gpus):
                if 0 < p.segment_gpus < g and g <= eligible:
                    room = segment_capacity(cluster, min(g, p.tp_max), p.segment_gpus, mem)
                    if room < g:
                        raise ConfigError(
                            spec.source, f"kinds.{name}.segment_gpus",
                            f"a {g}-GPU job in segments of {p.segment_gpus} GPUs needing {mem:g} GB per GPU can never fit "
                            f"cluster '{cluster.name}' ({room} GPUs in whole segments inside its blocks)",
                        )


def load_workload_spec(name_or_path: str | Path | WorkloadSpec) -> WorkloadSpec:
    if isinstance(name_or_path, WorkloadSpec):
        return name_or_path
    path = resolve_config(name_or_path, "workloads")
    return workload_spec_from_dict(read_yaml(path), str(path))


def make_workload(spec: WorkloadSpec, cluster: Cluster, seed: int, num_jobs: int | None = None) -> list[Job]:
    """The workload of one episode: generated, or replayed from a trace, for this seed."""
    if num_jobs is not None and spec.trace is None:
        spec = replace(spec, num_jobs=num_jobs)
    if spec.trace is not None:
        trace = dict(spec.trace)
        if num_jobs is not None:
            trace["max_jobs"] = num_jobs
        jobs, _report = workload_from_trace(trace, spec.source, cluster, seed)
        return jobs
    return generate(spec, cluster, seed)
