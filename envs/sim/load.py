"""The simulator's load model: what the running jobs put on nodes and uplinks, and their rates.

`LoadModel` keeps, for one `Simulator`, the shared resources its running jobs contend for and
the rates that follow from them:

* `node_pressure`: memory-bandwidth pressure the running jobs put on each node,
* `uplink_demand`: GB/s the running jobs put on each leaf switch's uplink,
* `placed`: each placed job's profile as plain Python values (`Placed`), from launch until its
  GPUs are released (running or checkpointing),
* which running jobs share each node and which cross uplinks, and the nodes and uplinks whose
  load changed since the rates were last brought up to date.

The simulator tells it when a job starts (`start`) and stops (`stop`) running and, after each
change of the running set, has it recompute the rates that can have changed (`update_rates`):
only those of the jobs on a node or uplink whose load changed, since every other job's inputs are
what they were. `node_pressure` and `uplink_demand` are changed in place, never replaced, so views
of them stay live. Every float is computed by the same operations in the same order as the
vectorised formulas of envs.cluster.speed, so rates are bit-for-bit those of a full recomputation.
"""

from __future__ import annotations

import numpy as np

from envs.cluster.speed import PlacementProfile, SpeedModel, congestion_shares
from envs.cluster.topology import REFERENCE_NET_PER_GPU_GBPS, Cluster
from envs.core import jit as _jit
from envs.core import kernels as _kernels

PLACED_MEMO_LIMIT = 10_000  # `Placed` records kept per simulator (and its forks) before the memo is emptied


class Placed:
    """What a placed job's profile fixes, as plain Python values for the per-event scalar work:
    its nodes and GPUs on each, memory-bandwidth pressure per GPU and sensitivity to it, the
    uplinks it crosses, and its rate before interference when it crosses none. For a job on one
    node, also that node, its own pressure there, the node's GPUs and the interference
    coefficient times its sensitivity: the factors of its interference, as `update_rates`
    multiplies them. Never changed once made (nor are its lists), so copies of a LoadModel share
    these records."""

    __slots__ = ("profile", "nodes", "counts", "pressure", "sensitivity", "uplinks", "base_rate", "node0", "own0",
                 "gpus0", "coeff_sensitivity")

    def __init__(self, p: PlacementProfile, node_gpus: list[int], coeff: float):
        self.profile = p
        self.nodes: list[int] = p.nodes.tolist()
        self.counts: list[int] = p.gpus_on_node.tolist()
        self.pressure = p.pressure
        self.sensitivity = p.sensitivity
        self.uplinks: list[int] = p.uplinks.tolist()
        self.base_rate = p.min_speed * p.efficiency(1.0)
        single = len(self.nodes) == 1
        self.node0 = self.nodes[0] if single else -1  # -1: several nodes
        self.own0 = self.pressure * self.counts[0] if single else 0.0
        self.gpus0 = node_gpus[self.nodes[0]] if single else 0
        self.coeff_sensitivity = coeff * self.sensitivity  # coeff * sensitivity * x is (coeff * sensitivity) * x


class PlacedTable:
    """The `Placed` records' values as arrays, for the compiled rate update and event loop
    (envs.core.kernels.update_rates, run_events): row r of `f` holds a record's pressure, coefficient times
    sensitivity, rate before interference, min speed, TP stretch, DP bandwidth, c_tp and c_dp; of
    `i`, where its nodes start and end in `pool_i` (with the GPUs on each in `pool_counts`), where
    its uplinks end there (they follow its nodes, with the GB/s it puts on each in `pool_counts`),
    and whether its TP traffic crosses nodes. Append-only: rows and pool
    entries never change once written, so a LoadModel and its copies share one table, as they share
    the memo of records that says which row each record has (each job's row is in the model's own
    `job_slot`). A model renews both together when the memo is full (LoadModel._renew), so a table
    holds at most PLACED_MEMO_LIMIT records plus the model's placed jobs'."""

    def __init__(self):
        self.f = np.zeros((64, 8))
        self.i = np.zeros((64, 4), dtype=np.int64)
        self.pool_i = np.zeros(256, dtype=np.int64)
        self.pool_counts = np.zeros(256)
        self.rows = 0
        self.pooled = 0

    def add(self, p: Placed) -> int:
        """Append `p`'s values; returns its row."""
        r, k = self.rows, self.pooled
        n, u = len(p.nodes), len(p.uplinks)
        if r == len(self.f):
            self.f = np.concatenate((self.f, np.zeros_like(self.f)))
            self.i = np.concatenate((self.i, np.zeros_like(self.i)))
        while k + n + u > len(self.pool_i):
            self.pool_i = np.concatenate((self.pool_i, np.zeros_like(self.pool_i)))
            self.pool_counts = np.concatenate((self.pool_counts, np.zeros_like(self.pool_counts)))
        g = p.profile.geometry
        self.f[r] = (p.pressure, p.coeff_sensitivity, p.base_rate, p.profile.min_speed, g.tp_stretch, g.dp_bw_GBps,
                     p.profile.c_tp, p.profile.c_dp)
        self.i[r] = (k, k + n, k + n + u, g.tp_cross_node)
        self.pool_i[k:k + n] = p.nodes
        self.pool_counts[k:k + n] = p.counts
        self.pool_i[k + n:k + n + u] = p.uplinks
        self.pool_counts[k + n:k + n + u] = p.profile.uplink_demand_GBps
        self.rows, self.pooled = r + 1, k + n + u
        return r


