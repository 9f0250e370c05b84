"""The Microsoft Philly trace (shipped as envs/workload/data/philly.csv.gz; source in envs/workload/data/README.md).

Columns `timestamp,duration,num_gpus,gpu_time,cluster`, rows in any order:
* arrival = `timestamp` (submission, `YYYY-MM-DD HH:MM:SS`, UTC); runtime = `duration`
  (seconds); gang size = `num_gpus` (>= 1); `gpu_time` is read and not used.
* `cluster` (the virtual cluster) becomes `tenant`; it must not be empty.
* runtime <= 0 is skipped as `non_positive_duration`.
Everything else (kind, TP degree, memory, communication, priority, estimate) comes from the
fill rules of envs.workload.traces.fill.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from envs.workload.traces.common import RowError, TraceReport, TraceRow, check_width, collect_rows, parse_number, read_csv_rows

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def parse_timestamp(text: str) -> float:
    """`YYYY-MM-DD HH:MM:SS` (UTC) -> seconds since the epoch."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def parse_philly(path: Path, report: TraceReport, strict: bool) -> list[TraceRow]:
    """Usable rows of a Philly file, in file order."""

    def parse_row(line: int, row: dict[str, str]) -> TraceRow | None:
        check_width(row)
        try:
            arrival_s = parse_timestamp(row["timestamp"])
        except ValueError:
            raise RowError("timestamp", f"expected YYYY-MM-DD HH:MM:SS, got {row['timestamp']!r}") from None
        duration_s = parse_number(row, "duration")
        gpus = parse_number(row, "num_gpus", int, min_value=1)
        if not row["cluster"]:
            raise RowError("cluster", "empty")
        if duration_s <= 0:
            report.skip("non_positive_duration", f"{path}:{line}", f"duration {duration_s}")
            return None
        return TraceRow(line, arrival_s, gpus, duration_s, tenant=row["cluster"])

    return collect_rows(path, report, strict, parse_row, read_csv_rows(path, PHILLY_COLUMNS, PHILLY_COLUMNS))
