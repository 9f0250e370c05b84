"""The objective (envs/sim/objective.py) and the metrics (envs/sim/metrics.py) on tiny schedules worked by
hand: every expected value below is computed in the comments from the jobs' arrivals, starts,
ends and GPUs, the formulas of docs/metrics.md and the objective's docstring, and the power
figures of the GPU catalogue (H100: 700 W busy, 100 W idle per GPU; 800 W per powered-on
node). The schedules run on the real simulator (toy H100 clusters, no interference unless a
test says so); decisions are taken directly (`Simulator.start`), so no scheduler is involved.

Where a test needs the timeline to hold the state after the decisions taken at an instant
(the fragmentation), it records it with `advance_until(now)` (a zero-length step): the
simulator records a row after each event, before the decisions at that time.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from envs.cluster.config import ConfigError, cluster_from_dict
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, JobKind
from envs.sim.metrics import METRICS, _time_average, episode_metrics, job_records
from envs.sim.objective import (
    DEFAULT_SLOS,
    OBJECTIVE_TERMS,
    Objective,
    RewardTracker,
    Slo,
    objective_config,
    objective_from_dict,
    objective_sums,
    objective_total,
    objective_value,
    slo_miss_flags,
    weighted_jct_s,
    weighted_total,
)
from envs.cluster.speed import SpeedModel
from envs.sim.simulator import SimConfig, Simulator
from tests.helpers import job, toy_cluster

NO_INTERFERENCE = SimConfig(speed_model=SpeedModel(interference_coeff=0.0))
PRETRAIN, FINETUNE, INFERENCE, BATCH = JobKind.PRETRAIN, JobKind.FINETUNE, JobKind.INFERENCE, JobKind.BATCH
H = 3600.0


def _record_decisions(sim: Simulator) -> None:
    """A timeline row for the state after this instant's decisions (a zero-length step)."""
    sim.advance_until(sim.now)


# ------------------------------------------------------------------ schedule A: three jobs, all finish
#
# Two nodes of 8 H100 (n0: GPUs 0-7, n1: GPUs 8-15), no interference.
#   J0: arrives 0, 8 GPUs, 100 s, finetune, low priority    -> runs on n0 0-100             JCT 100, wait 0
#   J1: arrives 0, 4 GPUs,  50 s, inference, high priority  -> runs on n1 (8-11) 0-50       JCT  50, wait 0
#   J2: arrives 10, 8 GPUs, 40 s, pretrain, normal priority -> waits (4 GPUs free) until 50,
#       runs on n1 50-90                                                                    JCT  80, wait 40
#   J3: arrives 200, 2 GPUs, batch: never arrives before J0 ends; the episode is cut at 100.
# So three of four jobs finished, one never arrived. JCT sum 230 s.

def schedule_a(until_s: float = 100.0) -> Simulator:
    jobs = [job(0, 0.0, 8, 100.0, kind=FINETUNE, priority=PRIORITY_LOW),
            job(1, 0.0, 4, 50.0, kind=INFERENCE, priority=PRIORITY_HIGH),
            job(2, 10.0, 8, 40.0, kind=PRETRAIN, priority=PRIORITY_NORMAL),
            job(3, 200.0, 2, 30.0, kind=BATCH)]
    sim = Simulator(toy_cluster(nodes=2), jobs, NO_INTERFERENCE)
    sim.start(0, np.arange(0, 8))
    sim.start(1, np.arange(8, 12))
    _record_decisions(sim)
    while sim.now < until_s:
        if sim.next_event_s() > until_s:
            sim.advance_until(until_s)
            break
        sim.advance()
        if sim.now == 50.0:
            sim.start(2, np.arange(8, 16))
            _record_decisions(sim)
    return sim


def test_schedule_a_is_the_hand_schedule():
    sim = schedule_a()
    assert sim.now == 100.0
    assert sim.first_start[:3].tolist() == [0.0, 0.0, 50.0]
    assert sim.end[:3].tolist() == [100.0, 50.0, 90.0] and math.isnan(sim.end[3])
    assert sim.num_arrived == 3


def test_jct_statistics_of_a_hand_schedule():
    m = episode_metrics(schedule_a())
    # JCTs 100, 50, 80: mean 230 / 3; sorted 50, 80, 100 (numpy's linear percentile: rank p x 2)
    assert m["avg_jct_s"] == pytest.approx(230.0 / 3)
    assert m["p50_jct_s"] == pytest.approx(80.0)
    assert m["p95_jct_s"] == pytest.approx(80.0 + 0.9 * 20.0)  # rank 1.9
    assert m["p99_jct_s"] == pytest.approx(80.0 + 0.98 * 20.0)  # rank 1.98
    # slowdown JCT / ideal runtime: 100/100, 50/50, 80/40
    assert m["avg_slowdown"] == pytest.approx((1.0 + 1.0 + 2.0) / 3)
    assert m["avg_queueing_delay_s"] == pytest.approx(40.0 / 3)
    assert m["makespan_s"] == pytest.approx(100.0)  # first arrival 0, last end 100
    assert m["finished_jobs"] == 3.0 and m["unfinished_jobs"] == 1.0
    # the lower bound: the mean ideal runtime of every job of the workload, J3 included
    assert m["avg_ideal_runtime_s"] == pytest.approx((100.0 + 50.0 + 40.0 + 30.0) / 4)
    assert m["avg_jct_finetune_s"] == 100.0 and m["avg_jct_inference_s"] == 50.0 and m["avg_jct_pretrain_s"] == 80.0
    assert math.isnan(m["avg_jct_batch_s"])  # no batch job finished
    assert m["starvation_s"] == pytest.approx(40.0)  # J2's wait


