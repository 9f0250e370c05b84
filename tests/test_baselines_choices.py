"""Hand-worked choices of `sect` and EASY backfilling that the mutation check (tests/mutation.py)
found untested: every expected value is worked out here from the rule's statement.

Two one-node types under one leaf: f0 has 8 H100s (speed 1.0), s0 8 A100-80GB (speed 0.5, the
catalogue's generic speed; no per-kind factors). Every test runs on both paths: the native core
(`sect`'s choice is compiled there) and the plain-Python reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from baselines import make_baseline
from baselines.base import wait_or_any
from baselines.easy import estimated_end_s, reservation
from envs.cluster.config import cluster_from_dict
from envs.core.jit import reference_path
from envs.decision.candidates import CandidateSet
from envs.decision.placement import RULES
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, Job, JobKind
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator

Q = 8
TWO_SPEEDS = cluster_from_dict({
    "name": "two-speeds",
    "node_types": {"fast": {"gpu_type": "H100-80GB", "gpus": 8}, "slow": {"gpu_type": "A100-80GB", "gpus": 8}},
    "nodes": [{"names": "f0", "type": "fast"}, {"names": "s0", "type": "slow"}],
    "switches": [{"name": "leaf0", "nodes": "f0,s0"}],
}, "two-speeds")
FAST, SLOW = list(range(0, 8)), list(range(8, 16))


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request):
    if request.param == "reference":
        with reference_path():
            yield request.param
    else:
        yield request.param


def job(job_id: int, gpus: int, est_s: float, *, arrival_s: float = 0.0, mem: float = 40.0) -> Job:
    return Job(job_id=job_id, arrival_s=arrival_s, kind=JobKind.FINETUNE, gpus=gpus, tp_degree=1, mem_per_gpu_gb=mem,
               work_s=est_s, estimate_s=est_s, comm_fraction=0.0, tp_comm_share=0.0, priority=PRIORITY_NORMAL,
               preemptible=True, checkpoint_s=10.0, restore_s=20.0)


def decision(sim: Simulator) -> CandidateSet:
    return advance_to_decision(sim, Q)


def chosen(cset: CandidateSet, i: int) -> tuple:
    cd = cset.candidates[i]
    return (cd.job_id, RULES[cd.rule], sorted(cd.gpus.tolist())) if cd.rule >= 0 else ("wait",)


def test_sect_takes_the_earliest_expected_completion_not_the_shortest_job() -> None:
    """Job 0 holds f0's GPUs 0-3. Job 1 (8 GPUs, estimate 2,000 s) fits only on the A100 node:
    2,000 / 0.5 = 4,000 s. Job 2 (4 GPUs, 3,000 s) fits on f0's other four at speed 1: 3,000 s.
    sect takes job 2 (SJF would take job 1). Binpack and topology both put job 2 on GPUs 4-7
    (best fit, and the fastest node), the same key: the lower rule index, binpack, wins the tie."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1e6), job(1, 8, 2000.0), job(2, 4, 3000.0)])
    sim.start(0, np.arange(4))
    cset = decision(sim)
    assert chosen(cset, make_baseline("sect").select(cset.state, cset)) == (2, "binpack", [4, 5, 6, 7])
    assert chosen(cset, make_baseline("sjf").select(cset.state, cset))[0] == 1


