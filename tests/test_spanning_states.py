"""TP groups larger than a tray in decision states: feasibility by GPU counts, the topology and
preempt placements, states that hold such groups, and their speed. Worked by hand as in
tests/test_spanning_groups.py (its docstring states the rules; gb200-nvl72-4rack: rack r = trays
18r..18r+17, tray n = GPUs 4n..4n+3). Kept apart from that file, the placement rules' group of the
mutation check, whose score covers the rules themselves."""

from __future__ import annotations

import numpy as np
import pytest

from envs.cluster.config import load_cluster
from envs.cluster.memo import clear_cluster_memos
from envs.cluster.speed import SpeedModel, placement_profile, rates_of
from envs.core.jit import reference_path
from envs.decision import placement as P
from envs.decision.state import ClusterState, StateError
from envs.decision.window import fit_status
from envs.jobs import JobKind
from tests.helpers import job, trays

NVL72 = load_cluster("gb200-nvl72-4rack")


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request):
    clear_cluster_memos(NVL72)
    if request.param == "reference":
        with reference_path():
            yield request.param
    else:
        yield request.param



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
