"""The candidate code's fast paths against plain references: memoised placements, victims chosen
on per-node counts, and the per-placement feature columns worked out in Python ints."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.cache import clear_cluster_memos
from envs.candidates import apply_candidate
from envs.config import load_cluster
from envs.features import _geometry_columns, fragmentation
from envs.las import LAS_QUEUE_THRESHOLDS_GPU_S, STARVATION_FACTOR
from envs.placement import BINPACK, PREEMPT, PREEMPT_LAS, RULES, SPREAD, TOPOLOGY, choose_las_victims, choose_victims, place
from envs.window import aligned as _aligned
from envs.window import las_fits
from envs.replay import advance_to_decision
from envs.simulator import Simulator
from envs.workload import load_workload_spec, make_workload


def _random_states(cluster_name: str, workload: str, seed: int, data, steps: int = 40, num_jobs: int = 60):
    """Decision points of an episode driven by legal actions drawn from `data` (a hypothesis
    data strategy or a numpy Generator)."""
    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    cset = advance_to_decision(sim, 8)
    for _ in range(steps):
        if sim.done:
            return
        yield sim, sim.decision_state(), cset
        valid = np.flatnonzero(cset.mask)
        pick = data.integers(len(valid)) if isinstance(data, np.random.Generator) else data.draw(st.integers(0, len(valid) - 1), label="action")
        apply_candidate(sim, cset, int(valid[pick]))
        cset = advance_to_decision(sim, 8)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_memoised_placements_equal_fresh_ones(seed, data):
    """The per-cluster placement memo is keyed by everything a placement depends on: emptying it
    never changes a placement."""
    for sim, state, _ in _random_states("mixed-64gpu", "llm-mix-bursty", seed, data):
        cluster = sim.cluster
        shapes = {(j.gpus, j.tp_degree, j.mem_per_gpu_gb) for j in sim.jobs}  # every gang shape
        for gpus, tp, mem in shapes:
            for rule in (BINPACK, SPREAD, TOPOLOGY):
                memoised = place(state, gpus, tp, mem, rule)  # the memo filled by every earlier call on this cluster
                clear_cluster_memos(cluster)
                fresh = place(state, gpus, tp, mem, rule)
                assert (memoised is None) == (fresh is None), (gpus, tp, mem, RULES[rule])
                if fresh is not None:
                    np.testing.assert_array_equal(memoised, fresh)


def _victims_by_gpu(state, j):
    """Reference for choose_victims on per-GPU masks: cheapest useful lower-priority preemptible
    running jobs until the gang fits in whole TP groups, then the topology rule over their GPUs."""
    c = state.cluster
    need, tp, mem = int(state.num_gpus[j]), int(state.tp_degree[j]), float(state.mem_per_gpu_gb[j])
    eligible = c.gpu_memory_gb >= mem

    def aligned_total(avail):
        return int(_aligned(np.bincount(c.gpu_node[avail], minlength=c.num_nodes), tp).sum())

    free = state.free_mask & eligible
    if aligned_total(free) >= need:
        return None
    run = state.running
    pool = run[state.preemptible[run] & (state.priority[run] < state.priority[j])]
    if not len(pool):
        return None
    useful = np.array([int(eligible[state.placement[v]].sum()) for v in pool])
    cost = state.preemption_cost_gpu_s(pool)
    avail = free.copy()
    chosen = []
    for i in [i for i in np.lexsort((-useful, cost)) if useful[i] > 0]:
        if aligned_total(avail) >= need:
            break
        chosen.append(int(pool[i]))
        avail[state.placement[pool[i]]] = True
        avail &= eligible
    if aligned_total(avail) < need:
        return None
    gpus = place(state, need, tp, mem, PREEMPT, avail)
    victims = tuple(v for v in chosen if np.isin(state.placement[v], gpus).any())
    return (gpus, victims) if victims else None


def test_victims_on_node_counts_equal_the_per_gpu_reference():
    checked = 0
    for seed in range(4):
        for _, state, _ in _random_states("mixed-64gpu", "llm-mix-bursty", seed, np.random.default_rng(seed), steps=150, num_jobs=120):
            for j in state.queue.tolist():
                got, want = choose_victims(state, j), _victims_by_gpu(state, j)
                assert (got is None) == (want is None), j
                if want is not None:
                    np.testing.assert_array_equal(got[0], want[0])
                    assert got[1] == want[1]
                    checked += 1
    assert checked >= 20, f"only {checked} preemptions compared"


def _las_victims_by_gpu(state, j):
    """Reference for choose_las_victims on per-GPU masks, the LAS queues worked out in plain
    Python: preemptible running jobs of no higher class in a strictly lower queue, the most
    attained first (more useful GPUs on ties), until the gang fits in whole TP groups; then the
    topology rule over their GPUs."""
    c = state.cluster
    need, tp, mem = int(state.num_gpus[j]), int(state.tp_degree[j]), float(state.mem_per_gpu_gb[j])
    eligible = c.gpu_memory_gb >= mem

    def aligned_total(avail):
        return int(_aligned(np.bincount(c.gpu_node[avail], minlength=c.num_nodes), tp).sum())

    def queue_of(v):
        return sum(float(state.attained_gpu_s[v]) >= t for t in LAS_QUEUE_THRESHOLDS_GPU_S)

    free = state.free_mask & eligible
    if aligned_total(free) >= need:
        return None
    executed_s = float(state.attained_gpu_s[j]) / int(state.num_gpus[j])
    mine = 0 if state.now - float(state.queued_since_s[j]) >= STARVATION_FACTOR * executed_s else queue_of(j)
    pool = [v for v in state.running.tolist()
            if state.preemptible[v] and state.priority[v] <= state.priority[j] and queue_of(v) > mine]
    useful = {v: int(eligible[state.placement[v]].sum()) for v in pool}
    avail = free.copy()
    chosen = []
    for v in sorted(pool, key=lambda v: (-float(state.attained_gpu_s[v]), -useful[v])):
        if aligned_total(avail) >= need:
            break
        if useful[v] > 0:
            chosen.append(v)
            avail[state.placement[v]] = True
            avail &= eligible
    if aligned_total(avail) < need:
        return None
    gpus = place(state, need, tp, mem, PREEMPT_LAS, avail)
    victims = tuple(v for v in chosen if np.isin(state.placement[v], gpus).any())
    return (gpus, victims) if victims else None


def test_las_victims_and_validity_equal_the_per_gpu_reference():
    """preempt-las: the per-node count validity (las_fits), the victims chosen on node counts
    and a per-GPU reference agree on every queued job of random episodes (whose random actions
    take preempt-las candidates too, so LAS preemptions are in flight)."""
    checked = 0
    for seed in range(4):
        for _, state, cset in _random_states("mixed-64gpu", "llm-mix-bursty", seed, np.random.default_rng(seed), steps=150, num_jobs=120):
            q = state.queue.tolist()
            fits = las_fits(state, q).tolist()
            for j, valid in zip(q, fits):
                got, want = choose_las_victims(state, j), _las_victims_by_gpu(state, j)
                assert (got is None) == (want is None) == (not valid), j
                if want is not None:
                    np.testing.assert_array_equal(got[0], want[0])
                    assert got[1] == want[1]
                    assert all(state.priority[v] <= state.priority[j] and state.preemptible[v] for v in got[1])
                    checked += 1
            for cd in cset.candidates[:-1]:  # every valid preempt-las candidate resolves to a placement
                if cd.valid and cd.rule == PREEMPT_LAS:
                    assert cd.gpus is not None and cd.victims
    assert checked >= 20, f"only {checked} LAS preemptions compared"


def _fragmented(sim, node_free):
    """Per node: its free GPUs when too few to host a whole-node gang, else 0."""
    return np.where(node_free < np.minimum(8, sim.cluster.node_gpus), node_free, 0)


def _fragmented_share(sim, node_free):
    total = node_free.sum()
    return float(_fragmented(sim, node_free).sum() / total) if total else 0.0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_placement_columns_equal_a_recount_of_the_nodes(seed, data):
    """Share of whole free nodes taken and change in fragmentation (fragmented GPUs made or
    unmade on each node, over its GPUs), from per-node arrays."""
    for sim, state, cset in _random_states("mixed-64gpu", "llm-mix", seed, data):
        assert fragmentation(state) == _fragmented_share(sim, sim.node_free)
        for cd in cset.candidates[:-1]:
            if not cd.valid:
                continue
            g = cd.geometry
            _, nodes_per_gpu, whole, frag_delta = _geometry_columns(state, g)
            free_now = sim.node_free[g.nodes]
            after = sim.node_free.copy()
            after[g.nodes] -= np.minimum(g.gpus_on_node, free_now)
            assert whole == float((free_now == sim.cluster.node_gpus[g.nodes]).sum()) / len(g.nodes)
            made = (_fragmented(sim, after) - _fragmented(sim, sim.node_free))[g.nodes] / sim.cluster.node_gpus[g.nodes]
            assert frag_delta == min(max(sum(made.tolist()), -1.0), 1.0)
            assert nodes_per_gpu == len(g.nodes) / g.gpus_on_node.sum()


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_predicted_rate_is_the_profiles_rate_if_started(seed, data):
    """predicted_rate (from per-allocation rate inputs) is, bit for bit, the candidate's
    PlacementProfile under the congestion and interference it would meet if started now."""
    from envs.features import _congestion_if_added, _neighbour_pressure, predicted_rate
    from envs.speed import interference_from

    checked = 0
    for _, state, cset in _random_states("hetero-64gpu", "llm-mix", seed, data):
        for i in cset.valid_placements():
            cd = cset.candidates[i]
            p, g = cd.profile, cd.geometry
            interf = interference_from(_neighbour_pressure(state, g), p.sensitivity, state.speed_model)
            assert predicted_rate(state, cd) == p.min_speed * p.efficiency(_congestion_if_added(state, g)) * interf
            checked += 1
    assert checked