def test_the_lower_bound_runs_each_job_on_the_fastest_gpu_for_its_kind():
    """A GB200 tray beside an H100 node. The GB200's factors (docs/speed.md): pretrain 2.53,
    finetune 2.46, inference 2.39, batch its generic 2.53; the H100's are 1. Ideal runtimes:
    253 / 2.53, 246 / 2.46, 478 / 2.39, 759 / 2.53 = 100, 100, 200, 300 s: mean 175 s (the work
    itself, 434 s on average, would not be a bound: the GB200 runs faster)."""
    c = cluster_from_dict({"name": "gb-and-h100", "node_types": {
        "tray": {"gpu_type": "GB200-186GB", "gpus": 4}, "dgx": {"gpu_type": "H100-80GB", "gpus": 8}},
        "nodes": [{"names": "gb0", "type": "tray"}, {"names": "h0", "type": "dgx"}],
        "switches": [{"name": "leaf", "nodes": "gb0,h0"}]}, "<gb-and-h100>")
    sim = Simulator(c, [job(0, 0.0, 4, 253.0, kind=PRETRAIN), job(1, 0.0, 4, 246.0, kind=FINETUNE),
                        job(2, 0.0, 4, 478.0, kind=INFERENCE), job(3, 0.0, 4, 759.0, kind=BATCH)])
    assert episode_metrics(sim)["avg_ideal_runtime_s"] == pytest.approx((100.0 + 100.0 + 200.0 + 300.0) / 4)


def test_utilisation_goodput_fragmentation_and_energy_of_a_hand_schedule():
    m = episode_metrics(schedule_a())
    # GPUs held: 0-50: 8 + 4; 50-90: 16; 90-100: 8 -> 600 + 640 + 80 = 1320 GPU-s over 100 s x 16 GPUs
    assert m["gpu_utilisation"] == pytest.approx(1320.0 / 1600.0)
    # work done: 8 x 100 + 4 x 50 + 8 x 40 = 1320 reference GPU-s, over 100 s x 16 GPUs of speed 1
    assert m["goodput"] == pytest.approx(1320.0 / 1600.0)
    # free GPUs on a node that cannot take an 8-GPU gang: 0-50 all 4 free GPUs (n1 holds J1),
    # 50-90 none free, 90-100 n1 is empty again: share 1 for 50 s of 100
    assert m["fragmentation"] == pytest.approx(0.5)
    # power: 0-50 n0 8 busy (800 + 8 x 700) + n1 4 busy 4 idle (800 + 4 x 700 + 4 x 100) = 10400 W;
    # 50-90 both full, 12800 W; 90-100 n0 only (n1 empty: off), 6400 W
    joules = 50 * 10400.0 + 40 * 12800.0 + 10 * 6400.0
    assert m["energy_kwh"] == pytest.approx(joules / 3.6e6, rel=1e-12)
    assert m["preemptions"] == 0.0 and m["preemption_gpu_hours"] == 0.0
    assert m["inference_slo_misses"] == 0.0  # J1: JCT 50 s, within 3 x 50 s
    assert m["inference_interference"] == 0.0  # no interference in this speed model


def test_the_default_objective_is_the_average_jct_in_hours_over_every_job():
    sim = schedule_a()
    m = episode_metrics(sim)
    # 230 JCT-seconds of the three finished jobs; J3 never arrived, but the objective is per job
    # of the workload (4)
    assert m["objective"] == pytest.approx(230.0 / H / 4)
    assert objective_value(sim, Objective()) == pytest.approx(230.0 / H / 4)
    assert objective_total(sim, Objective()) == pytest.approx(230.0 / H)
    assert m["weighted_avg_jct_s"] == pytest.approx(230.0 / 4)  # unit weights: the JCT sum
    assert list(m)[0] == "objective"


# Every term on schedule A, with SLOs: pretrain must start within 30 s (J2 waits 40: a miss),
# finetune must finish within 1x its ideal runtime (J0: exactly 100 s: not a miss, a bound is
# exceeded only when passed), inference within 3x (J1: no miss).
SLOS_A = ((int(PRETRAIN), Slo(start_within_s=30.0)), (int(FINETUNE), Slo(finish_slowdown=1.0)),
          (int(INFERENCE), Slo(finish_slowdown=3.0)))
FULL = Objective(avg_jct=1.0, weighted_jct=2.0, slo_misses=3.0, preemption_gpu_h=5.0, energy_kwh=7.0,
                 priority_weights=(0.25, 1.0, 4.0), slos=SLOS_A)
ENERGY_A_KWH = (50 * 10400.0 + 40 * 12800.0 + 10 * 6400.0) / 3.6e6
WEIGHTED_A_S = 0.25 * 100.0 + 4.0 * 50.0 + 1.0 * 80.0  # low J0, high J1, normal J2 = 305


