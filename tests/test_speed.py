"""The topology effect itself: how placement changes a job's speed."""

from __future__ import annotations

import numpy as np
import pytest

from envs.cluster.config import ConfigError, load_cluster
from envs.cluster.speed import SpeedModel, placement_profile, rates_of
from envs.cluster.topology import GPU_CATALOGUE, GpuType
from envs.jobs import JobKind
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
    # docs/speed.md: c_tp = 0.35 x 0.6 = 0.21, one TP group (no DP); TP over the network's 50 GB/s
    # per GPU instead of 900 GB/s NVSwitch: stretch 18; 1 / (0.79 + 0.21 x 18) = 1 / 4.57.
    assert split == pytest.approx(1 / 4.57, rel=1e-12)


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
    # docs/speed.md: 1 / (1 + 0.6 x sensitivity 1.0 x neighbours' pressure per GPU); packed: 7 x 1.0 / 8,
    # spread four to a node: 3 x 1.0 / 8.
    np.testing.assert_allclose(packed, 1 / (1 + 0.6 * 7 / 8), rtol=1e-12)
    np.testing.assert_allclose(spread, 1 / (1 + 0.6 * 3 / 8), rtol=1e-12)


def test_slower_gpu_type_runs_slower():
    cluster = load_cluster("mixed-64gpu")
    j = job(0, 0.0, 1, 3600.0, mem=40)
    h100 = rate_alone(cluster, j, [0])
    a100 = rate_alone(cluster, j, [32])
    l40s = rate_alone(cluster, j, [48])
    assert (h100, a100, l40s) == (1.0, 0.5, 0.35)


# Per-job-kind GPU speed (docs/speed.md).

HETERO = """\
name: h
gpu_types:
  L40S-48GB:
    memory_gb: 48
    speed: 0.35
    speed_by_kind: {pretrain: 0.37, inference: 0.26}
node_types:
  h100: {gpu_type: H100-80GB, gpus: 8}
  l40s: {gpu_type: L40S-48GB, gpus: 8, intra_node: pcie}
nodes:
  - {names: h0, type: h100}
  - {names: l0, type: l40s}
switches:
  - {name: leaf0, nodes: "h0,l0"}
"""


def _hetero(tmp_path, text=HETERO):
    p = tmp_path / "h.yaml"
    p.write_text(text)
    return load_cluster(p)


def test_kind_speed_scales_a_single_node_rate_by_the_factor_ratio(tmp_path):
    cluster = _hetero(tmp_path)
    tp2 = {"tp": 2, "comm": 0.3, "tp_share": 0.7, "mem": 40}  # a placement effect of its own (TP over PCIe)
    pre, inf = job(0, 0.0, 2, 3600.0, kind=JobKind.PRETRAIN, **tp2), job(1, 0.0, 2, 3600.0, kind=JobKind.INFERENCE, **tp2)
    gpus = [8, 9]  # node l0
    p_pre, p_inf = (placement_profile(cluster, j, np.asarray(gpus), MODEL) for j in (pre, inf))
    assert (p_pre.min_speed, p_inf.min_speed) == (0.37, 0.26)
    assert p_pre.geometry.min_speed == 0.35  # the generic speed stays where no job is known
    # Same placement efficiency, so each rate over its factor is the same number.
    r_pre, r_inf = rate_alone(cluster, pre, gpus), rate_alone(cluster, inf, gpus)
    assert r_pre / 0.37 == r_inf / 0.26 == p_pre.efficiency()
    assert r_pre < 0.37 and r_inf < 0.26  # the placement effect is there too
    # On the reference H100 node every kind runs at 1.0 x efficiency.
    assert rate_alone(cluster, pre, [0, 1]) == rate_alone(cluster, inf, [0, 1]) == 1.0


def test_kinds_without_a_factor_run_at_the_type_speed(tmp_path):
    cluster = _hetero(tmp_path)
    for kind in (JobKind.FINETUNE, JobKind.BATCH):
        assert rate_alone(cluster, job(0, 0.0, 1, 3600.0, kind=kind), [8]) == 0.35
    assert cluster.gpu_speed_by_kind[8].tolist() == [0.37, 0.35, 0.26, 0.35]
    assert cluster.gpu_speed_by_kind[0].tolist() == [1.0] * 4
    # A placement across both types: the slowest GPU for the job's kind.
    mixed = placement_profile(cluster, job(0, 0.0, 2, 3600.0, kind=JobKind.INFERENCE), np.array([0, 8]), MODEL)
    assert mixed.min_speed == 0.26 and mixed.geometry.min_speed_by_kind == (0.37, 0.35, 0.26, 0.35)


