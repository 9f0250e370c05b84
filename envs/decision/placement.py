"""The placement rules: which GPUs a gang gets, as pure functions of free GPU counts.

Each rule turns per-node counts of available GPUs (those with enough memory for the job) into
per-node counts for the gang, then picks concrete GPUs inside each node (one NUMA socket when
they fit in one). A gang is a set of pods, one per TP group, and a TP group sits on one node, or,
where a multi-node NVLink domain's trays are smaller than the group, on whole trays of one
domain (`Cluster.spanning_domains`: a domain then hosts whole groups of trays, a node hosts
whole groups of GPUs; the rules below distribute the gang's groups over these hosts, see
`_node_take_spanning`). The rules:

* `binpack`: fewest nodes, fullest first (best-fit single node, else fill from the emptiest and
  best-fit the rest), blind to switches;
* `spread`: one pod at a time on the node with the most free GPUs;
* `topology`: the smallest switch tier that holds the gang in whole TP groups, tightest fit
  inside it, faster GPUs first among equal domains;
* `preempt`: the topology rule over the free GPUs plus those of the cheapest lower-priority
  preemptible running jobs (`choose_victims`);
* `preempt-las`: Tiresias' preemption, the topology rule over the free GPUs plus those of the
  preemptible running jobs in strictly lower 2D-LAS queues (envs.decision.las) of no higher priority
  class, most attained service first (`choose_las_victims`).

A gang stays on one GPU type whenever one type can host it. Inputs come from a `ClusterState`;
nothing here reads a simulator.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence

import numpy as np

from envs import core as _core
from envs.cluster.memo import geometry
from envs.cluster.speed import PlacementGeometry
from envs.cluster.topology import Cluster
from envs.core import jit as _jit
from envs.decision.cache import memo_of, per_alloc
from envs.decision.las import las_queue
from envs.decision.state import ClusterState

RULES = ("binpack", "spread", "topology", "preempt", "preempt-las")
BINPACK, SPREAD, TOPOLOGY, PREEMPT, PREEMPT_LAS = range(5)
PREEMPT_RULES = (PREEMPT, PREEMPT_LAS)  # the rules that place after preempting victims


def _pick_gpus_in_node(c: Cluster, node: int, count: int, avail: np.ndarray, memo: dict) -> np.ndarray:
    """`count` available GPUs of one node, inside one NUMA socket when they fit in one
    (memoised in `memo`, the cluster's "gpu_picks" table, by node, count and the node's
    availability pattern)."""
    lo = c.node_first_gpu[node]
    pattern = avail[lo : lo + c.node_gpus[node]]
    key = (node, count, pattern.tobytes())
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _pick_in_pattern(c, lo, count, pattern)
        hit.flags.writeable = False  # shared by every placement that picks it
    return hit


def _pick_in_pattern(c: Cluster, lo: int, count: int, pattern: np.ndarray) -> np.ndarray:
    if _jit.ENABLED:
        return _core.pick_in_node(_core.cluster_arrays(c), int(c.gpu_node[lo]), count, pattern)
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


def _gpus_from_counts(c: Cluster, take: dict[int, int], avail: np.ndarray, memo: dict) -> np.ndarray:
    """Concrete GPU ids for per-node counts, grouped by node (TP groups are consecutive runs)."""
    if len(take) == 1:
        (n, k), = take.items()
        return _pick_gpus_in_node(c, n, k, avail, memo)
    return np.concatenate([_pick_gpus_in_node(c, n, k, avail, memo) for n, k in take.items() if k > 0])


def _best_fit(free: Sequence[int], need: int) -> int | None:
    """The node with the fewest free GPUs among those with at least `need` (lowest id on ties):
    the first node holding each count from `need` up, found by C-level scans."""
    present = set(free)
    for count in range(need, max(free, default=0) + 1):
        if count in present:
            return free.index(count)
    return None


def _binpack(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Fewest nodes, fullest first: the best-fit single node, else the node with the most free
    GPUs whole (lowest id on ties) and again for the rest (blind to switches)."""
    if sum(free) < need:
        return None
    take: dict[int, int] = {}
    left = list(free)
    while True:
        n = _best_fit(left, need)
        if n is not None:
            take[n] = need
            return take
        n = left.index(max(left))
        take[n] = left[n]
        need -= left[n]
        left[n] = 0


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
    """Inside one domain whose `nodes` hold the gang in whole TP groups (`free`: per node, its
    GPUs usable in whole TP groups): whole groups per node, fastest then emptiest nodes first,
    until some of the fastest nodes that can take every remaining group can; the tightest of
    those takes them (the first in that order on ties)."""
    take: dict[int, int] = {}
    groups_left = need // tp
    order = nodes[np.lexsort((-free[nodes], -speed[nodes]))]
    cap = free.copy()
    for n in order:
        fits = order[(cap[order] // tp) >= groups_left]
        if len(fits):
            fast = fits[speed[fits] == speed[fits].max()]
            take[int(fast[np.argmin(cap[fast])])] = groups_left * tp
            return take
        g = int(cap[n] // tp)
        take[int(n)] = g * tp
        cap[n] = 0
        groups_left -= g
    raise ValueError(f"the domain's {int(free[nodes].sum())} usable GPUs do not hold a gang of {need}")


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
    return _topology_domains(c, free, need, tp)


def _topology_domains(c: Cluster, free: Sequence[int], need: int, tp: int) -> dict[int, int] | None:
    """The topology rule when no single node holds the gang: the smallest domain that holds it in
    whole TP groups (an NVLink domain, else a switch's subtree, level by level; faster, then
    tighter, then lower id first), filled by `_fill_domain`."""
    usable = np.array(free, dtype=np.int64) // tp * tp
    if usable.sum() < need:
        return None
    speed = c.node_speed
    for under in c.placement_domains:  # NVLink domains, then the switches level by level
        dom_free = usable @ under
        ok = np.flatnonzero(dom_free >= need)
        if len(ok):
            # Mean speed of the domain's usable GPUs (summed in node order: add.accumulate is
            # sequential, where a matrix product's order is the BLAS library's), then tightest fit.
            dom_speed = np.add.accumulate((usable * speed)[:, None] * under[:, ok], axis=0)[-1] / dom_free[ok]
            d = ok[np.lexsort((dom_free[ok], -dom_speed))[0]]
            return _fill_domain(usable, np.flatnonzero(under[:, d] & (usable > 0)), need, tp, speed)
    return _fill_domain(usable, np.flatnonzero(usable > 0), need, tp, speed)


def _one_type(c: Cluster, room: Sequence[int], need: int, rule: int) -> int | None:
    """The GPU type a gang is kept to when one type alone can host it, as a job submitted with a
    GPU-model selector would be (`room`: per node, its GPUs usable in whole TP groups): spread
    takes the type with the most room, every other rule the tightest fit (lowest type id on
    ties); None when no one type can."""
    lists = c.node_lists
    per_type = [0] * lists.num_types
    for f, t in zip(room, lists.gpu_type):
        per_type[t] += f
    fits = [t for t in range(lists.num_types) if per_type[t] >= need]
    if not fits:
        return None
    return (max if rule == SPREAD else min)(fits, key=per_type.__getitem__)


def _single_type(c: Cluster, free: Sequence[int], need: int, rule: int, tp: int) -> Sequence[int]:
    """Restrict `free` (per node) to `_one_type`'s type, when there is one."""
    lists = c.node_lists
    if lists.num_types == 1:
        return free
    t = _one_type(c, [f // tp * tp for f in free], need, rule)
    return free if t is None else [f if ty == t else 0 for f, ty in zip(free, lists.gpu_type)]


def place(state: ClusterState, gpus: int, tp: int, mem: float, rule: int, avail: np.ndarray | None = None,
          segment: int = 0) -> np.ndarray | None:
    """GPU ids for a gang of `gpus` GPUs in TP groups of `tp`, needing `mem` GB per GPU, under one
    placement rule over the available GPUs (default: the free ones); with `segment` (GPUs per
    segment, Job.segment_gpus), each consecutive run of `segment` GPUs inside one block
    (`_node_take_segments`)."""
    c = state.cluster
    if avail is None:
        avail = state.free_mask
        by_memory = per_alloc(state).setdefault("eligible_free", {})
        free = by_memory.get(mem)
        if free is None:
            free = by_memory[mem] = _eligible(c, free_view(state)[0], mem)
    else:  # free GPUs plus victims' (the preempt rules)
        free = _eligible(c, np.add.reduceat(avail.view(np.int8), c.node_first_gpu).tolist(), mem)
    # Per-node counts recur as the cluster cycles (over 90% of the Philly replay's placements), so
    # the node counts are memoised per cluster.
    memo = memo_of(state, "node_take")
    key = (free, gpus, tp, rule if rule in (BINPACK, SPREAD) else TOPOLOGY)
    if segment:
        key += (segment,)
    take = memo.get(key, False)
    if take is False:
        take = memo[key] = _node_take_segments(c, free, gpus, tp, rule, segment) if segment else _node_take(c, free, gpus, tp, rule)
    return None if take is None else _gpus_from_counts(c, take, avail, memo_of(state, "gpu_picks"))


def _eligible(c: Cluster, counts: list[int], mem: float) -> tuple[int, ...]:
    """The per-node counts with 0 on nodes whose GPUs have less than `mem` GB (a node's GPUs all
    have its type's memory)."""
    lists = c.node_lists
    if mem <= lists.min_memory_gb:
        return tuple(counts)
    return tuple([f if m >= mem else 0 for f, m in zip(counts, lists.memory_gb)])


def _node_take(c: Cluster, free: Sequence[int], need: int, tp: int, rule: int) -> dict[int, int] | None:
    """Per node, how many of its eligible available GPUs (`free`) the rule gives the gang."""
    if _jit.ENABLED:  # the native core (envs.core), bit for bit this reference
        return _core.node_take(_core.cluster_arrays(c), free, need, tp, rule)
    if c.num_domains and c.spans(tp):  # TP groups across trays
        return _node_take_spanning(c, free, need, tp, rule)
    free = _single_type(c, free, need, rule, tp)
    if rule in (BINPACK, SPREAD):
        # A gang is a set of pods, one per TP group, each on one node: pack or spread pods.
        units = (_binpack if rule == BINPACK else _spread)([f // tp for f in free] if tp > 1 else free, need // tp)
        return None if units is None else {n: k * tp for n, k in units.items()}
    return _topology(c, free, need, tp)  # TOPOLOGY, and both preempt rules: the topology rule over free and victims' GPUs


def usable_per_node(c: Cluster, free: Sequence[int], tp: int) -> list[int]:
    """Per node, its available GPUs (`free`) usable in whole TP groups of `tp`: `f // tp * tp`
    on a node that hosts TP groups alone; in an NVLink domain whose groups span trays
    (`Cluster.spanning_domains`), every GPU of its fully available trays taken in whole groups
    of trays (the domain's first such trays in node order), 0 on its other trays."""
    out = [f // tp * tp for f in free]
    if not c.num_domains:
        return out
    gpus = c.node_lists.gpus
    for d in c.spanning_domains(tp):
        nodes = c.domain_nodes[d]
        trays = tp // gpus[nodes[0]]
        whole = [n for n in nodes if free[n] == gpus[n]]
        for n in whole[: len(whole) // trays * trays]:
            out[n] = gpus[n]
    return out


def _hosts(c: Cluster, usable: list[int], tp: int) -> tuple[list[int], list[list[int]]]:
    """The hosts of TP groups of `tp` for per-node usable GPUs (`usable_per_node`): each node
    outside the spanning domains, and each spanning domain, in the order of their first node;
    per host, its whole groups and its nodes with usable GPUs."""
    spanning = set(c.spanning_domains(tp))
    domain = c.node_domain.tolist()
    groups: list[int] = []
    members: list[list[int]] = []
    seen: dict[int, int] = {}
    for n, u in enumerate(usable):
        d = domain[n]
        if d in spanning:
            h = seen.get(d)
            if h is None:
                h = seen[d] = len(groups)
                groups.append(0)
                members.append([])
            if u:
                members[h].append(n)
                groups[h] += u
        else:
            groups.append(u)
            members.append([n] if u else [])
    return [g // tp for g in groups], members


def _node_take_spanning(c: Cluster, free: Sequence[int], need: int, tp: int, rule: int) -> dict[int, int] | None:
    """`_node_take` for a gang whose TP groups span trays in some NVLink domain: the rule
    distributes its `need // tp` groups over the hosts (`_hosts`) as it distributes pods over
    nodes (binpack: fewest hosts, fullest first; spread: one group at a time to the host with
    the most left; topology and the preempt rules: the fastest, then tightest host that holds
    them all, else the smallest switch subtree that does, filled by `_fill_domain` over its
    hosts); a domain host gives its first usable trays, whole. Each host's nodes are consecutive
    in the result, so consecutive runs of `tp` GPUs are the TP groups."""
    usable = usable_per_node(c, free, tp)
    lists = c.node_lists
    if lists.num_types > 1 and (keep := _one_type(c, usable, need, rule)) is not None:
        usable = [u if t == keep else 0 for u, t in zip(usable, lists.gpu_type)]
    if sum(usable) < need:
        return None
    groups, members = _hosts(c, usable, tp)
    k = need // tp
    if rule == BINPACK:
        by_host = _binpack(groups, k)
    elif rule == SPREAD:
        by_host = _spread(groups, k)
    else:
        by_host = _spanning_topology(c, groups, members, k)
    return _fill_hosts(by_host, members, usable, tp)


def _fill_hosts(by_host: dict[int, int], members: list[list[int]], usable: Sequence[int], unit: int) -> dict[int, int]:
    """Per node, its GPUs of the gang: each host's `by_host` units (TP groups or segments) of
    `unit` GPUs, taken from its member nodes in order, each giving its usable GPUs until the
    host's share is met. Each host's nodes are consecutive in the result."""
    take: dict[int, int] = {}
    for h, g in by_host.items():
        left = g * unit
        for n in members[h]:
            if not left:
                break
            share = min(usable[n], left)
            take[n] = share
            left -= share
    return take


def _spanning_topology(c: Cluster, groups: list[int], members: list[list[int]], k: int) -> dict[int, int]:
    """The topology rule over TP-group hosts: the fastest, then tightest, then first host that
    holds the `k` groups; else the smallest domain whose hosts do, as `_topology_domains` tries
    them (an NVLink domain whose groups sit on one node, its nodes being hosts; then a switch's
    subtree, level by level; faster, then tighter, then lower id), filled by `_fill_domain` (one
    unit per group)."""
    speed = c.node_speed
    host_speed = np.array([float(speed[m[0]]) if m else 0.0 for m in members])
    g = np.array(groups, dtype=np.int64)
    fit = np.flatnonzero(g >= k)
    if len(fit):
        return {int(fit[np.lexsort((fit, g[fit], -host_speed[fit]))[0]]): k}
    present = np.flatnonzero(g > 0)
    for table in c.placement_domains:  # (N, k): the NVLink domains, then the switches of each level
        under = np.zeros((len(groups), table.shape[1]), dtype=bool)  # a host is under a domain when all its nodes are
        for h in present:
            under[h] = table[members[h]].all(axis=0)
        dom = g @ under
        ok = np.flatnonzero(dom >= k)
        if len(ok):
            dom_speed = np.add.accumulate((g * host_speed)[:, None] * under[:, ok], axis=0)[-1] / dom[ok]
            d = ok[np.lexsort((dom[ok], -dom_speed))[0]]
            return _fill_domain(g, np.flatnonzero(under[:, d] & (g > 0)), k, 1, host_speed)
    return _fill_domain(g, present, k, 1, host_speed)


def _segment_hosts(c: Cluster, usable: Sequence[int], segment: int) -> tuple[list[int], list[list[int]]]:
    """The hosts of a gang's segments for per-node usable GPUs (`usable_per_node`): each block
    (`Cluster.block_nodes`: an NVLink domain, else a leaf switch's nodes), with the whole
    segments its usable GPUs make, and its nodes with usable GPUs, in node order."""
    groups: list[int] = []
    members: list[list[int]] = []
    for nodes in c.block_nodes:
        have = [n for n in nodes if usable[n]]
        groups.append(sum([usable[n] for n in have]) // segment)
        members.append(have)
    return groups, members


def _smallest_fitting(groups: list[int], usable: list[int], k: int, segment: int) -> dict[int, int]:
    """Slurm topology/block's choice for segments, one segment at a time: the block with the
    fewest usable GPUs (`usable`, per block) among those that still hold a whole segment
    (`groups`), lowest id on ties; per block, the segments it takes, in the order first taken."""
    groups, usable = list(groups), list(usable)
    out: dict[int, int] = {}
    for _ in range(k):
        h = min((u, h) for h, (g, u) in enumerate(zip(groups, usable)) if g > 0)[1]
        out[h] = out.get(h, 0) + 1
        groups[h] -= 1
        usable[h] -= segment
    return out


def segment_total(c: Cluster, usable: Sequence[int], segment: int) -> int:
    """GPUs usable in whole segments of `segment` GPUs, each inside one block, for per-node
    usable GPUs (`usable_per_node`): per block, its usable GPUs rounded down to whole segments."""
    return sum(_segment_hosts(c, usable, segment)[0]) * segment


def _node_take_segments(c: Cluster, free: Sequence[int], need: int, tp: int, rule: int, segment: int) -> dict[int, int] | None:
    """`_node_take` for a gang asking for segments of `segment` GPUs (a whole number of TP
    groups that divides the gang), each inside one block (Slurm topology/block's `--segment`).
    The rule distributes the `need // segment` segments over the blocks (`_segment_hosts`):
    binpack one segment at a time into the smallest fitting block (Slurm's best fit,
    `_smallest_fitting`); spread one segment at a time to the block with the most left, as it
    spreads pods over nodes; topology and the preempt rules the fastest, then
    tightest block that holds them all (the smallest fitting block), else the smallest switch
    subtree whose blocks do (`_spanning_topology`). Inside a block the segments take its first
    usable GPUs in node order, whole TP groups per node (whole groups of trays where TP groups
    span trays), so each consecutive run of `segment` GPUs of the result is one segment and
    each run of `tp` one TP group. A gang stays on one GPU type when one type alone holds its
    segments. None when the blocks' whole segments fall short: the job waits, however many
    GPUs are free across blocks."""
    if _jit.ENABLED:  # the native core (envs.core), bit for bit this reference
        return _core.node_take(_core.cluster_arrays(c), free, need, tp, rule, segment)
    usable = usable_per_node(c, free, tp)
    lists = c.node_lists
    if lists.num_types > 1:
        fits = [(segment_total(c, [u if t == ty else 0 for u, t in zip(usable, lists.gpu_type)], segment), ty)
                for ty in range(lists.num_types)]
        fits = [(room, ty) for room, ty in fits if room >= need]
        if fits:
            keep = (max(fits, key=lambda x: (x[0], -x[1])) if rule == SPREAD else min(fits))[1]
            usable = [u if t == keep else 0 for u, t in zip(usable, lists.gpu_type)]
    groups, members = _segment_hosts(c, usable, segment)
    k = need // segment
    if sum(groups) < k:
        return None
    if rule == BINPACK:
        by_host = _smallest_fitting(groups, [sum([usable[n] for n in m]) for m in members], k, segment)
    elif rule == SPREAD:
        by_host = _spread(groups, k)
    else:
        by_host = _spanning_topology(c, groups, members, k)
    return _fill_hosts(by_host, members, usable, segment)


def free_view(state: ClusterState) -> tuple[list[int], int, int]:
    """(free GPUs per node as a list, their total, the fragmented ones among them), once per
    allocation."""
    cache = per_alloc(state)
    hit = cache.get("free_view")
    if hit is None:
        free = state.node_free.tolist()
        hit = cache["free_view"] = (free, sum(free), state.fragmented_free)
    return hit


def whole_free_nodes(state: ClusterState) -> int:
    """Nodes whose GPUs are all free, once per allocation (the features read it; placement does not)."""
    cache = per_alloc(state)
    hit = cache.get("whole_free_nodes")
    if hit is None:
        hit = cache["whole_free_nodes"] = int(np.count_nonzero(state.node_free == state.cluster.node_gpus))
    return hit


def _aligned_total(c: Cluster, counts: list[int], tp: int, segment: int = 0) -> int:
    """GPUs usable in whole TP groups (in whole segments, with `segment`) over nodes with these
    available counts."""
    if segment:
        return segment_total(c, usable_per_node(c, counts, tp), segment)
    if c.num_domains and c.spans(tp):
        return sum(usable_per_node(c, counts, tp))
    return sum([f // tp * tp for f in counts])


def choose_victims(state: ClusterState, j: int) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """Place-after-preempt for job `j`: the cheapest lower-priority preemptible running jobs
    whose GPUs, with the free ones, hold the gang in whole TP groups per node; placement by the
    topology rule. None when the job fits without preemption or cannot fit even with it."""
    run = state.running
    pool = run[state.preemptible[run] & (state.priority[run] < state.priority[j])]
    return _place_over_victims(state, j, pool, lambda useful: np.lexsort((-useful, state.preemption_cost_gpu_s(pool))), PREEMPT)


def las_victim_pool(state: ClusterState, j: int) -> np.ndarray:
    """The running jobs `preempt-las` may take for queued job `j`: preemptible, of no higher
    priority class than `j`, in a strictly lower 2D-LAS queue than `j`'s (envs.decision.las)."""
    run = state.running
    pool = run[state.preemptible[run] & (state.priority[run] <= state.priority[j])]
    if not len(pool):
        return pool
    return pool[las_queue(state, pool, queued=False) > las_queue(state, [j])[0]]


def choose_las_victims(state: ClusterState, j: int) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """Tiresias' preemption for job `j`: victims from `las_victim_pool`, the most attained
    GPU-service first (more useful GPUs first on ties), until their GPUs with the free ones
    hold the gang in whole TP groups per node; placement by the topology rule; only victims
    whose GPUs the placement uses are kept. None when the job fits without preemption or cannot
    fit even with it."""
    pool = las_victim_pool(state, j)
    return _place_over_victims(state, j, pool, lambda useful: np.lexsort((-useful, -state.attained_gpu_s[pool])), PREEMPT_LAS)


def _place_over_victims(state: ClusterState, j: int, pool: np.ndarray, order, rule: int) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """Victims for job `j` from `pool`, taken in `order(useful GPUs per candidate victim)` (an
    index order into `pool`) until the free GPUs and theirs hold the gang in whole TP groups per
    node; then the topology rule over those GPUs, keeping the victims whose GPUs it uses."""
    c = state.cluster
    need, tp, mem = int(state.num_gpus[j]), int(state.tp_degree[j]), float(state.mem_per_gpu_gb[j])
    segment = state.segment_of(j)
    counts = list(_eligible(c, free_view(state)[0], mem))  # per node: free GPUs, then also the victims'
    if _aligned_total(c, counts, tp, segment) >= need:
        return None
    if not len(pool):
        return None
    lists = c.node_lists
    memory = lists.memory_gb
    if mem <= lists.min_memory_gb:  # every node can host the job: a victim's GPUs are all useful
        useful = state.num_gpus[pool]
    else:  # per candidate victim, its GPUs with enough memory (a pool has a few dozen jobs at most)
        useful = np.array([sum([k for n, k in zip(p.nodes.tolist(), p.gpus_on_node.tolist()) if memory[n] >= mem])
                           for p in map(state.profiles.__getitem__, pool.tolist())])
    ranked = order(useful)
    # The outcome depends on the allocation and the ranked pool alone: kept until the allocation changes.
    memo = per_alloc(state).setdefault("victims", {})
    key = (need, tp, mem, pool[ranked].tobytes())
    if segment:
        key += (segment,)
    hit = memo.get(key, False)
    if hit is False:
        hit = memo[key] = _greedy_victims(state, need, tp, mem, counts, pool, useful, ranked, rule, segment)
    return hit


def _greedy_victims(state: ClusterState, need: int, tp: int, mem: float, counts: list[int], pool: np.ndarray,
                    useful: np.ndarray, ranked: np.ndarray, rule: int, segment: int = 0) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """`_place_over_victims` past the ranking: victims in `ranked` order until the gang fits,
    then the topology rule over their GPUs and the free ones."""
    c = state.cluster
    memory = c.node_lists.memory_gb
    chosen: list[int] = []
    for i in ranked.tolist():
        if _aligned_total(c, counts, tp, segment) >= need:
            break
        if useful[i] > 0:
            v = int(pool[i])
            chosen.append(v)
            p = state.profiles[v]
            for n, k in zip(p.nodes.tolist(), p.gpus_on_node.tolist()):
                if memory[n] >= mem:
                    counts[n] += k
    if _aligned_total(c, counts, tp, segment) < need:
        return None
    avail = state.free_mask.copy()
    for v in chosen:
        avail[state.placement[v]] = True
    gpus = place(state, need, tp, mem, rule, avail, segment)
    if gpus is None:
        return None
    used = np.zeros(c.num_gpus, dtype=bool)
    used[gpus] = True
    chosen_victims = tuple(v for v in chosen if used[state.placement[v]].any())
    return (gpus, chosen_victims) if chosen_victims else None


def geometry_of(state: ClusterState, gpus: np.ndarray, tp_degree: int) -> PlacementGeometry:
    """`placement_geometry`, memoised per cluster and speed model (placements recur as the
    cluster cycles, and across episodes)."""
    return geometry(state.cluster, gpus, tp_degree, state.speed_model, memo_of(state, ("geometry", state.speed_model)))
