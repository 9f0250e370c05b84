"""Candidate placements, their features, and the one action mask.

At a decision point the candidates are, for each of up to Q jobs of a queue window, one
placement per rule in `RULES`, plus WAIT (advance to the next event). Candidate index
`slot * len(RULES) + rule`; WAIT is the last index. Every heuristic baseline picks one of these
candidates, so a learned policy can always do what any baseline does.

The window: queued jobs that have at least one valid placement, taken round-robin from the
heads of four orders, so that each classic rule's favourite job is always present:
arrival (FIFO), shortest estimated remaining time, highest priority, least attained service.

This module is the single source of truth for the mask: the env, the baselines and the scoring
service all call `build_candidates`.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.jobs import Job
from envs.simulator import Simulator, fragmented_change
from envs.speed import (
    PlacementGeometry,
    PlacementProfile,
    efficiency_of,
    interference_from,
    job_constants,
    job_profile,
    placement_geometry,
)
from envs.topology import Cluster

RULES = ("binpack", "spread", "topology", "preempt")
BINPACK, SPREAD, TOPOLOGY, PREEMPT = range(4)
WINDOW_ORDERS = ("arrival", "shortest", "priority", "least_attained")
DEFAULT_QUEUE_WINDOW = 8

CANDIDATE_FEATURES = (
    "gang_log2", "tp_log2", "kind_pretrain", "kind_finetune", "kind_inference", "kind_batch",
    "priority", "preemptible", "est_remaining_log", "wait_log", "progress", "comm_fraction",
    "mem_per_gpu", "was_preempted",
    "valid", "rule_binpack", "rule_spread", "rule_topology", "rule_preempt", "is_wait",
    "predicted_rate", "placement_efficiency", "interference", "tier", "nodes_per_gpu",
    "free_nodes_consumed", "fragmentation_delta", "preemption_cost_log", "victims",
    "min_gpu_speed", "est_runtime_here_log", "next_event_log",
)
GLOBAL_FEATURES = (
    "queue_log", "queued_gpu_demand", "allocated", "free", "free_nodes", "fragmentation",
    "running_share", "reserved_share", "time_log", "queued_high_priority", "mean_wait_log",
    "next_arrival_log",
)
NUM_CANDIDATE_FEATURES = len(CANDIDATE_FEATURES)
NUM_GLOBAL_FEATURES = len(GLOBAL_FEATURES)
_F = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}


class Candidate:
    """One action. `valid` is known up front (from GPU counts); the placement itself (`gpus`,
    `victims`, `profile`) is worked out on first access, so a rule that looks at one candidate
    pays for one placement."""

    __slots__ = ("job_id", "rule", "valid", "_placer", "_placement", "_profile")

    def __init__(self, job_id: int, rule: int, valid: bool = False, placer: _Placer | None = None):
        self.job_id = job_id  # -1 for WAIT and for empty slots
        self.rule = rule  # index into RULES; -1 for WAIT
        self.valid = valid
        self._placer = placer
        self._placement: tuple | None = None
        self._profile: PlacementProfile | None = None

    def _get(self) -> tuple:
        if self._placement is None:
            if not self.valid or self._placer is None:
                self._placement = (None, (), None)
            else:
                self._placement = self._placer.resolve(self.job_id, self.rule)
                if self._placement[0] is None:
                    raise RuntimeError(f"candidate job {self.job_id} rule {RULES[self.rule]} was valid by count but found no placement")
        return self._placement

    @property
    def gpus(self) -> np.ndarray | None:
        """Global GPU ids, grouped so consecutive runs of tp_degree form the TP groups."""
        return self._get()[0]

    @property
    def victims(self) -> tuple[int, ...]:
        return self._get()[1]

    @property
    def geometry(self) -> PlacementGeometry | None:
        return self._get()[2]

    @property
    def profile(self) -> PlacementProfile | None:
        """The job on this placement (built on first access: features need only the geometry)."""
        if self._profile is None and self.geometry is not None:
            sim = self._placer.sim
            self._profile = job_profile(sim.jobs[self.job_id], self.geometry, sim.config.speed_model)
        return self._profile


@dataclass
class CandidateSet:
    window: list[int]  # job ids, one per slot
    candidates: list[Candidate]  # K = Q * len(RULES) + 1; the last is WAIT
    mask: np.ndarray  # (K,) bool

    @property
    def wait_index(self) -> int:
        return len(self.candidates) - 1

    def index(self, slot: int, rule: int) -> int:
        return slot * len(RULES) + rule


def num_candidates(queue_window: int) -> int:
    return queue_window * len(RULES) + 1


# ---------------------------------------------------------------- placement rules


def _pick_gpus_in_node(sim: Simulator, node: int, count: int, avail: np.ndarray) -> np.ndarray:
    """`count` available GPUs of one node, inside one NUMA socket when they fit in one
    (memoised per cluster by node, count and the node's availability pattern)."""
    c = sim.cluster
    lo = c.node_first_gpu[node]
    pattern = avail[lo : lo + c.node_gpus[node]]
    memo = _bounded(c.memo, "gpu_picks")
    key = (node, count, pattern.tobytes())
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _pick_in_pattern(sim, lo, count, pattern)
        hit.flags.writeable = False  # shared by every placement that picks it
    return hit


def _pick_in_pattern(sim: Simulator, lo: int, count: int, pattern: np.ndarray) -> np.ndarray:
    c = sim.cluster
    ids = lo + np.flatnonzero(pattern)
    if count == len(ids):
        return ids
    sockets = c.gpu_socket[ids]
    per_socket = np.bincount(sockets)
    fits = np.flatnonzero(per_socket >= count)
    if len(fits):
        best = fits[np.argmin(per_socket[fits])]  # best-fit socket
        return ids[sockets == best][:count]
    order = np.argsort(-per_socket[sockets], kind="stable")
    return np.sort(ids[order][:count])


def _gpus_from_counts(sim: Simulator, take: dict[int, int], avail: np.ndarray) -> np.ndarray:
    """Concrete GPU ids for per-node counts, grouped by node (TP groups are consecutive runs)."""
    if len(take) == 1:
        (n, k), = take.items()
        return _pick_gpus_in_node(sim, n, k, avail)
    return np.concatenate([_pick_gpus_in_node(sim, n, k, avail) for n, k in take.items() if k > 0])


def _best_fit(free: Sequence[int], need: int) -> int | None:
    """The node with the fewest free GPUs among those with at least `need` (lowest id on ties):
    the first node holding each count from `need` up, found by C-level scans."""
    present = set(free)
    for count in range(need, max(free, default=0) + 1):
        if count in present:
            return free.index(count)
    return None


def _binpack(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Fewest nodes, fullest first: best-fit single node, else fill from the nodes with the
    most free GPUs and best-fit the remainder (blind to switches)."""
    n = _best_fit(free, need)
    if n is not None:
        return {n: need}
    if sum(free) < need:
        return None
    take: dict[int, int] = {}
    left = list(free)
    while need > 0:
        n = _best_fit(left, need)
        if n is not None:
            take[n] = take.get(n, 0) + need
            break
        n = left.index(max(left))  # the most free, lowest id on ties
        take[n] = left[n]
        need -= left[n]
        left[n] = 0
    return take


def _spread(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Least-loaded first, one GPU at a time (how pods of a gang spread across nodes): each
    unit goes to the node with the most left, lowest id on ties."""
    if sum(free) < need:
        return None
    heap = list(zip(map(operator.neg, free), range(len(free))))
    heapq.heapify(heap)
    take: dict[int, int] = {}
    for _ in range(need):
        f, n = heap[0]
        take[n] = take.get(n, 0) + 1
        heapq.heapreplace(heap, (f + 1, n))
    return dict(sorted(take.items()))


def _fill_domain(free: np.ndarray, nodes: np.ndarray, need: int, tp: int, speed: np.ndarray) -> dict[int, int]:
    """Inside one switch domain: whole TP groups per node, fastest then emptiest nodes first,
    best-fit the last groups; leftovers (only when groups cannot all align, which the aligned
    topology rule never asks for) in the same order."""
    take: dict[int, int] = {}
    groups_left = need // tp
    order = nodes[np.lexsort((-free[nodes], -speed[nodes]))]
    cap = free.copy()
    for n in order:
        if groups_left == 0:
            break
        fits = order[(cap[order] // tp) >= groups_left]
        if len(fits):
            # Best fit among the fastest nodes that can take every remaining group.
            fast = fits[speed[fits] == speed[fits].max()]
            last = int(fast[np.argmin(cap[fast])])
            take[last] = take.get(last, 0) + groups_left * tp
            cap[last] -= groups_left * tp
            groups_left = 0
            break
        g = int(cap[n] // tp)
        if g:
            take[int(n)] = take.get(int(n), 0) + g * tp
            cap[n] -= g * tp
            groups_left -= g
    rest = groups_left * tp + need % tp
    for n in order:
        if rest == 0:
            break
        k = int(min(cap[n], rest))
        if k:
            take[int(n)] = take.get(int(n), 0) + k
            cap[n] -= k
            rest -= k
    return take


def _aligned(free: np.ndarray, tp: int) -> np.ndarray:
    """Per node, the free GPUs usable in whole TP groups."""
    return free // tp * tp


def _topology(c: Cluster, free: Sequence[int], need: int, tp: int) -> dict[int, int] | None:
    """Smallest interconnect tier that fits the gang with every TP group inside one node; the
    tightest fit inside it (faster GPUs first among equal domains)."""
    lists = c.node_lists
    if lists.uniform_speed:
        best = _best_fit(free, need)
    else:  # fastest, then tightest, then lowest id
        best = min(((-lists.speed[n], f, n) for n, f in enumerate(free) if f >= need), default=(0, 0, None))[2]
    if best is not None:
        return {best: need}
    usable = np.array(free, dtype=np.int64) // tp * tp
    if usable.sum() < need:
        return None
    speed = c.node_speed
    for level in range(1, int(c.switch_level.max(initial=0)) + 1):
        domains = np.flatnonzero(c.switch_level == level)
        if not len(domains):
            continue
        under = c.node_under_switch[:, domains]
        dom_free = usable @ under
        ok = np.flatnonzero(dom_free >= need)
        if len(ok):
            # Mean speed of the domain's usable GPUs, then tightest fit.
            dom_speed = (usable * speed) @ under[:, ok] / dom_free[ok]
            d = domains[ok[np.lexsort((dom_free[ok], -dom_speed))[0]]]
            return _fill_domain(usable, np.flatnonzero(c.node_under_switch[:, d] & (usable > 0)), need, tp, speed)
    return _fill_domain(usable, np.flatnonzero(usable > 0), need, tp, speed)


def _single_type(c: Cluster, free: Sequence[int], need: int, rule: int, tp: int) -> Sequence[int]:
    """Restrict `free` (per node) to one GPU type when one type alone can host the gang (in
    whole TP groups), as a job submitted with a GPU-model selector would be: spread takes the
    type with the most room, every other rule the tightest fit (lowest type id on ties)."""
    lists = c.node_lists
    if lists.num_types == 1:
        return free
    per_type = [0] * lists.num_types
    for f, t in zip(free, lists.gpu_type):
        per_type[t] += f // tp * tp
    fits = [t for t in range(lists.num_types) if per_type[t] >= need]
    if not fits:
        return free
    t = (max if rule == SPREAD else min)(fits, key=per_type.__getitem__)
    return [f if ty == t else 0 for f, ty in zip(free, lists.gpu_type)]


_MEMO_LIMIT = 200_000  # entries per memo before it is emptied


def _bounded(memo: dict, name) -> dict:
    """The table `name` of a memo dict, emptied once it holds more than _MEMO_LIMIT entries."""
    table = memo.get(name)
    if table is None or len(table) > _MEMO_LIMIT:
        table = memo[name] = {}
    return table


def place(sim: Simulator, job: Job, rule: int, avail: np.ndarray | None = None) -> np.ndarray | None:
    """GPU ids for `job` under one placement rule over the available GPUs (default: free).
    A gang stays on one GPU type whenever one type can host it."""
    c = sim.cluster
    mem = job.mem_per_gpu_gb
    if avail is None:
        avail = _free_mask(sim)
        by_memory = sim.alloc_cache().setdefault("eligible_free", {})
        free = by_memory.get(mem)
        if free is None:
            free = by_memory[mem] = _eligible(c, _free_view(sim)[0], mem)
    else:
        free = _eligible(c, np.add.reduceat(avail.view(np.int8), c.node_first_gpu).tolist(), mem)
    take = _node_take(c, free, job.gpus, job.tp_degree, rule)
    return None if take is None else _gpus_from_counts(sim, take, avail)


def _eligible(c: Cluster, counts: list[int], mem: float) -> tuple[int, ...]:
    """The per-node counts with 0 on nodes whose GPUs have less than `mem` GB (a node's GPUs all
    have its type's memory)."""
    lists = c.node_lists
    if mem <= lists.min_memory_gb:
        return tuple(counts)
    return tuple([f if m >= mem else 0 for f, m in zip(counts, lists.memory_gb)])


def _node_take(c: Cluster, free: Sequence[int], need: int, tp: int, rule: int) -> dict[int, int] | None:
    """Per node, how many of its eligible available GPUs (`free`) the rule gives the gang."""
    free = _single_type(c, free, need, rule, tp)
    if rule in (BINPACK, SPREAD):
        # A gang is a set of pods, one per TP group, each on one node: pack or spread pods.
        units = (_binpack if rule == BINPACK else _spread)([f // tp for f in free] if tp > 1 else free, need // tp)
        return None if units is None else {n: k * tp for n, k in units.items()}
    return _topology(c, free, need, tp)  # TOPOLOGY, and PREEMPT: the topology rule over free and victims' GPUs


def _free_mask(sim: Simulator) -> np.ndarray:
    """`sim.free_gpu_mask()`, once per allocation (read it, do not change it)."""
    cache = sim.alloc_cache()
    mask = cache.get("free_mask")
    if mask is None:
        mask = cache["free_mask"] = sim.free_gpu_mask()
    return mask


def _aligned_total(counts: list[int], tp: int) -> int:
    """GPUs usable in whole TP groups over nodes with these available counts."""
    return sum([f // tp * tp for f in counts])


def choose_victims(sim: Simulator, job: Job) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """Place-after-preempt: the cheapest lower-priority preemptible running jobs whose GPUs,
    with the free ones, hold the gang in whole TP groups per node; placement by the topology
    rule. None when the job fits without preemption or cannot fit even with it."""
    c = sim.cluster
    mem, tp = job.mem_per_gpu_gb, job.tp_degree
    counts = list(_eligible(c, _free_view(sim)[0], mem))  # per node: free GPUs, then also the victims'
    if _aligned_total(counts, tp) >= job.gpus:
        return None
    run = sim.running
    pool = run[sim.preemptible[run] & (sim.priority[run] < job.priority)]
    if not len(pool):
        return None
    memory = c.node_lists.memory_gb
    held = []  # per candidate victim: (node, GPUs) on nodes the job can use
    for v in pool.tolist():
        p = sim.profiles[v]
        held.append([(n, k) for n, k in zip(p.nodes.tolist(), p.gpus_on_node.tolist()) if memory[n] >= mem])
    useful = np.array([sum(k for _, k in h) for h in held])
    cost = sim.preemption_cost_gpu_s(pool)
    chosen: list[int] = []
    for i in np.lexsort((-useful, cost)).tolist():
        if _aligned_total(counts, tp) >= job.gpus:
            break
        if useful[i] > 0:
            chosen.append(int(pool[i]))
            for n, k in held[i]:
                counts[n] += k
    if _aligned_total(counts, tp) < job.gpus:
        return None
    avail = _free_mask(sim).copy()
    for v in chosen:
        avail[sim.placement[v]] = True
    gpus = place(sim, job, PREEMPT, avail)
    if gpus is None:
        return None
    used = np.zeros(c.num_gpus, dtype=bool)
    used[gpus] = True
    victims = tuple(v for v in chosen if used[sim.placement[v]].any())
    return (gpus, victims) if victims else None


# ---------------------------------------------------------------- window and candidates


def feasible_queue(sim: Simulator) -> np.ndarray:
    """Queued jobs that fit now, or fit after preempting lower-priority preemptible jobs (once
    per state: read it, do not change it)."""
    cache = sim.state_cache()
    feasible = cache.get("feasible_queue")
    if feasible is None:
        q = sim.queue_ids()
        feasible = cache["feasible_queue"] = q[_class_fits(sim)[2][_job_classes(sim)[0][q]]]
    return feasible


def fit_status(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queue, fits now with whole TP groups per node, fits in whole groups only after
    preemption), by GPU counts alone: every placement rule finds a placement exactly when its
    count allows one."""
    q = sim.queue_ids()
    cls = _job_classes(sim)[0][q]
    fits_aligned, fits_preempt, _ = _class_fits(sim)
    return q, fits_aligned[cls], fits_preempt[cls]


def _memory_classes(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node GPU memory, the distinct memory sizes, each job's eligibility class): a job can use
    the nodes whose memory is at least the smallest size that satisfies it."""
    cached = sim.episode_cache.get("memory_classes")
    if cached is None:
        c = sim.cluster
        node_memory = np.array([t.memory_gb for t in c.gpu_types])[c.node_gpu_type]
        levels = np.unique(node_memory)
        job_level = levels[np.minimum(np.searchsorted(levels, sim.mem_req), len(levels) - 1)]
        cached = sim.episode_cache["memory_classes"] = (node_memory, levels, job_level)
    return cached


def _job_classes(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Jobs grouped by what decides whether they fit: (each job's class, and per class the gang
    size, TP degree, memory eligibility level and priority). Fixed for the episode."""
    cached = sim.episode_cache.get("job_classes")
    if cached is None:
        _, _, job_level = _memory_classes(sim)
        keys = np.stack([sim.gpus_req, sim.tp_degree, job_level, sim.priority]).T.astype(float)
        uniq, job_class = np.unique(keys, axis=0, return_inverse=True)
        cached = sim.episode_cache["job_classes"] = (
            job_class.reshape(-1).astype(np.int64), uniq[:, 0].astype(np.int64), uniq[:, 1].astype(np.int64),
            uniq[:, 2], uniq[:, 3].astype(np.int64))
    return cached


def _class_index(sim: Simulator) -> tuple[np.ndarray, ...]:
    """What `_class_fits` looks up, fixed for the episode: (priorities, priorities) 1 where the
    column's priority is strictly below the row's; (levels, nodes) whether a node's GPUs have a
    memory level's size; (free count, TP degrees) the GPUs usable in whole TP groups on a node
    with that many free; and the flat positions in the (priorities, levels, TP degrees) totals
    that each job class reads, without preemption and then with it (the row of its priority)."""
    cached = sim.episode_cache.get("class_index")
    if cached is None:
        node_memory, levels, _ = _memory_classes(sim)
        _, need, tps, mems, prios = _job_classes(sim)
        tp_values, tp_of = np.unique(tps, return_inverse=True)
        on_level = (node_memory[None, :] >= levels[:, None]).astype(np.int64)
        counts = np.arange(int(sim.cluster.node_gpus.max()) + 1)
        by_free = _aligned(counts[:, None], tp_values[None, :])
        n_priorities = sim.node_preemptible.shape[1]
        lower = np.tril(np.ones((n_priorities, n_priorities), dtype=np.int64), -1)
        cell = np.searchsorted(levels, mems) * len(tp_values) + tp_of.reshape(-1)
        positions = np.concatenate([cell, prios * len(levels) * len(tp_values) + cell])
        cached = sim.episode_cache["class_index"] = (lower, on_level, by_free, positions, np.concatenate([need, need]))
    return cached


def _class_fits(sim: Simulator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job class: fits now in whole TP groups per node, fits that way only after
    preempting lower-priority preemptible jobs, and either. Depends on the allocation alone, so
    it is worked out once per allocation change for every class (a trace of 80,000 jobs has a
    few dozen)."""
    cache = sim.alloc_cache()
    hit = cache.get("class_fits")
    if hit is not None:
        return hit
    lower, on_level, by_free, positions, need = _class_index(sim)
    # GPUs usable in whole TP groups for every (memory level, TP degree), counting on each node
    # its free GPUs and, in row p, also those held by preemptible jobs of priority < p (row 0:
    # free alone): per node from a lookup by that count, summed over the nodes of each level.
    counts = sim.node_free + lower @ sim.node_preemptible.T  # (priorities, nodes)
    fits = need <= (on_level @ by_free[counts]).take(positions)  # (priorities, levels, TP degrees), read per class
    n = len(fits) // 2
    fits_aligned = fits[:n]
    fits_preempt = fits[n:] & ~fits_aligned
    cache["class_fits"] = hit = (fits_aligned, fits_preempt, fits_aligned | fits_preempt)
    return hit


def _shortest_head(sim: Simulator, k: int, walk_limit: int = 256) -> list[int] | None:
    """The first k feasible jobs by remaining estimate (ties in queue order), walked from the
    simulator's sorted queue; None when more than `walk_limit` infeasible jobs come first."""
    feasible_class = _class_fits(sim)[2].tolist()
    job_class = _job_classes(sim)[0]
    out: list[int] = []
    for n, (_, _, j) in enumerate(sim.queue_by_remaining()):
        if feasible_class[job_class[j]]:
            out.append(j)
            if len(out) == k:
                break
        elif n - len(out) > walk_limit:
            return None
    return out


def select_window(sim: Simulator, queue_window: int) -> list[int]:
    feasible = feasible_queue(sim)
    if len(feasible) <= queue_window:
        return feasible.tolist()

    def head(key: np.ndarray) -> np.ndarray:
        """The first 2Q jobs of a stable sort by `key` (ties in queue order), in O(n): no order
        is walked further than that, since at most Q picks and Q skips happen in each."""
        k = 2 * queue_window
        if len(key) <= k:
            return feasible[np.argsort(key, kind="stable")]
        lowest = np.flatnonzero(key == key.min())
        if len(lowest) >= k:  # common: equal priorities, nothing attained yet
            return feasible[lowest[:k]]
        cut = np.partition(key, k - 1)[k - 1]
        less = np.flatnonzero(key < cut)
        ties = np.flatnonzero(key == cut)[: k - len(less)]
        top = np.concatenate([less, ties])
        top = top[np.lexsort((top, key[top]))]
        return feasible[top]

    shortest = _shortest_head(sim, 2 * queue_window)
    orders = [
        feasible,  # the queue is kept in (re)arrival order
        head(sim.queued_remaining_s[feasible]) if shortest is None else shortest,  # = remaining_estimate_s while queued
        head(-sim.priority[feasible].astype(float)),
        head(sim.attained_gpu_s[feasible]),
    ]
    window: list[int] = []
    seen: set[int] = set()
    heads = [0] * len(orders)
    while len(window) < queue_window:
        for k, order in enumerate(orders):
            while heads[k] < len(order) and int(order[heads[k]]) in seen:
                heads[k] += 1
            if heads[k] < len(order) and len(window) < queue_window:
                j = int(order[heads[k]])
                window.append(j)
                seen.add(j)
    return window


def geometry_of(sim: Simulator, gpus: np.ndarray, tp_degree: int) -> PlacementGeometry:
    """`placement_geometry`, memoised per cluster and speed model (placements recur as the
    cluster cycles, and across episodes)."""
    memo = sim.episode_cache.get("geometry")
    if memo is None or len(memo) > _MEMO_LIMIT:
        memo = sim.episode_cache["geometry"] = _bounded(sim.cluster.memo, ("geometry", sim.config.speed_model))
    key = (gpus.tobytes(), tp_degree)
    g = memo.get(key)
    if g is None:
        g = memo[key] = placement_geometry(sim.cluster, gpus, tp_degree, sim.config.speed_model)
    return g


class _Placer:
    """Works out a candidate's placement on first access, for all candidates of one decision."""

    __slots__ = ("sim", "shapes")

    def __init__(self, sim: Simulator):
        self.sim = sim
        # Placements depend only on the gang's shape and the free GPUs, not on which job it is
        # nor on the queue: share them across jobs and across decisions until an allocation changes.
        self.shapes: dict[tuple, tuple] = sim.alloc_cache().setdefault("shapes", {})

    def resolve(self, job_id: int, rule: int) -> tuple:
        sim = self.sim
        job = sim.jobs[job_id]
        if rule == PREEMPT:
            chosen = choose_victims(sim, job)
            if chosen is None:
                return None, (), None
            return chosen[0], chosen[1], geometry_of(sim, chosen[0], job.tp_degree)
        key = (rule, job.gpus, job.tp_degree, job.mem_per_gpu_gb)
        hit = self.shapes.get(key)
        if hit is None:
            gpus = place(sim, job, rule)
            hit = self.shapes[key] = (gpus, None if gpus is None else geometry_of(sim, gpus, job.tp_degree))
        return hit[0], (), hit[1]


# Candidates of empty window slots and WAIT are the same at every decision: shared, never placed.
_EMPTY_SLOTS: list[Candidate] = []  # rule k % len(RULES) at position k
_WAIT, _NO_WAIT = Candidate(-1, -1, True), Candidate(-1, -1, False)


def build_candidates(sim: Simulator, queue_window: int = DEFAULT_QUEUE_WINDOW) -> CandidateSet:
    """The candidate list and its mask at the simulator's current state."""
    window = select_window(sim, queue_window)
    fits_aligned, fits_preempt, _ = _class_fits(sim)
    cls = _job_classes(sim)[0][window]
    R = len(RULES)
    placer = _Placer(sim)
    cands = []
    # Binpack, spread and topology all pack whole TP groups: valid exactly when the class fits.
    for j, aligned, preempt in zip(window, fits_aligned[cls].tolist(), fits_preempt[cls].tolist()):
        cands += [Candidate(j, r, aligned, placer if aligned else None) for r in range(PREEMPT)]
        cands.append(Candidate(j, PREEMPT, preempt, placer if preempt else None))
    while len(_EMPTY_SLOTS) < queue_window * R:
        _EMPTY_SLOTS.append(Candidate(-1, len(_EMPTY_SLOTS) % R))
    cands += _EMPTY_SLOTS[: (queue_window - len(window)) * R]
    # WAIT needs something to wait for; without a future event some placement is always valid.
    cands.append(_WAIT if sim.next_event_s() < np.inf else _NO_WAIT)
    mask = np.array([cd.valid for cd in cands])
    return CandidateSet(window, cands, mask)


def apply_candidate(sim: Simulator, cset: CandidateSet, action: int) -> None:
    """Carry out candidate `action` (WAIT advances the simulation to the next event)."""
    if not 0 <= action < len(cset.candidates) or not cset.mask[action]:
        raise ValueError(f"action {action} is not a valid candidate (mask: {np.flatnonzero(cset.mask).tolist()})")
    cd = cset.candidates[action]
    if cd.rule == -1:
        sim.advance()
    elif cd.victims:
        sim.preempt_and_start(cd.job_id, cd.gpus, list(cd.victims))
    else:
        sim.start(cd.job_id, cd.gpus, cd.profile)


# ---------------------------------------------------------------- features


def _log_scale(x: float) -> float:
    """log10(1 + x) / 6: one second -> 0.05, one hour -> 0.59, eleven days -> 1."""
    return math.log10(1.0 + max(x, 0.0)) / 6.0


def fragmentation(sim: Simulator) -> float:
    """Share of free GPUs that cannot host an 8-GPU gang inside one node."""
    _, total, fragmented, _ = _free_view(sim)
    return fragmented / total if total else 0.0


def _static_job_features(sim: Simulator) -> np.ndarray:
    """(jobs, 14) the job columns of the candidate features; dynamic ones filled per step."""
    jobs = sim.jobs
    out = np.zeros((len(jobs), 14), dtype=np.float32)
    gpus = sim.gpus_req.astype(float)
    tp = np.array([j.tp_degree for j in jobs], dtype=float)
    out[:, 0] = np.log2(gpus) / 7.0
    out[:, 1] = np.log2(tp) / 3.0
    out[np.arange(len(jobs)), 2 + np.array([int(j.kind) for j in jobs], dtype=np.int64)] = 1.0
    out[:, 6] = sim.priority / 2.0
    out[:, 7] = sim.preemptible
    out[:, 11] = [j.comm_fraction for j in jobs]
    out[:, 12] = sim.mem_req / 80.0
    return out


def _free_view(sim: Simulator) -> tuple[list[int], int, int, int]:
    """(free GPUs per node as a list, their total, the fragmented ones among them, nodes wholly
    free), once per allocation."""
    cache = sim.alloc_cache()
    hit = cache.get("free_view")
    if hit is None:
        free = sim.node_free.tolist()
        whole = int(np.count_nonzero(sim.node_free == sim.cluster.node_gpus))
        hit = cache["free_view"] = (free, sum(free), sim.fragmented_free_gpus(), whole)
    return hit


def _geometry_columns(sim: Simulator, g: PlacementGeometry) -> tuple:
    """Features of one placement that do not depend on which job of equal shape runs there:
    (tier / 3, nodes per GPU, share of whole free nodes it takes, change in fragmentation,
    min GPU speed, neighbours' pressure per GPU on its worst node, TP stretch, and the TP
    congestion factor and DP bandwidth under the congestion its uplinks would have if it started)."""
    lists = sim.cluster.node_lists
    free, total, frag, _ = _free_view(sim)
    whole = taken = 0
    frag_after = frag
    nodes, on_node = g.nodes.tolist(), g.gpus_on_node.tolist()
    for n, k in zip(nodes, on_node):
        f = free[n]
        whole += f == lists.gpus[n]
        t = min(k, f)
        taken += t
        frag_after += fragmented_change(f, f - t, lists.whole_gang[n])
    left = total - taken
    frag_delta = (frag_after / left if left else 0.0) - (frag / total if total else 0.0)
    tp_congestion, dp_bw = g.congested(_congestion_if_added(sim, g))
    return (float(g.tier) / 3.0, len(nodes) / sum(on_node), float(whole) / len(nodes), min(max(frag_delta, -1.0), 1.0),
            g.min_speed, _neighbour_pressure(sim, g), g.tp_stretch, tp_congestion, dp_bw)


def _neighbour_pressure(sim: Simulator, g: PlacementGeometry) -> float:
    """Memory-bandwidth pressure per GPU of the jobs already on the placement's worst node."""
    pressure, node_gpus = sim.node_pressure, sim.cluster.node_gpus
    if len(g.nodes) == 1:
        return pressure[g.nodes[0]] / node_gpus[g.nodes[0]]
    return float((pressure[g.nodes] / node_gpus[g.nodes]).max())


def _congestion_if_added(sim: Simulator, g: PlacementGeometry) -> float:
    if not len(g.uplinks):
        return 1.0
    added = sim.uplink_demand[g.uplinks] + g.uplink_demand_GBps
    return float(np.minimum(1.0, sim.cluster.switch_uplink_GBps[g.uplinks] / added).min())


def predicted_rate(sim: Simulator, cd: Candidate) -> float:
    """Reference-seconds of work per second the candidate's job would get if started now."""
    p = cd.profile
    interf = interference_from(_neighbour_pressure(sim, p.geometry), p.sensitivity, sim.config.speed_model)
    return p.min_speed * p.efficiency(_congestion_if_added(sim, p.geometry)) * interf


def _job_constants(sim: Simulator) -> list[tuple[float, float, float, float]]:
    """`speed.job_constants` of every job of the episode."""
    cached = sim.episode_cache.get("job_constants")
    if cached is None:
        model = sim.config.speed_model
        cached = sim.episode_cache["job_constants"] = [job_constants(j, model) for j in sim.jobs]
    return cached


_RULE_ONE_HOT = np.eye(len(RULES), dtype=np.float32)  # the rule columns of one window slot's rows
_JOB_DYNAMIC = [_F["est_remaining_log"], _F["wait_log"], _F["progress"], _F["was_preempted"]]
_PLACEMENT_BLOCK = slice(_F["predicted_rate"], _F["est_runtime_here_log"] + 1)  # columns filled per valid candidate
assert _F["valid"] + 1 == _F["rule_binpack"] and _F["rule_preempt"] + 2 == _F["is_wait"] + 1 == _PLACEMENT_BLOCK.start
_VALID_RULE_PREFIX = [(1.0, *np.eye(len(RULES))[r].tolist(), 0.0) for r in range(len(RULES))]  # valid, rule one-hot, is_wait


def candidate_features(sim: Simulator, cset: CandidateSet) -> tuple[np.ndarray, np.ndarray]:
    """(K, NUM_CANDIDATE_FEATURES) and (NUM_GLOBAL_FEATURES,) float32, scaled to about [-1, 1]
    and independent of the cluster's size. A typical decision has a few window jobs and a few
    valid candidates, so their numbers are worked out in plain floats, row by row, and written
    with one array assignment per block."""
    c = sim.cluster
    R = len(RULES)
    feats = np.zeros((len(cset.candidates), NUM_CANDIDATE_FEATURES), dtype=np.float32)
    now = sim.now
    static = sim.episode_cache.get("static_job_features")
    if static is None:
        static = sim.episode_cache["static_job_features"] = _static_job_features(sim)

    # Job columns, the same on each rule's row of a window slot.
    window = np.array(cset.window, dtype=np.int64)
    nw = len(window)
    rem = sim.remaining_estimate_s(window).tolist()
    if nw:
        done = (sim.work_total[window] - sim.work_left[window]).tolist()
        wait = (now - sim.queued_since[window] + sim.wait_s[window]).tolist()
        restore = sim.needs_restore[window].tolist()
        jrows = static[window]
        jrows[:, _JOB_DYNAMIC] = [(_log_scale(r), _log_scale(w), d / (d + r) if d + r > 0 else 0.0, float(b))
                                  for r, d, w, b in zip(rem, done, wait, restore)]
        by_rule = feats[: nw * R].reshape(nw, R, NUM_CANDIDATE_FEATURES)
        by_rule[:, :, :14] = jrows[:, None, :]
        by_rule[:, :, _F["rule_binpack"] : _F["rule_binpack"] + R] = _RULE_ONE_HOT

    # Placement columns: per geometry (cached until the allocation changes), then per job.
    per_geometry: dict[int, tuple] = sim.alloc_cache().setdefault("placement_columns", {})
    constants = _job_constants(sim)
    model = sim.config.speed_model
    for i in cset.mask[:-1].nonzero()[0].tolist():
        cd = cset.candidates[i]
        g = cd.geometry
        hit = per_geometry.get(id(g))
        if hit is None or hit[0] is not g:
            hit = per_geometry[id(g)] = (g, *_geometry_columns(sim, g))
        _, tier, nodes_per_gpu, whole, frag_delta, min_speed, others, tp_stretch, tp_congestion, dp_bw = hit
        c_tp, c_dp, _, sensitivity = constants[cd.job_id]
        eff = efficiency_of(tp_stretch, tp_congestion, dp_bw, c_tp, c_dp)
        interf = interference_from(others, sensitivity, model)
        rate = min_speed * eff * interf
        victims = cd.victims
        lost = _log_scale(float(sim.preemption_cost_gpu_s(np.array(victims)).sum())) if victims else 0.0
        # valid, the rule's one-hot, is_wait, then the placement block.
        feats[i, _F["valid"] : _PLACEMENT_BLOCK.stop] = _VALID_RULE_PREFIX[cd.rule] + (
            rate, eff, interf, tier, nodes_per_gpu, whole, frag_delta, lost, min(len(victims) / 4.0, 1.0), min_speed,
            _log_scale(rem[i // R] / max(rate, 1e-6)))
    w = cset.wait_index
    next_event = sim.next_event_s()
    feats[w, _F["valid"]] = float(cset.mask[w])
    feats[w, _F["is_wait"]] = 1.0
    feats[w, _F["next_event_log"]] = _log_scale(next_event - now) if next_event < np.inf else 1.0

    # Global features.
    _, free_gpus, _, whole_nodes = _free_view(sim)
    n_gpus = float(c.num_gpus)
    q = sim.queue_ids()
    nq = len(q)
    running = len(sim.running)
    nxt = sim.next_arrival_s
    glob = [
        math.log10(1.0 + nq) / 3.0,
        min(sim.queued_gpus / n_gpus, 4.0) / 4.0,
        (c.num_gpus - free_gpus) / n_gpus,  # = sim.allocated_gpus
        free_gpus / n_gpus,
        whole_nodes / c.num_nodes,
        fragmentation(sim),
        running / (running + nq + 1.0),
        min((len(sim.reserved) + len(sim.checkpointing)) / (nq + 1.0), 1.0),
        math.log10(1.0 + now) / 7.0,
        sim.queued_high_priority / nq if nq else 0.0,
        _log_scale(float(np.add.reduce(now - sim.queued_since[q]) / nq)) if nq else 0.0,
        _log_scale(nxt - now) if nxt < np.inf else 1.0,
    ]
    return feats, np.array(glob, dtype=np.float32)