def test_each_term_of_the_objective_on_a_hand_schedule():
    sim = schedule_a()
    sums = objective_sums(sim, FULL)
    assert sums == pytest.approx({"avg_jct": 230.0 / H, "weighted_jct": WEIGHTED_A_S / H, "slo_misses": 1.0,
                                  "preemption_gpu_h": 0.0, "energy_kwh": ENERGY_A_KWH}, rel=1e-12)
    assert weighted_jct_s(sim, FULL) == pytest.approx(WEIGHTED_A_S)
    assert slo_miss_flags(sim, FULL).tolist() == [False, False, True]  # the arrived jobs only
    total = 1.0 * 230.0 / H + 2.0 * WEIGHTED_A_S / H + 3.0 * 1.0 + 7.0 * ENERGY_A_KWH
    assert objective_total(sim, FULL) == pytest.approx(total)
    assert objective_value(sim, FULL) == pytest.approx(total / 4)
    m = episode_metrics(sim, FULL)
    assert m["objective"] == pytest.approx(total / 4)
    assert m["weighted_avg_jct_s"] == pytest.approx(WEIGHTED_A_S / 4)
    assert m["slo_misses"] == 1.0
    assert m["inference_slo_misses"] == 0.0  # the default SLO, whatever the objective's


def test_a_zero_weight_leaves_its_term_out_and_weights_multiply_the_sums():
    sums = {"avg_jct": 2.0, "weighted_jct": 3.0, "slo_misses": 5.0, "preemption_gpu_h": 7.0, "energy_kwh": 11.0}
    assert weighted_total(sums, Objective()) == 2.0
    o = Objective(avg_jct=0.0, weighted_jct=0.5, slo_misses=2.0, preemption_gpu_h=3.0, energy_kwh=0.1)
    assert weighted_total(sums, o) == pytest.approx(0.5 * 3.0 + 2.0 * 5.0 + 3.0 * 7.0 + 0.1 * 11.0)


@pytest.mark.parametrize("start_within_s, misses", [(40.0, False), (39.0, True)])
def test_a_start_slo_is_missed_only_past_its_bound(start_within_s, misses):
    # J2 arrives at 10 and starts at 50: it waited exactly 40 s
    o = Objective(slos=((int(PRETRAIN), Slo(start_within_s=start_within_s)),))
    assert slo_miss_flags(schedule_a(), o).tolist() == [False, False, misses]


@pytest.mark.parametrize("slowdown, misses", [(2.0, False), (1.9, True)])
def test_a_finish_slo_is_missed_only_past_its_bound(slowdown, misses):
    # J2: JCT 80 s, ideal runtime 40 s: exactly 2x
    o = Objective(slos=((int(PRETRAIN), Slo(finish_slowdown=slowdown)),))
    assert slo_miss_flags(schedule_a(), o).tolist() == [False, False, misses]


def test_slo_misses_are_certain_while_a_job_still_waits_or_runs():
    # Cut at 45: J2 has waited 35 s and is still queued; J0 has been in the system 45 s of a 100 s
    # ideal runtime; J1 (50 s of work) runs since 0.
    sim = schedule_a(until_s=45.0)
    assert sim.now == 45.0
    start_30 = Objective(slos=((int(PRETRAIN), Slo(start_within_s=30.0)),))
    assert slo_miss_flags(sim, start_30).tolist() == [False, False, True]  # 35 s > 30 s, not started yet
    start_36 = Objective(slos=((int(PRETRAIN), Slo(start_within_s=36.0)),))
    assert slo_miss_flags(sim, start_36).tolist() == [False, False, False]
    # inference must finish within 0.8 x 50 = 40 s: J1 is still running at 45, so it will miss
    late = Objective(slos=((int(INFERENCE), Slo(finish_slowdown=0.8)),))
    assert slo_miss_flags(sim, late).tolist() == [False, True, False]
    # the default objective's SLO (inference within 3x = 150 s): nothing is certain yet
    assert slo_miss_flags(sim).tolist() == [False, False, False]
    # J2's start: 35 s in the system so far; weights per class: low J0 45 s, high J1 45 s
    o = Objective(priority_weights=(1.0, 10.0, 100.0))
    assert weighted_jct_s(sim, o) == pytest.approx(1.0 * 45.0 + 100.0 * 45.0 + 10.0 * 35.0)


def test_the_default_objectives_slo_is_an_inference_finish_within_three_times_its_runtime():
    # one 8-GPU node: an inference replica of 100 s waits 250 s behind an 8-GPU job
    jobs = [job(0, 0.0, 8, 250.0, kind=FINETUNE), job(1, 0.0, 8, 100.0, kind=INFERENCE)]
    sim = Simulator(toy_cluster(nodes=1), jobs, NO_INTERFERENCE)
    sim.start(0, np.arange(8))
    sim.advance()  # J0 ends at 250
    assert sim.now == 250.0
    sim.start(1, np.arange(8))
    sim.advance_until(300.0)
    assert slo_miss_flags(sim).tolist() == [False, False]  # J1: 300 s in the system, not past 300
    sim.advance_until(300.5)
    assert slo_miss_flags(sim).tolist() == [False, True]  # past 3 x 100 s while still running
    m = episode_metrics(sim)
    assert m["inference_slo_misses"] == 1.0
    assert m["slo_misses"] == 1.0  # the default objective's SLOs are these; it counts the miss...
    assert m["objective"] == pytest.approx((300.5 + 250.0) / H / 2)  # ...and gives it no weight


