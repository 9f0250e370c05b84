"""What a trace lacks, filled by seeded rules; the jobs of a trace's parsed rows.

`build_jobs` turns rows sorted by (arrival, line) into jobs with ids 0..n-1 in that order and
`arrival_s` relative to the first kept job. The rules are seeded:
`numpy.random.default_rng(seed)` draws one value per row per rule in arrival order, over every
parsed row (kept or later filtered), so the same trace and seed give identical jobs. A field the
trace states (`TraceRow.given`: alibaba qos and GPU model, csv columns) wins over its rule.

* work_s = trace runtime x `work_scale` (default 1.0: the trace's runtimes are taken as
  runtimes on the reference GPU; Philly ran on P100/P40-class GPUs, its configs use 0.2 to
  state them as V100-equivalent, speed 0.2).
* kind from gang size: 1 GPU -> batch, 2-8 -> finetune, more than 8 -> pretrain.
* tp_degree = gcd(gpus, 8): one NVLink domain of up to 8 GPUs that divides the gang.
* comm_fraction: 0 for one GPU; else by kind (batch 0.05, inference 0.10, finetune 0.15,
  pretrain 0.30) plus a uniform draw in [-0.05, 0.05], clipped to [0, 0.9].
* tp_comm_share: 0 when tp_degree is 1, 1 when the gang is one TP group, else 0.7.
* mem_per_gpu_gb: uniform draw, rounded to 0.5 GB, in a band by kind (batch 2-12,
  inference 4-16, finetune 6-16, pretrain 10-16); at most 16 GB so every catalogue type fits.
* priority normal and preemptible, unless the trace says otherwise (alibaba qos, csv).
* estimate_s = work_s x lognormal(0, sigma) (median-unbiased); sigma = `estimate_noise_sigma`
  (default 0.5); 0 gives known durations (estimate_s == work_s).
* checkpoint_s = min(10 + 1.5 x gpus, 60); restore_s = 2 x checkpoint_s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from envs.jobs import PRIORITY_NORMAL, Job, JobKind
from envs.workload.traces.common import TraceReport, TraceRow

DEFAULT_ESTIMATE_NOISE_SIGMA = 0.5
COMM_BY_KIND = {JobKind.BATCH: 0.05, JobKind.INFERENCE: 0.10, JobKind.FINETUNE: 0.15, JobKind.PRETRAIN: 0.30}
COMM_JITTER = 0.05
COMM_MAX = 0.9
MEM_BAND_GB = {JobKind.BATCH: (2.0, 12.0), JobKind.INFERENCE: (4.0, 16.0), JobKind.FINETUNE: (6.0, 16.0), JobKind.PRETRAIN: (10.0, 16.0)}
TP_MIXED_SHARE = 0.7  # TP share of communication for a gang of several TP groups
CHECKPOINT_BASE_S, CHECKPOINT_PER_GPU_S, CHECKPOINT_MAX_S = 10.0, 1.5, 60.0
RESTORE_PER_CHECKPOINT = 2.0


def kind_for_gang(gpus: int) -> JobKind:
    """The gang-size rule for a trace without job kinds."""
    if gpus == 1:
        return JobKind.BATCH
    return JobKind.FINETUNE if gpus <= 8 else JobKind.PRETRAIN


class _Draws:
    """One seeded draw per row and rule, in arrival order over the whole parsed trace."""

    def __init__(self, n: int, seed: int, estimate_noise_sigma: float):
        rng = np.random.default_rng(seed)
        self.comm_jitter = rng.uniform(-COMM_JITTER, COMM_JITTER, n).tolist()
        self.mem_u = rng.random(n).tolist()
        self.noise = rng.lognormal(0.0, estimate_noise_sigma, n).tolist() if estimate_noise_sigma > 0 else [1.0] * n


def _fill_job(r: TraceRow, i: int, draws: _Draws, job_id: int, t0_s: float, work_scale: float) -> Job:
    """The job of row `r` (row `i` in arrival order), filling what the trace lacks."""
    g = r.given
    gpus = r.gpus
    kind = g.get("kind", kind_for_gang(gpus))
    tp = g.get("tp_degree", math.gcd(gpus, 8))
    work_s = r.duration_s * work_scale
    if "comm_fraction" in g:
        comm = g["comm_fraction"]
    else:
        comm = 0.0 if gpus == 1 else min(max(COMM_BY_KIND[kind] + draws.comm_jitter[i], 0.0), COMM_MAX)
    if "tp_comm_share" in g:
        tp_share = g["tp_comm_share"]
    else:
        tp_share = 0.0 if tp == 1 else (1.0 if tp == gpus else TP_MIXED_SHARE)
    if "mem_per_gpu_gb" in g:
        mem = g["mem_per_gpu_gb"]
    else:
        lo, hi = MEM_BAND_GB[kind]
        mem = round((lo + (hi - lo) * draws.mem_u[i]) * 2) / 2
    checkpoint_s = g.get("checkpoint_s", min(CHECKPOINT_BASE_S + CHECKPOINT_PER_GPU_S * gpus, CHECKPOINT_MAX_S))
    return Job(
        job_id=job_id,
        arrival_s=r.arrival_s - t0_s,
        kind=kind,
        gpus=gpus,
        tp_degree=tp,
        mem_per_gpu_gb=mem,
        work_s=work_s,
        estimate_s=g.get("estimate_s", work_s * draws.noise[i]),
        comm_fraction=comm,
        tp_comm_share=tp_share,
        priority=g.get("priority", PRIORITY_NORMAL),
        preemptible=g.get("preemptible", True),
        checkpoint_s=checkpoint_s,
        restore_s=g.get("restore_s", RESTORE_PER_CHECKPOINT * checkpoint_s),
        tenant=r.tenant,
        segment_gpus=g.get("segment_gpus", 0),
    )


def build_jobs(
    rows: list[TraceRow],
    path: Path,
    report: TraceReport,
    *,
    strict: bool,
    seed: int,
    estimate_noise_sigma: float,
    work_scale: float,
    row_filter: Callable[[TraceRow], str | None] | None = None,
    job_filter: Callable[[Job, str], str | None] | None = None,
    max_jobs: int | None = None,
) -> list[Job]:
    """Jobs of the rows that pass, with ids 0..n-1 and arrivals relative to the first one.

    `row_filter(row)` and `job_filter(job, "file:line")` return a skip reason or None. A job
    failing `Job.validate()` (e.g. a csv tp_degree that does not divide gpus) is malformed.
    """
    draws = _Draws(len(rows), seed, estimate_noise_sigma)
    jobs: list[Job] = []
    t0_s: float | None = None  # arrival of the first kept job
    for i, r in enumerate(rows):
        reason = row_filter(r) if row_filter is not None else None
        if reason is None and max_jobs is not None and len(jobs) >= max_jobs:
            reason = "over_max_jobs"
        if reason is not None:
            report.skip(reason, f"{path}:{r.line}")
            continue
        job = _fill_job(r, i, draws, len(jobs), r.arrival_s if t0_s is None else t0_s, work_scale)
        try:
            job.validate()
        except ValueError as e:
            message = str(e).split(": ", 1)[-1]
            if strict:
                raise ValueError(f"{path}:{r.line}: {message}") from None
            report.skip("malformed", f"{path}:{r.line}", message)
            continue
        reason = job_filter(job, f"{path}:{r.line}") if job_filter is not None else None
        if reason is not None:
            report.skip(reason, f"{path}:{r.line}")
            continue
        if r.censored:
            report.censored_job_ids.append(job.job_id)
        if t0_s is None:
            t0_s = r.arrival_s
        jobs.append(job)
    report.kept = len(jobs)
    return jobs
