"""Clusters from real descriptions: Slurm `topology.conf` and `topology.yaml`, `nvidia-smi topo -m`, Alibaba node lists.

Each importer returns the cluster YAML mapping (the schema of configs/clusters/*.yaml) so the
result can be written, read and edited like any other cluster config, and is loaded through the
one validating path, `envs.cluster.config.cluster_from_dict`.

* Slurm `topology.conf` (keys case-insensitive, `#` starts a comment), tree lines
  `SwitchName=s0 Nodes=node[01-04]` / `SwitchName=s2 Switches=s[0-1]` (`LinkSpeed=` accepted and
  ignored: the bandwidths come from the node type and the oversubscription option), block lines
  `BlockName=rack0 Nodes=gb-[000-017]` with one optional `BlockSizes=18,36,72`, or both (a file
  written for either plugin). Slurm's `topology.yaml` (a `.yaml`/`.yml` file): a list of
  topologies (`topology:`, `cluster_default:`, and one of `tree: {switches: [{switch, children,
  nodes}]}`, `block: {block_sizes, blocks: [{block, nodes}]}`, `flat:`); by default the one
  slurmctld takes as the cluster default, or one tree and/or one block topology by name.
  Every node gets the one given node type; switches that have a parent get the given uplink
  oversubscription. Blocks: each base block of two or more nodes is an NVLink domain (the
  node type must have NVSwitch), and when there is no tree the block levels are the switches:
  the nodes hang from one switch per group of the smallest level above the base (per base
  block when there is none), each higher level joins the groups below it, and one switch joins
  what is left when no level holds every block (docs/traces.md states the mapping in full).
  With `blocks_as_leaves` each base block is a leaf switch instead (blocks that are not NVLink
  fabrics).
* `nvidia-smi topo -m`: the matrix of GPU rows (GPU0..GPUn columns, then NIC columns, then
  `CPU Affinity`, `NUMA Affinity`, ...); NIC rows and the legend after the matrix are ignored.
  intra_node = nvswitch when every GPU pair is NV#, nvlink-pairs when only some are, else pcie;
  numa_sockets = the number of distinct NUMA Affinity values (1 when none is given).
* Alibaba openb node list `sn,cpu_milli,memory_mib,gpu,model`: GPU nodes grouped by (model, GPU
  count) into node types (models mapped as in `envs.cluster.topology.ALIBABA_GPU_MODELS`), CPU-only nodes
  left out; the trace has no fabric, so nodes are put, in file order, under leaves of
  `nodes_per_leaf` with one spine. intra_node from the GPU type: NVLink >= 600 GB/s ->
  nvswitch, other NVLink -> nvlink-pairs (V100/P100 hybrid cube mesh), none -> pcie;
  numa_sockets 2 for nodes of 4 GPUs or more, else 1.

Command line:
    python -m envs.cluster.topology_import --slurm topology.conf|topology.yaml [--topology NAME ...]
        [--nvidia-smi topo.txt | --node-type-from CLUSTER] [--gpu-type H100-80GB]
        [--node-type-name NAME] [--blocks-as-leaves] [--name CLUSTER]
        [--oversubscription 2.0] --out cluster.yaml
    python -m envs.cluster.topology_import --alibaba-nodes openb_node_list_gpu_node.csv --out openb.yaml
Malformed input raises ValueError naming file:line (and, in topology.yaml, the entry's path).
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

from envs.cluster.config import cluster_from_dict, load_cluster, resolve_config
from envs.cluster.hostlist import expand_hostlist
from envs.cluster.topology import GPU_CATALOGUE, NodeType, resolve_gpu_models

SLURM_TREE_KEYS = {"switchname": "SwitchName", "nodes": "Nodes", "switches": "Switches", "linkspeed": "LinkSpeed"}
SLURM_BLOCK_KEYS = {"blockname": "BlockName", "nodes": "Nodes"}
MAX_BLOCK_LEVEL = 15  # Slurm keeps at most 16 block levels: 2**15 base blocks in the largest
DEFAULT_BLOCK_LEVELS = (1, 2, 4, 8)  # Slurm's levels, in base blocks, when BlockSizes is not given
YAML_TOPOLOGY_TYPES = ("tree", "block", "flat")
YAML_OTHER_TYPES = ("ring", "torus3d")  # topology types of recent releases that have no import here
NVSWITCH_MIN_NVLINK_GBPS = 600.0  # A100/H100 generation: NVSwitch all-to-all in 8-GPU nodes
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
_NAME = re.compile(r"[^\s,\[\]=#]+")


@dataclass
class SlurmSwitch:
    """One switch (`SwitchName=` line, or a `switches:` entry of topology.yaml): hostlist
    expressions as written and their expansion. `where` prefixes its errors (file:line, plus the
    YAML path for topology.yaml); `ref` names it in other entries' errors."""

    name: str
    line: int
    nodes_expr: str = ""
    switches_expr: str = ""
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    where: str = ""
    ref: str = ""