def test_sect_takes_the_slow_node_when_the_job_is_short_enough() -> None:
    """The same, job 1's estimate 1,400 s: 1,400 / 0.5 = 2,800 s < 3,000 s, so job 1 on s0."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1e6), job(1, 8, 1400.0), job(2, 4, 3000.0)])
    sim.start(0, np.arange(4))
    cset = decision(sim)
    i = make_baseline("sect").select(cset.state, cset)
    assert chosen(cset, i)[0] == 1 and chosen(cset, i)[2] == SLOW


def test_sect_never_takes_a_preempting_candidate_even_with_the_better_key() -> None:
    """Job 0 (low priority, preemptible) holds all of f0, job 3 half of s0. Job 1 (normal
    priority, 8 GPUs, estimate 2,000 s) fits only by preempting job 0: `preempt` puts it on f0,
    2,000 / 1.0 = 2,000 s. Job 2 (4 GPUs, 3,000 s) fits on s0's free half: 3,000 / 0.5 = 6,000 s.
    The preemption has the better key, but sect never preempts: job 2 on s0."""
    low = dataclasses.replace(job(0, 8, 1e6), priority=PRIORITY_LOW)
    sim = Simulator(TWO_SPEEDS, [low, job(1, 8, 2000.0), job(2, 4, 3000.0), job(3, 4, 1e6)])
    sim.start(0, np.arange(8))
    sim.start(3, np.arange(8, 12))
    cset = decision(sim)
    preempt = cset.index(cset.window.index(1), RULES.index("preempt"))
    assert cset.mask[preempt] and sorted(cset.candidates[preempt].gpus.tolist()) == FAST  # the better key is there
    i = make_baseline("sect").select(cset.state, cset)
    assert chosen(cset, i)[:2] == (2, "binpack") and chosen(cset, i)[2] == SLOW[4:]


def test_sect_waits_when_only_a_preemption_would_place_a_job() -> None:
    """Job 0 (low priority) holds all of f0 and job 1 all of s0; job 2 (normal priority, 8 GPUs)
    fits only by preempting job 0: sect waits (WAIT is valid: jobs are running)."""
    low = dataclasses.replace(job(0, 8, 1e6), priority=PRIORITY_LOW)
    sim = Simulator(TWO_SPEEDS, [low, job(1, 8, 1e6), job(2, 8, 2000.0)])
    sim.start(0, np.arange(8))
    sim.start(1, np.arange(8, 16))
    cset = decision(sim)
    assert cset.valid_placements(preempting=False) == [] and cset.valid_placements(preempting=True)
    assert chosen(cset, make_baseline("sect").select(cset.state, cset)) == ("wait",)


def test_wait_or_any_takes_the_first_valid_candidate_when_wait_is_invalid() -> None:
    """Nothing runs and nothing else arrives, so WAIT is invalid: the first valid candidate is
    job 0's binpack (index 0 of the candidate set), not the second valid one."""
    sim = Simulator(TWO_SPEEDS, [job(0, 2, 100.0), job(1, 2, 100.0)])
    cset = decision(sim)
    assert not cset.mask[cset.wait_index]
    valid = np.flatnonzero(cset.mask)
    assert valid[0] == 0 and len(valid) > 1
    assert wait_or_any(cset) == 0


def test_easy_estimated_end_divides_by_the_slowest_gpu() -> None:
    """A job with 1,000 s left by its estimate ends at now + 1,000 s on H100s and at now + 2,000 s
    if one of its GPUs is an A100 (speed 0.5)."""
    sim = Simulator(TWO_SPEEDS, [job(0, 2, 1000.0)])
    state = sim.decision_state()
    assert estimated_end_s(state, 0, np.array([0, 1])) == pytest.approx(1000.0)
    assert estimated_end_s(state, 0, np.array([0, 8])) == pytest.approx(2000.0)


def test_easy_reservation_ends_when_exactly_enough_gpus_are_free() -> None:
    """Job 0 (4 H100s, 1,000 s) and job 1 (8 A100s, 3,000 s, so 6,000 s at speed 0.5) run; the
    head, job 2, needs 8 GPUs with 80 GB (every GPU here has exactly 80 GB): 4 are free now,
    job 0's 4 at 1,000 s make exactly 8, so the shadow time is 1,000 s with 0 spare."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1000.0), job(1, 8, 3000.0), job(2, 8, 500.0, mem=80.0)])
    sim.start(0, np.arange(4))
    sim.start(1, np.arange(8, 16))
    state = sim.decision_state()
    assert reservation(state, 2) == (pytest.approx(1000.0), 0)


def test_easy_backfills_a_job_that_ends_exactly_at_the_shadow_time() -> None:
    """Job 0 holds H100s 0-3 for 10^6 s, job 1 the eight A100s until 6,000 s (3,000 s at speed
    0.5). The head, job 2, needs 12 GPUs: 4 free now plus job 1's 8 at 6,000 s, so the shadow
    time is 6,000 s with none spare. Job 3 needs 4 GPUs for 6,000 s: on H100s 4-7 it ends exactly
    at the shadow time, which EASY allows (it uses 4 GPUs the head needs, so only its end time
    lets it in)."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1e6), job(1, 8, 3000.0), job(2, 12, 500.0), job(3, 4, 6000.0)])
    sim.start(0, np.arange(4))
    sim.start(1, np.arange(8, 16))
    assert reservation(sim.decision_state(), 2) == (pytest.approx(6000.0), 0)
    cset = decision(sim)
    assert chosen(cset, make_baseline("easy").select(cset.state, cset)) == (3, "topology", [4, 5, 6, 7])


