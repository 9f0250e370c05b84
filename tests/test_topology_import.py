"""Cluster import from Slurm topology.conf, nvidia-smi topo -m and an Alibaba node list."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from envs.cluster.config import cluster_from_dict, load_cluster
from envs.cluster.topology import INTRA_NVSWITCH, NodeType
from envs.cluster.topology_import import (
    alibaba_cluster_dict,
    cluster_dict_from_slurm,
    main,
    node_type_from_nvidia_smi,
    parse_slurm_topology,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_slurm_three_levels_gives_tiers() -> None:
    node_type = NodeType("dgx", "H100-80GB")
    data = cluster_dict_from_slurm(FIXTURES / "slurm_3level.conf", node_type, oversubscription=2.0)
    cluster = cluster_from_dict(data, "slurm_3level")
    assert cluster.node_names == [f"node{i:02d}" for i in range(1, 9)]
    assert cluster.switch_names == ["leaf0", "leaf1", "leaf2", "leaf3", "agg0", "agg1", "core"]
    assert cluster.switch_level.tolist() == [1, 1, 1, 1, 2, 2, 3]
    # Nodes pair up under leaves, leaves pair up under aggregation switches, the core joins all.
    group_leaf = np.arange(8) // 2
    group_agg = np.arange(8) // 4
    expected = np.where(group_agg[:, None] != group_agg[None, :], 3, np.where(group_leaf[:, None] != group_leaf[None, :], 2, 1))
    np.fill_diagonal(expected, 0)
    assert cluster.node_tier.tolist() == expected.tolist()
    assert np.isinf(cluster.switch_uplink_GBps[-1]) and cluster.switch_uplink_GBps[0] == pytest.approx(2 * 400 / 2.0)


def test_slurm_errors_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"slurm_bad_child.conf:3: switch 'spine' lists unknown switch 'leaf2'"):
        parse_slurm_topology(FIXTURES / "slurm_bad_child.conf")
    cases = {
        "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n[2-3]\n": r":2: node 'n2' is already under switch 's0'",
        "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s0 Nodes=n3\n": r":2: switch 's0' already defined on line 1",
        "# c\nSwitchName=s0 Nodes=n[1-2\n": r":2: hostlist 'n\[1-2': unbalanced",
        "SwitchName=s0 Nodes=n1 Speed=1\n": r":1: unknown key 'Speed'",
        "Nodes=n1\n": r":1: a line must start a switch",
        "SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=c Nodes=n1\n": r":1: switch 'a' is part of a cycle",
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"topo{i}.conf"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"topo{i}.conf{message}"):
            parse_slurm_topology(path)


def test_nvidia_smi_nvswitch_node() -> None:
    nt = node_type_from_nvidia_smi(FIXTURES / "nvsmi_dgx_h100.txt", gpu_type="H100-80GB", name="dgx")
    assert (nt.name, nt.gpu_type, nt.gpus, nt.intra_node, nt.numa_sockets) == ("dgx", "H100-80GB", 8, "nvswitch", 2)


def test_nvidia_smi_pcie_node() -> None:
    nt = node_type_from_nvidia_smi(FIXTURES / "nvsmi_pcie_l40s.txt", gpu_type="L40S-48GB")
    assert (nt.gpus, nt.intra_node, nt.numa_sockets) == (8, "pcie", 2)


def test_nvidia_smi_nvlink_pairs_and_bad_cell(tmp_path: Path) -> None:
    text = (FIXTURES / "nvsmi_pcie_l40s.txt").read_text()
    lines = text.splitlines()
    # GPU0 <-> GPU1 over NVLink only: a node of NVLink pairs.
    for row, col in ((1, 2), (2, 1)):
        cells = lines[row].split("\t")
        cells[col] = "NV4"
        lines[row] = "\t".join(cells)
    path = tmp_path / "pairs.txt"
    path.write_text("\n".join(lines) + "\n")
    assert node_type_from_nvidia_smi(path, gpu_type="L40S-48GB").intra_node == "nvlink-pairs"
    cells = lines[3].split("\t")
    cells[5] = "QPI"
    lines[3] = "\t".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"pairs.txt:4: column GPU4: unknown link 'QPI'"):
        node_type_from_nvidia_smi(path, gpu_type="L40S-48GB")


def test_cli_writes_loadable_yaml(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "imported.yaml"
    argv = ["--slurm", str(FIXTURES / "slurm_3level.conf"), "--nvidia-smi", str(FIXTURES / "nvsmi_pcie_l40s.txt"),
            "--gpu-type", "L40S-48GB", "--node-type-name", "l40s", "--name", "lab", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    cluster = load_cluster(out)
    assert cluster.name == "lab" and cluster.num_gpus == 64 and cluster.max_tier == 3
    assert yaml.safe_load(out.read_text())["node_types"]["l40s"]["intra_node"] == "pcie"
    assert main(["--slurm", str(FIXTURES / "slurm_bad_child.conf"), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "slurm_bad_child.conf:3" in capsys.readouterr().err


def test_alibaba_node_list_cluster() -> None:
    data = alibaba_cluster_dict(FIXTURES / "alibaba_nodes.csv", nodes_per_leaf=4)
    cluster = cluster_from_dict(data, "alibaba_nodes")
    assert cluster.num_nodes == 9  # the CPU-only node is left out
    assert cluster.num_gpus == 2 + 2 + 8 + 8 + 4 + 8 + 8 + 4 + 8
    by_type = {name: data["node_types"][name]["gpu_type"] for name in data["node_types"]}
    assert by_type["v100m32-8gpu"] == "V100-32GB" and by_type["t4-4gpu"] == "T4-16GB"
    assert data["node_types"]["t4-4gpu"]["intra_node"] == "pcie"
    assert cluster.node_intra[cluster.node_names.index("openb-node-0026")] == INTRA_NVSWITCH
    assert [s["name"] for s in data["switches"]] == ["leaf0", "leaf1", "leaf2", "spine0"]


def test_alibaba_unknown_model_and_override() -> None:
    with pytest.raises(ValueError, match=r"alibaba_nodes_unknown_model.csv:9: column 'model': unknown GPU model 'G9'.*gpu_models"):
        alibaba_cluster_dict(FIXTURES / "alibaba_nodes_unknown_model.csv")
    data = alibaba_cluster_dict(FIXTURES / "alibaba_nodes_unknown_model.csv", gpu_models={"G9": "L40S-48GB", "G2": "H100-80GB"})
    assert data["node_types"]["g9-4gpu"]["gpu_type"] == "L40S-48GB"
    assert data["node_types"]["g2-8gpu"]["gpu_type"] == "H100-80GB"
    with pytest.raises(ValueError, match="unknown GPU type 'B200'"):
        alibaba_cluster_dict(FIXTURES / "alibaba_nodes.csv", gpu_models={"G2": "B200"})


# --- Slurm topology/block and topology.yaml -------------------------------------------------

GB200_CONFIG = Path(__file__).parent.parent / "configs" / "clusters" / "gb200-nvl72-4rack.yaml"


def gb200_tray() -> NodeType:
    """The hand-written config's node type, read straight from its YAML."""
    entry = yaml.safe_load(GB200_CONFIG.read_text())["node_types"]["gb200-tray"]
    return NodeType("gb200-tray", **entry)


