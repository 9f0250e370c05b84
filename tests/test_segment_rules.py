"""Segment requests (`Job.segment_gpus`: each segment of a gang inside one block, an NVLink domain
or, outside them, a leaf switch's nodes), worked by hand on per-node free counts: how each
placement rule spreads the segments over blocks, keeps one GPU type, and counts whole segments.
Each rule is run on the plain-Python reference and on the compiled path (the native core's
`node_take`). The same rules on decision states and the `block` baseline's choices are in
tests/test_segment_states.py; episodes, the native world and the workloads in
tests/test_segments.py."""

from __future__ import annotations

import contextlib

import pytest

from envs.cluster.config import cluster_from_dict
from envs.cluster.memo import clear_cluster_memos
from envs.core.jit import reference_path
from envs.decision import placement as P

PATHS = ["reference", "compiled"]

# Two racks of four GB200 trays (r0: nodes 0-3, r1: nodes 4-7, NVLink domains) and three 8-GPU H100
# nodes outside them: h0, h1 (nodes 8, 9) under leaf a with r0, h2 (node 10) under leaf b with r1.
# Blocks: r0 (0), r1 (1), leaf a's outside nodes (2), leaf b's (3).
MIXED = cluster_from_dict({
    "name": "segments", "node_types": {"tray": {"gpu_type": "GB200-186GB", "gpus": 4}, "dgx": {"gpu_type": "H100-80GB", "gpus": 8}},
    "nodes": [{"names": "r0t[0-3]", "type": "tray"}, {"names": "r1t[0-3]", "type": "tray"}, {"names": "h[0-1]", "type": "dgx"},
              {"names": "h2", "type": "dgx"}],
    "nvlink_domains": [{"name": "r0", "nodes": "r0t[0-3]"}, {"name": "r1", "nodes": "r1t[0-3]"}],
    "switches": [{"name": "leafa", "nodes": "r0t[0-3],h[0-1]"}, {"name": "leafb", "nodes": "r1t[0-3],h2"},
                 {"name": "spine", "switches": "leafa,leafb"}]}, "<segments>")


def _path(path: str):
    return reference_path() if path == "reference" else contextlib.nullcontext()


def _take(free, need, tp, rule, segment, path):
    clear_cluster_memos(MIXED)
    with _path(path):
        return P._node_take_segments(MIXED, tuple(free), need, tp, rule, segment)


# ---------------------------------------------------------------- on per-node free counts


def test_the_blocks_are_the_domains_then_the_leaves_outside_nodes():
    assert MIXED.node_block.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3]
    assert MIXED.block_nodes == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [10]]


@pytest.mark.parametrize("path", PATHS)
def test_each_rule_keeps_one_gpu_type_when_one_holds_the_segments(path):
    """16 GPUs in TP-4 groups, segments of 8. Free: r0 three trays (12: one segment), r1 two (8:
    one), h0 and h1 whole (16: two), h2 whole (8: one). The GB200s hold two segments (16 GPUs),
    the H100s three (24): binpack and topology keep the tightest type, spread the roomiest.
    - binpack, the smallest fitting block first: r1 (8 usable), then r0 (12): r1's trays 0-1,
      then r0's;
    - topology: no block holds both, no leaf either (r0 alone under leaf a once the H100s are
      left out), so the spine: the racks in order, one segment each;
    - spread, on the H100s: the block with the most segments left, lowest id on ties: leaf a's
      outside nodes twice (two, then one left against h2's one)."""
    free = [4, 4, 4, 0, 4, 4, 0, 0, 8, 8, 8]
    assert _take(free, 16, 4, P.BINPACK, 8, path) == {4: 4, 5: 4, 0: 4, 1: 4}
    assert list(_take(free, 16, 4, P.BINPACK, 8, path)) == [4, 5, 0, 1]  # r1's segment first
    assert _take(free, 16, 4, P.TOPOLOGY, 8, path) == {0: 4, 1: 4, 4: 4, 5: 4}
    assert _take(free, 16, 4, P.SPREAD, 8, path) == {8: 8, 9: 8}


@pytest.mark.parametrize("path", PATHS)
def test_groups_larger_than_a_tray_and_mixed_types_when_no_one_type_holds_the_gang(path):
    """32 GPUs in TP-8 groups (two trays each in a rack), segments of 16. With r0 fully free (four
    whole trays: 16), r1 half free (two whole trays: 8, no segment), h0 and h1 whole (16: one
    segment), h2 busy: no one type holds two segments, so both types; topology finds no block
    with both, then leaf a (r0 and h0-h1): the faster r0 first, then h0 and h1. With a third
    tray of r0 busy (three whole trays: one TP group of two trays, 8 usable) nothing holds two
    segments: no placement."""
    free = [4, 4, 4, 4, 4, 4, 0, 0, 8, 8, 0]
    assert _take(free, 32, 8, P.TOPOLOGY, 16, path) == {0: 4, 1: 4, 2: 4, 3: 4, 8: 8, 9: 8}
    assert _take(free, 32, 8, P.BINPACK, 16, path) == {0: 4, 1: 4, 2: 4, 3: 4, 8: 8, 9: 8}
    for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
        assert _take([4, 4, 4, 0, 4, 4, 0, 0, 8, 8, 0], 32, 8, rule, 16, path) is None


