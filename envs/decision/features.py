"""The feature schema and the features: what a policy sees of a decision state.

The schema is declared once, below, as tables of (name, meaning, scale); every column position
comes from it (`CANDIDATE_COLUMNS["valid"]`), never a literal number. `FEATURE_SCHEMA_VERSION`
changes whenever a column is added, removed, reordered or rescaled: an exported model records
it and a model of another version refuses to load.

Everything is computed from a `ClusterState` alone, so it holds only what a scheduler knows:
runtime columns use the jobs' *estimates*, the WAIT row's time to the next event is the next
*estimated* completion, and arrival columns describe the past (load that arrived over the last
hours, time since the last arrival). Values are scaled to about [-1, 1] and none grows with the
cluster's size: a policy trained on 64 GPUs runs on 1,024.

Scales: `log` is log10(1 + seconds) / 6 (one second 0.05, one hour 0.59, eleven days 1.0);
`share` is a fraction in [0, 1]; `onehot` is 0 or 1.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from envs.cluster.speed import PlacementGeometry, efficiency_of, interference_from
from envs.cluster.topology import REFERENCE_NET_PER_GPU_GBPS
from envs.core import jit as _jit
from envs.core import kernels as _kernels
from envs.decision.cache import job_table, per_alloc, per_jobs, per_state
from envs.decision.candidates import Candidate, CandidateSet, job_constants
from envs.decision.placement import RULES, free_view, whole_free_nodes
from envs.decision.state import ClusterState, fragmented_change

FEATURE_SCHEMA_VERSION = 5  # 1: the first release (clairvoyant next_event_log and next_arrival_log); 2: four placement rules (no rule_preempt_las); 3: no victim columns beyond cost and count, no head_fit_est_log; 4: fragmentation_delta as a change in the share of free GPUs (smaller the larger the cluster)

CANDIDATE_SCHEMA: tuple[tuple[str, str, str], ...] = (
    # The job (the same on each rule's row of a window slot).
    ("gang_log2", "log2(gang size) / 7", "log2"),
    ("tp_log2", "log2(TP degree) / 3", "log2"),
    ("kind_pretrain", "job kind is pretrain", "onehot"),
    ("kind_finetune", "job kind is finetune", "onehot"),
    ("kind_inference", "job kind is inference", "onehot"),
    ("kind_batch", "job kind is batch", "onehot"),
    ("priority", "priority class / 2 (low 0, normal 0.5, high 1)", "share"),
    ("preemptible", "the job may be preempted", "onehot"),
    ("est_remaining_log", "estimated remaining runtime at reference speed", "log"),
    ("wait_log", "time queued so far (all stays)", "log"),
    ("progress", "work done / (work done + estimated remaining)", "share"),
    ("comm_fraction", "share of step time communicating at ideal placement", "share"),
    ("mem_per_gpu", "GPU memory needed / 80 GB", "share"),
    ("was_preempted", "preempted before: owes a restore", "onehot"),
    # What the row is.
    ("valid", "the candidate may be taken", "onehot"),
    ("rule_binpack", "placement rule binpack", "onehot"),
    ("rule_spread", "placement rule spread", "onehot"),
    ("rule_topology", "placement rule topology", "onehot"),
    ("rule_preempt", "placement rule preempt (after preempting victims)", "onehot"),
    ("rule_preempt_las", "placement rule preempt-las (after preempting jobs of lower 2D-LAS queues)", "onehot"),
    ("is_wait", "the WAIT row", "onehot"),
    # The placement (valid rows only).
    ("predicted_rate", "reference-s of work per s the job would get if started now", "share"),
    ("placement_efficiency", "placement efficiency (topology, congestion if started)", "share"),
    ("interference", "speed factor from the neighbours' memory-bandwidth pressure", "share"),
    ("tier", "highest interconnect tier spanned / 3", "share"),
    ("nodes_per_gpu", "nodes used / GPUs", "share"),
    ("free_nodes_consumed", "share of its nodes that were wholly free", "share"),
    ("fragmentation_delta", "change in the fragmented free GPUs, in node units (per node / its GPUs, summed)", "share"),
    ("preemption_cost_log", "GPU-s the victims' checkpoints and restores cost", "log"),
    ("victims", "victims / 4, at most 1", "share"),
    ("min_gpu_speed", "relative speed of the placement's slowest GPU for the job's kind", "share"),
    ("est_runtime_here_log", "estimated remaining runtime / predicted rate", "log"),
    # What preempting the row's victims gives up (0 without victims).
    ("victims_remaining_log", "the victims' shortest estimated remaining runtime", "log"),
    ("victims_attained_log", "the victims' attained service per GPU (their GPU-s / their GPUs)", "log"),
    ("victims_priority", "the highest priority class among the victims / 2", "share"),
    # The WAIT row.
    ("next_event_est_log", "time to the next estimated completion or checkpoint end (1: none)", "log"),
    ("head_fit_est_log", "time until the first window job's GPU count is free, by the estimated ends of "
                         "running and checkpointing jobs (0: free now; 1: never, or no window job)", "log"),
)
GLOBAL_SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("queue_log", "log10(1 + queued jobs) / 3", "log10"),
    ("queued_gpu_demand", "GPUs the queue asks for / cluster GPUs, / 4, at most 1", "share"),
    ("allocated", "share of GPUs owned or reserved", "share"),
    ("free", "share of GPUs free", "share"),
    ("free_nodes", "share of nodes wholly free", "share"),
    ("fragmentation", "share of free GPUs on nodes that cannot host a whole-node gang", "share"),
    ("running_share", "running / (running + queued + 1)", "share"),
    ("reserved_share", "(reserved + checkpointing) / (queued + 1), at most 1", "share"),
    ("time_log", "log10(1 + now s) / 7", "log10"),
    ("queued_high_priority", "share of the queue in the high class", "share"),
    ("mean_wait_log", "mean time the queued jobs have waited in their current stay", "log"),
    ("arrived_load_1h", "GPU-s requested by the last hour's arrivals / (1 h x cluster GPUs), / 4, at most 1", "share"),
    ("arrived_load_6h", "the same over the last 6 hours", "share"),
    ("since_arrival_log", "time since the last arrival (1: none yet)", "log"),
)
CANDIDATE_FEATURES = tuple(name for name, _, _ in CANDIDATE_SCHEMA)
GLOBAL_FEATURES = tuple(name for name, _, _ in GLOBAL_SCHEMA)
NUM_CANDIDATE_FEATURES = len(CANDIDATE_FEATURES)
NUM_GLOBAL_FEATURES = len(GLOBAL_FEATURES)
CANDIDATE_COLUMNS = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}
GLOBAL_COLUMNS = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
_C = CANDIDATE_COLUMNS

# Column blocks, from the schema's order.
_JOB_BLOCK = slice(_C["gang_log2"], _C["was_preempted"] + 1)
_JOB_DYNAMIC = [_C["est_remaining_log"], _C["wait_log"], _C["progress"], _C["was_preempted"]]
_RULE_BLOCK = slice(_C["rule_binpack"], _C["rule_binpack"] + len(RULES))
_ROW_BLOCK = slice(_C["valid"], _C["is_wait"] + 1)  # valid, the rule one-hot, is_wait
_PLACEMENT_BLOCK = slice(_C["predicted_rate"], _C["victims_priority"] + 1)
assert _RULE_BLOCK.start == _ROW_BLOCK.start + 1 and _RULE_BLOCK.stop + 1 == _ROW_BLOCK.stop == _PLACEMENT_BLOCK.start
_DYNAMIC_COLUMNS = np.array(_JOB_DYNAMIC, dtype=np.int64)  # the kernel's dyn_cols
_ROW_INPUTS = 17  # envs.core.kernels.candidate_rows' row_in columns
assert [_C[n] for n in ("predicted_rate", "victims_priority")] == [_PLACEMENT_BLOCK.start, _PLACEMENT_BLOCK.start + 13]
_KINDS = [_C["kind_pretrain"], _C["kind_finetune"], _C["kind_inference"], _C["kind_batch"]]  # by JobKind
_RULE_ONE_HOT = np.eye(len(RULES), dtype=np.float32)
_ROW_PREFIX = [(1.0, *np.eye(len(RULES))[r].tolist(), 0.0) for r in range(len(RULES))]  # valid, rule one-hot, is_wait
ARRIVAL_WINDOWS_S = (3600.0, 6 * 3600.0)  # arrived_load_1h, arrived_load_6h (envs.decision.state reports 6 h of history)


def log_scale(x: float) -> float:
    """log10(1 + x) / 6: one second -> 0.05, one hour -> 0.59, eleven days -> 1."""
    return math.log10(1.0 + max(x, 0.0)) / 6.0


def _share(part: float, total: float) -> float:
    return part / total if total else 0.0


def fragmentation(state: ClusterState) -> float:
    """Share of free GPUs that cannot host a whole-node gang (8 GPUs, or the node if smaller)."""
    _, total, fragmented = free_view(state)
    return _share(fragmented, total)


def _static_job_rows(state: ClusterState, lo: int, hi: int) -> np.ndarray:
    """(hi - lo, job columns) the job columns that never change; dynamic ones filled per step.
    Jobs arrive one or a few at a time, so rows are made in plain Python numbers."""
    width = _JOB_BLOCK.stop
    rows = []
    lists = state.job_lists
    for g, tp, kind, prio, pre, comm, mem in zip(
            lists.num_gpus[lo:hi], lists.tp_degree[lo:hi], lists.kind[lo:hi], lists.priority[lo:hi],
            lists.preemptible[lo:hi], lists.comm_fraction[lo:hi], lists.mem_per_gpu_gb[lo:hi]):
        row = [0.0] * width
        row[_C["gang_log2"]] = math.log2(g) / 7.0
        row[_C["tp_log2"]] = math.log2(tp) / 3.0
        row[_KINDS[kind]] = 1.0
        row[_C["priority"]] = prio / 2.0
        row[_C["preemptible"]] = float(pre)
        row[_C["comm_fraction"]] = comm
        row[_C["mem_per_gpu"]] = mem / 80.0
        rows.append(row)
    return np.array(rows, dtype=np.float32).reshape(hi - lo, width)


def _geometry_columns(state: ClusterState, g: PlacementGeometry) -> tuple:
    """Features of one placement that do not depend on which job runs there: (tier / 3, nodes
    per GPU, share of whole free nodes it takes, change in fragmentation). The change counts
    the free GPUs it leaves fragmented (or unfragments) on each node in units of that node's
    GPUs, so a small job that breaks into a whole free 8-GPU node reads +7/8 on any cluster; a
    share of the cluster's free GPUs (schema 4) shrank with the cluster's size."""
    lists = state.cluster.node_lists
    free = free_view(state)[0]
    whole = 0
    frag_delta = 0.0
    nodes, on_node = g.nodes.tolist(), g.gpus_on_node.tolist()
    for n, k in zip(nodes, on_node):
        f = free[n]
        whole += f == lists.gpus[n]
        frag_delta += fragmented_change(f, f - min(k, f), lists.whole_gang[n]) / lists.gpus[n]
    return float(g.tier) / 3.0, len(nodes) / sum(on_node), float(whole) / len(nodes), min(max(frag_delta, -1.0), 1.0)


def _neighbour_pressure(state: ClusterState, g: PlacementGeometry) -> float:
    """Memory-bandwidth pressure per GPU of the jobs already on the placement's worst node."""
    pressure, node_gpus = state.node_pressure, state.cluster.node_gpus
    if len(g.nodes) == 1:
        return pressure[g.nodes[0]] / node_gpus[g.nodes[0]]
    return float((pressure[g.nodes] / node_gpus[g.nodes]).max())