SLOW_FIRST = cluster_from_dict({
    "name": "slow-first",
    "node_types": {"fast": {"gpu_type": "H100-80GB", "gpus": 8}, "slow": {"gpu_type": "A100-80GB", "gpus": 8}},
    "nodes": [{"names": "s0", "type": "slow"}, {"names": "f0", "type": "fast"}],
    "switches": [{"name": "leaf0", "nodes": "s0,f0"}],
}, "slow-first")  # GPUs 0-7 A100 (speed 0.5), 8-15 H100


def test_easy_judges_a_backfill_by_the_speed_of_its_own_gpus() -> None:
    """Job 0 holds the A100s for 10^6 s, job 1 H100s 8-11 for 6,000 s. The head, job 2, needs 8
    GPUs: 4 free now plus job 1's 4 at 6,000 s, so shadow 6,000 s, none spare. Job 3 needs 4 GPUs
    for 6,000 s by its estimate: on H100s 12-15 (speed 1) it ends exactly at the shadow time and
    backfills; had its end been judged at the A100s' speed it would end at 12,000 s and wait."""
    sim = Simulator(SLOW_FIRST, [job(0, 8, 1e6), job(1, 4, 6000.0), job(2, 8, 500.0), job(3, 4, 6000.0)])
    sim.start(0, np.arange(8))
    sim.start(1, np.arange(8, 12))
    assert reservation(sim.decision_state(), 2) == (pytest.approx(6000.0), 0)
    cset = decision(sim)
    assert chosen(cset, make_baseline("easy").select(cset.state, cset)) == (3, "topology", [12, 13, 14, 15])


def test_easy_counts_only_gpus_with_the_heads_memory_and_waits_when_the_backfill_would_delay_it() -> None:
    """As in the exact-shadow case, but job 3 needs 7,000 s (past the shadow time) and the head
    needs exactly the GPUs' 80 GB: all 4 of job 3's GPUs are ones the head needs (80 >= 80) and
    none are spare, so EASY waits."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1e6), job(1, 8, 3000.0), job(2, 12, 500.0, mem=80.0), job(3, 4, 7000.0)])
    sim.start(0, np.arange(4))
    sim.start(1, np.arange(8, 16))
    cset = decision(sim)
    assert chosen(cset, make_baseline("easy").select(cset.state, cset)) == ("wait",)


def test_easy_reservation_is_infinite_when_the_head_can_never_fit() -> None:
    """A head of 17 GPUs on a 16-GPU cluster: no running job's end frees enough: (inf, 0)."""
    sim = Simulator(TWO_SPEEDS, [job(0, 4, 1000.0), job(1, 17, 500.0)])
    sim.start(0, np.arange(4))
    assert reservation(sim.decision_state(), 1) == (float("inf"), 0)


def test_easy_reservation_adds_the_restore_a_restarted_job_still_owes() -> None:
    """Job 0 (low priority, 8 H100s, 1,000 s) is preempted at 100 s by job 1 (high priority, the
    same GPUs, 200 s): it checkpoints for 10 s, job 1 runs from 110 s to 310 s, and job 0 restarts
    at 310 s owing its 20 s restore. Its estimated end is 310 + 20 + (1,000 - 100) = 1,230 s. The
    head, job 2 (16 GPUs), has the 8 free A100s now and job 0's 8 H100s then: shadow 1,230 s."""
    jobs = [job(0, 8, 1000.0), job(1, 8, 200.0, arrival_s=100.0), job(2, 16, 500.0, arrival_s=100.0)]
    jobs[0] = dataclasses.replace(jobs[0], priority=PRIORITY_LOW)
    jobs[1] = dataclasses.replace(jobs[1], priority=PRIORITY_HIGH)
    sim = Simulator(TWO_SPEEDS, jobs)
    sim.start(0, np.arange(8))
    sim.advance_until(100.0)
    sim.preempt_and_start(1, np.arange(8), [0])
    while sim.num_done < 1:  # the checkpoint ends at 110 s, job 1 at 310 s
        sim.advance()
    assert sim.now == pytest.approx(310.0) and 0 in sim.queue
    sim.start(0, np.arange(8))
    state = sim.decision_state()
    assert state.restore_left_s[0] == pytest.approx(20.0)
    assert reservation(state, 2) == (pytest.approx(1230.0), 0)
