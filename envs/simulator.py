"""The discrete-event simulator: allocate, preempt, advance.

Plain Python and numpy; no Gymnasium or torch. A scheduler (the env, a baseline, a replay loop)
calls `start`, `preempt_and_start` and `advance`; the simulator enforces the gang rule (a job
runs on all of its GPUs or none; a GPU holds at most one job) and keeps every job's record.

Rates are piecewise constant between events, so time jumps from event to event: arrivals,
completions and checkpoint ends. Every change to the running set recomputes the rates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from envs.jobs import PRIORITY_NAMES, Job
from envs.speed import (
    PlacementProfile,
    SpeedModel,
    congestion_shares,
    efficiency_of,
    interference_factor,
    interference_from,
    placement_profile,
)
from envs.topology import Cluster

VECTORISE_SPECIAL_FROM = 6  # multi-node running jobs from which _rates_changed works in arrays
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
        self.arrival = np.array([j.arrival_s for j in jobs])
        self.estimate = np.array([j.estimate_s for j in jobs])
        self.work_total = np.array([j.work_s for j in jobs], dtype=float)
        self.work_left = self.work_total.copy()
        self.restore_s = np.array([j.restore_s for j in jobs], dtype=float)
        self.checkpoint_s = np.minimum([j.checkpoint_s for j in jobs], self.config.max_checkpoint_s) if n else np.zeros(0)
        self.overhead_left = np.zeros(n)
        self.rate = np.zeros(n)
        self.interference = np.ones(n)  # current interference factor of running jobs
        # What a running job's placement fixes about its speed (see envs.speed), for vectorised
        # rate updates: the one node it sits on (-1 when several), its rate before congestion
        # and interference, its memory-bandwidth pressure per GPU and sensitivity to it.
        self.single_node = np.full(n, -1, dtype=np.int64)
        self.base_rate = np.zeros(n)
        self.job_pressure = np.zeros(n)
        self.sensitivity = np.zeros(n)
        self.crosses_uplinks = np.zeros(n, dtype=bool)
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
        self.placement: dict[int, np.ndarray] = {}
        self.profiles: dict[int, PlacementProfile] = {}
        self.segments: list[Segment] = []
        self._segment_start: dict[int, float] = {}

        self.gpu_owner = np.full(c.num_gpus, -1, dtype=np.int64)  # job holding the GPU
        self.gpu_reserved = np.full(c.num_gpus, -1, dtype=np.int64)  # job it is promised to
        self.node_free = c.node_gpus.copy()  # neither owned nor reserved
        self.node_owned = np.zeros(c.num_nodes, dtype=np.int64)
        self._whole_gang = np.minimum(8, c.node_gpus)  # a node with fewer free GPUs is fragmented
        # GPUs held by running preemptible jobs, per node and priority: what preemption could free.
        self.node_preemptible = np.zeros((c.num_nodes, max(PRIORITY_NAMES) + 1), dtype=np.int64)

        self._queue_ids = np.empty(max(n, 1), dtype=np.int64)  # queued job ids in (re)arrival order (a job is queued once at most)
        self._queue_len = 0
        self.queued_remaining_s = np.zeros(n)  # remaining_estimate_s as of entering the queue; fixed while queued
        self._by_remaining: list[tuple[float, int, int]] = []  # (remaining, enqueue rank, job), sorted
        self.reserved: list[int] = []
        self.running = np.zeros(0, dtype=np.int64)
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
        self.uplink_demand = np.zeros(len(c.switch_names))  # (S,) GB/s the running jobs put on each uplink
        self.node_pressure = np.zeros(c.num_nodes)  # (N,) memory-bandwidth pressure of the running jobs
        self.cache: dict = {}  # derived views of the current state, for callers; emptied on every change
        self.episode_cache: dict = {}  # derived views that never change during the episode, for callers
        self._cache_version = -1
        self._alloc_cache: dict = {}
        self._alloc_cache_version = -1
        self.timeline: list[tuple] = []  # (t, allocated GPUs, queued, running, fragmented free GPUs, power W)
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
        return int(self.cluster.num_gpus - self.node_free.sum())

    def free_gpu_mask(self) -> np.ndarray:
        """(G,) GPUs neither owned nor reserved."""
        return (self.gpu_owner < 0) & (self.gpu_reserved < 0)

    def cached(self, key, compute):
        """`compute()` once per state version (callers' derived views of the state)."""
        if self._cache_version != self.version:
            self.cache.clear()
            self._cache_version = self.version
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def alloc_cache(self) -> dict:
        """A dict for callers' views that depend only on which GPUs are owned or reserved (and
        so on the running set); emptied when that changes."""
        if self._alloc_cache_version != self.alloc_version:
            self._alloc_cache = {}
            self._alloc_cache_version = self.alloc_version
        return self._alloc_cache

    @property
    def next_arrival_s(self) -> float:
        return float(self.arrival[self._next_arrival]) if self._next_arrival < len(self.jobs) else np.inf

    def next_event_s(self) -> float:
        """Time of the next event (arrival, completion, checkpoint end); inf when none."""
        t = self.next_arrival_s
        if len(self.running):
            r = self.running
            t = min(t, float((self.now + self.overhead_left[r] + self.work_left[r] / self.rate[r]).min()))
        if self.checkpointing:
            t = min(t, float(self.checkpoint_end[self.checkpointing].min()))
        return t

    def remaining_estimate_s(self, job_id):
        """The scheduler's estimate of remaining runtime at reference speed (never the truth):
        the estimate minus the work done, plus the restore still owed. Takes an id or an array."""
        done = self.work_total[job_id] - self.work_left[job_id]
        return np.maximum(self.estimate[job_id] - done, 0.0) + self.restore_s[job_id] * self.needs_restore[job_id]

    # ------------------------------------------------------------------ decisions

    def _check_placement(self, job_id: int, gpus: np.ndarray, allowed: np.ndarray) -> None:
        if not 0 <= job_id < len(self.jobs):
            raise SchedulingError(f"no job {job_id}")
        if self.state[job_id] != JobState.QUEUED:
            raise SchedulingError(f"job {job_id} is not queued (state {JobState(self.state[job_id]).name})")
        if len(gpus) != self.gpus_req[job_id] or len(set(gpus.tolist())) != len(gpus):
            raise SchedulingError(f"job {job_id} needs exactly {self.gpus_req[job_id]} distinct GPUs, got {len(gpus)}")
        if gpus.min() < 0 or gpus.max() >= self.cluster.num_gpus:
            raise SchedulingError(f"job {job_id}: GPU id out of range")
        if not allowed[gpus].all():
            raise SchedulingError(f"job {job_id}: some GPUs are not available")
        if (self.cluster.gpu_memory_gb[gpus] < self.mem_req[job_id]).any():
            raise SchedulingError(f"job {job_id} needs {self.mem_req[job_id]:g} GB per GPU")

    def start(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None = None) -> None:
        """Start a queued job on free GPUs now (gang rule: all of them at once). `profile`, when
        the caller has it, is the job's `placement_profile` on exactly these GPUs."""
        gpus = np.asarray(gpus, dtype=np.int64)
        self._check_placement(job_id, gpus, self.free_gpu_mask())
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
            if self.state[v] != JobState.RUNNING or not self.preemptible[v] or self.priority[v] >= self.priority[job_id]:
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
        self._recount_nodes(gpus)
        self._rates_changed()

    def preemption_cost_gpu_s(self, ids):
        """GPU-seconds a preemption of these jobs costs: checkpoint (bounded) plus restore."""
        return self.gpus_req[ids] * (self.checkpoint_s[ids] + self.restore_s[ids])

    def _preempt(self, v: int) -> None:
        ckpt = float(self.checkpoint_s[v])
        self._close_segment(v, preempted=True)
        self.running = self.running[self.running != v]
        self._count_preemptible(v, -1)
        self._add_load(self.profiles[v], -1.0)
        self.state[v] = JobState.CHECKPOINTING
        self.checkpoint_end[v] = self.now + ckpt
        self.checkpointing.append(v)
        self.rate[v] = 0.0
        self.preemptions[v] += 1
        self.num_preemptions += 1
        self.needs_restore[v] = True
        self.preemption_gpu_s += float(self.preemption_cost_gpu_s(v))

    def _launch(self, job_id: int, gpus: np.ndarray, profile: PlacementProfile | None = None) -> None:
        self.gpu_owner[gpus] = job_id
        self.gpu_reserved[gpus] = -1
        self.placement[job_id] = gpus
        if profile is None:
            profile = placement_profile(self.cluster, self.jobs[job_id], gpus, self.config.speed_model)
        p = self.profiles[job_id] = profile
        self.single_node[job_id] = p.nodes[0] if len(p.nodes) == 1 else -1
        self.base_rate[job_id] = p.min_speed * p.efficiency(1.0)
        self.job_pressure[job_id] = p.pressure
        self.sensitivity[job_id] = p.sensitivity
        self.crosses_uplinks[job_id] = len(p.uplinks) > 0
        self._add_load(p, 1.0)
        self.state[job_id] = JobState.RUNNING
        self.overhead_left[job_id] = self.jobs[job_id].restore_s if self.needs_restore[job_id] else 0.0
        self.needs_restore[job_id] = False
        if np.isnan(self.first_start[job_id]):
            self.first_start[job_id] = self.now
        self.running = np.append(self.running, job_id)
        self._count_preemptible(job_id, 1)
        self._segment_start[job_id] = self.now
        self._recount_nodes(gpus)

    def _count_preemptible(self, job_id: int, sign: int) -> None:
        if self.preemptible[job_id]:
            p = self.profiles[job_id]
            self.node_preemptible[p.nodes, self.priority[job_id]] += sign * p.gpus_on_node

    def _recount_nodes(self, gpus: np.ndarray) -> None:
        """Per-node owned and free GPU counts after `gpus` changed hands (recounted whole: one
        segmented sum over the GPUs costs less than touching the nodes one by one)."""
        self.alloc_version += 1
        first = self.cluster.node_first_gpu
        self.node_owned = np.add.reduceat((self.gpu_owner >= 0).view(np.int8), first).astype(np.int64)
        self.node_free = np.add.reduceat(((self.gpu_owner < 0) & (self.gpu_reserved < 0)).view(np.int8), first).astype(np.int64)

    def _add_load(self, p: PlacementProfile, sign: float) -> None:
        """A job starts (+1) or stops (-1) loading its nodes' memory bandwidth and its uplinks."""
        self.node_pressure[p.nodes] += sign * p.pressure * p.gpus_on_node
        if len(p.uplinks):
            self.uplink_demand[p.uplinks] += sign * p.uplink_demand_GBps

    def _rates_changed(self) -> None:
        """Recompute every running job's rate (envs.speed), vectorised over the jobs on one node
        without uplink traffic, which is nearly all of them."""
        run = self.running
        if len(run):
            c, model = self.cluster, self.config.speed_model
            nodes = self.single_node[run]
            single = nodes >= 0
            others = np.zeros(len(run))
            sn = nodes[single]
            others[single] = (self.node_pressure[sn] - self.job_pressure[run[single]] * self.gpus_req[run[single]]) / c.node_gpus[sn]
            interference = interference_from(others, self.sensitivity[run], model)
            rates = self.base_rate[run] * interference
            special = np.flatnonzero(~single | self.crosses_uplinks[run])
            if len(special) >= VECTORISE_SPECIAL_FROM:
                self._special_rates(run, special, single, interference, rates)
            elif len(special):
                shares = congestion_shares(c, self.uplink_demand)
                for k in special:
                    p = self.profiles[run[k]]
                    if not single[k]:
                        interference[k] = interference_factor(c, p, self.node_pressure, model)
                    congestion = float(shares[p.uplinks].min()) if len(p.uplinks) else 1.0
                    rates[k] = p.min_speed * p.efficiency(congestion) * interference[k]
            self.rate[run] = rates
            self.interference[run] = interference
        self._update_power()
        self.version += 1

    def _special_rates(self, run: np.ndarray, special: np.ndarray, single: np.ndarray, interference: np.ndarray, rates: np.ndarray) -> None:
        """The loop of `_rates_changed` over multi-node jobs, as segmented array operations: the
        same formulas (speed.interference_factor, speed.efficiency_of) on many jobs at once."""
        c, model = self.cluster, self.config.speed_model
        profiles = [self.profiles[j] for j in run[special]]
        multi = np.flatnonzero(~single[special])
        if len(multi):
            spread = [profiles[i] for i in multi]
            lengths = [len(p.nodes) for p in spread]
            nodes = np.concatenate([p.nodes for p in spread])
            own = np.repeat([p.pressure for p in spread], lengths) * np.concatenate([p.gpus_on_node for p in spread])
            per_node = (self.node_pressure[nodes] - own) / c.node_gpus[nodes]
            others = np.maximum.reduceat(per_node, np.cumsum([0, *lengths[:-1]]))
            interference[special[multi]] = interference_from(others, np.array([p.sensitivity for p in spread]), model)
        congestion = np.ones(len(special))
        crossing = [i for i, p in enumerate(profiles) if len(p.uplinks)]
        if crossing:
            shares = congestion_shares(c, self.uplink_demand)
            uplinks = [profiles[i].uplinks for i in crossing]
            congestion[crossing] = np.minimum.reduceat(shares[np.concatenate(uplinks)], np.cumsum([0, *[len(u) for u in uplinks[:-1]]]))
        g = [p.geometry for p in profiles]
        tp_congestion, dp_bw = np.array([x.congested(k) for x, k in zip(g, congestion.tolist())]).T
        eff = efficiency_of(np.array([x.tp_stretch for x in g]), tp_congestion, dp_bw,
                            np.array([p.c_tp for p in profiles]), np.array([p.c_dp for p in profiles]))
        rates[special] = np.array([x.min_speed for x in g]) * eff * interference[special]

    def _update_power(self) -> None:
        """Powered-on nodes (any GPU held) draw their base power plus busy and idle GPU power;
        empty nodes are powered down."""
        c = self.cluster
        on = self.node_owned > 0
        per_node = c.node_power_base_w + self.node_owned * self._node_busy_w + (c.node_gpus - self.node_owned) * self._node_idle_w
        self.power_w = float(per_node[on].sum())

    # ------------------------------------------------------------------ time

    def advance(self) -> float:
        """Jump to the next event and process everything that happens then. Returns the time
        advanced. Raises SchedulingError when there is no future event (a deadlock: nothing
        runs, nothing arrives, and the scheduler waited)."""
        t = self.next_event_s()
        if not np.isfinite(t):
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
            overhead = np.minimum(self.overhead_left[run], dt)
            self.overhead_left[run] -= overhead
            progress = (dt - overhead) * self.rate[run]
            progress = np.minimum(progress, self.work_left[run])
            self.work_left[run] -= progress
            self.useful_work_s += float((progress * self.gpus_req[run]).sum())
            self.attained_gpu_s[run] += self.gpus_req[run] * dt
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
            self.state[j] = JobState.DONE
            self.end[j] = self.now
            self._close_segment(j, preempted=False)
            self._count_preemptible(j, -1)
            self._add_load(self.profiles[j], -1.0)
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
                self._launch(r, self.placement[r])
        return bool(ended)

    def _release(self, job_id: int) -> None:
        gpus = self.placement[job_id]
        self.gpu_owner[gpus] = -1
        self.rate[job_id] = 0.0
        self.profiles.pop(job_id, None)
        self._recount_nodes(gpus)

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
        remaining = self.queued_remaining_s[job_id] = self.remaining_estimate_s(job_id)
        bisect.insort(self._by_remaining, (float(remaining), self._enqueued, job_id))
        self._queue_len += 1
        self.enqueue_seq[job_id] = self._enqueued
        self._enqueued += 1

    def _dequeue(self, job_id: int) -> None:
        key = (float(self.queued_remaining_s[job_id]), int(self.enqueue_seq[job_id]), job_id)
        del self._by_remaining[bisect.bisect_left(self._by_remaining, key)]
        ids = self._queue_ids
        i = int(np.flatnonzero(ids[: self._queue_len] == job_id)[0])
        ids[i : self._queue_len - 1] = ids[i + 1 : self._queue_len].copy()
        self._queue_len -= 1

    def _close_segment(self, job_id: int, preempted: bool) -> None:
        start = self._segment_start.pop(job_id)
        self.segments.append(Segment(job_id, self.placement[job_id].copy(), start, self.now, preempted))

    def fragmented_free_gpus(self, node_free: np.ndarray | None = None) -> int:
        """Free GPUs on nodes that cannot host an 8-GPU gang (a whole node, if smaller) alone."""
        free = self.node_free if node_free is None else node_free
        return int(free[free < self._whole_gang].sum())

    def _record(self) -> None:
        self.timeline.append(
            (self.now, self.allocated_gpus, self._queue_len, len(self.running), self.fragmented_free_gpus(), self.power_w)
        )