def test_a_mixed_placement_takes_the_slowest_gpu_per_kind(tmp_path):
    text = HETERO.replace("speed_by_kind: {pretrain: 0.37, inference: 0.26}", "speed_by_kind: {pretrain: 1.2, inference: 0.26}")
    cluster = _hetero(tmp_path, text)
    g = placement_profile(cluster, job(0, 0.0, 2, 3600.0, kind=JobKind.PRETRAIN), np.array([0, 8]), MODEL).geometry
    assert g.min_speed_by_kind == (1.0, 0.35, 0.26, 0.35)  # L40S faster than H100 for pretrain: H100 is slowest
    assert g.min_speed == 0.35


@pytest.mark.parametrize(
    "speed_by_kind, field, message",
    [
        ("{trainig: 0.3}", "gpu_types.L40S-48GB.speed_by_kind.trainig", "unknown job kind (known: pretrain, finetune, inference, batch)"),
        ("{pretrain: 0}", "gpu_types.L40S-48GB.speed_by_kind.pretrain", "must be a finite number > 0"),
        ("{inference: -0.5}", "gpu_types.L40S-48GB.speed_by_kind.inference", "must be a finite number > 0"),
        ("{inference: .inf}", "gpu_types.L40S-48GB.speed_by_kind.inference", "must be a finite number > 0"),
        ("{batch: fast}", "gpu_types.L40S-48GB.speed_by_kind.batch", "must be float"),
        ("[0.3, 0.2]", "gpu_types.L40S-48GB.speed_by_kind", "must be dict"),
    ],
)
def test_bad_speed_by_kind_names_the_file_and_field(tmp_path, speed_by_kind, field, message):
    text = HETERO.replace("{pretrain: 0.37, inference: 0.26}", speed_by_kind)
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_cluster(p)
    assert f"{p}: {field}: " in str(e.value) and message in str(e.value)


def test_gpu_type_speed_by_kind_in_code():
    t = GpuType("X", 80, 0.5, 0, 300, 50, {"inference": 0.6, JobKind.PRETRAIN: 0.3})
    assert t.kind_speeds == (0.3, 0.5, 0.6, 0.5)
    assert hash(t) == hash(GpuType("X", 80, 0.5, 0, 300, 50, {JobKind.PRETRAIN: 0.3, "inference": 0.6}))
    with pytest.raises(ValueError, match="unknown job kind"):
        GpuType("X", 80, 0.5, 0, 300, 50, {"training": 0.3})
    # The built-ins before Hopper-HBM3e and Blackwell: one speed for every kind, so the clusters
    # made of them behave as before; the three newer types carry the documented per-kind factors
    # (tests/test_nvlink_domains.py checks them against their sources' figures).
    newer = ("H200-141GB", "B200-180GB", "GB200-186GB")
    assert all(not t.speed_by_kind for name, t in GPU_CATALOGUE.items() if name not in newer)
    assert all(GPU_CATALOGUE[name].speed_by_kind for name in newer)


@pytest.mark.parametrize("name", ["mixed-64gpu", "h100-1024gpu", "h100-4node", "philly-sized", "topo-stress-128gpu"])
def test_existing_clusters_speed_by_kind_is_gpu_speed_broadcast(name):
    cluster = load_cluster(name)
    assert not cluster.speed_varies_by_kind
    assert cluster.gpu_speed_by_kind.shape == (cluster.num_gpus, len(JobKind))
    assert (cluster.gpu_speed_by_kind == cluster.gpu_speed[:, None]).all()


def test_hetero_cluster_loads_with_per_kind_factors():
    cluster = load_cluster("hetero-64gpu")
    assert cluster.num_gpus == 64 and cluster.speed_varies_by_kind
    by_type = {t.name: t.kind_speeds for t in cluster.gpu_types}  # (pretrain, finetune, inference, batch)
    assert by_type == {"H100-80GB": (1.0, 1.0, 1.0, 1.0), "A100-80GB": (0.32, 0.44, 0.61, 0.5),
                       "L40S-48GB": (0.37, 0.31, 0.26, 0.35)}
    assert cluster.switch_uplink_GBps[:2].tolist() == [(2 * 400 + 2 * 200) / 2, (200 + 3 * 50) / 2]  # 2:1 leaves
    # The kind ranks the slower types differently: A100 ahead for inference, L40S for pretraining.
    a100, l40s = int(cluster.node_first_gpu[2]), int(cluster.node_first_gpu[5])
    inf = job(0, 0.0, 1, 3600.0, kind=JobKind.INFERENCE, mem=40)
    pre = job(1, 0.0, 1, 3600.0, kind=JobKind.PRETRAIN, mem=40)
    assert rate_alone(cluster, inf, [a100]) > rate_alone(cluster, inf, [l40s])
    assert rate_alone(cluster, pre, [a100]) < rate_alone(cluster, pre, [l40s])


