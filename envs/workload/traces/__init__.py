"""Trace readers: real cluster traces turned into `list[Job]`.

Every reader returns `(jobs, report)`: jobs get ids 0..n-1 in arrival order (ties broken by
file line) and `arrival_s` relative to the first kept job; the `TraceReport` counts every row
that was read, kept or skipped (by reason, with the first file:line examples). Nothing is
dropped silently. A malformed row stops the read with a `ValueError` naming `file:line` and the
column when `strict=True`; otherwise (the default) it is skipped and counted as `malformed`.
What a trace lacks (kind, TP degree, memory, communication, priority, estimate) is filled by
seeded rules, so the same trace and seed give identical jobs.

Formats (each module documents its columns and rules)
-----------------------------------------------------
* **philly** (module `philly`): `timestamp,duration,num_gpus,gpu_time,cluster` (Microsoft
  Philly, see envs/workload/data/README.md); rows in any order; `cluster` (the virtual cluster) becomes
  `tenant`.
* **alibaba** (module `alibaba`): the openb pod list of Alibaba cluster-trace-gpu-v2023;
  CPU-only, fractional-GPU and censored pods, GPU-model constraints, qos -> priority and
  preemption.
* **csv** (module `csv_format`): the project's own format, one row per job, columns named as
  `Job` fields (`arrival_s`, `gpus`, `work_s` required).

Modules
-------
* `common`: `TraceReport`, `TraceRow`, `RowError` and the CSV row reading the formats share.
* `fill`: the seeded rules for what a trace lacks, and the jobs of parsed rows.
* `reader`: `read_trace` (dispatch on the format) and `read_philly`, `read_alibaba`,
  `read_csv_trace`.
* `replay_options`: `workload_from_trace`, the replay options of a workload YAML's `trace:`
  mapping (see its docstring for the keys).

The package imports envs.cluster.config, envs.jobs, envs.cluster.topology and envs.workload.capacity, never
envs.workload.generator (which imports it to replay trace workloads). The names below are re-exported so
that `from envs.workload.traces import X` is the one import path for callers.
"""

from __future__ import annotations

from envs.workload.traces.alibaba import ALIBABA_COLUMNS, ALIBABA_GPU_MODELS, ALIBABA_PHASES, ALIBABA_QOS, resolve_gpu_models
from envs.workload.traces.common import DATA_DIR, MAX_EXAMPLES, SHIPPED_TRACES, RowError, TraceReport, TraceRow
from envs.workload.traces.csv_format import CSV_OPTIONAL, CSV_REQUIRED
from envs.workload.traces.fill import (
    CHECKPOINT_BASE_S,
    CHECKPOINT_MAX_S,
    CHECKPOINT_PER_GPU_S,
    COMM_BY_KIND,
    COMM_JITTER,
    COMM_MAX,
    DEFAULT_ESTIMATE_NOISE_SIGMA,
    MEM_BAND_GB,
    RESTORE_PER_CHECKPOINT,
    TP_MIXED_SHARE,
    kind_for_gang,
)
from envs.workload.traces.philly import PHILLY_COLUMNS, parse_timestamp
from envs.workload.traces.reader import TRACE_FORMATS, read_alibaba, read_csv_trace, read_philly, read_trace
from envs.workload.traces.replay_options import ALIBABA_ONLY_KEYS, TRACE_KEYS, workload_from_trace

__all__ = [
    "ALIBABA_COLUMNS", "ALIBABA_GPU_MODELS", "ALIBABA_ONLY_KEYS", "ALIBABA_PHASES", "ALIBABA_QOS",
    "CHECKPOINT_BASE_S", "CHECKPOINT_MAX_S", "CHECKPOINT_PER_GPU_S", "COMM_BY_KIND", "COMM_JITTER", "COMM_MAX",
    "CSV_OPTIONAL", "CSV_REQUIRED", "DATA_DIR", "DEFAULT_ESTIMATE_NOISE_SIGMA", "MAX_EXAMPLES", "MEM_BAND_GB",
    "PHILLY_COLUMNS", "RESTORE_PER_CHECKPOINT", "SHIPPED_TRACES", "TP_MIXED_SHARE", "TRACE_FORMATS", "TRACE_KEYS",
    "RowError", "TraceReport", "TraceRow", "kind_for_gang", "parse_timestamp", "read_alibaba", "read_csv_trace",
    "read_philly", "read_trace", "resolve_gpu_models", "workload_from_trace",
]  # fmt: skip
