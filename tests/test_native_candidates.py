"""The candidate set worked out in the native core (Simulator.native_candidates, envs.core's
`candidates`) against the Python reference (envs.decision.candidates.build_candidates, each candidate
resolved by envs.decision.placement): the same window, mask, GPUs and victims, on the decision states of
random-action episodes of every scenario, with and without `preempt-las`, with a wait guard and
a small window. So are the placements the core works out for a decision state itself
(envs.decision.candidates.placed_natively, envs.core.state_placements: the scoring service's), on the
simulator's state and on the same state rebuilt from plain data."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the env)
from envs.core import _core
from envs.decision.candidates import WaitGuard, build_candidates, placed_natively
from envs.decision.candidates import WaitGuard, build_candidates
from envs.decision.placement import PREEMPT, PREEMPT_LAS, RULES
from envs.decision.state import ClusterState
from envs.decision.window import any_feasible, can_place
from envs.decision.window import any_feasible, can_place
from envs.jobs import PRIORITY_HIGH
from envs.scenario import load_scenario, scenario_names
from envs.sim.simulator import Simulator
from tests.helpers import needs_compiled

pytestmark = needs_compiled()

R = len(RULES)


def _placements(cset) -> list[tuple]:
    """(index, GPUs or None, victims) of every valid candidate other than WAIT, by the candidate
    set's own resolution (None where it finds no placement)."""
    out = []
    for i in np.flatnonzero(cset.mask[:-1]).tolist():
        try:
            cd = cset.candidates[i]
            gpus, victims = cd.gpus, cd.victims
        except RuntimeError:  # valid by count, no placement found
            gpus, victims = None, ()
        out.append((i, None if gpus is None else gpus.tolist(), tuple(victims)))
    return out


def _compare(sim: Simulator, queue_window: int, preempt_las: bool, guard) -> list[tuple]:
    ref = build_candidates(sim.decision_state(), queue_window, preempt_las, guard)
    nat = sim.native_candidates(queue_window, preempt_las, guard)
    assert nat.window == list(ref.window)
    assert nat.mask.dtype == bool and np.array_equal(nat.mask, ref.mask)
    placed = _placements(ref)
    assert _placements(nat) == placed
    state = ref.state
    assert _placements(placed_natively(build_candidates(state, queue_window, preempt_las, guard))) == placed
    plain = ClusterState.from_dict(state.to_dict(), sim.cluster)  # job indices, arrays and caches of its own
    assert _placements(placed_natively(build_candidates(plain, queue_window, preempt_las, guard))) == \
        _placements(build_candidates(plain, queue_window, preempt_las, guard))
    return placed


def _compare_can_place(sim: Simulator, events: int) -> int:
    """Native can_place and any_feasible against envs.decision.window's over `events` events from here;
    the states where a queued job can be placed."""
    found = 0
    for _ in range(events):
        state = sim.decision_state()
        ref = can_place(state), any_feasible(state)
        assert (sim.native_can_place(True), sim.native_can_place(False)) == ref
        found += ref[0]
        if sim.done or not (len(sim.running) or sim.checkpointing):
            break
        sim.advance()
    return found


CASES = ((None, True, None), (None, False, None), (3, True, WaitGuard(1.0, 600.0)))


@pytest.mark.parametrize("scenario", scenario_names())
def test_native_candidates_are_the_reference(scenario):
    sc = load_scenario(scenario)
    env = gym.make("gangsched/GpuCluster-v0", cluster=sc.cluster, workload=sc.workload, num_jobs=120)
    u = env.unwrapped
    rng = np.random.default_rng(7)
    rules = np.zeros(R, dtype=np.int64)
    with_victims = states = places = 0
    env.reset(seed=3)
    for _ in range(150):
        for q, preempt_las, guard in CASES:
            for i, gpus, victims in _compare(u.sim, q or u.queue_window, preempt_las, guard):
                rules[i % R] += gpus is not None
                with_victims += bool(victims)
        states += 1
        if states % 5 == 0:  # the events after this state, decision points or not
            places += _compare_can_place(u.sim.fork(), 6)
        valid = np.flatnonzero(u.cset.mask)
        _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            break
    assert states > 50
    assert places > 0  # some event after a decision left a queued job that can be placed
    assert rules[:PREEMPT].min() > 0  # every non-preempting rule placed something
    if scenario in ("bursty", "hetero", "nvl72", "slo-preempt", "topology-stress"):  # victims were compared
        assert rules[PREEMPT] > 0 and rules[PREEMPT_LAS] > 0 and with_victims > 0


