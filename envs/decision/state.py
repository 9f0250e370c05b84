"""The decision state: everything a scheduler knows at one moment, and nothing else.

A `ClusterState` is what the candidates, the mask, the features, every baseline and the scoring
service decide from. It holds the cluster, the time, the owner of every GPU, and for each job
that has arrived and not finished what a real scheduler knows of it: its shape, its *estimate*,
the work it has done so far, how long it has waited, its placement and checkpoint costs; and the
past arrivals. Never in it: a job's true work, the true time of the next completion, or any job
that has not arrived.

Two sources feed the same type:
* `Simulator.decision_state()` gives a live view over the simulator's own arrays (no copy on
  the hot path). It is valid until the simulator changes and is refreshed in place after that:
  take `to_dict()` for a snapshot.
* `ClusterState.from_dict(data, cluster)` builds one from plain data, as a live cluster or the
  scoring service would send it (JSON). Every field is checked and an error names it
  (`running[3].gpus: GPU 70 does not exist on a 64-GPU cluster`).

The plain-data form (what `from_dict` reads and `to_dict` writes)::

    {
      "time_s": 3600.0,                       # now, s since the scheduler's epoch
      "running":       [JOB, ...],            # in the order they started
      "checkpointing": [JOB, ...],            # preempted, still saving on their GPUs
      "reserved":      [JOB, ...],            # placed, waiting for victims to leave
      "queued":        [JOB, ...],            # in (re)arrival order: FIFO
      "recent_arrivals": [{"time_s": t, "gpus": g, "estimate_s": e}, ...],   # past only
    }
    JOB = {
      "id": "any string or int",              # unique
      "num_gpus": 8,                          # gang size (all at once or none)
      "tp_degree": 8,                         # TP group size; divides num_gpus
      "segment_gpus": 0,                      # GPUs per segment, each inside one block (default 0: none)
      "mem_per_gpu_gb": 40.0,
      "kind": "pretrain|finetune|inference|batch",
      "priority": "low|normal|high",          # or 0, 1, 2
      "preemptible": true,
      "comm_fraction": 0.3, "tp_comm_share": 0.7,   # communication profile, [0, 1)
      "estimate_s": 7200.0,                   # the user's runtime estimate at reference speed
      "work_done_s": 1800.0,                  # reference-seconds of work done so far (default 0)
      "checkpoint_s": 30.0, "restore_s": 60.0,
      "arrival_s": 0.0,                       # default: time_s
      "wait_s": 0.0,                          # time queued before the current queue stay
      "queued_since_s": 3000.0,               # queued and reserved jobs (default time_s)
      "attained_gpu_s": 14400.0,              # GPU-seconds received (default 0)
      "preemptions": 0, "needs_restore": false,
      "gpus": [0, 1, 2, 3],                   # running, checkpointing, reserved: GPU ids
      "restore_left_s": 0.0,                  # running: restore time still owed
      "checkpoint_end_s": 3630.0,             # checkpointing: when it frees its GPUs
    }

What the state derives (the same way a simulator does): per-node free GPUs, GPUs held by
preemptible jobs, memory-bandwidth pressure, uplink demand and each running job's rate under the
speed model. Rates are estimates of the model, not measurements.
"""

from __future__ import annotations

import bisect
import math
import os
from itertools import chain
from numbers import Integral, Real
from typing import Any

import numpy as np

from envs.core import jit as _jit
from envs.core import kernels as _kernels
from envs.jobs import JOB_KIND_BY_NAME, JOB_KIND_NAMES, PRIORITY_BY_NAME, PRIORITY_HIGH, PRIORITY_NAMES, JobKind, segment_problem
from envs.cluster.speed import (
    PlacementProfile,
    SpeedModel,
    job_constants_of,
    job_profile_of,
    running_rates,
)
from envs.cluster.memo import geometry as memo_geometry
from envs.cluster.memo import per_cluster as memo_per_cluster
from envs.cluster.topology import Cluster

# from_dict's bulk path; GANGSCHED_STATE_BULK=0 leaves only the field-by-field reference (benchmarks
# time the two in one process or over HTTP)
BULK_FROM_DICT = os.environ.get("GANGSCHED_STATE_BULK", "1").strip() != "0"
RUNNING_SET_MEMO = 64  # running sets whose derived terms from_dict keeps, per cluster and speed model
JOB_PROFILE_MEMO = 16_384  # running jobs' profiles from_dict keeps, per cluster and speed model (then emptied)
ARRIVAL_HISTORY_S = 6 * 3600.0  # how far back `to_dict` reports arrivals (the features look back less)
STATE_SECTIONS = ("running", "checkpointing", "reserved", "queued")


class StateError(ValueError):
    """Plain data that is not a valid cluster state; the message starts with the field's path."""


def _by_remaining(remaining: list[float], queue: np.ndarray) -> np.ndarray:
    """A queue's `queue_by_remaining_ids`: its indices by remaining estimate, ties in FIFO order."""
    by = sorted(zip(remaining, range(len(queue)), queue.tolist()))
    return np.array([j for _, _, j in by], dtype=np.int64)


def remaining_estimate_s(estimate_s: np.ndarray, work_done_s: np.ndarray, restore_s: np.ndarray,
                         needs_restore: np.ndarray, ids, any_restore: bool = True):
    """The scheduler's estimate of a job's remaining runtime at reference speed (never the
    truth): its estimate minus the work done, at least 0, plus the restore still owed. `ids` is
    an index or an index array. The one implementation (the simulator's queue uses it too)."""
    remaining = np.maximum(estimate_s[ids] - work_done_s[ids], 0.0)
    if not any_restore:  # adding restore_s * False (+0.0) changes nothing
        return remaining
    return remaining + restore_s[ids] * needs_restore[ids]


class JobLists:
    """What each job is (the fields of JOB_LIST_FIELDS) as Python lists, one entry per job of a
    state, for code that reads single jobs: a simulator appends to them as jobs arrive."""

    __slots__ = ("num_gpus", "tp_degree", "mem_per_gpu_gb", "kind", "priority", "preemptible", "comm_fraction",
                 "tp_comm_share")

    def __init__(self, fields: dict[str, list] | None = None):
        for name in self.__slots__:
            setattr(self, name, [] if fields is None else fields[name])

    @classmethod
    def of_arrays(cls, fields: dict) -> JobLists:
        """From a state's per-job arrays (by field name)."""
        return cls({name: fields[name].tolist() for name in cls.__slots__})

    def add(self, gpus: int, tp_degree: int, mem_per_gpu_gb: float, kind: int, priority: int, preemptible: bool,
            comm_fraction: float, tp_comm_share: float) -> None:
        self.num_gpus.append(int(gpus))
        self.tp_degree.append(int(tp_degree))
        self.mem_per_gpu_gb.append(float(mem_per_gpu_gb))
        self.kind.append(int(kind))
        self.priority.append(int(priority))
        self.preemptible.append(bool(preemptible))
        self.comm_fraction.append(float(comm_fraction))
        self.tp_comm_share.append(float(tp_comm_share))


JOB_LIST_FIELDS = JobLists.__slots__