def _congestion_if_added(state: ClusterState, g: PlacementGeometry) -> float:
    if not len(g.uplinks):
        return 1.0
    added = state.uplink_demand[g.uplinks] + g.uplink_demand_GBps
    return float(np.minimum(1.0, state.cluster.switch_uplink_GBps[g.uplinks] / added).min())


def _rate_inputs(state: ClusterState, g: PlacementGeometry) -> tuple:
    """(g, neighbours' pressure per GPU on its worst node, TP congestion factor, DP bandwidth) of
    a placement under the congestion its uplinks would have if it started now: what its rate
    depends on beyond the job, once per allocation."""
    table = per_alloc(state).setdefault("rate_inputs", {})
    hit = table.get(id(g))
    if hit is None or hit[0] is not g:
        hit = table[id(g)] = (g, _neighbour_pressure(state, g), *g.congested(_congestion_if_added(state, g)))
    return hit


def rate_if_started(state: ClusterState, g: PlacementGeometry, constants: tuple) -> tuple[float, float, float, float]:
    """(rate, placement efficiency, interference factor, slowest GPU's speed) of a job with these
    `job_constants` started on placement `g` now: PlacementProfile.efficiency and the speed
    model's interference, the same operations in the same order as the simulator's rates."""
    _, others, tp_congestion, dp_bw = _rate_inputs(state, g)
    c_tp, c_dp, _, sensitivity, kind = constants
    min_speed = g.min_speed_by_kind[kind]  # the job's kind's speed (the memo's min_speed is the generic one)
    eff = efficiency_of(g.tp_stretch, tp_congestion, dp_bw, c_tp, c_dp)
    interf = interference_from(others, sensitivity, state.speed_model)
    return min_speed * eff * interf, eff, interf, min_speed


