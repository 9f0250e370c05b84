"""The event simulator: a toy instance solved by hand, preemption semantics, and invariants
under random legal action sequences."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.cluster.config import load_cluster
from envs.cluster.speed import SpeedModel, rates_of, running_rates
from envs.decision.candidates import apply_candidate
from envs.decision.placement import PREEMPT, TOPOLOGY
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import JobState, SchedulingError, SimConfig, Simulator
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import job, toy_cluster

NO_INTERFERENCE = SimConfig(speed_model=SpeedModel(interference_coeff=0.0))


def toy_jobs():
    # Two nodes of 8 GPUs. Worked out by hand: running J1 (16 GPUs, 50 s) first, then J0 and J2
    # together gives JCTs 150, 50, 60 (sum 260, makespan 150); every other schedule is worse
    # (J0 first: J0 0-100, J2 10-30, J1 100-150: sum 270).
    return [job(0, 0.0, 8, 100.0), job(1, 0.0, 16, 50.0), job(2, 10.0, 4, 20.0)]


def jct(sim):
    return (sim.end - sim.arrival).tolist()


def _best_sum_jct(sim, queue_window=4):
    """Exhaustive search over every legal action sequence."""
    cset = advance_to_decision(sim, queue_window)
    if sim.done:
        return float(np.sum(sim.end - sim.arrival)), sim
    best = (np.inf, None)
    for a in np.flatnonzero(cset.mask):
        child = copy.deepcopy(sim, memo={id(sim.cluster): sim.cluster, id(sim.jobs): sim.jobs})
        cs = advance_to_decision(child, queue_window)
        apply_candidate(child, cs, int(a))
        best = min(best, _best_sum_jct(child, queue_window), key=lambda x: x[0])
    return best


def test_toy_schedule_by_hand():
    sim = Simulator(toy_cluster(), toy_jobs(), NO_INTERFERENCE)
    cset = advance_to_decision(sim, 4)
    slot = cset.window.index(1)
    apply_candidate(sim, cset, cset.index(slot, TOPOLOGY))  # J1 on all 16 GPUs
    cset = advance_to_decision(sim, 4)
    assert sim.now == 50.0 and sorted(cset.window) == [0, 2]
    apply_candidate(sim, cset, cset.index(cset.window.index(0), TOPOLOGY))
    cset = advance_to_decision(sim, 4)
    apply_candidate(sim, cset, cset.index(cset.window.index(2), TOPOLOGY))
    advance_to_decision(sim, 4)
    assert sim.done
    assert jct(sim) == [150.0, 50.0, 60.0]
    assert float(np.nanmax(sim.end)) == 150.0
    assert sim.jobs_in_system_s == 260.0  # the reward integral is the sum of JCTs


def test_toy_optimum_is_the_hand_schedule():
    best, sim = _best_sum_jct(Simulator(toy_cluster(), toy_jobs(), NO_INTERFERENCE))
    assert best == 260.0
    assert jct(sim) == [150.0, 50.0, 60.0]


def test_preemption_checkpoint_restore_and_progress_kept():
    # J0 (low, 8 GPUs, 100 s) runs; J1 (high, 8 GPUs, 10 s) arrives at 20 and preempts it.
    jobs = [job(0, 0.0, 8, 100.0, priority=PRIORITY_LOW, checkpoint_s=10.0, restore_s=20.0),
            job(1, 20.0, 8, 10.0, priority=PRIORITY_HIGH, preemptible=False)]
    sim = Simulator(toy_cluster(nodes=1), jobs, NO_INTERFERENCE)
    cset = advance_to_decision(sim, 4)
    apply_candidate(sim, cset, cset.index(0, TOPOLOGY))
    cset = advance_to_decision(sim, 4)
    assert sim.now == 20.0 and cset.window == [1]
    assert not cset.mask[cset.index(0, TOPOLOGY)] and cset.mask[cset.index(0, PREEMPT)]
    apply_candidate(sim, cset, cset.index(0, PREEMPT))
    assert sim.state[0] == JobState.CHECKPOINTING and sim.state[1] == JobState.RESERVED
    assert (sim.gpu_owner == 0).sum() == 8  # the victim holds its GPUs while it saves
    cset = advance_to_decision(sim, 4)  # 30: checkpoint ends, J1 starts; 40: J1 ends
    apply_candidate(sim, cset, cset.index(0, TOPOLOGY))  # J0 back at 40, restores 20 s
    advance_to_decision(sim, 4)
    assert sim.done
    # J0: runs 0-20 (20 s of work), saves 20-30, waits 30-40, restores 40-60, runs 60-140.
    assert jct(sim) == [140.0, 20.0]
    assert sim.num_preemptions == 1 and sim.preemptions[0] == 1
    assert sim.preemption_gpu_s == 8 * (10.0 + 20.0)


def test_illegal_decisions_are_refused():
    sim = Simulator(toy_cluster(nodes=1), [job(0, 0.0, 4, 10.0), job(1, 0.0, 4, 10.0)], NO_INTERFERENCE)
    sim.start(0, np.arange(4))
    with pytest.raises(SchedulingError, match="not available"):
        sim.start(1, np.arange(2, 6))  # GPUs 2-3 are busy
    with pytest.raises(SchedulingError, match="exactly 4"):
        sim.start(1, np.arange(4, 7))  # a gang runs whole or not at all
    with pytest.raises(SchedulingError, match="not queued"):
        sim.start(0, np.arange(4, 8))


def test_every_bad_placement_is_refused_and_changes_nothing():
    # H100-80GB GPUs: a job asking for 100 GB per GPU can never be placed.
    sim = Simulator(toy_cluster(nodes=1), [job(0, 0.0, 4, 10.0), job(1, 0.0, 2, 10.0, mem=100.0)], NO_INTERFERENCE)
    before = (sim.version, sim.alloc_version, sim.queue, sim.free_gpu_mask(), sim.node_free.copy())
    for job_id, gpus, message in [
        (5, np.arange(4), "no job 5"),
        (-1, np.arange(4), "no job -1"),
        (0, [0, 1, 2, 2], "exactly 4 distinct"),
        (0, [0, 1, 2], "exactly 4 distinct"),
        (0, [-1, 0, 1, 2], "out of range"),
        (0, [5, 6, 7, 8], "out of range"),
        (1, [0, 1], "needs 100 GB per GPU"),
    ]:
        with pytest.raises(SchedulingError, match=message):
            sim.start(job_id, gpus)
    after = (sim.version, sim.alloc_version, sim.queue, sim.free_gpu_mask(), sim.node_free)
    assert before[:3] == after[:3]
    np.testing.assert_array_equal(before[3], after[3])
    np.testing.assert_array_equal(before[4], after[4])


def _check_invariants(sim: Simulator, last_now: float) -> None:
    assert sim.now >= last_now
    # The simulator's incremental, vectorised rates equal the speed model's reference
    # computation over the whole running set.
    run = sim.running
    if len(run):
        profiles = [sim.profiles[j] for j in run]
        reference = rates_of(sim.cluster, profiles, sim.config.speed_model)
        np.testing.assert_allclose(sim.rate[run], reference, rtol=1e-9)
        # Only the rates a change can touch are recomputed: bit-for-bit those of a full
        # recomputation from the simulator's own node pressure and uplink demand.
        rates, interference = running_rates(sim.cluster, profiles, sim.uplink_demand, sim.node_pressure, sim.config.speed_model)
        np.testing.assert_array_equal(sim.rate[run], rates)
        np.testing.assert_array_equal(sim.interference[run], interference)
    assert sim._restoring == {j for j in run.tolist() if sim.overhead_left[j] > 0}
    # The load model places the running and checkpointing jobs; only the running ones load nodes
    # and uplinks, and no load changed since the rates were brought up to date.
    load = sim.load
    assert set(load.placed) == set(run.tolist()) | set(sim.checkpointing)
    for n, on_node in enumerate(load.node_jobs):
        assert on_node == {j for j in run.tolist() if n in load.placed[j].nodes}
    assert set(load.crossing) == {j for j in run.tolist() if load.placed[j].uplinks}
    assert not load.dirty_node.any() and not load.dirty_uplink.any()
    assert sim._num_needs_restore == int(sim.needs_restore.sum())
    assert sim.next_event_s() == sim._next_event_s()  # the cached next event is current
    owner = sim.gpu_owner
    for j in range(sim.num_jobs):
        held = int((owner == j).sum())
        st_ = sim.state[j]
        if st_ in (JobState.RUNNING, JobState.CHECKPOINTING):
            assert held == sim.gpus_req[j]  # whole gang
            assert (owner[sim.placement[j]] == j).all()
        else:
            assert held == 0
    recount = np.zeros_like(sim.node_preemptible)
    for j in run[sim.preemptible[run]]:
        np.add.at(recount[:, sim.priority[j]], sim.cluster.gpu_node[sim.placement[j]], 1)
    np.testing.assert_array_equal(sim.node_preemptible, recount)
    # Counts kept up to date by each change, against a recount from GPU ownership.
    c = sim.cluster
    free = (owner < 0) & (sim.gpu_reserved < 0)
    np.testing.assert_array_equal(sim.free_gpu_mask(), free)
    np.testing.assert_array_equal(sim.node_free, np.bincount(c.gpu_node[free], minlength=c.num_nodes))
    np.testing.assert_array_equal(sim.node_owned, np.bincount(c.gpu_node[owner >= 0], minlength=c.num_nodes))
    assert sim.allocated_gpus == c.num_gpus - int(free.sum())
    assert sim.fragmented_free_gpus() == sim.fragmented_free_gpus(sim.node_free.copy())
    on = sim.node_owned > 0
    per_node = c.node_power_base_w + sim.node_owned * sim.power.node_busy_w + (c.node_gpus - sim.node_owned) * sim.power.node_idle_w
    assert sim.power_w == float(per_node[on].sum())
    groups = [set(sim.queue), set(sim.running.tolist()), set(sim.reserved), set(sim.checkpointing),
              set(np.flatnonzero(sim.state == JobState.DONE).tolist()), set(np.flatnonzero(sim.state == JobState.FUTURE).tolist())]
    assert sum(len(g) for g in groups) == sim.num_jobs  # nobody lost or counted twice
    assert set().union(*groups) == set(range(sim.num_jobs))
    assert len(sim.queue) == len(set(sim.queue))
    q = sim.queue_ids()
    assert (np.diff(sim.enqueue_seq[q]) > 0).all()  # kept in (re)arrival order
    np.testing.assert_array_equal(sim.queued_remaining_s[q], sim.remaining_estimate_s(q))
    assert sim.queued_gpus == sim.gpus_req[q].sum()
    assert sim.queued_high_priority == np.count_nonzero(sim.priority[q] == PRIORITY_HIGH)
    by_remaining = sorted(q.tolist(), key=lambda j: (sim.queued_remaining_s[j], sim.enqueue_seq[j]))
    assert [j for _, _, j in sim.queue_by_remaining()] == by_remaining
    assert len(sim.finished_order) == len(set(sim.finished_order)) == sim.num_done


@pytest.mark.parametrize("cluster_name", ["h100-4node", "mixed-64gpu"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_random_legal_actions_keep_invariants(cluster_name, seed, data):
    cluster = load_cluster(cluster_name)
    jobs = make_workload(load_workload_spec("llm-mix"), cluster, seed, num_jobs=20)
    sim = Simulator(cluster, jobs)
    last = sim.now
    cset = advance_to_decision(sim, 4)
    steps = 0
    while not sim.done:
        valid = np.flatnonzero(cset.mask)
        a = int(valid[data.draw(st.integers(0, len(valid) - 1), label="action")])
        apply_candidate(sim, cset, a)
        _check_invariants(sim, last)
        last = sim.now
        cset = advance_to_decision(sim, 4)
        _check_invariants(sim, last)
        steps += 1
        assert steps < 2000
    assert sorted(sim.finished_order) == list(range(len(jobs)))  # every job ended exactly once
    assert np.isfinite(sim.end).all()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_rates_of_many_multi_node_jobs_equal_the_reference(seed, data):
    """The rates kept by _rates_changed (only those a change can touch are recomputed) against
    speed.rates_of, on a bursty workload with many multi-node jobs and a wide window."""
    cluster = load_cluster("mixed-64gpu")
    sim = Simulator(cluster, make_workload(load_workload_spec("llm-mix-bursty"), cluster, seed, num_jobs=40))
    cset = advance_to_decision(sim, 8)
    last = sim.now
    while not sim.done:
        valid = np.flatnonzero(cset.mask)
        apply_candidate(sim, cset, int(valid[data.draw(st.integers(0, len(valid) - 1), label="action")]))
        cset = advance_to_decision(sim, 8)
        _check_invariants(sim, last)  # includes the rates against the reference computation
        last = sim.now


def _window_by_full_sort(sim, q):
    """Reference for select_window: round-robin over four fully sorted orders."""
    from envs.decision.window import feasible_queue

    feasible = feasible_queue(sim.decision_state())
    if len(feasible) <= q:
        return feasible.tolist()
    orders = [
        feasible,
        feasible[np.argsort(sim.remaining_estimate_s(feasible), kind="stable")],
        feasible[np.argsort(-sim.priority[feasible], kind="stable")],
        feasible[np.argsort(sim.attained_gpu_s[feasible], kind="stable")],
    ]
    window, heads = [], [0] * 4
    while len(window) < q:
        for k, order in enumerate(orders):
            while heads[k] < len(order) and order[heads[k]] in window:
                heads[k] += 1
            if heads[k] < len(order) and len(window) < q:
                window.append(int(order[heads[k]]))
    return window


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(0, 30))
def test_window_equals_round_robin_over_full_sorts(seed, steps):
    from envs.decision.window import feasible_queue, select_window
    from envs.decision.window import shortest_head as _shortest_head

    cluster = load_cluster("h100-4node")
    jobs = make_workload(load_workload_spec("llm-mix"), cluster, seed, num_jobs=80)
    sim = Simulator(cluster, jobs)
    cset = advance_to_decision(sim, 4)
    for _ in range(steps):
        if sim.done:
            break
        apply_candidate(sim, cset, int(np.flatnonzero(cset.mask)[0]))
        cset = advance_to_decision(sim, 4)
        for q in (2, 4, 8):
            assert select_window(sim.decision_state(), q) == _window_by_full_sort(sim, q)
        # The sorted-queue walk gives the shortest feasible jobs, or gives up (None) past its limit.
        feasible = feasible_queue(sim.decision_state())
        by_remaining = feasible[np.argsort(sim.remaining_estimate_s(feasible), kind="stable")].tolist()
        for k in (1, 4, 16):
            assert _shortest_head(sim.decision_state(), k) == by_remaining[:k]
            assert _shortest_head(sim.decision_state(), k, walk_limit=0) in (None, by_remaining[:k])


def _fit_by_job(sim):
    """Reference for fit_status: each queued job on its own, by GPU counts."""
    from envs.decision.window import aligned as _aligned

    c = sim.cluster
    q = sim.queue_ids()
    aligned, preempt = [], []
    for j in q:
        eligible = c.gpu_memory_gb >= sim.mem_req[j]
        tp = sim.tp_degree[j]
        free = np.bincount(c.gpu_node[sim.free_gpu_mask() & eligible], minlength=c.num_nodes)
        fits = sim.gpus_req[j] <= _aligned(free, tp).sum()
        owner = sim.gpu_owner
        victim_gpu = eligible & (owner >= 0)
        victim_gpu[victim_gpu] = ((sim.state[owner[victim_gpu]] == JobState.RUNNING) & sim.preemptible[owner[victim_gpu]]
                                  & (sim.priority[owner[victim_gpu]] < sim.priority[j]))
        with_victims = free + np.bincount(c.gpu_node[victim_gpu], minlength=c.num_nodes)
        aligned.append(fits)
        preempt.append(not fits and sim.gpus_req[j] <= _aligned(with_victims, tp).sum())
    return q, np.array(aligned, dtype=bool), np.array(preempt, dtype=bool)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_fit_status_by_job_class_equals_each_job_on_its_own(seed, data):
    from envs.decision.window import fit_status

    cluster = load_cluster("mixed-64gpu")
    jobs = make_workload(load_workload_spec("llm-mix-bursty"), cluster, seed, num_jobs=60)
    sim = Simulator(cluster, jobs)
    cset = advance_to_decision(sim, 8)
    for _ in range(40):
        if sim.done:
            break
        for got, want in zip(fit_status(sim.decision_state()), _fit_by_job(sim)):
            np.testing.assert_array_equal(got, want)
        valid = np.flatnonzero(cset.mask)
        apply_candidate(sim, cset, int(valid[data.draw(st.integers(0, len(valid) - 1), label="action")]))
        cset = advance_to_decision(sim, 8)