# ------------------------------------------------------------------ schedule B: one preemption
#
# One node of 8 H100.
#   J0: arrives 0, 8 GPUs, 100 s, low priority, checkpoint 10 s, restore 20 s; runs 0-20 (20 s of work)
#   J1: arrives 20, 8 GPUs, 10 s, high, not preemptible: preempts J0 at 20; J0 saves 20-30 (holding
#       its GPUs), J1 starts at 30 (waited 10 s) and ends at 40.
#   The GPUs stay idle 40-50; J0 restarts at 50 (waited 30-50: 20 s), restores 50-70 and runs its
#   last 80 s of work 70-150.
# JCTs: J0 150, J1 20. GPU-s lost: 8 x (10 + 20) = 240.

def schedule_b() -> Simulator:
    jobs = [job(0, 0.0, 8, 100.0, priority=PRIORITY_LOW, checkpoint_s=10.0, restore_s=20.0),
            job(1, 20.0, 8, 10.0, priority=PRIORITY_HIGH, preemptible=False)]
    sim = Simulator(toy_cluster(nodes=1), jobs, NO_INTERFERENCE)
    sim.start(0, np.arange(8))
    sim.advance()  # 20: J1 arrives
    sim.preempt_and_start(1, np.arange(8), [0])
    sim.advance()  # 30: J0 saved, J1 starts on its GPUs
    sim.advance()  # 40: J1 ends
    sim.advance_until(50.0)
    sim.start(0, np.arange(8))
    while not sim.done:
        sim.advance()
    return sim


def test_schedule_b_is_the_hand_schedule():
    sim = schedule_b()
    assert sim.end.tolist() == [150.0, 40.0] and sim.first_start.tolist() == [0.0, 30.0]
    assert sim.wait_s.tolist() == [20.0, 10.0]


def test_preemption_figures_of_a_hand_schedule():
    sim = schedule_b()
    m = episode_metrics(sim)
    assert m["preemptions"] == 1.0
    assert m["preemption_gpu_hours"] == pytest.approx(240.0 / H)
    # GPUs held or reserved: 0-40 all 8 (J0, then J0 saving with J1's reservation, then J1),
    # 40-50 none, 50-150 all 8 -> 1120 GPU-s of 150 s x 8
    assert m["gpu_utilisation"] == pytest.approx(1120.0 / 1200.0)
    # work done: 8 x 100 + 8 x 10 = 880 GPU-s; the checkpoint and the restore hold GPUs for nothing
    assert m["goodput"] == pytest.approx(880.0 / 1200.0)
    # the node is on 0-40 and 50-150, fully held: 6400 W
    assert m["energy_kwh"] == pytest.approx(140 * 6400.0 / 3.6e6, rel=1e-12)
    assert m["avg_queueing_delay_s"] == pytest.approx((20.0 + 10.0) / 2)
    assert m["starvation_s"] == pytest.approx(20.0)
    assert m["avg_jct_s"] == pytest.approx((150.0 + 20.0) / 2)
    assert m["inference_interference"] == 0.0  # no inference job ran
    o = Objective(avg_jct=0.0, preemption_gpu_h=2.0)
    assert objective_sums(sim, o)["preemption_gpu_h"] == pytest.approx(240.0 / H)
    assert episode_metrics(sim, o)["objective"] == pytest.approx(2.0 * 240.0 / H / 2)


# ------------------------------------------------------------------ a truncated episode

def test_a_truncated_episode_counts_finished_jobs_in_the_jct_statistics_only():
    # schedule A cut at 60: J1 ended at 50; J0 runs since 0; J2 runs since 50 after waiting 40 s
    sim = schedule_a(until_s=60.0)
    m = episode_metrics(sim)
    assert m["avg_jct_s"] == 50.0 and m["p50_jct_s"] == 50.0 and m["p99_jct_s"] == 50.0
    assert m["avg_slowdown"] == 1.0 and m["avg_queueing_delay_s"] == 0.0
    assert m["finished_jobs"] == 1.0 and m["unfinished_jobs"] == 3.0
    assert m["makespan_s"] == 50.0  # first arrival to the last end so far
    # the objective counts every arrived job's time so far: 60 + 50 + 50 s
    assert m["objective"] == pytest.approx(160.0 / H / 4)
    # GPUs held: 0-50: 12, 50-60: 16 -> 760 GPU-s over 60 s x 16
    assert m["gpu_utilisation"] == pytest.approx(760.0 / 960.0)
    assert math.isnan(m["avg_jct_pretrain_s"]) and m["avg_jct_inference_s"] == 50.0


