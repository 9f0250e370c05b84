"""Rack-scale NVLink domains (GB200 NVL72-class): their config, their speed and where the
topology rule places gangs on them.

Expected values come from the speed model's formula in docs/speed.md, worked by hand here, and
from the rules' statements: a gang that fits in one NVLink domain stays in one, whatever the
switches say.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from envs import core
from envs.cluster.config import ConfigError, load_cluster
from envs.cluster.speed import SpeedModel, placement_profile, rates_of
from envs.cluster.topology import GPU_CATALOGUE
from envs.core.jit import reference_path
from envs.decision import placement as P
from envs.jobs import JobKind
from tests.helpers import job

MODEL = SpeedModel()
NVL72 = "gb200-nvl72-4rack"  # 4 racks x 18 trays x 4 GPUs; racks 0-1 under leaf0, 2-3 under leaf1


def trays(c, ids):
    return np.concatenate([c.node_first_gpu[n] + np.arange(c.node_gpus[n]) for n in ids])


def rate_alone(c, j, gpus):
    return rates_of(c, [placement_profile(c, j, np.asarray(gpus), MODEL)], MODEL)[0]


def test_the_nvl72_cluster_has_four_rack_domains():
    c = load_cluster(NVL72)
    assert (c.num_nodes, c.num_gpus, c.num_domains) == (72, 288, 4)
    assert c.node_domain.tolist() == [d for d in range(4) for _ in range(18)]
    assert c.node_tier[0, 17] == 0 and c.node_tier[0, 18] == 1 and c.node_tier[0, 36] == 2  # NVLink, leaf, spine


@pytest.mark.parametrize("reference", [False, True])
def test_tp16_inside_one_domain_runs_at_nvlink_speed_and_split_over_two_at_network_speed(reference):
    """A TP-16 pretraining job (comm 0.3, TP share 0.5: c_tp = 0.15, one TP group so c_dp = 0) on
    four trays of one rack: TP on NVLink 5 (1,800 GB/s >= the 900 GB/s ideal), efficiency 1 x the
    GB200's pretrain factor 2.53. On two trays of rack 0 and two of rack 1: TP over the network,
    50 GB/s a GPU, stretch 900 / 50 = 18: efficiency 1 / (0.85 + 0.15 x 18) = 0.2817."""
    c = load_cluster(NVL72)
    tp16 = job(0, 0.0, 16, 3600.0, tp=16, comm=0.3, tp_share=0.5, kind=JobKind.PRETRAIN)
    inside, split = trays(c, [0, 1, 2, 3]), trays(c, [16, 17, 18, 19])
    if reference:
        with reference_path():
            r_in, r_split = rate_alone(c, tp16, inside), rate_alone(c, tp16, split)
    else:
        r_in, r_split = rate_alone(c, tp16, inside), rate_alone(c, tp16, split)
    assert r_in == pytest.approx(2.53)
    assert r_split == pytest.approx(2.53 / (0.85 + 0.15 * 18))
    assert r_in >= r_split


def test_dp_inside_one_domain_crosses_no_uplink():
    """DP between TP-4 groups on 8 trays of one rack runs on NVLink: tier 0, no uplink, full
    speed; the same gang over racks 1 and 2 crosses both leaves' 2:1 uplinks."""
    c = load_cluster(NVL72)
    dp = job(0, 0.0, 32, 3600.0, tp=4, comm=0.4, tp_share=0.5, kind=JobKind.PRETRAIN)
    g = placement_profile(c, dp, trays(c, range(18, 26)), MODEL).geometry
    assert (g.tier, g.uplinks.tolist(), g.dp_bw_GBps) == (0, [], 1800.0)
    assert rate_alone(c, dp, trays(c, range(18, 26))) == pytest.approx(2.53)
    g = placement_profile(c, dp, trays(c, [*range(32, 36), *range(36, 40)]), MODEL).geometry
    assert g.tier == 2 and g.uplinks.tolist() == [0, 1] and g.dp_bw_GBps == pytest.approx(50 * 0.85)


