"""TP groups larger than a tray (GB200 NVL72-class racks): a group of tp GPUs takes tp / 4 whole
trays of one rack's NVLink domain (`Cluster.spanning_domains`); elsewhere a TP group sits on one
node. Every expected value is worked by hand from that rule and the rules' statements in
envs/decision/placement.py and envs/decision/window.py:

* a rack offers floor(its fully free trays / trays per group) groups (memory permitting);
* binpack gives the groups to the rack with the fewest groups that holds them all, else the one
  with the most, and again; spread one group at a time to the rack with the most left (lowest
  first on ties); topology the tightest rack that holds them all, else the smallest switch
  subtree whose racks do, filled fastest, then fullest rack first; a rack gives its first free
  trays in node order;
* the preempt rule takes the cheapest lower-priority preemptible victims until the groups fit.

Cluster: gb200-nvl72-4rack (rack r = trays 18r..18r+17, tray n = GPUs 4n..4n+3; racks 0-1 under
leaf0, 2-3 under leaf1). Each test runs on the compiled path and on the plain-Python reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.cluster.config import cluster_from_dict, load_cluster
from envs.core.jit import reference_path
from envs.decision import placement as P
from tests.helpers import trays

NVL72 = load_cluster("gb200-nvl72-4rack")
NVL72_8 = load_cluster("gb200-nvl72-8rack")  # racks 0..7, leaf k over racks 2k and 2k + 1
# Two 8-GPU GB200 nodes outside any domain (big0 first, big1 last) around one domain of four
# 4-GPU trays t0-t3, under one leaf: TP-8 groups sit on a big node alone or on two trays.
MIXED_HOSTS = cluster_from_dict({
    "name": "mixed-hosts",
    "node_types": {"big": {"gpu_type": "GB200-186GB", "gpus": 8}, "tray": {"gpu_type": "GB200-186GB", "gpus": 4}},
    "nodes": [{"names": "big0", "type": "big"}, {"names": "t[0-3]", "type": "tray"}, {"names": "big1", "type": "big"}],
    "nvlink_domains": [{"name": "rackA", "nodes": "t[0-3]"}],
    "switches": [{"name": "leaf0", "nodes": "big0,t[0-3],big1"}],
}, "<mixed-hosts>")
# A GB200 rack of four trays (g0-g3, speed 2.53) and a B200 rack of six (b0-b5, 2.28), one leaf each, a spine.
TWO_TYPES = cluster_from_dict({
    "name": "two-types",
    "node_types": {"gb": {"gpu_type": "GB200-186GB", "gpus": 4}, "b": {"gpu_type": "B200-180GB", "gpus": 4}},
    "nodes": [{"names": "g[0-3]", "type": "gb"}, {"names": "b[0-5]", "type": "b"}],
    "nvlink_domains": [{"name": "rackG", "nodes": "g[0-3]"}, {"name": "rackB", "nodes": "b[0-5]"}],
    "switches": [{"name": "leafG", "nodes": "g[0-3]"}, {"name": "leafB", "nodes": "b[0-5]"},
                 {"name": "spine", "switches": "leafG,leafB"}],
}, "<two-types>")


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request):
    if request.param == "reference":
        with reference_path():
            yield request.param
    else:
        yield request.param



def test_which_domains_span_trays():
    """Groups of 8, 12 or 16 span 4-GPU trays; groups of 1-4 fit a tray; 6 does not divide into
    trays, so no rack hosts TP-6 groups (and no tray does either)."""
    assert NVL72.spanning_domains(16) == NVL72.spanning_domains(8) == (0, 1, 2, 3)
    assert NVL72.spans(12) and not NVL72.spans(4) and not NVL72.spans(1) and not NVL72.spans(6)
    assert not load_cluster("h100-4node").spans(16)  # no NVLink domain beyond a node


FREE = [4] * 5 + [2] * 3 + [4] * 10 + [4] * 3 + [0] * 15 + [4] * 18 + [3] * 18  # per tray, racks 0..3


def test_usable_trays_are_whole_free_trays_in_whole_groups():
    """Rack 0: trays 0-4 and 8-17 whole (15), trays 5-7 half busy: three groups of four trays,
    the first twelve whole trays (0-4, 8-14). Rack 1: three whole trays, no group. Rack 2: four
    groups (16 of its 18). Rack 3: no whole tray. A TP-4 job still counts per tray."""
    usable = P.usable_per_node(NVL72, FREE, 16)
    assert [n for n, u in enumerate(usable) if u] == [*range(0, 5), *range(8, 15), *range(36, 52)]
    assert set(usable) == {0, 4}
    assert P.usable_per_node(NVL72, FREE, 4) == [f // 4 * 4 for f in FREE]


@pytest.mark.parametrize("rule, gpus, expected", [
    # two groups: rack 0 (3 groups) is the tightest that holds both
    (P.BINPACK, 32, [*range(0, 5), *range(8, 11)]),
    (P.TOPOLOGY, 32, [*range(0, 5), *range(8, 11)]),
    # spread: the first group to rack 2 (4 left), the second to rack 0 (3 vs 3: the lower)
    (P.SPREAD, 32, [*range(0, 4), *range(36, 40)]),
    # four groups: rack 2 alone holds them
    (P.TOPOLOGY, 64, list(range(36, 52))),
    (P.BINPACK, 64, list(range(36, 52))),
    # six groups: no rack, no leaf (leaf0: 3, leaf1: 4); the spine: the fuller rack 2 first (4), then rack 0
    (P.TOPOLOGY, 96, [*range(36, 52), *range(0, 5), *range(8, 11)]),
    (P.BINPACK, 96, [*range(36, 52), *range(0, 5), *range(8, 11)]),
])
def test_each_rule_places_whole_groups_of_trays_inside_racks(rule, gpus, expected):
    take = P._node_take(NVL72, tuple(FREE), gpus, 16, rule)
    assert list(take) == expected and set(take.values()) == {4}


def test_a_gang_with_more_groups_than_the_racks_offer_does_not_fit():
    """Seven groups are offered (3 + 0 + 4 + 0): eight (128 GPUs) do not fit under any rule,
    though 172 GPUs are free."""
    assert sum(FREE) >= 128
    for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
        assert P._node_take(NVL72, tuple(FREE), 112, 16, rule) is not None
        assert P._node_take(NVL72, tuple(FREE), 128, 16, rule) is None


@pytest.mark.parametrize("rule, gpus, expected", [
    # one group: binpack's best fit is big0 (1 group) over the rack (2)
    (P.BINPACK, 8, {0: 8}),
    # two groups: the rack alone holds them: its four trays
    (P.BINPACK, 16, {1: 4, 2: 4, 3: 4, 4: 4}),
    (P.TOPOLOGY, 16, {1: 4, 2: 4, 3: 4, 4: 4}),
    # spread: the first group to the rack (2 left), the second to big0 (1 vs 1: the first host)
    (P.SPREAD, 16, {0: 8, 1: 4, 2: 4}),
    # three groups: no host alone; the leaf: the fuller rack first (2 groups), then big0
    (P.TOPOLOGY, 24, {1: 4, 2: 4, 3: 4, 4: 4, 0: 8}),
    (P.BINPACK, 24, {1: 4, 2: 4, 3: 4, 4: 4, 0: 8}),
    (P.SPREAD, 24, {0: 8, 1: 4, 2: 4, 3: 4, 4: 4}),
])
def test_nodes_and_domains_host_groups_side_by_side(rule, gpus, expected):
    """MIXED_HOSTS with big0 free, t0-t3 free, big1 busy: TP-8 hosts are big0 (1 group), the
    rack (2: four whole trays) and big1 (0)."""
    free = (8, 4, 4, 4, 4, 0)
    assert P.usable_per_node(MIXED_HOSTS, list(free), 8) == [8, 4, 4, 4, 4, 0]
    take = P._node_take(MIXED_HOSTS, free, gpus, 8, rule)
    assert take == expected and list(take) == list(expected)
    assert P._node_take(MIXED_HOSTS, free, 32, 8, rule) is None  # 3 groups offered


@pytest.mark.parametrize("rule, gpus, expected", [
    # two groups: both racks hold them; binpack and topology take the tighter type (GB200: 16 of
    # 24), spread the roomier (B200)
    (P.BINPACK, 16, {0: 4, 1: 4, 2: 4, 3: 4}),
    (P.TOPOLOGY, 16, {0: 4, 1: 4, 2: 4, 3: 4}),
    (P.SPREAD, 16, {4: 4, 5: 4, 6: 4, 7: 4}),
    # three groups: only the B200 rack holds them
    (P.TOPOLOGY, 24, {n: 4 for n in range(4, 10)}),
    (P.SPREAD, 24, {n: 4 for n in range(4, 10)}),
    # four groups: no type alone; topology under the spine fills the faster rack (GB200) first,
    # then two of the B200 rack's groups; binpack the fuller rack whole (B200, 3), then the best
    # fit for the last (GB200); spread alternates (B, G, B, G: the first host on ties)
    (P.TOPOLOGY, 32, {0: 4, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4, 6: 4, 7: 4}),
    (P.BINPACK, 32, {4: 4, 5: 4, 6: 4, 7: 4, 8: 4, 9: 4, 0: 4, 1: 4}),
    (P.SPREAD, 32, {0: 4, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4, 6: 4, 7: 4}),
])
def test_one_gpu_type_when_one_holds_the_gang_else_the_faster_first(rule, gpus, expected):
    free = (4,) * 10
    take = P._node_take(TWO_TYPES, free, gpus, 8, rule)
    assert take == expected and list(take) == list(expected)


def test_topology_takes_the_tightest_leaf_whose_racks_hold_the_groups():
    """NVL72_8, TP-16: racks 0-1 offer 2 + 2 groups, racks 2-3 3 + 0, racks 4-5 3 + 2, racks
    6-7 4 + 2. Five groups: no rack; leaves 2 (5) and 3 (6) hold them: the tighter, leaf 2, its
    fuller rack (4) first, whole (12 trays), then two groups of rack 5 (its first 8 trays). Four
    groups: rack 6 alone. Six: leaf 3 exactly. Seven: no leaf; the spine: rack 6 (4), then the
    tightest that holds the other three, racks 2 and 4 (3 each): the first, rack 2."""
    whole = {0: 8, 1: 8, 2: 12, 3: 0, 4: 12, 5: 8, 6: 16, 7: 8}  # whole free trays per rack
    free = []
    for r in range(8):
        free += [4] * whole[r] + [1] * (18 - whole[r])
    racks = lambda *spec: {n: 4 for r, k in spec for n in range(18 * r, 18 * r + k)}
    assert P._node_take(NVL72_8, tuple(free), 80, 16, P.TOPOLOGY) == racks((4, 12), (5, 8))
    assert P._node_take(NVL72_8, tuple(free), 64, 16, P.TOPOLOGY) == racks((6, 16))
    assert P._node_take(NVL72_8, tuple(free), 96, 16, P.TOPOLOGY) == racks((6, 16), (7, 8))
    assert P._node_take(NVL72_8, tuple(free), 112, 16, P.TOPOLOGY) == racks((6, 16), (2, 12))


# Five racks of 4-GPU trays under two leaves and a spine: leaf X over a GB200 rack of 4 trays (G1)
# and a B200 rack of 6 (B1); leaf Y over a GB200 rack of 2 (G2) and H200 racks of 4 (H1) and 2 (H2).
THREE_TYPES = cluster_from_dict({
    "name": "three-types",
    "node_types": {"gb": {"gpu_type": "GB200-186GB", "gpus": 4}, "b": {"gpu_type": "B200-180GB", "gpus": 4},
                   "h": {"gpu_type": "H200-141GB", "gpus": 4}},
    "nodes": [{"names": "g1t[0-3]", "type": "gb"}, {"names": "b1t[0-5]", "type": "b"}, {"names": "g2t[0-1]", "type": "gb"},
              {"names": "h1t[0-3]", "type": "h"}, {"names": "h2t[0-1]", "type": "h"}],
    "nvlink_domains": [{"name": "G1", "nodes": "g1t[0-3]"}, {"name": "B1", "nodes": "b1t[0-5]"}, {"name": "G2", "nodes": "g2t[0-1]"},
                       {"name": "H1", "nodes": "h1t[0-3]"}, {"name": "H2", "nodes": "h2t[0-1]"}],
    "switches": [{"name": "leafX", "nodes": "g1t[0-3],b1t[0-5]"}, {"name": "leafY", "nodes": "g2t[0-1],h1t[0-3],h2t[0-1]"},
                 {"name": "spine", "switches": "leafX,leafY"}],
}, "<three-types>")


def test_topology_takes_the_faster_subtree_before_the_tighter():
    """TP-8 groups (two trays): G1 2, B1 3, G2 1, H1 2, H2 1; per type 3 (GB200), 3 (B200), 3
    (H200), so four groups fit no type alone. Leaf X holds 5 groups at a mean speed of (2 x 2.53 +
    3 x 2.28) / 5 = 2.38, leaf Y exactly 4 at (2.53 + 2 x 1.0 + 1.0) / 4 = 1.38: the faster leaf
    X, although looser; inside it the faster rack G1 whole, then two groups of B1 (its first four
    trays)."""
    speed = {t.name: t.speed for t in THREE_TYPES.gpu_types}
    assert (speed["GB200-186GB"], speed["B200-180GB"], speed["H200-141GB"]) == (2.53, 2.28, 1.0)
    take = P._node_take(THREE_TYPES, (4,) * 18, 32, 8, P.TOPOLOGY)
    assert take == {n: 4 for n in range(0, 8)} and list(take) == list(range(0, 8))


def test_the_other_types_trays_are_not_offered_once_one_type_is_chosen():
    """B200 rack (8 trays, nodes 0-7) first, then GB200 racks of 4 (8-11) and 2 trays (12-13). TP-8,
    three groups: both types hold them (B200 4 groups, GB200 2 + 1); binpack takes the tighter
    type, GB200: the fuller rack whole, then the best fit for the last group, the 2-tray rack, not
    the B200 rack that comes first."""
    c = cluster_from_dict({
        "name": "b-first",
        "node_types": {"gb": {"gpu_type": "GB200-186GB", "gpus": 4}, "b": {"gpu_type": "B200-180GB", "gpus": 4}},
        "nodes": [{"names": "b[0-7]", "type": "b"}, {"names": "g[0-3]", "type": "gb"}, {"names": "h[0-1]", "type": "gb"}],
        "nvlink_domains": [{"name": "B", "nodes": "b[0-7]"}, {"name": "G", "nodes": "g[0-3]"}, {"name": "H", "nodes": "h[0-1]"}],
        "switches": [{"name": "leaf", "nodes": "b[0-7],g[0-3],h[0-1]"}],
    }, "<b-first>")
    take = P._node_take(c, (4,) * 14, 24, 8, P.BINPACK)
    assert take == {8: 4, 9: 4, 10: 4, 11: 4, 12: 4, 13: 4} and list(take) == [8, 9, 10, 11, 12, 13]


# A GB200 rack of four 4-GPU trays (t0-t3, nodes 0-3: TP-8 groups span two trays), then an 8-GPU
# GB200 node outside any domain (big, node 4) and an NVLink domain of two 8-GPU GB200 nodes (c0-c1,
# nodes 5-6: a TP-8 group sits on one node), all under one leaf.
PAIR_BESIDE_RACK = cluster_from_dict({
    "name": "pair-beside-rack",
    "node_types": {"tray": {"gpu_type": "GB200-186GB", "gpus": 4}, "big": {"gpu_type": "GB200-186GB", "gpus": 8}},
    "nodes": [{"names": "t[0-3]", "type": "tray"}, {"names": "big", "type": "big"}, {"names": "c[0-1]", "type": "big"}],
    "nvlink_domains": [{"name": "rack", "nodes": "t[0-3]"}, {"name": "pair", "nodes": "c[0-1]"}],
    "switches": [{"name": "leaf", "nodes": "t[0-3],big,c[0-1]"}],
}, "<pair-beside-rack>")


def test_a_domain_of_whole_node_groups_holds_the_gang_beside_a_domain_whose_groups_span_trays():
    """Free: t0 whole, t1-t2 three of four, t3 none (the rack: one whole tray, no TP-8 group); big,
    c0 and c1 whole. 16 GPUs in TP-4 groups: nothing spans, so the topology rule tries the NVLink
    domains before the switches and the pair holds the gang: c0 and c1. In TP-8 groups the rack's
    groups span trays, so the hosts are the rack, big, c0 and c1 (_node_take_spanning); no host
    holds two groups, and the NVLink domains are tried before the switches here too: the pair's
    hosts hold both, so the gang stays on its NVLink (c0 and c1), not on big and c0 across the
    pair's boundary as the leaf's first hosts would give. (envs/core/fuzz/core_fuzz.cpp's domain
    check states the same rule.)"""
    free = (4, 3, 3, 0, 8, 8, 8)
    assert PAIR_BESIDE_RACK.spanning_domains(8) == (0,) and not PAIR_BESIDE_RACK.spans(4)
    assert P.usable_per_node(PAIR_BESIDE_RACK, list(free), 8) == [0, 0, 0, 0, 8, 8, 8]
    assert P._node_take(PAIR_BESIDE_RACK, free, 16, 4, P.TOPOLOGY) == {5: 8, 6: 8}
    take = P._node_take(PAIR_BESIDE_RACK, free, 16, 8, P.TOPOLOGY)
    assert take == {5: 8, 6: 8} and list(take) == [5, 6]
    # the pair one GPU short (c1 seven free: no TP-8 group there): the leaf, filled in host order
    assert P._node_take(PAIR_BESIDE_RACK, (4, 3, 3, 0, 8, 8, 7), 16, 8, P.TOPOLOGY) == {4: 8, 5: 8}


def test_one_host_that_holds_the_gang_comes_before_any_domain():
    """Everything free: the rack offers two TP-8 groups (its four trays), big, c0 and c1 one each.
    A one-group gang fits several hosts, all GB200: the tightest takes it, big (the first of the
    one-group hosts), not the rack nor the pair, which the domain step would try first."""
    assert P._node_take(PAIR_BESIDE_RACK, (4, 4, 4, 4, 8, 8, 8), 8, 8, P.TOPOLOGY) == {4: 8}
    # with big busy, c0: the tightest host again, though the pair (two groups) is a domain
    assert P._node_take(PAIR_BESIDE_RACK, (4, 4, 4, 4, 0, 8, 8), 8, 8, P.TOPOLOGY) == {5: 8}
