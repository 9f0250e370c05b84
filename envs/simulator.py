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
formulas of envs.speed, so episodes are bit-for-bit those of a full recomputation.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from envs.jobs import PRIORITY_HIGH, PRIORITY_NAMES, Job
from envs.speed import (
    PlacementProfile,
    SpeedModel,
    congestion_shares,
    interference_from,
    placement_profile,
)
from envs.state import ClusterState, fragmented_change, remaining_estimate_s
from envs.topology import Cluster

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


@dataclass
class SimConfig:
    speed_model: SpeedModel = field(default_factory=SpeedModel)
    max_checkpoint_s: float = 60.0  # a graceful stop is bounded
    priority_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)  # low, normal, high


class _Placed:
    """What a placed job's profile fixes, as plain Python values for the per-event scalar work:
    its nodes and GPUs on each, memory-bandwidth pressure per GPU and sensitivity to it, the
    uplinks it crosses, and its rate before interference when it crosses none."""

    __slots__ = ("profile", "nodes", "counts", "pressure", "sensitivity", "uplinks", "base_rate")

    def __init__(self, p: PlacementProfile):
        self.profile = p
        self.nodes: list[int] = p.nodes.tolist()
        self.counts: list[int] = p.gpus_on_node.tolist()
        self.pressure = p.pressure
        self.sensitivity = p.sensitivity
        self.uplinks: list[int] = p.uplinks.tolist()
        self.base_rate = p.min_speed * p.efficiency(1.0)


