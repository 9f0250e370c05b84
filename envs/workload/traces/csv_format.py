"""The project's own trace format: one CSV row per job, columns named as `Job` fields.

Required: `arrival_s`, `gpus`, `work_s`. Optional (empty cell or absent column = the fill rule
of envs.workload.traces.fill, or the default named here): `kind` (pretrain|finetune|inference|batch),
`tp_degree`, `mem_per_gpu_gb`, `estimate_s`, `comm_fraction`, `tp_comm_share`, `priority`
(low|normal|high or 0|1|2), `preemptible` (true|false|1|0), `checkpoint_s`, `restore_s`,
`tenant` (default "default"), `segment_gpus` (GPUs per segment, each segment inside one block;
0 or empty: none; it must be a multiple of `tp_degree` and divide `gpus`), `job_id` (accepted
and ignored: ids are re-assigned in arrival order). Other columns are an error. Each row must
pass `Job.validate()`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.jobs import JOB_KIND_BY_NAME, PRIORITY_BY_NAME
from envs.workload.traces.common import RowError, TraceReport, TraceRow, check_width, collect_rows, parse_number, read_csv_rows

CSV_REQUIRED = ("arrival_s", "gpus", "work_s")
CSV_OPTIONAL = (
    "job_id", "kind", "tp_degree", "mem_per_gpu_gb", "estimate_s", "comm_fraction", "tp_comm_share",
    "priority", "preemptible", "checkpoint_s", "restore_s", "tenant", "segment_gpus",
)  # fmt: skip


def _parse_bool(row: dict[str, str], column: str) -> bool:
    text = row[column].lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise RowError(column, f"expected true or false, got {row[column]!r}")


def parse_csv(path: Path, report: TraceReport, strict: bool) -> list[TraceRow]:
    """Rows of a file in the project's format, in file order; the fields it states in `given`."""
    columns = CSV_REQUIRED + CSV_OPTIONAL

    def parse_row(line: int, row: dict[str, str]) -> TraceRow:
        check_width(row)
        given: dict[str, Any] = {}
        if row.get("tp_degree"):
            given["tp_degree"] = parse_number(row, "tp_degree", int, min_value=1)
        if row.get("segment_gpus"):
            given["segment_gpus"] = parse_number(row, "segment_gpus", int, min_value=0)
        for name in ("mem_per_gpu_gb", "estimate_s", "comm_fraction", "tp_comm_share", "checkpoint_s", "restore_s"):
            if row.get(name):
                given[name] = parse_number(row, name)
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
            parse_number(row, "arrival_s", min_value=0),
            parse_number(row, "gpus", int, min_value=1),
            parse_number(row, "work_s"),
            tenant=row.get("tenant") or "default",
            given=given,
        )

    return collect_rows(path, report, strict, parse_row, read_csv_rows(path, CSV_REQUIRED, columns))
