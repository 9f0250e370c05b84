"""Segment requests (`Job.segment_gpus`) worked by hand on decision states: the placement rules
on GB200 NVL72 racks and on leaves of DGX nodes, the window's count in whole segments per block,
the simulator's refusal of a segment across blocks, and the `block` baseline's choice (Slurm's
smallest fitting block for each segment; its level rule kept for the jobs without segments).
The rules on per-node counts are in tests/test_segment_rules.py.

The GB200 clusters number trays 18 to a rack (rack r: nodes 18r..18r+17, tray n: GPUs
4n..4n+3); on gb200-nvl72-4rack racks 0-1 are under leaf0, racks 2-3 under leaf1."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.cluster.memo import clear_cluster_memos
from envs.core.jit import reference_path
from envs.decision import placement as P
from envs.decision.candidates import build_candidates
from envs.decision.window import class_fits, job_classes
from envs.jobs import Job, JobKind
from envs.sim.simulator import SchedulingError, Simulator
from tests.helpers import trays
from tests.test_segment_rules import MIXED, PATHS, _path

NVL72_4 = load_cluster("gb200-nvl72-4rack")
STRESS = load_cluster("topo-stress-128gpu")


def _job(job_id: int, gpus: int, tp: int = 1, segment: int = 0, *, priority: int = 1, preemptible: bool = True,
         mem: float = 1.0, work_s: float = 3600.0, kind: JobKind = JobKind.PRETRAIN) -> Job:
    return Job(job_id=job_id, arrival_s=0.0, kind=kind, gpus=gpus, tp_degree=tp, mem_per_gpu_gb=mem, work_s=work_s,
               estimate_s=work_s, comm_fraction=0.3, tp_comm_share=0.5, priority=priority, preemptible=preemptible,
               segment_gpus=segment)


def _state(cluster, busy: list[list[int]], queued: list[tuple], *, filler_priority: int = 0):
    """A simulator at time 0 where one preemptible job (priority `filler_priority`) holds each list
    of `busy` GPUs and the jobs `queued` ((gpus, tp, segment), priority normal) wait; its
    decision state."""
    clear_cluster_memos(cluster)
    jobs = [_job(i, len(g), work_s=1e6, priority=filler_priority, kind=JobKind.BATCH) for i, g in enumerate(busy)]
    jobs += [_job(len(busy) + k, *shape) for k, shape in enumerate(queued)]
    sim = Simulator(cluster, jobs)
    for i, g in enumerate(busy):
        sim.start(i, np.array(g))
    return sim, sim.decision_state()


def _racks(gpus: np.ndarray) -> list[int]:
    return sorted(set((NVL72_4.gpu_node[gpus] // 18).tolist()))


def _place(state, j: int, rule: int) -> np.ndarray | None:
    return P.place(state, int(state.num_gpus[j]), int(state.tp_degree[j]), float(state.mem_per_gpu_gb[j]), rule,
                   segment=state.segment_of(j))




def test_a_gang_waits_when_no_two_racks_hold_a_segment_each():
    """128 GPUs in TP-16 groups (four trays each), segments of 64 (16 trays). Racks 0, 1 and 3
    have 12 whole trays free (48 GPUs), rack 2 has 16 (64): 208 GPUs and 13 whole groups free, so
    the gang fits without segments; with them only rack 2 holds one: every rule finds nothing,
    the class does not fit, and the job waits."""
    busy = [trays(range(0, 6)), trays(range(18, 24)), trays(range(36, 38)), trays(range(54, 60))]
    _, st = _state(NVL72_4, busy, [(128, 16, 64), (128, 16, 0)])
    seg, plain = len(busy), len(busy) + 1
    with reference_path():
        fits_now, fits_preempt, _, _ = class_fits(st)
        classes = job_classes(st)
        assert not fits_now[classes[seg]] and fits_now[classes[plain]]
        assert fits_preempt[classes[seg]]  # preempting the low-priority fillers frees whole racks
        for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
            assert _place(st, seg, rule) is None
            assert _place(st, plain, rule) is not None
        victims = P.choose_victims(st, seg)
        assert victims is not None and NVL72_4.segment_straddles(victims[0], 64) is None


def test_two_racks_under_one_leaf_take_a_segment_each():
    """As above with rack 3 at 16 whole trays too: racks 2 and 3 (leaf1) hold a segment each.
    No rack holds both, so topology takes leaf1's subtree; binpack (the smallest fitting rack
    first, lowest id on ties) and spread take the same two racks. Each segment is its rack's
    first 16 free trays, in four TP groups of four trays."""
    busy = [trays(range(0, 6)), trays(range(18, 24)), trays(range(36, 38)), trays(range(54, 56))]
    _, st = _state(NVL72_4, busy, [(128, 16, 64)])
    j = len(busy)
    expected = trays(range(38, 54)) + trays(range(56, 72))
    for path in (reference_path, None):
        with path() if path else contextlib.nullcontext():
            for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
                gpus = _place(st, j, rule)
                assert gpus.tolist() == expected, rule


def test_each_rule_distributes_segments_over_racks_its_own_way():
    """128 GPUs in TP-4 groups (one tray), segments of 32 (8 trays): four segments. Free whole
    trays: rack 0 18 (two segments, 72 GPUs), rack 1 10 (one, 40), rack 2 9 (one, 36), rack 3 16
    (two, 64). Worked by hand:
    - binpack, Slurm's smallest fitting block one segment at a time: rack 2 (36), rack 1 (40),
      rack 3 (64), rack 3 again (32 left, below rack 0's 72);
    - topology: no rack holds four, no leaf either (three each), so the spine: the fullest racks
      first (rack 0's two), then the tightest rack that holds the rest (rack 3's two);
    - spread: one at a time to the rack with the most left, lowest id on ties: 0, 3, 0, 1."""
    busy = [trays(range(28, 36)), trays(range(45, 54)), trays(range(70, 72))]
    _, st = _state(NVL72_4, busy, [(128, 4, 32)])
    j = len(busy)
    with reference_path():
        binpack = _place(st, j, P.BINPACK)
        topology = _place(st, j, P.TOPOLOGY)
        spread = _place(st, j, P.SPREAD)
    assert binpack.tolist() == trays(range(36, 44), range(18, 26), range(54, 70))
    assert topology.tolist() == trays(range(0, 16), range(54, 70))
    assert spread.tolist() == trays(range(0, 16), range(18, 26), range(54, 62))
    for gpus in (binpack, topology, spread):
        assert NVL72_4.segment_straddles(gpus, 32) is None


def test_outside_nvlink_domains_a_segment_stays_under_one_leaf():
    """topo-stress-128gpu: 16 DGX H100 under four leaves of four nodes. 32 GPUs in TP-8 groups,
    segments of 16: with one whole node free per leaf (32 GPUs) no leaf holds a segment, the job
    waits; with nodes 0, 1 (leaf0), 4 (leaf1) and 8-10 (leaf2) free, leaves 0 and 2 hold one
    each: the topology rule takes leaf0's two nodes and leaf2's first two."""
    nodes = lambda *ns: [g for n in ns for g in range(8 * n, 8 * n + 8)]  # noqa: E731
    _, st = _state(STRESS, [nodes(1, 2, 3), nodes(5, 6, 7), nodes(9, 10, 11), nodes(13, 14, 15)], [(32, 8, 16)])
    with reference_path():
        assert not class_fits(st)[0][job_classes(st)[4]]
        assert _place(st, 4, P.TOPOLOGY) is None
    _, st = _state(STRESS, [nodes(2, 3), nodes(5, 6, 7), nodes(11), nodes(12, 13, 14, 15)], [(32, 8, 16)])
    with reference_path():
        assert class_fits(st)[0][job_classes(st)[4]]
        assert _place(st, 4, P.TOPOLOGY).tolist() == nodes(0, 1, 8, 9)


def test_the_simulator_refuses_a_segment_across_blocks():
    sim, _ = _state(NVL72_4, [], [(32, 4, 16)])
    with pytest.raises(SchedulingError, match="segment 1 .* not inside one block"):
        sim.start(0, np.array(trays(range(0, 4), range(16, 20))))  # the second segment: racks 0 and 1
    sim.start(0, np.array(trays(range(14, 18), range(18, 22))))  # each segment in one rack
    assert sim.running.tolist() == [0]


def test_block_places_segments_in_the_smallest_fitting_racks():
    """The state of `test_each_rule_distributes_segments_over_racks_its_own_way`: `block` starts
    the job on binpack's placement (Slurm's smallest fitting base block for each segment), where
    `easy` (the topology rule first) takes racks 0 and 3."""
    busy = [trays(range(28, 36)), trays(range(45, 54)), trays(range(70, 72))]
    _, st = _state(NVL72_4, busy, [(128, 4, 32)])
    with reference_path():
        cset = build_candidates(st)
        chosen = {name: cset.candidates[make_baseline(name).select(st, cset)] for name in ("block", "easy")}
    assert chosen["block"].rule == P.BINPACK and _racks(chosen["block"].gpus) == [1, 2, 3]
    assert chosen["easy"].rule == P.TOPOLOGY and _racks(chosen["easy"].gpus) == [0, 3]


def test_block_waits_rather_than_split_a_segment():
    """No rack holds a 64-GPU segment (the first state above, the busy jobs of the same class, so
    no preemption): every placement of the job is invalid and `block` waits."""
    busy = [trays(range(0, 6)), trays(range(18, 24)), trays(range(36, 38)), trays(range(54, 60))]
    _, st = _state(NVL72_4, busy, [(128, 16, 64)], filler_priority=1)  # no victims of a lower class
    with reference_path():
        cset = build_candidates(st)
        assert not any(cset.mask[:-1]) and cset.mask[-1]
        assert make_baseline("block").select(st, cset) == len(cset.candidates) - 1


def test_block_keeps_its_level_rule_for_the_jobs_without_segments():
    """Beside a queued segment job that fits nowhere (no rack has 64 GPUs free, and no victim of a
    lower class), a 64-GPU TP-4 job without segments (level 0: one rack) with racks 0 and 1 at 40
    free GPUs each still waits for one rack under `block`, where binpack would span the two."""
    busy = [trays(range(10, 18)), trays(range(28, 36)), trays(range(36, 72))]
    _, st = _state(NVL72_4, busy, [(128, 4, 64), (64, 4, 0)], filler_priority=1)
    with reference_path():
        cset = build_candidates(st)
        assert cset.window == [4] and cset.mask[P.BINPACK]  # the plain job alone, placeable across racks 0-1
        assert make_baseline("block").select(st, cset) == cset.wait_index


@pytest.mark.parametrize("path", PATHS)
def test_the_window_counts_whole_segments_per_block(path):
    """MIXED as a decision state: r0 with three free trays, r1 two, h0-h2 busy. A 16-GPU TP-4 gang
    in segments of 8 fits (a segment in each rack); in segments of 16 it does not (no rack has
    16 free), nor does a 24-GPU gang in segments of 8 (20 GPUs free but two segments); after
    preempting the low-priority H100 jobs, both do."""
    busy = [[3 * 4 + k for k in range(4)], list(range(24, 32)), list(range(32, 56))]  # r0 tray 3, r1 trays 2-3, h0-h2
    _, st = _state(MIXED, busy, [(16, 4, 8), (16, 4, 16), (24, 4, 8)])
    with _path(path):
        now, after, _, _ = class_fits(st)
        cls = job_classes(st)
    assert [bool(now[cls[j]]) for j in (3, 4, 5)] == [True, False, False]
    assert [bool(after[cls[j]]) for j in (3, 4, 5)] == [False, True, True]
