"""Clusters from real descriptions: Slurm `topology.conf`, `nvidia-smi topo -m`, Alibaba node lists.

Each importer returns the cluster YAML mapping (the schema of configs/clusters/*.yaml) so the
result can be written, read and edited like any other cluster config, and is loaded through the
one validating path, `envs.config.cluster_from_dict`.

* Slurm tree plugin `topology.conf`: lines `SwitchName=s0 Nodes=node[01-04]` and
  `SwitchName=s2 Switches=s[0-1]` (keys case-insensitive); `LinkSpeed=` is accepted and ignored
  (the bandwidths come from the node type and the oversubscription option); `#` starts a
  comment. Every node gets the one given node type; switches that have a parent get the given
  uplink oversubscription.
* `nvidia-smi topo -m`: the matrix of GPU rows (GPU0..GPUn columns, then NIC columns, then
  `CPU Affinity`, `NUMA Affinity`, ...); NIC rows and the legend after the matrix are ignored.
  intra_node = nvswitch when every GPU pair is NV#, nvlink-pairs when only some are, else pcie;
  numa_sockets = the number of distinct NUMA Affinity values (1 when none is given).
* Alibaba openb node list `sn,cpu_milli,memory_mib,gpu,model`: GPU nodes grouped by (model, GPU
  count) into node types (models mapped as in `envs.traces.ALIBABA_GPU_MODELS`), CPU-only nodes
  left out; the trace has no fabric, so nodes are put, in file order, under leaves of
  `nodes_per_leaf` with one spine. intra_node from the GPU type: NVLink >= 600 GB/s ->
  nvswitch, other NVLink -> nvlink-pairs (V100/P100 hybrid cube mesh), none -> pcie;
  numa_sockets 2 for nodes of 4 GPUs or more, else 1.

Command line:
    python -m envs.topology_import --slurm topology.conf [--nvidia-smi topo.txt]
        [--gpu-type H100-80GB] [--node-type-name NAME] [--name CLUSTER]
        [--oversubscription 2.0] --out cluster.yaml
    python -m envs.topology_import --alibaba-nodes openb_node_list_gpu_node.csv --out openb.yaml
Malformed input raises ValueError naming file:line.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from envs.config import cluster_from_dict
from envs.hostlist import expand_hostlist
from envs.topology import GPU_CATALOGUE, NodeType
from envs.traces import resolve_gpu_models

SLURM_KEYS = ("switchname", "nodes", "switches", "linkspeed")
NVSWITCH_MIN_NVLINK_GBPS = 600.0  # A100/H100 generation: NVSwitch all-to-all in 8-GPU nodes
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")


@dataclass
class SlurmSwitch:
    """One `SwitchName=` line: hostlist expressions as written and their expansion."""

    name: str
    line: int
    nodes_expr: str = ""
    switches_expr: str = ""
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


def parse_slurm_topology(path: str | Path) -> list[SlurmSwitch]:
    """The switches of a Slurm tree `topology.conf`, checked: unique names, known children, each
    node under one switch, no cycles. Raises ValueError naming file:line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    switches: list[SlurmSwitch] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        where = f"{path}:{number}"
        fields: dict[str, str] = {}
        for token in content.split():
            key, eq, value = token.partition("=")
            if not eq or not value:
                raise ValueError(f"{where}: expected Key=Value, got {token!r}")
            if key.lower() not in SLURM_KEYS:
                raise ValueError(f"{where}: unknown key '{key}' (known: SwitchName, Nodes, Switches, LinkSpeed)")
            if key.lower() in fields:
                raise ValueError(f"{where}: '{key}' given twice")
            fields[key.lower()] = value
        if "switchname" not in fields:
            raise ValueError(f"{where}: a line must start a switch with SwitchName=")
        if "nodes" not in fields and "switches" not in fields:
            raise ValueError(f"{where}: switch '{fields['switchname']}' has neither Nodes= nor Switches=")
        try:
            nodes = tuple(expand_hostlist(fields["nodes"])) if "nodes" in fields else ()
            children = tuple(expand_hostlist(fields["switches"])) if "switches" in fields else ()
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        switches.append(SlurmSwitch(fields["switchname"], number, fields.get("nodes", ""), fields.get("switches", ""), nodes, children))

    if not switches:
        raise ValueError(f"{path}: no SwitchName= line")
    by_name: dict[str, SlurmSwitch] = {}
    node_switch: dict[str, SlurmSwitch] = {}
    for s in switches:
        if s.name in by_name:
            raise ValueError(f"{path}:{s.line}: switch '{s.name}' already defined on line {by_name[s.name].line}")
        by_name[s.name] = s
        for n in s.nodes:
            if n in node_switch:
                raise ValueError(f"{path}:{s.line}: node '{n}' is already under switch '{node_switch[n].name}' (line {node_switch[n].line})")
            node_switch[n] = s
    for s in switches:
        for c in s.switches:
            if c not in by_name:
                raise ValueError(f"{path}:{s.line}: switch '{s.name}' lists unknown switch '{c}'")

    def visit(s: SlurmSwitch, seen: tuple[str, ...]) -> None:
        if s.name in seen:
            raise ValueError(f"{path}:{s.line}: switch '{s.name}' is part of a cycle")
        for c in s.switches:
            visit(by_name[c], seen + (s.name,))

    for s in switches:
        visit(s, ())
    if not node_switch:
        raise ValueError(f"{path}: no switch lists any Nodes=")
    return switches