class Simulator:
    """Event-driven cluster simulator over one workload (jobs sorted by arrival, ids 0..n-1)."""

    def __init__(self, cluster: Cluster, jobs: list[Job], config: SimConfig | None = None):
        self.cluster = cluster
        self.config = config or SimConfig()
        self.jobs = jobs
        n = len(jobs)
        for i, j in enumerate(jobs):
            if j.job_id != i:
                raise ValueError(f"job ids must be 0..n-1 in list order; position {i} holds job {j.job_id}")
            if i and j.arrival_s < jobs[i - 1].arrival_s:
                raise ValueError(f"jobs must be sorted by arrival; job {i} arrives before job {i - 1}")
        c = cluster
        self.now = 0.0
        self.state = np.full(n, JobState.FUTURE, dtype=np.int8)
        self.gpus_req = np.array([j.gpus for j in jobs], dtype=np.int64)
        self.tp_degree = np.array([j.tp_degree for j in jobs], dtype=np.int64)
        self.mem_req = np.array([j.mem_per_gpu_gb for j in jobs])
        self.priority = np.array([j.priority for j in jobs], dtype=np.int64)
        self.preemptible = np.array([j.preemptible for j in jobs], dtype=bool)
        self.kind = np.array([int(j.kind) for j in jobs], dtype=np.int64)
        self.comm_fraction = np.array([j.comm_fraction for j in jobs], dtype=float)
        self.tp_comm_share = np.array([j.tp_comm_share for j in jobs], dtype=float)
        self.arrival = np.array([j.arrival_s for j in jobs])
        self.estimate = np.array([j.estimate_s for j in jobs])
        self.work_total = np.array([j.work_s for j in jobs], dtype=float)
        self.work_left = self.work_total.copy()  # the truth: only the event loop reads it
        self.work_done = np.zeros(n)  # work_total - work_left, what a scheduler can know
        self.requested_gpu_s = self.gpus_req * self.estimate  # what each job asks for, by its estimate
        self.restore_s = np.array([j.restore_s for j in jobs], dtype=float)
        self.checkpoint_s = np.minimum([j.checkpoint_s for j in jobs], self.config.max_checkpoint_s) if n else np.zeros(0)
        self.overhead_left = np.zeros(n)
        self.rate = np.zeros(n)
        self.interference = np.ones(n)  # current interference factor of running jobs
        self.run_s = np.zeros(n)  # time spent running (restore included)
        self.interference_loss_s = np.zeros(n)  # integral of (1 - interference factor) while running
        self.checkpoint_end = np.full(n, np.inf)
        self.first_start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.queued_since = np.full(n, np.nan)
        self.enqueue_seq = np.zeros(n, dtype=np.int64)  # order of (re)entering the queue: FIFO rank
        self._enqueued = 0
        self.wait_s = np.zeros(n)  # total time spent queued or reserved
        self.attained_gpu_s = np.zeros(n)  # GPU-seconds received (Tiresias' attained service)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.needs_restore = np.zeros(n, dtype=bool)
        self._num_needs_restore = 0  # needs_restore.sum()
        self.placement: dict[int, np.ndarray] = {}
        self.profiles: dict[int, PlacementProfile] = {}
        self._placed: dict[int, _Placed] = {}  # the same jobs (running or checkpointing)
        self.segments: list[Segment] = []
        self._segment_start: dict[int, float] = {}

        self.gpu_owner = np.full(c.num_gpus, -1, dtype=np.int64)  # job holding the GPU
        self.gpu_reserved = np.full(c.num_gpus, -1, dtype=np.int64)  # job it is promised to
        # Per-node counts are replaced, never changed in place (callers may hold the old ones).
        self.node_free = c.node_gpus.copy()  # neither owned nor reserved
        self.node_owned = np.zeros(c.num_nodes, dtype=np.int64)
        # Kept up to date with node_free (see _move_gpus; _recount_nodes recounts them all).
        self._free_mask = np.ones(c.num_gpus, dtype=bool)  # (G,) neither owned nor reserved
        self._num_free = c.num_gpus
        self._fragmented = 0  # fragmented_free_gpus(): none while every GPU is free
        self._mem_ok: dict[float, np.ndarray] = {}  # (G,) no GPU memory below the key, per requirement
        # GPUs held by running preemptible jobs, per node and priority: what preemption could free.
        self.node_preemptible = np.zeros((c.num_nodes, max(PRIORITY_NAMES) + 1), dtype=np.int64)

        self._queue_ids = np.empty(max(n, 1), dtype=np.int64)  # queued job ids in (re)arrival order (a job is queued once at most)
        self._queue_len = 0
        self.queued_remaining_s = np.zeros(n)  # remaining_estimate_s as of entering the queue; fixed while queued
        self._by_remaining: list[tuple[float, int, int]] = []  # (remaining, enqueue rank, job), sorted
        self.queued_gpus = 0  # GPUs the queued jobs ask for, kept as jobs come and go
        self.queued_high_priority = 0  # queued jobs of the high priority class
        self._gpus, self._priority = self.gpus_req.tolist(), self.priority.tolist()  # per job, as Python ints
        self.reserved: list[int] = []
        self.running = np.zeros(0, dtype=np.int64)
        self._node_jobs: list[set[int]] = [set() for _ in range(c.num_nodes)]  # running jobs on each node
        self._crossing: dict[int, list[int]] = {}  # running jobs that cross uplinks -> those uplinks
        self._restoring: set[int] = set()  # running jobs with restore time left (overhead_left > 0)
        # Nodes whose pressure and uplinks whose demand changed since the last rate update.
        self._dirty_nodes: set[int] = set()
        self._dirty_uplinks: set[int] = set()
        self.checkpointing: list[int] = []
        self._next_arrival = 0
        self.num_done = 0
        self.finished_order: list[int] = []
        self.version = 0  # bumped on every state change, for callers' caches
        self.alloc_version = 0  # bumped when GPU ownership or reservations change

        # Integrals since t=0.
        w = np.array(self.config.priority_weights, dtype=float)
        self._job_weight = w[self.priority]
        self.jobs_in_system = 0
        self.weighted_in_system = 0.0
        self.jobs_in_system_s = 0.0  # integral of the number of jobs in the system: sum of JCTs
        self.weighted_jobs_s = 0.0
        self.energy_j = 0.0
        self.allocated_gpu_s = 0.0
        self.useful_work_s = 0.0  # reference GPU-seconds of work done
        self.preemption_gpu_s = 0.0  # GPU-seconds lost to checkpoint and restore
        self.num_preemptions = 0
        self.power_w = 0.0
        self._node_busy_w = np.array([t.power_busy_w for t in c.gpu_types])[c.node_gpu_type]  # per GPU
        self._node_idle_w = np.array([t.power_idle_w for t in c.gpu_types])[c.node_gpu_type]
        self._power_terms = list(zip(c.node_power_base_w.tolist(), self._node_busy_w.tolist(), self._node_idle_w.tolist(), c.node_lists.gpus))
        self._node_power_w = np.zeros(c.num_nodes)  # (N,) what each node draws when powered on
        self._node_on = np.zeros(c.num_nodes, dtype=bool)  # (N,) any GPU held
        self._power_stale = True  # node_owned changed since power_w was summed
        self._next_event = (-1, np.inf)  # (version, next_event_s()) cache
        self.uplink_demand = np.zeros(len(c.switch_names))  # (S,) GB/s the running jobs put on each uplink
        self.node_pressure = np.zeros(c.num_nodes)  # (N,) memory-bandwidth pressure of the running jobs
        self._state: ClusterState | None = None  # the decision state, a view refreshed per version
        self._state_arrived = -1  # arrivals its per-job views cover
        self.timeline: list[tuple] = []  # (t, allocated GPUs, queued, running, fragmented free GPUs, power W)
        self._node_power_w = self._per_node_power(self.node_owned)
        self._update_power()
        self._admit_arrivals()
        self._record()

    # ------------------------------------------------------------------ queries

    @property
    def num_jobs(self) -> int:
        return len(self.jobs)

    @property
    def done(self) -> bool:
        return self.num_done == len(self.jobs)

    @property
    def allocated_gpus(self) -> int:
        """GPUs owned or reserved."""
        return self.cluster.num_gpus - self._num_free

    def free_gpu_mask(self) -> np.ndarray:
        """(G,) GPUs neither owned nor reserved (a copy: callers may change it)."""
        return self._free_mask.copy()

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
            if self._restoring:
                t = min(t, float((self.now + self.overhead_left[r] + self.work_left[r] / self.rate[r]).min()))
            else:  # now + 0.0 is now, and rounding is monotonic: min(now + x) == now + min(x)
                t = min(t, self.now + float((self.work_left[r] / self.rate[r]).min()))
        if self.checkpointing:
            t = min(t, float(self.checkpoint_end[self.checkpointing].min()))
        return t

    def remaining_estimate_s(self, job_id):
        """The scheduler's estimate of remaining runtime at reference speed (never the truth), as
        `envs.state.remaining_estimate_s`. Takes an id or an array."""
        return remaining_estimate_s(self.estimate, self.work_done, self.restore_s, self.needs_restore, job_id,
                                    self._num_needs_restore > 0)

    def decision_state(self) -> ClusterState:
        """What a scheduler knows now, as a view over this simulator's arrays (no copy): valid
        until the simulator changes, then refreshed in place. Per-job fields cover the jobs that
        have arrived; nothing of a job's true work or of future arrivals is in it."""
        s = self._state
        if s is None:
            s = self._state = ClusterState(cluster=self.cluster, speed_model=self.config.speed_model, names=None,
                                           gpu_owner=self.gpu_owner, gpu_reserved=self.gpu_reserved,
                                           node_preemptible=self.node_preemptible, node_pressure=self.node_pressure,
                                           uplink_demand=self.uplink_demand, version=-1)
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
            s.attained_gpu_s, s.preemptions, s.enqueue_seq = self.attained_gpu_s[:n], self.preemptions[:n], self.enqueue_seq[:n]
            s.restore_left_s, s.checkpoint_end_s, s.rate = self.overhead_left[:n], self.checkpoint_end[:n], self.rate[:n]
            s.arrival_times_s, s.arrival_requested_gpu_s = s.arrival_s, s.requested_gpu_s
        s.now, s.version, s.alloc_version = self.now, self.version, self.alloc_version
        s.queue = self._queue_ids[: self._queue_len]
        s.queue_by_remaining = self._by_remaining
        s.running, s.checkpointing, s.reserved = self.running, self.checkpointing, self.reserved
        s.placement, s.profiles = self.placement, self.profiles
        s.queued_gpus, s.queued_high_priority = self.queued_gpus, self.queued_high_priority
        s.free_mask, s.node_free = self._free_mask, self.node_free
        s.num_free, s.fragmented_free = self._num_free, self._fragmented
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

    def start(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None = None) -> None:
        """Start a queued job on free GPUs now (gang rule: all of them at once). `profile`, when
        the caller has it, is the job's `placement_profile` on exactly these GPUs."""
        gpus = np.asarray(gpus, dtype=np.int64)
        self._check_placement(job_id, gpus, self._free_mask)
        self._dequeue(job_id)
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
            if self.state.item(v) != JobState.RUNNING or not self.preemptible[v] or self.priority[v] >= self.priority[job_id]:
                raise SchedulingError(f"job {v} cannot be preempted for job {job_id}")
        allowed = self.free_gpu_mask()
        victim_gpus = np.concatenate([self.placement[v] for v in victims])
        allowed[victim_gpus] = True
        self._check_placement(job_id, gpus, allowed)
        if not np.isin(victim_gpus, gpus).any():
            raise SchedulingError(f"job {job_id}: the placement uses none of the victims' GPUs")
        for v in victims:
            self._preempt(v)
        self._dequeue(job_id)
        self.state[job_id] = JobState.RESERVED
        self.reserved.append(job_id)
        self.gpu_reserved[gpus] = job_id
        self.placement[job_id] = gpus
        self._recount_nodes()
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
        self.gpu_owner[gpus] = job_id
        self.gpu_reserved[gpus] = -1
        self.placement[job_id] = gpus
        if profile is None:
            profile = placement_profile(self.cluster, self.jobs[job_id], gpus, self.config.speed_model)
        self.profiles[job_id] = profile
        placed = self._placed[job_id] = _Placed(profile)
        self._add_load(placed, 1.0)
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
        self._count_preemptible(job_id, 1)
        for n in placed.nodes:
            self._node_jobs[n].add(job_id)
        if placed.uplinks:
            self._crossing[job_id] = placed.uplinks
        self._segment_start[job_id] = self.now
        self._free_mask[gpus] = False
        self._move_gpus(placed, owned=1, free=0 if reserved else -1)

    def _stop(self, job_id: int) -> None:
        """A running job stops running (it finished or is preempted): it leaves the per-node
        and per-uplink bookkeeping and stops loading its nodes and uplinks."""
        self._count_preemptible(job_id, -1)
        placed = self._placed[job_id]
        self._add_load(placed, -1.0)
        for n in placed.nodes:
            self._node_jobs[n].discard(job_id)
        self._crossing.pop(job_id, None)
        self._restoring.discard(job_id)

    def _count_preemptible(self, job_id: int, sign: int) -> None:
        if self.preemptible[job_id]:
            placed, priority = self._placed[job_id], self.priority[job_id]
            for n, k in zip(placed.nodes, placed.counts):
                self.node_preemptible[n, priority] += sign * k

    def _move_gpus(self, placed: _Placed, owned: int, free: int) -> None:
        """The job's GPUs change hands: on each of its nodes the owned count changes by `owned`
        and the free count by `free` (+1, -1 or 0) times its GPUs there. Updates the derived
        counts (free GPUs, fragmented free GPUs, per-node power) with them."""
        self.alloc_version += 1
        node_owned = self.node_owned.copy()
        node_free = self.node_free.copy()
        whole_gang = self.cluster.node_lists.whole_gang
        for n, k in zip(placed.nodes, placed.counts):
            if owned:
                o = int(node_owned[n]) + owned * k
                node_owned[n] = o
                base, busy, idle, size = self._power_terms[n]
                self._node_power_w[n] = base + o * busy + (size - o) * idle  # as _per_node_power
                self._node_on[n] = o > 0
                self._power_stale = True
            if free:
                was = int(node_free[n])
                node_free[n] = was + free * k
                self._num_free += free * k
                self._fragmented += fragmented_change(was, was + free * k, whole_gang[n])
        self.node_owned, self.node_free = node_owned, node_free

    def _recount_nodes(self) -> None:
        """Per-node owned and free GPU counts, and everything derived from them, recounted
        whole from GPU ownership and reservations (after preemptions: the rare case)."""
        self.alloc_version += 1
        first = self.cluster.node_first_gpu
        free = (self.gpu_owner < 0) & (self.gpu_reserved < 0)
        self._free_mask = free
        self.node_owned = np.add.reduceat((self.gpu_owner >= 0).view(np.int8), first).astype(np.int64)
        self.node_free = np.add.reduceat(free.view(np.int8), first).astype(np.int64)
        self._num_free = int(self.node_free.sum())
        self._fragmented = self.fragmented_free_gpus(self.node_free)
        self._node_power_w = self._per_node_power(self.node_owned)
        self._node_on = self.node_owned > 0
        self._power_stale = True

    def _add_load(self, placed: _Placed, sign: float) -> None:
        """A job starts (+1) or stops (-1) loading its nodes' memory bandwidth and its uplinks;
        the rates of jobs sharing them are due for an update."""
        pressure = sign * placed.pressure
        for n, k in zip(placed.nodes, placed.counts):
            self.node_pressure[n] += pressure * k
        self._dirty_nodes.update(placed.nodes)
        if placed.uplinks:
            p = placed.profile
            self.uplink_demand[p.uplinks] += sign * p.uplink_demand_GBps
            self._dirty_uplinks.update(placed.uplinks)

    def _rates_changed(self) -> None:
        """Recompute the rates that can have changed: those of the running jobs on nodes whose
        memory-bandwidth pressure changed and of those crossing an uplink whose demand changed.
        Every other job's inputs are what they were, so its rate is too."""
        stale: set[int] = set()
        for n in self._dirty_nodes:
            stale |= self._node_jobs[n]
        if self._dirty_uplinks:
            dirty = self._dirty_uplinks
            stale.update(j for j, uplinks in self._crossing.items() if not dirty.isdisjoint(uplinks))
        self._dirty_nodes.clear()
        self._dirty_uplinks.clear()
        if stale:
            crossing = any(j in self._crossing for j in stale)
            shares = congestion_shares(self.cluster, self.uplink_demand).tolist() if crossing else None
            pressure = self.node_pressure
            for j in stale:
                self.rate[j], self.interference[j] = self._rate_of(self._placed[j], pressure, shares)
        self._update_power()
        self.version += 1

    def _rate_of(self, placed: _Placed, node_pressure: np.ndarray, shares: list[float] | None) -> tuple[float, float]:
        """(rate, interference factor) of a running job: envs.speed's formulas in floats, the same
        operations in the same order (speed.interference_factor, interference_from,
        congestion_shares, PlacementProfile.efficiency)."""
        node_gpus = self.cluster.node_lists.gpus
        if len(placed.nodes) == 1:
            n = placed.nodes[0]
            others = (float(node_pressure[n]) - placed.pressure * placed.counts[0]) / node_gpus[n]
        else:
            others = max((float(node_pressure[n]) - placed.pressure * k) / node_gpus[n] for n, k in zip(placed.nodes, placed.counts))
        interference = interference_from(others, placed.sensitivity, self.config.speed_model)
        if not placed.uplinks:
            return placed.base_rate * interference, interference
        p = placed.profile
        congestion = min(shares[u] for u in placed.uplinks)
        return p.min_speed * p.efficiency(congestion) * interference, interference

    def _per_node_power(self, node_owned: np.ndarray) -> np.ndarray:
        """(N,) what each node draws when powered on: base power plus busy and idle GPU power."""
        c = self.cluster
        return c.node_power_base_w + node_owned * self._node_busy_w + (c.node_gpus - node_owned) * self._node_idle_w

    def _update_power(self) -> None:
        """Powered-on nodes (any GPU held) draw their base power plus busy and idle GPU power;
        empty nodes are powered down."""
        if self._power_stale:
            self.power_w = float(self._node_power_w[self._node_on].sum())
            self._power_stale = False

    # ------------------------------------------------------------------ time

    def advance(self) -> float:
        """Jump to the next event and process everything that happens then. Returns the time
        advanced. Raises SchedulingError when there is no future event (a deadlock: nothing
        runs, nothing arrives, and the scheduler waited)."""
        t = self.next_event_s()
        if not math.isfinite(t):
            raise SchedulingError("nothing left to wait for: no job is running or arriving")
        dt = t - self.now
        self._integrate(dt)
        self.now = t
        changed = self._finish_completed() | self._finish_checkpoints()
        self._admit_arrivals()
        if changed:
            self._rates_changed()
        else:
            self.version += 1
        self._record()
        return dt

    def _integrate(self, dt: float) -> None:
        if dt <= 0:
            return
        self.jobs_in_system_s += self.jobs_in_system * dt
        self.weighted_jobs_s += self.weighted_in_system * dt
        self.energy_j += self.power_w * dt
        self.allocated_gpu_s += self.allocated_gpus * dt
        run = self.running
        if len(run):
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
            self.work_left[run] = left - progress
            self.work_done[run] = self.work_total[run] - self.work_left[run]
            gpus = self.gpus_req[run]
            self.useful_work_s += float((progress * gpus).sum())
            self.attained_gpu_s[run] += gpus * dt
            self.run_s[run] += dt
            self.interference_loss_s[run] += (1.0 - self.interference[run]) * dt

    def _finish_completed(self) -> bool:
        run = self.running
        if not len(run):
            return False
        # A job whose remaining time is below float slack has finished now.
        finished = run[(self.overhead_left[run] + self.work_left[run] / self.rate[run]) <= 1e-7]
        for j in finished:
            self.work_left[j] = 0.0
            self.work_done[j] = self.work_total[j]
            self.state[j] = JobState.DONE
            self.end[j] = self.now
            self._close_segment(j, preempted=False)
            self._stop(j)
            self._release(j)
            self.num_done += 1
            self.finished_order.append(int(j))
            self.jobs_in_system -= 1
            self.weighted_in_system -= self._job_weight[j]
        if len(finished) == 1:
            self.running = run[run != finished[0]]
        elif len(finished):
            self.running = run[~np.isin(run, finished)]
        return len(finished) > 0

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
            self._enqueue(v)
        for r in list(self.reserved):
            if (self.gpu_owner[self.placement[r]] < 0).all():
                self.reserved.remove(r)
                self.wait_s[r] += self.now - self.queued_since[r]
                self._launch(r, self.placement[r], reserved=True)
        return bool(ended)

    def _release(self, job_id: int) -> None:
        gpus = self.placement[job_id]
        self.gpu_owner[gpus] = -1
        self.rate[job_id] = 0.0
        self.profiles.pop(job_id, None)
        placed = self._placed.pop(job_id)
        if self.reserved:  # some of the GPUs may be promised to a reserved job
            self._recount_nodes()
        else:
            self._free_mask[gpus] = True
            self._move_gpus(placed, owned=-1, free=1)

    def _admit_arrivals(self) -> None:
        n = len(self.jobs)
        while self._next_arrival < n and self.arrival[self._next_arrival] <= self.now + _EPS:
            j = self._next_arrival
            self.state[j] = JobState.QUEUED
            self.queued_since[j] = self.now
            self._enqueue(j)
            self.jobs_in_system += 1
            self.weighted_in_system += self._job_weight[j]
            self._next_arrival += 1

    @property
    def queue(self) -> list[int]:
        """Queued job ids in (re)arrival order."""
        return self._queue_ids[: self._queue_len].tolist()

    @property
    def queue_len(self) -> int:
        return self._queue_len

    def queue_by_remaining(self) -> list[tuple[float, int, int]]:
        """The queue as (remaining estimate, enqueue rank, job id), shortest first, ties in queue
        order; kept sorted as jobs come and go. Read it, do not change it."""
        return self._by_remaining

    def queue_ids(self) -> np.ndarray:
        """The queue as an int array (a copy), in (re)arrival order."""
        return self._queue_ids[: self._queue_len].copy()

    def _enqueue(self, job_id: int) -> None:
        self._queue_ids[self._queue_len] = job_id
        remaining = self.queued_remaining_s[job_id] = float(self.remaining_estimate_s(job_id))
        bisect.insort(self._by_remaining, (remaining, self._enqueued, job_id))
        self._queue_len += 1
        self.queued_gpus += self._gpus[job_id]
        self.queued_high_priority += self._priority[job_id] == PRIORITY_HIGH
        self.enqueue_seq[job_id] = self._enqueued
        self._enqueued += 1

    def _dequeue(self, job_id: int) -> None:
        key = (float(self.queued_remaining_s[job_id]), int(self.enqueue_seq[job_id]), job_id)
        del self._by_remaining[bisect.bisect_left(self._by_remaining, key)]
        ids = self._queue_ids
        i = int((ids[: self._queue_len] == job_id).argmax())  # its position (it is queued)
        ids[i : self._queue_len - 1] = ids[i + 1 : self._queue_len].copy()
        self._queue_len -= 1
        self.queued_gpus -= self._gpus[job_id]
        self.queued_high_priority -= self._priority[job_id] == PRIORITY_HIGH

    def _close_segment(self, job_id: int, preempted: bool) -> None:
        start = self._segment_start.pop(job_id)
        self.segments.append(Segment(job_id, self.placement[job_id].copy(), start, self.now, preempted))

    def fragmented_free_gpus(self, node_free: np.ndarray | None = None) -> int:
        """Free GPUs on nodes that cannot host an 8-GPU gang (a whole node, if smaller) alone, now
        (a kept count) or with `node_free` GPUs free per node."""
        if node_free is None:
            return self._fragmented
        return int(node_free[node_free < self.cluster.node_whole_gang].sum())

    def _record(self) -> None:
        self.timeline.append(
            (self.now, self.allocated_gpus, self._queue_len, len(self.running), self.fragmented_free_gpus(), self.power_w)
        )