def test_starvation_counts_the_wait_so_far_of_waiting_jobs_not_the_time_since_they_started():
    # schedule A cut at 45: J2 has waited 35 s and still waits; J0 and J1 run since 0 and never
    # waited. The longest wait is J2's 35 s.
    assert episode_metrics(schedule_a(until_s=45.0))["starvation_s"] == pytest.approx(35.0)
    # cut at 60: J2 started at 50 after 40 s; J0 has run 60 s without waiting
    assert episode_metrics(schedule_a(until_s=60.0))["starvation_s"] == pytest.approx(40.0)
    # schedule B cut at 25: J1 is reserved since its arrival at 20 (it waits for J0 to save), J0
    # saves since 20 after running from 0 without a wait: the longest wait is J1's 5 s
    jobs = [job(0, 0.0, 8, 100.0, priority=PRIORITY_LOW, checkpoint_s=10.0, restore_s=20.0),
            job(1, 20.0, 8, 10.0, priority=PRIORITY_HIGH, preemptible=False)]
    sim = Simulator(toy_cluster(nodes=1), jobs, NO_INTERFERENCE)
    sim.start(0, np.arange(8))
    sim.advance()
    sim.preempt_and_start(1, np.arange(8), [0])
    sim.advance_until(25.0)
    assert episode_metrics(sim)["starvation_s"] == pytest.approx(5.0)
    sim.advance()  # 30: J0 saved and queued again, J1 starts after 10 s
    sim.advance()  # 40: J1 ends
    sim.advance_until(45.0)
    assert episode_metrics(sim)["starvation_s"] == pytest.approx(15.0)  # J0 queued since 30


def test_metrics_with_no_job_finished_are_nan_and_counts_zero():
    sim = schedule_a(until_s=30.0)
    m = episode_metrics(sim)
    for key in ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_slowdown", "avg_queueing_delay_s",
                *(f"avg_jct_{n}_s" for n in ("pretrain", "finetune", "inference", "batch"))):
        assert math.isnan(m[key]), key
    assert m["finished_jobs"] == 0.0 and m["unfinished_jobs"] == 4.0
    assert m["makespan_s"] == 30.0  # nothing ended: first arrival to now
    assert m["objective"] == pytest.approx((30.0 + 30.0 + 20.0) / H / 4)


def test_a_workload_of_one_job_arriving_late():
    # one 8-GPU node; a single job arrives at 100, runs 100-150 on 7 GPUs, so one GPU stays free
    # and fragmented (a node with 1 free GPU cannot take an 8-GPU gang)
    sim = Simulator(toy_cluster(nodes=1), [job(0, 100.0, 7, 50.0)], NO_INTERFERENCE)
    sim.advance()  # 100: the job arrives
    sim.start(0, np.arange(7))
    _record_decisions(sim)
    sim.advance()  # 150: it ends
    assert sim.done and sim.now == 150.0
    m = episode_metrics(sim)
    assert m["makespan_s"] == 50.0  # from its arrival, not from 0
    assert m["gpu_utilisation"] == pytest.approx(7 * 50.0 / (50.0 * 8))  # over 100-150
    assert m["goodput"] == pytest.approx(7 * 50.0 / (50.0 * 8))
    # the rows: 0-100 nothing held (0 fragmented), 100-150 one free GPU, fragmented; the average is
    # over the simulator's whole time, 0-150
    assert m["fragmentation"] == pytest.approx(50.0 / 150.0)
    assert m["objective"] == pytest.approx(50.0 / H)  # one job: its JCT in hours
    assert objective_value(sim, Objective()) == pytest.approx(50.0 / H)
    assert m["weighted_avg_jct_s"] == pytest.approx(50.0)


def test_utilisation_over_a_horizon_shorter_than_a_second():
    # schedule A cut at 0.5 s: 12 of 16 GPUs held
    assert episode_metrics(schedule_a(until_s=0.5))["gpu_utilisation"] == pytest.approx(0.75)


def test_metrics_of_an_unfinished_episode_emit_no_numpy_warnings():
    for until_s in (30.0, 60.0):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            episode_metrics(schedule_a(until_s=until_s))


