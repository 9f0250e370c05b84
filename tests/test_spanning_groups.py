"""TP groups larger than a tray (GB200 NVL72-class racks): a group of tp GPUs takes tp / 4 whole
trays of one rack's NVLink domain (`Cluster.spanning_domains`); elsewhere a TP group sits on one
node. Every expected value is worked by hand from that rule and the rules' statements in
envs/placement.py and envs/window.py:

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

from envs import placement as P
from envs.config import load_cluster
from envs.jit import reference_path
from envs.memo import clear_cluster_memos
from envs.speed import SpeedModel, placement_profile, rates_of
from envs.state import ClusterState, StateError
from envs.window import fit_status
from envs.jobs import JobKind
from tests.helpers import job

NVL72 = load_cluster("gb200-nvl72-4rack")


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request):
    clear_cluster_memos(NVL72)
    if request.param == "reference":
        with reference_path():
            yield request.param
    else:
        yield request.param


def trays(*ranges) -> list[int]:
    return [4 * n + k for r in ranges for n in r for k in range(4)]


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


def _state() -> ClusterState:
    """Tray 0: GPU 0 busy; racks 1 and 2 full (a non-preemptible job each); rack 3: trays 54-61
    held by a low-priority preemptible job. Free whole trays: rack 0 1-17 (17), rack 3 62-71 (10)."""
    def run(name, gpus, prio="normal", preemptible=False):
        return {"id": name, "num_gpus": len(gpus), "gpus": gpus, "priority": prio, "preemptible": preemptible,
                "estimate_s": 1e6, "arrival_s": 0.0, "mem_per_gpu_gb": 1.0}

    def queued(name, gpus, tp):
        return {"id": name, "num_gpus": gpus, "tp_degree": tp, "mem_per_gpu_gb": 100.0, "priority": "normal",
                "estimate_s": 3600.0, "arrival_s": 0.0, "queued_since_s": 0.0}

    return ClusterState.from_dict({"time_s": 10.0, "running": [
        run("r0", [0]), run("r1", trays(range(18, 36))), run("r2", trays(range(36, 54))),
        run("low", trays(range(54, 62)), prio="low", preemptible=True)], "queued": [
        queued("a", 96, 16),   # rack 0: 4 groups, rack 3: 2: 96 fits
        queued("b", 112, 16),  # 96 < 112; with low's trays rack 3 has 4 groups: 128 after preemption
        queued("c", 104, 8),   # rack 0: 8 pairs, rack 3: 5: 104 fits
        queued("d", 112, 8),   # 104 < 112; rack 3 has 9 pairs after preemption: 136
        queued("e", 4, 4),     # a tray: fits
        queued("f", 144, 16),  # after preemption 64 + 64 = 128 < 144: never
    ]}, NVL72)


def test_feasibility_counts_whole_groups_of_trays_per_rack():
    st = _state()
    q, now, after = fit_status(st)
    names = [st.names[j] for j in q]
    assert dict(zip(names, now.tolist())) == dict(a=True, b=False, c=True, d=False, e=True, f=False)
    assert dict(zip(names, after.tolist())) == dict(a=False, b=True, c=False, d=True, e=False, f=False)


def test_topology_and_preempt_placements_keep_each_group_in_one_rack():
    """a (6 groups): no rack and no leaf holds it; rack 0 (4 groups, the fuller) gives trays 1-16,
    rack 3 trays 62-69. b (7 groups) preempts `low`: rack 0 gives 4 groups (trays 1-16), rack 3,
    whole again, 3 (trays 54-65)."""
    st = _state()
    a, b = (st.names.index(x) for x in "ab")
    gpus = P.place(st, 96, 16, 100.0, P.TOPOLOGY)
    assert gpus.tolist() == trays(range(1, 17), range(62, 70))
    gpus_b, victims = P.choose_victims(st, b)
    assert gpus_b.tolist() == trays(range(1, 17), range(54, 66)) and [st.names[v] for v in victims] == ["low"]
    # each run of 16 GPUs is four trays of one rack: TP on NVLink (stretch 1), DP between racks 0
    # and 3 over the spine (tier 2)
    nodes = NVL72.gpu_node[gpus].reshape(-1, 16)
    assert all(len(set(NVL72.node_domain[g].tolist())) == 1 for g in nodes)
    geometry = P.geometry_of(st, gpus, 16)
    assert geometry.tp_stretch == 1.0 and not geometry.tp_cross_node and geometry.tier == 2


def test_a_state_may_hold_tp_groups_on_trays_of_one_rack_only():
    """A running TP-16 job on four trays of rack 0 is a valid state; on two trays of rack 0 and
    two of rack 1 its TP group would cross racks: the error names the job's gpus field."""
    def running(gpus):
        return {"time_s": 0.0, "running": [{"id": "tp16", "num_gpus": 16, "tp_degree": 16, "gpus": gpus,
                                             "estimate_s": 10.0, "arrival_s": 0.0}], "queued": []}

    st = ClusterState.from_dict(running(trays(range(0, 4))), NVL72)
    assert st.num_gpus.tolist() == [16]
    with pytest.raises(StateError, match=r"running\[0\]\.gpus.*spans nodes"):
        ClusterState.from_dict(running(trays(range(16, 20))), NVL72)


def test_a_tp16_job_split_over_racks_runs_slower_than_inside_one():
    """The speed model's side of the rule (docs/speed.md): TP-16 on four trays of one rack runs at
    the GB200's pretrain factor; its first TP group split 2 + 2 over two racks crosses the network."""
    j = job(0, 0.0, 16, 3600.0, tp=16, comm=0.3, tp_share=0.5, kind=JobKind.PRETRAIN)
    model = SpeedModel()
    inside, split = (rates_of(NVL72, [placement_profile(NVL72, j, np.array(trays(r)), model)], model)[0]
                     for r in (range(0, 4), range(16, 20)))
    assert inside == pytest.approx(2.53) and split == pytest.approx(2.53 / (0.85 + 0.15 * 18))
