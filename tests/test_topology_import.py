"""Cluster import from Slurm topology.conf, nvidia-smi topo -m and an Alibaba node list."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from envs.config import cluster_from_dict, load_cluster
from envs.topology import INTRA_NVSWITCH, NodeType
from envs.topology_import import (
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