def predicted_rate(state: ClusterState, cd: Candidate) -> float:
    """Reference-seconds of work per second the candidate's job would get if started now."""
    return rate_if_started(state, cd.geometry, job_constants(state)[cd.job_id])[0]


class _Arrivals:
    """The state's past arrivals as Python lists (extended as they grow) and, per window, the
    last (first arrival in it, arrivals seen, exact sum) so a sum is remade only when the window's
    arrivals change."""

    __slots__ = ("times", "requested", "sums")

    def __init__(self):
        self.times: list[float] = []
        self.requested: list[float] = []
        self.sums: dict[float, tuple[int, int, float]] = {}


def _arrived_loads(state: ClusterState) -> list[float]:
    """Per window of ARRIVAL_WINDOWS_S: GPU-s requested by its arrivals / (window x cluster
    GPUs), / 4, at most 1. Sums are exact (math.fsum), so they do not depend on how much
    history the state holds."""
    tables = per_jobs(state)
    arrivals = tables.get("arrivals")
    if arrivals is None:
        arrivals = tables["arrivals"] = _Arrivals()
    times, requested, end = arrivals.times, arrivals.requested, len(state.arrival_times_s)
    if len(times) < end:
        times.extend(state.arrival_times_s[len(times):].tolist())
        requested.extend(state.arrival_requested_gpu_s[len(requested):].tolist())
    n_gpus, now = state.cluster.num_gpus, state.now
    out = []
    for window_s in ARRIVAL_WINDOWS_S:
        first = bisect.bisect_right(times, now - window_s)
        hit = arrivals.sums.get(window_s)
        if hit is None or hit[0] != first or hit[1] != end:
            hit = arrivals.sums[window_s] = (first, end, math.fsum(requested[first:]))
        out.append(min(hit[2] / (window_s * n_gpus), 4.0) / 4.0)
    return out