def node_type_dict(node_type: NodeType) -> dict:
    """A NodeType as its entry under `node_types:` of a cluster YAML."""
    d = dataclasses.asdict(node_type)
    del d["name"]
    return d


def cluster_dict_from_slurm(
    topology_path: str | Path, node_type: NodeType, *, name: str | None = None, oversubscription: float = 1.0
) -> dict:
    """Cluster YAML mapping of a Slurm tree topology whose nodes are all of `node_type`.

    `oversubscription` (>= 1) is set on every switch that has a parent switch.
    """
    if oversubscription < 1.0:
        raise ValueError(f"oversubscription must be >= 1, got {oversubscription}")
    switches = parse_slurm_topology(topology_path)
    has_parent = {c for s in switches for c in s.switches}
    switch_entries = []
    for s in switches:
        entry: dict = {"name": s.name}
        if s.nodes_expr:
            entry["nodes"] = s.nodes_expr
        if s.switches_expr:
            entry["switches"] = s.switches_expr
        if s.name in has_parent and oversubscription != 1.0:
            entry["oversubscription"] = oversubscription
        switch_entries.append(entry)
    return {
        "name": name or Path(topology_path).stem,
        "description": f"imported from Slurm {Path(topology_path).name}",
        "node_types": {node_type.name: node_type_dict(node_type)},
        "nodes": [{"names": s.nodes_expr, "type": node_type.name} for s in switches if s.nodes_expr],
        "switches": switch_entries,
    }


def _cells(line: str) -> list[str]:
    """Cells of one matrix line: tab-separated as nvidia-smi prints it, else 2+ spaces apart."""
    parts = line.split("\t") if "\t" in line else re.split(r" {2,}", line)
    return [p.strip() for p in parts]