def fabric(cluster) -> dict:
    """What the model sees of a cluster's topology, independent of switch and domain names."""
    names = np.array(cluster.node_names)
    domains = {frozenset(names[cluster.node_domain == d]) for d in range(cluster.num_domains)}
    switches = sorted(
        (sorted(names[cluster.node_under_switch[:, s]]), int(cluster.switch_level[s]), float(cluster.switch_uplink_GBps[s]))
        for s in range(len(cluster.switch_names))
    )
    return {
        "nodes": list(cluster.node_names),
        "gpus": cluster.node_gpus.tolist(),
        "gpu_types": [t.name for t in cluster.gpu_types],
        "domains": domains,
        "tier": cluster.node_tier.tolist(),
        "switches": switches,
        "tier_bandwidth": cluster.tier_bandwidth_GBps.tolist(),
    }


@pytest.mark.parametrize(
    "fixture, topology",
    [("slurm_block_nvl72.conf", None), ("slurm_topology_nvl72.yaml", None), ("slurm_topology_nvl72.yaml", ["ib-tree", "nvl72-blocks"])],
)
def test_slurm_blocks_give_the_gb200_nvl72_cluster(fixture: str, topology) -> None:
    data = cluster_dict_from_slurm(FIXTURES / fixture, gb200_tray(), oversubscription=2.0, topology=topology)
    imported = cluster_from_dict(data, fixture)
    written = load_cluster(GB200_CONFIG)
    # Four racks of 18 trays, each rack one NVLink domain; racks 0-1 and 2-3 share a leaf.
    assert imported.num_nodes == 72 and imported.num_gpus == 288 and imported.num_domains == 4
    rack = np.arange(72) // 18
    assert all(set(imported.node_domain[rack == r].tolist()) == {imported.node_domain[18 * r]} for r in range(4))
    expected = np.where(rack[:, None] == rack[None, :], 0, np.where(rack[:, None] // 2 == rack[None, :] // 2, 1, 2))
    assert imported.node_tier.tolist() == expected.tolist()
    assert fabric(imported) == fabric(written)


def test_a_slurm_block_file_gives_the_nvl72_scenarios_cluster() -> None:
    """Eight racks as base blocks with BlockSizes=18,36: four leaves of two racks (2:1 uplinks) and
    the switch the importer adds over them, as configs/clusters/gb200-nvl72-8rack.yaml writes it."""
    data = cluster_dict_from_slurm(FIXTURES / "slurm_block_nvl72_8rack.conf", gb200_tray(), oversubscription=2.0)
    imported = cluster_from_dict(data, "slurm_block_nvl72_8rack.conf")
    written = load_cluster("gb200-nvl72-8rack")
    assert imported.num_domains == 8 and imported.num_gpus == 576
    assert fabric(imported) == fabric(written)


def test_slurm_block_levels_follow_slurm_and_join_the_rest(tmp_path: Path) -> None:
    """Five base blocks of two nodes. With Slurm's default levels (1, 2, 4, 8 base blocks):
    pairs of blocks under leaves, blocks 0-3 under a level-2 switch, the fifth block's leaf and
    that switch under the top (the 8-block level, cut at 5 blocks). With BlockSizes=2,4 (no level
    holds all five) one switch joins the three pairs' leaves, so the fabric stays connected."""
    lines = [f"BlockName=b{i} Nodes=n[{2 * i}-{2 * i + 1}]" for i in range(5)]
    block = np.arange(10) // 2
    same = block[:, None] == block[None, :]
    pair = block[:, None] // 2 == block[None, :] // 2
    quad = (block[:, None] < 4) & (block[None, :] < 4)
    for i, (sizes, expected) in enumerate(
        (("", np.where(same, 0, np.where(pair, 1, np.where(quad, 2, 3)))), ("BlockSizes=2,4\n", np.where(same, 0, np.where(pair, 1, 2))))
    ):
        path = tmp_path / f"five{i}.conf"
        path.write_text("\n".join(lines) + "\n" + sizes)
        cluster = cluster_from_dict(cluster_dict_from_slurm(path, NodeType("dgx", "H100-80GB")), path.name)
        assert cluster.num_domains == 5 and cluster.num_gpus == 80
        assert cluster.node_tier.tolist() == expected.tolist(), sizes
        # Default: 3 leaves, 1 level-2 switch, the top (the fifth block's group adds no switch
        # of its own at level 2). BlockSizes=2,4: 3 leaves and the switch joining them.
        assert len(cluster.switch_names) == (5 if not sizes else 4)


def test_topology_yaml_tree_gives_tiers() -> None:
    data = cluster_dict_from_slurm(FIXTURES / "slurm_3level.yaml", NodeType("dgx", "H100-80GB"), oversubscription=2.0)
    cluster = cluster_from_dict(data, "slurm_3level.yaml")
    assert cluster.node_names == [f"node{i:02d}" for i in range(1, 9)] and cluster.num_domains == 0
    assert cluster.switch_names == ["leaf0", "leaf1", "leaf2", "leaf3", "agg0", "agg1", "core"]
    group_leaf, group_agg = np.arange(8) // 2, np.arange(8) // 4
    expected = np.where(group_agg[:, None] != group_agg[None, :], 3, np.where(group_leaf[:, None] != group_leaf[None, :], 2, 1))
    np.fill_diagonal(expected, 0)
    assert cluster.node_tier.tolist() == expected.tolist()
    assert np.isinf(cluster.switch_uplink_GBps[-1]) and cluster.switch_uplink_GBps[0] == pytest.approx(2 * 400 / 2.0)


def test_one_node_blocks_are_no_domains(tmp_path: Path) -> None:
    path = tmp_path / "dgx.conf"
    path.write_text("".join(f"BlockName=b{i} Nodes=dgx{i}\n" for i in range(4)) + "BlockSizes=1,2,4\n")
    data = cluster_dict_from_slurm(path, NodeType("dgx", "H100-80GB"))
    assert "nvlink_domains" not in data
    cluster = cluster_from_dict(data, "dgx")
    pair = np.arange(4) // 2
    expected = np.where(pair[:, None] == pair[None, :], 1, 2)
    np.fill_diagonal(expected, 0)
    assert cluster.num_domains == 0 and cluster.node_tier.tolist() == expected.tolist()


def test_blocks_without_nvswitch_refused_or_read_as_leaves(tmp_path: Path) -> None:
    path = tmp_path / "l40s.conf"
    path.write_text("# PCIe nodes\n" + "".join(f"BlockName=b{i} Nodes=l[{2 * i}-{2 * i + 1}]\n" for i in range(4)) + "BlockSizes=2,4,8\n")
    l40s = NodeType("l40s", "L40S-48GB", intra_node="pcie")
    with pytest.raises(ValueError, match=r"l40s.conf:2: block 'b0' is read as an NVLink domain, but node type 'l40s' .* has no NVSwitch.*--blocks-as-leaves"):
        cluster_dict_from_slurm(path, l40s)
    cluster = cluster_from_dict(cluster_dict_from_slurm(path, l40s, blocks_as_leaves=True, oversubscription=2.0), "l40s")
    block = np.arange(8) // 2
    expected = np.where(block[:, None] == block[None, :], 1, np.where(block[:, None] // 2 == block[None, :] // 2, 2, 3))
    np.fill_diagonal(expected, 0)
    assert cluster.num_domains == 0 and cluster.node_tier.tolist() == expected.tolist()
    assert sorted(cluster.switch_level.tolist()) == [1, 1, 1, 1, 2, 2, 3]


def test_tree_and_blocks_in_one_conf(tmp_path: Path) -> None:
    """A topology.conf with switch and block lines (as written for either plugin): the tree is the
    fabric, the blocks the NVLink domains; nodes in no block stay outside any domain."""
    path = tmp_path / "both.conf"
    path.write_text("SwitchName=leaf0 Nodes=gb[0-3]\nSwitchName=leaf1 Nodes=gb[4-7]\nSwitchName=top Switches=leaf[0-1]\n"
                    "BlockName=r0 Nodes=gb[0-3]\nBlockName=r1 Nodes=gb[4-5]\nBlockSizes=2\n")  # fmt: skip
    cluster = cluster_from_dict(cluster_dict_from_slurm(path, gb200_tray()), "both")
    assert cluster.node_domain.tolist() == [0, 0, 0, 0, 1, 1, -1, -1]
    assert cluster.node_tier[4, 5] == 0 and cluster.node_tier[4, 6] == 1 and cluster.node_tier[0, 4] == 2
    path.write_text("SwitchName=leaf0 Nodes=gb[0-3]\nBlockName=r0 Nodes=gb[2-5]\n")
    with pytest.raises(ValueError, match=r"both.conf:2: node 'gb4' of block 'r0' is under no switch"):
        cluster_dict_from_slurm(path, gb200_tray())


BLOCK_CONF_ERRORS = {
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[3-6]\n": r":2: node 'n3' is already in block 'b0' \(line 1\)",
    "BlockName=b0 Nodes=n[0-3]\n# c\nBlockName=b0 Nodes=n[4-7]\n": r":3: block 'b0' already defined on line 1",
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-7]\nBlockSizes=4,10\n": r":3: BlockSizes: 10 is not a multiple of the base block size 4",
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-7]\nBlockSizes=4,12\n": r":3: BlockSizes: 12 is 3 base blocks of 4; a level must be a power of two",
    "BlockName=b0 Nodes=n[0-7]\nBlockSizes=8,4\n": r":2: BlockSizes: 4 follows 8",
    "BlockName=b0 Nodes=n[0-3]\nBlockSizes=4,x\n": r":2: BlockSizes: expected node counts > 0",
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-6]\nBlockSizes=4,8\n": r":2: block 'b1' has 3 nodes, fewer than the base block size 4 set by BlockSizes",
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-6]\n": r":2: block 'b1' has 3 nodes, fewer than the base block size 4 set by the first block 'b0'",
    "BlockName=b0 Nodes=n[0-3]\nBlockName=b1\n": r":2: block 'b1' has no Nodes= \(an empty block\)",
    "BlockName=b0 Nodes=n[0-3] LinkSpeed=5\n": r":1: unknown key 'LinkSpeed' \(known on a BlockName= line: BlockName, Nodes\)",
    "BlockName=b0 Nodes=n[0-3]\nBlockSizes=4\nBlockSizes=4\n": r":3: BlockSizes given twice \(first on line 2\)",
    "BlockSizes=4 BlockName=b0\n": r":1: BlockSizes= stands on a line of its own",
    "BlockSizes=4\n": r":1: BlockSizes= without any BlockName= line",
    "# nothing\n": r": no SwitchName= or BlockName= line",
    "BlockName=b[0] Nodes=n[0-3]\n": r":1: BlockName 'b\[0\]' must not contain",
    "BlockName=b0 Nodes=n[0-3\n": r":1: hostlist 'n\[0-3': unbalanced",
}


