"""The job record: what a workload is made of.

A `Job` is immutable: it describes the request as submitted. Everything that changes while the
job runs (state, progress, placement) lives in the simulator's arrays, never here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum


class JobKind(IntEnum):
    PRETRAIN = 0
    FINETUNE = 1
    INFERENCE = 2
    BATCH = 3  # hyper-parameter search, embeddings, evaluation sweeps


JOB_KIND_NAMES = {k: k.name.lower() for k in JobKind}
JOB_KIND_BY_NAME = {v: k for k, v in JOB_KIND_NAMES.items()}

# Priority classes: a job may only preempt jobs of a strictly lower class.
PRIORITY_LOW, PRIORITY_NORMAL, PRIORITY_HIGH = 0, 1, 2
PRIORITY_NAMES = {PRIORITY_LOW: "low", PRIORITY_NORMAL: "normal", PRIORITY_HIGH: "high"}
PRIORITY_BY_NAME = {v: k for k, v in PRIORITY_NAMES.items()}


def segment_problem(gpus: int, tp_degree: int, segment_gpus) -> str | None:
    """What is wrong with a request for segments of `segment_gpus` GPUs by a gang of `gpus` in TP
    groups of `tp_degree` (None: nothing). 0 asks for none; otherwise a segment is a whole number
    of TP groups and the gang a whole number of segments."""
    if isinstance(segment_gpus, bool) or not isinstance(segment_gpus, int) or segment_gpus < 0:
        return "must be a whole number of GPUs >= 0 (0: no segments)"
    if not segment_gpus:
        return None
    if tp_degree < 1 or segment_gpus % tp_degree:
        return f"must be a multiple of the TP group (tp_degree {tp_degree})"
    if gpus % segment_gpus:
        return f"must divide the gang (gpus {gpus})"
    return None


@dataclass(frozen=True, slots=True)
class Job:
    """One gang job as submitted.

    `work_s` is the true runtime at ideal placement on the reference GPU (H100, speed 1.0);
    `estimate_s` is what the scheduler is told and is the only duration that reaches
    observations unless a workload says durations are known.
    """

    job_id: int
    arrival_s: float
    kind: JobKind
    gpus: int  # gang size: runs on all of them or not at all
    tp_degree: int  # tensor-parallel group size; gpus // tp_degree data-parallel groups
    mem_per_gpu_gb: float  # rules out GPU types with less memory
    work_s: float
    estimate_s: float
    comm_fraction: float  # share of step time spent communicating at ideal placement, [0, 1)
    tp_comm_share: float  # share of that communication that is tensor-parallel, [0, 1]
    priority: int = PRIORITY_NORMAL
    preemptible: bool = True
    checkpoint_s: float = 30.0  # graceful-stop save time (GPUs held, no progress)
    restore_s: float = 60.0  # paid before progress resumes after a preemption
    tenant: str = "default"
    # GPUs per segment (Slurm topology/block's `--segment`, counted in GPUs rather than nodes):
    # the gang is split into gpus // segment_gpus segments, each placed inside one block (an
    # NVLink domain; outside them, the nodes of one leaf switch). 0: no segment request.
    segment_gpus: int = 0

    @property
    def dp_groups(self) -> int:
        return self.gpus // self.tp_degree

    def validate(self) -> None:
        """Raise ValueError naming the field for an inconsistent record."""
        if self.gpus < 1:
            raise ValueError(f"job {self.job_id}: field 'gpus' must be >= 1, got {self.gpus}")
        if self.tp_degree < 1 or self.gpus % self.tp_degree:
            raise ValueError(
                f"job {self.job_id}: field 'tp_degree' ({self.tp_degree}) must divide "
                f"'gpus' ({self.gpus})"
            )
        for name in ("arrival_s", "checkpoint_s", "restore_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"job {self.job_id}: field '{name}' must be >= 0")
        for name in ("work_s", "estimate_s", "mem_per_gpu_gb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"job {self.job_id}: field '{name}' must be > 0")
        if not 0.0 <= self.comm_fraction < 1.0:
            raise ValueError(f"job {self.job_id}: field 'comm_fraction' must be in [0, 1)")
        if not 0.0 <= self.tp_comm_share <= 1.0:
            raise ValueError(f"job {self.job_id}: field 'tp_comm_share' must be in [0, 1]")
        if self.priority not in PRIORITY_NAMES:
            raise ValueError(f"job {self.job_id}: field 'priority' must be one of 0, 1, 2")
        problem = segment_problem(self.gpus, self.tp_degree, self.segment_gpus)
        if problem:
            raise ValueError(f"job {self.job_id}: field 'segment_gpus' ({self.segment_gpus!r}) {problem}")

    @property
    def num_segments(self) -> int:
        """Segments of the gang (1 without a segment request)."""
        return self.gpus // self.segment_gpus if self.segment_gpus else 1

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if not self.segment_gpus:  # records without a segment request read as before
            del d["segment_gpus"]
        d["kind"] = JOB_KIND_NAMES[self.kind]
        d["priority"] = PRIORITY_NAMES[self.priority]
        return d