class LoadModel:
    """Node and uplink load of the jobs running on `cluster`, and their rates under `speed_model`."""

    def __init__(self, cluster: Cluster, speed_model: SpeedModel):
        c = self.cluster = cluster
        self.speed_model = speed_model
        self._coeff = speed_model.interference_coeff
        self.node_pressure = np.zeros(c.num_nodes)  # (N,) memory-bandwidth pressure of the running jobs
        self.uplink_demand = np.zeros(len(c.switch_names))  # (S,) GB/s the running jobs put on each uplink
        self.placed: dict[int, Placed] = {}  # placed jobs (running or checkpointing) -> their profile's values
        self.node_jobs: list[set[int]] = [set() for _ in range(c.num_nodes)]  # running jobs on each node
        self.crossing: dict[int, list[int]] = {}  # running jobs that cross uplinks -> those uplinks
        # Nodes whose pressure and uplinks whose demand changed since the last rate update.
        # `Placed` records by profile (id, with the profile kept in the entry so the id stays
        # unique): jobs started on one shared profile share its record. Shared with copies.
        self._placed_of: dict[int, tuple[PlacementProfile, Placed, int]] = {}  # ... -> (profile, record, its row)
        # For the compiled rate update: the records' values (shared with copies, append-only) and
        # each placed job's row there.
        self._table = PlacedTable()
        self.job_slot = np.zeros(64, dtype=np.int64)  # placed job -> its record's row in the table
        # Nodes whose pressure and uplinks whose demand changed since the last rate update.
        self.dirty_node = np.zeros(c.num_nodes, dtype=bool)
        self.dirty_uplink = np.zeros(len(c.switch_names), dtype=bool)
        self._node_gpus = c.node_gpus.astype(np.float64)
        self._uplink_cap = np.asarray(c.switch_uplink_GBps, dtype=np.float64)

    def copy(self) -> LoadModel:
        """An independent copy (for `Simulator.fork`). Shared, not copied: the cluster, the speed
        model and the `Placed` records (with their lists), which nothing changes once made
        (`crossing` holds those records' `uplinks` lists); the arrays, dicts and sets are copied."""
        m = LoadModel.__new__(LoadModel)
        m.cluster = self.cluster
        m.speed_model = self.speed_model
        m._coeff = self._coeff
        m.node_pressure = self.node_pressure.copy()
        m.uplink_demand = self.uplink_demand.copy()
        m.placed = self.placed.copy()
        m.node_jobs = [s.copy() for s in self.node_jobs]
        m.crossing = self.crossing.copy()
        m._placed_of = self._placed_of
        m._table = self._table
        m.job_slot = self.job_slot.copy()
        m.dirty_node = self.dirty_node.copy()
        m.dirty_uplink = self.dirty_uplink.copy()
        m._node_gpus = self._node_gpus  # never changed
        m._uplink_cap = self._uplink_cap  # never changed
        return m

    def start(self, job_id: int, profile: PlacementProfile, add_load: bool = True) -> Placed:
        """`job_id` starts running with `profile`: it is placed and loads its nodes and uplinks
        (without `add_load`, the caller's compiled call adds its load: Simulator.start_and_run)."""
        memo = self._placed_of
        hit = memo.get(id(profile))
        if hit is None or hit[0] is not profile:
            if len(memo) > PLACED_MEMO_LIMIT:
                memo = self._renew()
            record = Placed(profile, self.cluster.node_lists.gpus, self._coeff)
            hit = memo[id(profile)] = (profile, record, self._table.add(record))
        placed = self.placed[job_id] = hit[1]
        slots = self.job_slot
        if job_id >= len(slots):
            slots = self.job_slot = np.concatenate((slots, np.zeros(max(job_id + 1, 2 * len(slots)) - len(slots), dtype=np.int64)))
        slots[job_id] = hit[2]
        if add_load:
            self._add_load(placed, 1.0)
        for n in placed.nodes:
            self.node_jobs[n].add(job_id)
        if placed.uplinks:
            self.crossing[job_id] = placed.uplinks
        return placed

    def _renew(self) -> dict:
        """A new, empty memo of records and a new table holding only this model's placed jobs'
        records (each job's row updated), so neither grows without bound over a long episode.
        New objects, not emptied ones: copies made before keep the memo and table they share."""
        memo, table = {}, PlacedTable()
        rows: dict[int, int] = {}  # id(record) -> its row in the new table (jobs may share a record)
        for j, p in self.placed.items():
            r = rows.get(id(p))
            if r is None:
                r = rows[id(p)] = table.add(p)
                memo[id(p.profile)] = (p.profile, p, r)
            self.job_slot[j] = r
        self._placed_of, self._table = memo, table
        return memo

    def stop(self, job_id: int) -> Placed:
        """`job_id` stops running (finished or preempted): it stops loading its nodes and uplinks
        but stays placed (see `release`)."""
        placed = self.placed[job_id]
        self._add_load(placed, -1.0)
        for n in placed.nodes:
            self.node_jobs[n].discard(job_id)
        self.crossing.pop(job_id, None)
        return placed

    def release(self, job_id: int) -> Placed:
        """`job_id` (stopped) lets its GPUs go: it is no longer placed."""
        return self.placed.pop(job_id)

    def _add_load(self, placed: Placed, sign: float) -> None:
        """A job starts (+1) or stops (-1) loading its nodes' memory bandwidth and its uplinks;
        the rates of jobs sharing them are due for an update."""
        pressure = sign * placed.pressure
        node_pressure, dirty_node = self.node_pressure, self.dirty_node
        for n, k in zip(placed.nodes, placed.counts):
            node_pressure[n] += pressure * k
            dirty_node[n] = True
        if placed.uplinks:
            p = placed.profile
            self.uplink_demand[p.uplinks] += sign * p.uplink_demand_GBps
            self.dirty_uplink[p.uplinks] = True

    def update_rates(self, rate: np.ndarray, interference: np.ndarray, running: np.ndarray) -> None:
        """Recompute into `rate` and `interference` (per job) those that can have changed: of the
        running jobs on nodes whose memory-bandwidth pressure changed and of those crossing an
        uplink whose demand changed. Every other job's inputs are what they were, so its rate is too.
        `running`: the running jobs' ids (the jobs this model has started and not stopped); the
        compiled path walks them (envs.core.kernels.update_rates), the reference path its sets."""
        if _jit.ENABLED:
            t = self._table
            _kernels.update_rates(running, self.dirty_node, self.dirty_uplink, self.job_slot, t.f, t.i, t.pool_i,
                                  t.pool_counts, self.node_pressure, self._node_gpus, self.uplink_demand,
                                  self._uplink_cap, REFERENCE_NET_PER_GPU_GBPS, rate, interference)
            return
        stale: set[int] = set()
        for n in np.flatnonzero(self.dirty_node).tolist():
            stale |= self.node_jobs[n]
        if self.dirty_uplink.any():
            dirty = set(np.flatnonzero(self.dirty_uplink).tolist())
            stale.update(j for j, uplinks in self.crossing.items() if not dirty.isdisjoint(uplinks))
        self.dirty_node[:] = False
        self.dirty_uplink[:] = False
        if stale:
            crossing = not self.crossing.keys().isdisjoint(stale)
            shares = congestion_shares(self.cluster, self.uplink_demand).tolist() if crossing else None
            # The pressures as Python floats, read once for all the stale jobs (the same values).
            # Per job, envs.cluster.speed's formulas in floats, the same operations in the same order
            # (speed.interference_factor, interference_from, congestion_shares, PlacementProfile.efficiency).
            pressure, node_gpus, placed = self.node_pressure.tolist(), self.cluster.node_lists.gpus, self.placed
            for j in stale:
                p = placed[j]
                n = p.node0
                if n >= 0:
                    others = (pressure[n] - p.own0) / p.gpus0
                else:
                    others = max((pressure[n] - p.pressure * k) / node_gpus[n] for n, k in zip(p.nodes, p.counts))
                # interference_from(others, sensitivity, model), inlined
                interf = 1.0 / (1.0 + p.coeff_sensitivity * (0.0 if 0.0 > others else others))
                interference[j] = interf
                if p.uplinks:
                    profile = p.profile
                    congestion = min(shares[u] for u in p.uplinks)
                    rate[j] = profile.min_speed * profile.efficiency(congestion) * interf
                else:
                    rate[j] = p.base_rate * interf