def test_block_conf_errors_name_file_and_line(tmp_path: Path) -> None:
    for i, (text, message) in enumerate(BLOCK_CONF_ERRORS.items()):
        path = tmp_path / f"block{i}.conf"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"block{i}.conf{message}"):
            cluster_dict_from_slurm(path, gb200_tray())


_B = "- topology: t\n  block:\n    block_sizes: [4, 8]\n    blocks:\n      - block: b0\n        nodes: n[0-3]\n"
YAML_ERRORS = {
    _B + "      - block: b1\n        nodes: n[4-7]\n        speed: 3\n": r":9: \[0\]\.block\.blocks\[1\]\.speed: unknown key \(allowed: block, nodes\)",
    _B + "      - block: b1\n        nodes: n[3-6]\n": r":7: \[0\]\.block\.blocks\[1\]: node 'n3' is already in block 'b0' \(line 5, \[0\]\.block\.blocks\[0\]\)",
    _B + "      - block: b1\n": r":7: \[0\]\.block\.blocks\[1\]: block 'b1' has no nodes \(an empty block\)",
    _B + "      - block: b1\n        nodes: n[4-5]\n": r":7: \[0\]\.block\.blocks\[1\]: block 'b1' has 2 nodes, fewer than the base block size 4",
    _B.replace("[4, 8]", "[4, 6]"): r":3: \[0\]\.block\.block_sizes: block_sizes: 6 is not a multiple of the base block size 4",
    _B.replace("[4, 8]", "'4,8'"): r":3: \[0\]\.block\.block_sizes: expected a list of node counts > 0",
    _B.replace("nodes: n[0-3]", "nodes: 5"): r":6: \[0\]\.block\.blocks\[0\]\.nodes: expected a non-empty string, got 5",
    "topology: t\n": r": expected a list of topologies",
    "- topology: t\n  block: [\n": r":3: not valid YAML",
    "- topology: t\n  topology: u\n  flat: true\n": r":2: \[0\]\.topology: given twice",
    "- topology: t\n  flat: true\n  block: {blocks: []}\n": r":1: \[0\]: topology 't' must define exactly one of tree, block, flat",
    "- topology: t\n  cluster_default: true\n  flat: true\n": r":3: \[0\]\.flat: topology 't' is flat",
    "- topology: r\n  ring:\n    rings: []\n": r":3: \[0\]\.ring: topology 'r' is a ring topology; only tree and block",
    "- topology: t\n  tree:\n    switches:\n      - switch: s0\n        nodes: n[0-1]\n      - switch: top\n        children: s[0-1]\n":
        r":6: \[0\]\.tree\.switches\[1\]: switch 'top' lists unknown switch 's1'",
    "- topology: t\n  tree:\n    switches:\n      - switch: s0\n": r":4: \[0\]\.tree\.switches\[0\]: switch 's0' has neither nodes nor children",
    "- topology: t\n  tree:\n    switches:\n      - switch: s0\n        nodes: n[0-1]\n        link_speed: 5\n": r":6: \[0\]\.tree\.switches\[0\]\.link_speed: unknown key",
    "- topology: t\n  flat: true\n- topology: t\n  flat: true\n": r":3: \[1\]\.topology: topology 't' already defined at \[0\]",
    "- topology: t\n  cluster_default: yes please\n  flat: true\n": r":2: \[0\]\.cluster_default: expected true or false",
    "- &a\n  topology: t\n  tree: {switches: [*a]}\n": r":1: \[0\]\.tree\.switches\[0\]: an alias that contains itself",
}  # fmt: skip


