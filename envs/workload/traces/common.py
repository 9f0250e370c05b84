"""What every trace format shares: the report of a read, the parsed row, and CSV row reading.

A format module reads its file with `read_csv_rows` (header checked against the format's
columns; a row whose cell count differs from the header's is flagged, not dropped), turns each
row into a `TraceRow` or None (a rule skipped it and said why in the `TraceReport`) inside
`collect_rows`, and raises `RowError(column, message)` for a malformed row: `collect_rows`
then stops with a `ValueError` naming `file:line` and the column when `strict`, or skips the
row and counts it as `malformed`. Nothing is dropped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SHIPPED_TRACES = {"philly": DATA_DIR / "philly.csv.gz"}
MAX_EXAMPLES = 3  # file:line examples kept per skip reason


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


_WIDTH = "\0width"  # key that `read_csv_rows` adds to a row whose cell count differs from the header's


@contextmanager
def _open_text(path: Path) -> Iterator[io.TextIOBase]:
    try:
        f = gzip.open(path, "rt", newline="") if path.suffix == ".gz" else open(path, newline="")
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        yield f


def read_csv_rows(path: Path, required: tuple[str, ...], allowed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
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


def check_width(row: dict[str, str]) -> None:
    """RowError when the row's cell count differs from the header's."""
    if _WIDTH in row:
        raise RowError("(row)", row[_WIDTH])


def parse_number(row: dict[str, str], column: str, kind: type = float, *, min_value: float | None = None) -> Any:
    """The cell as `kind` (float or int), finite and at least `min_value`; else RowError."""
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


def collect_rows(
    path: Path,
    report: TraceReport,
    strict: bool,
    parse_row: Callable[[int, dict[str, str]], TraceRow | None],
    rows_iter: Iterable[tuple[int, dict[str, str]]],
) -> list[TraceRow]:
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