@pytest.mark.parametrize("reference", [False, True])
def test_the_topology_rule_keeps_a_gang_inside_one_domain(reference):
    """48 GPUs in TP-4 groups. Rack 0 has 10 trays free (40 GPUs), rack 1 all 18 (72), racks 2-3
    none. No rack-0 placement holds it and leaf0 (racks 0 and 1) would; the rule takes rack 1
    alone: its first 12 trays (all equally fast and free, so by id)."""
    c = load_cluster(NVL72)
    free = [4] * 10 + [0] * 8 + [4] * 18 + [0] * 36
    if reference:
        with reference_path():
            take = P._node_take(c, tuple(free), 48, 4, P.TOPOLOGY)
    else:
        take = core.node_take(core.cluster_arrays(c), free, 48, 4, P.TOPOLOGY)
    assert take == {n: 4 for n in range(18, 30)}


def test_a_gang_larger_than_a_domain_spans_the_fewest_leaves():
    """80 GPUs: no rack holds it; leaf0 (racks 0-1, 144 free) does, so it stays under one leaf."""
    c = load_cluster(NVL72)
    take = core.node_take(core.cluster_arrays(c), [4] * 72, 80, 4, P.TOPOLOGY)
    assert sum(take.values()) == 80 and max(take) < 36


def test_blackwell_and_h200_figures_follow_the_documented_rules():
    """docs/speed.md: pretrain = dense BF16 over the H100's 989 TFLOPS, inference = HBM bandwidth
    over its 3.35 TB/s, finetune their geometric mean, rounded to two decimals."""
    for name, bf16, hbm in [("H200-141GB", 989, 4.8), ("B200-180GB", 2250, 8.0), ("GB200-186GB", 2500, 8.0)]:
        t = dict(zip(("pretrain", "finetune", "inference", "batch"), GPU_CATALOGUE[name].kind_speeds))
        assert t["pretrain"] == round(bf16 / 989, 2) and t["inference"] == round(hbm / 3.35, 2)
        assert t["finetune"] == round((bf16 / 989 * hbm / 3.35) ** 0.5, 2)
    assert [GPU_CATALOGUE[n].nvlink_GBps for n in ("H200-141GB", "B200-180GB", "GB200-186GB")] == [900, 1800, 1800]


CLUSTER = """\
name: t
node_types:
  tray: {gpu_type: GB200-186GB, gpus: 4}
  pcie: {gpu_type: L40S-48GB, gpus: 4, intra_node: pcie}
  hopper: {gpu_type: H100-80GB, gpus: 8}
nodes:
  - {names: "t[0-3]", type: tray}
  - {names: "p[0-1]", type: pcie}
  - {names: "h[0-1]", type: hopper}
nvlink_domains:
  - {name: rack0, nodes: "t[0-1]"}
switches:
  - {name: leaf0, nodes: "t[0-3],p[0-1],h[0-1]"}
"""


@pytest.mark.parametrize("replace, message", [
    (('nodes: "t[0-1]"}', 'nodes: "t[0-1],x9"}'), "unknown node 'x9'"),
    (('nodes: "t[0-1]"}', 'nodes: "t[0-1]"}\n  - {name: rack1, nodes: "t[1-2]"}'), "already in domain 'rack0'"),
    (('nodes: "t[0-1]"}', 'nodes: "t0,h0"}'), "mixes GPU types"),
    (('nodes: "t[0-1]"}', 'nodes: "p[0-1]"}'), "has no NVSwitch"),
    (('nodes: "t[0-1]"}', 'nodes: "t0"}'), "at least two nodes"),
    (('{name: rack0, nodes: "t[0-1]"}', '{name: rack0, nodes: "t[0-1]", gpus: 8}'), "unknown key"),
])
def test_bad_nvlink_domains_name_file_and_field(tmp_path, replace, message):
    p = tmp_path / "bad.yaml"
    p.write_text(textwrap.dedent(CLUSTER.replace(*replace)))
    with pytest.raises(ConfigError) as e:
        load_cluster(p)
    assert str(p) in str(e.value) and "nvlink_domains" in str(e.value) and message in str(e.value)