def test_native_placements_of_segment_states_are_the_reference():
    """Gangs asking for segments (each inside one block): the native candidate set and the
    native placements of a state (the service's path, on the state and on its plain-data form)
    are the reference's at every decision of a random-action episode."""
    env = gym.make("gangsched/GpuCluster-v0", cluster="gb200-nvl72-8rack", workload="llm-mix-nvl72-segments", num_jobs=100)
    u = env.unwrapped
    rng = np.random.default_rng(5)
    env.reset(seed=2)
    segment_placed = 0
    for _ in range(120):
        placed = _compare(u.sim, u.queue_window, True, None)
        state, window = u.cset.state, u.cset.window
        segment_placed += sum(gpus is not None and state.segment_of(window[i // R]) > 0 for i, gpus, _ in placed)
        valid = np.flatnonzero(u.cset.mask)
        _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            break
    assert segment_placed > 10


def _slo_preempt_after_30_steps():
    """An slo-preempt env (80 jobs, seed 0) after 30 steps of its first valid action."""
    sc = load_scenario("slo-preempt")
    env = gym.make("gangsched/GpuCluster-v0", cluster=sc.cluster, workload=sc.workload, num_jobs=80)
    env.reset(seed=0)
    for _ in range(30):
        env.step(int(np.flatnonzero(env.unwrapped.cset.mask)[0]))
    return env


def test_native_candidates_change_nothing():
    env = _slo_preempt_after_30_steps()
    sim = env.unwrapped.sim
    before = {name: np.copy(a) for name, a in sim._native_state()[2].items()}
    sim.native_candidates(8)
    after = sim._native_state()[2]
    assert [k for k in before if not np.array_equal(before[k], after[k], equal_nan=before[k].dtype.kind == "f")] == []


def test_bad_arguments_name_the_argument():
    sc = load_scenario("default")
    env = gym.make("gangsched/GpuCluster-v0", cluster=sc.cluster, workload=sc.workload, num_jobs=40)
    env.reset(seed=0)
    sim = env.unwrapped.sim
    with pytest.raises(ValueError, match="queue_window"):
        sim.native_candidates(0)
    view, (alloc, *state) = sim._native_view(), sim._view_state()
    with pytest.raises(ValueError, match="wait_guard"):
        view.candidates(alloc, *state, 8, PRIORITY_HIGH, True, [1.0], [3600.0], 4.0)
    with pytest.raises(ValueError, match="las_thresholds"):
        view.candidates(alloc, *state, 8, PRIORITY_HIGH, True, [], [3600.0, 60.0], 4.0)
    with pytest.raises(ValueError, match="las_thresholds"):
        view.candidates(alloc, *state, 8, PRIORITY_HIGH, True, [], [], 4.0)
    with pytest.raises(ValueError, match="las_thresholds"):
        view.can_place(alloc, *state, PRIORITY_HIGH, True, [], 4.0)
    from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES
    K = 8 * R + 1
    for feats, glob, name in ((np.zeros((K - 1, NUM_CANDIDATE_FEATURES), np.float32), np.zeros(NUM_GLOBAL_FEATURES, np.float32), "out_candidates"),
                              (np.zeros((K, NUM_CANDIDATE_FEATURES)), np.zeros(NUM_GLOBAL_FEATURES, np.float32), "out_candidates"),
                              (np.zeros((K, NUM_CANDIDATE_FEATURES), np.float32), np.zeros(3, np.float32), "out_global")):
        with pytest.raises(ValueError, match=name):
            sim.native_candidates(8, features=(feats, glob))
    with pytest.raises(ValueError, match="allocation: node_free"):
        view.candidates(alloc[:2] + (alloc[2][:-1],) + alloc[3:], *state, 8, PRIORITY_HIGH, True, [], [3600.0], 4.0)


def test_state_placements_bad_arguments_name_the_argument():
    env = _slo_preempt_after_30_steps()
    from envs import core

    cset = env.unwrapped.cset
    state = cset.state
    assert len(state.running)
    window, mask = list(cset.window), cset.mask
    core.state_placements(state, window, mask, [3600.0], 4.0)  # as it is: accepted

    class Changed:  # the state with some arrays replaced
        def __init__(self, **fields):
            self.__dict__.update(fields)

        def __getattr__(self, name):
            return getattr(state, name)

    def raises(match, s=state, w=window, m=mask):
        with pytest.raises(ValueError, match=match):
            core.state_placements(s, w, m, [3600.0], 4.0)

    owner = state.gpu_owner.copy()
    owner[0] = len(state.num_gpus)
    raises("gpu_owner: a job id out of range", Changed(gpu_owner=owner))
    owner = state.gpu_owner.copy()
    owner[owner == state.running[0]] = -1
    raises("gpu_owner: a running or checkpointing job that holds no GPU", Changed(gpu_owner=owner))
    raises("gpu_owner: .* entries, expected", Changed(gpu_owner=state.gpu_owner[:-1]))
    raises("free_mask: ", Changed(free_mask=state.free_mask.astype(np.int64)))
    raises("mem_req: ", Changed(mem_per_gpu_gb=state.mem_per_gpu_gb[:-1]))
    raises("node_free: a count", Changed(node_free=state.node_free + 100))
    tp = state.tp_degree.copy()
    tp[0] = 3 if state.num_gpus[0] % 3 else 5
    raises("tp_degree: a gang", Changed(tp_degree=tp))
    segments = np.zeros(len(state.num_gpus), np.int64)
    segments[0] = state.num_gpus[0] + 1  # does not divide the gang
    raises("segment_gpus: 0 \\(none\\) or whole TP groups", Changed(segment_gpus=segments))
    raises("segment_gpus: .* entries, expected", Changed(segment_gpus=segments[:-1]))
    raises("running: a job id out of range", Changed(running=np.array([len(state.num_gpus)], dtype=np.int64)))
    raises("running: a job listed twice", Changed(running=np.concatenate([state.running, state.running[:1]])))
    raises("window: a job id out of range", w=[len(state.num_gpus)])
    raises("mask: the window's slots", m=mask[:-1])
    raises("mask: the window's slots", w=window * 20)
    raises("mask: a contiguous", m=mask.astype(np.int64))
    with pytest.raises(ValueError, match="las_thresholds"):
        _core.state_placements(core.cluster_arrays(state.cluster), core.rate_model(state.speed_model),
                               {"arrival": state.arrival_s, "gpus_req": state.num_gpus, "tp_degree": state.tp_degree,
                                "mem_req": state.mem_per_gpu_gb, "priority": state.priority, "preemptible": state.preemptible,
                                "attained_gpu_s": state.attained_gpu_s, "checkpoint_s": state.checkpoint_s,
                                "restore_s": state.restore_s, "queued_since": state.queued_since_s, "free_mask": state.free_mask,
                                "gpu_owner": state.gpu_owner, "node_free": state.node_free, "node_pressure": state.node_pressure,
                                "uplink_demand": state.uplink_demand, "segment_gpus": np.zeros(len(state.num_gpus), np.int64)},
                               state.running, state.checkpointing, float(state.now), window, mask, [3600.0, 60.0], 4.0)