def node_type_from_nvidia_smi(path: str | Path, *, gpu_type: str = "H100-80GB", name: str = "imported-node") -> NodeType:
    """A NodeType from the `nvidia-smi topo -m` output of one node (other fields: NodeType defaults)."""
    path = Path(path)
    if gpu_type not in GPU_CATALOGUE:
        raise ValueError(f"unknown GPU type '{gpu_type}' (known: {', '.join(GPU_CATALOGUE)})")
    try:
        lines = [_ANSI.sub("", raw).rstrip("\n") for raw in path.read_text().splitlines()]
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    header_at = next((i for i, line in enumerate(lines) if "GPU0" in _cells(line)), None)
    if header_at is None:
        raise ValueError(f"{path}: no matrix header with GPU0 (expected the output of `nvidia-smi topo -m`)")
    header = [c for c in _cells(lines[header_at]) if c]
    gpu_columns = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    if gpu_columns != [f"GPU{i}" for i in range(len(gpu_columns))]:
        raise ValueError(f"{path}:{header_at + 1}: GPU columns must be GPU0..GPUn in order, got {', '.join(gpu_columns)}")
    n = len(gpu_columns)
    nic_columns = header[n:]
    nic_count = next((i for i, c in enumerate(nic_columns) if not re.fullmatch(r"(NIC|mlx)\S*", c)), len(nic_columns))
    has_numa = "NUMA Affinity" in header

    links: list[list[str]] = []
    numa: list[str] = []
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.strip().startswith("Legend"):
            break
        cells = _cells(line)
        label, values = cells[0], cells[1:]
        where = f"{path}:{i + 1}"
        if not re.fullmatch(r"GPU\d+", label):
            if re.fullmatch(r"(NIC|mlx)\S*", label):
                continue
            raise ValueError(f"{where}: unexpected row '{label}' (expected GPU# or NIC# rows)")
        if label != f"GPU{len(links)}":
            raise ValueError(f"{where}: expected row GPU{len(links)}, got {label}")
        if len(values) < n + nic_count:
            raise ValueError(f"{where}: {len(values)} cells, expected at least {n + nic_count}")
        for j, cell in enumerate(values[: n + nic_count]):
            if not _LINK.match(cell):
                column = header[j]
                raise ValueError(f"{where}: column {column}: unknown link '{cell}' (expected X, NV#, PIX, PXB, PHB, NODE, SYS)")
            if (j == len(links)) != (cell == "X"):
                raise ValueError(f"{where}: column {header[j]}: 'X' must be exactly on the diagonal")
        links.append(values[:n])
        affinity = [c for c in values[n + nic_count :] if c]
        if has_numa and len(affinity) >= 2 and affinity[1] != "N/A":
            numa.append(affinity[1])
    if len(links) != n:
        raise ValueError(f"{path}:{header_at + 1}: {n} GPU columns but {len(links)} GPU rows")

    pairs = [links[a][b] for a in range(n) for b in range(n) if a != b]
    if pairs and all(p.startswith("NV") for p in pairs):
        intra = "nvswitch"
    elif any(p.startswith("NV") for p in pairs):
        intra = "nvlink-pairs"
    else:
        intra = "pcie"
    return NodeType(name, gpu_type, gpus=n, intra_node=intra, numa_sockets=max(len(set(numa)), 1))