class ClusterState:
    """What a scheduler knows now. Shapes: m = jobs known (arrived, not necessarily live), G =
    GPUs, N = nodes, S = switches, P = priority classes, k = past arrivals. Job fields are
    indexed by the job's index in this state (its id in a simulator's state); only jobs listed
    in `queue`, `running`, `checkpointing` and `reserved` are live, the others are history."""

    __slots__ = (
        # the cluster and the time
        "cluster",  # Cluster: topology, GPU types, the arrays the hot path needs
        "speed_model",  # SpeedModel: how placement changes speed (the scheduler's model)
        "now",  # float, s
        "version",  # int: changes whenever anything here changes (caches key on it)
        "alloc_version",  # int: changes whenever GPU ownership or reservations change
        "names",  # list of each job's external id (None: the index is the id)
        # per job (m,)
        "num_gpus",  # int64, gang size
        "tp_degree",  # int64, GPUs per tensor-parallel group
        "mem_per_gpu_gb",  # float64, GB
        "kind",  # int64, JobKind
        "priority",  # int64, 0 low, 1 normal, 2 high
        "preemptible",  # bool
        "comm_fraction",  # float64, share of step time communicating at ideal placement
        "tp_comm_share",  # float64, share of that which is tensor-parallel
        "estimate_s",  # float64, s: the runtime estimate at reference speed (not the truth)
        "work_done_s",  # float64, reference-s of work done so far
        "requested_gpu_s",  # float64, GPU-s: num_gpus x estimate_s
        "checkpoint_s",  # float64, s: graceful-stop save time (bounded)
        "restore_s",  # float64, s: paid before progress after a preemption
        "needs_restore",  # bool: preempted, restore not yet paid
        "arrival_s",  # float64, s
        "queued_since_s",  # float64, s: start of the current queue stay (queued, reserved)
        "wait_s",  # float64, s: time queued before the current queue stay
        "attained_gpu_s",  # float64, GPU-s received (Tiresias' attained service)
        "preemptions",  # int64
        "enqueue_seq",  # int64: order of (re)entering the queue, the FIFO rank
        "restore_left_s",  # float64, s: restore time a running job still owes
        "checkpoint_end_s",  # float64, s: when a checkpointing job frees its GPUs (inf otherwise)
        "rate",  # float64, reference-s of work per s of a running job under the speed model (0 otherwise)
        "job_lists",  # JobLists: num_gpus ... tp_comm_share of every job as Python lists (single-job reads)
        "segment_gpus",  # (m,) int64 GPUs per segment, 0 none (Job.segment_gpus); None: no job asks for segments
        # live sets
        "queue",  # (q,) int64 queued job indices in FIFO order
        "queue_by_remaining_ids",  # (q,) int64 queued job indices by remaining estimate (shortest first), ties by enqueue_seq
        "running",  # (r,) int64 running job indices in the order they started
        "checkpointing",  # list of job indices
        "reserved",  # list of job indices
        "placement",  # dict index -> (gang,) int64 GPU ids, grouped so TP groups are consecutive runs
        "profiles",  # dict index -> PlacementProfile of running and checkpointing jobs
        "queued_gpus",  # int: GPUs the queue asks for
        "queued_high_priority",  # int: queued jobs of the high class
        "num_restores_owed",  # int: jobs with needs_restore (the remaining estimate adds their restore)
        # per GPU (G,), node (N,), switch (S,)
        "gpu_owner",  # int64 job index holding the GPU, -1 none
        "gpu_reserved",  # int64 job index the GPU is promised to, -1 none
        "free_mask",  # bool: neither owned nor reserved
        "node_free",  # (N,) int64 free GPUs
        "node_preemptible",  # (N, P) int64 GPUs held by running preemptible jobs of each class
        "node_pressure",  # (N,) float64 memory-bandwidth pressure of the running jobs
        "uplink_demand",  # (S,) float64 GB/s the running jobs put on each switch's uplink
        "num_free",  # int: free GPUs
        "fragmented_free",  # int: free GPUs on nodes that cannot host a whole-node gang
        # the past arrivals, oldest first (k,)
        "arrival_times_s",  # float64, s
        "arrival_requested_gpu_s",  # float64, GPU-s: gang size x estimate
        # a cache slot for the candidate layer (envs.decision.cache); nothing here reads it
        "derived",
    )

    def __init__(self, **fields: Any):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))

    # ------------------------------------------------------------------ queries

    @property
    def num_jobs(self) -> int:
        return len(self.num_gpus)

    @property
    def queue_len(self) -> int:
        return len(self.queue)

    @property
    def allocated_gpus(self) -> int:
        return self.cluster.num_gpus - self.num_free

    def remaining_estimate_s(self, ids):
        """Estimated remaining runtime at reference speed of job index or index array `ids`."""
        return remaining_estimate_s(self.estimate_s, self.work_done_s, self.restore_s, self.needs_restore, ids,
                                    self.num_restores_owed > 0)

    def preemption_cost_gpu_s(self, ids):
        """GPU-seconds a preemption of these jobs costs: checkpoint (bounded) plus restore."""
        return self.num_gpus[ids] * (self.checkpoint_s[ids] + self.restore_s[ids])

    def end_estimates_after_s(self, ids) -> np.ndarray:
        """Seconds until running jobs `ids` reach their estimated ends at their current rates,
        after the restore they still owe (a running job owes none beyond restore_left_s; one past
        its estimate is expected to end once that is paid)."""
        remaining = np.maximum(self.estimate_s[ids] - self.work_done_s[ids], 0.0)
        return self.restore_left_s[ids] + remaining / self.rate[ids]

    def next_event_estimate_s(self) -> float:
        """When the scheduler expects the next thing to happen by its estimates: a running job
        reaching its estimated end at its current rate, or a checkpoint ending. inf when nothing
        runs or checkpoints. (A job past its estimate is expected to end now.)"""
        t = math.inf
        r = self.running
        if len(r) and _jit.ENABLED:
            t = _kernels.next_end_estimate_s(self.now, r, self.estimate_s, self.work_done_s, self.restore_left_s, self.rate)
        elif len(r):
            t = self.now + float(self.end_estimates_after_s(r).min())
        if self.checkpointing:
            t = min(t, float(self.checkpoint_end_s[self.checkpointing].min()))
        return t

    def segment_of(self, j: int) -> int:
        """Job `j`'s GPUs per segment (Job.segment_gpus), 0 when it asks for none."""
        return 0 if self.segment_gpus is None else int(self.segment_gpus[j])

    @property
    def has_segments(self) -> bool:
        """Some job of the state asks for segments: the window's counts then take the reference,
        whose counts know segments (the compiled kernels' do not)."""
        return self.segment_gpus is not None and bool(self.segment_gpus.any())

    def name_of(self, index: int):
        """The external id of job `index`."""
        return index if self.names is None else self.names[index]

    # ------------------------------------------------------------------ plain data

    def to_dict(self) -> dict:
        """The plain-data form (JSON-ready): live jobs and the arrivals of the last
        `ARRIVAL_HISTORY_S`. `from_dict(state.to_dict(), cluster)` decides exactly as `state`."""

        def job(j: int, section: str) -> dict:
            d = {
                "id": self.name_of(j), "num_gpus": int(self.num_gpus[j]), "tp_degree": int(self.tp_degree[j]),
                "mem_per_gpu_gb": float(self.mem_per_gpu_gb[j]), "kind": JOB_KIND_NAMES[JobKind(int(self.kind[j]))],
                "priority": PRIORITY_NAMES[int(self.priority[j])], "preemptible": bool(self.preemptible[j]),
                "comm_fraction": float(self.comm_fraction[j]), "tp_comm_share": float(self.tp_comm_share[j]),
                "estimate_s": float(self.estimate_s[j]), "work_done_s": float(self.work_done_s[j]),
                "checkpoint_s": float(self.checkpoint_s[j]), "restore_s": float(self.restore_s[j]),
                "arrival_s": float(self.arrival_s[j]), "wait_s": float(self.wait_s[j]),
                "attained_gpu_s": float(self.attained_gpu_s[j]), "preemptions": int(self.preemptions[j]),
                "needs_restore": bool(self.needs_restore[j]),
            }
            if self.segment_gpus is not None and self.segment_gpus[j]:
                d["segment_gpus"] = int(self.segment_gpus[j])
            if section in ("queued", "reserved"):
                d["queued_since_s"] = float(self.queued_since_s[j])
            if section != "queued":
                d["gpus"] = self.placement[j].tolist()
            if section == "running":
                d["restore_left_s"] = float(self.restore_left_s[j])
            if section == "checkpointing":
                d["checkpoint_end_s"] = float(self.checkpoint_end_s[j])
            return d

        lo = bisect.bisect_right(self.arrival_times_s.tolist(), self.now - ARRIVAL_HISTORY_S)
        per_gpu = self.arrival_requested_gpu_s
        return {
            "time_s": float(self.now),
            "running": [job(int(j), "running") for j in self.running],
            "checkpointing": [job(j, "checkpointing") for j in self.checkpointing],
            "reserved": [job(j, "reserved") for j in self.reserved],
            "queued": [job(int(j), "queued") for j in self.queue],
            "recent_arrivals": [{"time_s": float(t), "requested_gpu_s": float(g)}
                                for t, g in zip(self.arrival_times_s[lo:].tolist(), per_gpu[lo:].tolist())],
        }

    @classmethod
    def from_dict(cls, data: Any, cluster: Cluster, speed_model: SpeedModel | None = None,
                  max_checkpoint_s: float = 60.0) -> ClusterState:
        """Build a state from plain data (see the module docstring). Raises StateError naming
        the field for anything invalid; nothing is half-built. Reads the fields column by column
        (`_from_dict_fast`) and leaves anything it does not accept outright, every refusal
        included, to the field-by-field reference, which words the error."""
        model = speed_model or SpeedModel()
        state = _from_dict_fast(data, cluster, model, max_checkpoint_s) if BULK_FROM_DICT else None
        return _from_dict_reference(data, cluster, model, max_checkpoint_s) if state is None else state


    def with_job_queued_first(self, job: dict) -> ClusterState:
        """This state (one from `from_dict`) with `job` (plain data, as in `queued`) at the head of
        the queue, arrived now: exactly the state `from_dict` gives for this state's plain data
        with the job first in `queued`, without re-reading the running jobs. The scoring service
        adds a pending pod this way; tests/test_service_k8s.py checks every field."""
        one = ClusterState.from_dict({"time_s": self.now, "queued": [dict(job, arrival_s=self.now, queued_since_s=self.now)]},
                                     self.cluster, self.speed_model)
        p = len(self.running) + len(self.checkpointing) + len(self.reserved)  # from_dict puts queued jobs last
        if len(self.queue) and int(np.min(self.queue)) < p:
            raise ValueError("with_job_queued_first needs a state whose queued jobs come last (one from from_dict)")
        fields = {name: getattr(self, name) for name in ClusterState.__slots__}
        for name in PER_JOB_FIELDS:
            a = getattr(self, name)
            fields[name] = np.concatenate([a[:p], getattr(one, name), a[p:]])
        fields["names"] = list(self.names[:p]) + list(one.names) + list(self.names[p:])
        queue = np.concatenate([[p], self.queue + 1]).astype(np.int64)
        seq = np.zeros(len(fields["num_gpus"]), dtype=np.int64)
        seq[queue] = np.arange(len(queue))
        remaining = remaining_estimate_s(fields["estimate_s"], fields["work_done_s"], fields["restore_s"],
                                         fields["needs_restore"], queue).tolist()
        by_remaining_ids = _by_remaining(remaining, queue)
        fields.update(queue=queue, enqueue_seq=seq, queue_by_remaining_ids=by_remaining_ids,
                      queued_gpus=int(fields["num_gpus"][queue].sum()),
                      queued_high_priority=int((fields["priority"][queue] == PRIORITY_HIGH).sum()), derived=None,
                      version=0, alloc_version=0, num_restores_owed=int(fields["needs_restore"].sum()))
        if self.segment_gpus is not None or one.segment_gpus is not None:  # segment requests: 0 for the jobs without
            mine = self.segment_gpus if self.segment_gpus is not None else np.zeros(len(self.num_gpus), dtype=np.int64)
            new = one.segment_gpus if one.segment_gpus is not None else np.zeros(1, dtype=np.int64)
            fields["segment_gpus"] = np.concatenate([mine[:p], new, mine[p:]])
        fields["job_lists"] = JobLists.of_arrays(fields)
        return ClusterState(**fields)