def global_features(state: ClusterState) -> np.ndarray:
    """(NUM_GLOBAL_FEATURES,) float32: the queue, the cluster and the recent arrivals."""
    c = state.cluster
    now = state.now
    _, free_gpus, fragmented = free_view(state)
    whole_nodes = whole_free_nodes(state)
    n_gpus = float(c.num_gpus)
    q = state.queue
    nq = len(q)
    running = len(state.running)
    times = state.arrival_times_s
    glob = [
        math.log10(1.0 + nq) / 3.0,
        min(state.queued_gpus / n_gpus, 4.0) / 4.0,
        (c.num_gpus - free_gpus) / n_gpus,
        free_gpus / n_gpus,
        whole_nodes / c.num_nodes,
        _share(fragmented, free_gpus),  # fragmentation(state), from the view already read
        running / (running + nq + 1.0),
        min((len(state.reserved) + len(state.checkpointing)) / (nq + 1.0), 1.0),
        math.log10(1.0 + now) / 7.0,
        state.queued_high_priority / nq if nq else 0.0,
        log_scale(float(np.add.reduce(now - state.queued_since_s[q]) / nq)) if nq else 0.0,
        *_arrived_loads(state),
        log_scale(now - float(times[-1])) if len(times) else 1.0,
    ]
    return np.array(glob, dtype=np.float32)


