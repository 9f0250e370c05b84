"""Hand-worked states for the queue window (envs.decision.window) and the candidate set and mask
(envs.decision.candidates), for the mutation check's `window` group (tests/mutation.py). Every expected
value is worked out here from the modules' rules, never by the functions under test:

* a job class fits when the nodes' free GPUs usable in whole TP groups (free // tp * tp per node,
  on nodes whose GPUs have at least the memory asked) add up to the gang; or, after preemption,
  when they do counting also the GPUs of running preemptible jobs of strictly lower priority;
* preempt-las is valid for a job that does not fit now, when the GPUs of running preemptible jobs
  of no higher priority in a strictly lower LAS queue would make it fit (queue by attained
  GPU-s: 0 below 3600, 1 below 57600, else 2; a queued job waiting at least 4x its executed time
  is in queue 0);
* the window: the feasible jobs in queue order when at most Q, else round-robin over the heads of
  arrival, shortest remaining estimate, highest priority and least attained service (ties in
  queue order); the jobs whose only valid placement is preempt-las fill the slots left, by LAS
  queue then FIFO;
* the mask: slot k, rule r at k * 5 + r (binpack, spread, topology, preempt, preempt-las), WAIT
  last; WAIT valid while a job runs or checkpoints, and with a WaitGuard not while a startable
  window job has waited longer than max(overdue_factor x estimate, min_wait_s).

Clusters: TWO8 is two 8-GPU H100 nodes (GPUs 0-7 on n0, 8-15 on n1); MIXED one 8-GPU A100-40GB
node (GPUs 0-7) and one 8-GPU H100-80GB node (8-15). Every test runs on both paths: the compiled
one and the plain-Python reference (envs.core.jit.reference_path).
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.cluster.config import cluster_from_dict
from envs.cluster.memo import clear_cluster_memos
from envs.core.jit import reference_path
from envs.decision import candidates as _candidates
from envs.decision import window as _window
from envs.decision.candidates import WaitGuard, apply_candidate, build_candidates, num_candidates, wait_guard_of, wait_valid
from envs.decision.placement import BINPACK, PREEMPT, PREEMPT_LAS, RULES, SPREAD, TOPOLOGY
from envs.decision.state import ClusterState
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.decision.window import (
    aligned,
    can_place,
    candidate_window,
    feasible_queue,
    fit_status,
    las_fits,
    las_only_queue,
    select_window,
    shape_classes,
    shortest_head,
)
from tests.helpers import job as sim_job
from tests.helpers import toy_cluster

H = 3600.0
TWO8 = toy_cluster(2, 8)
MIXED = cluster_from_dict({
    "name": "mixed-memory",
    "node_types": {"small": {"gpu_type": "A100-40GB", "gpus": 8}, "big": {"gpu_type": "H100-80GB", "gpus": 8}},
    "nodes": [{"names": "a0", "type": "small"}, {"names": "h0", "type": "big"}],
    "switches": [{"name": "leaf0", "nodes": "a0,h0"}],
}, "mixed-memory")
R = len(RULES)


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request):
    for c in (TWO8, MIXED):  # each test registers its own job classes, on either path
        clear_cluster_memos(c)
    # The module-level tables made on first use (the shared empty-slot candidates, the preempt-las
    # count rows) are made afresh by each test, so a test sees them as its own calls make them.
    _candidates._EMPTY_SLOTS.clear()
    _window._LAS_ROWS.clear()
    if request.param == "reference":
        with reference_path():
            yield request.param
    else:
        yield request.param


def queued(name: str, gpus: int, *, tp: int = 1, mem: float = 1.0, prio: str = "normal", est: float = H,
           attained: float = 0.0, since: float = 0.0, wait: float = 0.0, done: float = 0.0) -> dict:
    return {"id": name, "num_gpus": gpus, "tp_degree": tp, "mem_per_gpu_gb": mem, "priority": prio, "estimate_s": est,
            "attained_gpu_s": attained, "queued_since_s": since, "arrival_s": min(since, 0.0), "wait_s": wait,
            "work_done_s": done}


def running(name: str, gpus: list[int], *, prio: str = "normal", preemptible: bool = True, attained: float = 0.0,
            mem: float = 1.0) -> dict:
    return {"id": name, "num_gpus": len(gpus), "gpus": gpus, "priority": prio, "preemptible": preemptible,
            "estimate_s": 1e6, "attained_gpu_s": attained, "arrival_s": 0.0, "mem_per_gpu_gb": mem}


def make(now: float, run: list[dict] = (), queue: list[dict] = (), cluster=TWO8, **sections) -> ClusterState:
    return ClusterState.from_dict({"time_s": now, "running": list(run), "queued": list(queue), **sections}, cluster)


def names(state: ClusterState, jobs) -> list[str]:
    return [state.names[int(j)] for j in jobs]


def flags(state: ClusterState, values) -> dict:
    """{queued job name: flag} for per-queue-job flags (in queue order)."""
    return dict(zip(names(state, state.queue), np.asarray(values).tolist()))


def rows(cset, slot: int) -> list[bool]:
    return cset.mask[slot * R : (slot + 1) * R].tolist()


# ---------------------------------------------------------------------- feasibility by GPU counts


def test_aligned_keeps_whole_tp_groups_per_node():
    assert aligned(np.array([6, 3, 8, 0]), 4).tolist() == [4, 0, 8, 0]
    assert aligned(np.array([6, 3, 7]), 3).tolist() == [6, 3, 6]
    assert aligned(np.array([5]), 1).tolist() == [5]


def test_a_gang_fits_only_in_whole_tp_groups_per_node():
    # n0: 6 free (GPUs 0-1 busy), n1: 3 free (8-12 busy); neither job preemptible.
    st = make(100.0, [running("r0", [0, 1], preemptible=False), running("r1", [8, 9, 10, 11, 12], preemptible=False)], [
        queued("a", 8, tp=4),  # 4 + 0 usable in groups of 4: no
        queued("b", 8, tp=2),  # 6 + 2: yes
        queued("c", 9),  # 6 + 3: yes
        queued("d", 10),  # 9 free: no
        queued("e", 4, tp=4),  # 4 on n0: yes
        queued("f", 9, tp=3),  # 6 + 3: yes
        queued("g", 12, tp=6),  # 6 + 0: no
        queued("h", 6, tp=6),  # 6 on n0: yes
    ])
    q, now, after = fit_status(st)
    assert names(st, q) == list("abcdefgh")
    assert flags(st, now) == dict(a=False, b=True, c=True, d=False, e=True, f=True, g=False, h=True)
    assert not after.any()  # nothing preemptible
    assert names(st, feasible_queue(st)) == list("bcefh")
    assert can_place(st)


def test_a_job_uses_only_nodes_with_the_memory_it_asks():
    # a0: 8 free A100-40GB; h0: 6 free H100-80GB (GPUs 8-9 busy).
    st = make(100.0, [running("r", [8, 9], preemptible=False)], [
        queued("a", 14, mem=40.0),  # both nodes: 8 + 6
        queued("b", 15, mem=40.0),  # 14 < 15
        queued("c", 6, mem=40.5),  # h0 only: 6
        queued("d", 7, mem=40.5),  # h0 only: 6 < 7
        queued("e", 6, mem=80.0),  # exactly h0's memory
        queued("f", 8, mem=10.0, tp=8),  # a0's whole node
        queued("g", 8, mem=60.0, tp=2),  # h0: 6 < 8
    ], cluster=MIXED)
    _, now, _ = fit_status(st)
    assert flags(st, now) == dict(a=True, b=False, c=True, d=False, e=True, f=True, g=False)
    assert names(st, feasible_queue(st)) == list("acef")


def test_preemption_counts_lower_priority_preemptible_jobs_only():
    # Full cluster: n0 a low preemptible job; n1 a normal job that is not preemptible (8-11) and a
    # normal preemptible one (12-15).
    run = [running("low", list(range(8)), prio="low"), running("fixed", [8, 9, 10, 11], preemptible=False),
           running("norm", [12, 13, 14, 15])]
    st = make(100.0, run, [
        queued("h8", 8, tp=8, prio="high"),  # n0's 8 (n1's 4 preemptible are not a group of 8)
        queued("h12", 12, tp=4, prio="high"),  # 8 + 4
        queued("h13", 13, prio="high"),  # the not-preemptible job's 4 never count: 12 < 13
        queued("n8", 8, prio="normal"),  # only the low job is lower: 8
        queued("n9", 9, prio="normal"),  # the other normal job is not lower: 8 < 9
        queued("l1", 1, prio="low"),  # nothing is lower than low
    ])
    _, now, after = fit_status(st)
    assert not now.any()
    assert flags(st, after) == dict(h8=True, h12=True, h13=False, n8=True, n9=False, l1=False)
    assert names(st, feasible_queue(st)) == ["h8", "h12", "n8"]


def test_preemption_is_only_for_a_job_that_does_not_fit_now():
    # 4 GPUs free on n1, a low preemptible job on n0.
    st = make(100.0, [running("low", list(range(8)), prio="low"), running("x", [8, 9, 10, 11], preemptible=False)], [
        queued("n4", 4),  # fits now: its preempt candidate is not valid
        queued("h12", 12, prio="high"),  # 4 free + the low job's 8
        queued("h4", 4, tp=4, prio="high"),  # fits now
    ])
    _, now, after = fit_status(st)
    assert flags(st, now) == dict(n4=True, h12=False, h4=True)
    assert flags(st, after) == dict(n4=False, h12=True, h4=False)
    cset = build_candidates(st, 4)
    assert names(st, cset.window) == ["n4", "h12", "h4"]
    assert rows(cset, 0) == [True, True, True, False, False]
    assert rows(cset, 1) == [False, False, False, True, False]  # the low job is in LAS queue 0: no preempt-las
    assert rows(cset, 2) == [True, True, True, False, False]
    assert rows(cset, 3) == [False] * R
    assert cset.mask[-1]  # jobs run


def test_nothing_fits_on_a_full_cluster():
    st = make(100.0, [running("a", list(range(8)), preemptible=False), running("b", list(range(8, 16)))],
              [queued("x", 1), queued("y", 2, prio="low")])
    assert len(feasible_queue(st)) == 0 and not can_place(st)
    assert select_window(st, 4) == [] and candidate_window(st, 4) == []
    cset = build_candidates(st, 2)
    assert cset.window == [] and cset.mask.tolist() == [False] * (2 * R) + [True]


# ---------------------------------------------------------------------- the four orders


# Seven feasible 1-GPU jobs (n0 GPU 0 busy: 15 free) and one 16-GPU job that never fits first in
# the queue though it heads every order. By order (ties in queue order):
#   arrival:        j0 j1 j2 j3 j4 j5 j6
#   shortest:       j1 (1000) j6 (1500) j4 (2000) j3 (3000) j2 (4000) j0 (5000, 9000 less 4000 done) j5 (6000)
#   priority:       j2 j6 (high), j0 j1 j3 j4 (normal), j5 (low)
#   least attained: j3 (0) j6 (10) j4 (50) j0 (100) j1 (200) j2 (300) j5 (400)
FOUR_ORDERS = [
    queued("big", 16, prio="high", est=10.0),
    queued("j0", 1, est=9000.0, done=4000.0, attained=100.0),
    queued("j1", 1, est=1000.0, attained=200.0),
    queued("j2", 1, prio="high", est=4000.0, attained=300.0),
    queued("j3", 1, est=3000.0),
    queued("j4", 1, est=2000.0, attained=50.0),
    queued("j5", 1, prio="low", est=6000.0, attained=400.0),
    queued("j6", 1, prio="high", est=1500.0, attained=10.0),
]
FOUR_ORDERS_RUN = [running("r", [0], prio="high", preemptible=False)]
ROUND_ROBIN = {  # Q: the window
    1: ["j0"],
    2: ["j0", "j1"],
    3: ["j0", "j1", "j2"],
    4: ["j0", "j1", "j2", "j3"],
    5: ["j0", "j1", "j2", "j3", "j4"],  # round 2: arrival's next unseen
    6: ["j0", "j1", "j2", "j3", "j4", "j6"],  # shortest's next unseen (j6; j4 was taken)
    7: ["j0", "j1", "j2", "j3", "j4", "j5", "j6"],  # every feasible job: queue order
    9: ["j0", "j1", "j2", "j3", "j4", "j5", "j6"],
}


@pytest.mark.parametrize("q", sorted(ROUND_ROBIN))
def test_the_window_takes_the_heads_of_the_four_orders_in_turn(q):
    st = make(100.0, FOUR_ORDERS_RUN, FOUR_ORDERS)
    assert names(st, select_window(st, q)) == ROUND_ROBIN[q]
    assert names(st, candidate_window(st, q)) == ROUND_ROBIN[q]  # no preempt-las-only job here
    assert names(st, build_candidates(st, q).window) == ROUND_ROBIN[q]


def test_each_order_skips_the_jobs_taken_by_the_orders_before_it():
    # One job heads arrival, shortest and priority; another heads least attained and is second
    # shortest. By order:
    #   arrival:  k0 k1 k2 k3 k4 k5
    #   shortest: k0 (100) k3 (200) k5 (300) k1 (400) k2 (500) k4 (600)
    #   priority: k0 k4 (high), k1 k2 k3 k5
    #   attained: k3 (0) k2 (5) k5 (7) then k0 k1 k4 (20)
    # Q=4: k0 (arrival); shortest k0 taken -> k3; priority k0 taken -> k4; attained k3 taken -> k2.
    # Q=5: arrival's next unseen k1.
    jobs = [queued("k0", 1, prio="high", est=100.0, attained=20.0), queued("k1", 1, est=400.0, attained=20.0),
            queued("k2", 1, est=500.0, attained=5.0), queued("k3", 1, est=200.0),
            queued("k4", 1, prio="high", est=600.0, attained=20.0), queued("k5", 1, est=300.0, attained=7.0)]
    st = make(100.0, FOUR_ORDERS_RUN, jobs)
    assert names(st, select_window(st, 4)) == ["k0", "k3", "k4", "k2"]
    assert names(st, select_window(st, 5)) == ["k0", "k3", "k4", "k2", "k1"]
    assert names(st, select_window(st, 2)) == ["k0", "k3"]


def test_ties_in_every_order_go_to_the_earlier_job_in_the_queue():
    # Ten equal jobs but for u9 (the only high one) and u8 (shortest): Q=3 takes u0 (arrival),
    # u8 (shortest), u9 (priority); Q=4 adds u1 (attained: all 0, the first not taken).
    jobs = [queued(f"u{i}", 1, est=500.0) for i in range(8)]
    jobs += [queued("u8", 1, est=100.0), queued("u9", 1, prio="high", est=500.0)]
    st = make(100.0, FOUR_ORDERS_RUN, jobs)
    assert names(st, select_window(st, 3)) == ["u0", "u8", "u9"]
    assert names(st, select_window(st, 4)) == ["u0", "u8", "u9", "u1"]
    assert names(st, select_window(st, 6)) == ["u0", "u8", "u9", "u1", "u2", "u3"]


def test_the_priority_and_attained_heads_over_a_long_queue():
    # 14 jobs, Q=3 (each order looked at to 6 deep): the priority head is the high job late in the
    # queue, the least attained the one job with no service.
    jobs = [queued(f"v{i}", 1, est=1000.0 + i, attained=100.0 + i) for i in range(14)]
    jobs[11] = queued("v11", 1, prio="high", est=5000.0, attained=900.0)
    jobs[12] = queued("v12", 1, est=4000.0, attained=0.0)
    jobs[9] = queued("v9", 1, est=50.0, attained=950.0)
    st = make(100.0, FOUR_ORDERS_RUN, jobs)
    assert names(st, select_window(st, 3)) == ["v0", "v9", "v11"]
    assert names(st, select_window(st, 4)) == ["v0", "v9", "v11", "v12"]
    # Round 2: arrival v1; shortest v1 taken -> v2 (1002); priority: all normal ones in queue
    # order, v0 v1 v2 taken -> v3; attained: v12 taken, then v0 (100) v1 v2 v3 taken -> v4 (104).
    assert names(st, select_window(st, 8)) == ["v0", "v9", "v11", "v12", "v1", "v2", "v3", "v4"]


def test_the_window_when_the_shortest_feasible_jobs_are_far_down_the_sorted_queue():
    # 300 short 16-GPU jobs that cannot fit come first by remaining estimate (more than the 256
    # walked): the shortest order is sorted from the feasible jobs instead; same window.
    blocked = [queued(f"x{i}", 16, est=1.0 + i) for i in range(300)]
    st = make(100.0, FOUR_ORDERS_RUN, blocked + FOUR_ORDERS[1:])
    for q in (4, 6):
        assert names(st, select_window(st, q)) == ROUND_ROBIN[q]
    assert shortest_head(st, 2) is None


def test_shortest_head_walks_the_sorted_queue_up_to_its_limit():
    # By remaining estimate: x1 (10, blocked) x2 (20, blocked) a (30) x3 (40, blocked) b (50) c (60).
    st = make(100.0, FOUR_ORDERS_RUN, [queued("c", 1, est=60.0), queued("x3", 16, est=40.0), queued("b", 2, est=50.0),
                                       queued("x2", 16, est=20.0), queued("a", 1, est=30.0), queued("x1", 16, est=10.0)])
    assert names(st, shortest_head(st, 2, walk_limit=5)) == ["a", "b"]
    assert names(st, shortest_head(st, 3, walk_limit=5)) == ["a", "b", "c"]
    assert names(st, shortest_head(st, 9, walk_limit=5)) == ["a", "b", "c"]
    # It gives up at a blocked job with more than walk_limit blocked ones before it in the walk.
    assert shortest_head(st, 1, walk_limit=0) is None  # x2, with x1 before it
    assert names(st, shortest_head(st, 1, walk_limit=1)) == ["a"]  # x2 has one before it: not more than 1
    assert shortest_head(st, 2, walk_limit=1) is None  # x3, with x1 and x2 before it
    assert names(st, shortest_head(st, 2, walk_limit=2)) == ["a", "b"]


# ---------------------------------------------------------------------- preempt-las


def las_state(now: float = 20000.0) -> ClusterState:
    # Full cluster of normal preemptible jobs: r2 on n0 in LAS queue 2 (3 h x 8 GPUs = 86400
    # GPU-s), r1 on n1 in queue 1 (7200 GPU-s).
    run = [running("r2", list(range(8)), attained=86400.0), running("r1", list(range(8, 16)), attained=7200.0)]
    return make(now, run, [
        queued("a", 8),  # queue 0: r2 and r1 are victims (16)
        queued("b", 8, attained=28800.0, since=now - 100.0),  # queue 1 (executed 3600 s, waited 100 s): r2 (8)
        queued("c", 16, attained=28800.0, since=now - 100.0),  # queue 1: r2's 8 < 16
        queued("d", 8, attained=576000.0, since=now - 100.0),  # queue 2, the last: no victims
        queued("e", 16),  # queue 0: 16
        queued("f", 8, attained=28800.0, since=now - 4 * H),  # waited 4 x its executed 3600 s: queue 0
        queued("g", 8, prio="low"),  # every running job has a higher priority
        queued("h", 8, prio="high"),  # fits by the preempt rule: not a preempt-las-only job
        queued("i", 4, tp=4, attained=28800.0, since=now - 4 * H + 1.0),  # just short of starving: queue 1, r2's 8
    ])


def test_preempt_las_validity_follows_the_las_queues():
    st = las_state()
    expected = dict(a=True, b=True, c=False, d=False, e=True, f=True, g=False, h=True, i=True)
    assert flags(st, las_fits(st, st.queue)) == expected
    assert las_fits(st, []).tolist() == []


def test_preempt_las_only_jobs_fill_the_slots_left_by_las_queue_then_fifo():
    st = las_state()
    assert names(st, feasible_queue(st)) == ["h"]
    assert names(st, las_only_queue(st)) == ["a", "e", "f", "b", "i"]  # queue 0 then queue 1, FIFO in each
    assert can_place(st)
    assert names(st, candidate_window(st, 3)) == ["h", "a", "e"]
    assert names(st, candidate_window(st, 8)) == ["h", "a", "e", "f", "b", "i"]
    assert names(st, select_window(st, 8)) == ["h"]
    cset = build_candidates(st, 4)
    assert names(st, cset.window) == ["h", "a", "e", "f"]
    assert rows(cset, 0) == [False, False, False, True, True]  # h: r1 and r2 are lower and in lower LAS queues
    for slot in (1, 2, 3):
        assert rows(cset, slot) == [False, False, False, False, True]
    assert cset.valid_placements() == [PREEMPT, PREEMPT_LAS, R + PREEMPT_LAS, 2 * R + PREEMPT_LAS, 3 * R + PREEMPT_LAS]
    assert cset.valid_placements(preempting=False) == []
    # The preempt-las victims: the most attained first until the gang fits (a: r2 alone, on n0;
    # e: both); b, in queue 1, may take r2 only.
    for slot, victims, gpus in ((1, ["r2"], range(8)), (2, ["r2", "r1"], range(16)), (3, ["r2"], range(8))):
        cd = cset.candidates[slot * R + PREEMPT_LAS]
        assert names(st, cd.victims) == victims and sorted(cd.gpus.tolist()) == list(gpus)
    # Without the preempt-las rule: the window the other rules have, no preempt-las candidate.
    cset = build_candidates(st, 4, preempt_las=False)
    assert names(st, cset.window) == ["h"]
    assert rows(cset, 0) == [False, False, False, True, False] and not cset.mask[R:-1].any()


def test_preempt_las_counts_whole_tp_groups_and_the_victims_priority():
    # n0: r2 (queue 2, preemptible) on GPUs 0-5, a not-preemptible job on 6-7; n1 full with a
    # high job in queue 2.
    run = [running("r2", list(range(6)), attained=86400.0), running("fixed", [6, 7], preemptible=False, attained=1e6),
           running("hi", list(range(8, 16)), prio="high", attained=1e6)]
    st = make(20000.0, run, [
        queued("t4", 8, tp=4),  # r2's 6 GPUs hold one group of 4: no
        queued("t2", 6, tp=2),  # 6: yes
        queued("t3", 6, tp=3),  # 6: yes
        queued("t7", 7),  # 6 < 7 (hi is of a higher class)
    ])
    assert flags(st, las_fits(st, st.queue)) == dict(t4=False, t2=True, t3=True, t7=False)
    assert names(st, las_only_queue(st)) == ["t2", "t3"]


def test_no_preempt_las_while_every_running_job_is_in_the_first_las_queue():
    run = [running("r0", list(range(8)), attained=3599.0), running("r1", list(range(8, 16)), attained=0.0)]
    st = make(20000.0, run, [queued("a", 8), queued("b", 1)])
    assert not las_fits(st, st.queue).any()
    assert len(las_only_queue(st)) == 0 and not can_place(st)
    # At the threshold a job is in the lower queue: r0 with 3600 GPU-s is a victim.
    run[0] = running("r0", list(range(8)), attained=3600.0)
    st = make(20000.0, run, [queued("a", 8), queued("b", 9)])
    assert flags(st, las_fits(st, st.queue)) == dict(a=True, b=False)
    assert names(st, las_only_queue(st)) == ["a"]


def test_not_preemptible_jobs_are_never_preempt_las_victims():
    run = [running("r0", list(range(8)), attained=86400.0, preemptible=False),
           running("r1", list(range(8, 16)), attained=86400.0, preemptible=False)]
    st = make(20000.0, run, [queued("a", 8)])
    assert not las_fits(st, st.queue).any() and len(las_only_queue(st)) == 0


# ---------------------------------------------------------------------- the mask and WAIT


def test_the_mask_layout_and_the_candidates_it_describes():
    # n0 full with a low preemptible job; n1 free.
    st = make(100.0, [running("low", list(range(8)), prio="low")], [
        queued("p", 4, est=500.0, done=100.0),  # fits now
        queued("q", 12, prio="high", est=700.0),  # only by preempting the low job
    ])
    cset = build_candidates(st, 3)
    wait = cset.candidates[-1]  # first access from the end: WAIT
    assert (wait.job_id, wait.rule, wait.valid) == (-1, -1, True) and cset.candidates[-1] is wait
    assert cset.candidates[0] is cset.candidates[0]  # made once, then kept
    assert cset.mask.dtype == bool
    assert len(cset.mask) == len(cset.candidates) == num_candidates(3) == 3 * R + 1
    assert cset.wait_index == 3 * R and cset.index(1, PREEMPT) == R + PREEMPT
    assert names(st, cset.window) == ["p", "q"]
    assert np.flatnonzero(cset.mask).tolist() == [0, 1, 2, R + PREEMPT, 3 * R]
    assert cset.valid_placements() == [0, 1, 2, R + PREEMPT]
    assert cset.valid_placements(preempting=True) == [R + PREEMPT]
    assert cset.valid_placements(preempting=False) == [0, 1, 2]
    assert cset.remaining_estimates() == [400.0, 700.0]
    for i, cd in enumerate(cset.candidates):
        if i == cset.wait_index:
            assert (cd.job_id, cd.rule, cd.valid) == (-1, -1, True)
        elif i >= 2 * R:  # the empty slot
            assert (cd.job_id, cd.rule, cd.valid) == (-1, i % R, False)
            assert cd.gpus is None and cd.victims == ()
        else:
            assert (st.names[cd.job_id], cd.rule, cd.valid) == (["p", "q"][i // R], i % R, bool(cset.mask[i]))
    assert cset.candidates[-1] is cset.candidates[cset.wait_index]
    assert [cd.rule for cd in cset.candidates[R : 2 * R]] == list(range(R))
    # The placements: p on n1's free GPUs; q on all of n1 and 4 of n0, preempting the low job.
    for rule in (BINPACK, SPREAD, TOPOLOGY):
        cd = cset.candidates[rule]
        assert set(cd.gpus.tolist()) <= set(range(8, 16)) and len(cd.gpus) == 4 and cd.victims == ()
        assert cd.geometry.nodes.tolist() == [1] and cd.geometry.gpus_on_node.tolist() == [4]
        assert cd.profile is not None
    cd = cset.candidates[R + PREEMPT]
    assert len(set(cd.gpus.tolist())) == 12 and len(set(cd.gpus.tolist()) & set(range(8))) >= 4
    assert names(st, cd.victims) == ["low"]
    invalid = cset.candidates[R + BINPACK]
    assert invalid.gpus is None and invalid.victims == () and invalid.geometry is None and invalid.profile is None


def test_same_shape_jobs_with_different_memory_get_their_own_placements():
    # a0 has 6 free A100-40GB GPUs, h0 8 free H100-80GB: binpack puts the 40 GB job on a0 (fewer
    # free), the 60 GB one can only go to h0.
    st = make(100.0, [running("r", [0, 1], preemptible=False)], [queued("m40", 4, mem=40.0), queued("m60", 4, mem=60.0)],
              cluster=MIXED)
    cset = build_candidates(st, 2)
    assert set(cset.candidates[BINPACK].gpus.tolist()) <= set(range(2, 8))
    for rule in (BINPACK, SPREAD, TOPOLOGY):  # the 40 GB job's placements first (memoised by shape)
        assert len(cset.candidates[rule].gpus) == 4
    for rule in (BINPACK, SPREAD, TOPOLOGY):
        assert set(cset.candidates[R + rule].gpus.tolist()) <= set(range(8, 16)), RULES[rule]


def test_same_shape_jobs_of_different_priority_get_their_own_victims():
    # Full cluster: a low job on one node, a normal one on the other; a high and a normal 8-GPU
    # job wait.
    # The high job may take either (its choice resolved first); the normal job only the low one.
    for low_on, state_run in (("n0", [running("a", list(range(8)), prio="low"), running("b", list(range(8, 16)))]),
                              ("n1", [running("a", list(range(8))), running("b", list(range(8, 16)), prio="low")])):
        st = make(100.0, state_run, [queued("n", 8, tp=8), queued("hi", 8, tp=8, prio="high")])
        cset = build_candidates(st, 2)
        assert rows(cset, 0)[PREEMPT] and rows(cset, 1)[PREEMPT]
        assert names(st, cset.candidates[R + PREEMPT].victims) in (["a"], ["b"])
        assert names(st, cset.candidates[PREEMPT].victims) == (["a"] if low_on == "n0" else ["b"])


def test_wait_is_valid_only_while_a_job_runs_or_checkpoints():
    idle = make(100.0, [], [queued("a", 1)])
    assert not wait_valid(idle) and not build_candidates(idle, 2).mask[-1]
    assert not build_candidates(idle, 2).candidates[2 * R].valid  # the WAIT candidate says so too
    busy = make(100.0, [running("r", [0])], [queued("a", 1)])
    assert wait_valid(busy) and build_candidates(busy, 2).mask[-1]
    saving = make(100.0, [], [queued("a", 1)], checkpointing=[
        {"id": "c", "num_gpus": 2, "gpus": [0, 1], "estimate_s": 1e4, "arrival_s": 0.0, "checkpoint_end_s": 130.0}])
    assert wait_valid(saving) and build_candidates(saving, 2).mask[-1]


def test_the_wait_guard_bound_is_the_larger_of_its_two_terms_and_strict():
    g = WaitGuard(2.0, 1000.0)

    def wait_ok(now: float, est: float, since: float = 0.0, wait: float = 0.0, gpus: int = 1, guard=g) -> bool:
        st = make(now, [running("r", [0], prio="high", preemptible=False)],
                  [queued("a", gpus, est=est, since=since, wait=wait)])
        return bool(build_candidates(st, 2, wait_guard=guard).mask[-1])

    assert wait_ok(1000.0, 100.0) and not wait_ok(1000.5, 100.0)  # min_wait_s 1000 > 2 x 100
    assert wait_ok(3000.0, 1500.0) and not wait_ok(3000.5, 1500.0)  # 2 x 1500 > 1000
    assert not wait_ok(3000.5, 1500.0, since=500.0, wait=501.0)  # 501 before + 2500.5 now
    assert wait_ok(3000.5, 1500.0, since=500.0, wait=499.0)
    assert wait_ok(1e6, 100.0, gpus=16)  # long overdue but it does not fit: WAIT stays
    assert not wait_ok(1001.0, 100.0, guard=WaitGuard(0.5, 0.0)) and wait_ok(50.0, 100.0, guard=WaitGuard(0.5, 0.0))
    assert not wait_ok(0.0, 100.0, since=-1.0, guard=WaitGuard(1e-9, 0.0))  # a wait of 1 s > 1e-7


# ---------------------------------------------------------------------- on a simulator


def test_candidates_on_a_simulator_and_what_applying_them_does():
    jobs = [sim_job(0, 0.0, 8, 1000.0, tp=8), sim_job(1, 0.0, 16, 500.0, tp=8), sim_job(2, 0.0, 4, 2000.0),
            sim_job(3, 10.0, 8, 3000.0, tp=8, priority=2)]
    sim = Simulator(TWO8, jobs)
    cset = advance_to_decision(sim, 2)
    # t=0, idle cluster: the window is jobs 0, 1 (the shortest, 1, is also second by arrival);
    # everything fits now and nothing runs, so WAIT is not valid.
    assert sim.now == 0.0 and cset.window == [0, 1]
    assert np.flatnonzero(cset.mask).tolist() == [0, 1, 2, R, R + 1, R + 2]
    with pytest.raises(ValueError, match=r"^action 10 is not a valid candidate \(mask: \[0, 1, 2, 5, 6, 7\]\)$"):
        apply_candidate(sim, cset, cset.wait_index)
    with pytest.raises(ValueError, match="not a valid candidate"):
        apply_candidate(sim, cset, len(cset.candidates))
    apply_candidate(sim, cset, cset.index(0, BINPACK))  # job 0 on one node
    assert sim.running.tolist() == [0] and len(sim.placement[0]) == 8
    cset = advance_to_decision(sim, 2)
    # Job 1 (16 GPUs) no longer fits; job 2 does; WAIT is valid now.
    assert sim.now == 0.0 and cset.window == [2]
    assert np.flatnonzero(cset.mask).tolist() == [0, 1, 2, 2 * R]
    apply_candidate(sim, cset, cset.wait_index)  # to the next event: job 3 arrives at 10 s
    cset = advance_to_decision(sim, 2)
    assert sim.now == 10.0 and cset.window == [2, 3]
    apply_candidate(sim, cset, cset.index(1, BINPACK))  # job 3 takes the other node's 8
    cset = advance_to_decision(sim, 2)
    # Job 2 (4 GPUs) has no free GPU left and the running jobs are of its class or higher: no
    # decision until job 0 ends at 1000 s.
    assert sim.now == 1000.0 and cset.window == [2]


def test_the_preempt_las_victims_depend_on_the_jobs_priority():
    # n0 a high preemptible job, n1 a normal one, both in LAS queue 2. Two 8-GPU jobs of queue 0:
    # the high one may take the high job (the most attained), the normal one only the normal job.
    run = [running("H", list(range(8)), prio="high", attained=1e6), running("N", list(range(8, 16)), attained=86400.0)]
    st = make(20000.0, run, [queued("hi", 8, tp=8, prio="high"), queued("n", 8, tp=8)])
    cset = build_candidates(st, 2)
    assert names(st, cset.window) == ["hi", "n"]
    assert rows(cset, 0) == [False, False, False, True, True] and rows(cset, 1) == [False] * 4 + [True]
    assert names(st, cset.candidates[PREEMPT_LAS].victims) == ["H"]  # resolved first
    assert names(st, cset.candidates[R + PREEMPT_LAS].victims) == ["N"]
    assert names(st, cset.candidates[PREEMPT].victims) == ["N"]  # the preempt rule: lower priority only


def test_preempt_las_validity_of_jobs_that_fit_now_and_of_high_jobs_in_the_last_queue():
    # n0: 2 free GPUs, r2 (queue 2) on 0-5; n1 full with a normal job of queue 2.
    run = [running("r2", list(range(6)), attained=86400.0), running("n1", list(range(8, 16)), attained=86400.0)]
    st = make(20000.0, run, [
        queued("s", 2),  # fits now: not preempt-las
        queued("a", 8, tp=8),  # n0 (2 free + 6) or n1: yes
        queued("hq2", 8, tp=8, prio="high", attained=1e7, since=19900.0),  # queue 2: no LAS victims
        queued("lo", 4, prio="low"),  # 2 free < 4, and every running job is of a higher class: no
    ])
    assert flags(st, las_fits(st, st.queue)) == dict(s=False, a=True, hq2=False, lo=False)
    assert names(st, las_only_queue(st)) == ["a"]


def test_many_preempt_las_only_jobs_keep_fifo_order_inside_each_las_queue():
    # 20 one-GPU jobs, none fits by the other rules; even ones in LAS queue 1 (attained 2 GPU-h,
    # waited 100 s), odd ones in queue 0; r2 (queue 2) holds every GPU.
    run = [running("r2", list(range(16)), attained=1e6)]
    jobs = [queued(f"z{i}", 1, attained=7200.0 if i % 2 == 0 else 0.0, since=19900.0) for i in range(20)]
    st = make(20000.0, run, jobs)
    want = [f"z{i}" for i in range(1, 20, 2)] + [f"z{i}" for i in range(0, 20, 2)]
    assert names(st, las_only_queue(st)) == want
    assert names(st, candidate_window(st, 12)) == want[:12]


def test_the_priority_order_read_past_its_head_over_a_long_queue():
    # 16 jobs, Q=7 (each order looked at to 14 deep). By order:
    #   shortest: w10 (50) w0 w1 ... w9 w11 w12 w15 (1000 + i), w14 (4000), w13 (5000)
    #   priority: w13 (high), then w0 ... w12 w14 w15 in queue order
    #   attained: w14 (0) w0 w1 w2 (100 + i) w4 ... (100 + i) w3 (500) w13 (900) w10 (950)
    # Round 1: w0 w10 w13 w14; round 2: arrival w1, shortest w2, priority w3 (w0 w1 w2 taken).
    jobs = [queued(f"w{i}", 1, est=1000.0 + i, attained=100.0 + i) for i in range(16)]
    jobs[3] = queued("w3", 1, est=1003.0, attained=500.0)
    jobs[10] = queued("w10", 1, est=50.0, attained=950.0)
    jobs[13] = queued("w13", 1, prio="high", est=5000.0, attained=900.0)
    jobs[14] = queued("w14", 1, est=4000.0, attained=0.0)
    st = make(100.0, FOUR_ORDERS_RUN, jobs)
    assert names(st, select_window(st, 7)) == ["w0", "w10", "w13", "w14", "w1", "w2", "w3"]
    # Q=6 (each order to 12 deep): round 2 takes w1 (arrival), w2 (shortest).
    assert names(st, select_window(st, 6)) == ["w0", "w10", "w13", "w14", "w1", "w2"]


def test_running_jobs_are_preempt_las_victims_by_their_service_alone():
    # X (16 GPUs) waits 1000 s behind B, then runs: at 1200 s it has 3200 GPU-s (queue 0), at
    # 1300 s 4800 (queue 1). Its long wait before it started never promotes a running job back
    # to queue 0, so at 1300 s the queued jobs of queue 0 may preempt it: Z (arrived at 1200 s)
    # and Y (1300 s), in FIFO order.
    jobs = [sim_job(0, 0.0, 16, 1000.0, tp=8), sim_job(1, 0.0, 16, 1e5, tp=8), sim_job(2, 1200.0, 16, 100.0, tp=8),
            sim_job(3, 1300.0, 16, 100.0, tp=8)]
    sim = Simulator(TWO8, jobs)
    cset = advance_to_decision(sim, 2)
    assert cset.window == [0, 1]
    apply_candidate(sim, cset, cset.index(0, BINPACK))
    cset = advance_to_decision(sim, 2)
    assert sim.now == 1000.0 and cset.window == [1]
    apply_candidate(sim, cset, cset.index(0, BINPACK))
    cset = advance_to_decision(sim, 2)
    assert sim.now == 1300.0 and cset.window == [2, 3]
    assert rows(cset, 0) == rows(cset, 1) == [False] * 4 + [True]


def test_applying_a_preemption_checkpoints_the_victim_and_reserves_its_gpus():
    # A low job fills n0, n1 is free; a high 16-GPU job arrives at 5 s.
    jobs = [sim_job(0, 0.0, 8, 1e4, tp=8, priority=0), sim_job(1, 5.0, 16, 100.0, tp=8, priority=2, checkpoint_s=10.0)]
    sim = Simulator(TWO8, jobs)
    cset = advance_to_decision(sim, 1)
    apply_candidate(sim, cset, cset.index(0, BINPACK))
    cset = advance_to_decision(sim, 1)
    assert sim.now == 5.0 and cset.window == [1] and rows(cset, 0) == [False, False, False, True, False]
    apply_candidate(sim, cset, cset.index(0, PREEMPT))
    assert sim.checkpointing == [0] and sim.reserved == [1] and sim.running.tolist() == []
    assert sorted(sim.placement[1].tolist()) == list(range(16))


def test_a_guard_is_made_from_each_of_its_forms():
    assert wait_guard_of(None) is None and wait_guard_of(False) is None
    assert wait_guard_of(" OFF ") is None and wait_guard_of("None") is None
    g = WaitGuard(2.0, 60.0)
    assert wait_guard_of(g) is g
    assert wait_guard_of("2") == wait_guard_of(2) == wait_guard_of({"overdue_factor": 2}) == WaitGuard(2.0, 3600.0)
    assert wait_guard_of(" overdue_factor = 2 , min_wait_s = 60 ") == g == wait_guard_of({"overdue_factor": 2, "min_wait_s": 60})
    assert wait_guard_of("min_wait_s=60,overdue_factor=2") == g
    made = wait_guard_of(2)
    assert type(made.overdue_factor) is float and type(made.min_wait_s) is float
    assert WaitGuard(1, 0).to_dict() == {"overdue_factor": 1.0, "min_wait_s": 0.0}
    assert type(WaitGuard(1, 0).overdue_factor) is float and type(WaitGuard(1, 0).min_wait_s) is float
    assert str(WaitGuard(0.5, 90)) == "overdue_factor=0.5,min_wait_s=90"


@pytest.mark.parametrize("value, message", [
    (True, "wait_guard: must be null, 'off', a number or a mapping with overdue_factor and min_wait_s, got bool"),
    ([1], "wait_guard: must be null, 'off', a number or a mapping with overdue_factor and min_wait_s, got list"),
    ("soon", "wait_guard: 'soon' is not 'off', a number (the overdue factor) or overdue_factor=K,min_wait_s=S"),
    ("patience=3", "wait_guard: 'patience=3' is not KEY=VALUE with KEY one of overdue_factor, min_wait_s"),
    ("overdue_factor=x", "wait_guard.overdue_factor: must be a number, got 'x'"),
    ("overdue_factor=1=2", "wait_guard.overdue_factor: must be a number, got '1=2'"),  # split at the first '='
    ("min_wait_s=5", "wait_guard.overdue_factor: required"),
    ({"overdue_factor": 1, "b": 1, "a": 2}, "wait_guard: unknown key 'a' (known: overdue_factor, min_wait_s)"),
    ({"min_wait_s": 5}, "wait_guard.overdue_factor: required"),
    (0, "wait_guard.overdue_factor: must be > 0, got 0"),
    ("0", "wait_guard.overdue_factor: must be > 0, got 0.0"),
    ({"overdue_factor": 1, "min_wait_s": -1}, "wait_guard.min_wait_s: must be >= 0, got -1"),
    (float("inf"), "wait_guard.overdue_factor: must be a finite number, got inf"),
    ({"overdue_factor": True}, "wait_guard.overdue_factor: must be a finite number, got True"),
    ({"overdue_factor": "1"}, "wait_guard.overdue_factor: must be a finite number, got '1'"),
])
def test_a_bad_guard_is_refused_with_the_field_named(value, message):
    with pytest.raises(ValueError) as e:
        wait_guard_of(value)
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:
        wait_guard_of(value, "env.wait_guard")
    assert str(e.value) == "env." + message


def test_the_guards_fields_are_checked_when_it_is_made():
    for bad, message in ((dict(overdue_factor=0.0), "wait_guard.overdue_factor: must be > 0, got 0.0"),
                         (dict(overdue_factor=1.0, min_wait_s=-0.5), "wait_guard.min_wait_s: must be >= 0, got -0.5"),
                         (dict(overdue_factor=float("nan")), "wait_guard.overdue_factor: must be a finite number, got nan"),
                         (dict(overdue_factor=1.0, min_wait_s=False), "wait_guard.min_wait_s: must be a finite number, got False")):
        with pytest.raises(ValueError) as e:
            WaitGuard(**bad)
        assert str(e.value) == message
    assert WaitGuard(1e-12, 0.0).min_wait_s == 0.0


def test_preemption_on_a_cluster_of_two_memory_sizes():
    # a0 (A100-40GB) full with a low preemptible job; h0 (H100-80GB) full with a normal job that
    # is not preemptible. Only a0's GPUs can be freed, and only for jobs asking at most 40 GB.
    run = [running("low", list(range(8)), prio="low"), running("fixed", list(range(8, 16)), preemptible=False)]
    st = make(100.0, run, [
        queued("h40", 8, mem=40.0, prio="high"),
        queued("h40tp8", 8, tp=8, mem=40.0, prio="high"),
        queued("h60", 4, mem=60.0, prio="high"),  # h0 only
        queued("n40", 4, tp=4, mem=20.0),  # normal: the low job is lower
        queued("n40x", 9, mem=20.0),  # 8 < 9
        queued("l40", 1, mem=20.0, prio="low"),
    ], cluster=MIXED)
    _, now, after = fit_status(st)
    assert not now.any()
    assert flags(st, after) == dict(h40=True, h40tp8=True, h60=False, n40=True, n40x=False, l40=False)


def test_an_empty_state_has_no_candidates_and_no_wait():
    st = make(0.0)
    assert len(feasible_queue(st)) == 0 and not can_place(st) and len(las_only_queue(st)) == 0
    assert select_window(st, 2) == [] and candidate_window(st, 2) == []
    q, now, after = fit_status(st)
    assert len(q) == len(now) == len(after) == 0
    cset = build_candidates(st, 2)
    assert cset.window == [] and not cset.mask.any() and len(cset.mask) == 2 * R + 1
    assert cset.remaining_estimates() == [] and cset.valid_placements() == []


def test_a_job_asking_more_memory_than_any_gpu_has_never_fits():
    # TWO8's GPUs have 80 GB; the job asks 100 GB per GPU: no node can host it, so none of its
    # candidates is valid (and a valid one would have no placement: Candidate.gpus raises).
    st = make(100.0, [running("r", [0])], [queued("big-mem", 2, mem=100.0)])
    _, now, after = fit_status(st)
    assert not now.any() and not after.any()
    assert not build_candidates(st, 2).mask[:-1].any()


def test_shape_classes_follow_the_classes_registered_on_the_cluster():
    # The compiled event loop's input: each shape's class (classes numbered in order of first
    # appearance on the cluster), -1 for a shape no job of the cluster has had yet.
    sim = Simulator(TWO8, [sim_job(0, 0.0, 16, 1000.0, tp=8), sim_job(1, 100.0, 4, 100.0)])
    state = sim.decision_state()
    shapes = sim.job_shapes()[1]
    assert shapes == [(16, 8, 40.0, 1), (4, 1, 40.0, 1)]
    assert shape_classes(state, shapes) is None  # no class registered yet
    feasible_queue(state)  # registers job 0's class
    classes, _ = shape_classes(state, shapes)
    assert classes.tolist() == [0, -1]
    # Another state on the cluster registers the 4-GPU shape: the same state object sees it.
    other = make(0.0, [], [queued("x", 2), queued("y", 4, mem=40.0)])
    feasible_queue(other)
    assert shape_classes(state, shapes)[0].tolist() == [0, 2]  # x's shape (2 GPUs, 1 GB) is class 1
    assert shape_classes(state, shapes[:1])[0].tolist() == [0]  # another shape list
    mine = list(shapes)
    assert shape_classes(state, mine)[0].tolist() == [0, 2]
    mine.append((2, 1, 1.0, 1))  # the same list, grown (as a simulator's shapes grow)
    assert shape_classes(state, mine)[0].tolist() == [0, 2, 1]
