"""The topology effect itself: how placement changes a job's speed."""

from __future__ import annotations

import numpy as np

from envs.config import load_cluster
from envs.jobs import JobKind
from envs.speed import SpeedModel, placement_profile, rates_of
from tests.helpers import job, toy_cluster

MODEL = SpeedModel()


def rate_alone(cluster, j, gpus):
    return rates_of(cluster, [placement_profile(cluster, j, np.asarray(gpus), MODEL)], MODEL)[0]


def test_tp8_split_across_two_nodes_loses_over_half():
    cluster = toy_cluster(nodes=2)
    tp8 = job(0, 0.0, 8, 3600.0, tp=8, comm=0.35, tp_share=0.6, kind=JobKind.PRETRAIN)
    inside = rate_alone(cluster, tp8, range(0, 8))
    split = rate_alone(cluster, tp8, [4, 5, 6, 7, 8, 9, 10, 11])  # 4 GPUs on each node
    assert inside == 1.0
    assert split < 0.5 * inside


def test_tp_over_pcie_is_slower_than_nvswitch_and_numa_matters():
    nvs, pcie = toy_cluster(nodes=1), toy_cluster(nodes=1, intra="pcie")
    tp4 = job(0, 0.0, 4, 3600.0, tp=4, comm=0.3, tp_share=0.8)
    same_socket = rate_alone(pcie, tp4, [0, 1, 2, 3])
    across = rate_alone(pcie, tp4, [2, 3, 4, 5])
    assert rate_alone(nvs, tp4, [0, 1, 2, 3]) > same_socket > across


def test_dp_across_oversubscribed_spine_slows_and_slows_further_when_shared():
    cluster = load_cluster("h100-1024gpu")  # leaves of 8 nodes, 2:1 uplinks
    def dp_job(i):
        return job(i, 0.0, 64, 3600.0, tp=8, comm=0.4, tp_share=0.5, kind=JobKind.PRETRAIN, mem=80)
    in_leaf = np.arange(0, 64)  # nodes 0-7: one leaf
    across = np.concatenate([np.arange(32, 64), np.arange(64, 96)])  # nodes 4-7 (leaf00) + 8-11 (leaf01)
    other = np.concatenate([np.arange(0, 32), np.arange(96, 128)])  # nodes 0-3 (leaf00) + 12-15 (leaf01)
    a = dp_job(0)
    alone_in_leaf = rate_alone(cluster, a, in_leaf)
    alone_across = rate_alone(cluster, a, across)
    shared = rates_of(cluster, [placement_profile(cluster, a, across, MODEL), placement_profile(cluster, dp_job(1), other, MODEL)], MODEL)
    assert alone_in_leaf == 1.0
    assert alone_across < alone_in_leaf  # crossing the spine costs even alone
    assert shared[0] < alone_across  # a second job on the same 2:1 uplinks slows it further
    assert shared[0] == shared[1]


def test_inference_replicas_packed_on_a_node_interfere():
    cluster = toy_cluster(nodes=2)
    reps = [job(i, 0.0, 1, 3600.0, kind=JobKind.INFERENCE) for i in range(8)]
    packed = rates_of(cluster, [placement_profile(cluster, r, [i], MODEL) for i, r in enumerate(reps)], MODEL)
    spread = rates_of(cluster, [placement_profile(cluster, r, [i * 2 if i < 4 else 8 + (i - 4) * 2], MODEL) for i, r in enumerate(reps)], MODEL)
    alone = rate_alone(cluster, reps[0], [0])
    assert alone == 1.0
    assert packed.max() < 0.75  # eight memory-bound replicas on one node
    assert packed.max() < spread.min()


def test_slower_gpu_type_runs_slower():
    cluster = load_cluster("mixed-64gpu")
    j = job(0, 0.0, 1, 3600.0, mem=40)
    h100 = rate_alone(cluster, j, [0])
    a100 = rate_alone(cluster, j, [32])
    l40s = rate_alone(cluster, j, [48])
    assert (h100, a100, l40s) == (1.0, 0.5, 0.35)
