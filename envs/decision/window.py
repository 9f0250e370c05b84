"""Which queued jobs can be placed now, and the queue window the candidates are built for.

Feasibility is decided by GPU counts alone, per job class (gang size, TP degree, memory level,
priority): a class fits when the nodes' free GPUs usable in whole TP groups add up to the gang,
or would after preempting every lower-priority preemptible job (every placement rule finds a
placement exactly when its count allows one). A trace of 80,000 jobs has a few dozen classes,
so this is worked out once per allocation for every class. The `preempt-las` rule's victims
depend on the jobs' 2D-LAS queues (envs.decision.las), which change with time: its counts are worked out
once per state, per (priority class, LAS queue) of the preempting job (`las_fits`).

The window: queued jobs that have at least one valid placement, taken round-robin from the
heads of four orders, so that each classic rule's favourite job is always present: arrival
(FIFO), shortest estimated remaining time, highest priority, least attained service. Jobs whose
only valid placement is `preempt-las` fill the slots left over, in Tiresias' order (LAS queue,
then FIFO): they never displace a job the other rules can place (`candidate_window`).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from envs.core import jit as _jit
from envs.core import kernels as _kernels
from envs.decision.cache import job_table, memo_of, per_alloc, per_jobs, per_state
from envs.decision.las import LAS_THRESHOLDS, NUM_LAS_QUEUES, STARVATION_FACTOR, las_queue
from envs.decision.placement import segment_total, usable_per_node
from envs.decision.state import ClusterState
from envs.jobs import PRIORITY_HIGH, PRIORITY_NORMAL

_NO_JOBS = np.zeros(0, dtype=np.int64)  # an empty job list, shared: read-only
_NO_JOBS.flags.writeable = False
WINDOW_ORDERS = ("arrival", "shortest", "priority", "least_attained")
DEFAULT_QUEUE_WINDOW = 8
SHORTEST_WALK_LIMIT = 256  # infeasible jobs walked past in the sorted queue before the shortest order is sorted instead


def aligned(free: np.ndarray, tp: int) -> np.ndarray:
    """Per node, the free GPUs usable in whole TP groups."""
    return free // tp * tp


class _Classes:
    """Job classes of a cluster in order of first appearance: per class the gang size, TP
    degree, memory level and priority, and `index` (what `class_fits` looks up) for the current
    class count. `levels` are the cluster's distinct GPU memory sizes."""

    __slots__ = ("ids", "of_shape", "need", "tp", "level", "priority", "index", "index_for", "levels", "spanning",
                 "segment", "segmented")

    def __init__(self, levels: list[float]):
        self.levels = levels
        self.ids: dict[tuple, int] = {}
        self.of_shape: dict[tuple, int] = {}  # (GPUs, TP degree, GB per GPU asked, priority) -> class
        self.need: list[int] = []
        self.tp: list[int] = []
        self.level: list[float] = []
        self.priority: list[int] = []
        self.index: tuple | None = None
        self.index_for = -1  # the class count `index` was made for
        self.spanning: list[tuple[int, int]] = []  # (column, TP degree) of the index's TP degrees whose groups span trays
        self.segment: list[int] = []  # GPUs per segment (0: none); a class asking for segments is a class of its own
        self.segmented: list[tuple[int, int, int]] = []  # (column, TP degree, GPUs per segment) of the index's segment columns


