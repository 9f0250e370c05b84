"""The candidate set worked out in the native core (Simulator.native_candidates, envs.core's
`candidates`) against the Python reference (envs.decision.candidates.build_candidates, each candidate
resolved by envs.decision.placement): the same window, mask, GPUs and victims, on the decision states of
random-action episodes of every scenario, with and without `preempt-las`, with a wait guard and
a small window."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the env)
from envs.core import _core
from envs.decision.candidates import WaitGuard, build_candidates
from envs.decision.placement import PREEMPT, PREEMPT_LAS, RULES
from envs.decision.window import any_feasible, can_place
from envs.jobs import PRIORITY_HIGH
from envs.scenario import load_scenario, scenario_names
from envs.sim.simulator import Simulator

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


def test_native_candidates_change_nothing():
    sc = load_scenario("slo-preempt")
    env = gym.make("gangsched/GpuCluster-v0", cluster=sc.cluster, workload=sc.workload, num_jobs=80)
    env.reset(seed=0)
    for _ in range(30):
        env.step(int(np.flatnonzero(env.unwrapped.cset.mask)[0]))
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