def alibaba_cluster_dict(
    path: str | Path,
    *,
    gpu_models: dict[str, str] | None = None,
    nodes_per_leaf: int = 8,
    oversubscription: float = 2.0,
    network_GBps: float = 50.0,
    name: str = "openb",
) -> dict:
    """Cluster YAML mapping of an Alibaba openb node list (`sn,cpu_milli,memory_mib,gpu,model`).

    `gpu_models` extends `envs.traces.ALIBABA_GPU_MODELS`; an unknown model is a ValueError
    naming file:line. `network_GBps` is per node (the trace gives none).
    """
    path = Path(path)
    mapping = resolve_gpu_models(gpu_models)
    if nodes_per_leaf < 1:
        raise ValueError(f"nodes_per_leaf must be >= 1, got {nodes_per_leaf}")
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    reader = csv.reader(text.splitlines())
    header = [h.strip() for h in next(reader, [])]
    columns = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
    missing = [c for c in columns if c not in header]
    if missing:
        raise ValueError(f"{path}:1: missing column(s) {', '.join(missing)}")
    node_types: dict[str, dict] = {}
    nodes: list[tuple[str, str]] = []
    for cells in reader:
        where = f"{path}:{reader.line_num}"
        if not cells:
            continue
        if len(cells) != len(header):
            raise ValueError(f"{where}: {len(cells)} cells, the header has {len(header)}")
        row = dict(zip(header, (c.strip() for c in cells)))
        try:
            gpus = int(row["gpu"])
        except ValueError:
            raise ValueError(f"{where}: column 'gpu': expected an integer, got {row['gpu']!r}") from None
        if gpus < 0:
            raise ValueError(f"{where}: column 'gpu': must be >= 0, got {gpus}")
        if gpus == 0:
            continue
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", row["sn"]):
            raise ValueError(f"{where}: column 'sn': node name {row['sn']!r} must be letters, digits, '_', '.', '-'")
        model = row["model"]
        if model not in mapping:
            raise ValueError(f"{where}: column 'model': unknown GPU model '{model}' (known: {', '.join(sorted(mapping))}; map it with gpu_models)")
        gpu_type = GPU_CATALOGUE[mapping[model]]
        type_name = f"{model.lower()}-{gpus}gpu"
        if type_name not in node_types:
            if gpu_type.nvlink_GBps >= NVSWITCH_MIN_NVLINK_GBPS:
                intra = "nvswitch"
            else:
                intra = "nvlink-pairs" if gpu_type.nvlink_GBps > 0 else "pcie"
            nt = NodeType(type_name, gpu_type.name, gpus=gpus, intra_node=intra, numa_sockets=2 if gpus >= 4 else 1, network_GBps=network_GBps)
            node_types[type_name] = node_type_dict(nt)
        nodes.append((row["sn"], type_name))
    if not nodes:
        raise ValueError(f"{path}: no GPU node")

    node_entries: list[dict] = []
    for node, type_name in nodes:
        if node_entries and node_entries[-1]["type"] == type_name:
            node_entries[-1]["names"].append(node)
        else:
            node_entries.append({"names": [node], "type": type_name})
    leaves = [[n for n, _ in nodes[i : i + nodes_per_leaf]] for i in range(0, len(nodes), nodes_per_leaf)]
    width = len(str(len(leaves) - 1))
    switches: list[dict] = [
        {"name": f"leaf{i:0{width}d}", "nodes": leaf, **({"oversubscription": oversubscription} if len(leaves) > 1 else {})}
        for i, leaf in enumerate(leaves)
    ]
    if len(leaves) > 1:
        switches.append({"name": "spine0", "switches": [s["name"] for s in switches]})
    return {
        "name": name,
        "description": f"imported from Alibaba node list {path.name}: {len(nodes)} GPU nodes",
        "node_types": node_types,
        "nodes": node_entries,
        "switches": switches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.topology_import", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm", type=Path, help="Slurm topology.conf (tree plugin)")
    source.add_argument("--alibaba-nodes", type=Path, help="Alibaba openb node list CSV")
    parser.add_argument("--nvidia-smi", type=Path, help="`nvidia-smi topo -m` output of one node (with --slurm)")
    parser.add_argument("--gpu-type", default="H100-80GB", choices=sorted(GPU_CATALOGUE), help="GPU type of the nodes (with --slurm)")
    parser.add_argument("--node-type-name", default="imported-node", help="name of the node type (with --slurm)")
    parser.add_argument("--name", help="cluster name (default: the input file's stem)")
    parser.add_argument("--oversubscription", type=float, default=None, help="uplink oversubscription of non-top switches (default 1 for Slurm, 2 for Alibaba)")
    parser.add_argument("--out", type=Path, required=True, help="cluster YAML to write")
    args = parser.parse_args(argv)
    try:
        if args.slurm is not None:
            if args.nvidia_smi is not None:
                node_type = node_type_from_nvidia_smi(args.nvidia_smi, gpu_type=args.gpu_type, name=args.node_type_name)
            else:
                node_type = NodeType(args.node_type_name, args.gpu_type)
            data = cluster_dict_from_slurm(args.slurm, node_type, name=args.name, oversubscription=args.oversubscription or 1.0)
        else:
            over = 2.0 if args.oversubscription is None else args.oversubscription
            data = alibaba_cluster_dict(args.alibaba_nodes, oversubscription=over, name=args.name or args.alibaba_nodes.stem)
        cluster = cluster_from_dict(data, str(args.out))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))
    print(f"wrote {args.out}: {cluster.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