def test_metrics_of_an_empty_workload():
    sim = Simulator(toy_cluster(nodes=1), [], NO_INTERFERENCE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = episode_metrics(sim)
    assert m["objective"] == 0.0 and m["makespan_s"] == 0.0 and m["starvation_s"] == 0.0
    assert m["finished_jobs"] == 0.0 and m["unfinished_jobs"] == 0.0 and m["preemptions"] == 0.0
    assert math.isnan(m["avg_ideal_runtime_s"]) and math.isnan(m["avg_jct_s"])
    assert m["gpu_utilisation"] == 0.0 and m["fragmentation"] == 0.0 and m["inference_interference"] == 0.0


# ------------------------------------------------------------------ interference of inference replicas

@pytest.mark.parametrize("cut_s", [10.0, 0.5])
def test_inference_interference_is_the_mean_lost_share_of_the_inference_replicas_that_ran(cut_s):
    # One 8-GPU node; interference factor 1 / (1 + pressure of the others per GPU) (coefficient 1,
    # sensitivity 1): inference puts pressure 1 per GPU, finetune none.
    #   I0: inference, 4 GPUs: others' pressure 2 / 8 -> factor 0.8, loses 0.2 of each second
    #   I1: inference, 2 GPUs: others' pressure 4 / 8 -> factor 2/3, loses 1/3
    #   F2: finetune, 2 GPUs: others' pressure 6 / 8 -> factor 4/7 (not an inference replica)
    #   I3: inference, arrives at 5, no GPU left: never runs (not counted)
    # Cut before anything ends (at 10 s, or after half a second): each lost share is 1 - factor.
    model = SpeedModel(interference_coeff=1.0, pressure_by_kind=(0.0, 0.0, 1.0, 0.0), sensitivity_by_kind=(1.0, 1.0, 1.0, 1.0))
    jobs = [job(0, 0.0, 4, 1000.0, kind=INFERENCE), job(1, 0.0, 2, 1000.0, kind=INFERENCE),
            job(2, 0.0, 2, 1000.0, kind=FINETUNE), job(3, 5.0, 2, 1000.0, kind=INFERENCE)]
    sim = Simulator(toy_cluster(nodes=1), jobs, SimConfig(speed_model=model))
    sim.start(0, np.arange(0, 4))
    sim.start(1, np.arange(4, 6))
    sim.start(2, np.arange(6, 8))
    while sim.now < cut_s:
        sim.advance_until(cut_s)  # stops at I3's arrival first when the cut is later
    m = episode_metrics(sim)
    assert m["inference_interference"] == pytest.approx((0.2 + 1.0 / 3.0) / 2)


# ------------------------------------------------------------------ the reward tracker

def _rewards(objective: Objective, stops: list[float]) -> list[float]:
    """Schedule A's rewards between decision times `stops` (a reward per interval)."""
    sim = schedule_a(until_s=stops[0])
    tracker = RewardTracker(objective)
    tracker.reset(sim)
    out = []
    for t in stops[1:]:
        while sim.now < t:
            if sim.next_event_s() > t:
                sim.advance_until(t)
            else:
                sim.advance()
                if sim.now == 50.0:
                    sim.start(2, np.arange(8, 16))
        out.append(tracker.step(sim))
    return out


def test_the_reward_is_minus_the_increase_of_jobs_times_the_objective():
    # Default objective, time scale 1 h: jobs in the system 10-50: 3 (J0, J1, J2), 50-90: 2, 90-100: 1.
    r = _rewards(Objective(), [10.0, 50.0, 100.0])
    assert r == pytest.approx([-3 * 40.0 / H, -(2 * 40.0 + 1 * 10.0) / H])
    # a time scale of 60 s counts in job-minutes
    r = _rewards(Objective(time_scale_s=60.0), [10.0, 50.0])
    assert r == pytest.approx([-3 * 40.0 / 60.0])


def test_the_reward_counts_every_weighted_term_in_hours_of_jct():
    # 10-50 on schedule A: priority-weighted time in system (weights 0.25, 1, 4 for J0 low, J2
    # normal, J1 high): 40 x (0.25 + 4 + 1); J2's start SLO (30 s) becomes certain at 40: one miss;
    # energy 40 s x 10400 W.
    o = Objective(avg_jct=0.0, weighted_jct=2.0, priority_weights=(0.25, 1.0, 4.0))
    assert _rewards(o, [10.0, 50.0]) == pytest.approx([-2.0 * 40.0 * 5.25 / H])
    o = Objective(avg_jct=0.0, slo_misses=3.0, slos=((int(PRETRAIN), Slo(start_within_s=30.0)),))
    assert _rewards(o, [10.0, 50.0, 100.0]) == pytest.approx([-3.0, 0.0])  # counted once, when certain
    o = Objective(avg_jct=0.0, slo_misses=3.0, slos=((int(PRETRAIN), Slo(start_within_s=30.0)),), time_scale_s=60.0)
    assert _rewards(o, [10.0, 50.0]) == pytest.approx([-3.0 * 60.0])  # a miss costs an hour: 60 minutes
    o = Objective(avg_jct=0.0, energy_kwh=0.5)
    assert _rewards(o, [10.0, 50.0]) == pytest.approx([-0.5 * 40.0 * 10400.0 / 3.6e6], rel=1e-12)
    # with a 60 s time scale every term is in minutes of JCT: x 60
    o = Objective(avg_jct=0.0, energy_kwh=0.5, time_scale_s=60.0)
    assert _rewards(o, [10.0, 50.0]) == pytest.approx([-60.0 * 0.5 * 40.0 * 10400.0 / 3.6e6])
    o = Objective(avg_jct=2.0, weighted_jct=1.0, time_scale_s=60.0)
    assert _rewards(o, [10.0, 50.0]) == pytest.approx([-(2.0 * 3 * 40.0 + 3 * 40.0) / 60.0])


def test_a_new_tracker_stands_at_a_fresh_simulators_potential_zero():
    # without reset, the first reward counts everything since 0: jobs in the system 0-10: 2 (J0, J1)
    sim = schedule_a(until_s=10.0)
    assert RewardTracker(Objective()).step(sim) == pytest.approx(-2 * 10.0 / H)
    assert RewardTracker(Objective(avg_jct=2.0, time_scale_s=60.0)).step(sim) == pytest.approx(-2.0 * 2 * 10.0 / 60.0)


def test_the_reward_counts_preemption_gpu_hours():
    # schedule B: the preemption at 20 costs 240 GPU-s at once; 2 x 240 / 3600 job-hours
    jobs = [job(0, 0.0, 8, 100.0, priority=PRIORITY_LOW, checkpoint_s=10.0, restore_s=20.0),
            job(1, 20.0, 8, 10.0, priority=PRIORITY_HIGH, preemptible=False)]
    sim = Simulator(toy_cluster(nodes=1), jobs, NO_INTERFERENCE)
    tracker = RewardTracker(Objective(avg_jct=0.0, preemption_gpu_h=2.0, time_scale_s=1800.0))
    sim.start(0, np.arange(8))
    sim.advance()
    tracker.reset(sim)
    sim.preempt_and_start(1, np.arange(8), [0])
    # in units of 1800 s: 2 x (240 / 3600) GPU-h x 2
    assert tracker.step(sim) == pytest.approx(-2.0 * 240.0 / H * 2.0)
    sim.advance()
    assert tracker.step(sim) == 0.0


# ------------------------------------------------------------------ the objective's definition and its config

def test_the_default_objective():
    o = Objective()
    assert o.weights() == {"avg_jct": 1.0, "weighted_jct": 0.0, "slo_misses": 0.0, "preemption_gpu_h": 0.0, "energy_kwh": 0.0}
    assert list(o.weights()) == list(OBJECTIVE_TERMS)
    assert o.priority_weights == (1.0, 1.0, 1.0) and o.time_scale_s == 3600.0
    assert o.slos == DEFAULT_SLOS == ((int(INFERENCE), Slo(finish_slowdown=3.0)),)
    assert Slo().start_within_s == math.inf and Slo().finish_slowdown == math.inf
    # per kind (pretrain, finetune, inference, batch): only inference has a bound, a finish at 3x
    assert o.slo_start_s.tolist() == [math.inf] * 4
    assert o.slo_finish_slowdown.tolist() == [math.inf, math.inf, 3.0, math.inf]


def test_the_objective_as_plain_data():
    o = Objective(avg_jct=0.5, energy_kwh=2.0, priority_weights=(0.5, 1.0, 3.0),
                  slos=((int(PRETRAIN), Slo(start_within_s=60.0)), (int(BATCH), Slo(finish_slowdown=4.0))))
    assert o.slo_start_s.tolist() == [60.0, math.inf, math.inf, math.inf]
    assert o.slo_finish_slowdown.tolist() == [math.inf, math.inf, math.inf, 4.0]
    assert o.to_dict() == {
        "avg_jct": 0.5, "weighted_jct": 0.0, "slo_misses": 0.0, "preemption_gpu_h": 0.0, "energy_kwh": 2.0,
        "priority_weights": {"low": 0.5, "normal": 1.0, "high": 3.0},
        "slos": {"pretrain": {"start_within_s": 60.0, "finish_slowdown": None},
                 "batch": {"start_within_s": None, "finish_slowdown": 4.0}},
    }


def test_an_objective_from_its_yaml_form():
    assert objective_from_dict(None, "x.yaml") == Objective()
    assert objective_from_dict({}, "x.yaml") == Objective()
    o = objective_from_dict({"avg_jct": 0, "weighted_jct": 1.5, "slo_misses": 2, "preemption_gpu_h": 0.25, "energy_kwh": 0.1,
                             "priority_weights": {"low": 0.5, "high": 4}, "time_scale_s": 60,
                             "slos": {"inference": {"start_within_s": 600}, "pretrain": {"finish_slowdown": 5}}}, "x.yaml")
    assert o.weights() == {"avg_jct": 0.0, "weighted_jct": 1.5, "slo_misses": 2.0, "preemption_gpu_h": 0.25, "energy_kwh": 0.1}
    assert o.priority_weights == (0.5, 1.0, 4.0)  # normal keeps its default 1
    assert o.time_scale_s == 60.0
    # sorted by kind; an unset bound is none
    assert o.slos == ((int(PRETRAIN), Slo(math.inf, 5.0)), (int(INFERENCE), Slo(600.0, math.inf)))
    # an empty `slos` mapping: no SLO at all (not the default one)
    assert objective_from_dict({"slos": {}}, "x.yaml").slos == ()
    assert objective_from_dict({"energy_kwh": 1}, "x.yaml").weights()["avg_jct"] == 1.0  # avg_jct defaults to 1
    # the bounds' minima are allowed
    edge = objective_from_dict({"time_scale_s": 1, "slos": {"batch": {"start_within_s": 0, "finish_slowdown": 1}}}, "x.yaml")
    assert edge.time_scale_s == 1.0 and edge.slos == ((int(BATCH), Slo(0.0, 1.0)),)


@pytest.mark.parametrize("data, field, words", [
    ({"avg_jct": 0}, "objective.avg_jct", "every weight is 0"),
    ({"avg_jct": 0, "slo_misses": 0}, "objective.avg_jct", "every weight is 0"),
    ({"energy_kwh": -0.5}, "objective.energy_kwh", ">= 0.0"),
    ({"time_scale_s": 0.5}, "objective.time_scale_s", ">= 1.0"),
    ({"priority_weights": {"high": -1}}, "objective.priority_weights.high", ">= 0.0"),
    ({"priority_weights": {"urgent": 2}}, "objective.priority_weights.urgent", "unknown key"),
    ({"slos": {"serving": {}}}, "objective.slos.serving", "unknown job kind (known: pretrain, finetune, inference, batch)"),
    ({"slos": {"batch": {"deadline": 3}}}, "objective.slos.batch.deadline", "unknown key"),
    ({"slos": {"batch": {"start_within_s": -1}}}, "objective.slos.batch.start_within_s", ">= 0.0"),
    ({"slos": {"batch": {"finish_slowdown": 0.9}}}, "objective.slos.batch.finish_slowdown", ">= 1.0"),
    ({"jct": 1}, "objective.jct", "unknown key"),
])
def test_a_bad_objective_names_the_file_and_field(data, field, words):
    with pytest.raises(ConfigError) as e:
        objective_from_dict(data, "x.yaml")
    assert str(e.value).startswith(f"x.yaml: {field}: ") and words in str(e.value)


def test_an_objective_without_weight_says_why_it_is_refused():
    with pytest.raises(ConfigError) as e:
        objective_from_dict({"avg_jct": 0.0}, "x.yaml")
    assert str(e.value) == "x.yaml: objective.avg_jct: every weight is 0: the objective would rank every policy equal"


def test_objective_config_takes_none_an_objective_or_its_yaml_form():
    assert objective_config(None) == Objective()
    o = Objective(energy_kwh=1.0)
    assert objective_config(o) is o
    assert objective_config({"weighted_jct": 2}) == Objective(weighted_jct=2.0)
    with pytest.raises(TypeError, match="^objective must be a dict or Objective, got list$"):
        objective_config([1])
    with pytest.raises(TypeError, match="^reward must be a dict or Objective, got str$"):
        objective_config("avg_jct", name="reward")
    with pytest.raises(ValueError, match=r"^<objective>: reward\.jct: unknown key") as e:
        objective_config({"jct": 1}, name="reward")
    assert not isinstance(e.value, ConfigError)  # a plain ValueError for a programmatic argument


# ------------------------------------------------------------------ the metrics' table and helpers

def test_every_metric_has_a_direction_and_only_throughput_figures_are_higher_is_better():
    m = episode_metrics(schedule_a())
    assert list(m) == list(METRICS)
    higher = {k for k, d in METRICS.items() if d == "higher"}
    assert higher == {"gpu_utilisation", "goodput", "finished_jobs"}
    assert {d for d in METRICS.values()} == {"lower", "higher"}
    assert {f"avg_jct_{n}_s" for n in ("pretrain", "finetune", "inference", "batch")} <= set(METRICS)


def test_time_average_of_a_step_function():
    # value 2 during 0-10, 5 during 10-40: (20 + 150) / 40
    assert _time_average(np.array([0.0, 10.0]), np.array([2.0, 5.0]), 40.0) == pytest.approx(170.0 / 40.0)
    # a row that holds for no time weighs nothing
    assert _time_average(np.array([0.0, 0.0, 10.0]), np.array([9.0, 2.0, 5.0]), 40.0) == pytest.approx(170.0 / 40.0)
    # nothing recorded: 0; the horizon not past the first row: the last value
    assert _time_average(np.zeros(0), np.zeros(0), 10.0) == 0.0
    assert _time_average(np.array([5.0, 5.0]), np.array([1.0, 3.0]), 5.0) == 3.0
    assert _time_average(np.array([5.0]), np.array([4.0]), 2.0) == 4.0


def test_job_records_of_a_hand_schedule():
    sim = schedule_a(until_s=60.0)
    recs = job_records(sim)
    assert [r["job_id"] for r in recs] == [0, 1, 2, 3]
    assert recs[0] == {"job_id": 0, "kind": "finetune", "gpus_requested": 8, "priority": PRIORITY_LOW, "tenant": "default",
                       "arrival_s": 0.0, "start_s": 0.0, "end_s": None, "gpus": list(range(8)), "nodes": ["n0"],
                       "preemptions": 0, "queueing_delay_s": 0.0, "ideal_runtime_s": 100.0}
    assert recs[1]["end_s"] == 50.0 and recs[1]["gpus"] == [8, 9, 10, 11] and recs[1]["nodes"] == ["n1"]
    assert recs[1]["kind"] == "inference" and recs[1]["gpus_requested"] == 4
    assert recs[2]["start_s"] == 50.0 and recs[2]["queueing_delay_s"] == 40.0 and recs[2]["arrival_s"] == 10.0
    assert recs[3]["start_s"] is None and recs[3]["gpus"] == [] and recs[3]["nodes"] == [] and recs[3]["kind"] == "batch"
    assert isinstance(recs[2]["start_s"], float) and isinstance(recs[1]["gpus"][0], int)


def test_job_records_name_every_node_of_a_spread_job_and_count_preemptions():
    jobs = [job(0, 0.0, 8, 100.0)]
    sim = Simulator(toy_cluster(nodes=2), jobs, NO_INTERFERENCE)
    sim.start(0, np.array([12, 13, 14, 15, 0, 1, 2, 3]))
    rec = job_records(sim)[0]
    assert rec["nodes"] == ["n0", "n1"] and rec["gpus"] == [12, 13, 14, 15, 0, 1, 2, 3]
    assert job_records(schedule_b())[0]["preemptions"] == 1
