"""The native core (envs.core) against the plain-Python reference and against hand-worked answers.

The placement rules' per-node counts, the GPUs picked inside a node and a placement's geometry
must be bit for bit the reference's (envs/decision/placement.py and envs/cluster/speed.py, run on
`envs.core.jit.reference_path()`) on every shipped cluster, over random availability, gang sizes, TP
degrees and rules; the hand-worked cases state what
each rule must give on small clusters without reading any of the code under test; bad input is a
ValueError naming the argument.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from envs import core
from envs.cluster.config import cluster_from_dict, load_cluster
from envs.cluster.speed import SpeedModel, placement_geometry
from envs.core.jit import reference_path
from envs.decision import placement as P

from tests.helpers import toy_cluster

SHIPPED = ["h100-4node", "mixed-64gpu", "hetero-64gpu", "topo-stress-128gpu", "h100-1024gpu", "philly-sized", "gb200-nvl72-4rack"]


def _reference_take(c, free, need, tp, rule):
    with reference_path():
        return P._node_take(c, tuple(free), need, tp, rule)


def _reference_pick(c, node, count, pattern):
    with reference_path():
        return P._pick_in_pattern(c, int(c.node_first_gpu[node]), count, pattern)


@pytest.mark.parametrize("name", SHIPPED)
def test_node_take_is_the_reference_on_every_shipped_cluster(name):
    c = load_cluster(name)
    rng = np.random.default_rng(7)
    gpus = c.node_gpus.astype(np.int64)
    checked = placed = domains = 0
    for trial in range(300):
        busy = rng.uniform(0.0, 1.0)  # from an idle to a full cluster
        free = rng.binomial(gpus, 1.0 - busy)
        if trial % 3 == 0:  # memory eligibility: some node types count as 0
            free[c.node_gpu_type == rng.integers(len(c.gpu_types))] = 0
        tp = int(rng.choice([1, 2, 4, 8]))
        need = tp * int(rng.integers(1, max(2, min(int(free.sum()) // tp + 3, 64))))
        for rule in range(5):
            want = _reference_take(c, free.tolist(), need, tp, rule)
            got = P._node_take(c, tuple(free.tolist()), need, tp, rule)  # the compiled path: the core
            assert got == want and (got is None or list(got) == list(want)), (name, free.tolist(), need, tp, rule)
            checked += 1
            placed += got is not None
            domains += got is not None and len(got) > 1 and rule >= P.TOPOLOGY
    assert placed > checked // 4 and domains > 10  # the draws reach placements across nodes


@pytest.mark.parametrize("name", ["hetero-64gpu", "mixed-64gpu", "philly-sized"])
def test_pick_in_node_is_the_reference(name):
    c = load_cluster(name)
    arrays = core.cluster_arrays(c)
    rng = np.random.default_rng(3)
    for _ in range(400):
        node = int(rng.integers(c.num_nodes))
        pattern = rng.random(int(c.node_gpus[node])) < rng.uniform(0.2, 1.0)
        if not pattern.any():
            continue
        count = int(rng.integers(1, pattern.sum() + 1))
        got = P._pick_in_pattern(c, int(c.node_first_gpu[node]), count, pattern)  # the compiled path: the core
        assert got.tolist() == core.pick_in_node(arrays, node, count, pattern).tolist()
        want = _reference_pick(c, node, count, pattern)
        assert got.tolist() == want.tolist(), (node, pattern.tolist(), count)


def _two_speed_cluster():
    """Two leaves of two 8-GPU nodes under a spine: leaf0 holds H100s, leaf1 A100s (slower)."""
    return cluster_from_dict({
        "name": "two-speed",
        "node_types": {"fast": {"gpu_type": "H100-80GB", "gpus": 8, "intra_node": "nvswitch"},
                       "slow": {"gpu_type": "A100-80GB", "gpus": 8, "intra_node": "nvswitch"}},
        "nodes": [{"names": "f[0-1]", "type": "fast"}, {"names": "s[0-1]", "type": "slow"}],
        "switches": [{"name": "leaf0", "nodes": "f[0-1]"}, {"name": "leaf1", "nodes": "s[0-1]"},
                     {"name": "spine", "switches": "leaf[0-1]"}],
    }, "<two-speed>")


def test_hand_worked_rules_on_a_toy_cluster():
    c = toy_cluster(nodes=4, gpus=8, leaves=2)  # n0,n1 under leaf0; n2,n3 under leaf1
    a = core.cluster_arrays(c)
    # binpack: the single node with the fewest free GPUs that holds the gang.
    assert core.node_take(a, [8, 3, 5, 4], 4, 1, P.BINPACK) == {3: 4}
    # binpack, no single node: the fullest node whole, then the best fit for the rest.
    assert core.node_take(a, [6, 3, 5, 4], 9, 1, P.BINPACK) == {0: 6, 1: 3}
    # spread: one GPU at a time to the node with the most left (lowest id on ties), id order.
    assert core.node_take(a, [4, 4, 2, 0], 5, 1, P.SPREAD) == {0: 3, 1: 2}
    # spread in TP groups of 2: pods of 2 GPUs.
    assert core.node_take(a, [4, 4, 2, 0], 6, 2, P.SPREAD) == {0: 4, 1: 2}
    # topology: a best-fit single node first.
    assert core.node_take(a, [8, 6, 7, 8], 6, 2, P.TOPOLOGY) == {1: 6}
    # topology across nodes: the leaf that holds the gang (leaf1: 5 + 6 = 11 usable in pairs 4 + 6 = 10),
    # not spread over both leaves; inside it the emptiest node first, then the best fit for the rest.
    assert core.node_take(a, [3, 4, 5, 6], 8, 2, P.TOPOLOGY) == {3: 6, 2: 2}
    # no placement: 7 free GPUs in pairs hold 3 pairs only.
    assert core.node_take(a, [1, 1, 3, 2], 8, 2, P.TOPOLOGY) is None
    assert core.node_take(a, [1, 1, 3, 2], 8, 2, P.BINPACK) is None


def test_hand_worked_rules_keep_a_gang_on_one_gpu_type():
    c = _two_speed_cluster()  # nodes 0,1 H100 (leaf0), 2,3 A100 (leaf1); type 0 is A100 (names sorted)
    a = core.cluster_arrays(c)
    # 12 GPUs in pairs: H100s have 14 free, A100s 12; both hold it, so the tightest type, A100:
    # no A100 node holds 6 pairs, so node 2's 4 pairs, then node 3 best-fits the last 2.
    assert core.node_take(a, [8, 6, 8, 4], 12, 2, P.TOPOLOGY) == {2: 8, 3: 4}
    # a single node of the tightest type (A100: 12 free against 16): the best fit there.
    assert core.node_take(a, [8, 8, 4, 8], 4, 1, P.TOPOLOGY) == {2: 4}
    # only the A100s hold 10: binpack there, the fuller node whole (lowest id on ties), then the rest.
    assert core.node_take(a, [2, 2, 8, 8], 10, 1, P.BINPACK) == {2: 8, 3: 2}
    # spread takes the type with the most room (A100 12 against H100 9), one GPU at a time.
    assert core.node_take(a, [5, 4, 6, 6], 4, 1, P.SPREAD) == {2: 2, 3: 2}
    # no type alone holds 20: both types, the spine's domain, fastest nodes first.
    assert core.node_take(a, [8, 6, 8, 4], 20, 2, P.TOPOLOGY) == {0: 8, 1: 6, 2: 6}


def test_hand_worked_gpu_choice_inside_a_node():
    c = load_cluster("hetero-64gpu")  # 8-GPU nodes on 2 NUMA sockets: GPUs 0-3 and 4-7
    a = core.cluster_arrays(c)
    node = 0
    assert c.gpu_socket[c.node_first_gpu[node]: c.node_first_gpu[node] + 8].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    first = int(c.node_first_gpu[node])
    avail = np.array([1, 1, 1, 0, 1, 1, 1, 1], dtype=bool)
    # 3 GPUs fit in either socket: the best fit is socket 0 (3 available against 4).
    assert (core.pick_in_node(a, node, 3, avail) - first).tolist() == [0, 1, 2]
    # 4 fit only in socket 1.
    assert (core.pick_in_node(a, node, 4, avail) - first).tolist() == [4, 5, 6, 7]
    # 5 fit in no socket: the fullest socket first (socket 1's four), then socket 0's first, sorted.
    assert (core.pick_in_node(a, node, 5, avail) - first).tolist() == [0, 4, 5, 6, 7]


@pytest.mark.parametrize("call, field", [
    (lambda a: core.node_take(a, [8, 8, 8], 4, 1, 0), "free"),
    (lambda a: core.node_take(a, [8, 8, 9, 8], 4, 1, 0), "free"),
    (lambda a: core.node_take(a, [8, 8, -1, 8], 4, 1, 0), "free"),
    (lambda a: core.node_take(a, [8, 8, 8, 8], 6, 4, 2), "tp"),
    (lambda a: core.node_take(a, [8, 8, 8, 8], 0, 1, 2), "gpus"),
    (lambda a: core.pick_in_node(a, 9, 1, np.ones(8, bool)), "node"),
    (lambda a: core.pick_in_node(a, 0, 1, np.ones(7, bool)), "avail"),
    (lambda a: core.pick_in_node(a, 0, 3, np.array([1, 1, 0, 0, 0, 0, 0, 0], bool)), "count"),
])
def test_bad_input_names_the_argument(call, field):
    a = core.cluster_arrays(toy_cluster(nodes=4, gpus=8))
    with pytest.raises(ValueError, match=field):
        call(a)


def _fields(c):
    """The dict envs.core.cluster_arrays passes, rebuilt here so that single fields can be broken."""
    core.cluster_arrays(c)  # builds it once
    from envs.cluster.topology import INTRA_NVLINK_PAIRS, INTRA_NVSWITCH, NUM_JOB_KINDS, REFERENCE_NVLINK_GBPS
    i64 = lambda x: np.ascontiguousarray(x, dtype=np.int64)  # noqa: E731
    f64 = lambda x: np.ascontiguousarray(x, dtype=np.float64)  # noqa: E731
    return {"num_types": len(c.gpu_types), "num_kinds": NUM_JOB_KINDS, "speed_varies_by_kind": False,
            "intra_nvswitch": INTRA_NVSWITCH, "intra_nvlink_pairs": INTRA_NVLINK_PAIRS,
            "reference_nvlink_GBps": REFERENCE_NVLINK_GBPS, "node_gpu_type": i64(c.node_gpu_type),
            "node_speed": f64(c.node_speed), "node_memory_gb": f64(c.node_memory_gb), "node_first_gpu": i64(c.node_first_gpu), "node_gpus": i64(c.node_gpus),
            "node_intra": i64(c.node_intra), "node_nvlink_GBps": f64(c.node_nvlink_GBps), "node_pcie_GBps": f64(c.node_pcie_GBps),
            "node_net_per_gpu_GBps": f64(c.node_net_per_gpu_GBps), "gpu_socket": i64(c.gpu_socket), "gpu_node": i64(c.gpu_node),
            "gpu_local": i64(c.gpu_local), "gpu_speed": f64(c.gpu_speed), "switch_level": i64(c.switch_level),
            "switch_uplink_GBps": f64(c.switch_uplink_GBps), "node_under_switch": np.ascontiguousarray(c.node_under_switch),
            "node_tier": np.ascontiguousarray(c.node_tier, dtype=np.int8), "gpu_speed_by_kind": f64(c.gpu_speed_by_kind),
            "node_domain": i64(c.node_domain), "num_domains": int(c.num_domains), "node_block": i64(c.node_block)}


def test_bad_cluster_arrays_name_the_field():
    c = toy_cluster(nodes=2, gpus=8)
    good = _fields(c)
    core.ClusterArrays(good)
    i64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    for field, value in [("node_first_gpu", i64([0, 4])), ("node_gpu_type", i64([0, 3])),
                         ("node_under_switch", np.ones((2, 2), dtype=bool)), ("gpu_socket", i64([0] * 15)),
                         ("switch_level", i64([0])), ("node_speed", i64([1, 1])), ("gpu_local", i64(list(range(16)))),
                         ("node_tier", np.zeros((2, 3), dtype=np.int8)), ("num_kinds", "four"), ("node_domain", i64([0, 0])),
                         ("node_memory_gb", np.ones(3)), ("node_block", i64([0, 2])), ("node_block", i64([0]))]:
        with pytest.raises(ValueError, match=field):
            core.ClusterArrays({**good, field: value})
    with pytest.raises(ValueError, match="gpu_node: missing"):
        core.ClusterArrays({k: v for k, v in good.items() if k != "gpu_node"})


def _same_geometry(a, b) -> bool:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not (x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


@pytest.mark.parametrize("name", SHIPPED)
def test_geometry_is_the_reference_on_every_shipped_cluster(name):
    """Random GPU sets (groups across nodes, sockets, types) and the rules' own placements."""
    c = load_cluster(name)
    model = SpeedModel(cross_socket_factor=0.4, cross_tier_efficiency=0.8)  # not the defaults: both are read
    rng = np.random.default_rng(11)
    arrays = core.cluster_arrays(c)
    for trial in range(400):
        tp = int(rng.choice([1, 2, 4, 8]))
        if trial % 2:
            gpus = rng.choice(c.num_gpus, size=tp * int(rng.integers(1, min(9, c.num_gpus // tp + 1))), replace=False)
        else:
            free = rng.binomial(c.node_gpus, rng.uniform(0.1, 1.0))
            take = core.node_take(arrays, free.tolist(), tp * int(rng.integers(1, 9)), tp, int(rng.integers(3)))
            if take is None:
                continue
            gpus = np.concatenate([c.node_first_gpu[n] + np.arange(k) for n, k in take.items()])
        got = placement_geometry(c, gpus, tp, model)
        with reference_path():
            want = placement_geometry(c, gpus, tp, model)
        assert _same_geometry(got, want), (name, gpus.tolist(), tp, got, want)


def test_hand_worked_geometry():
    c = toy_cluster(nodes=4, gpus=8, leaves=2, oversubscription=2.0)  # 50 GB/s a GPU, 900 GB/s NVSwitch, 64 GB/s PCIe
    model = SpeedModel()
    # TP 8 on n0 and n2 (two leaves): TP inside nodes, DP across the spine: tier 2, 50 x 0.85,
    # each leaf's uplink carries 8 x 50 GB/s.
    g = placement_geometry(c, np.r_[0:8, 16:24], 8, model)
    assert (g.nodes.tolist(), g.gpus_on_node.tolist(), g.tier, g.tp_stretch, g.tp_cross_node) == ([0, 2], [8, 8], 2, 1.0, False)
    assert g.dp_bw_GBps == pytest.approx(42.5) and g.uplinks.tolist() == [0, 1] and g.uplink_demand_GBps.tolist() == [400.0, 400.0]
    # TP 4 split over two nodes of one leaf: TP crosses the network (900 / 50 = 18x), tier 1, no uplink.
    g = placement_geometry(c, np.r_[0:2, 8:10], 4, model)
    assert (g.tier, g.tp_stretch, g.tp_cross_node, g.dp_bw_GBps, g.uplinks.tolist()) == (1, 18.0, True, 50.0, [])
    # one node: DP on NVSwitch.
    g = placement_geometry(c, np.r_[4:8], 2, model)
    assert (g.nodes.tolist(), g.tier, g.dp_bw_GBps, g.tp_stretch) == ([0], 0, 900.0, 1.0)
    with pytest.raises(ValueError, match="tp_degree"):
        core.placement_geometry(core.cluster_arrays(c), np.arange(6, dtype=np.int64), 4, 0.5, 0.85)
    with pytest.raises(ValueError, match="gpus"):
        core.placement_geometry(core.cluster_arrays(c), np.array([0, 99], dtype=np.int64), 1, 0.5, 0.85)
