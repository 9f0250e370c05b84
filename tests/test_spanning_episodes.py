"""TP groups larger than a tray on whole episodes and against the native core: the native core's
placements of such gangs are the plain-Python reference's on random free patterns of GB200
NVL72 clusters, a replay of the nvl72 scenario puts every such group on whole trays of one rack,
and the lookahead's native rollouts are the Python loop's there. (The hand-worked cases are in
tests/test_spanning_groups.py, the placement group of the mutation check.)"""

from __future__ import annotations

import numpy as np
import pytest

from baselines import make_baseline
from envs import core
from envs.cluster.config import load_cluster
from envs.cluster.memo import clear_cluster_memos
from envs.core.jit import reference_path
from envs.decision import placement as P
from envs.scenario import load_scenario
from envs.sim.replay import replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload


@pytest.mark.parametrize("cluster", ["gb200-nvl72-4rack", "gb200-nvl72-8rack"])
def test_native_placements_of_spanning_gangs_are_the_references(cluster):
    """2,000 random states: each tray fully free, partly free or busy (racks often filled
    unevenly); gangs of 1-16 TP groups of 8, 12 or 16 GPUs (and 4: one tray); every rule."""
    c = load_cluster(cluster)
    arrays = core.cluster_arrays(c)
    rng = np.random.default_rng(7)
    compared = placed = 0
    for _ in range(2000):
        busy = rng.uniform(0.0, 0.9, size=c.num_domains)[c.node_domain]
        free = np.where(rng.random(c.num_nodes) < busy, rng.integers(0, 4, size=c.num_nodes), 4).tolist()
        tp = int(rng.choice([4, 8, 12, 16]))
        need = tp * int(rng.integers(1, 17))
        for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
            native = core.node_take(arrays, free, need, tp, rule)
            with reference_path():
                reference = P._node_take(c, tuple(free), need, tp, rule)
            assert native == reference, (free, need, tp, rule)
            compared += 1
            placed += native is not None
    assert placed > compared // 4 and placed < compared  # both outcomes, often


def _replay(cluster, jobs, rule):
    sim = Simulator(cluster, jobs)
    replay(sim, make_baseline(rule).select, 8)
    return sim


def test_nvl72_episodes_place_every_group_inside_one_rack():
    """A replay of the nvl72 scenario's workload (80 jobs) under sect and under topology: every
    job whose TP groups exceed a tray gets, per group, whole trays of one rack, and the compiled
    path gives the reference's schedule."""
    sc = load_scenario("nvl72")
    cluster = load_cluster(sc.cluster)
    jobs = make_workload(load_workload_spec(sc.workload), cluster, 0, 80)
    assert any(cluster.spans(j.tp_degree) for j in jobs)
    for rule in ("sect", "topology"):
        sim = _replay(cluster, jobs, rule)
        clear_cluster_memos(cluster)
        with reference_path():
            ref = _replay(cluster, jobs, rule)
        clear_cluster_memos(cluster)
        assert {j: g.tolist() for j, g in sim.placement.items()} == {j: g.tolist() for j, g in ref.placement.items()}
        assert np.array_equal(sim.end, ref.end)
        spanning = 0
        for j, gpus in sim.placement.items():
            tp = sim.jobs[j].tp_degree
            if cluster.spans(tp):
                spanning += 1
                node = cluster.gpu_node[np.asarray(gpus)].reshape(-1, tp)
                assert all(len(set(cluster.node_domain[g].tolist())) == 1 for g in node)
                assert all(np.bincount(g).max() == 4 for g in node)  # whole trays
        assert spanning >= 10 and sim.done
