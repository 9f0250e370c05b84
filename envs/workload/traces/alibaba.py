"""The openb pod list of Alibaba cluster-trace-gpu-v2023.

Columns `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time` (integer seconds). Rules specific to it:
* `num_gpu == 0`: CPU-only pod, skipped and counted as `cpu_only`.
* `gpu_milli < 1000` (a GPU-sharing pod): `fractional="round_up"` (default) gives it `num_gpu`
  whole GPUs and counts it as `fractional_rounded_up`; `fractional="drop"` skips it, counted as
  `fractional`.
* runtime = `deletion_time - scheduled_time`; a pod never scheduled (empty `scheduled_time`)
  uses `deletion_time - creation_time`, the only lifetime the trace gives. Runtime <= 0 is
  skipped as `non_positive_duration`. Arrival = `creation_time`.
* censored pods (still alive at trace end: `deletion_time` equal to the largest deletion time
  of the file) keep their observed runtime as a lower bound (`censored="keep"`, default; their
  final job ids are listed in `report.censored_job_ids`) or are skipped (`censored="drop"`);
  counted as `censored` either way.
* `gpu_spec`: empty, or model names joined by `|`, mapped to catalogue GPU types by
  `ALIBABA_GPU_MODELS` updated with the caller's `gpu_models`; an unknown model is a ValueError
  naming file:line and how to map it. A `Job` carries no type whitelist, so the constraint
  becomes `mem_per_gpu_gb` = the smallest memory among the listed types.
* `qos` -> (priority, preemptible, kind): LS -> (high, no, inference); Guaranteed -> (normal,
  no, by gang size); Burstable -> (normal, yes, by gang size); BE -> (low, yes, batch).
  `pod_phase` (Running/Succeeded/Failed/Pending) is validated, not filtered.
* The tenant is "default" (the trace has none).
What the trace does not give comes from the fill rules of envs.workload.traces.fill.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.cluster.topology import ALIBABA_GPU_MODELS, GPU_CATALOGUE, resolve_gpu_models  # noqa: F401 (ALIBABA_GPU_MODELS: re-exported by envs.workload.traces)
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, JobKind
from envs.workload.traces.common import RowError, TraceReport, TraceRow, check_width, collect_rows, parse_number, read_csv_rows

# qos -> (priority, preemptible, kind or None for the gang-size rule)
ALIBABA_QOS = {
    "LS": (PRIORITY_HIGH, False, JobKind.INFERENCE),
    "Guaranteed": (PRIORITY_NORMAL, False, None),
    "Burstable": (PRIORITY_NORMAL, True, None),
    "BE": (PRIORITY_LOW, True, JobKind.BATCH),
}
ALIBABA_PHASES = ("Running", "Succeeded", "Failed", "Pending")

ALIBABA_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)  # fmt: skip


def parse_alibaba(
    path: Path, report: TraceReport, strict: bool, fractional: str, censored: str, gpu_models: dict[str, str] | None
) -> list[TraceRow]:
    """Usable rows of an openb pod list, in file order, censored ones marked."""
    mapping = resolve_gpu_models(gpu_models)
    deletion_s: list[int] = []  # parallel to the kept rows, for the censoring rule

    def parse_row(line: int, row: dict[str, str]) -> TraceRow | None:
        check_width(row)
        where = f"{path}:{line}"
        num_gpu = parse_number(row, "num_gpu", int, min_value=0)
        gpu_milli = parse_number(row, "gpu_milli", int, min_value=0)
        if gpu_milli > 1000:
            raise RowError("gpu_milli", f"must be <= 1000, got {gpu_milli}")
        qos = row["qos"]
        if qos not in ALIBABA_QOS:
            raise RowError("qos", f"expected one of {', '.join(ALIBABA_QOS)}, got {qos!r}")
        if row["pod_phase"] not in ALIBABA_PHASES:
            raise RowError("pod_phase", f"expected one of {', '.join(ALIBABA_PHASES)}, got {row['pod_phase']!r}")
        creation_s = parse_number(row, "creation_time", int, min_value=0)
        deletion = parse_number(row, "deletion_time", int, min_value=0)
        scheduled_s = parse_number(row, "scheduled_time", int, min_value=0) if row["scheduled_time"] else None
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

    rows = collect_rows(path, report, strict, parse_row, read_csv_rows(path, ALIBABA_COLUMNS, ALIBABA_COLUMNS))
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
