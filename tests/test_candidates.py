"""The candidate code's fast paths against plain references: memoised placements, victims chosen
on per-node counts, and the per-placement feature columns worked out in Python ints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.cluster.config import load_cluster
from envs.decision.cache import clear_cluster_memos
from envs.decision.candidates import apply_candidate, build_candidates
from envs.decision.features import _geometry_columns, fragmentation
from envs.decision.las import LAS_QUEUE_THRESHOLDS_GPU_S, STARVATION_FACTOR
from envs.decision.placement import BINPACK, PREEMPT, PREEMPT_LAS, RULES, SPREAD, TOPOLOGY, choose_las_victims, choose_victims, place
from envs.decision.window import aligned as _aligned
from envs.decision.window import las_fits
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload


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
    """predicted_rate (from the state's incremental uplink demand and node pressure, once per
    allocation) is the rate the speed model's reference (envs.cluster.speed.rates_of over the running
    jobs' profiles and the candidate's, docs/speed.md) gives the candidate's job if started now.
    The expectation uses none of envs.decision.features' helpers."""
    from envs.cluster.speed import rates_of
    from envs.decision.features import predicted_rate

    checked = 0
    for _, state, cset in _random_states("hetero-64gpu", "llm-mix", seed, data):
        running = [state.profiles[r] for r in state.running.tolist()]
        for i in cset.valid_placements():
            cd = cset.candidates[i]
            want = rates_of(state.cluster, running + [cd.profile], state.speed_model)[-1]
            assert predicted_rate(state, cd) == pytest.approx(want, rel=1e-12, abs=0)
            checked += 1
    assert checked


def _toy_sim(jobs, leaves=1, oversubscription=1.0):
    from tests.helpers import toy_cluster

    return Simulator(toy_cluster(nodes=2, leaves=leaves, oversubscription=oversubscription), jobs)


def test_predicted_rate_next_to_seven_inference_replicas_by_hand():
    """docs/speed.md, Interference: a replica joining seven on one 8-GPU node runs at
    1 / (1 + 0.6 x 1.0 x 7/8) = 1 / 1.525; on the empty node at 1."""
    from envs.decision.features import predicted_rate
    from envs.jobs import JobKind
    from tests.helpers import job

    sim = _toy_sim([job(i, 0.0, 1, 3600.0, kind=JobKind.INFERENCE) for i in range(8)])
    for i in range(7):
        sim.start(i, np.array([i]))  # GPUs 0-6 of n0
    state = sim.decision_state()
    cset = build_candidates(state, 8)
    by_node = {}
    for i in cset.valid_placements():
        cd = cset.candidates[i]
        assert cd.job_id == 7
        assert len(cd.geometry.nodes) == 1
        by_node.setdefault(int(cd.geometry.nodes[0]), []).append(predicted_rate(state, cd))
    assert set(by_node) == {0, 1}  # binpack takes GPU 7 of n0, spread the empty n1
    assert by_node[0] == pytest.approx([1 / 1.525] * len(by_node[0]), rel=1e-12)
    assert by_node[1] == [1.0] * len(by_node[1])


def test_predicted_rate_across_a_congested_uplink_by_hand():
    """docs/speed.md, Placement efficiency and Congestion, on two nodes under two leaves with 4:1
    uplinks (each leaf's uplink: 400 GB/s of NICs / 4 = 100 GB/s). A batch job (8 GPUs, TP 4)
    runs on GPUs 0-3 of n0 and 8-11 of n1, putting 4 x 50 = 200 GB/s on each uplink. The
    candidate, a pretraining job of 8 GPUs in TP groups of 4, c = 0.4, tp_comm_share 0.5
    (c_tp = 0.2 on NVSwitch inside each node, stretch 1; c_dp = 0.2), can only take the other 4
    GPUs of each node, adding 200 GB/s to each uplink: share 100 / 400 = 0.25. Its DP crosses one
    tier above the leaf: 50 x 0.85 x 0.25 = 10.625 GB/s, stretch 50 / 10.625 = 4.70588..., so
    efficiency = 1 / (0.6 + 0.2 x 1 + 0.2 x 4.70588) = 1 / 1.741176... Neighbours' pressure per
    GPU on each node: 4 GPUs x 0.1 (batch) / 8 = 0.05; the pretraining job's sensitivity 0.3:
    interference 1 / (1 + 0.6 x 0.3 x 0.05) = 1 / 1.009. H100 speed 1. Started, the simulator
    gives the job that rate too."""
    from envs.decision.features import predicted_rate
    from envs.jobs import JobKind
    from tests.helpers import job

    batch = job(0, 0.0, 8, 3600.0, tp=4, comm=0.4, tp_share=0.5, kind=JobKind.BATCH)
    pre = job(1, 0.0, 8, 3600.0, tp=4, comm=0.4, tp_share=0.5, kind=JobKind.PRETRAIN)
    sim = _toy_sim([batch, pre], leaves=2, oversubscription=4.0)
    leaf_uplinks = [i for i, n in enumerate(sim.cluster.switch_names) if n.startswith("leaf")]
    assert sim.cluster.switch_uplink_GBps[leaf_uplinks].tolist() == [100.0, 100.0]  # the premise
    sim.start(0, np.r_[0:4, 8:12])
    state = sim.decision_state()
    cset = build_candidates(state, 8)
    valid = [cset.candidates[i] for i in cset.valid_placements()]
    assert valid and {cd.job_id for cd in valid} == {1}
    stretch_dp = 50 / (50 * 0.85 * 0.25)
    want = 1 / (0.6 + 0.2 * 1 + 0.2 * stretch_dp) / (1 + 0.6 * 0.3 * 0.05)
    assert want == pytest.approx(0.569201, abs=1e-6)
    for cd in valid:
        assert predicted_rate(state, cd) == pytest.approx(want, rel=1e-12)
    apply_candidate(sim, cset, cset.valid_placements()[0])
    assert sim.rate[1] == pytest.approx(want, rel=1e-12)