@dataclass
class SlurmBlock:
    """One base block (`BlockName=` line, or a `blocks:` entry of topology.yaml)."""

    name: str
    line: int
    nodes_expr: str
    nodes: tuple[str, ...]
    where: str
    ref: str


@dataclass
class SlurmTopology:
    """What one Slurm topology file describes: tree switches, base blocks and `BlockSizes`
    (node counts as written, () when not given), each checked. A topology.conf holds switches,
    blocks or both (a file written for either plugin); a topology.yaml gives one selected tree
    topology, one block topology, or one of each."""

    source: Path
    switches: list[SlurmSwitch]
    blocks: list[SlurmBlock]
    block_sizes: tuple[int, ...] = ()
    sizes_where: str = ""
    names: tuple[str, ...] = ()  # topology.yaml: the topologies read

    def block_levels(self) -> list[int]:
        """Slurm's block levels in base blocks, ascending from 1 (BlockSizes / base size, or
        1, 2, 4, 8 when BlockSizes is not given), cut after the first that holds every block,
        as Slurm does."""
        if not self.blocks:
            return []
        if self.block_sizes:
            levels = [1] + [s // self.block_sizes[0] for s in self.block_sizes[1:]]
        else:
            levels = list(DEFAULT_BLOCK_LEVELS)
        out = []
        for level in levels:
            out.append(level)
            if level >= len(self.blocks):
                break
        return out


def _expand(expr: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(expand_hostlist(expr))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _parse_block_sizes(text: str, where: str) -> tuple[int, ...]:
    """`BlockSizes` node counts: integers > 0, increasing, each the first times a power of two."""
    sizes: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"{where}: BlockSizes: expected node counts > 0 separated by commas, got {text!r}")
        sizes.append(int(item))
    return _check_block_sizes(sizes, where)


def _check_block_sizes(sizes: list[int], where: str, label: str = "BlockSizes") -> tuple[int, ...]:
    base = sizes[0]
    for prior, size in zip(sizes, sizes[1:]):
        if size <= prior:
            raise ValueError(f"{where}: {label}: {size} follows {prior}; each size must be larger than the one before")
        if size % base:
            raise ValueError(f"{where}: {label}: {size} is not a multiple of the base block size {base}")
        ratio = size // base
        if ratio & (ratio - 1):
            raise ValueError(f"{where}: {label}: {size} is {ratio} base blocks of {base}; a level must be a power of two base blocks")
        if ratio > 2**MAX_BLOCK_LEVEL:
            raise ValueError(f"{where}: {label}: {size} is {ratio} base blocks; Slurm allows at most {2**MAX_BLOCK_LEVEL}")
    return tuple(sizes)


def _parse_slurm_conf(path: Path) -> SlurmTopology:
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    switches: list[SlurmSwitch] = []
    blocks: list[SlurmBlock] = []
    sizes: tuple[int, ...] = ()
    sizes_where, sizes_line = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        where = f"{path}:{number}"
        fields: dict[str, str] = {}
        keys: list[str] = []
        for token in content.split():
            key, eq, value = token.partition("=")
            if not eq or not value:
                raise ValueError(f"{where}: expected Key=Value, got {token!r}")
            if key.lower() in fields:
                raise ValueError(f"{where}: '{key}' given twice")
            fields[key.lower()] = value
            keys.append(key)
        first = keys[0].lower()
        if first == "blocksizes":
            if len(keys) > 1:
                raise ValueError(f"{where}: BlockSizes= stands on a line of its own, got '{keys[1]}' beside it")
            if sizes_where:
                raise ValueError(f"{where}: BlockSizes given twice (first on line {sizes_line})")
            sizes, sizes_where, sizes_line = _parse_block_sizes(fields["blocksizes"], where), where, number
            continue
        if first == "blockname":
            allowed = SLURM_BLOCK_KEYS
        elif first == "switchname":
            allowed = SLURM_TREE_KEYS
        else:
            raise ValueError(f"{where}: a line must start a switch with SwitchName=, a block with BlockName=, or set BlockSizes=; got '{keys[0]}'")
        for key in keys[1:]:
            if key.lower() not in allowed:
                raise ValueError(f"{where}: unknown key '{key}' (known on a {allowed[first]}= line: {', '.join(allowed.values())})")
        name = fields[first]
        if not _NAME.fullmatch(name):
            raise ValueError(f"{where}: {allowed[first]} '{name}' must not contain ',', '[' or ']'")
        if first == "blockname":
            if "nodes" not in fields:
                raise ValueError(f"{where}: block '{name}' has no Nodes= (an empty block)")
            nodes = _expand(fields["nodes"], where)
            blocks.append(SlurmBlock(name, number, fields["nodes"], nodes, where, f"line {number}"))
            continue
        if "nodes" not in fields and "switches" not in fields:
            raise ValueError(f"{where}: switch '{name}' has neither Nodes= nor Switches=")
        nodes = _expand(fields["nodes"], where) if "nodes" in fields else ()
        children = _expand(fields["switches"], where) if "switches" in fields else ()
        switches.append(SlurmSwitch(name, number, fields.get("nodes", ""), fields.get("switches", ""), nodes, children, where, f"line {number}"))
    if sizes_where and not blocks:
        raise ValueError(f"{sizes_where}: BlockSizes= without any BlockName= line")
    if not switches and not blocks:
        raise ValueError(f"{path}: no SwitchName= or BlockName= line")
    topo = SlurmTopology(path, switches, blocks, sizes, sizes_where)
    _check_topology(topo)
    return topo


class _YamlDoc:
    """A YAML file read with the line of every mapping and list entry, so an error can name
    file:line and the path inside the document ([0].block.blocks[2].nodes)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            text = path.read_text()
        except OSError as e:
            raise ValueError(f"{path}: cannot read: {e.strerror}") from None
        self.lines: dict[str, int] = {}
        try:
            loader = yaml.SafeLoader(text)
            try:
                node = loader.get_single_node()
                self.data = None if node is None else self._convert(loader, node, "")
            finally:
                loader.dispose()
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e)
            raise ValueError(f"{path}{line}: not valid YAML: {problem}") from None

    def _convert(self, loader: yaml.SafeLoader, node: yaml.Node, at: str, inside: tuple[int, ...] = ()):
        self.lines[at] = node.start_mark.line + 1
        if id(node) in inside:
            raise self.error(at, "an alias that contains itself")
        inside = inside + (id(node),)
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(loader, item, f"{at}[{i}]", inside) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                sub = f"{at}.{key}" if at else str(key)
                if not isinstance(key, str):
                    self.lines[sub] = key_node.start_mark.line + 1
                    raise self.error(sub, "keys must be strings")
                if key in out:
                    self.lines[sub] = key_node.start_mark.line + 1
                    raise self.error(sub, "given twice")
                out[key] = self._convert(loader, value_node, sub, inside)
            return out
        return loader.construct_object(node, deep=True)

    def where(self, at: str) -> str:
        line = self.lines.get(at)
        return f"{self.path}:{line}: {at}" if line else f"{self.path}: {at}"

    def error(self, at: str, message: str) -> ValueError:
        return ValueError(f"{self.where(at)}: {message}")

    def mapping(self, value, at: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.error(at, f"expected a mapping with {', '.join(allowed)}, got {type(value).__name__}")
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise self.error(f"{at}.{unknown[0]}", f"unknown key (allowed: {', '.join(allowed)})")
        return value

    def sequence(self, value, at: str) -> list:
        if not isinstance(value, list) or not value:
            raise self.error(at, f"expected a non-empty list, got {value!r}")
        return value

    def string(self, mapping: dict, key: str, at: str, required: bool = True) -> str:
        if key not in mapping:
            if required:
                raise self.error(at, f"missing required key '{key}'")
            return ""
        value = mapping[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"{at}.{key}", f"expected a non-empty string, got {value!r}")
        return value.strip()


def _parse_slurm_yaml(path: Path, select: str | list[str] | None) -> SlurmTopology:
    """The selected topologies of a Slurm topology.yaml (schema: topology.yaml(5)): by name, or
    the first with `cluster_default: true`, else the first, as slurmctld picks its default."""
    doc = _YamlDoc(path)
    entries = doc.data
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a list of topologies (- topology: NAME, then tree:, block: or flat:)")
    allowed = ("topology", "cluster_default", *YAML_TOPOLOGY_TYPES, *YAML_OTHER_TYPES)
    by_name: dict[str, tuple[str, dict, str]] = {}
    order: list[str] = []
    default = None
    for i, raw in enumerate(entries):
        at = f"[{i}]"
        entry = doc.mapping(raw, at, allowed)
        name = doc.string(entry, "topology", at)
        if name in by_name:
            raise doc.error(f"{at}.topology", f"topology '{name}' already defined at {by_name[name][2]}")
        kinds = [k for k in (*YAML_TOPOLOGY_TYPES, *YAML_OTHER_TYPES) if k in entry]
        if len(kinds) != 1:
            raise doc.error(at, f"topology '{name}' must define exactly one of {', '.join(YAML_TOPOLOGY_TYPES + YAML_OTHER_TYPES)}, got {', '.join(kinds) or 'none'}")
        flag = entry.get("cluster_default", False)
        if not isinstance(flag, bool):
            raise doc.error(f"{at}.cluster_default", f"expected true or false, got {flag!r}")
        if flag and default is None:
            default = name
        by_name[name] = (kinds[0], entry, at)
        order.append(name)
    if select is None:
        chosen = [default or order[0]]
    else:
        chosen = [select] if isinstance(select, str) else list(select)
        for name in chosen:
            if name not in by_name:
                raise ValueError(f"{path}: no topology named '{name}' (defined: {', '.join(order)})")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"{path}: topology '{chosen[0]}' selected twice")

    switches: list[SlurmSwitch] = []
    blocks: list[SlurmBlock] = []
    sizes: tuple[int, ...] = ()
    sizes_where = ""
    seen: dict[str, str] = {}
    for name in chosen:
        kind, entry, at = by_name[name]
        if kind in YAML_OTHER_TYPES:
            raise doc.error(f"{at}.{kind}", f"topology '{name}' is a {kind} topology; only tree and block topologies are imported")
        if kind == "flat":
            raise doc.error(f"{at}.flat", f"topology '{name}' is flat: it lists no switches or blocks to import (select a tree or block topology by name)")
        if kind in seen:
            raise ValueError(f"{path}: topologies '{seen[kind]}' and '{name}' are both {kind} topologies; select at most one tree and one block topology")
        seen[kind] = name
        body_at = f"{at}.{kind}"
        if kind == "tree":
            body = doc.mapping(entry[kind], body_at, ("switches",))
            if "switches" not in body:
                raise doc.error(body_at, "missing required key 'switches'")
            for j, raw in enumerate(doc.sequence(body["switches"], f"{body_at}.switches")):
                sat = f"{body_at}.switches[{j}]"
                spec = doc.mapping(raw, sat, ("switch", "children", "nodes"))
                sname = doc.string(spec, "switch", sat)
                if not _NAME.fullmatch(sname):
                    raise doc.error(f"{sat}.switch", f"switch '{sname}' must not contain ',', '[' or ']'")
                nodes_expr = doc.string(spec, "nodes", sat, required=False)
                children_expr = doc.string(spec, "children", sat, required=False)
                if not nodes_expr and not children_expr:
                    raise doc.error(sat, f"switch '{sname}' has neither nodes nor children")
                where = doc.where(sat)
                nodes = _expand(nodes_expr, doc.where(f"{sat}.nodes")) if nodes_expr else ()
                children = _expand(children_expr, doc.where(f"{sat}.children")) if children_expr else ()
                switches.append(SlurmSwitch(sname, doc.lines[sat], nodes_expr, children_expr, nodes, children, where, f"line {doc.lines[sat]}, {sat}"))
        else:
            body = doc.mapping(entry[kind], body_at, ("block_sizes", "blocks"))
            if "blocks" not in body:
                raise doc.error(body_at, "missing required key 'blocks'")
            if "block_sizes" in body:
                raw_sizes = body["block_sizes"]
                sizes_at = f"{body_at}.block_sizes"
                if not isinstance(raw_sizes, list) or not raw_sizes or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in raw_sizes):
                    raise doc.error(sizes_at, f"expected a list of node counts > 0, got {body['block_sizes']!r}")
                sizes_where = doc.where(sizes_at)
                sizes = _check_block_sizes(raw_sizes, sizes_where, "block_sizes")
            for j, raw in enumerate(doc.sequence(body["blocks"], f"{body_at}.blocks")):
                bat = f"{body_at}.blocks[{j}]"
                spec = doc.mapping(raw, bat, ("block", "nodes"))
                bname = doc.string(spec, "block", bat)
                if not _NAME.fullmatch(bname):
                    raise doc.error(f"{bat}.block", f"block '{bname}' must not contain ',', '[' or ']'")
                if "nodes" not in spec:
                    raise doc.error(bat, f"block '{bname}' has no nodes (an empty block)")
                nodes_expr = doc.string(spec, "nodes", bat)
                nodes = _expand(nodes_expr, doc.where(f"{bat}.nodes"))
                blocks.append(SlurmBlock(bname, doc.lines[bat], nodes_expr, nodes, doc.where(bat), f"line {doc.lines[bat]}, {bat}"))
    topo = SlurmTopology(path, switches, blocks, sizes, sizes_where, tuple(chosen))
    _check_topology(topo)
    return topo


def _index_members(items, what: str, relation: str) -> tuple[dict, dict]:
    """(name -> item, node -> item) of a topology's switches or blocks (`what`); a name defined
    twice, or a node `relation` ("under", "in") two of them, is an error naming both places."""
    by_name: dict = {}
    node_of: dict = {}
    for x in items:
        if x.name in by_name:
            raise ValueError(f"{x.where}: {what} '{x.name}' already defined on {by_name[x.name].ref}")
        by_name[x.name] = x
        for n in x.nodes:
            if n in node_of:
                raise ValueError(f"{x.where}: node '{n}' is already {relation} {what} '{node_of[n].name}' ({node_of[n].ref})")
            node_of[n] = x
    return by_name, node_of


def _check_topology(topo: SlurmTopology) -> None:
    """Tree: unique names, known children, each node under one switch, no cycles, some node.
    Blocks: unique names, each node in one block, each block at least the base block size."""
    path = topo.source
    by_name, node_switch = _index_members(topo.switches, "switch", "under")
    for s in topo.switches:
        for c in s.switches:
            if c not in by_name:
                raise ValueError(f"{s.where}: switch '{s.name}' lists unknown switch '{c}'")

    def visit(s: SlurmSwitch, seen: tuple[str, ...]) -> None:
        if s.name in seen:
            raise ValueError(f"{s.where}: switch '{s.name}' is part of a cycle")
        for c in s.switches:
            visit(by_name[c], seen + (s.name,))

    for s in topo.switches:
        visit(s, ())
    if topo.switches and not node_switch:
        raise ValueError(f"{path}: no switch lists any nodes")

    _index_members(topo.blocks, "block", "in")  # unique names, each node in one block
    if topo.blocks:
        base = topo.block_sizes[0] if topo.block_sizes else len(topo.blocks[0].nodes)
        for b in topo.blocks:
            if len(b.nodes) < base:
                origin = "BlockSizes" if topo.block_sizes else f"the first block '{topo.blocks[0].name}' (no BlockSizes given)"
                raise ValueError(f"{b.where}: block '{b.name}' has {len(b.nodes)} nodes, fewer than the base block size {base} set by {origin}")
    if topo.switches and topo.blocks:
        for b in topo.blocks:
            for n in b.nodes:
                if n not in node_switch:
                    raise ValueError(f"{b.where}: node '{n}' of block '{b.name}' is under no switch of the tree")


def read_slurm_topology(path: str | Path, *, topology: str | list[str] | None = None) -> SlurmTopology:
    """A Slurm topology file, checked: topology.conf (tree lines, block lines or both), or
    topology.yaml (a `.yaml`/`.yml` file; `topology` names the topologies to read, at most one
    tree and one block; by default slurmctld's default one). Raises ValueError naming file:line
    (and, in topology.yaml, the path of the entry)."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        return _parse_slurm_yaml(path, topology)
    if topology is not None:
        raise ValueError(f"{path}: a topology name is given, but only topology.yaml (a .yaml file) names its topologies")
    return _parse_slurm_conf(path)


def parse_slurm_topology(path: str | Path) -> list[SlurmSwitch]:
    """The switches of a Slurm tree `topology.conf`, checked: unique names, known children, each
    node under one switch, no cycles. Raises ValueError naming file:line."""
    topo = read_slurm_topology(path)
    if not topo.switches:
        raise ValueError(f"{path}: no SwitchName= line (a topology/block file: read it with read_slurm_topology)")
    return topo.switches


def node_type_dict(node_type: NodeType) -> dict:
    """A NodeType as its entry under `node_types:` of a cluster YAML."""
    d = dataclasses.asdict(node_type)
    del d["name"]
    return d


def _has_nvswitch(node_type: NodeType, gpu_types: dict | None) -> bool:
    catalogue = {**{k: v.nvlink_GBps for k, v in GPU_CATALOGUE.items()}, **{k: float(v.get("nvlink_GBps", 0.0)) for k, v in (gpu_types or {}).items()}}
    return node_type.intra_node == "nvswitch" and catalogue.get(node_type.gpu_type, 0.0) > 0


def _block_fabric(blocks: list[SlurmBlock], levels: list[int], leaves_are_blocks: bool) -> tuple[list[dict], set[str]]:
    """Switches for a block topology: the first materialised level's groups of consecutive base
    blocks hold the nodes; each higher level's groups hold the switches below them (a group with
    one member adds no switch); one more switch joins what is left when the top level has several
    groups. Returns the switches and the names of those that have a parent."""
    materialised = levels if leaves_are_blocks else (levels[1:] or [1])

    def name(lo: int, hi: int) -> str:
        return blocks[lo].name if lo == hi else f"{blocks[lo].name}..{blocks[hi].name}"

    switches: list[dict] = []
    has_parent: set[str] = set()
    size = materialised[0]
    current: list[tuple[int, int, str]] = []
    for lo in range(0, len(blocks), size):
        hi = min(lo + size, len(blocks)) - 1
        switches.append({"name": name(lo, hi), "nodes": [b.nodes_expr for b in blocks[lo : hi + 1]]})
        current.append((lo, hi, name(lo, hi)))
    for size in materialised[1:] + ([len(blocks)] if len(blocks) > materialised[-1] else []):
        grouped: list[tuple[int, int, str]] = []
        for lo in range(0, len(blocks), size):
            members = [c for c in current if lo <= c[0] and c[1] < lo + size]
            if len(members) == 1:
                grouped.append(members[0])
                continue
            hi = members[-1][1]
            switches.append({"name": name(lo, hi), "switches": [c[2] for c in members]})
            has_parent.update(c[2] for c in members)
            grouped.append((lo, hi, name(lo, hi)))
        current = grouped
    return switches, has_parent


def cluster_dict_from_slurm(
    topology_path: str | Path,
    node_type: NodeType,
    *,
    name: str | None = None,
    oversubscription: float = 1.0,
    topology: str | list[str] | None = None,
    blocks_as_leaves: bool = False,
    gpu_types: dict | None = None,
) -> dict:
    """Cluster YAML mapping of a Slurm topology (topology.conf or topology.yaml, tree, block or
    both) whose nodes are all of `node_type`.

    Tree: each switch as written. Blocks: each base block of two or more nodes is an NVLink
    domain (the node type must have NVSwitch); the fabric between blocks comes from the tree when
    the file has one, else from the block levels (`_block_fabric`). `blocks_as_leaves` instead
    makes each base block a leaf switch, for blocks that are not NVLink fabrics.
    `oversubscription` (>= 1) is set on every switch that has a parent switch. `gpu_types`: the
    `gpu_types:` section to carry, when `node_type` uses a GPU type defined there.
    """
    if oversubscription < 1.0:
        raise ValueError(f"oversubscription must be >= 1, got {oversubscription}")
    topo = read_slurm_topology(topology_path, topology=topology)
    source = Path(topology_path).name
    domains: list[dict] = []
    if topo.switches:
        if topo.blocks and blocks_as_leaves:
            raise ValueError(f"{topology_path}: the file has switches, so its blocks cannot also be leaf switches; import without blocks_as_leaves (blocks become NVLink domains)")
        has_parent = {c for s in topo.switches for c in s.switches}
        switch_entries = []
        for s in topo.switches:
            entry: dict = {"name": s.name}
            if s.nodes_expr:
                entry["nodes"] = s.nodes_expr
            if s.switches_expr:
                entry["switches"] = s.switches_expr
            switch_entries.append(entry)
        node_exprs = [s.nodes_expr for s in topo.switches if s.nodes_expr]
        described = f"Slurm {source} (tree{' and blocks' if topo.blocks else ''})"
    else:
        levels = topo.block_levels()
        switch_entries, has_parent = _block_fabric(topo.blocks, levels, blocks_as_leaves)
        node_exprs = [b.nodes_expr for b in topo.blocks]
        base = topo.block_sizes[0] if topo.block_sizes else len(topo.blocks[0].nodes)
        sizes = ",".join(str(level * base) for level in levels)
        described = f"Slurm {source} (topology/block: {len(topo.blocks)} base blocks, levels of {sizes} nodes)"
    if topo.blocks and not blocks_as_leaves:
        if not _has_nvswitch(node_type, gpu_types):
            b = topo.blocks[0]
            raise ValueError(
                f"{b.where}: block '{b.name}' is read as an NVLink domain, but node type '{node_type.name}' "
                f"({node_type.gpu_type}, intra_node {node_type.intra_node}) has no NVSwitch; give an NVSwitch node type, "
                "or read the blocks as leaf switches (--blocks-as-leaves)"
            )
        domains = [{"name": b.name, "nodes": b.nodes_expr} for b in topo.blocks if len(b.nodes) >= 2]
    for entry in switch_entries:
        if entry["name"] in has_parent and oversubscription != 1.0:
            entry["oversubscription"] = oversubscription
    data: dict = {"name": name or Path(topology_path).stem, "description": f"imported from {described}"}
    used_gpu_types = {k: v for k, v in (gpu_types or {}).items() if k == node_type.gpu_type}
    if used_gpu_types:
        data["gpu_types"] = used_gpu_types
    data["node_types"] = {node_type.name: node_type_dict(node_type)}
    data["nodes"] = [{"names": expr, "type": node_type.name} for expr in node_exprs]
    if domains:
        data["nvlink_domains"] = domains
    data["switches"] = switch_entries
    return data


def node_type_from_cluster(path_or_name: str | Path, type_name: str | None = None) -> tuple[NodeType, dict]:
    """A node type of an existing cluster config (its name, or the only one), with the
    `gpu_types:` section it may need. The config is validated first."""
    path = resolve_config(path_or_name, "clusters")
    load_cluster(path)
    data = yaml.safe_load(path.read_text())
    types = data["node_types"]
    if type_name is None:
        if len(types) != 1:
            raise ValueError(f"{path}: node_types: {len(types)} node types ({', '.join(types)}); name one")
        type_name = next(iter(types))
    if type_name not in types:
        raise ValueError(f"{path}: node_types: no node type '{type_name}' (defined: {', '.join(types)})")
    return NodeType(type_name, **types[type_name]), data.get("gpu_types") or {}


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

    `gpu_models` extends `envs.cluster.topology.ALIBABA_GPU_MODELS`; an unknown model is a ValueError
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
    parser = argparse.ArgumentParser(prog="python -m envs.cluster.topology_import", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--slurm", type=Path, help="Slurm topology.conf (tree, block or both) or topology.yaml (a .yaml file)")
    source.add_argument("--alibaba-nodes", type=Path, help="Alibaba openb node list CSV")
    parser.add_argument("--topology", action="append", metavar="NAME",
                        help="topology.yaml: the topology to read (repeat for one tree and one block; default: slurmctld's default)")
    parser.add_argument("--blocks-as-leaves", action="store_true", help="read base blocks as leaf switches, not NVLink domains (with --slurm)")
    node = parser.add_mutually_exclusive_group()
    node.add_argument("--nvidia-smi", type=Path, help="`nvidia-smi topo -m` output of one node (with --slurm)")
    node.add_argument("--node-type-from", metavar="CLUSTER", help="take the node type from a cluster config (name or YAML path; with --slurm)")
    parser.add_argument("--gpu-type", default="H100-80GB", choices=sorted(GPU_CATALOGUE), help="GPU type of the nodes (with --slurm)")
    parser.add_argument("--node-type-name", default=None, help="name of the node type (with --slurm; with --node-type-from, which of its types)")
    parser.add_argument("--name", help="cluster name (default: the input file's stem)")
    parser.add_argument("--oversubscription", type=float, default=None, help="uplink oversubscription of non-top switches (default 1 for Slurm, 2 for Alibaba)")
    parser.add_argument("--out", type=Path, required=True, help="cluster YAML to write")
    args = parser.parse_args(argv)
    try:
        if args.slurm is not None:
            gpu_types: dict = {}
            if args.node_type_from is not None:
                node_type, gpu_types = node_type_from_cluster(args.node_type_from, args.node_type_name)
            elif args.nvidia_smi is not None:
                node_type = node_type_from_nvidia_smi(args.nvidia_smi, gpu_type=args.gpu_type, name=args.node_type_name or "imported-node")
            else:
                node_type = NodeType(args.node_type_name or "imported-node", args.gpu_type)
            data = cluster_dict_from_slurm(
                args.slurm, node_type, name=args.name, oversubscription=args.oversubscription or 1.0,
                topology=args.topology, blocks_as_leaves=args.blocks_as_leaves, gpu_types=gpu_types,
            )  # fmt: skip
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
