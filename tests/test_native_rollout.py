"""The lookahead's rollouts of `sect` in the native core (Simulator.rollout_sect on a fork,
NativeWorld.rollout_sect on the core's copy of the world) against the Python loop they replace:
at every rollout of honest lookahead episodes, two identical forks run the rollout each way, and
everything the rollout leaves behind must be equal bit for bit: the cost, every per-job array, the
time, the integrals and the counters; the world's copy gives the same cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import agents.lookahead as L
from agents.lookahead import run_lookahead
from envs.cluster.config import load_cluster
from envs.scenario import load_scenario
from envs.sim.objective import objective_config
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import _ROLLOUT_JOB_ARRAYS, Simulator
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import needs_compiled

pytestmark = needs_compiled()

SCALARS = ("now", "jobs_in_system_s", "energy_j", "allocated_gpu_s", "useful_work_s", "num_done", "jobs_in_system",
           "_next_arrival", "_num_needs_restore", "preemption_gpu_s", "num_preemptions")


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# every term of the objective weighted, as no shipped scenario does
ALL_TERMS = {"avg_jct": 1.0, "weighted_jct": 0.5, "priority_weights": {"low": 0.25, "normal": 1.0, "high": 3.0},
             "slo_misses": 1.5, "preemption_gpu_h": 0.5, "energy_kwh": 0.02, "slos": {"inference": {"start_within_s": 300}}}


@pytest.mark.parametrize("scenario, jobs, objective", [("default", 40, None), ("slo-preempt", 40, None), ("topology-stress", 40, None),
                                                       ("large", 150, None), ("nvl72", 30, None), ("bursty", 40, ALL_TERMS)])
def test_native_rollouts_leave_what_the_python_loop_leaves(scenario, jobs, objective, monkeypatch):
    sc = load_scenario(scenario)
    if objective is not None:
        sc = dataclasses.replace(sc, objective=objective_config(objective))
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    seen = {"rollouts": 0, "native": 0, "decisions": 0, "restores": 0, "at_horizon": 0, "first_start": 0, "first_wait": 0,
            "first_preempt": 0, "in_flight": 0, "searches": 0}
    rollout, native = L.Lookahead._rollout, Simulator.rollout_sect
    q = sc.queue_window

    def counted(sim, queue_window, until, *first):
        seen["native"] += 1
        seen["first_start"] += bool(first) and first[0] >= 0
        seen["first_wait"] += bool(first) and first[0] == -1
        seen["first_preempt"] += len(first) > 2 and bool(first[2])
        seen["in_flight"] += bool(sim.checkpointing or sim.reserved)
        seen["restores"] += sim._num_needs_restore > 0
        out = native(sim, queue_window, until, *first)
        seen["decisions"] += out["decisions"]
        seen["at_horizon"] += sim.now >= until
        return out

    def both(self, world, native_world, cset, action, horizon_end):
        assert native_world is not None
        fork, twin = world.fork(), world.fork()
        want = self._python_rollout(fork, cset, action, horizon_end)
        counted(twin, q, horizon_end, *L._native_first(cset, action))
        in_place = self._cost(twin, horizon_end)
        got = rollout(self, world, native_world, cset, action, horizon_end)
        assert got == want and in_place == want, (scenario, seen["rollouts"], got, in_place, want)
        for name in _ROLLOUT_JOB_ARRAYS:
            assert _same(getattr(twin, name), getattr(fork, name)), (scenario, seen["rollouts"], name)
        for name in SCALARS:
            assert getattr(twin, name) == getattr(fork, name), (scenario, seen["rollouts"], name)
        assert twin.running.tolist() == fork.running.tolist()
        assert (twin.checkpointing, twin.reserved) == (fork.checkpointing, fork.reserved)
        seen["rollouts"] += 1
        return got

    costs_of = L.Lookahead._costs

    def all_ways(self, world, native_world, cset, actions, horizon_end):
        """The options' costs in one native call (NativeWorld.costs) against each rollout run the
        three ways of `both`."""
        got = costs_of(self, world, native_world, cset, actions, horizon_end)
        want = [both(self, world, native_world, cset, action, horizon_end) for action in actions]
        assert got.tolist() == want, (scenario, seen["rollouts"], got.tolist(), want)
        seen["searches"] += 1
        return got

    world_of = L.Lookahead._world

    def both_worlds(self, state, sample, horizon_end):
        """The sample's world as a fork (the Python path) and as the core's copy made directly,
        from the same draws."""
        drawn_from = self.rng.bit_generator.state
        monkeypatch.setattr(L, "NATIVE_ROLLOUTS", False)
        world, _ = world_of(self, state, sample, horizon_end)
        self.rng.bit_generator.state = drawn_from
        monkeypatch.setattr(L, "NATIVE_ROLLOUTS", True)
        _, native_world = world_of(self, state, sample, horizon_end)
        return world, native_world

    monkeypatch.setattr(L.Lookahead, "_costs", all_ways)
    monkeypatch.setattr(L.Lookahead, "_world", both_worlds)
    search = sc.lookahead  # on large a smaller search (each rollout is run three ways, the Python loop the slow one)
    if scenario == "large":
        search = dataclasses.replace(search, k=2, preempt_k=1, samples=2, horizon_s=1800.0)
    run_lookahead("lookahead", cluster, spec, make_workload(spec, cluster, 1, jobs), 1, search, sc.objective,
                  sc.queue_window, sc.max_checkpoint_s)
    # The native path ran every rollout from its first action (a start, a preemption or a WAIT),
    # made several decisions in each, and stopped at the horizon.
    assert seen["rollouts"] >= 100 and seen["native"] == seen["rollouts"] and seen["searches"] >= 20, seen
    assert seen["first_start"] > 0 and seen["first_wait"] > 0, seen
    assert seen["decisions"] >= 2 * seen["native"] and seen["at_horizon"] > 0, seen
    if scenario == "slo-preempt":  # preempting options, checkpoints in flight at the search, restores owed
        assert seen["first_preempt"] > 0 and seen["in_flight"] > 0 and seen["restores"] > 0, seen


def _decision_sim():
    sc = load_scenario("default")
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    sim = Simulator(cluster, make_workload(spec, cluster, 0, 30))
    advance_to_decision(sim, 8, preempt_las=False)
    return sim


def test_a_consumed_simulator_cannot_go_on():
    sim = _decision_sim()
    sim.rollout_sect(8, sim.now + 3600.0)
    with pytest.raises(ValueError, match="consumed"):
        sim.fork()
    with pytest.raises(ValueError, match="consumed"):
        sim.advance()
    with pytest.raises(ValueError, match="consumed"):
        sim.rollout_sect(8, sim.now + 3600.0)


def test_bad_rollout_arrays_are_named():
    from envs import core
    sim = _decision_sim()
    orig = core.rollout_sect

    def broken(field, value):
        def call(c, m, arrays, *rest):
            return orig(c, m, {**arrays, field: value}, *rest)
        return call

    for field, value in [("estimate", np.zeros(3)), ("state", np.zeros(len(sim.arrival), dtype=np.int64)),
                         ("shape_id", np.full(len(sim.arrival), 999, dtype=np.int64)),
                         ("node_preemptible", np.zeros(7, dtype=np.int64))]:
        fork = sim.fork()
        core.rollout_sect = broken(field, value)
        try:
            with pytest.raises(ValueError, match=field):
                fork.rollout_sect(8, fork.now + 3600.0)
        finally:
            core.rollout_sect = orig
        args = list(sim._native_state())
        args[2] = {**args[2], field: value}
        with pytest.raises(ValueError, match=field):  # the core's copy of a world checks the same
            core.World(*args)


def _bursts_of_small_jobs(seed: int) -> list:
    """120 jobs of 1-2 GPUs in four bursts, of all three priority classes, preemptible, with
    estimates off by up to 2x: on 32 GPUs, most of the queue fits whenever a job ends, so the
    window is full and its four orders (arrival, shortest, priority, least attained) differ."""
    from envs.jobs import Job, JobKind
    rng = np.random.default_rng(seed)
    jobs = []
    for j in range(120):
        work = float(rng.uniform(600.0, 7200.0))
        jobs.append(Job(job_id=j, arrival_s=3000.0 * (j // 30) + float(j % 30), kind=JobKind.FINETUNE,
                        gpus=int(rng.integers(1, 3)), tp_degree=1, mem_per_gpu_gb=40.0, work_s=work,
                        estimate_s=work * float(rng.uniform(0.5, 2.0)), comm_fraction=0.2, tp_comm_share=0.0,
                        priority=int(rng.integers(0, 3)), preemptible=True, checkpoint_s=30.0, restore_s=60.0))
    return jobs


@pytest.mark.parametrize("workload, driver", [("bursts", "priority"), ("bursts", "tiresias"), ("slo-preempt", "priority")])
def test_native_rollouts_from_states_of_a_preempting_rule(workload, driver, monkeypatch):
    """From every decision of a replay driven by a preempting rule (queued jobs that were
    preempted: attained service, restores owed, mixed priority classes, full windows), a rollout
    of sect to the horizon gives the same on both paths, checkpoints in flight and reservations
    waiting for them included."""
    from baselines import make_baseline
    from envs.decision.window import feasible_queue
    from envs.sim.replay import replay
    from tests.helpers import toy_cluster

    sc = load_scenario("slo-preempt")
    spec = load_workload_spec(sc.workload)
    if workload == "bursts":
        cluster = toy_cluster(nodes=4, gpus=8)
        jobs = _bursts_of_small_jobs(2)
    else:
        cluster = load_cluster(sc.cluster)
        jobs = make_workload(spec, cluster, 2, 120)
    sim = Simulator(cluster, jobs)
    la = L.Lookahead(sim, spec, sc.lookahead, sc.objective, sc.queue_window, clairvoyant=True, seed=2)
    drive, sect = make_baseline(driver), make_baseline("sect")
    seen = {"rollouts": 0, "full_mixed": 0, "in_flight": 0}

    def select(state, cset):
        q = feasible_queue(state)
        if len(q) > sc.queue_window and len(set(state.priority[q].tolist())) > 1 and state.attained_gpu_s[q].any():
            seen["full_mixed"] += 1
        seen["in_flight"] += bool(sim.checkpointing or sim.reserved)
        fork, twin = sim.fork(), sim.fork()
        action, horizon = sect.select(state, cset), sim.now + sc.lookahead.horizon_s
        want = la._python_rollout(fork, cset, action, horizon)
        twin.rollout_sect(sc.queue_window, horizon, *L._native_first(cset, action))
        got = la._cost(twin, horizon)
        assert got == want, (workload, seen, got, want)
        assert la._rollout(sim, sim.native_world(), cset, action, horizon) == want, (workload, seen)
        for name in _ROLLOUT_JOB_ARRAYS:
            assert _same(getattr(twin, name), getattr(fork, name)), (workload, seen, name)
        for name in SCALARS:
            assert getattr(twin, name) == getattr(fork, name), (workload, seen, name)
        seen["rollouts"] += 1
        return drive.select(state, cset)

    replay(sim, select, sc.queue_window, preempt_las=drive.preempt_las)
    assert seen["rollouts"] >= 50 and seen["in_flight"] >= (5 if workload == "bursts" else 1), seen
    if workload == "bursts":
        assert seen["full_mixed"] >= 5, seen