def candidate_features(cset: CandidateSet) -> tuple[np.ndarray, np.ndarray]:
    """(K, NUM_CANDIDATE_FEATURES) and (NUM_GLOBAL_FEATURES,) float32 for a candidate set,
    scaled to about [-1, 1] and independent of the cluster's size. A typical decision has a few
    window jobs and a few valid candidates: the reference path works their numbers out in plain
    floats, row by row, and writes them with one array assignment per block; the compiled path
    (envs.core.jit) gathers each valid row's inputs and writes both blocks in one kernel call
    (envs.core.kernels.candidate_rows), bit for bit the same."""
    state = cset.state
    feats = np.zeros((len(cset.candidates), NUM_CANDIDATE_FEATURES), dtype=np.float32)
    nw = len(cset.window)
    rem = cset.remaining_estimates()
    valid = cset.valid_placements()
    if _jit.ENABLED:
        _compiled_blocks(cset, feats, rem, valid)
    else:
        if nw:
            _job_block(cset, feats, rem)
        _placement_block(cset, feats, rem, valid)
    w = cset.wait_index
    feats[w, _C["valid"]] = float(cset.mask[w])
    feats[w, _C["is_wait"]] = 1.0
    feats[w, _C["next_event_est_log"]] = next_event_feature(state)
    feats[w, _C["head_fit_est_log"]] = head_fit_feature(state, cset.window[0]) if nw else 1.0
    return feats, global_features(state)


def _job_block(cset: CandidateSet, feats: np.ndarray, rem: list[float]) -> None:
    """The job columns, the same on each rule's row of a window slot, and the rule one-hot."""
    state, R = cset.state, len(RULES)
    window = np.array(cset.window, dtype=np.int64)
    nw = len(window)
    done = state.work_done_s[window].tolist()
    wait = (state.now - state.queued_since_s[window] + state.wait_s[window]).tolist()
    restore = state.needs_restore[window].tolist()
    jrows = job_table(state, "static_job_features", _static_job_rows)[window]
    jrows[:, _JOB_DYNAMIC] = [(log_scale(r), log_scale(w), d / (d + r) if d + r > 0 else 0.0, float(b))
                              for r, d, w, b in zip(rem, done, wait, restore)]
    by_rule = feats[: nw * R].reshape(nw, R, NUM_CANDIDATE_FEATURES)
    by_rule[:, :, _JOB_BLOCK] = jrows[:, None, :]
    by_rule[:, :, _RULE_BLOCK] = _RULE_ONE_HOT


def _geometry_entry(state: ClusterState, g: PlacementGeometry) -> tuple:
    """(g, *_geometry_columns), once per geometry and allocation."""
    per_geometry: dict[int, tuple] = per_alloc(state).setdefault("placement_columns", {})
    hit = per_geometry.get(id(g))
    if hit is None or hit[0] is not g:
        hit = per_geometry[id(g)] = (g, *_geometry_columns(state, g))
    return hit