@pytest.mark.parametrize("path", PATHS)
def test_binpack_fills_the_smallest_fitting_block_one_segment_at_a_time(path):
    """48 GPUs in TP-8 groups on the H100s alone (GB200 trays busy), segments of 8: h0 8, h1 8
    (leaf a: two segments, 16), h2 8 (leaf b: one). Smallest fitting: leaf b (8) first, then leaf a
    twice; spread: leaf a, leaf a again (one left each: the lowest id), then leaf b; topology: the
    spine (no block holds three), the fullest block first."""
    free = [0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8]
    assert list(_take(free, 24, 8, P.BINPACK, 8, path).items()) == [(10, 8), (8, 8), (9, 8)]
    assert list(_take(free, 24, 8, P.SPREAD, 8, path).items()) == [(8, 8), (9, 8), (10, 8)]
    assert list(_take(free, 24, 8, P.TOPOLOGY, 8, path).items()) == [(8, 8), (9, 8), (10, 8)]
    # a block's whole segments, not its GPUs: h0 with 4 free leaves leaf a 12 GPUs, one segment
    assert _take([0, 0, 0, 0, 0, 0, 0, 0, 4, 8, 8], 24, 8, P.BINPACK, 8, path) is None
    assert _take([0, 0, 0, 0, 0, 0, 0, 0, 4, 8, 8], 16, 8, P.BINPACK, 8, path) == {10: 8, 9: 8}


def test_segment_totals_count_whole_segments_per_block():
    usable = P.usable_per_node(MIXED, [4, 4, 4, 0, 4, 4, 0, 0, 8, 8, 8], 4)
    assert usable == [4, 4, 4, 0, 4, 4, 0, 0, 8, 8, 8]
    assert P.segment_total(MIXED, usable, 8) == 8 + 8 + 16 + 8
    assert P.segment_total(MIXED, usable, 16) == 16
    assert P.segment_total(MIXED, usable, 4) == 12 + 8 + 16 + 8


@pytest.mark.parametrize("path", PATHS)
def test_spread_keeps_the_roomiest_type_and_the_lowest_id_on_ties(path):
    """16 GPUs in TP-4 groups, segments of 8. The GB200s (type 0) with r0 free and two trays of r1
    hold three segments, the H100s (type 1) with h0 and h1 free two: spread keeps the GB200s
    (r0 twice: two segments left against r1's one, then a tie to the lowest id). With r1 busy
    both types hold two: the lower type id, the GB200s, again; binpack and topology the same."""
    assert _take([4, 4, 4, 4, 4, 4, 0, 0, 8, 8, 0], 16, 4, P.SPREAD, 8, path) == {0: 4, 1: 4, 2: 4, 3: 4}
    for rule in (P.SPREAD, P.BINPACK, P.TOPOLOGY):
        assert _take([4, 4, 4, 4, 0, 0, 0, 0, 8, 8, 0], 16, 4, rule, 8, path) == {0: 4, 1: 4, 2: 4, 3: 4}


@pytest.mark.parametrize("path", PATHS)
def test_a_type_counts_only_its_own_nodes(path):
    """Single GPUs (TP 1) in segments of 4. One free tray in r0 (a GB200 segment) and half of h2
    (an H100 segment): no type holds 8 GPUs alone, so both, a segment in each block. A gang of
    4 fits each type; binpack and topology keep the tightest, the H100s (4 against r0's 16 when
    r0 is all free)."""
    free = [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]
    for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
        assert _take(free, 8, 1, rule, 4, path) == {0: 4, 10: 4}
    for rule in (P.BINPACK, P.TOPOLOGY):
        assert _take([4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 4], 4, 1, rule, 4, path) == {10: 4}


@pytest.mark.parametrize("path", PATHS)
def test_the_rules_part_where_blocks_hold_several_segments(path):
    """On the H100s alone, 8 GPUs in TP-4 groups, segments of 4: leaf a's outside nodes (h0, h1)
    hold four segments, leaf b's (h2) two. Topology takes the tightest block that holds both,
    leaf b; binpack too (the smallest fitting block, twice); spread the block with the most left,
    twice (four, then three against two): h0.
    On the GB200s alone, 16 GPUs in TP-4 groups, segments of 8, both racks fully free (two
    segments each, 16 GPUs): binpack fills r0 (the first of the smallest fitting, then smaller
    still), spread takes one segment from each, topology the first rack that holds both."""
    h100 = [0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8]
    assert _take(h100, 8, 4, P.TOPOLOGY, 4, path) == {10: 8}
    assert _take(h100, 8, 4, P.BINPACK, 4, path) == {10: 8}
    assert _take(h100, 8, 4, P.SPREAD, 4, path) == {8: 8}
    gb200 = [4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0]
    assert _take(gb200, 16, 4, P.BINPACK, 8, path) == {0: 4, 1: 4, 2: 4, 3: 4}
    assert _take(gb200, 16, 4, P.SPREAD, 8, path) == {0: 4, 1: 4, 4: 4, 5: 4}
    assert _take(gb200, 16, 4, P.TOPOLOGY, 8, path) == {0: 4, 1: 4, 2: 4, 3: 4}