def test_tp8_split_across_a_congested_tor_loses_over_half_on_topo_stress():
    cluster = load_cluster("topo-stress-128gpu")  # 4 leaves of 4 DGX H100, 4:1 leaf uplinks
    assert cluster.switch_uplink_GBps[:4].tolist() == [4 * 400 / 4] * 4
    # The least communication-heavy pretraining profile of the llm-mix workloads.
    tp8 = job(0, 0.0, 8, 3600.0, tp=8, comm=0.30, tp_share=0.5, kind=JobKind.PRETRAIN, mem=80)
    ideal = rate_alone(cluster, tp8, range(8))
    split = np.r_[28:32, 32:36]  # 4 GPUs on h100-03 (leaf0) + 4 on h100-04 (leaf1)
    assert cluster.node_leaf[3] != cluster.node_leaf[4]
    alone = rate_alone(cluster, tp8, split)
    # Two data-parallel jobs between the same two leaves load both uplinks (800 GB/s each).
    def dp16(i):
        return job(i, 0.0, 16, 3600.0, tp=8, comm=0.4, tp_share=0.5, kind=JobKind.PRETRAIN, mem=80)
    others = [np.r_[0:8, 40:48], np.r_[8:16, 48:56]]  # h100-00 + h100-05, h100-01 + h100-06
    profiles = [placement_profile(cluster, tp8, split, MODEL)]
    profiles += [placement_profile(cluster, dp16(i + 1), g, MODEL) for i, g in enumerate(others)]
    loaded = rates_of(cluster, profiles, MODEL)[0]
    assert ideal == 1.0
    assert loaded < alone < 0.5 * ideal
    # By hand: TP over 50 GB/s of network instead of 900 GB/s NVSwitch stretches TP time 18x;
    # the uplinks carry 400 + 400 + 200 GB/s over 400 GB/s: a share of 0.4 stretches it to 45x.
    c_tp = 0.30 * 0.5
    assert alone == pytest.approx(1 / (1 - c_tp + c_tp * 18))
    assert loaded == pytest.approx(1 / (1 - c_tp + c_tp * 18 / 0.4))


def test_features_use_the_job_kinds_speed_on_the_hetero_cluster():
    import gymnasium as gym

    import envs  # noqa: F401
    from envs.decision.features import CANDIDATE_COLUMNS, predicted_rate

    env = gym.make("gangsched/GpuCluster-v0", cluster="hetero-64gpu", workload="llm-mix", num_jobs=60)
    u = env.unwrapped
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    rate_col, speed_col = CANDIDATE_COLUMNS["predicted_rate"], CANDIDATE_COLUMNS["min_gpu_speed"]
    checked = kind_specific = 0
    for _ in range(120):
        cset = u.cset
        for i, cd in enumerate(cset.candidates[:-1]):
            if not cset.mask[i]:
                continue
            assert obs["candidates"][i, speed_col] == np.float32(cd.profile.min_speed)
            assert obs["candidates"][i, rate_col] == np.float32(predicted_rate(cset.state, cd))
            # ... which is the speed model's rate of the job started now (not features' own helpers)
            state = cset.state
            running = [state.profiles[r] for r in state.running.tolist()]
            want = rates_of(state.cluster, running + [cd.profile], state.speed_model)[-1]
            assert obs["candidates"][i, rate_col] == pytest.approx(want, rel=1e-6)
            checked += 1
            kind_specific += cd.profile.min_speed != cd.geometry.min_speed
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(cset.mask))))
        if term or trunc:
            break
    assert checked > 50 and kind_specific > 0


def test_easy_estimates_end_times_at_the_job_kinds_speed():
    import gymnasium as gym

    import envs  # noqa: F401
    from baselines.easy import estimated_end_s

    env = gym.make("gangsched/GpuCluster-v0", cluster="hetero-64gpu", workload="llm-mix", num_jobs=60)
    u = env.unwrapped
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    c = u.cset.state.cluster
    seen = 0
    for _ in range(80):
        state = u.cset.state
        for r in state.running.tolist():
            gpus = state.placement[r]
            speed = min(c.gpu_types[c.node_gpu_type[c.gpu_node[g]]].kind_speeds[int(state.kind[r])] for g in gpus)
            assert estimated_end_s(state, r, gpus) == state.now + state.remaining_estimate_s(r) / speed
            seen += speed != float(c.gpu_speed[gpus].min())
        _, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(u.cset.mask))))
        if term or trunc:
            break
    assert seen > 0
