"""`sect`'s choice in the native core (envs.core.choose_sect) against the plain-Python reference:
at every decision of replays on every scenario (and at states that owe restores), on a
hand-worked case, and with bad input named. Kept apart from tests/test_core.py, whose placement
tests are the placement group's in the mutation check (tests/mutation.py): these replays would
multiply that group's time."""

from __future__ import annotations

import numpy as np
import pytest

from baselines import make_baseline
from envs import core
from envs.cluster.config import load_cluster
from envs.cluster.speed import SpeedModel
from envs.core.jit import reference_path
from envs.decision.placement import RULES
from envs.jobs import PRIORITY_NORMAL, Job, JobKind
from envs.scenario import load_scenario, scenario_names
from envs.sim.replay import advance_to_decision, replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload

from tests.helpers import toy_cluster


def _sect_both_paths(state, cset) -> tuple[int, int]:
    """`sect`'s choice on the native core and on the reference."""
    rule = make_baseline("sect")
    native = rule.select(state, cset)
    with reference_path():
        reference = rule.select(state, cset)
    return native, reference


@pytest.mark.parametrize("scenario, driver", [(s, "sect") for s in scenario_names()] + [
    ("slo-preempt", "priority"), ("bursty", "tiresias"), ("hetero", "priority")])
def test_sect_choice_is_the_reference_on_every_scenario(scenario, driver):
    """At every decision of a replay (driven by `sect` itself, or by a preempting rule so that
    states owe restores and hold preempted jobs), the native choice is the reference's."""
    sc = load_scenario(scenario)
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    jobs = {"large": 2000, "nvl72": 400}.get(scenario, 150)  # a queue builds up on the big clusters only after many jobs
    sim = Simulator(cluster, make_workload(spec, cluster, 3, jobs))
    drive = make_baseline(driver)
    seen = {"decisions": 0, "several": 0, "restores": 0}

    def select(state, cset):
        native, reference = _sect_both_paths(state, cset)
        assert native == reference, (scenario, seen["decisions"], native, reference)
        seen["decisions"] += 1
        seen["several"] += len(cset.valid_placements(False)) > 3  # more than one job's candidates to choose from
        seen["restores"] += state.num_restores_owed > 0
        return native if driver == "sect" else drive.select(state, cset)

    replay(sim, select, 8, preempt_las=drive.preempt_las)
    assert seen["decisions"] >= 150 and seen["several"] >= 10, seen
    if driver != "sect":
        assert seen["restores"] > 0, seen


def test_hand_worked_sect_choice_avoids_a_memory_bound_neighbour():
    """Two 8-GPU nodes (speed 1). Job 0, an inference job (pressure 1.0 a GPU), runs on n0's GPUs
    0-3; job 2 (4 GPUs, fine-tune, sensitivity 0.3, no communication, estimate 1,100 s) waits
    with job 1 (16 GPUs), which cannot fit. Binpack and topology put job 2 on n0's other four
    GPUs (best fit), beside job 0: neighbours' pressure 4 x 1.0 / 8 = 0.5 a GPU, interference
    1 / (1 + 0.6 x 0.3 x 0.5) = 1 / 1.09, key 1,100 x 1.09 = 1,199 s; spread puts it on n1 (the
    most free GPUs), alone: key 1,100 s. sect takes spread, GPUs 8-11 (socket 0 of n1)."""
    c = toy_cluster(nodes=2, gpus=8)
    def job(j, kind, gpus, tp, est, comm=0.0):
        return Job(job_id=j, arrival_s=0.0, kind=kind, gpus=gpus, tp_degree=tp, mem_per_gpu_gb=40.0, work_s=est,
                   estimate_s=est, comm_fraction=comm, tp_comm_share=0.5, priority=PRIORITY_NORMAL, preemptible=True,
                   checkpoint_s=10.0, restore_s=20.0)
    sim = Simulator(c, [job(0, JobKind.INFERENCE, 4, 1, 1e6), job(1, JobKind.PRETRAIN, 16, 8, 1000.0, 0.5),
                        job(2, JobKind.FINETUNE, 4, 1, 1100.0)])
    sim.start(0, np.arange(4))
    cset = advance_to_decision(sim, 8)
    model = SpeedModel()
    assert (model.pressure_by_kind[JobKind.INFERENCE], model.sensitivity_by_kind[JobKind.FINETUNE],
            model.interference_coeff) == (1.0, 0.3, 0.6)  # the figures the docstring works with
    assert cset.state.node_pressure.tolist() == [4.0, 0.0]
    native, reference = _sect_both_paths(cset.state, cset)
    assert native == reference
    cd = cset.candidates[native]
    assert (cd.job_id, RULES[cd.rule], cd.gpus.tolist()) == (2, "spread", [8, 9, 10, 11])
    binpack = cset.candidates[cset.index(cset.window.index(2), RULES.index("binpack"))]
    assert binpack.gpus.tolist() == [4, 5, 6, 7]


def test_choose_sect_names_bad_input():
    c = toy_cluster(nodes=2, gpus=8)
    sim = Simulator(c, [Job(job_id=0, arrival_s=0.0, kind=JobKind.FINETUNE, gpus=4, tp_degree=1, mem_per_gpu_gb=40.0,
                            work_s=10.0, estimate_s=10.0, comm_fraction=0.0, tp_comm_share=0.0, priority=PRIORITY_NORMAL,
                            preemptible=True, checkpoint_s=10.0, restore_s=20.0)])
    cset = advance_to_decision(sim, 8)
    state = cset.state
    assert core.choose_sect(state, cset.window, cset.mask, len(RULES)) == 0
    with pytest.raises(ValueError, match="window"):
        core.choose_sect(state, [5], cset.mask, len(RULES))
    with pytest.raises(ValueError, match="mask"):
        core.choose_sect(state, cset.window, cset.mask[:3], len(RULES))
    with pytest.raises(ValueError, match="num_rules"):
        core.choose_sect(state, cset.window, cset.mask, 2)
    state.node_free = np.array([9, 0], dtype=np.int64)  # more free GPUs than the node has
    with pytest.raises(ValueError, match="node_free"):
        core.choose_sect(state, cset.window, cset.mask, len(RULES))