# The per-job fields (shape (m,)), in the order of __slots__.
PER_JOB_FIELDS = tuple(ClusterState.__slots__[ClusterState.__slots__.index("num_gpus") : ClusterState.__slots__.index("rate") + 1])


def fragmented_change(was: int, now: int, whole_gang: int) -> int:
    """How the fragmented free GPUs of a node change when its free GPUs go from `was` to `now`:
    a node with fewer free than `whole_gang` (see Cluster.node_whole_gang) counts as fragmented."""
    return (now if now < whole_gang else 0) - (was if was < whole_gang else 0)


# ---------------------------------------------------------------------- from plain data


def _fail(path: str, message: str):
    raise StateError(f"{path}: {message}")


def _number(d: dict, key: str, path: str, default=None, minimum: float | None = 0.0, integer: bool = False,
            below: float | None = None):
    v = d.get(key)
    if v is None:
        if default is None:
            _fail(f"{path}.{key}", "required")
        return default
    t = type(v)
    if not (t is int or (t is float and not integer)):  # the JSON types first, then any number type
        if isinstance(v, bool) or not isinstance(v, Integral if integer else Real):
            _fail(f"{path}.{key}", f"must be {'an integer' if integer else 'a number'}, got {v!r}")
    if t is not int and not math.isfinite(v):
        _fail(f"{path}.{key}", f"must be finite, got {v!r}")
    if minimum is not None and v < minimum:
        _fail(f"{path}.{key}", f"must be >= {minimum:g}, got {v!r}")
    if below is not None and v >= below:
        _fail(f"{path}.{key}", f"must be < {below:g}, got {v!r}")
    return int(v) if integer else float(v)


