"""The `block` baseline: Slurm's EASY backfill with the topology/block rule that a job stays inside
one block of the level its node count asks for (Slurm's eval_nodes_block; baselines/block.py).
Expected values are worked by hand from that rule: base blocks are the NVLink racks (18 trays of
4 GPUs), a level-k block is 2^k consecutive racks, a job's level is the smallest k whose blocks
hold its trays (ceil(GPUs / 4)), and a job larger than every level short of the whole cluster may
span it."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from baselines import make_baseline
from baselines.block import block_level, blocks_of, inside_one_block
from envs.cluster.config import cluster_from_dict, load_cluster
from envs.cluster.memo import clear_cluster_memos
from envs.core.jit import reference_path
from envs.decision.candidates import build_candidates
from envs.decision.placement import TOPOLOGY
from envs.decision.state import ClusterState
from tests.helpers import trays

NVL72_4 = load_cluster("gb200-nvl72-4rack")
NVL72_8 = load_cluster("gb200-nvl72-8rack")



def test_base_blocks_are_racks_or_leaves():
    block, base, count, per_node = blocks_of(NVL72_8)
    assert block.tolist() == [n // 18 for n in range(144)] and (base, count, per_node) == (18, 8, 4)
    h100 = load_cluster("h100-1024gpu")  # no NVLink domain beyond a node: the leaves' 8 nodes
    block, base, count, per_node = blocks_of(h100)
    assert block.tolist() == [n // 8 for n in range(128)] and (base, count, per_node) == (8, 16, 8)


def test_nodes_outside_the_domains_form_blocks_by_leaf():
    """Two 4-tray GB200 racks (r0: nodes 2-5, r1: nodes 8-11) and 8-GPU nodes outside them under
    two leaves (leaf a: nodes 0, 1, 6, 7; leaf b: node 12): base blocks r0, r1, then leaf a's
    outside nodes, then leaf b's; the smallest has 1 node; 4 blocks; 8 GPUs the largest node."""
    c = cluster_from_dict({
        "name": "blocks", "node_types": {"big": {"gpu_type": "GB200-186GB", "gpus": 8},
                                          "tray": {"gpu_type": "GB200-186GB", "gpus": 4}},
        "nodes": [{"names": "a[0-1]", "type": "big"}, {"names": "r0t[0-3]", "type": "tray"}, {"names": "a[2-3]", "type": "big"},
                  {"names": "r1t[0-3]", "type": "tray"}, {"names": "b0", "type": "big"}],
        "nvlink_domains": [{"name": "r0", "nodes": "r0t[0-3]"}, {"name": "r1", "nodes": "r1t[0-3]"}],
        "switches": [{"name": "leafa", "nodes": "a[0-3],r0t[0-3]"}, {"name": "leafb", "nodes": "r1t[0-3],b0"},
                     {"name": "spine", "switches": "leafa,leafb"}]}, "<blocks>")
    block, base, count, per_node = blocks_of(c)
    assert block.tolist() == [2, 2, 0, 0, 0, 0, 2, 2, 1, 1, 1, 1, 3] and (base, count, per_node) == (1, 4, 8)
    # levels from 8-GPU nodes over 1-node base blocks: 8 GPUs level 0, 9-16 level 1, more: anywhere
    assert [block_level(c, g) for g in (8, 9, 16, 17)] == [0, 1, 1, None]


@pytest.mark.parametrize("gpus, level", [(1, 0), (4, 0), (72, 0), (73, 1), (144, 1), (145, 2), (288, 2), (289, None)])
def test_a_jobs_level_follows_its_tray_count(gpus, level):
    """8 racks: level 0 one rack (72 GPUs), 1 two (144), 2 four (288); 3 would be all eight."""
    assert block_level(NVL72_8, gpus) == level


def test_inside_one_block_of_the_level():
    assert inside_one_block(NVL72_8, np.array(trays(range(0, 18))), 0)
    assert not inside_one_block(NVL72_8, np.array(trays(range(17, 19))), 0)
    assert inside_one_block(NVL72_8, np.array(trays(range(17, 19))), 1)  # racks 0-1: one level-1 block
    assert not inside_one_block(NVL72_8, np.array(trays(range(35, 37))), 1)  # racks 1-2: two
    assert inside_one_block(NVL72_8, np.array(trays(range(35, 37))), None)


@pytest.mark.parametrize("path", ["compiled", "reference"])
def test_block_waits_for_one_rack_where_easy_spans_two(path):
    """Racks 0 and 1 have 10 whole trays free each, racks 2-3 none. The FIFO head asks 64 GPUs (16
    trays, level 0: one rack): it fits over racks 0 and 1 (80 free), which `easy` takes, but in
    no one rack, so `block` keeps its reservation and backfills the next job (8 GPUs, one hour,
    ending long before the running jobs' estimated ends) inside rack 0."""
    clear_cluster_memos(NVL72_4)
    def run(name, gpus):
        return {"id": name, "num_gpus": len(gpus), "gpus": gpus, "priority": "normal", "preemptible": False,
                "estimate_s": 1e6, "arrival_s": 0.0, "mem_per_gpu_gb": 1.0}

    def queued(name, gpus, tp, since):
        return {"id": name, "num_gpus": gpus, "tp_degree": tp, "mem_per_gpu_gb": 1.0, "priority": "normal",
                "estimate_s": 3600.0, "arrival_s": since, "queued_since_s": since}

    data = {"time_s": 10.0, "running": [run("r0", trays(range(10, 18))), run("r1", trays(range(28, 36))),
                                        run("r23", trays(range(36, 72)))],
            "queued": [queued("head", 64, 4, 0.0), queued("next", 8, 4, 1.0)]}

    def choose(rule):
        st = ClusterState.from_dict(data, NVL72_4)
        cset = build_candidates(st)
        i = make_baseline(rule).select(st, cset)
        cd = cset.candidates[i]
        return st.names[cd.job_id], sorted(set(NVL72_4.gpu_node[cd.gpus].tolist())), cd.rule

    with reference_path() if path == "reference" else contextlib.nullcontext():
        head, nodes, rule = choose("easy")
        assert head == "head" and rule == TOPOLOGY and {n // 18 for n in nodes} == {0, 1}
        name, nodes, _ = choose("block")
        assert name == "next" and nodes == [0, 1]  # two trays of rack 0 (TP-4 groups: one tray each)
