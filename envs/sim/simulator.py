"""The discrete-event simulator: allocate, preempt, advance.

Plain Python and numpy; no Gymnasium or torch. A scheduler (the env, a baseline, a replay loop)
calls `start`, `preempt_and_start` and `advance`; the simulator enforces the gang rule (a job
runs on all of its GPUs or none; a GPU holds at most one job) and keeps every job's record.

Rates are piecewise constant between events, so time jumps from event to event: arrivals,
completions and checkpoint ends. Every change to the running set recomputes the rates that it
can have changed.

The cluster is small (tens of nodes, ~10-100 running jobs), so per-event work on the running
set is plain Python over floats and ints where numpy's per-call cost would dominate, and derived
state (per-node counts, free GPUs, power) is kept up to date by the changes instead of being
recounted. Every float is computed by the same operations in the same order as the vectorised
formulas of envs.cluster.speed, so episodes are bit-for-bit those of a full recomputation.

The `Simulator` keeps the jobs' records and the event loop (advance, start, preempt_and_start and
what they change); the bookkeeping it keeps up to date is in one component per concern, each
changed only by the simulator:

* `job_queue` (envs.sim.queue.JobQueue): the queued jobs in FIFO and remaining-estimate order,
* `ledger` (envs.sim.ledger.AllocationLedger): GPU ownership, reservations and per-node counts,
* `load` (envs.sim.load.LoadModel): node and uplink load of the running jobs, and their rates,
* `power` (envs.sim.power.PowerMeter): the power the cluster draws.

What schedulers and tests read of them stays readable on the simulator (`sim.queue`,
`sim.node_free`, `sim.gpu_owner`, `sim.power_w`, ...) as read-only properties.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import operator
import weakref
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from envs import core as _core
from envs.cluster.speed import PlacementProfile, SpeedModel, placement_profile
from envs.cluster.topology import REFERENCE_NET_PER_GPU_GBPS, Cluster
from envs.core import jit as _jit
from envs.core import kernels as _kernels
from envs.decision.las import LAS_QUEUE_THRESHOLDS_GPU_S, STARVATION_FACTOR
from envs.decision.state import ClusterState, JobLists, remaining_estimate_s
from envs.jobs import PRIORITY_HIGH, Job
from envs.sim.ledger import AllocationLedger
from envs.sim.load import LoadModel
from envs.sim.objective import OBJECTIVE_TERMS
from envs.sim.power import PowerMeter
from envs.sim.queue import JobQueue

_EPS = 1e-9


class JobState(IntEnum):
    FUTURE = 0  # not arrived yet
    QUEUED = 1
    RESERVED = 2  # placement chosen; waiting for preempted victims to checkpoint and leave
    RUNNING = 3  # includes paying the restore time after a preemption
    CHECKPOINTING = 4  # preempted: saving, still holding its GPUs
    DONE = 5


class SchedulingError(ValueError):
    """An illegal scheduling decision (the gang rule, a busy GPU, an invalid victim)."""


@dataclass
class Segment:
    """One stretch of a job on a set of GPUs, for timelines."""

    job_id: int
    gpus: np.ndarray
    start_s: float
    end_s: float
    preempted: bool


@dataclass(frozen=True)
class JobSlice:
    """Jobs `lo`..`hi`-1 of `jobs`, a list its owner keeps and never changes (a lookahead
    sampler's fresh draw of the workload): future jobs for `Simulator.native_world` without
    copying them. The jobs' own ids are not read."""

    jobs: list[Job]
    lo: int
    hi: int

    def __len__(self) -> int:
        return self.hi - self.lo


@dataclass
class SimConfig:
    speed_model: SpeedModel = field(default_factory=SpeedModel)
    max_checkpoint_s: float = 60.0  # a graceful stop is bounded


_NO_GPUS = np.zeros(0, dtype=np.int64)  # no start in run_events' call; read-only like the candidates' GPU arrays,
_NO_GPUS.flags.writeable = False  # so both calls take one compiled signature


class _EventBuffers:
    """`Simulator.run_events`' scratch and the cluster's constants it reads, one set per simulator."""

    ROWS = 512  # events per call at most (timeline rows)

    def __init__(self, cluster: Cluster):
        G = cluster.num_gpus
        self.fs = np.zeros(7)
        self.iscal = np.zeros(17, dtype=np.int64)
        self.run = np.empty(G, dtype=np.int64)  # the running jobs (each holds a GPU)
        self.order = np.empty(G, dtype=np.int64)
        self.finished = np.empty(G + self.ROWS, dtype=np.int64)
        self.timeline = np.empty((self.ROWS, 6))
        self.consts = _event_constants(cluster)


class _EventConstants:
    __slots__ = ("node_first_gpu", "node_gpus", "whole_gang", "power_terms", "gpu_node")


# run_events' LAS test arguments where it has none (envs.decision.window.las_stop_args' types: one signature)
_NO_LAS = (np.zeros((0, 0), dtype=np.int64), np.zeros(0), 0.0)


_EVENT_CONSTANTS: dict[int, tuple[Cluster, _EventConstants]] = {}


def _event_constants(cluster: Cluster) -> _EventConstants:
    """Per cluster: its nodes' first GPU, GPUs and whole-gang size, and PowerMeter's terms (base W,
    busy W per GPU, idle W per GPU) per node, as the arrays run_events reads."""
    hit = _EVENT_CONSTANTS.get(id(cluster))
    if hit is None or hit[0] is not cluster:
        c = _EventConstants()
        c.node_first_gpu = np.ascontiguousarray(cluster.node_first_gpu, dtype=np.int64)
        c.node_gpus = np.ascontiguousarray(cluster.node_gpus, dtype=np.int64)
        c.whole_gang = np.ascontiguousarray(cluster.node_whole_gang, dtype=np.int64)
        c.gpu_node = np.ascontiguousarray(cluster.gpu_node, dtype=np.int64)
        power = PowerMeter(cluster, np.zeros(cluster.num_nodes, dtype=np.int64))
        c.power_terms = np.ascontiguousarray(np.array([t[:3] for t in power._terms], dtype=np.float64).reshape(-1, 3))
        if len(_EVENT_CONSTANTS) > 64:
            _EVENT_CONSTANTS.clear()
        hit = _EVENT_CONSTANTS[id(cluster)] = (cluster, c)
    return hit[1]


class _JobShapes:
    """Each job's shape id and the shapes (Simulator.job_shapes), made with the simulator. Forks
    with the same jobs share it; one with other future jobs keeps the prefix of the jobs it
    shares and adds its own."""

    __slots__ = ("ids", "made", "shapes", "index", "_columns")

    def __init__(self):
        self.ids = np.zeros(0, dtype=np.int64)
        self.made = 0
        self.shapes: list[tuple] = []
        self.index: dict[tuple, int] = {}
        self._columns: tuple | None = None

    def prefix(self, k: int) -> _JobShapes:
        out = _JobShapes()
        out.made = min(self.made, k)
        out.ids = self.ids[: out.made]
        out.shapes, out.index = self.shapes.copy(), self.index.copy()
        return out

    def columns(self) -> dict[str, np.ndarray]:
        """The shapes as arrays by field (shape_gpus, shape_tp, shape_mem, shape_priority,
        shape_segment), remade when a shape is added (the native rollout reads them)."""
        if self._columns is None or self._columns[0] != len(self.shapes):
            shapes = self.shapes
            self._columns = (len(shapes), {
                "shape_gpus": np.array([x[0] for x in shapes], dtype=np.int64),
                "shape_tp": np.array([x[1] for x in shapes], dtype=np.int64),
                "shape_mem": np.array([x[2] for x in shapes], dtype=float),
                "shape_priority": np.array([x[3] for x in shapes], dtype=np.int64),
                "shape_segment": _shape_segments(shapes)})
        return self._columns[1]

    def of(self, sim: Simulator) -> tuple[np.ndarray, list[tuple]]:
        n = len(sim.jobs)
        if self.made != n:
            ids = np.empty(n, dtype=np.int64)
            ids[: self.made] = self.ids[: self.made]
            shapes, index = self.shapes, self.index
            lo = self.made
            shapes_now = zip(sim.gpus_req[lo:].tolist(), sim.tp_degree[lo:].tolist(), sim.mem_req[lo:].tolist(),
                             sim.priority[lo:].tolist())
            if sim.has_segments:  # a job asking for segments: (GPUs, TP, GB, priority, GPUs per segment)
                shapes_now = (x + (g,) if g else x for x, g in zip(shapes_now, sim.segment_gpus[lo:].tolist()))
            for k, shape in enumerate(shapes_now, lo):
                i = index.get(shape)
                if i is None:
                    i = index[shape] = len(shapes)
                    shapes.append(shape)
                ids[k] = i
            self.ids, self.made = ids, n
        return self.ids, self.shapes


def _shapes_of(arrays: dict[str, np.ndarray]) -> list[tuple]:
    """Each job's shape, (GPUs, TP degree, GB per GPU asked, priority), with its GPUs per segment
    added when it asks for segments, from its `_job_arrays`."""
    shapes = zip(arrays["gpus_req"].tolist(), arrays["tp_degree"].tolist(), arrays["mem_req"].tolist(),
                 arrays["priority"].tolist())
    return [x + (g,) if g else x for x, g in zip(shapes, arrays["segment_gpus"].tolist())]


def _shape_segments(shapes: list[tuple]) -> np.ndarray:
    """Each shape's GPUs per segment (its fifth field; 0 for a shape of four)."""
    return np.array([x[4] if len(x) > 4 else 0 for x in shapes], dtype=np.int64)


def _job_arrays(jobs: list[Job], config: SimConfig) -> dict[str, np.ndarray]:
    """The simulator's per-job arrays (attribute name -> (n,) array, indexed by job id) for
    `jobs`, none of them arrived yet: times in s, work in reference-GPU seconds. The one place
    they are made, for a new simulator and for the jobs a fork substitutes (`Simulator.fork`)."""
    n = len(jobs)
    a: dict[str, np.ndarray] = {}
    a["state"] = np.full(n, JobState.FUTURE, dtype=np.int8)
    a["gpus_req"] = np.array([j.gpus for j in jobs], dtype=np.int64)
    a["tp_degree"] = np.array([j.tp_degree for j in jobs], dtype=np.int64)
    a["mem_req"] = np.array([j.mem_per_gpu_gb for j in jobs])
    a["priority"] = np.array([j.priority for j in jobs], dtype=np.int64)
    a["preemptible"] = np.array([j.preemptible for j in jobs], dtype=bool)
    a["kind"] = np.array([int(j.kind) for j in jobs], dtype=np.int64)
    a["comm_fraction"] = np.array([j.comm_fraction for j in jobs], dtype=float)
    a["tp_comm_share"] = np.array([j.tp_comm_share for j in jobs], dtype=float)
    a["arrival"] = np.array([j.arrival_s for j in jobs])
    a["estimate"] = np.array([j.estimate_s for j in jobs])
    a["work_total"] = np.array([j.work_s for j in jobs], dtype=float)
    a["work_left"] = a["work_total"].copy()  # the truth: only the event loop reads it
    a["work_done"] = np.zeros(n)  # work_total - work_left, what a scheduler can know
    a["requested_gpu_s"] = a["gpus_req"] * a["estimate"]  # what each job asks for, by its estimate
    a["restore_s"] = np.array([j.restore_s for j in jobs], dtype=float)
    a["checkpoint_s"] = np.minimum([j.checkpoint_s for j in jobs], config.max_checkpoint_s) if n else np.zeros(0)
    a["overhead_left"] = np.zeros(n)
    a["rate"] = np.zeros(n)
    a["interference"] = np.ones(n)  # current interference factor of running jobs
    a["run_s"] = np.zeros(n)  # time spent running (restore included)
    a["interference_loss_s"] = np.zeros(n)  # integral of (1 - interference factor) while running
    a["checkpoint_end"] = np.full(n, np.inf)
    a["first_start"] = np.full(n, np.nan)
    a["end"] = np.full(n, np.nan)
    a["queued_since"] = np.full(n, np.nan)
    a["wait_s"] = np.zeros(n)  # total time spent queued or reserved
    a["attained_gpu_s"] = np.zeros(n)  # GPU-seconds received (Tiresias' attained service)
    a["preemptions"] = np.zeros(n, dtype=np.int64)
    a["needs_restore"] = np.zeros(n, dtype=bool)
    a["segment_gpus"] = np.array([j.segment_gpus for j in jobs], dtype=np.int64)
    return a


# Names of the per-job arrays, in the order _job_arrays makes them.
JOB_ARRAYS: tuple[str, ...] = tuple(_job_arrays([], SimConfig()))
# The per-job arrays the native rollout (Simulator.rollout_sect) reads or changes.
# The rules Simulator.replay_native runs in the core, by baseline name (envs.core's policy codes).
_LAS_THRESHOLDS = list(LAS_QUEUE_THRESHOLDS_GPU_S)  # envs.core's las_thresholds


def _guard_args(wait_guard) -> list[float]:
    """envs.core's wait_guard argument: [overdue_factor, min_wait_s], or [] for no guard."""
    return [] if wait_guard is None else [wait_guard.overdue_factor, wait_guard.min_wait_s]
NATIVE_REPLAY_POLICIES = {"sect": 0, "binpack": 1, "spread": 2, "topology": 3, "sjf": 4}

_ROLLOUT_JOB_ARRAYS = ("arrival", "estimate", "restore_s", "checkpoint_s", "checkpoint_end", "preemptions", "work_total", "mem_req", "comm_fraction", "tp_comm_share", "segment_gpus",
                       "gpus_req", "tp_degree", "priority", "kind", "preemptible", "work_done", "queued_since", "end",
                       "work_left", "rate", "overhead_left", "attained_gpu_s", "run_s", "interference_loss_s",
                       "interference", "wait_s", "first_start", "needs_restore", "state")

# The array objects _native_state hands the core, by path, but the cluster's constants and the
# allocation's arrays the ledger and power meter replace as they change (passed at each call): a
# SimView stays valid while each is the same object.
_viewed_arrays = operator.attrgetter(
    *_ROLLOUT_JOB_ARRAYS, "requested_gpu_s", "job_queue.shape", "job_queue.ids", "job_queue.sorted_ids", "job_queue.enqueue_seq",
    "job_queue.queued_remaining_s", "job_queue.per_shape", "load.job_slot", "load._table.i", "load._table.f",
    "load._table.pool_i", "load._table.pool_counts", "load.node_pressure", "load.uplink_demand", "load.dirty_node",
    "load.dirty_uplink", "ledger.gpu_owner", "ledger.gpu_reserved", "ledger.node_preemptible", "_shapes._columns")

# Each simulator's SimView with the array objects it was made over (a cache outside the
# simulator's own attributes: copies and forks make their own).
_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_job_values = operator.attrgetter(*_JOB_FIELDS)
_WORK_FIELD = _JOB_FIELDS.index("work_s")


def _with_work(job: Job, work_s: float) -> Job:
    """`dataclasses.replace(job, work_s=work_s)`, in half the time (Job has only init fields)."""
    values = list(_job_values(job))
    values[_WORK_FIELD] = work_s
    return Job(*values)


class Simulator:
    """Event-driven cluster simulator over one workload (jobs sorted by arrival, ids 0..n-1)."""

    def __init__(self, cluster: Cluster, jobs: list[Job], config: SimConfig | None = None):
        self.cluster = cluster
        self.config = config or SimConfig()
        self.jobs = jobs
        for i, j in enumerate(jobs):
            if j.job_id != i:
                raise ValueError(f"job ids must be 0..n-1 in list order; position {i} holds job {j.job_id}")
            if i and j.arrival_s < jobs[i - 1].arrival_s:
                raise ValueError(f"jobs must be sorted by arrival; job {i} arrives before job {i - 1}")
        c = cluster
        self.now = 0.0
        # Per job, indexed by id: (n,) arrays (see _job_arrays).
        for name, a in _job_arrays(jobs, self.config).items():
            setattr(self, name, a)
        # Some job asks for segments (Job.segment_gpus): the compiled event loop does not count them
        self.has_segments = bool(self.segment_gpus.any())
        self._num_needs_restore = 0  # needs_restore.sum()
        self.placement: dict[int, np.ndarray] = {}
        self.profiles: dict[int, PlacementProfile] = {}
        self.segments: list[Segment] = []
        self._segment_start: dict[int, float] = {}

        self._mem_ok: dict[float, np.ndarray] = {}  # (G,) no GPU memory below the key, per requirement

        self._shapes = _JobShapes()  # each job's shape (the queue's count per shape, run_events' feasibility test)
        shape_id, shapes = self._shapes.of(self)
        self.job_queue = JobQueue(self.gpus_req.tolist(), self.priority.tolist(), shape_id, len(shapes))  # the queued jobs
        self.ledger = AllocationLedger(c)  # GPU ownership and reservations, per-node counts
        self.load = LoadModel(c, self.config.speed_model)  # node and uplink load, placed jobs' profiles
        self.reserved: list[int] = []
        self.running = np.zeros(0, dtype=np.int64)
        self._scratch = np.empty(c.num_gpus, dtype=np.int64)  # kernels' scratch: running jobs (each holds a GPU)
        self._restoring: set[int] = set()  # running jobs with restore time left (overhead_left > 0)
        self.checkpointing: list[int] = []
        self._next_arrival = 0
        self.num_done = 0
        self.finished_order: list[int] = []
        self.version = 0  # bumped on every state change, for callers' caches

        # Integrals since t=0.
        self.jobs_in_system = 0
        self.jobs_in_system_s = 0.0  # integral of the number of jobs in the system: sum of JCTs
        self.energy_j = 0.0
        self.allocated_gpu_s = 0.0
        self.useful_work_s = 0.0  # reference GPU-seconds of work done
        self.preemption_gpu_s = 0.0  # GPU-seconds lost to checkpoint and restore
        self.num_preemptions = 0
        self.power = PowerMeter(c, self.ledger.node_owned)  # the power drawn, from GPUs held per node
        self._next_event = (-1, np.inf)  # (version, next_event_s()) cache
        self._state: ClusterState | None = None  # the decision state, a view refreshed per version
        self._job_lists = JobLists()  # what the arrived jobs are, as lists (the state's job_lists)
        self._state_arrived = -1  # arrivals its per-job views cover
        self.timeline: list[tuple] = []  # (t, allocated GPUs, queued, running, fragmented free GPUs, power W)
        self._events = None  # run_events' buffers, made on first use (a fork makes its own)
        self._spent = False  # consumed by a native rollout (rollout_sect): no longer stepped or forked
        self._future_arrays: dict[int, tuple] = {}  # id(a future-job list) -> (that list, its arrays, shapes): _arrays_of
        self._admit_arrivals()
        self._record()

    # ------------------------------------------------------------------ queries

    @property
    def num_jobs(self) -> int:
        return len(self.jobs)

    @property
    def num_arrived(self) -> int:
        """Jobs that have arrived (ids 0..num_arrived-1)."""
        return self._next_arrival

    @property
    def done(self) -> bool:
        return self.num_done == len(self.jobs)

    # Read-only views of the components, for schedulers, metrics and tests.

    @property
    def queue(self) -> list[int]:
        """Queued job ids in (re)arrival order."""
        return self.job_queue.jobs()

    @property
    def queue_len(self) -> int:
        return self.job_queue.length

    def queue_by_remaining(self) -> list[tuple[float, int, int]]:
        """The queue as (remaining estimate, enqueue rank, job id), shortest first, ties in queue
        order (a new list; the queue keeps it as arrays, `job_queue.sorted_ids`)."""
        return self.job_queue.by_remaining()

    def queue_ids(self) -> np.ndarray:
        """The queue as an int array (a copy), in (re)arrival order."""
        q = self.job_queue
        return q.ids[: q.length].copy()

    @property
    def queued_gpus(self) -> int:
        """GPUs the queued jobs ask for."""
        return self.job_queue.queued_gpus

    @property
    def queued_high_priority(self) -> int:
        """Queued jobs of the high priority class."""
        return self.job_queue.queued_high_priority

    @property
    def enqueue_seq(self) -> np.ndarray:
        """(n,) order of (re)entering the queue: FIFO rank."""
        return self.job_queue.enqueue_seq

    @property
    def queued_remaining_s(self) -> np.ndarray:
        """(n,) s, remaining estimate as of entering the queue; fixed while queued."""
        return self.job_queue.queued_remaining_s

    @property
    def gpu_owner(self) -> np.ndarray:
        """(G,) job holding each GPU, -1 none (changed in place)."""
        return self.ledger.gpu_owner

    @property
    def gpu_reserved(self) -> np.ndarray:
        """(G,) job each GPU is promised to, -1 none (changed in place)."""
        return self.ledger.gpu_reserved

    @property
    def node_free(self) -> np.ndarray:
        """(N,) GPUs neither owned nor reserved per node (replaced on every change)."""
        return self.ledger.node_free

    @property
    def node_owned(self) -> np.ndarray:
        """(N,) GPUs held per node (replaced on every change)."""
        return self.ledger.node_owned

    @property
    def node_preemptible(self) -> np.ndarray:
        """(N, priorities) GPUs held by running preemptible jobs per node and priority class."""
        return self.ledger.node_preemptible

    @property
    def alloc_version(self) -> int:
        """Bumped when GPU ownership or reservations change."""
        return self.ledger.alloc_version

    @property
    def allocated_gpus(self) -> int:
        """GPUs owned or reserved."""
        return self.ledger.allocated_gpus

    def free_gpu_mask(self) -> np.ndarray:
        """(G,) GPUs neither owned nor reserved (a copy: callers may change it)."""
        return self.ledger.free_mask.copy()

    def fragmented_free_gpus(self, node_free: np.ndarray | None = None) -> int:
        """Free GPUs on nodes that cannot host an 8-GPU gang (a whole node, if smaller) alone, now
        (a kept count) or with `node_free` GPUs free per node."""
        return self.ledger.fragmented_free_gpus(node_free)

    @property
    def node_pressure(self) -> np.ndarray:
        """(N,) memory-bandwidth pressure of the running jobs (changed in place)."""
        return self.load.node_pressure

    @property
    def uplink_demand(self) -> np.ndarray:
        """(S,) GB/s the running jobs put on each uplink (changed in place)."""
        return self.load.uplink_demand

    @property
    def power_w(self) -> float:
        """W the cluster draws now."""
        return self.power.power_w

    @property
    def next_arrival_s(self) -> float:
        return float(self.arrival[self._next_arrival]) if self._next_arrival < len(self.jobs) else np.inf

    def next_event_s(self) -> float:
        """Time of the next event (arrival, completion, checkpoint end); inf when none. Computed
        once per state version."""
        version, t = self._next_event
        if version != self.version:
            t = self._next_event_s()
            self._next_event = (self.version, t)
        return t

    def _next_event_s(self) -> float:
        t = self.next_arrival_s
        if len(self.running):
            r = self.running
            if _jit.ENABLED:
                t = min(t, _kernels.next_completion_s(self.now, r, self.overhead_left, self.work_left, self.rate,
                                                      bool(self._restoring)))
            elif self._restoring:
                t = min(t, float((self.now + self.overhead_left[r] + self.work_left[r] / self.rate[r]).min()))
            else:  # now + 0.0 is now, and rounding is monotonic: min(now + x) == now + min(x)
                t = min(t, self.now + float((self.work_left[r] / self.rate[r]).min()))
        if self.checkpointing:
            t = min(t, float(self.checkpoint_end[self.checkpointing].min()))
        return t

    def remaining_estimate_s(self, job_id):
        """The scheduler's estimate of remaining runtime at reference speed (never the truth), as
        `envs.decision.state.remaining_estimate_s`. Takes an id or an array."""
        return remaining_estimate_s(self.estimate, self.work_done, self.restore_s, self.needs_restore, job_id,
                                    self._num_needs_restore > 0)

    def decision_state(self) -> ClusterState:
        """What a scheduler knows now, as a view over this simulator's arrays (no copy): valid
        until the simulator changes, then refreshed in place. Per-job fields cover the jobs that
        have arrived; nothing of a job's true work or of future arrivals is in it."""
        s = self._state
        if s is None:
            ledger, load = self.ledger, self.load
            s = self._state = ClusterState(cluster=self.cluster, speed_model=self.config.speed_model, names=None,
                                           gpu_owner=ledger.gpu_owner, gpu_reserved=ledger.gpu_reserved,
                                           node_preemptible=ledger.node_preemptible, node_pressure=load.node_pressure,
                                           uplink_demand=load.uplink_demand, version=-1,
                                           job_lists=self._job_lists)
        elif s.version == self.version:
            return s
        n = self._next_arrival
        if self._state_arrived != n:  # the jobs known grow with arrivals: views of the arrived prefix
            self._state_arrived = n
            s.num_gpus, s.tp_degree, s.mem_per_gpu_gb = self.gpus_req[:n], self.tp_degree[:n], self.mem_req[:n]
            s.kind, s.priority, s.preemptible = self.kind[:n], self.priority[:n], self.preemptible[:n]
            s.comm_fraction, s.tp_comm_share = self.comm_fraction[:n], self.tp_comm_share[:n]
            s.estimate_s, s.work_done_s, s.requested_gpu_s = self.estimate[:n], self.work_done[:n], self.requested_gpu_s[:n]
            s.checkpoint_s, s.restore_s, s.needs_restore = self.checkpoint_s[:n], self.restore_s[:n], self.needs_restore[:n]
            s.arrival_s, s.queued_since_s, s.wait_s = self.arrival[:n], self.queued_since[:n], self.wait_s[:n]
            s.attained_gpu_s, s.preemptions, s.enqueue_seq = self.attained_gpu_s[:n], self.preemptions[:n], self.job_queue.enqueue_seq[:n]
            s.restore_left_s, s.checkpoint_end_s, s.rate = self.overhead_left[:n], self.checkpoint_end[:n], self.rate[:n]
            s.arrival_times_s, s.arrival_requested_gpu_s = s.arrival_s, s.requested_gpu_s
            s.segment_gpus = self.segment_gpus[:n] if self.has_segments else None
        q, ledger = self.job_queue, self.ledger
        s.now, s.version, s.alloc_version = self.now, self.version, ledger.alloc_version
        s.queue = q.ids[: q.length]
        s.queue_by_remaining_ids = q.sorted_ids[: q.length]
        s.running, s.checkpointing, s.reserved = self.running, self.checkpointing, self.reserved
        s.placement, s.profiles = self.placement, self.profiles
        s.queued_gpus, s.queued_high_priority = q.queued_gpus, q.queued_high_priority
        s.num_restores_owed = self._num_needs_restore
        s.free_mask, s.node_free = ledger.free_mask, ledger.node_free
        s.num_free, s.fragmented_free = ledger.num_free, ledger.fragmented
        return s

    # ------------------------------------------------------------------ decisions

    def _check_placement(self, job_id: int, gpus: np.ndarray, allowed: np.ndarray) -> None:
        if not 0 <= job_id < len(self.jobs):
            raise SchedulingError(f"no job {job_id}")
        if self.state.item(job_id) != JobState.QUEUED:  # .item(): numpy scalars compare slowly with enums
            raise SchedulingError(f"job {job_id} is not queued (state {JobState(self.state[job_id]).name})")
        ids = gpus.tolist()  # the checks in plain Python: the arrays are a few GPUs long
        if len(ids) != self.gpus_req[job_id] or len(set(ids)) != len(ids):
            raise SchedulingError(f"job {job_id} needs exactly {self.gpus_req[job_id]} distinct GPUs, got {len(gpus)}")
        if min(ids) < 0 or max(ids) >= self.cluster.num_gpus:
            raise SchedulingError(f"job {job_id}: GPU id out of range")
        if not all(allowed[gpus].tolist()):
            raise SchedulingError(f"job {job_id}: some GPUs are not available")
        mem = self.mem_req[job_id]
        mem_ok = self._mem_ok.get(mem)
        if mem_ok is None:
            mem_ok = self._mem_ok[mem] = ~(self.cluster.gpu_memory_gb < mem)
        if not all(mem_ok[gpus].tolist()):
            raise SchedulingError(f"job {job_id} needs {self.mem_req[job_id]:g} GB per GPU")
        segment = self.segment_gpus.item(job_id)
        if segment:
            straddles = self.cluster.segment_straddles(gpus, segment)
            if straddles is not None:
                raise SchedulingError(f"job {job_id}: segment {straddles} (GPUs {gpus[straddles * segment:(straddles + 1) * segment].tolist()}) "
                                      f"is not inside one block (segment_gpus {segment})")

    def start(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None = None) -> None:
        """Start a queued job on free GPUs now (gang rule: all of them at once). `profile`, when
        the caller has it, is the job's `placement_profile` on exactly these GPUs."""
        gpus = np.asarray(gpus, dtype=np.int64)
        self._check_placement(job_id, gpus, self.ledger.free_mask)
        self.job_queue.remove(job_id)
        self.wait_s[job_id] += self.now - self.queued_since[job_id]
        self._launch(job_id, gpus, profile)
        self._rates_changed()

    def preempt_and_start(self, job_id: int, gpus: np.ndarray, victims: list[int]) -> None:
        """Preempt `victims` (gracefully: each keeps its GPUs while it checkpoints) and reserve
        `gpus` for `job_id`, which starts when the last victim has left."""
        gpus = np.asarray(gpus, dtype=np.int64)
        if not victims:
            raise SchedulingError("preempt_and_start needs at least one victim")
        for v in victims:
            if self.state.item(v) != JobState.RUNNING or not self.preemptible[v] or self.priority[v] > self.priority[job_id]:
                raise SchedulingError(f"job {v} cannot be preempted for job {job_id}")
        allowed = self.ledger.free_gpu_mask()
        victim_gpus = np.concatenate([self.placement[v] for v in victims])
        allowed[victim_gpus] = True
        self._check_placement(job_id, gpus, allowed)
        if not np.isin(victim_gpus, gpus).any():
            raise SchedulingError(f"job {job_id}: the placement uses none of the victims' GPUs")
        for v in victims:
            self._preempt(v)
        self.job_queue.remove(job_id)
        self.state[job_id] = JobState.RESERVED
        self.reserved.append(job_id)
        self.placement[job_id] = gpus
        self.ledger.reserve(job_id, gpus)
        self.power.recount(self.ledger.node_owned)
        self._rates_changed()

    def preemption_cost_gpu_s(self, ids):
        """GPU-seconds a preemption of these jobs costs: checkpoint (bounded) plus restore."""
        return self.gpus_req[ids] * (self.checkpoint_s[ids] + self.restore_s[ids])

    def _preempt(self, v: int) -> None:
        ckpt = float(self.checkpoint_s[v])
        self._close_segment(v, preempted=True)
        self.running = self.running[self.running != v]
        self._stop(v)
        self.state[v] = JobState.CHECKPOINTING
        self.checkpoint_end[v] = self.now + ckpt
        self.checkpointing.append(v)
        self.rate[v] = 0.0
        self.preemptions[v] += 1
        self.num_preemptions += 1
        self.needs_restore[v] = True  # it was running, so it needed none
        self._num_needs_restore += 1
        self.preemption_gpu_s += float(self.preemption_cost_gpu_s(v))

    def _launch(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None = None, reserved: bool = False) -> None:
        """Run `job_id` on `gpus`: free ones (start) or, with `reserved`, the ones reserved for it."""
        self.placement[job_id] = gpus
        if profile is None:
            profile = placement_profile(self.cluster, self.jobs[job_id], gpus, self.config.speed_model)
        self.profiles[job_id] = profile
        placed = self.load.start(job_id, profile)
        self._mark_launched(job_id)
        ledger = self.ledger
        if self.preemptible[job_id]:
            ledger.count_preemptible(placed.nodes, placed.counts, self.priority[job_id], 1)
        ledger.claim(job_id, gpus, placed.nodes, placed.counts, reserved)
        self.power.nodes_changed(placed.nodes, ledger.node_owned)

    def _mark_launched(self, job_id: int) -> None:
        """A launched job's records: running now, paying the restore it owes, its first start
        and the start of its segment."""
        self.state[job_id] = JobState.RUNNING
        restore = 0.0
        if self.needs_restore[job_id]:
            restore = self.jobs[job_id].restore_s
            self._num_needs_restore -= 1
        self.overhead_left[job_id] = restore
        if restore > 0:
            self._restoring.add(job_id)
        self.needs_restore[job_id] = False
        if math.isnan(self.first_start[job_id]):
            self.first_start[job_id] = self.now
        self.running = np.concatenate((self.running, [job_id]))
        self._segment_start[job_id] = self.now

    def _stop(self, job_id: int) -> None:
        """A running job stops running (it finished or is preempted): it leaves the per-node
        and per-uplink bookkeeping and stops loading its nodes and uplinks."""
        placed = self.load.stop(job_id)
        if self.preemptible[job_id]:
            self.ledger.count_preemptible(placed.nodes, placed.counts, self.priority[job_id], -1)
        self._restoring.discard(job_id)

    def _rates_changed(self) -> None:
        """After a change of the running set: recompute the rates that can have changed (see
        LoadModel.update_rates) and the power drawn, and bump the version."""
        self.load.update_rates(self.rate, self.interference, self.running)
        self.power.update()
        self.version += 1

    # ------------------------------------------------------------------ forks

    def fork(self, work: dict[int, float] | None = None, future_jobs: list[Job] | None = None) -> Simulator:
        """An independent copy of this simulator at this moment, for lookahead: stepping the fork
        never changes this simulator, nor the other way round. With no arguments the fork
        continues bit for bit as this simulator would (the same events, floats, decision states
        and candidates).

        `work`: job id -> true work (reference GPU-seconds) for jobs that have arrived and are
        not done (a sampled truth, for a non-clairvoyant lookahead). The job's work becomes
        max(work, work done + 1.0): a job never has less work than it has done, and one whose
        sample is below what it has done finishes 1 reference-second of work later. Its rates
        stay. A value equal to the job's work now changes nothing.

        `future_jobs`: replaces every job that has not arrived yet (ids from `arrived` =
        the number of jobs arrived on) with these, which must have ids arrived, arrived + 1, ...
        in order, be sorted by arrival and arrive at or after now (one arriving at now enters
        the queue at the fork's next advance, which takes no time). The fork's `num_jobs` is then
        arrived + len(future_jobs); an empty list means no more arrivals.

        Both raise ValueError naming the job that breaks a rule.

        A fork's `timeline` and `segments` start at the fork: both start empty (the stretches
        running now enter its segments when they end, with their start before the fork), so
        timeline-based metrics (the fragmentation of envs.sim.metrics) describe only what followed
        the fork; everything else is this simulator's history, copied.

        Shared with the fork, not copied (nothing changes them in place): the cluster, the config,
        the Job records, placements' GPU arrays and PlacementProfiles, the load model's `Placed`
        records and the `_mem_ok` masks. Everything mutable else is copied; the decision state is
        not: the fork makes its own on first use (so its candidate layer's caches start empty).
        """
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout (rollout_sect)")
        cls = type(self)
        f = cls.__new__(cls)
        arrived = self._next_arrival
        jobs = self.jobs
        new_jobs = None  # the fork's Job list, when it differs
        if future_jobs is not None:
            new_jobs = jobs[:arrived]
            t, prev = self.now, self.now
            for k, j in enumerate(future_jobs):
                if j.job_id != arrived + k:
                    raise ValueError(f"future job {j.job_id} at position {k}: future jobs need ids {arrived}, {arrived + 1}, ... "
                                     f"in order ({arrived} jobs have arrived)")
                if not j.arrival_s >= t:
                    raise ValueError(f"future job {j.job_id} arrives at {j.arrival_s!r}, before now ({t!r})")
                if j.arrival_s < prev:
                    raise ValueError(f"future jobs must be sorted by arrival; job {j.job_id} arrives before job {j.job_id - 1}")
                prev = j.arrival_s
            new_jobs.extend(future_jobs)
        if work:
            self._check_work(work)

        # Per-job arrays: copied, or the arrived jobs' rows and new ones for the future jobs.
        if new_jobs is None:
            for name in JOB_ARRAYS:
                setattr(f, name, getattr(self, name).copy())
            f.jobs = jobs.copy()
        else:
            tails = self._arrays_of(future_jobs)[0]
            for name in JOB_ARRAYS:
                setattr(f, name, np.concatenate((getattr(self, name)[:arrived], tails[name])))
            f.jobs = new_jobs
        f.has_segments = self.has_segments if future_jobs is None else bool(f.segment_gpus.any())
        if work:
            if new_jobs is None:
                new_jobs = f.jobs
            for j, w in work.items():
                j = int(j)
                w = max(float(w), float(self.work_done[j]) + 1.0)
                if w == self.work_total[j]:
                    continue
                f.work_total[j] = w
                f.work_left[j] = w - self.work_done[j]
                new_jobs[j] = _with_work(new_jobs[j], w)
        f.cluster = self.cluster
        f.config = self.config
        f._shapes = self._shapes if future_jobs is None else self._shapes.prefix(arrived)
        f.now = self.now
        f._num_needs_restore = self._num_needs_restore
        f.placement = self.placement.copy()  # the GPU arrays are never changed in place
        f.profiles = self.profiles.copy()
        f.segments = []  # a fork's segments start at the fork
        f._segment_start = self._segment_start.copy()
        f._mem_ok = self._mem_ok.copy()  # of masks never changed in place
        if future_jobs is None:
            f.job_queue = self.job_queue.copy()
        else:
            q = self.job_queue
            shape_id, shapes = f._shapes.of(f)
            f.job_queue = q.copy(q._gpus[:arrived] + [int(j.gpus) for j in future_jobs],
                                 q._priority[:arrived] + [int(j.priority) for j in future_jobs], shape_id, len(shapes))
        f.ledger = self.ledger.copy()
        f.load = self.load.copy()
        f.reserved = self.reserved.copy()
        f.running = self.running.copy()
        f._scratch = np.empty_like(self._scratch)
        f._restoring = self._restoring.copy()
        f.checkpointing = self.checkpointing.copy()
        f._next_arrival = arrived
        f.num_done = self.num_done
        f.finished_order = self.finished_order.copy()
        f.version = self.version
        f.jobs_in_system = self.jobs_in_system
        f.jobs_in_system_s = self.jobs_in_system_s
        f.energy_j = self.energy_j
        f.allocated_gpu_s = self.allocated_gpu_s
        f.useful_work_s = self.useful_work_s
        f.preemption_gpu_s = self.preemption_gpu_s
        f.num_preemptions = self.num_preemptions
        f.power = self.power.copy()
        # The next event moves when the truth or the arrivals do; else the cached one holds.
        f._next_event = self._next_event if new_jobs is None else (-1, np.inf)
        f._state = None  # the fork's decision state is its own, made on first use
        lists = self._job_lists
        f._job_lists = JobLists({name: getattr(lists, name).copy() for name in JobLists.__slots__})
        f._state_arrived = -1
        f.timeline = []  # a fork's timeline starts at the fork
        f._events = None
        f._spent = False
        f._future_arrays = {}
        return f

    # ------------------------------------------------------------------ events between decisions, compiled

    def job_shapes(self) -> tuple[np.ndarray, list[tuple]]:
        """(n,) each job's shape id and the shapes, (GPUs, TP degree, GB per GPU asked, priority):
        what a job's feasibility class (envs.decision.window) is made of, for `run_events`' stop test. Of
        every job of the workload, arrived or not: the simulator's own mechanics (when to hand
        the scheduler a decision), never shown to a scheduler."""
        return self._shapes.of(self)

    def run_events(self, class_of_shape: np.ndarray, class_index: tuple, until: float | None = None,
                   test_first: bool = False, las: tuple | None = None) -> int:
        """`advance()` event after event in one compiled call (envs.core.kernels.run_events), until a
        queued job's class fits (`class_of_shape`: per shape of `job_shapes`, its class, -1 when
        none is registered; `class_index`: envs.decision.window's `_class_index` for those classes, its five
        class tables then its four tables of TP groups that span trays) or something needs Python. Returns why it stopped (EV_* of
        envs.core.kernels): EV_FEASIBLE, EV_DONE, EV_UNTIL (the next event is after `until`; nothing
        done), EV_NO_EVENT (there is none; nothing done), EV_NEW_CLASS (a job of an unregistered
        shape arrived or is queued), EV_ROOM (its buffers are full). Every event is the one
        `advance()` would process, bit for bit. With `test_first` it tests the state as it is
        before the first event (else the caller has: it tests after each). With `las`
        (envs.decision.window.las_stop_args: the LAS test's rows, thresholds and starvation factor) the
        stop test is the decision loop's `can_place` instead of `any_feasible`: a queued job that
        only preempt-las places stops it too. Only on the compiled path, and only with no job
        checkpointing or reserved (ValueError)."""
        if not _jit.ENABLED or self.checkpointing or self.reserved or self.has_segments:
            raise ValueError("run_events needs the compiled path, no job checkpointing or reserved and no segment "
                             "request in the workload (the compiled event loop does not count segments)")
        return self._run_events(class_of_shape, class_index, until, test_first, las, -1, _NO_GPUS)

    def start_and_run(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None, class_of_shape: np.ndarray,
                      class_index: tuple, until: float | None = None, las: tuple | None = None) -> int:
        """`start(job_id, gpus, profile)` and then `run_events(class_of_shape, class_index, until,
        test_first=True, las=las)`, in one compiled call: the start's checks and records here, its queue,
        load, GPU, power and rate bookkeeping in the call (envs.core.kernels._launch_job), the same
        operations in the same order as the two calls. Returns run_events' stop reason. The same
        conditions as run_events (ValueError); SchedulingError as `start`."""
        if not _jit.ENABLED or self.checkpointing or self.reserved or self.has_segments:
            raise ValueError("start_and_run needs the compiled path, no job checkpointing or reserved and no segment "
                             "request in the workload (the compiled event loop does not count segments)")
        gpus = np.asarray(gpus, dtype=np.int64)
        self._check_placement(job_id, gpus, self.ledger.free_mask)
        self.wait_s[job_id] += self.now - self.queued_since[job_id]
        self.placement[job_id] = gpus
        if profile is None:
            profile = placement_profile(self.cluster, self.jobs[job_id], gpus, self.config.speed_model)
        self.profiles[job_id] = profile
        self.load.start(job_id, profile, add_load=False)
        self._mark_launched(job_id)
        if gpus.flags.writeable:  # the compiled call takes read-only GPU arrays (one signature: _NO_GPUS)
            gpus = gpus.view()
            gpus.flags.writeable = False
        return self._run_events(class_of_shape, class_index, until, True, las, job_id, gpus)

    def rollout_sect(self, queue_window: int, until: float, first_job: int = -2, first_gpus=(), first_victims=()) -> dict:
        """A lookahead's rollout of the `sect` rule from this decision state, in one native call
        (envs.core): at each decision, sect's choice over the queue window
        (envs.decision.candidates.build_candidates without `preempt-las`, baselines/sect.py), carried out
        as `envs.sim.replay.decide` does, then the events to the next decision (checkpoint ends and
        reserved jobs' launches among them), until `until` (a decision at or after it is still
        carried out, a WAIT's event too, as agents.lookahead's loop does) or the workload's end;
        then, short of the end, the integration up to `until`. Bit for bit the Python loop's
        floats and decisions. Its first action is sect's choice (`first_job` -2), WAIT (-1), or
        the start of queued job `first_job` on `first_gpus` (a valid candidate's: free GPUs, or
        with `first_victims` free and the victims' GPUs, the victims preempted as
        `preempt_and_start` does; checked for the gang rule and the victims' eligibility,
        ValueError).

        It consumes the simulator: afterwards its per-job arrays, its time, integrals and
        counters are the rollout's, what `objective_total` and the lookahead's terminal cost
        read, but its Python records (segments, placements, load records, the timeline) are not,
        so it can no longer be stepped or forked. Needs the compiled path and a decision state
        (ValueError). Returns counts: decisions, starts, events."""
        decisions, starts, events, stuck = self._native_call(
            "rollout_sect", _core.rollout_sect, int(queue_window), PRIORITY_HIGH, float(until), int(first_job),
            [int(g) for g in first_gpus], [int(v) for v in first_victims])
        if stuck:
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        return {"decisions": decisions, "starts": starts, "events": events}

    def replay_native(self, policy: str, queue_window: int) -> int:
        """`envs.sim.replay.replay(self, make_baseline(policy).select, queue_window,
        preempt_las=False)` in one native call (envs.core), for `sect` and the FIFO rules
        (`binpack`, `spread`, `topology`) and `sjf` (`NATIVE_REPLAY_POLICIES`): from this state to the
        workload's end, the same decisions, floats, segments and timeline rows bit for bit.
        Afterwards the per-job arrays, time, integrals, counters, segments, placements, finished
        order and timeline are the replay's (what envs.sim.metrics and the schedule digests read), but
        the load records are not, so the simulator can no longer be stepped or forked, as after
        `rollout_sect`. Returns the number of decisions. Needs the compiled path (ValueError);
        SchedulingError where the Python loop would raise it."""
        code = NATIVE_REPLAY_POLICIES.get(policy)
        if code is None:
            raise ValueError(f"replay_native: no native rule '{policy}' (native: {', '.join(NATIVE_REPLAY_POLICIES)})")
        decisions, _, _, stuck, rec = self._native_call("replay_native", _core.replay, int(queue_window), PRIORITY_HIGH, code)
        self._write_records(*rec)
        self.profiles.clear()
        if stuck:
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        return decisions

    def native_candidates(self, queue_window: int, preempt_las: bool = True, wait_guard=None, features=None):
        """`envs.decision.candidates.build_candidates(self.decision_state(), queue_window, preempt_las,
        wait_guard)` worked out in one native call (envs.core): the same window, mask and
        placements (GPUs and victims) bit for bit, every valid candidate placed at once. With
        `features` (two float32 arrays, (K, NUM_CANDIDATE_FEATURES) and (NUM_GLOBAL_FEATURES,)),
        the same call writes the candidate set's features there, clipped to [-1, 1] as the env's
        observation (envs.decision.features.candidate_features, bit for bit). It reads this simulator's
        arrays and changes nothing. Needs the compiled path (ValueError)."""
        if not _jit.ENABLED:
            raise ValueError("native_candidates needs the compiled path")
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout")
        from envs.decision.candidates import candidates_from_arrays
        guard = _guard_args(wait_guard)
        if features is not None:
            from envs.decision.features import ensure_native_schema
            ensure_native_schema()  # the core's columns are the schema's (RuntimeError naming the first that is not)
        out = (None, None, False) if features is None else (*features, True)
        window, mask, index, gpus, victims = self._native_view().candidates(
            *self._view_state(), int(queue_window), PRIORITY_HIGH, bool(preempt_las), guard, _LAS_THRESHOLDS,
            STARVATION_FACTOR, *out)
        return candidates_from_arrays(self.decision_state(), window, mask.view(bool), index, gpus, victims, features)

    def _native_call(self, name: str, call, *args) -> list:
        """`call(*self._native_state(), *args)`: a native call that runs on this simulator's arrays
        in place and consumes it. The simulator is spent afterwards. Its scalars, its running,
        checkpointing and reserved jobs are the call's. Returns the call's other results. Needs the
        compiled path (ValueError, naming `name`)."""
        if not _jit.ENABLED:
            raise ValueError(f"{name} needs the compiled path")
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout")
        state = self._native_state()
        self._spent = True
        fl, it, running, checkpointing, reserved, *rest = call(*state, *args)
        self._take_native_scalars(fl, it, running, checkpointing, reserved)
        return rest

    def _take_native_scalars(self, fl, it, running, checkpointing, reserved) -> None:
        """A native call's scalars and lists (as `_native_state` orders them) into this simulator's."""
        ledger, power, q = self.ledger, self.power, self.job_queue
        self.checkpointing, self.reserved = checkpointing, reserved
        (self.now, self.jobs_in_system_s, self.energy_j, self.allocated_gpu_s, self.useful_work_s, power.power_w,
         self.preemption_gpu_s) = fl
        (ledger.num_free, ledger.fragmented, ledger.alloc_version, self.num_done, self.jobs_in_system,
         self._next_arrival, q.length, q._enqueued, q.queued_gpus, q.queued_high_priority, self._num_needs_restore,
         self.num_preemptions) = it
        self.running = np.array(running, dtype=np.int64)

    def native_episode(self, queue_window: int, preempt_las: bool = True, wait_guard=None) -> NativeEpisode:
        """The rest of this simulator's episode carried on by the native core (envs.core's
        `Episode`), one call per decision: `NativeEpisode.step` carries out a candidate of the last
        decision, runs the events to the next decision and writes its candidate set's features,
        as `envs.sim.replay.decide` and `candidates_now` do with the same `queue_window`,
        `preempt_las` and `wait_guard`, bit for bit. It works on this simulator's arrays in place:
        the simulator is spent (no longer stepped, forked or read for its decision state) until the
        episode's end, when its scalars and records (segments, placements, finished order, timeline)
        are written back, as after `replay_native`; its per-job arrays and the scalars the reward
        reads are the core's after every step. Needs the compiled path (ValueError)."""
        if not _jit.ENABLED:
            raise ValueError("native_episode needs the compiled path")
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout")
        from envs.decision.features import ensure_native_schema
        ensure_native_schema()  # the core's columns are the schema's (RuntimeError naming the first that is not)
        guard = _guard_args(wait_guard)
        state = self._native_state()
        episode = _core.Episode(*state, PRIORITY_HIGH, int(queue_window), bool(preempt_las), guard, _LAS_THRESHOLDS,
                                STARVATION_FACTOR)
        self._spent = True
        return NativeEpisode(self, episode)

    def _write_records(self, seg_job, seg_start, seg_end, seg_preempted, seg_gpu_end, seg_gpus, timeline) -> None:
        """A native replay's records into this simulator's: its segments (GPUs as views of
        `seg_gpus`, which no one changes), each job's last placement, the finished order, the
        timeline rows. Without the cyclic garbage collector meanwhile: these are many small
        objects and no cycles, and its passes over a trace's heap cost more than the rest."""
        placement, began, segments, finished = self.placement, self._segment_start, self.segments, self.finished_order
        collecting = gc.isenabled()
        gc.disable()
        try:
            lo = 0
            for j, start, end, preempted, hi in zip(seg_job.tolist(), seg_start.tolist(), seg_end.tolist(),
                                                    seg_preempted.tolist(), seg_gpu_end.tolist()):
                if hi > lo:  # started in this call: its GPUs and start are the core's
                    gpus = placement[j] = seg_gpus[lo:hi]
                    began.pop(j, None)
                else:  # running when the call began: the simulator's own
                    gpus, start = placement[j].copy(), began.pop(j)
                segments.append(Segment(j, gpus, start, end, bool(preempted)))
                if not preempted:
                    finished.append(j)
                lo = hi
            rows = timeline.reshape(-1, 6)
            self.timeline.extend(zip(rows[:, 0].tolist(), rows[:, 1].astype(np.int64).tolist(),
                                     rows[:, 2].astype(np.int64).tolist(), rows[:, 3].astype(np.int64).tolist(),
                                     rows[:, 4].astype(np.int64).tolist(), rows[:, 5].tolist()))
        finally:
            if collecting:
                gc.enable()

    def native_world(self, work: dict[int, float] | None = None, future_jobs: list[Job] | JobSlice | None = None) -> NativeWorld:
        """The native core's own copy of the state `fork(work, future_jobs)` would have, made
        without that fork, for many rollouts from it (`NativeWorld.rollout_sect`): each runs on a
        copy of the arrays it changes, as on such a fork consumed by `rollout_sect`, with the same
        results bit for bit. `work` as `fork`'s; `future_jobs` as `fork`'s, except that the jobs'
        own ids are not read (they take ids arrived, arrived + 1, ... in order) and a `JobSlice`
        of a list kept by the caller may stand for them (its arrays are made once per list). This
        simulator is not changed. ValueError (naming the job) as `fork`'s; needs the compiled path."""
        if not _jit.ENABLED:
            raise ValueError("native_world needs the compiled path")
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout")
        args = list(self._native_state())
        arrays = args[2]  # a new dict of this simulator's own arrays: entries are replaced, never changed
        arrived = self._next_arrival
        if future_jobs is not None:
            tail, tail_shapes = self._future_tail(future_jobs)
            for name in _ROLLOUT_JOB_ARRAYS:
                arrays[name] = np.concatenate((arrays[name][:arrived], tail[name]))
            n = len(arrays["arrival"])
            ids, shapes = self._shapes.of(self)
            columns = self._shapes.columns()
            index, added = self._shapes.index, {}
            tail_ids = np.empty(len(tail_shapes), dtype=np.int64)
            for k, shape in enumerate(tail_shapes):  # shapes new to this simulator get ids after its own
                i = index.get(shape)
                if i is None:
                    i = added.get(shape)
                    if i is None:
                        i = added[shape] = len(shapes) + len(added)
                tail_ids[k] = i
            if added:
                new = list(added)
                columns = {"shape_gpus": np.concatenate((columns["shape_gpus"], [x[0] for x in new])),
                           "shape_tp": np.concatenate((columns["shape_tp"], [x[1] for x in new])),
                           "shape_mem": np.concatenate((columns["shape_mem"], [x[2] for x in new])),
                           "shape_priority": np.concatenate((columns["shape_priority"], [x[3] for x in new])),
                           "shape_segment": np.concatenate((columns["shape_segment"], _shape_segments(new)))}
            arrays.update(columns)
            arrays["shape_id"] = np.concatenate((ids[:arrived], tail_ids))
            q = self.job_queue
            per_shape = np.zeros(max(len(columns["shape_gpus"]), len(q.per_shape)), dtype=np.int64)
            per_shape[: len(q.per_shape)] = q.per_shape
            q_ids, q_sorted = np.empty(max(n, 1), dtype=np.int64), np.empty(max(n, 1), dtype=np.int64)
            q_ids[: q.length], q_sorted[: q.length] = q.ids[: q.length], q.sorted_ids[: q.length]
            q_seq, q_remaining = np.zeros(n, dtype=np.int64), np.zeros(n)
            q_seq[:arrived], q_remaining[:arrived] = q.enqueue_seq[:arrived], q.queued_remaining_s[:arrived]
            arrays.update(q_ids=q_ids, q_sorted=q_sorted, q_seq=q_seq, q_remaining=q_remaining, q_per_shape=per_shape)
        if work:
            ids, w = self._work_arrays(work)
            if future_jobs is None:
                arrays["work_total"], arrays["work_left"] = arrays["work_total"].copy(), arrays["work_left"].copy()
            total, left, done = arrays["work_total"], arrays["work_left"], self.work_done[ids]
            w = np.maximum(w, done + 1.0)  # as fork's max(w, done + 1.0): w is finite
            change = w != total[ids]  # an unchanged total keeps its work left as integrated
            ids, w = ids[change], w[change]
            total[ids] = w
            left[ids] = w - done[change]
        return NativeWorld(_core.World(*args), arrays)

    def _future_tail(self, future_jobs: list[Job] | JobSlice) -> tuple[dict[str, np.ndarray], list[tuple]]:
        """The rollout's per-job arrays (`_ROLLOUT_JOB_ARRAYS`) and the shapes of jobs to come,
        checked as `fork` checks them: at or after now, sorted by arrival."""
        if isinstance(future_jobs, JobSlice):
            whole, shapes = self._arrays_of(future_jobs.jobs)
            lo, hi = future_jobs.lo, future_jobs.hi
            tail, shapes = {name: whole[name][lo:hi] for name in _ROLLOUT_JOB_ARRAYS}, shapes[lo:hi]
        else:
            whole, shapes = self._arrays_of(list(future_jobs))
            tail = {name: whole[name] for name in _ROLLOUT_JOB_ARRAYS}
        arrival = tail["arrival"]
        if len(arrival):
            if not arrival[0] >= self.now:
                raise ValueError(f"future job {self._next_arrival} arrives at {float(arrival[0])!r}, before now ({self.now!r})")
            later = np.flatnonzero(arrival[1:] < arrival[:-1])
            if len(later):
                k = self._next_arrival + int(later[0]) + 1
                raise ValueError(f"future jobs must be sorted by arrival; job {k} arrives before job {k - 1}")
        return tail, shapes

    def _arrays_of(self, jobs: list[Job]) -> tuple[dict[str, np.ndarray], list[tuple]]:
        """`_job_arrays(jobs)` and the jobs' shapes, made once per list object this simulator is
        handed (a lookahead's sampler hands back the same list between arrivals: its renumbered
        future for `fork`, its fresh draw for `native_world`); only ever read."""
        hit = self._future_arrays.get(id(jobs))
        if hit is None or hit[0] is not jobs:
            if len(self._future_arrays) >= 64:
                self._future_arrays.clear()
            a = _job_arrays(jobs, self.config)
            hit = self._future_arrays[id(jobs)] = (jobs, a, _shapes_of(a))
        return hit[1], hit[2]

    def _work_arrays(self, work: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
        """`work` as arrays of job ids and work, checked by `_check_work`'s rules (its error
        for the first entry that breaks one)."""
        keys, values = list(work), list(work.values())
        if all(type(j) is int or isinstance(j, np.integer) for j in keys):
            ids = np.array(keys, dtype=np.int64)
            try:
                w = np.array(values, dtype=float)
            except (TypeError, ValueError):
                w = None
            if w is not None and w.ndim == 1 and ((ids >= 0) & (ids < self._next_arrival)).all() \
                    and (self.state[ids] != JobState.DONE).all() and ((w > 0) & np.isfinite(w)).all():
                return ids, w
        self._check_work(work)  # names the first entry that breaks a rule; what it lets through is converted one by one
        return np.array([int(j) for j in keys], dtype=np.int64), np.array([float(x) for x in values])

    def _check_work(self, work: dict[int, float]) -> None:
        """`fork`'s rules for sampled work: each job arrived, not done, its work positive and finite."""
        arrived = self._next_arrival
        for j, w in work.items():
            if not (isinstance(j, (int, np.integer)) and 0 <= j < arrived):
                raise ValueError(f"work for job {j!r}: it has not arrived ({arrived} jobs have arrived)")
            if self.state.item(j) == JobState.DONE:
                raise ValueError(f"work for job {j}: it is done")
            if not (w > 0 and math.isfinite(w)):
                raise ValueError(f"work for job {j}: {w!r} is not a positive finite number")

    def native_can_place(self, preempt_las: bool = True) -> bool:
        """`envs.decision.window.can_place(self.decision_state())` (with `preempt_las`; else
        `any_feasible`) in one native call: some queued job has a valid placement. Reads the
        arrays, changes nothing. Needs the compiled path and an unspent simulator."""
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout")
        return self._native_view().can_place(*self._view_state(), PRIORITY_HIGH, bool(preempt_las), _LAS_THRESHOLDS,
                                             STARVATION_FACTOR)

    def _view_state(self) -> tuple:
        """What a call over `_native_view` passes besides its own arguments: the allocation's
        arrays the ledger replaces, the running, checkpointing and reserved jobs with the reserved
        GPUs, the float and integer scalars (as `_native_state` orders them)."""
        ledger, q, power = self.ledger, self.job_queue, self.power
        reserved = self.reserved
        return ((ledger.free_mask, ledger.node_owned, ledger.node_free, power.node_power_w, power.node_on),
                self.running.tolist(), list(self.checkpointing), list(reserved),
                [self.placement[r].tolist() for r in reserved] if reserved else [],
                [self.now, self.jobs_in_system_s, self.energy_j, self.allocated_gpu_s, self.useful_work_s, power.power_w,
                 self.preemption_gpu_s],
                [ledger.num_free, ledger.fragmented, ledger.alloc_version, self.num_done, self.jobs_in_system,
                 self._next_arrival, q.length, q._enqueued, q.queued_gpus, q.queued_high_priority, self._num_needs_restore,
                 self.num_preemptions])

    def _native_view(self):
        """envs.core.SimView over this simulator's arrays, parsed once and made again when one of
        the arrays it views was replaced (the load records grow by reallocation, the shapes'
        columns are remade when a shape is added)."""
        key = _viewed_arrays(self)
        hit = _VIEWS.get(self)
        if hit is None or not all(map(operator.is_, key, hit[0])):
            cluster, model, arrays = self._native_state()[:3]  # files every job's shape first
            hit = _VIEWS[self] = (_viewed_arrays(self), _core.SimView(cluster, model, arrays))
        return hit[1]

    def _native_state(self) -> tuple:
        """The core's arguments for this simulator's state: the cluster, the rate model, the
        arrays by name (this simulator's own, not copies), the running, checkpointing and
        reserved jobs with the reserved GPUs, the float and integer scalars."""
        ledger, load, power, q, table = self.ledger, self.load, self.power, self.job_queue, self.load._table
        self._shapes.of(self)  # every job's shape filed
        consts = (self._events.consts if self._events is not None else _event_constants(self.cluster))
        arrays = {name: getattr(self, name) for name in _ROLLOUT_JOB_ARRAYS}
        arrays.update(
            **self._shapes.columns(), shape_id=q.shape, q_ids=q.ids, q_sorted=q.sorted_ids, q_seq=q.enqueue_seq,
            q_remaining=q.queued_remaining_s, q_per_shape=q.per_shape, job_slot=load.job_slot, rec_i=table.i,
            rec_f=table.f, pool_i=table.pool_i, pool_counts=table.pool_counts, node_pressure=load.node_pressure,
            uplink_demand=load.uplink_demand, dirty_node=load.dirty_node, dirty_uplink=load.dirty_uplink,
            gpu_owner=ledger.gpu_owner, gpu_reserved=ledger.gpu_reserved, free_mask=ledger.free_mask,
            node_owned=ledger.node_owned, node_free=ledger.node_free, node_preemptible=ledger.node_preemptible,
            node_power_w=power.node_power_w, node_on=power.node_on, power_terms=consts.power_terms,
            whole_gang=consts.whole_gang, requested_gpu_s=self.requested_gpu_s)
        return (_core.cluster_arrays(self.cluster), _core.rate_model(self.config.speed_model), arrays,
                *self._view_state()[1:])

    def _run_events(self, class_of_shape: np.ndarray, class_index: tuple, until: float | None, test_first: bool,
                    las: tuple | None, launch: int, launch_gpus: np.ndarray) -> int:
        K = _kernels
        ev = self._events
        if ev is None:
            ev = self._events = _EventBuffers(self.cluster)
        ledger, load, power, q, table = self.ledger, self.load, self.power, self.job_queue, self.load._table
        fs, iscal = ev.fs, ev.iscal
        fs[:] = (self.now, self.jobs_in_system_s, self.energy_j, self.allocated_gpu_s, self.useful_work_s,
                 power.power_w, np.inf if until is None else until)
        nrun = len(self.running)
        iscal[:] = (ledger.num_free, ledger.fragmented, ledger.alloc_version, self.version, self.num_done,
                    self.jobs_in_system, self._next_arrival, q.length, q._enqueued, q.queued_gpus,
                    q.queued_high_priority, nrun, 0, 0, 0, self._num_needs_restore > 0, 0)
        ev.run[:nrun] = self.running
        node_owned, node_free = ledger.node_owned.copy(), ledger.node_free.copy()
        first = self._next_arrival
        c = ev.consts
        stop = K.run_events(
            fs, iscal, ev.run, ev.order, ev.finished, ev.timeline, self.arrival, self.estimate, self.work_done,
            self.restore_s, self.needs_restore, self.state, self.queued_since, self.end, self.work_left,
            self.work_total, self.gpus_req, self.rate, self.overhead_left, self.attained_gpu_s, self.run_s,
            self.interference_loss_s, self.interference, self.preemptible, self.priority, q.ids, q.sorted_ids,
            q.queued_remaining_s, q.enqueue_seq, q.per_shape, load.job_slot, table.f, table.i, table.pool_i, table.pool_counts,
            load.node_pressure, load._node_gpus, load.uplink_demand, load._uplink_cap, load.dirty_node,
            load.dirty_uplink, REFERENCE_NET_PER_GPU_GBPS, ledger.gpu_owner, ledger.free_mask, node_owned, node_free,
            ledger.node_preemptible, c.node_first_gpu, c.node_gpus, c.whole_gang, power.node_power_w, power.node_on,
            c.power_terms, q.shape, class_of_shape, *class_index, PRIORITY_HIGH, self.cluster.num_gpus, test_first,
            ledger.gpu_reserved, las is not None, c.gpu_node, *(_NO_LAS if las is None else las), launch, launch_gpus)
        events = int(iscal[K.I_EVENTS])
        if not events and launch < 0:
            return stop
        # Write back the scalars, then what stays Python: records of the finished, the arrivals' lists.
        self.now, self.jobs_in_system_s, self.energy_j, self.allocated_gpu_s, self.useful_work_s, power.power_w = \
            fs[:6].tolist()
        (ledger.num_free, ledger.fragmented, ledger.alloc_version, self.version, self.num_done, self.jobs_in_system,
         self._next_arrival, q.length, q._enqueued, q.queued_gpus, q.queued_high_priority, nrun, _, nfin,
         released, _, claimed) = iscal.tolist()
        if released or claimed:
            power.stale = False
            ledger.node_owned, ledger.node_free = node_owned, node_free
        if self._restoring:  # as _integrate and _stop keep it: running jobs with restore time left
            self._restoring = {j for j in self._restoring if self.overhead_left[j] > 0 and self.state.item(j) != JobState.DONE}
        if released:
            self.running = ev.run[:nrun].copy()
            placement, profiles, placed, node_jobs, crossing = self.placement, self.profiles, load.placed, load.node_jobs, load.crossing
            seg_start, end = self._segment_start, self.end
            for j in ev.finished[:nfin].tolist():
                self.segments.append(Segment(j, placement[j].copy(), seg_start.pop(j), float(end[j]), False))
                profiles.pop(j, None)
                for n in placed.pop(j).nodes:
                    node_jobs[n].discard(j)
                crossing.pop(j, None)
                self.finished_order.append(j)
        if self._next_arrival > first:
            jobs, add = self.jobs, self._job_lists.add
            for j in range(first, self._next_arrival):
                job = jobs[j]
                add(job.gpus, job.tp_degree, job.mem_per_gpu_gb, job.kind, job.priority, job.preemptible,
                    job.comm_fraction, job.tp_comm_share)
        self.timeline.extend((r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5])
                             for r in ev.timeline[:events].tolist())
        return stop

    # ------------------------------------------------------------------ time

    def advance(self) -> float:
        """Jump to the next event and process everything that happens then. Returns the time
        advanced. Raises SchedulingError when there is no future event (a deadlock: nothing
        runs, nothing arrives, and the scheduler waited)."""
        if self._spent:
            raise ValueError("this simulator was consumed by a native rollout (rollout_sect)")
        t = self.next_event_s()
        if not math.isfinite(t):
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        dt = t - self.now
        finished = self._integrate(dt, finish=True)
        self.now = t
        changed = self._finish_completed(finished) | self._finish_checkpoints()
        self._admit_arrivals()
        if changed:
            self._rates_changed()
        else:
            self.version += 1
        self._record()
        return dt

    def advance_until(self, t: float) -> float:
        """Advance to `t` or to the next event, whichever comes first (a lookahead's horizon).
        When the next event is later than `t`, integrate up to `t` and stop there, no event
        processed (the version is bumped: time changed); otherwise exactly `advance()`. Returns
        the time advanced. Stopping splits the integration, so the floats that follow may differ
        from never stopping in the last bits. Raises ValueError when `t` is before now."""
        if not t >= self.now:
            raise ValueError(f"advance_until({t!r}): that is before now ({self.now!r})")
        if self.next_event_s() <= t:
            return self.advance()
        dt = t - self.now
        self._integrate(dt)
        self.now = t
        self.version += 1
        self._record()
        return dt

    def _integrate(self, dt: float, finish: bool = False):
        """Integrate everything over `dt` (nothing when dt <= 0). With `finish` (an event's
        advance), return what `_finish_completed` needs: on the compiled path, the number of
        running jobs found finished by the same kernel call (their ids first in `_scratch`, the
        others after them in reverse order); on the reference path, None (it tests them itself)."""
        run = self.running
        if dt > 0:
            self.jobs_in_system_s += self.jobs_in_system * dt
            self.energy_j += self.power.power_w * dt
            self.allocated_gpu_s += self.ledger.allocated_gpus * dt
        if len(run) and _jit.ENABLED:
            if not finish and dt <= 0:
                return None
            useful, k = _kernels.advance_running(
                run, dt, bool(self._restoring), finish, self.rate, self.overhead_left, self.work_left, self.work_done,
                self.work_total, self.gpus_req, self.attained_gpu_s, self.run_s, self.interference_loss_s,
                self.interference, self._scratch)
            if dt > 0:
                self.useful_work_s += useful
                if self._restoring:
                    self._restoring = {j for j in self._restoring if self.overhead_left[j] > 0}
            return k
        if len(run) and dt > 0:
            rate = self.rate[run]
            if self._restoring:  # restore time is paid before progress
                left = self.overhead_left[run]
                overhead = np.minimum(left, dt)
                self.overhead_left[run] = left - overhead
                progress = (dt - overhead) * rate
                self._restoring = {j for j in self._restoring if self.overhead_left[j] > 0}
            else:  # no overhead anywhere: (dt - 0.0) * rate, the same floats
                progress = dt * rate
            left = self.work_left[run]
            progress = np.minimum(progress, left)
            left = self.work_left[run] = left - progress
            self.work_done[run] = self.work_total[run] - left
            gpus = self.gpus_req[run]
            self.useful_work_s += float((progress * gpus).sum())
            self.attained_gpu_s[run] += gpus * dt
            self.run_s[run] += dt
            self.interference_loss_s[run] += (1.0 - self.interference[run]) * dt
        return None

    def _finish_completed(self, found=None) -> bool:
        """Finish the running jobs whose remaining time is below float slack. `found`: what
        `_integrate(dt, finish=True)` gave (on the compiled path, how many it found)."""
        run = self.running
        if not len(run):
            return False
        # A job whose remaining time is below float slack has finished now.
        if found is not None:
            if not found:
                return False
            finished, others = self._scratch[:found], self._scratch[found:len(run)][::-1].copy()
        else:
            done = (self.overhead_left[run] + self.work_left[run] / self.rate[run]) <= 1e-7
            finished, others = run[done], run[~done]
            if not len(finished):
                return False
        for j in finished.tolist():
            self.work_left[j] = 0.0
            self.work_done[j] = self.work_total[j]
            self.state[j] = JobState.DONE
            self.end[j] = self.now
            self._close_segment(j, preempted=False)
            self._stop(j)
            self._release(j)
            self.num_done += 1
            self.finished_order.append(j)
            self.jobs_in_system -= 1
        self.running = others
        return True

    def _finish_checkpoints(self) -> bool:
        if not self.checkpointing and not self.reserved:
            return False
        ended = [v for v in self.checkpointing if self.checkpoint_end[v] <= self.now + _EPS]
        for v in ended:
            self.checkpointing.remove(v)
            self.checkpoint_end[v] = np.inf
            self._release(v)
            self.state[v] = JobState.QUEUED
            self.queued_since[v] = self.now
            self.job_queue.push(v, float(self.remaining_estimate_s(v)))
        for r in list(self.reserved):
            if (self.ledger.gpu_owner[self.placement[r]] < 0).all():
                self.reserved.remove(r)
                self.wait_s[r] += self.now - self.queued_since[r]
                self._launch(r, self.placement[r], reserved=True)
        return bool(ended)

    def _release(self, job_id: int) -> None:
        """A stopped job lets its GPUs go."""
        self.rate[job_id] = 0.0
        self.profiles.pop(job_id, None)
        placed = self.load.release(job_id)
        ledger = self.ledger
        if self.reserved:  # some of the GPUs may be promised to a reserved job: recount
            ledger.release(self.placement[job_id], placed.nodes, placed.counts, recount=True)
            self.power.recount(ledger.node_owned)
        else:
            ledger.release(self.placement[job_id], placed.nodes, placed.counts, recount=False)
            self.power.nodes_changed(placed.nodes, ledger.node_owned)

    def _admit_arrivals(self) -> None:
        n, j = len(self.jobs), self._next_arrival
        arrival, until = self.arrival, self.now + _EPS
        while j < n and arrival.item(j) <= until:
            self.state[j] = JobState.QUEUED
            self.queued_since[j] = self.now
            self.job_queue.push(j, float(self.remaining_estimate_s(j)))
            job = self.jobs[j]
            self._job_lists.add(job.gpus, job.tp_degree, job.mem_per_gpu_gb, job.kind, job.priority, job.preemptible,
                                job.comm_fraction, job.tp_comm_share)
            self.jobs_in_system += 1
            j = self._next_arrival = j + 1

    def _close_segment(self, job_id: int, preempted: bool) -> None:
        start = self._segment_start.pop(job_id)
        self.segments.append(Segment(job_id, self.placement[job_id].copy(), start, self.now, preempted))

    def _record(self) -> None:
        ledger = self.ledger
        self.timeline.append(
            (self.now, ledger.allocated_gpus, self.job_queue.length, len(self.running), ledger.fragmented, self.power.power_w)
        )


class NativeEpisode:
    """A simulator's episode carried on by the native core (`Simulator.native_episode`).

    `step(action, features)`: candidate `action` of the last candidate set carried out (-1 on
    the first call: none, only the events to the first decision), the events to the next
    decision, and its candidate set's features written into `features` (two float32 arrays,
    clipped to [-1, 1]); returns the new set's (K,) bool mask. After each step the simulator's
    time, the integrals the objective reads, its finished and arrived counts and its per-job
    arrays are the episode's; `queued` and `running` hold the queue's length and the running
    jobs' count. At the episode's end the simulator's records are written back (`finish`).
    SchedulingError where nothing is left to happen, as `Simulator.advance`; ValueError for an
    action the mask does not allow."""

    def __init__(self, sim: Simulator, episode):
        self.sim = sim
        self._episode = episode
        self.queued = self.running = 0
        self.finished = False

    def step(self, action: int, features: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        if self.finished:
            raise ValueError("the episode has ended")
        sim = self.sim
        (mask, ok, sim.now, sim.jobs_in_system_s, sim.energy_j, sim.preemption_gpu_s, sim.num_done, sim._next_arrival,
         self.queued, self.running, done) = self._episode.step(int(action), *features)
        self._stepped(ok, done)
        return mask.view(bool)

    @property
    def core(self):
        """The core's `Episode` (what `envs.core.EpisodeBatch` steps)."""
        return self._episode

    def took(self, floats, ints) -> None:
        """The scalars of a step that `envs.core.EpisodeBatch` took for this episode (its row of
        the batch's `floats` and `ints`, as lists), set as `step` sets them."""
        sim = self.sim
        sim.now, sim.jobs_in_system_s, sim.energy_j, sim.preemption_gpu_s = floats
        ok, sim.num_done, sim._next_arrival, self.queued, self.running, done = ints
        self._stepped(ok, done)

    def _stepped(self, ok, done) -> None:
        if not ok:
            self.finish()
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        if done:
            self.finish()

    def finish(self) -> None:
        """The core's scalars, lists and records written back into the simulator (its segments,
        placements, finished order and timeline), as after `Simulator.replay_native`."""
        if self.finished:
            return
        self.finished = True
        sim = self.sim
        fl, it, running, checkpointing, reserved, _ = self._episode.state()
        sim._take_native_scalars(fl, it, running, checkpointing, reserved)
        sim._write_records(*self._episode.records())
        sim.profiles.clear()


class RolloutOutcome:
    """What a native world's rollout (NativeWorld.rollout_sect) leaves, as much of a simulator as
    the objective (envs.sim.objective.objective_total) and the lookahead's terminal cost read: the
    time, the integrals, the arrived jobs' ends, first starts and work and restore left, and the
    jobs' fixed fields."""

    __slots__ = ("now", "jobs_in_system_s", "energy_j", "preemption_gpu_s", "num_done", "num_arrived", "num_jobs", "end",
                 "first_start", "work_left", "overhead_left", "kind", "arrival", "work_total", "priority", "counts")

    @property
    def done(self) -> bool:
        return self.num_done == self.num_jobs


class NativeWorld:
    """A simulator's state copied into the native core once (Simulator.native_world), for the
    rollouts of a lookahead's options from one sampled future: each `rollout_sect` runs on a fresh
    copy of the arrays it changes and returns a RolloutOutcome, the world left as it was."""

    def __init__(self, world, arrays: dict[str, np.ndarray]):
        self._world = world
        # the world's jobs' fields a rollout never changes, as the objective reads them
        self._fixed = (arrays["kind"], arrays["arrival"], arrays["work_total"], arrays["priority"])
        self.num_jobs = len(arrays["arrival"])

    def rollout_sect(self, queue_window: int, until: float, first_job: int = -2, first_gpus=(), first_victims=()) -> RolloutOutcome:
        """`Simulator.rollout_sect` on a copy of this world, the same arguments and rules; raises
        SchedulingError where it would (a WAIT with nothing left to happen)."""
        (fl, (num_done, arrived), end, first_start, work_left, overhead_left, decisions, starts, events, stuck) = \
            self._world.rollout_sect(int(queue_window), PRIORITY_HIGH, float(until), int(first_job),
                                     [int(g) for g in first_gpus], [int(v) for v in first_victims])
        if stuck:
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        o = RolloutOutcome()
        o.now, o.jobs_in_system_s, o.energy_j, o.preemption_gpu_s = fl
        o.num_done, o.num_arrived, o.num_jobs = num_done, arrived, self.num_jobs
        o.end, o.first_start, o.work_left, o.overhead_left = end, first_start, work_left, overhead_left
        o.kind, o.arrival, o.work_total, o.priority = self._fixed
        o.counts = {"decisions": decisions, "starts": starts, "events": events}
        return o

    def costs(self, queue_window: int, until: float, options: list[tuple], objective) -> np.ndarray:
        """The cost of each option's `rollout_sect` on a copy of this world, in one native call:
        `options` as `rollout_sect`'s first arguments, (-1,) for WAIT or (job, GPUs, victims); the
        cost as agents.lookahead's `_cost` reads a RolloutOutcome under `objective`
        (envs.sim.objective.Objective): `objective_total`, plus `terminal_cost` at a finite horizon
        short of the workload's end, bit for bit. Raises SchedulingError where `rollout_sect`
        would, ValueError for a bad option as `rollout_sect`."""
        spec = _objective_spec(objective)
        costs, _, _, _, stuck = self._world.costs(int(queue_window), PRIORITY_HIGH, float(until), options, *spec)
        if stuck >= 0:
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        return costs


def _objective_spec(objective) -> tuple:
    """An Objective as NativeWorld.costs passes it to the core (the weights in OBJECTIVE_TERMS'
    order, the weight per priority, the SLO bounds per job kind), made once per objective."""
    hit = _OBJECTIVE_SPECS.get(objective)
    if hit is None:
        hit = _OBJECTIVE_SPECS[objective] = (
            [float(getattr(objective, t)) for t in OBJECTIVE_TERMS], [float(w) for w in objective.priority_weights],
            [float(x) for x in objective.slo_start_s], [float(x) for x in objective.slo_finish_slowdown])
    return hit


_OBJECTIVE_SPECS: dict = {}
