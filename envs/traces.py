"""Trace readers: real cluster traces turned into `list[Job]`.

Every reader returns `(jobs, report)`: jobs get ids 0..n-1 in arrival order (ties broken by
file line) and `arrival_s` relative to the first kept job; the `TraceReport` counts every row
that was read, kept or skipped (by reason, with the first file:line examples). Nothing is
dropped silently. A malformed row stops the read with a `ValueError` naming `file:line` and the
column when `strict=True`; otherwise (the default) it is skipped and counted as `malformed`.

Formats
-------
* **philly**: `timestamp,duration,num_gpus,gpu_time,cluster` (Microsoft Philly, see
  envs/data/README.md); rows in any order; `cluster` (the virtual cluster) becomes `tenant`.
* **alibaba**: the openb pod list of Alibaba cluster-trace-gpu-v2023,
  `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time` (integer seconds). Rules specific to it:
    - `num_gpu == 0`: CPU-only pod, skipped and counted as `cpu_only`.
    - `gpu_milli < 1000` (a GPU-sharing pod): `fractional="round_up"` (default) gives it
      `num_gpu` whole GPUs and counts it as `fractional_rounded_up`; `fractional="drop"`
      skips it, counted as `fractional`.
    - runtime = `deletion_time - scheduled_time`; a pod never scheduled (empty
      `scheduled_time`) uses `deletion_time - creation_time`, the only lifetime the trace
      gives. Runtime <= 0 is skipped as `non_positive_duration`. Arrival = `creation_time`.
    - censored pods (still alive at trace end: `deletion_time` equal to the largest deletion
      time of the file) keep their observed runtime as a lower bound (`censored="keep"`,
      default; their final job ids are listed in `report.censored_job_ids`) or are skipped
      (`censored="drop"`); counted as `censored` either way.
    - `gpu_spec`: empty, or model names joined by `|`, mapped to catalogue GPU types by
      `ALIBABA_GPU_MODELS` updated with the caller's `gpu_models`; an unknown model is a
      ValueError naming file:line and how to map it. A `Job` carries no type whitelist, so the
      constraint becomes `mem_per_gpu_gb` = the smallest memory among the listed types.
    - `qos` -> (priority, preemptible, kind): LS -> (high, no, inference); Guaranteed ->
      (normal, no, by gang size); Burstable -> (normal, yes, by gang size); BE -> (low, yes,
      batch). `pod_phase` (Running/Succeeded/Failed/Pending) is validated, not filtered.
      The tenant is "default" (the trace has none).
* **csv**: the project's own format, one row per job, columns named as `Job` fields.
  Required: `arrival_s`, `gpus`, `work_s`. Optional (empty cell or absent column = the rule
  below): `kind` (pretrain|finetune|inference|batch), `tp_degree`, `mem_per_gpu_gb`,
  `estimate_s`, `comm_fraction`, `tp_comm_share`, `priority` (low|normal|high or 0|1|2),
  `preemptible` (true|false|1|0), `checkpoint_s`, `restore_s`, `tenant` (default "default"),
  `job_id` (accepted and ignored: ids are re-assigned in arrival order). Other columns are an
  error. Each row must pass `Job.validate()`.

Rules for what a trace lacks (seeded: `numpy.random.default_rng(seed)` draws one value per row
per rule in arrival order, so the same trace and seed give identical jobs)
-------------------------------------------------------------------------------------------
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

`workload_from_trace` applies the replay options of a workload YAML's `trace:` mapping (see its
docstring for the keys).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import ConfigError, Fields
from envs.jobs import JOB_KIND_BY_NAME, PRIORITY_BY_NAME, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, Job, JobKind
from envs.topology import GPU_CATALOGUE, Cluster
from envs.workload import job_fits_cluster, offered_load

DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED_TRACES = {"philly": DATA_DIR / "philly.csv.gz"}
TRACE_FORMATS = ("philly", "alibaba", "csv")
DEFAULT_ESTIMATE_NOISE_SIGMA = 0.5
MAX_EXAMPLES = 3  # file:line examples kept per skip reason

# Alibaba openb GPU model codes -> catalogue types. G1/G2/G3 are undisclosed internal codes
# (trace README); the mapping below is an assumption by node size (G3 nodes are the largest)
# and is meant to be overridden with `gpu_models` when better information is available.
ALIBABA_GPU_MODELS = {
    "P100": "P100-16GB",
    "T4": "T4-16GB",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "A10": "A10-24GB",
    "G1": "A10-24GB",
    "G2": "A100-40GB",
    "G3": "A100-80GB",
}

COMM_BY_KIND = {JobKind.BATCH: 0.05, JobKind.INFERENCE: 0.10, JobKind.FINETUNE: 0.15, JobKind.PRETRAIN: 0.30}
COMM_JITTER = 0.05
COMM_MAX = 0.9
MEM_BAND_GB = {JobKind.BATCH: (2.0, 12.0), JobKind.INFERENCE: (4.0, 16.0), JobKind.FINETUNE: (6.0, 16.0), JobKind.PRETRAIN: (10.0, 16.0)}
TP_MIXED_SHARE = 0.7  # TP share of communication for a gang of several TP groups
CHECKPOINT_BASE_S, CHECKPOINT_PER_GPU_S, CHECKPOINT_MAX_S = 10.0, 1.5, 60.0
RESTORE_PER_CHECKPOINT = 2.0

# qos -> (priority, preemptible, kind or None for the gang-size rule)
ALIBABA_QOS = {
    "LS": (PRIORITY_HIGH, False, JobKind.INFERENCE),
    "Guaranteed": (PRIORITY_NORMAL, False, None),
    "Burstable": (PRIORITY_NORMAL, True, None),
    "BE": (PRIORITY_LOW, True, JobKind.BATCH),
}
ALIBABA_PHASES = ("Running", "Succeeded", "Failed", "Pending")

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
ALIBABA_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)  # fmt: skip
CSV_REQUIRED = ("arrival_s", "gpus", "work_s")
CSV_OPTIONAL = (
    "job_id", "kind", "tp_degree", "mem_per_gpu_gb", "estimate_s", "comm_fraction", "tp_comm_share",
    "priority", "preemptible", "checkpoint_s", "restore_s", "tenant",
)  # fmt: skip


@dataclass
class TraceReport:
    """What a read kept and skipped; `skipped` and `counted` map reason -> rows."""

    source: str
    rows_read: int = 0
    kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    counted: dict[str, int] = field(default_factory=dict)  # kept rows that a rule altered
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> first "file:line: why"
    censored_job_ids: list[int] = field(default_factory=list)
    arrival_scale: float = 1.0  # factor applied to arrival times by target_load

    def skip(self, reason: str, where: str, why: str = "") -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self._example(reason, where, why)

    def count(self, reason: str, where: str) -> None:
        self.counted[reason] = self.counted.get(reason, 0) + 1
        self._example(reason, where, "")

    def _example(self, reason: str, where: str, why: str) -> None:
        examples = self.examples.setdefault(reason, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(f"{where}: {why}" if why else where)

    def summary(self) -> str:
        parts = [f"{self.source}: {self.rows_read} rows read, {self.kept} jobs kept"]
        parts += [f"skipped {n} {r} (e.g. {'; '.join(self.examples.get(r, []))})" for r, n in sorted(self.skipped.items())]
        parts += [f"{n} {r}" for r, n in sorted(self.counted.items())]
        if self.arrival_scale != 1.0:
            parts.append(f"arrivals scaled by {self.arrival_scale:.4g}")
        return "; ".join(parts)


@dataclass(slots=True)
class TraceRow:
    """One usable trace row before the fill rules: absolute arrival on the trace's clock."""

    line: int
    arrival_s: float
    gpus: int
    duration_s: float
    tenant: str = "default"
    censored: bool = False
    given: dict[str, Any] = field(default_factory=dict)  # Job fields the trace states