def _memory_levels(state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
    """(each node's GPU memory, the distinct memory sizes): a job can use the nodes whose memory
    is at least the smallest size that satisfies it."""
    c = state.cluster
    node_memory = c.node_memory_gb
    return node_memory, np.unique(node_memory)


def _classes(state: ClusterState) -> _Classes:
    """The cluster's job classes: shared by every state on the cluster (episodes, service
    requests), so the class index is remade only when a class never seen on it appears."""
    memo = memo_of(state, "job_classes")
    cls = memo.get("registry")
    if cls is None:
        cls = memo["registry"] = _Classes(_memory_levels(state)[1].tolist())
    return cls


def job_classes(state: ClusterState) -> np.ndarray:
    """(m,) each job's class (see `_Classes`); new classes are added as jobs arrive."""
    hit = per_jobs(state).get("job_class")
    if hit is not None and hit[1] == len(state.num_gpus):  # no job arrived since the last call
        return hit[2]
    return job_table(state, "job_class", _class_rows)


def _class_rows(state: ClusterState, lo: int, hi: int) -> np.ndarray:
    """The classes of jobs lo..hi-1, registering the classes never seen on the cluster."""
    cls = _classes(state)
    lists = state.job_lists
    of_shape = cls.of_shape
    out = np.empty(hi - lo, dtype=np.int64)
    shapes = zip(lists.num_gpus[lo:hi], lists.tp_degree[lo:hi], lists.mem_per_gpu_gb[lo:hi], lists.priority[lo:hi])
    if state.has_segments:  # a job asking for segments has the shape (GPUs, TP, GB, priority, GPUs per segment)
        shapes = (shape + (seg,) if seg else shape for shape, seg in zip(shapes, state.segment_gpus[lo:hi].tolist()))
    for i, shape in enumerate(shapes):
        k = of_shape.get(shape)
        if k is None:  # the memory asked, as the smallest level that holds it
            levels = cls.levels  # the smallest level that holds it; above every level: inf, no node has it
            at = bisect.bisect_left(levels, shape[2])
            key = (shape[0], shape[1], levels[at] if at < len(levels) else math.inf, *shape[3:])
            k = cls.ids.get(key)
            if k is None:
                k = cls.ids[key] = len(cls.need)
                cls.need.append(key[0])
                cls.tp.append(key[1])
                cls.level.append(key[2])
                cls.priority.append(key[3])
                cls.segment.append(key[4] if len(key) > 4 else 0)
            of_shape[shape] = k
        out[i] = k
    return out


def _class_index(state: ClusterState) -> tuple[np.ndarray, ...]:
    """What `_class_fits` looks up for the current classes: (priorities, priorities) 1 where the
    column's priority is strictly below the row's; (levels, nodes) whether a node's GPUs have a
    memory level's size; (free count, TP degrees) the GPUs usable in whole TP groups on a node
    with that many free; the flat positions in the (priorities, levels, TP degrees) totals
    that each job class reads, without preemption and then with it (the row of its priority);
    the gang sizes they are compared with. Then what the compiled kernels read for TP groups
    that span trays (`_spanning_totals` on the reference path): each node's NVLink domain (-1
    for none) and GPU count, and per (TP degree that spans trays, domain where it does) a row
    (TP degree column, domain, trays per group, TP degree) with the on_level column of the
    domain's first node (rows x levels); no rows on a cluster without such degrees."""
    cls = _classes(state)
    if cls.index_for != len(cls.need):
        node_memory, levels = _memory_levels(state)
        levels = np.append(levels, np.inf)  # a last level no node has: classes asking more memory than any GPU
        need, tps, mems, prios = (np.array(x) for x in (cls.need, cls.tp, cls.level, cls.priority))
        if any(cls.segment):  # a column per (TP degree, GPUs per segment): segment columns are counted apart
            pairs = sorted(set(zip(cls.tp, cls.segment)))
            column = {p: i for i, p in enumerate(pairs)}
            tp_values = np.array([p[0] for p in pairs], dtype=tps.dtype)
            tp_of = np.array([column[p] for p in zip(cls.tp, cls.segment)], dtype=np.int64)
            cls.segmented = [(i, tp, seg) for i, (tp, seg) in enumerate(pairs) if seg]
        else:
            tp_values, tp_of = np.unique(tps, return_inverse=True)
            cls.segmented = []
        segment_columns = {col for col, _, _ in cls.segmented}
        on_level = (node_memory[None, :] >= levels[:, None]).astype(np.int64)
        counts = np.arange(int(state.cluster.node_gpus.max()) + 1)
        by_free = aligned(counts[:, None], tp_values[None, :])
        n_priorities = state.node_preemptible.shape[1]
        lower = np.tril(np.ones((n_priorities, n_priorities), dtype=np.int64), -1)
        cell = np.searchsorted(levels, mems) * len(tp_values) + tp_of.reshape(-1)
        positions = np.concatenate([cell, prios.astype(np.int64) * len(levels) * len(tp_values) + cell]).astype(np.int64)
        c = state.cluster
        cls.spanning = [(i, int(t)) for i, t in enumerate(tp_values.tolist())
                        if c.num_domains and c.spans(int(t)) and i not in segment_columns]
        span_rows, span_level = [], []
        for col, tp in cls.spanning:
            for d in c.spanning_domains(tp):
                span_rows.append((col, d, tp // int(c.domain_tray[d]), tp))
                span_level.append(on_level[:, c.domain_nodes[d][0]])
        span = np.array(span_rows, dtype=np.int64).reshape(-1, 4)
        span_level = np.array(span_level, dtype=np.int64).reshape(-1, len(levels))
        cls.index = (lower, on_level, by_free, positions, np.concatenate([need, need]).astype(np.int64),
                     np.ascontiguousarray(c.node_domain, dtype=np.int64), np.ascontiguousarray(c.node_gpus, dtype=np.int64),
                     span, span_level)
        cls.index_for = len(cls.need)
    return cls.index


def _spanning(state: ClusterState) -> list[tuple[int, int]]:
    """The class index's TP degrees whose groups span trays in some NVLink domain (column, TP
    degree): the reference path adds their groups with `_spanning_totals`, the compiled kernels
    from the class index's span rows."""
    if not state.cluster.num_domains:
        return []
    _class_index(state)
    return _classes(state).spanning


def _spanning_totals(state: ClusterState, counts: np.ndarray) -> np.ndarray:
    """What TP groups that span trays add to the per-node totals `on_level @ by_free[counts]`
    (rows, levels, TP degrees) for per-node available counts `counts` (rows, nodes): per
    spanning domain, its fully available trays in whole groups of trays, on the memory levels
    its GPU type has (a node of such a domain hosts no group alone: its `by_free` is 0)."""
    c = state.cluster
    _, on_level, by_free, _, _ = _class_index(state)[:5]
    out = np.zeros((len(counts), on_level.shape[0], by_free.shape[1]), dtype=np.int64)
    tray, first = c.domain_tray, [nodes[0] for nodes in c.domain_nodes]
    whole = (counts == c.node_gpus).astype(np.int64) @ c.domain_member  # (rows, domains): fully available trays
    for col, tp in _classes(state).spanning:
        trays = np.where(tray > 0, tp // np.maximum(tray, 1), 1)
        spanning = np.zeros(c.num_domains, dtype=np.int64)
        spanning[list(c.spanning_domains(tp))] = tp
        out[:, :, col] = (whole // trays * spanning) @ on_level[:, first].T
    return out



def _segment_totals(state: ClusterState, counts: np.ndarray, totals: np.ndarray) -> None:
    """Set the segment columns of `totals` (rows, levels, columns; see `_spanning_totals`) for
    per-node available counts `counts` (rows, nodes): per memory level, the GPUs usable in
    whole TP groups on the nodes of that level (`envs.decision.placement.usable_per_node`), per block
    rounded down to whole segments (`envs.decision.placement.segment_total`). The reference path only:
    the compiled kernels do not count segments (episodes with segments take the reference)."""
    c = state.cluster
    on_level = _class_index(state)[1].astype(bool)
    for col, tp, seg in _classes(state).segmented:
        for r, row in enumerate(counts.tolist()):
            for lv, on in enumerate(on_level.tolist()):
                usable = usable_per_node(c, [f if o else 0 for f, o in zip(row, on)], tp)
                totals[r, lv, col] = segment_total(c, usable, seg)


def shape_classes(state: ClusterState, shapes: list[tuple]) -> tuple[np.ndarray, tuple] | None:
    """For the simulator's compiled event loop (Simulator.run_events): each of `shapes` (GPUs, TP
    degree, GB per GPU asked, priority) as its registered class, -1 where none is (nothing is
    registered here), and `_class_index` for those classes (TP groups that span trays
    included); None while no class is registered. Kept per state object until a class or a
    shape is added."""
    cls = _classes(state)
    if not cls.need:
        return None
    cache = per_jobs(state)
    hit = cache.get("shape_classes")
    of_shape = cls.of_shape  # grows with every new shape (shapes of one class share it), never shrinks
    if hit is None or hit[0] is not cls or hit[1] != len(of_shape) or hit[2] is not shapes or hit[3] != len(shapes):
        classes = np.array([of_shape.get(s, -1) for s in shapes], dtype=np.int64)
        hit = cache["shape_classes"] = (cls, len(of_shape), shapes, len(shapes), (classes, _class_index(state)))
    return hit[4]


def class_fits(state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per job class: fits now in whole TP groups per node, fits that way only after
    preempting lower-priority preemptible jobs, and either (and the job count it covers). Depends on the allocation and the
    classes alone, so it is worked out once per allocation for every class."""
    cache = per_alloc(state)
    hit = cache.get("class_fits")
    m = len(state.num_gpus)
    if hit is not None and hit[3] == m:  # no job (so no class) came since
        return hit
    job_classes(state)  # classes of every job of the state exist
    n_classes = len(_classes(state).need)
    if hit is not None and len(hit[0]) == n_classes:  # jobs came, but of known classes
        cache["class_fits"] = hit = (*hit[:3], m)
        return hit
    index = _class_index(state)
    lower, on_level, by_free, positions, need = index[:5]
    if not n_classes:
        empty = np.zeros(0, dtype=bool)
        cache["class_fits"] = hit = (empty, empty, empty, len(state.num_gpus))
        return hit
    # GPUs usable in whole TP groups for every (memory level, TP degree), counting on each node
    # its free GPUs and, in row p, also those held by preemptible jobs of priority < p (row 0:
    # free alone): per node from a lookup by that count, summed over the nodes of each level;
    # plus, per NVLink domain where a TP degree spans trays, its fully available trays in whole
    # groups of trays.
    if _jit.ENABLED and not state.has_segments:
        rows = _kernels.class_fits(state.node_free, state.node_preemptible, *index)
        cache["class_fits"] = hit = (rows[0], rows[1], rows[2], len(state.num_gpus))
        return hit
    counts = state.node_free + lower @ state.node_preemptible.T  # (priorities, nodes)
    totals = on_level @ by_free[counts]  # (priorities, levels, TP degrees), read per class
    if _spanning(state):
        totals += _spanning_totals(state, counts)
    if _classes(state).segmented:
        _segment_totals(state, counts, totals)
    fits = need <= totals.take(positions)
    fits_aligned = fits[:n_classes]
    fits_preempt = fits[n_classes:] & ~fits_aligned
    cache["class_fits"] = hit = (fits_aligned, fits_preempt, fits_aligned | fits_preempt, len(state.num_gpus))
    return hit


def feasible_queue(state: ClusterState) -> np.ndarray:
    """Queued jobs that fit now, or fit after preempting lower-priority preemptible jobs (once
    per state: read it, do not change it)."""
    cache = per_state(state)
    feasible = cache.get("feasible_queue")
    if feasible is None:
        q = state.queue
        fits = class_fits(state)[2]
        if not any(fits.tolist()):  # the common "nothing fits" of a full cluster: no queue scan
            feasible = _NO_JOBS
        elif _jit.ENABLED:
            feasible = _kernels.feasible_of(q, job_classes(state), fits)
        else:
            feasible = q[fits[job_classes(state)[q]]]
        cache["feasible_queue"] = feasible
    return feasible


def any_feasible(state: ClusterState) -> bool:
    """`feasible_queue` is not empty: the decision loop's check at every event, which on the
    compiled path stops at the first feasible job instead of listing them."""
    if _jit.ENABLED and "feasible_queue" not in per_state(state):
        fits = class_fits(state)[2]
        return any(fits.tolist()) and _kernels.any_feasible(state.queue, job_classes(state), fits)
    return len(feasible_queue(state)) > 0


def fit_status(state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queue, fits now with whole TP groups per node, fits in whole groups only after
    preemption), by GPU counts alone."""
    q = state.queue.copy()
    cls = job_classes(state)[q]
    fits_aligned, fits_preempt, _, _ = class_fits(state)
    return q, fits_aligned[cls], fits_preempt[cls]


def shortest_head(state: ClusterState, k: int, walk_limit: int = SHORTEST_WALK_LIMIT) -> list[int] | None:
    """The first k feasible jobs by remaining estimate (ties in queue order), walked from the
    state's sorted queue; None when more than `walk_limit` infeasible jobs come first."""
    if _jit.ENABLED:
        walked, out = _kernels.shortest_head(state.queue_by_remaining_ids, job_classes(state), class_fits(state)[2], k,
                                             walk_limit)
        return out.tolist() if walked else None
    feasible_class = class_fits(state)[2].tolist()
    job_class = job_classes(state)
    out: list[int] = []
    for n, j in enumerate(state.queue_by_remaining_ids.tolist()):
        if feasible_class[job_class[j]]:
            out.append(j)
            if len(out) == k:
                break
        elif n - len(out) > walk_limit:
            return None
    return out


def _preemptible_gpus(state: ClusterState) -> tuple[np.ndarray, np.ndarray] | None:
    """(owner, node) of every GPU held by a running preemptible job, once per allocation; None
    when there is none."""
    cache = per_alloc(state)
    if "preemptible_gpus" in cache:
        return cache["preemptible_gpus"]
    hit = None
    if state.node_preemptible.any():
        owner = state.gpu_owner
        if _jit.ENABLED:
            hit = _kernels.preemptible_gpus(owner, state.cluster.gpu_node, state.running, state.preemptible,
                                            len(state.num_gpus))
        else:
            run = state.running
            held = np.zeros(len(state.num_gpus) + 1, dtype=bool)  # per job, and last False for a free GPU's owner -1
            held[run[state.preemptible[run]]] = True
            gpus = np.flatnonzero(held[owner])
            hit = (owner[gpus], state.cluster.gpu_node[gpus])
    cache["preemptible_gpus"] = hit
    return hit


_LOWER_QUEUES = NUM_LAS_QUEUES - 1  # LAS queues that have a lower one (a job in the last has no victims)


_LAS_ROWS: dict[int, np.ndarray] = {}


def _las_rows(n_priorities: int) -> np.ndarray:
    """(rows, priorities x LAS queues) 0/1: row p * _LOWER_QUEUES + q takes the GPUs of jobs of
    priority <= p in a LAS queue > q."""
    rows = _LAS_ROWS.get(n_priorities)
    if rows is None:
        p, q = np.divmod(np.arange(n_priorities * _LOWER_QUEUES), _LOWER_QUEUES)
        p2, k = np.divmod(np.arange(n_priorities * NUM_LAS_QUEUES), NUM_LAS_QUEUES)
        rows = _LAS_ROWS[n_priorities] = ((p2[None, :] <= p[:, None]) & (k[None, :] > q[:, None])).astype(np.int64)
    return rows


def las_stop_args(state: ClusterState) -> tuple[np.ndarray, np.ndarray, float]:
    """What the compiled event loop's `can_place` test reads beyond the class index
    (Simulator.run_events' `las`): `_las_rows` for the state's priority classes, the LAS
    thresholds and the starvation factor."""
    return _las_rows(state.node_preemptible.shape[1]), LAS_THRESHOLDS, STARVATION_FACTOR


def _las_totals(state: ClusterState) -> np.ndarray | None:
    """The counts behind `las_fits`, once per state: row p * _LOWER_QUEUES + q holds, per
    (memory level, TP degree) flattened as in `class_fits`, the GPUs usable in whole TP groups
    counting on each node its free GPUs and those held by running preemptible jobs of priority
    <= p in a LAS queue > q. None when no running preemptible job is below queue 0 (then no job
    has a preempt-las victim)."""
    cache = per_state(state)
    if "las_totals" in cache:
        return cache["las_totals"]
    totals = None
    held = _preemptible_gpus(state)
    if held is not None and _jit.ENABLED and not state.has_segments:
        owner, node = held
        class_fits(state)  # every job's class is registered: the class index below is final for this state
        index = _class_index(state)
        below, counts = _kernels.las_totals(owner, node, state.attained_gpu_s, state.priority, LAS_THRESHOLDS,
                                            state.node_preemptible.shape[1], state.node_free,
                                            _las_rows(state.node_preemptible.shape[1]), index[1], index[2], *index[5:])
        totals = counts if below else None
    elif held is not None:
        owner, node = held
        queue = las_queue(state, owner, queued=False)
        if queue.max() > 0:
            n_nodes, n_priorities = state.node_preemptible.shape
            # Held GPUs per (priority, LAS queue) and node, then summed into the rows.
            cell = (state.priority[owner] * NUM_LAS_QUEUES + queue) * n_nodes + node
            held_by = np.bincount(cell, minlength=n_priorities * NUM_LAS_QUEUES * n_nodes).reshape(-1, n_nodes)
            counts = state.node_free + _las_rows(n_priorities) @ held_by  # (rows, nodes)
            class_fits(state)  # every job's class is registered: the class index below is final for this state
            _, on_level, by_free, _, _ = _class_index(state)[:5]
            totals = on_level @ by_free[counts]
            if _spanning(state):
                totals += _spanning_totals(state, counts)
            if _classes(state).segmented:
                _segment_totals(state, counts, totals)
            totals = totals.reshape(len(counts), -1)
    cache["las_totals"] = totals
    return totals


def las_fits(state: ClusterState, jobs) -> np.ndarray:
    """(n,) bool per queued job (state index): the `preempt-las` rule is valid for it. It does not
    fit now in whole TP groups per node, but would after preempting the running jobs
    `envs.decision.placement.las_victim_pool` allows (preemptible, of no higher priority class, in a
    strictly lower LAS queue); by GPU counts, like `class_fits`."""
    jobs = np.asarray(jobs, dtype=np.int64)
    fits_aligned = class_fits(state)[0]
    return _las_fits(state, jobs, job_classes(state)[jobs], fits_aligned)


def _las_fits(state: ClusterState, jobs: np.ndarray, cls: np.ndarray, fits_aligned: np.ndarray) -> np.ndarray:
    """`las_fits` for jobs of classes `cls` (class_fits and job_classes are current)."""
    out = np.zeros(len(jobs), dtype=bool)
    if not len(jobs):
        return out
    blocked = ~fits_aligned[cls]
    if not blocked.any():
        return out
    totals = _las_totals(state)
    if totals is None:
        return out
    if _jit.ENABLED:
        _, _, _, positions, need = _class_index(state)[:5]
        return _kernels.las_fits(jobs, cls, fits_aligned, totals, state.attained_gpu_s, state.num_gpus, float(state.now),
                                 state.queued_since_s, state.priority, LAS_THRESHOLDS, STARVATION_FACTOR, positions, need)
    if not blocked.all():
        jobs, cls = jobs[blocked], cls[blocked]
    queue = las_queue(state, jobs)
    _, _, _, positions, need = _class_index(state)[:5]
    row = state.priority[jobs] * _LOWER_QUEUES + np.minimum(queue, _LOWER_QUEUES - 1)
    out[blocked] = (queue < _LOWER_QUEUES) & (need[cls] <= totals[row, positions[cls]])
    return out


def las_only_queue(state: ClusterState) -> np.ndarray:
    """Queued jobs whose only valid placement is `preempt-las` (they fit neither now nor after
    preempting lower-priority jobs), in Tiresias' order: LAS queue, then FIFO. Once per state:
    read it, do not change it."""
    cache = per_state(state)
    hit = cache.get("las_only_queue")
    if hit is None:
        hit = _NO_JOBS
        q = state.queue
        fits_aligned, _, fits, _ = class_fits(state)
        if _jit.ENABLED:  # one pass over the queue, once some queued job is blocked
            job_class = job_classes(state)
            totals = _las_totals(state) if _kernels.any_feasible(q, job_class, ~fits) else None
            if totals is not None:
                _, _, _, positions, need = _class_index(state)[:5]
                others = _kernels.las_only(q, job_class, fits, totals, state.attained_gpu_s, state.num_gpus,
                                           float(state.now), state.queued_since_s, state.priority, LAS_THRESHOLDS,
                                           STARVATION_FACTOR, positions, need)
                if len(others):
                    hit = others
        else:
            cls = job_classes(state)[q]
            blocked = ~fits[cls]
            if blocked.any() and _las_totals(state) is not None:
                others = q[blocked]
                others = others[_las_fits(state, others, cls[blocked], fits_aligned)]
                if len(others):  # the queue is in FIFO order: a stable sort by LAS queue keeps it inside each
                    hit = others[np.argsort(las_queue(state, others), kind="stable")]
        cache["las_only_queue"] = hit
    return hit


def can_place(state: ClusterState) -> bool:
    """Some queued job has a valid placement (a real choice): it fits now, after preempting
    lower-priority jobs, or by preempt-las."""
    return bool(any_feasible(state) or len(las_only_queue(state)))


def candidate_window(state: ClusterState, queue_window: int) -> list[int]:
    """The jobs the candidates are built for: `select_window`, then, in the slots it leaves over,
    the jobs whose only valid placement is preempt-las (`las_only_queue`)."""
    window = select_window(state, queue_window)
    if len(window) < queue_window:
        extra = las_only_queue(state)
        if len(extra):
            window += extra[: queue_window - len(window)].tolist()
    return window


def select_window(state: ClusterState, queue_window: int) -> list[int]:
    """Up to `queue_window` feasible queued jobs, round-robin from the heads of WINDOW_ORDERS."""
    if _jit.ENABLED:  # in one pass over the queue, unless the shortest order cannot be walked
        top = PRIORITY_HIGH if state.queued_high_priority else PRIORITY_NORMAL  # bounds the queued priorities
        walked, window = _kernels.queue_window(state.queue, state.queue_by_remaining_ids, job_classes(state),
                                               class_fits(state)[2], queue_window, SHORTEST_WALK_LIMIT, state.priority,
                                               state.attained_gpu_s, top)
        if walked:
            return window.tolist()
    feasible = feasible_queue(state)
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

    if _jit.ENABLED:  # the kernel above found the shortest order too far down the sorted queue
        return _kernels.select_window(feasible, queue_window, state.remaining_estimate_s(feasible), state.priority,
                                      state.attained_gpu_s).tolist()
    shortest = shortest_head(state, 2 * queue_window)
    orders = [
        feasible,  # the queue is kept in (re)arrival order
        head(state.remaining_estimate_s(feasible)) if shortest is None else shortest,
        head(-state.priority[feasible].astype(float)),
        head(state.attained_gpu_s[feasible]),
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