def _placement_block(cset: CandidateSet, feats: np.ndarray, rem: list[float], valid: list[int]) -> None:
    """The valid rows' placement columns: per geometry (cached until the allocation changes),
    then per job."""
    state, R = cset.state, len(RULES)
    constants = job_constants(state)
    rows = []
    for i in valid:
        cd = cset.candidates[i]
        g = cd.geometry
        _, tier, nodes_per_gpu, whole, frag_delta = _geometry_entry(state, g)
        rate, eff, interf, min_speed = rate_if_started(state, g, constants[cd.job_id])
        lost, victim_share, v_remaining, v_attained, v_priority = _victim_columns(state, cd.victims)
        rows.append(_ROW_PREFIX[cd.rule] + (
            rate, eff, interf, tier, nodes_per_gpu, whole, frag_delta, lost, victim_share, min_speed,
            log_scale(rem[i // R] / max(rate, 1e-6)), v_remaining, v_attained, v_priority))
    if rows:  # one assignment for every valid row (float64 -> float32 as a row-by-row assignment casts)
        feats[valid, _ROW_BLOCK.start : _PLACEMENT_BLOCK.stop] = rows


def _compiled_blocks(cset: CandidateSet, feats: np.ndarray, rem: list[float], valid: list[int]) -> None:
    """`_job_block` and `_placement_block` in one kernel call: per valid row, the geometry's
    columns and rate inputs (cached as the reference caches them), the job's constants and the
    victim columns are gathered here; the arithmetic and the writes are the kernel's."""
    state = cset.state
    constants = job_constants(state)
    rows = []
    for i in valid:
        cd = cset.candidates[i]
        g = cd.geometry
        c_tp, c_dp, _, sensitivity, kind = constants[cd.job_id]
        rows.append((*_geometry_entry(state, g)[1:], *_rate_inputs(state, g)[1:], g.tp_stretch, g.min_speed_by_kind[kind],
                     c_tp, c_dp, sensitivity, *_victim_columns(state, cd.victims)))
    _kernels.candidate_rows(
        feats, job_table(state, "static_job_features", _static_job_rows), np.array(cset.window, dtype=np.int64),
        np.array(rem, dtype=np.float64), state.work_done_s, state.queued_since_s, state.wait_s, state.needs_restore,
        float(state.now), len(RULES), _DYNAMIC_COLUMNS, _RULE_BLOCK.start, np.array(valid, dtype=np.int64),
        np.array(rows, dtype=np.float64).reshape(len(rows), _ROW_INPUTS), _C["valid"], _PLACEMENT_BLOCK.start,
        REFERENCE_NET_PER_GPU_GBPS, state.speed_model.interference_coeff)


_NO_VICTIMS = (0.0, 0.0, 0.0, 0.0, 0.0)


def _victim_columns(state: ClusterState, victims) -> tuple:
    """(preemption_cost_log, victims, victims_remaining_log, victims_attained_log,
    victims_priority) of a candidate's victims: what preempting them costs and gives up, by
    estimates and the service they received."""
    if not victims:
        return _NO_VICTIMS
    ids = np.array(victims, dtype=np.int64)
    gpus = state.num_gpus[ids]
    return (log_scale(float(state.preemption_cost_gpu_s(ids).sum())), min(len(victims) / 4.0, 1.0),
            log_scale(float(state.remaining_estimate_s(ids).min())),
            log_scale(float(state.attained_gpu_s[ids].sum()) / float(gpus.sum())),
            float(state.priority[ids].max()) / 2.0)


def head_fit_feature(state: ClusterState, job: int) -> float:
    """The WAIT row's time until `job`'s GPU count is free, counting the GPUs free now and those
    each running job frees at its estimated end (at its current rate, after any restore it owes)
    and each checkpointing job at its checkpoint's end; log-scaled, 0 when enough are free now,
    1.0 when they never are. GPUs only: where they are is the placement rules' business."""
    need = int(state.num_gpus[job])
    if state.num_free >= need:
        return 0.0
    cache = per_state(state).setdefault("head_fit_est", {})
    hit = cache.get(job)
    if hit is None:
        r, c = state.running, np.array(state.checkpointing, dtype=np.int64)
        after = np.concatenate([state.end_estimates_after_s(r), state.checkpoint_end_s[c] - state.now])
        order = np.argsort(after, kind="stable")
        freed = state.num_free + np.cumsum(np.concatenate([state.num_gpus[r], state.num_gpus[c]])[order])
        k = int(np.searchsorted(freed, need))  # the first end after which enough GPUs are free
        hit = cache[job] = log_scale(float(after[order[k]])) if k < len(freed) else 1.0
    return hit


def next_event_feature(state: ClusterState) -> float:
    """The WAIT row's time to the next estimated event, log-scaled (1.0 when none), once per state."""
    cache = per_state(state)
    hit = cache.get("next_event_est")
    if hit is None:
        t = state.next_event_estimate_s()
        hit = cache["next_event_est"] = log_scale(t - state.now) if t < math.inf else 1.0
    return hit


def schema_table() -> str:
    """The feature schema as a markdown table (for the README and docs)."""
    lines = [f"Feature schema version {FEATURE_SCHEMA_VERSION}", "", "| block | column | name | meaning | scale |", "|---|---|---|---|---|"]
    for block, schema in (("candidate", CANDIDATE_SCHEMA), ("global", GLOBAL_SCHEMA)):
        lines += [f"| {block} | {i} | `{n}` | {m} | {s} |" for i, (n, m, s) in enumerate(schema)]
    return "\n".join(lines)


_NATIVE_SCHEMA_CHECKED = False
_NO_IDS = np.zeros(0, dtype=np.int64)


def check_native_schema() -> None:
    """The native core's columns (envs.core._core.CANDIDATE_COLUMNS and GLOBAL_COLUMNS) are this
    schema's, name by name and in order; RuntimeError naming the first difference otherwise."""
    global _NATIVE_SCHEMA_CHECKED
    from envs.core import _core

    for block, ours, theirs in (("candidate", CANDIDATE_FEATURES, _core.CANDIDATE_COLUMNS),
                                ("global", GLOBAL_FEATURES, _core.GLOBAL_COLUMNS)):
        if tuple(theirs) != ours:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            count = f"{len(theirs)} columns, not {len(ours)}; " if len(theirs) != len(ours) else ""
            raise RuntimeError(f"the native core's {block} features are not the schema's (version {FEATURE_SCHEMA_VERSION}): "
                               f"{count}column {at} is {theirs[at] if at < len(theirs) else None!r}, not "
                               f"{ours[at] if at < len(ours) else None!r} (rebuild the core, or change "
                               "envs/core/src/features.hpp with the schema)")
    _NATIVE_SCHEMA_CHECKED = True


def ensure_native_schema() -> None:
    """`check_native_schema`, once per process."""
    if not _NATIVE_SCHEMA_CHECKED:
        check_native_schema()


def native_candidate_features(cset: CandidateSet, clip: bool = False,
                              out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`candidate_features(cset)` computed by the native core (envs.core.candidate_features),
    bit for bit; with `clip`, clipped to [-1, 1] as the env's observation. The candidates'
    placements are resolved here (each valid candidate's GPUs and victims); the features of them
    are the core's. `out`: two float32 arrays of the right shapes to write instead of new ones.
    It serves any decision state, one rebuilt from plain data included; the env's observation
    comes with its candidates from one call over the simulator's arrays instead
    (Simulator.native_candidates with `features`). The schema is checked against the core's
    columns on the first call (RuntimeError)."""
    ensure_native_schema()
    from envs import core as _core

    valid = cset.valid_placements()
    candidates = cset.candidates
    gpus, victims, gpu_ends, victim_ends = [], [], [], []
    g = v = 0
    for i in valid:
        cd = candidates[i]
        placed, taken = cd.gpus, cd.victims
        gpus.append(placed)
        g += len(placed)
        gpu_ends.append(g)
        if taken:
            victims.extend(taken)
            v += len(taken)
        victim_ends.append(v)
    state = cset.state
    tables = per_jobs(state)
    memo = tables.get("native_arrays")
    if memo is None:
        memo = tables["native_arrays"] = _core.ArrayMemo()
    return _core.candidate_features(
        state, cset.window, cset.mask, np.concatenate(gpus) if gpus else _NO_IDS, np.array(gpu_ends, dtype=np.int64),
        np.array(victims, dtype=np.int64), np.array(victim_ends, dtype=np.int64), clip, out, memo)