def _boolean(d: dict, key: str, path: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        _fail(f"{path}.{key}", f"must be true or false, got {v!r}")
    return v


def _choice(d: dict, key: str, path: str, by_name: dict, default):
    v = d.get(key, default)
    if isinstance(v, str) and v in by_name:
        return int(by_name[v])
    if isinstance(v, Integral) and not isinstance(v, bool) and int(v) in by_name.values():
        return int(v)
    _fail(f"{path}.{key}", f"must be one of {', '.join(by_name)}, got {v!r}")


_JOB_KEYS = {
    "id", "num_gpus", "tp_degree", "mem_per_gpu_gb", "kind", "priority", "preemptible", "comm_fraction",
    "tp_comm_share", "estimate_s", "work_done_s", "checkpoint_s", "restore_s", "arrival_s", "wait_s",
    "queued_since_s", "attained_gpu_s", "preemptions", "needs_restore", "gpus", "restore_left_s", "checkpoint_end_s",
    "segment_gpus",
}
_SECTION_KEYS = {"running": {"gpus", "restore_left_s"}, "checkpointing": {"gpus", "checkpoint_end_s"},
                 "reserved": {"gpus", "queued_since_s"}, "queued": {"queued_since_s"}}
_PLACED_KEYS = set().union(*_SECTION_KEYS.values())  # fields that only some sections take


def _from_dict_reference(data: Any, cluster: Cluster, model: SpeedModel, max_checkpoint_s: float) -> ClusterState:
    """`from_dict` field by field: the reference, and the path that words every refusal (the bulk
    path below hands it whatever it does not accept outright)."""
    if not isinstance(data, dict):
        _fail("state", f"must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - {"time_s", "recent_arrivals", *STATE_SECTIONS})
    if unknown:
        _fail(unknown[0], f"unknown field (known: time_s, recent_arrivals, {', '.join(STATE_SECTIONS)})")
    now = _number(data, "time_s", "state", default=0.0)
    G = cluster.num_gpus
    rows: list[dict] = []
    sections: dict[str, list[int]] = {s: [] for s in STATE_SECTIONS}
    seen_ids: dict[Any, str] = {}
    owner = [-1] * G  # job index holding each GPU
    reserved_for = [-1] * G  # job index each GPU is promised to
    gpu_memory, gpu_node = cluster.gpu_memory_gb.tolist(), cluster.gpu_node.tolist()
    node_domain = cluster.node_domain.tolist()
    for section in STATE_SECTIONS:
        items = data.get(section, [])
        if not isinstance(items, list):
            _fail(section, f"must be a list, got {type(items).__name__}")
        for i, d in enumerate(items):
            path = f"{section}[{i}]"
            if not isinstance(d, dict):
                _fail(path, f"must be a mapping, got {type(d).__name__}")
            keys = d.keys()
            if not keys <= _JOB_KEYS:
                _fail(f"{path}.{sorted(keys - _JOB_KEYS)[0]}", "unknown field")
            misplaced = (keys & _PLACED_KEYS) - _SECTION_KEYS[section]
            if misplaced:
                _fail(f"{path}.{sorted(misplaced)[0]}", f"does not apply to a {section} job")
            if "id" not in d or not isinstance(d["id"], (str, Integral)) or isinstance(d["id"], bool):
                _fail(f"{path}.id", f"required: a string or an integer, got {d.get('id')!r}")
            if d["id"] in seen_ids:
                _fail(f"{path}.id", f"{d['id']!r} appears twice (also in {seen_ids[d['id']]})")
            seen_ids[d["id"]] = path
            index = len(rows)
            row: dict[str, Any] = {"id": d["id"]}
            gpu_ids = None
            if section != "queued":
                gpu_ids = d.get("gpus")
                if not isinstance(gpu_ids, list) or not gpu_ids:
                    _fail(f"{path}.gpus", f"required for a {section} job: a non-empty list of GPU ids")
                for g in gpu_ids:
                    if type(g) is not int and (isinstance(g, bool) or not isinstance(g, Integral)):
                        _fail(f"{path}.gpus", f"GPU ids must be integers, got {g!r}")
                    if not 0 <= g < G:
                        _fail(f"{path}.gpus", f"GPU {g} does not exist on a {G}-GPU cluster")
                if len(set(gpu_ids)) != len(gpu_ids):
                    _fail(f"{path}.gpus", "lists a GPU twice")
            row["num_gpus"] = n = _number(d, "num_gpus", path, default=len(gpu_ids) if gpu_ids else None,
                                          minimum=1, integer=True)
            if gpu_ids is not None and len(gpu_ids) != n:
                _fail(f"{path}.gpus", f"lists {len(gpu_ids)} GPUs for a gang of num_gpus={n}")
            if n > G:
                _fail(f"{path}.num_gpus", f"{n} GPUs do not exist on a {G}-GPU cluster")
            row["tp_degree"] = tp = _number(d, "tp_degree", path, default=1, minimum=1, integer=True)
            if n % tp:
                _fail(f"{path}.tp_degree", f"{tp} must divide num_gpus ({n})")
            row["segment_gpus"] = segment = _number(d, "segment_gpus", path, default=0, integer=True)
            problem = segment_problem(n, tp, segment)
            if problem:
                _fail(f"{path}.segment_gpus", f"{segment} {problem}")
            row["mem_per_gpu_gb"] = mem = _number(d, "mem_per_gpu_gb", path, default=1.0, minimum=0.0)
            row["kind"] = _choice(d, "kind", path, JOB_KIND_BY_NAME, "finetune")
            row["priority"] = _choice(d, "priority", path, PRIORITY_BY_NAME, "normal")
            row["preemptible"] = _boolean(d, "preemptible", path, True)
            row["comm_fraction"] = _number(d, "comm_fraction", path, default=0.0, below=1.0)
            row["tp_comm_share"] = _number(d, "tp_comm_share", path, default=0.0)
            if row["tp_comm_share"] > 1.0:
                _fail(f"{path}.tp_comm_share", f"must be <= 1, got {row['tp_comm_share']!r}")
            est = _number(d, "estimate_s", path)
            if est <= 0:
                _fail(f"{path}.estimate_s", f"must be > 0, got {est!r}")
            row["estimate_s"] = est
            row["work_done_s"] = _number(d, "work_done_s", path, default=0.0)
            row["checkpoint_s"] = min(_number(d, "checkpoint_s", path, default=30.0), max_checkpoint_s)
            row["restore_s"] = _number(d, "restore_s", path, default=60.0)
            row["arrival_s"] = _number(d, "arrival_s", path, default=now, minimum=None)
            if row["arrival_s"] > now:
                _fail(f"{path}.arrival_s", f"{row['arrival_s']:g} is in the future (time_s {now:g}): a state holds arrived jobs only")
            row["wait_s"] = _number(d, "wait_s", path, default=0.0)
            since = math.nan
            if section in ("queued", "reserved"):
                since = _number(d, "queued_since_s", path, default=now, minimum=None)
                if since > now:
                    _fail(f"{path}.queued_since_s", f"{since:g} is after time_s {now:g}")
            row["queued_since_s"] = since
            row["attained_gpu_s"] = _number(d, "attained_gpu_s", path, default=0.0)
            row["preemptions"] = _number(d, "preemptions", path, default=0, integer=True)
            row["needs_restore"] = _boolean(d, "needs_restore", path, False)
            if section == "running" and row["needs_restore"]:
                _fail(f"{path}.needs_restore", "a running job has paid its restore (use restore_left_s)")
            row["restore_left_s"] = _number(d, "restore_left_s", path, default=0.0) if section == "running" else 0.0
            row["checkpoint_end_s"] = math.inf
            if section == "checkpointing":
                row["checkpoint_end_s"] = _number(d, "checkpoint_end_s", path, default=now, minimum=None)
            if gpu_ids is not None:  # checked in plain Python: a gang is a few GPUs
                short = [g for g in gpu_ids if gpu_memory[g] < mem]
                if short:
                    _fail(f"{path}.gpus", f"GPU {short[0]} has {gpu_memory[short[0]]:g} GB, the job needs {mem:g} GB per GPU")
                straddles = cluster.segment_straddles(gpu_ids, segment) if segment else None
                if straddles is not None:
                    _fail(f"{path}.gpus", f"segment {straddles} (GPUs {gpu_ids[straddles * segment:(straddles + 1) * segment]}) is not "
                                          f"inside one block (segment_gpus {segment})")
                if tp > 1:
                    spanning = set(cluster.spanning_domains(tp)) if cluster.num_domains else set()
                    for k in range(0, n, tp):
                        nodes = {gpu_node[g] for g in gpu_ids[k : k + tp]}
                        domains = {node_domain[v] for v in nodes}
                        if len(nodes) > 1 and not (len(domains) == 1 and domains <= spanning):
                            _fail(f"{path}.gpus", f"TP group {k // tp} (GPUs {gpu_ids[k : k + tp]}) spans nodes: "
                                                  "each run of tp_degree GPUs must sit on one node, or on trays of "
                                                  "one NVLink domain whose trays are smaller than the group")
                for g in gpu_ids:  # a reserved job may wait for GPUs that checkpointing jobs still hold
                    holder = reserved_for[g] if section == "reserved" else max(owner[g], reserved_for[g])
                    if holder >= 0:
                        _fail(f"{path}.gpus", f"GPU {g} is already held by job {rows[holder]['id']!r}")
                table = reserved_for if section == "reserved" else owner
                for g in gpu_ids:
                    table[g] = index
                row["gpus"] = np.array(gpu_ids, dtype=np.int64)
            rows.append(row)
            sections[section].append(index)
    for j in sections["reserved"]:
        blockers = {owner[g] for g in rows[j]["gpus"].tolist() if owner[g] >= 0}
        if not blockers <= set(sections["checkpointing"]):
            other = sorted(blockers - set(sections["checkpointing"]))[0]
            _fail(f"reserved[{sections['reserved'].index(j)}].gpus",
                  f"holds GPUs of job {rows[other]['id']!r}, which is not checkpointing: a reservation waits only for preempted jobs")

    history = data.get("recent_arrivals", [])
    if not isinstance(history, list):
        _fail("recent_arrivals", f"must be a list, got {type(history).__name__}")
    times, requested = [], []
    for i, a in enumerate(history):
        path = f"recent_arrivals[{i}]"
        if not isinstance(a, dict):
            _fail(path, f"must be a mapping, got {type(a).__name__}")
        extra = sorted(set(a) - {"time_s", "requested_gpu_s", "gpus", "estimate_s"})
        if extra:
            _fail(f"{path}.{extra[0]}", "unknown field")
        t = _number(a, "time_s", path, minimum=None)
        if t > now:
            _fail(f"{path}.time_s", f"{t:g} is in the future (time_s {now:g}): only past arrivals are known")
        if times and t < times[-1]:
            _fail(f"{path}.time_s", "arrivals must be in time order")
        if "requested_gpu_s" in a:
            req = _number(a, "requested_gpu_s", path)
        else:
            req = _number(a, "gpus", path, minimum=1, integer=True) * _number(a, "estimate_s", path)
        times.append(t)
        requested.append(req)
    return _assemble(cluster, model, now, rows, sections, np.array(owner, dtype=np.int64),
                     np.array(reserved_for, dtype=np.int64), times, requested)


def _assemble(cluster, model, now, rows, sections, owner, reserved_for, times, requested) -> ClusterState:
    m = len(rows)

    def col(name, dtype=float):
        return np.array([r[name] for r in rows], dtype=dtype) if m else np.zeros(0, dtype=dtype)

    num_gpus, tp, kind, prio = col("num_gpus", np.int64), col("tp_degree", np.int64), col("kind", np.int64), col("priority", np.int64)
    preemptible = col("preemptible", bool)
    comm, tp_share = col("comm_fraction"), col("tp_comm_share")
    placement = {j: rows[j]["gpus"] for s in ("running", "checkpointing", "reserved") for j in sections[s]}
    profiles: dict[int, PlacementProfile] = {}
    for j in sections["running"] + sections["checkpointing"]:
        geometry = memo_geometry(cluster, placement[j], int(tp[j]), model)
        profiles[j] = job_profile_of(job_constants_of(int(num_gpus[j]), int(tp[j]), int(kind[j]), float(comm[j]), float(tp_share[j]), model), geometry)
    running = np.array(sections["running"], dtype=np.int64)
    rate = np.zeros(m)
    node_pressure = np.zeros(cluster.num_nodes)
    uplink_demand = np.zeros(len(cluster.switch_names))
    run_profiles = [profiles[j] for j in running.tolist()]
    for p in run_profiles:
        node_pressure[p.nodes] += p.pressure * p.gpus_on_node
        if len(p.uplinks):
            uplink_demand[p.uplinks] += p.uplink_demand_GBps
    if len(running):
        rate[running] = running_rates(cluster, run_profiles, uplink_demand, node_pressure, model)[0]
    node_preemptible = np.zeros((cluster.num_nodes, max(PRIORITY_NAMES) + 1), dtype=np.int64)
    for j in running.tolist():
        if preemptible[j]:
            p = profiles[j]
            node_preemptible[p.nodes, prio[j]] += p.gpus_on_node
    free = (owner < 0) & (reserved_for < 0)
    first = cluster.node_first_gpu
    node_free = np.add.reduceat(free.view(np.int8), first).astype(np.int64) if cluster.num_gpus else np.zeros(0, np.int64)
    whole = cluster.node_whole_gang
    estimate, done, restore_s = col("estimate_s"), col("work_done_s"), col("restore_s")
    needs = col("needs_restore", bool)
    queue = np.array(sections["queued"], dtype=np.int64)
    any_restore = bool(needs.any())
    seq = np.zeros(m, dtype=np.int64)
    seq[queue] = np.arange(len(queue))
    remaining = remaining_estimate_s(estimate, done, restore_s, needs, queue, any_restore).tolist() if len(queue) else []
    by_remaining_ids = _by_remaining(remaining, queue)
    job_lists = JobLists({name: [r[name] for r in rows] for name in JOB_LIST_FIELDS})
    segment_gpus = col("segment_gpus", np.int64)
    return ClusterState(
        cluster=cluster, speed_model=model, now=now, version=0, alloc_version=0, names=[r["id"] for r in rows],
        job_lists=job_lists, segment_gpus=segment_gpus if segment_gpus.any() else None,
        num_gpus=num_gpus, tp_degree=tp, mem_per_gpu_gb=col("mem_per_gpu_gb"), kind=kind, priority=prio,
        preemptible=preemptible, comm_fraction=comm, tp_comm_share=tp_share, estimate_s=estimate, work_done_s=done,
        requested_gpu_s=num_gpus * estimate, checkpoint_s=col("checkpoint_s"), restore_s=restore_s, needs_restore=needs,
        arrival_s=col("arrival_s"), queued_since_s=col("queued_since_s"), wait_s=col("wait_s"),
        attained_gpu_s=col("attained_gpu_s"), preemptions=col("preemptions", np.int64), enqueue_seq=seq,
        restore_left_s=col("restore_left_s"), checkpoint_end_s=col("checkpoint_end_s"), rate=rate,
        queue=queue, queue_by_remaining_ids=by_remaining_ids,
        running=running, checkpointing=sections["checkpointing"], reserved=sections["reserved"],
        placement=placement, profiles=profiles, queued_gpus=int(num_gpus[queue].sum()),
        queued_high_priority=int((prio[queue] == PRIORITY_HIGH).sum()), num_restores_owed=int(needs.sum()),
        gpu_owner=owner, gpu_reserved=reserved_for, free_mask=free, node_free=node_free,
        node_preemptible=node_preemptible, node_pressure=node_pressure, uplink_demand=uplink_demand,
        num_free=int(free.sum()), fragmented_free=int(node_free[node_free < whole].sum()),
        arrival_times_s=np.array(times, dtype=float), arrival_requested_gpu_s=np.array(requested, dtype=float),
    )


# ---------------------------------------------------------------------- from plain data, in bulk
#
# `_from_dict_fast` reads each field of all jobs as one column (a list comprehension), checks the
# column's types as a set and its ranges with numpy, and derives what `_assemble` derives from
# the arrays. It accepts only what the reference accepts, builds the same state bit for bit, and
# gives up (None) on anything else: then the reference runs and words the error. Its checks are
# therefore all-or-nothing and in any order; tests/test_state_fast.py runs both paths on valid
# states of several clusters and on thousands of malformed variants.


class _NotPlain(Exception):
    """Something the bulk path does not accept outright: the reference decides."""


_STATE_KEYS = frozenset(("time_s", "recent_arrivals", *STATE_SECTIONS))
_SECTION_JOB_KEYS = {s: frozenset(_JOB_KEYS - (_PLACED_KEYS - keys)) for s, keys in _SECTION_KEYS.items()}
_ARRIVAL_KEYS = frozenset(("time_s", "requested_gpu_s", "gpus", "estimate_s"))
_NUMBER_TYPES = frozenset((int, float))
_ID_TYPES = frozenset((int, str))
_INT_TYPES = frozenset((int,))
_BOOL_TYPES = frozenset((bool,))
_DICT_TYPES = frozenset((dict,))
_NONE = type(None)
_NOW = object()  # a default: the state's time_s
# The number fields of every job as `_from_dict_reference` reads them: (field, default, minimum);
# the order is the unpacking's in `_bulk`.
_JOB_NUMBERS = (("mem_per_gpu_gb", 1.0, 0.0), ("comm_fraction", 0.0, 0.0), ("tp_comm_share", 0.0, 0.0),
                ("estimate_s", None, 0.0), ("work_done_s", 0.0, 0.0), ("checkpoint_s", 30.0, 0.0), ("restore_s", 60.0, 0.0),
                ("arrival_s", _NOW, -math.inf), ("wait_s", 0.0, 0.0), ("attained_gpu_s", 0.0, 0.0))
# ... then the minimums of the running jobs' restore_left_s and of the other jobs' section fields
# (checkpoint_end_s, queued_since_s: none, and every finite number is above -inf).
_NUMBER_MINIMUMS = np.array([minimum for _, _, minimum in _JOB_NUMBERS] + [0.0, -math.inf])
# A choice's codes by name and by number; values of other types never reach these (bool, float).
_KIND_CODES = {**{name: int(k) for name, k in JOB_KIND_BY_NAME.items()}, **{int(k): int(k) for k in JOB_KIND_BY_NAME.values()}}
_PRIORITY_CODES = {**{name: int(k) for name, k in PRIORITY_BY_NAME.items()}, **{int(k): int(k) for k in PRIORITY_BY_NAME.values()}}


def _filled(values: list, default, allowed: frozenset | set) -> tuple[list, set]:
    """A column with None replaced by `default` (None: required) and its value types, all of
    them in `allowed`, else _NotPlain."""
    types = set(map(type, values))
    if _NONE in types:
        if default is None:
            raise _NotPlain
        values = [default if v is None else v for v in values]
        types = set(map(type, values))
    if not types <= allowed:
        raise _NotPlain
    return values, types


def _float_column(values: list, default, minimum: float | None = 0.0) -> np.ndarray:
    """`_number` over a column: None takes `default` (None: required), ints become floats as
    `float()` makes them; finite and at least `minimum`, else _NotPlain."""
    values, types = _filled(values, default, _NUMBER_TYPES)
    if int in types:
        values = [float(v) for v in values]
    a = np.array(values, dtype=np.float64)
    if not np.isfinite(a).all() or (minimum is not None and (a < minimum).any()):
        raise _NotPlain
    return a


def _int_column(values: list, default, minimum: int) -> np.ndarray:
    values, _ = _filled(values, default, _INT_TYPES)
    a = np.array(values, dtype=np.int64)  # OverflowError beyond int64: the reference decides
    if len(a) and a.min() < minimum:
        raise _NotPlain
    return a


def _from_dict_fast(data: Any, cluster: Cluster, model: SpeedModel, max_checkpoint_s: float) -> ClusterState | None:
    """`_from_dict_reference`'s state, built column by column; None where the reference must decide."""
    try:
        return _bulk(data, cluster, model, max_checkpoint_s)
    except Exception:  # noqa: BLE001 - anything unusual (a refusal, an overflow) is the reference's to report
        return None


def _bulk(data: Any, cluster: Cluster, model: SpeedModel, max_checkpoint_s: float) -> ClusterState:
    if type(data) is not dict or not data.keys() <= _STATE_KEYS:
        raise _NotPlain
    if type(max_checkpoint_s) is int and abs(max_checkpoint_s) < 2**53:
        max_checkpoint_s = float(max_checkpoint_s)
    if type(max_checkpoint_s) is not float:
        raise _NotPlain
    now = _number(data, "time_s", "state", default=0.0)
    jobs: list = []
    bounds = [0]
    for section in STATE_SECTIONS:
        items = data.get(section, [])
        if type(items) is not list:
            raise _NotPlain
        if items and (set(map(type, items)) != _DICT_TYPES or not set().union(*items) <= _SECTION_JOB_KEYS[section]):
            raise _NotPlain
        if any("segment_gpus" in d for d in items):  # segment requests: the reference reads them
            raise _NotPlain
        jobs += items
        bounds.append(len(jobs))
    r, rc, p, m = bounds[1:]  # running [0, r), checkpointing [r, rc), reserved [rc, p), queued [p, m)
    G = cluster.num_gpus

    ids = [d.get("id") for d in jobs]
    if not set(map(type, ids)) <= _ID_TYPES or len(set(ids)) != m:
        raise _NotPlain
    gpu_lists = [d.get("gpus") for d in jobs[:p]]
    for gl in gpu_lists:
        if type(gl) is not list or not gl:
            raise _NotPlain
    lens = [len(gl) for gl in gpu_lists]
    flat = list(chain.from_iterable(gpu_lists))
    if flat and set(map(type, flat)) != _INT_TYPES:
        raise _NotPlain
    gpus = np.fromiter(flat, dtype=np.int64, count=len(flat))  # ints only (checked): OverflowError beyond int64
    if len(gpus) and (gpus.min() < 0 or gpus.max() >= G):
        raise _NotPlain

    col = [d.get("num_gpus") for d in jobs]
    if None in col[:p]:
        col[:p] = [n if v is None else v for v, n in zip(col[:p], lens)]
    num_gpus = _int_column(col, None, 1)
    tp = _int_column([d.get("tp_degree") for d in jobs], 1, 1)
    if m and (num_gpus.max() > G or (num_gpus % tp).any() or lens != num_gpus[:p].tolist()):
        raise _NotPlain
    kind = np.array([_KIND_CODES[v] if type(v) in _ID_TYPES else {}[v] for v in [d.get("kind", "finetune") for d in jobs]],
                    dtype=np.int64)
    prio = np.array([_PRIORITY_CODES[v] if type(v) in _ID_TYPES else {}[v] for v in [d.get("priority", "normal") for d in jobs]],
                    dtype=np.int64)
    col = [d.get("preemptible", True) for d in jobs] + [d.get("needs_restore", False) for d in jobs]
    if m and set(map(type, col)) != _BOOL_TYPES:
        raise _NotPlain
    preemptible, needs = np.array(col[:m], dtype=bool), np.array(col[m:], dtype=bool)
    preemptions = _int_column([d.get("preemptions") for d in jobs], 0, 0)
    # The number fields of all jobs in one array (`_float_column` at once): each field of every
    # job, then restore_left_s of the running, checkpoint_end_s of the checkpointing and
    # queued_since_s of the reserved and queued jobs.
    floats: list = []
    for key, default, part in (*((key, default, jobs) for key, default, _ in _JOB_NUMBERS),
                               ("restore_left_s", 0.0, jobs[:r]), ("checkpoint_end_s", now, jobs[r:rc]),
                               ("queued_since_s", now, jobs[rc:])):
        col = [d.get(key) for d in part]
        if None in col:
            if default is None:
                raise _NotPlain
            col = [(now if default is _NOW else default) if v is None else v for v in col]
        floats += col
    types = set(map(type, floats))
    if not types <= _NUMBER_TYPES:
        raise _NotPlain
    if int in types:
        floats = [float(v) for v in floats]
    values = np.array(floats, dtype=np.float64)
    if not np.isfinite(values).all() or (values < np.repeat(_NUMBER_MINIMUMS, [m] * len(_JOB_NUMBERS) + [r, m - r])).any():
        raise _NotPlain
    (mem, comm, tp_share, estimate, done, checkpoint_s, restore_s, arrival, wait,
     attained) = (values[k * m : (k + 1) * m].copy() for k in range(len(_JOB_NUMBERS)))
    placed = values[len(_JOB_NUMBERS) * m :]
    restore_left, checkpoint_end, queued_since = np.zeros(m), np.full(m, math.inf), np.full(m, math.nan)
    restore_left[:r], checkpoint_end[r:rc], queued_since[rc:] = placed[:r], placed[r:rc], placed[rc:]
    if (comm >= 1.0).any() or (tp_share > 1.0).any() or (estimate <= 0).any():
        raise _NotPlain
    checkpoint_s = np.where(max_checkpoint_s < checkpoint_s, max_checkpoint_s, checkpoint_s)  # min(v, max) as Python's
    if (arrival > now).any() or (queued_since[rc:] > now).any() or needs[:r].any():
        raise _NotPlain

    # The GPUs: enough memory, TP groups on one node, each held by one job, reservations only on
    # free GPUs or those of checkpointing jobs.
    job_of_gpu = np.repeat(np.arange(p, dtype=np.int64), lens)
    if len(gpus):
        if (cluster.gpu_memory_gb[gpus] < mem[job_of_gpu]).any():
            raise _NotPlain
        tp_of_gpu = tp[job_of_gpu]
        if (tp_of_gpu > 1).any():
            starts = np.cumsum([0] + lens[:-1])
            position = np.arange(len(gpus)) - starts[job_of_gpu]
            node = cluster.gpu_node[gpus]
            if (node != node[np.arange(len(gpus)) - position % tp_of_gpu]).any():
                raise _NotPlain
    held = sum(lens[:rc])
    if (np.bincount(gpus[:held], minlength=G) > 1).any() or (np.bincount(gpus[held:], minlength=G) > 1).any():
        raise _NotPlain
    owner = np.full(G, -1, dtype=np.int64)
    owner[gpus[:held]] = job_of_gpu[:held]
    blockers = owner[gpus[held:]]
    if ((blockers >= 0) & (blockers < r)).any():
        raise _NotPlain
    reserved_for = np.full(G, -1, dtype=np.int64)
    reserved_for[gpus[held:]] = job_of_gpu[held:]

    history = data.get("recent_arrivals", [])
    if type(history) is not list:
        raise _NotPlain
    if history and set(map(type, history)) != _DICT_TYPES:
        raise _NotPlain
    times = _float_column([a.get("time_s") for a in history], None, minimum=None)
    if len(times) and (times[-1] > now or (times[1:] < times[:-1]).any()):
        raise _NotPlain
    totals = [a.get("requested_gpu_s") for a in history]
    if None not in totals and sum(map(len, history)) == 2 * len(history):  # each {time_s, requested_gpu_s}: to_dict's form
        requested = _float_column(totals, None)
    else:
        for a in history:
            if not a.keys() <= _ARRIVAL_KEYS:
                raise _NotPlain
        with_total = ["requested_gpu_s" in a for a in history]
        total = _float_column([a["requested_gpu_s"] for a, w in zip(history, with_total) if w], None).tolist()
        shaped = [a for a, w in zip(history, with_total) if not w]
        sizes = [a.get("gpus") for a in shaped]
        _int_column(sizes, None, 1)
        # gang size x estimate, as the reference multiplies them (int x float)
        products = [g * e for g, e in zip(sizes, _float_column([a.get("estimate_s") for a in shaped], None).tolist())]
        total.reverse()
        products.reverse()
        requested = np.array([total.pop() if w else products.pop() for w in with_total], dtype=np.float64)

    return _assemble_columns(cluster, model, now, ids, bounds, gpus, lens, owner, reserved_for, times, requested, dict(
        num_gpus=num_gpus, tp_degree=tp, mem_per_gpu_gb=mem, kind=kind, priority=prio, preemptible=preemptible,
        comm_fraction=comm, tp_comm_share=tp_share, estimate_s=estimate, work_done_s=done, checkpoint_s=checkpoint_s,
        restore_s=restore_s, needs_restore=needs, arrival_s=arrival, queued_since_s=queued_since, wait_s=wait,
        attained_gpu_s=attained, preemptions=preemptions, restore_left_s=restore_left, checkpoint_end_s=checkpoint_end))


def _assemble_columns(cluster, model, now, ids, bounds, gpus, lens, owner, reserved_for, times, requested, cols) -> ClusterState:
    """`_assemble` from columns: the same state, the sums over jobs in the same order."""
    r, rc, p, m = bounds[1:]
    num_gpus, tp, kind, prio = cols["num_gpus"], cols["tp_degree"], cols["kind"], cols["priority"]
    preemptible, needs = cols["preemptible"], cols["needs_restore"]
    ends = np.cumsum(lens).tolist()
    placement = {j: gpus[a:b].copy() for j, (a, b) in enumerate(zip([0] + ends[:-1], ends))}
    lists = {name: cols[name].tolist() for name in JOB_LIST_FIELDS}
    # What the running and checkpointing jobs derive depends on them alone: kept per cluster and
    # speed model for the last few sets seen (a live cluster's change seldom between requests).
    key = b"".join((np.array([r, rc, *lens[:rc]], dtype=np.int64).tobytes(), gpus[: sum(lens[:rc])].tobytes(),
                    num_gpus[:rc].tobytes(), tp[:rc].tobytes(), kind[:rc].tobytes(), cols["comm_fraction"][:rc].tobytes(),
                    cols["tp_comm_share"][:rc].tobytes(), prio[:r].tobytes(), preemptible[:r].tobytes()))
    memo = memo_per_cluster(cluster, ("running set", model))
    hit = memo.get(key)
    if hit is None:
        if len(memo) >= RUNNING_SET_MEMO:
            memo.clear()
        # each job's shape and profile as bytes (-0.0 is not 0.0 here, as it is not in the reference's profile)
        shapes = np.column_stack((num_gpus[:rc], tp[:rc], kind[:rc], cols["comm_fraction"][:rc].view(np.int64),
                                  cols["tp_comm_share"][:rc].view(np.int64))).astype(np.int64, copy=False)
        hit = memo[key] = _running_set(cluster, model, r, rc, placement, lists, prio, preemptible, shapes)
    run_profiles, run_rates, node_pressure, uplink_demand, node_preemptible = hit
    rate = np.zeros(m)
    rate[:r] = run_rates
    free = (owner < 0) & (reserved_for < 0)
    first = cluster.node_first_gpu
    node_free = np.add.reduceat(free.view(np.int8), first).astype(np.int64) if cluster.num_gpus else np.zeros(0, np.int64)
    whole = cluster.node_whole_gang
    estimate, done, restore_s = cols["estimate_s"], cols["work_done_s"], cols["restore_s"]
    queue = np.arange(p, m, dtype=np.int64)
    any_restore = bool(needs.any())
    seq = np.zeros(m, dtype=np.int64)
    seq[queue] = np.arange(len(queue))
    remaining = remaining_estimate_s(estimate, done, restore_s, needs, queue, any_restore).tolist() if len(queue) else []
    by_remaining_ids = _by_remaining(remaining, queue)
    return ClusterState(
        cluster=cluster, speed_model=model, now=now, version=0, alloc_version=0, names=ids, job_lists=JobLists(lists),
        requested_gpu_s=num_gpus * estimate, enqueue_seq=seq, rate=rate, **cols,
        queue=queue, queue_by_remaining_ids=by_remaining_ids,
        running=np.arange(r, dtype=np.int64), checkpointing=list(range(r, rc)), reserved=list(range(rc, p)),
        placement=placement, profiles=dict(zip(range(rc), run_profiles)), queued_gpus=int(num_gpus[queue].sum()),
        queued_high_priority=int((prio[queue] == PRIORITY_HIGH).sum()), num_restores_owed=int(needs.sum()),
        gpu_owner=owner, gpu_reserved=reserved_for, free_mask=free, node_free=node_free,
        node_preemptible=node_preemptible.copy(), node_pressure=node_pressure.copy(), uplink_demand=uplink_demand.copy(),
        num_free=int(free.sum()), fragmented_free=int(node_free[node_free < whole].sum()),
        arrival_times_s=times, arrival_requested_gpu_s=requested,
    )


def _running_set(cluster, model, r, rc, placement, lists, prio, preemptible, shapes):
    """(profiles of jobs 0..rc-1, rates of the running jobs 0..r-1, node pressure, uplink demand,
    GPUs held by preemptible running jobs per node and class), as `_assemble` derives them.
    `shapes`: (rc, 5) int64, each job's GPUs, TP degree, kind and the bits of its comm_fraction and
    tp_comm_share (what its profile depends on, with its GPUs)."""
    table = memo_per_cluster(cluster, ("geometry", model))
    # A job's profile is a pure function of its shape, communication profile and GPUs: kept per
    # job, so a running set that differs from one seen before in a few jobs derives only theirs.
    known = memo_per_cluster(cluster, ("job profile", model))
    if len(known) > JOB_PROFILE_MEMO:
        known.clear()
    gang, tps, kinds, comms, shares = lists["num_gpus"], lists["tp_degree"], lists["kind"], lists["comm_fraction"], lists["tp_comm_share"]
    profiles = []
    for j in range(rc):
        key = shapes[j].tobytes() + placement[j].tobytes()
        pr = known.get(key)
        if pr is None:
            pr = known[key] = job_profile_of(job_constants_of(gang[j], tps[j], kinds[j], comms[j], shares[j], model),
                                             memo_geometry(cluster, placement[j], tps[j], model, table))
        profiles.append(pr)
    profiles = tuple(profiles)
    N, S, P = cluster.num_nodes, len(cluster.switch_names), max(PRIORITY_NAMES) + 1
    if not r:
        return profiles, np.zeros(0), np.zeros(N), np.zeros(S), np.zeros((N, P), dtype=np.int64)
    run_profiles = list(profiles[:r])
    # node_pressure and uplink_demand: each running job's terms added in start order, as the
    # reference's loop adds them (bincount adds its weights in input order, from 0.0)
    nodes = [pr.nodes for pr in run_profiles]
    per_job = np.array([len(n) for n in nodes])
    node_cat, on_node_cat = np.concatenate(nodes), np.concatenate([pr.gpus_on_node for pr in run_profiles])
    pressure = np.repeat(np.array([pr.pressure for pr in run_profiles]), per_job)
    node_pressure = np.bincount(node_cat, weights=pressure * on_node_cat, minlength=N)
    uplinks = [pr.uplinks for pr in run_profiles]
    if any(len(u) for u in uplinks):
        uplink_demand = np.bincount(np.concatenate(uplinks), weights=np.concatenate([pr.uplink_demand_GBps for pr in run_profiles]),
                                    minlength=S)
    else:
        uplink_demand = np.zeros(S)
    rates = running_rates(cluster, run_profiles, uplink_demand, node_pressure, model)[0]
    held = np.repeat(preemptible[:r], per_job)
    cell = node_cat[held] * P + np.repeat(prio[:r], per_job)[held]
    node_preemptible = np.bincount(np.repeat(cell, on_node_cat[held]), minlength=N * P).astype(np.int64).reshape(N, P)
    return profiles, rates, node_pressure, uplink_demand, node_preemptible
