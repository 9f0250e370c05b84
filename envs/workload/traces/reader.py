"""Reading a whole trace file of any format: `read_trace` and one shortcut per format.

`parse_trace` dispatches on the format name to the format's module (envs.workload.traces.philly,
.alibaba, .csv_format) and sorts the usable rows by (arrival, line); `read_trace` then fills
them into jobs by envs.workload.traces.fill. `.gz` files are read as gzip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.jobs import Job
from envs.workload.traces.alibaba import parse_alibaba
from envs.workload.traces.common import SHIPPED_TRACES, TraceReport, TraceRow
from envs.workload.traces.csv_format import parse_csv
from envs.workload.traces.fill import DEFAULT_ESTIMATE_NOISE_SIGMA, build_jobs
from envs.workload.traces.philly import parse_philly

TRACE_FORMATS = ("philly", "alibaba", "csv")


def parse_trace(fmt: str, path: Path, report: TraceReport, strict: bool, alibaba: dict[str, Any]) -> list[TraceRow]:
    """Usable rows of the file, sorted by (arrival, line); `alibaba` holds that format's options."""
    if fmt == "philly":
        rows = parse_philly(path, report, strict)
    elif fmt == "alibaba":
        rows = parse_alibaba(path, report, strict, **alibaba)
    elif fmt == "csv":
        rows = parse_csv(path, report, strict)
    else:
        raise ValueError(f"unknown trace format '{fmt}' (known: {', '.join(TRACE_FORMATS)})")
    rows.sort(key=lambda r: (r.arrival_s, r.line))
    return rows


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
    rows = parse_trace(fmt, path, report, strict, {"fractional": fractional, "censored": censored, "gpu_models": gpu_models})
    jobs = build_jobs(
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