def test_topology_yaml_errors_name_file_line_and_path(tmp_path: Path) -> None:
    for i, (text, message) in enumerate(YAML_ERRORS.items()):
        path = tmp_path / f"topo{i}.yaml"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"topo{i}.yaml{message}"):
            cluster_dict_from_slurm(path, gb200_tray())
    fixture = FIXTURES / "slurm_topology_nvl72.yaml"
    with pytest.raises(ValueError, match=r"no topology named 'nope' \(defined: ib-tree, nvl72-blocks, everything\)"):
        cluster_dict_from_slurm(fixture, gb200_tray(), topology="nope")
    with pytest.raises(ValueError, match=r"slurm_topology_nvl72.yaml:28: \[2\]\.flat: topology 'everything' is flat"):
        cluster_dict_from_slurm(fixture, gb200_tray(), topology="everything")


def test_cli_imports_block_conf_and_topology_yaml(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    written = fabric(load_cluster(GB200_CONFIG))
    for fixture in ("slurm_block_nvl72.conf", "slurm_topology_nvl72.yaml"):
        out = tmp_path / f"{fixture}.cluster.yaml"
        argv = ["--slurm", str(FIXTURES / fixture), "--node-type-from", "gb200-nvl72-4rack", "--oversubscription", "2", "--out", str(out)]
        assert main(argv) == 0
        assert fabric(load_cluster(out)) == written
    out = tmp_path / "tree.yaml"
    assert main(["--slurm", str(FIXTURES / "slurm_topology_nvl72.yaml"), "--topology", "ib-tree", "--gpu-type", "GB200-186GB", "--out", str(out)]) == 0
    assert load_cluster(out).num_domains == 0 and load_cluster(out).num_nodes == 72
    capsys.readouterr()
    bad = tmp_path / "bad.yaml"
    bad.write_text(_B + "      - block: b1\n        nodes: n[3-6]\n")
    assert main(["--slurm", str(bad), "--gpu-type", "GB200-186GB", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "bad.yaml:7: [0].block.blocks[1]: node 'n3' is already in block 'b0'" in capsys.readouterr().err
    assert main(["--slurm", str(FIXTURES / "slurm_block_nvl72.conf"), "--topology", "t", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "only topology.yaml" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()