class RowError(ValueError):
    """A malformed row; the reader adds file and line."""

    def __init__(self, column: str, message: str):
        self.column = column
        super().__init__(f"column '{column}': {message}")


_WIDTH = "\0width"  # key that `_rows` adds to a row whose cell count differs from the header's


@contextmanager
def _open_text(path: Path) -> Iterator[io.TextIOBase]:
    try:
        f = gzip.open(path, "rt", newline="") if path.suffix == ".gz" else open(path, newline="")
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        yield f


def _rows(path: Path, required: tuple[str, ...], allowed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file whose header must hold `required` and only `allowed`."""
    with _open_text(path) as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise ValueError(f"{path}:1: missing column(s) {', '.join(missing)} (header: {','.join(header)})")
        unknown = [c for c in header if c not in allowed]
        if unknown:
            raise ValueError(f"{path}:1: unknown column '{unknown[0]}' (allowed: {', '.join(allowed)})")
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            row = dict(zip(header, (c.strip() for c in cells)))
            if len(cells) != len(header):
                row[_WIDTH] = f"{len(cells)} cells, the header has {len(header)}"
            yield reader.line_num, row


def _check_width(row: dict[str, str]) -> None:
    if _WIDTH in row:
        raise RowError("(row)", row[_WIDTH])


def _number(row: dict[str, str], column: str, kind: type = float, *, min_value: float | None = None) -> Any:
    text = row.get(column, "")
    try:
        value = kind(text)
    except ValueError:
        raise RowError(column, f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if not math.isfinite(value):
        raise RowError(column, f"expected a finite number, got {text!r}")
    if min_value is not None and value < min_value:
        raise RowError(column, f"must be >= {min_value}, got {text!r}")
    return value


def parse_timestamp(text: str) -> float:
    """`YYYY-MM-DD HH:MM:SS` (UTC) -> seconds since the epoch."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def _read(path: Path, report: TraceReport, strict: bool, parse_row, rows_iter) -> list[TraceRow]:
    """Run `parse_row(line, row)` over the rows; malformed rows stop (strict) or are counted."""
    out: list[TraceRow] = []
    for line, row in rows_iter:
        report.rows_read += 1
        try:
            parsed = parse_row(line, row)
        except RowError as e:
            if strict:
                raise ValueError(f"{path}:{line}: {e}") from None
            report.skip("malformed", f"{path}:{line}", str(e))
            continue
        if parsed is not None:
            out.append(parsed)
    return out


def _parse_philly(path: Path, report: TraceReport, strict: bool) -> list[TraceRow]:
    def parse_row(line: int, row: dict[str, str]) -> TraceRow | None:
        _check_width(row)
        try:
            arrival_s = parse_timestamp(row["timestamp"])
        except ValueError:
            raise RowError("timestamp", f"expected YYYY-MM-DD HH:MM:SS, got {row['timestamp']!r}") from None
        duration_s = _number(row, "duration")
        gpus = _number(row, "num_gpus", int, min_value=1)
        if not row["cluster"]:
            raise RowError("cluster", "empty")
        if duration_s <= 0:
            report.skip("non_positive_duration", f"{path}:{line}", f"duration {duration_s}")
            return None
        return TraceRow(line, arrival_s, gpus, duration_s, tenant=row["cluster"])

    return _read(path, report, strict, parse_row, _rows(path, PHILLY_COLUMNS, PHILLY_COLUMNS))


def resolve_gpu_models(gpu_models: dict[str, str] | None) -> dict[str, str]:
    """The default Alibaba model mapping updated with `gpu_models`; targets must be catalogue types."""
    mapping = {**ALIBABA_GPU_MODELS, **(gpu_models or {})}
    for model, gpu_type in mapping.items():
        if gpu_type not in GPU_CATALOGUE:
            raise ValueError(f"GPU model '{model}' mapped to unknown GPU type '{gpu_type}' (known: {', '.join(GPU_CATALOGUE)})")
    return mapping


def _parse_alibaba(
    path: Path, report: TraceReport, strict: bool, fractional: str, censored: str, gpu_models: dict[str, str] | None
) -> list[TraceRow]:
    mapping = resolve_gpu_models(gpu_models)
    deletion_s: list[int] = []  # parallel to the kept rows, for the censoring rule

    def parse_row(line: int, row: dict[str, str]) -> TraceRow | None:
        _check_width(row)
        where = f"{path}:{line}"
        num_gpu = _number(row, "num_gpu", int, min_value=0)
        gpu_milli = _number(row, "gpu_milli", int, min_value=0)
        if gpu_milli > 1000:
            raise RowError("gpu_milli", f"must be <= 1000, got {gpu_milli}")
        qos = row["qos"]
        if qos not in ALIBABA_QOS:
            raise RowError("qos", f"expected one of {', '.join(ALIBABA_QOS)}, got {qos!r}")
        if row["pod_phase"] not in ALIBABA_PHASES:
            raise RowError("pod_phase", f"expected one of {', '.join(ALIBABA_PHASES)}, got {row['pod_phase']!r}")
        creation_s = _number(row, "creation_time", int, min_value=0)
        deletion = _number(row, "deletion_time", int, min_value=0)
        scheduled_s = _number(row, "scheduled_time", int, min_value=0) if row["scheduled_time"] else None
        if num_gpu == 0:
            report.skip("cpu_only", where)
            return None
        if gpu_milli == 0:
            raise RowError("gpu_milli", "0 for a pod with num_gpu >= 1")
        models = [m.strip() for m in row["gpu_spec"].split("|") if m.strip()]
        unknown = [m for m in models if m not in mapping]
        if unknown:
            raise ValueError(
                f"{where}: column 'gpu_spec': unknown GPU model '{unknown[0]}' "
                f"(known: {', '.join(sorted(mapping))}; map it with gpu_models)"
            )
        duration_s = deletion - (scheduled_s if scheduled_s is not None else creation_s)
        if duration_s <= 0:
            report.skip("non_positive_duration", where, f"runtime {duration_s} s")
            return None
        if gpu_milli < 1000:
            if fractional == "drop":
                report.skip("fractional", where, f"gpu_milli {gpu_milli}")
                return None
            report.count("fractional_rounded_up", where)
        priority, preemptible, kind = ALIBABA_QOS[qos]
        given: dict[str, Any] = {"priority": priority, "preemptible": preemptible}
        if kind is not None:
            given["kind"] = kind
        if models:
            given["mem_per_gpu_gb"] = float(min(GPU_CATALOGUE[mapping[m]].memory_gb for m in models))
        deletion_s.append(deletion)
        return TraceRow(line, float(creation_s), num_gpu, float(duration_s), given=given)

    rows = _read(path, report, strict, parse_row, _rows(path, ALIBABA_COLUMNS, ALIBABA_COLUMNS))
    trace_end_s = max(deletion_s, default=0)
    kept: list[TraceRow] = []
    for row, deletion in zip(rows, deletion_s):
        if deletion >= trace_end_s:
            row.censored = True
            if censored == "drop":
                report.skip("censored", f"{path}:{row.line}", "alive at trace end")
                continue
            report.count("censored", f"{path}:{row.line}")
        kept.append(row)
    return kept


def _parse_bool(row: dict[str, str], column: str) -> bool:
    text = row[column].lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise RowError(column, f"expected true or false, got {row[column]!r}")


def _parse_csv(path: Path, report: TraceReport, strict: bool) -> list[TraceRow]:
    columns = CSV_REQUIRED + CSV_OPTIONAL

    def parse_row(line: int, row: dict[str, str]) -> TraceRow:
        _check_width(row)
        given: dict[str, Any] = {}
        if row.get("tp_degree"):
            given["tp_degree"] = _number(row, "tp_degree", int, min_value=1)
        for name in ("mem_per_gpu_gb", "estimate_s", "comm_fraction", "tp_comm_share", "checkpoint_s", "restore_s"):
            if row.get(name):
                given[name] = _number(row, name)
        if row.get("kind"):
            if row["kind"] not in JOB_KIND_BY_NAME:
                raise RowError("kind", f"expected one of {', '.join(JOB_KIND_BY_NAME)}, got {row['kind']!r}")
            given["kind"] = JOB_KIND_BY_NAME[row["kind"]]
        if row.get("priority"):
            text = row["priority"]
            by_number = {str(v): v for v in PRIORITY_BY_NAME.values()}
            if text not in PRIORITY_BY_NAME and text not in by_number:
                raise RowError("priority", f"expected low, normal, high or 0, 1, 2, got {text!r}")
            given["priority"] = PRIORITY_BY_NAME.get(text, by_number.get(text))
        if row.get("preemptible"):
            given["preemptible"] = _parse_bool(row, "preemptible")
        return TraceRow(
            line,
            _number(row, "arrival_s", min_value=0),
            _number(row, "gpus", int, min_value=1),
            _number(row, "work_s"),
            tenant=row.get("tenant") or "default",
            given=given,
        )

    return _read(path, report, strict, parse_row, _rows(path, CSV_REQUIRED, columns))


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
    )


