"""A workload YAML's `trace:` mapping: the options of replaying a trace on a cluster.

`workload_from_trace` reads the trace (envs.workload.traces.reader), filters and caps its jobs, drops
those that can never fit the cluster and rescales arrivals to a target load (both measured by
envs.workload.capacity); its docstring lists the keys. Errors are `ConfigError`s naming the YAML file
and the `trace.` field. `envs.workload.generator.make_workload` calls it for a trace workload; this
package never imports envs.workload.generator.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from envs.cluster.config import ConfigError, Fields
from envs.cluster.topology import GPU_CATALOGUE, Cluster
from envs.jobs import Job
from envs.workload.capacity import job_fits_cluster, offered_load
from envs.workload.traces.common import SHIPPED_TRACES, TraceReport, TraceRow
from envs.workload.traces.fill import DEFAULT_ESTIMATE_NOISE_SIGMA, build_jobs
from envs.workload.traces.philly import parse_timestamp
from envs.workload.traces.reader import TRACE_FORMATS, parse_trace

TRACE_KEYS = {
    "format", "path", "window", "tenants", "target_load", "max_jobs", "unfittable", "estimate_noise",
    "work_scale", "strict", "seed_offset", "fractional", "censored", "gpu_models",
}  # fmt: skip
ALIBABA_ONLY_KEYS = ("fractional", "censored", "gpu_models")


def _window_bound(f: Fields, key: str, fmt: str, trace_start_s: float) -> float | None:
    """A window bound as absolute trace time: seconds from trace start, or a timestamp (philly)."""
    value = f.get(key, (int, float, str), None)
    if value is None:
        return None
    if isinstance(value, str):
        if fmt != "philly":
            raise f.error(key, f"timestamps apply to the philly format; give seconds from trace start, got {value!r}")
        try:
            return parse_timestamp(value)
        except ValueError:
            raise f.error(key, f"expected seconds or 'YYYY-MM-DD HH:MM:SS', got {value!r}") from None
    if value < 0:
        raise f.error(key, f"must be >= 0, got {value!r}")
    return trace_start_s + float(value)


def _trace_path(f: Fields, source: str) -> Path:
    value = f.get("path", str)
    if value in SHIPPED_TRACES:
        return SHIPPED_TRACES[value]
    path = Path(value) if Path(value).is_absolute() else Path(source).parent / value
    if not path.is_file():
        raise f.error("path", f"no such file '{path}' (shipped traces: {', '.join(SHIPPED_TRACES)})")
    return path


def workload_from_trace(spec: dict, source: str, cluster: Cluster, seed: int) -> tuple[list[Job], TraceReport]:
    """Jobs of a workload YAML's `trace:` mapping, replayed on `cluster`.

    Keys (all but format and path optional):
      format: philly | alibaba | csv
      path: a shipped trace name (`philly`) or a file path relative to the YAML's folder
      window: {start, end}: keep arrivals in [start, end); seconds from the trace's first
        arrival, or (philly) timestamps 'YYYY-MM-DD HH:MM:SS'
      tenants: list of tenants to keep (philly: virtual cluster ids)
      target_load: rescale arrival times so that envs.workload.capacity.offered_load on `cluster`
        equals it (> 0); the factor is in `report.arrival_scale`
      max_jobs: keep the first N jobs (in arrival order) after the filters above
      unfittable: drop (default; counted) | error: jobs that no node set of `cluster` can host
      estimate_noise: lognormal sigma of estimate_s (default 0.5; 0 = known durations)
      work_scale: trace runtime -> work_s factor (default 1.0)
      strict: stop at the first malformed row (default false: skip and count)
      seed_offset: added to `seed` for the fill rules (default 0)
      fractional: round_up | drop; censored: keep | drop; gpu_models: {model: GPU type}
        (alibaba only)
    Order: parse, fill (seeded over the whole file), window, tenants, unfittable, max_jobs,
    arrivals rebased to the first kept job, target_load. Raises ConfigError naming the file and
    field.
    """
    f = Fields(spec, source, "trace")
    f.check_keys(TRACE_KEYS)
    fmt = f.get("format", str, choices=TRACE_FORMATS)
    if fmt != "alibaba":
        for key in ALIBABA_ONLY_KEYS:
            if key in spec:
                raise f.error(key, f"applies to the alibaba format only (format is {fmt})")
    path = _trace_path(f, source)
    strict = f.get("strict", bool, False)
    estimate_noise = f.get("estimate_noise", float, DEFAULT_ESTIMATE_NOISE_SIGMA, min_value=0.0)
    work_scale = f.get("work_scale", float, 1.0, min_value=1e-9)
    seed_offset = f.get("seed_offset", int, 0)
    unfittable = f.get("unfittable", str, "drop", choices=("drop", "error"))
    max_jobs = f.get("max_jobs", int, None, min_value=1)
    target_load = f.get("target_load", float, None, min_value=1e-9)
    tenants = f.get("tenants", list, None)
    if tenants is not None and not all(isinstance(t, str) for t in tenants):
        raise f.error("tenants", f"must be a list of strings, got {tenants!r}")
    gpu_models = f.get("gpu_models", dict, None)
    if gpu_models is not None:
        bad = [m for m, t in gpu_models.items() if not isinstance(t, str) or t not in GPU_CATALOGUE]
        if bad:
            raise f.sub("gpu_models").error(str(bad[0]), f"unknown GPU type {gpu_models[bad[0]]!r} (known: {', '.join(GPU_CATALOGUE)})")
    alibaba = {
        "fractional": f.get("fractional", str, "round_up", choices=("round_up", "drop")),
        "censored": f.get("censored", str, "keep", choices=("keep", "drop")),
        "gpu_models": gpu_models,
    }
    window = f.sub("window", {})
    window.check_keys({"start", "end"})

    report = TraceReport(str(path))
    try:
        rows = parse_trace(fmt, path, report, strict, alibaba)
    except ValueError as e:
        raise f.error("path", str(e)) from None
    trace_start_s = rows[0].arrival_s if rows else 0.0
    start_s = _window_bound(window, "start", fmt, trace_start_s)
    end_s = _window_bound(window, "end", fmt, trace_start_s)
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise window.error("end", "must be after start")
    wanted = set(tenants) if tenants is not None else None

    def row_filter(row: TraceRow) -> str | None:
        if (start_s is not None and row.arrival_s < start_s) or (end_s is not None and row.arrival_s >= end_s):
            return "outside_window"
        if wanted is not None and row.tenant not in wanted:
            return "tenant_filtered"
        return None

    def job_filter(job: Job, where: str) -> str | None:
        if job_fits_cluster(job, cluster):
            return None
        if unfittable == "error":
            raise f.error("unfittable", f"{where}: a job of {job.gpus} GPUs of >= {job.mem_per_gpu_gb} GB can never fit cluster '{cluster.name}'")
        return "unfittable"

    try:
        jobs = build_jobs(
            rows, path, report, strict=strict, seed=seed + seed_offset, estimate_noise_sigma=estimate_noise,
            work_scale=work_scale, row_filter=row_filter, job_filter=job_filter, max_jobs=max_jobs,
        )  # fmt: skip
    except ConfigError:
        raise
    except ValueError as e:
        raise f.error("path", str(e)) from None
    if not jobs:
        raise f.error("path", f"no job left after the filters ({report.summary()})")

    if target_load is not None:
        load = offered_load(jobs, cluster)
        if not math.isfinite(load) or load <= 0:
            raise f.error("target_load", f"cannot rescale: offered load of the kept jobs is {load} (one arrival time?)")
        report.arrival_scale = load / target_load
        jobs = [dataclasses.replace(j, arrival_s=j.arrival_s * report.arrival_scale) for j in jobs]
    return jobs, report
