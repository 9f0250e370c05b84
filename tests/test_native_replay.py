"""A whole replay in the native core (Simulator.replay_native, and envs.sim.replay.replay for the
rules the core carries out) against the Python decision loop over the same rule: the same
decisions, floats, segments with their GPUs, timeline rows, placements and metrics, bit for bit,
from a fresh simulator and from the middle of an episode with checkpoints and reservations in
flight."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.scenario import load_scenario, scenario_names
from envs.sim.metrics import episode_metrics, job_records
from envs.sim.replay import replay
from envs.sim.simulator import NATIVE_REPLAY_POLICIES, SchedulingError, Simulator
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import needs_compiled

pytestmark = needs_compiled()

NATIVE = sorted(NATIVE_REPLAY_POLICIES)


def _sim(scenario: str, seed: int, jobs: int | None) -> tuple[Simulator, int]:
    sc = load_scenario(scenario)
    cluster = load_cluster(sc.cluster)
    return Simulator(cluster, make_workload(load_workload_spec(sc.workload), cluster, seed, jobs)), sc.queue_window


def _python_loop(rule):
    """The rule's select without its object: envs.sim.replay.replay runs its Python loop."""
    return lambda state, cset: rule.select(state, cset)


def _same_floats(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def assert_same_replay(a: Simulator, b: Simulator) -> None:
    for name in ("end", "first_start", "work_done", "work_left", "attained_gpu_s", "interference_loss_s", "rate", "wait_s",
                 "run_s", "queued_since", "preemptions", "state", "overhead_left"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("now", "jobs_in_system_s", "energy_j", "allocated_gpu_s", "useful_work_s", "preemption_gpu_s",
                 "num_preemptions", "num_done", "jobs_in_system"):
        assert getattr(a, name) == getattr(b, name), name
    assert [(s.job_id, s.start_s, s.end_s, s.preempted, s.gpus.tolist()) for s in a.segments] == \
        [(s.job_id, s.start_s, s.end_s, s.preempted, s.gpus.tolist()) for s in b.segments]
    assert a.timeline == b.timeline
    assert [tuple(map(type, r)) for r in a.timeline] == [tuple(map(type, r)) for r in b.timeline]
    assert a.finished_order == b.finished_order
    assert sorted(a.placement) == sorted(b.placement)
    assert all(a.placement[j].tolist() == b.placement[j].tolist() for j in a.placement)
    ma, mb = episode_metrics(a), episode_metrics(b)
    assert all(_same_floats(ma[k], mb[k]) for k in ma), {k: (ma[k], mb[k]) for k in ma if not _same_floats(ma[k], mb[k])}
    assert job_records(a) == job_records(b)


@pytest.mark.parametrize("scenario", scenario_names())
@pytest.mark.parametrize("rule", NATIVE)
def test_a_native_replay_is_the_python_loop(scenario, rule):
    jobs = 300 if scenario == "large" else 150
    py, window = _sim(scenario, 1, jobs)
    native, _ = _sim(scenario, 1, jobs)
    baseline = make_baseline(rule)
    assert baseline.native_replay == rule and not baseline.preempt_las
    steps = replay(py, _python_loop(baseline), window, preempt_las=False)
    assert not py._spent  # the Python loop ran
    assert replay(native, make_baseline(rule).select, window, preempt_las=False) == steps
    assert native._spent  # one native call ran
    assert native.done and len(native.segments) >= native.num_jobs
    assert_same_replay(py, native)


def _long_restores(sim: Simulator) -> Simulator:
    """The same workload with restores of an hour: a queued job's restore owed then often decides
    its place among the remaining estimates."""
    return Simulator(sim.cluster, [dataclasses.replace(j, restore_s=3600.0) for j in sim.jobs])


@pytest.mark.parametrize("restores", ["as drawn", "an hour"])
@pytest.mark.parametrize("rule", ["sect", "sjf", "topology", "spread"])
def test_a_native_replay_from_the_middle_of_a_preempting_episode(rule, restores):
    """`priority` preempts on slo-preempt: after some of its decisions jobs run (their segments
    began in Python), checkpoint and wait for reserved GPUs, and owe restores; the rest of the
    episode under `rule` natively is the Python loop's."""
    def make() -> Simulator:
        s, _ = _sim("slo-preempt", 0, 160)
        return s if restores == "as drawn" else _long_restores(s)

    whole, window = make(), load_scenario("slo-preempt").queue_window
    total = replay(whole, make_baseline("priority").select, window, preempt_las=False)
    found_in_flight = owed = 0
    for steps in range(total // 8, total, total // 8):
        py, native = make(), make()
        for sim in (py, native):
            replay(sim, make_baseline("priority").select, window, max_steps=steps, preempt_las=False)
        assert not native._spent and len(native.running)
        found_in_flight += bool(native.checkpointing or native.reserved)
        owed += bool(native.needs_restore[native.job_queue.ids[: native.job_queue.length]].any())
        replay(py, _python_loop(make_baseline(rule)), window, preempt_las=False)
        native.replay_native(rule, window)
        assert_same_replay(py, native)
    assert found_in_flight or restores != "as drawn"  # a switch with a checkpoint or a reservation in flight
    assert owed  # and one with queued jobs owing a restore


def test_only_whole_replays_of_native_rules_go_native():
    sim, window = _sim("default", 0, 60)
    replay(sim, make_baseline("topology").select, window, max_steps=5, preempt_las=False)
    assert not sim._spent
    sim, _ = _sim("default", 0, 60)
    replay(sim, make_baseline("topology").select, window, preempt_las=True)
    assert not sim._spent
    sim, _ = _sim("default", 0, 60)
    replay(sim, make_baseline("easy").select, window, preempt_las=False)  # not a native rule
    assert not sim._spent and make_baseline("easy").native_replay is None


def test_a_replayed_simulator_cannot_go_on_and_bad_calls_are_named(monkeypatch):
    sim, window = _sim("default", 0, 40)
    with pytest.raises(ValueError, match="no native rule 'fifo'.*sect"):
        sim.replay_native("fifo", window)
    sim.replay_native("sect", window)
    with pytest.raises(ValueError, match="consumed"):
        sim.replay_native("sect", window)
    with pytest.raises(ValueError, match="consumed"):
        sim.advance()
    sim, window = _sim("default", 0, 40)
    with pytest.raises(ValueError, match="queue_window: at least 1"):
        sim.replay_native("topology", 0)
    monkeypatch.setattr("envs.core.jit.ENABLED", False)
    sim, window = _sim("default", 0, 40)
    with pytest.raises(ValueError, match="compiled path"):
        sim.replay_native("topology", window)


def test_a_native_replay_that_cannot_go_on_raises_as_the_loop_does():
    """Nothing fits a job and nothing runs or arrives: the Python loop's WAIT raises
    SchedulingError, and so does the native replay."""
    from dataclasses import replace
    sim, window = _sim("default", 0, 3)
    too_big = replace(sim.jobs[0], gpus=sim.cluster.num_gpus * 2)  # fits nowhere, ever
    for native in (False, True):
        s = Simulator(sim.cluster, [too_big, *sim.jobs[1:]])
        rule = make_baseline("topology")
        with pytest.raises(SchedulingError):
            replay(s, rule.select if native else _python_loop(rule), window, preempt_las=False)