def _parse(fmt: str, path: Path, report: TraceReport, strict: bool, alibaba: dict[str, Any]) -> list[TraceRow]:
    """Usable rows of the file, sorted by (arrival, line)."""
    if fmt == "philly":
        rows = _parse_philly(path, report, strict)
    elif fmt == "alibaba":
        rows = _parse_alibaba(path, report, strict, **alibaba)
    elif fmt == "csv":
        rows = _parse_csv(path, report, strict)
    else:
        raise ValueError(f"unknown trace format '{fmt}' (known: {', '.join(TRACE_FORMATS)})")
    rows.sort(key=lambda r: (r.arrival_s, r.line))
    return rows


def _build_jobs(
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


def read_trace(
    path: str | Path,
    fmt: str,
    *,
    seed: int = 0,
    estimate_noise_sigma: float = DEFAULT_ESTIMATE_NOISE_SIGMA,
    work_scale: float = 1.0,
    strict: bool = False,
    fractional: str = "round_up",
    censored: str = "keep",
    gpu_models: dict[str, str] | None = None,
) -> tuple[list[Job], TraceReport]:
    """Read a whole trace of format `fmt` (philly | alibaba | csv; `.gz` files are read as gzip).

    `fractional`, `censored` and `gpu_models` apply to the alibaba format only. Raises
    ValueError naming file:line for a malformed row when `strict`, for a bad header, and for an
    unknown GPU model.
    """
    path = Path(path)
    report = TraceReport(str(path))
    rows = _parse(fmt, path, report, strict, {"fractional": fractional, "censored": censored, "gpu_models": gpu_models})
    jobs = _build_jobs(
        rows, path, report, strict=strict, seed=seed, estimate_noise_sigma=estimate_noise_sigma, work_scale=work_scale
    )
    return jobs, report


def read_philly(path: str | Path = SHIPPED_TRACES["philly"], **kwargs: Any) -> tuple[list[Job], TraceReport]:
    """The Philly trace (the shipped one by default); keyword arguments as `read_trace`."""
    return read_trace(path, "philly", **kwargs)


def read_alibaba(path: str | Path, **kwargs: Any) -> tuple[list[Job], TraceReport]:
    """An Alibaba openb pod list; keyword arguments as `read_trace`."""
    return read_trace(path, "alibaba", **kwargs)


def read_csv_trace(path: str | Path, **kwargs: Any) -> tuple[list[Job], TraceReport]:
    """A trace in the project's own CSV format; keyword arguments as `read_trace`."""
    return read_trace(path, "csv", **kwargs)


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
      target_load: rescale arrival times so that envs.workload.offered_load on `cluster`
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
        rows = _parse(fmt, path, report, strict, alibaba)
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
        jobs = _build_jobs(
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
