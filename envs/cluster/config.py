"""YAML loading and validation for clusters and workloads.

Every error is a `ConfigError` that names the file and the field (`mixed.yaml: nodes[2].type:
unknown node type 'dgx'`), raised at load time, never from inside a run.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import yaml

from envs.cluster.hostlist import expand_hostlist
from envs.cluster.topology import GPU_CATALOGUE, INTRA_NODE_KINDS, Cluster, GpuType, NodeType, build_cluster
from envs.jobs import JOB_KIND_BY_NAME

CONFIG_ROOT = Path(__file__).resolve().parents[2] / "configs"


class ConfigError(ValueError):
    """A config file is malformed or inconsistent; the message names the file and field."""

    def __init__(self, source: str, field: str, message: str):
        self.source, self.field = source, field
        super().__init__(f"{source}: {field}: {message}" if field else f"{source}: {message}")


def resolve_config(name_or_path: str | Path, kind: str) -> Path:
    """A path to a YAML file, or a config name: configs/<kind>/NAME.yaml (`mixed-64gpu`). A config
    in a subfolder is named with its folder, and only so: `research/ppo-quick` is
    configs/train/research/ppo-quick.yaml, and `ppo-quick` alone is not found. An unknown name's
    error says which file it looked for and lists every name it knows, subfolders included."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(str(p), "", "no such file")
        return p
    root = CONFIG_ROOT / kind
    candidate = root / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = sorted(q.relative_to(root).with_suffix("").as_posix() for q in root.rglob("*.yaml"))
        raise ConfigError(str(name_or_path), "", f"not a file and not a known {kind.removesuffix('s')} config: no {candidate} "
                                                 f"(known: {', '.join(known)})")
    return candidate


def read_yaml(path: Path, raw: bytes | None = None) -> dict:
    """The mapping in YAML file `path` (or in `raw`, its bytes already read)."""
    try:
        data = yaml.safe_load(path.read_text() if raw is None else raw.decode())
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "", f"invalid YAML: {e}") from None
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "the top level must be a mapping")
    return data


class Fields:
    """Typed access to one mapping of a config file, so each error names its field."""

    def __init__(self, data: Any, source: str, prefix: str):
        if not isinstance(data, dict):
            raise ConfigError(source, prefix or "(top level)", f"must be a mapping, got {type(data).__name__}")
        self.data, self.source, self.prefix = data, source, prefix

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.source, self.path(key), message)

    def check_keys(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.data) - allowed)
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def get(self, key: str, typ: type | tuple, default: Any = ..., *, min_value: float | None = None, choices=None):
        if key not in self.data:
            if default is ...:
                raise self.error(key, "missing required field")
            return default
        value = self.data[key]
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, typ) or (isinstance(value, bool) and typ in (int, float)):
            names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise self.error(key, f"must be {names}, got {value!r}")
        if min_value is not None and value < min_value:
            raise self.error(key, f"must be >= {min_value}, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"must be one of {', '.join(map(str, choices))}, got {value!r}")
        return value

    def sub(self, key: str, default: Any = ...) -> "Fields":
        return Fields(self.get(key, dict, default), self.source, self.path(key))


def _names(f: Fields, key: str) -> list[str]:
    value = f.get(key, (str, list), [])
    try:
        if isinstance(value, str):
            return expand_hostlist(value)
        return [n for item in value for n in expand_hostlist(str(item))]
    except ValueError as e:
        raise f.error(key, str(e)) from None


def _speed_by_kind(f: Fields) -> dict:
    """A GPU type's optional per-job-kind speed factors ({pretrain: 0.32, ...}): known kinds,
    finite numbers > 0. Kinds left out run at the type's `speed`."""
    out = {}
    for key in f.data:
        if key not in JOB_KIND_BY_NAME:
            raise f.error(str(key), f"unknown job kind (known: {', '.join(JOB_KIND_BY_NAME)})")
        value = f.get(key, float)
        if not 0 < value < float("inf"):
            raise f.error(key, f"must be a finite number > 0, got {value!r}")
        out[JOB_KIND_BY_NAME[key]] = value
    return out


def cluster_from_dict(data: dict, source: str) -> Cluster:
    top = Fields(data, source, "")
    top.check_keys({"name", "description", "gpu_types", "node_types", "nodes", "switches", "nvlink_domains"})
    name = top.get("name", str, Path(source).stem)

    extra_types: dict[str, GpuType] = {}
    for tname, spec in top.get("gpu_types", dict, {}).items():
        f = Fields(spec, source, f"gpu_types.{tname}")
        f.check_keys({"memory_gb", "speed", "speed_by_kind", "nvlink_GBps", "power_busy_w", "power_idle_w"})
        extra_types[tname] = GpuType(
            tname,
            f.get("memory_gb", float, min_value=1),
            f.get("speed", float, min_value=1e-6),
            f.get("nvlink_GBps", float, 0.0, min_value=0),
            f.get("power_busy_w", float, 300.0, min_value=0),
            f.get("power_idle_w", float, 50.0, min_value=0),
            _speed_by_kind(f.sub("speed_by_kind", {})),
        )
    catalogue = {**GPU_CATALOGUE, **extra_types}

    node_types: dict[str, NodeType] = {}
    nt_specs = top.get("node_types", dict)
    if not nt_specs:
        raise top.error("node_types", "needs at least one node type")
    allowed_nt = {f.name for f in dataclasses.fields(NodeType)} - {"name"}
    for tname, spec in nt_specs.items():
        f = Fields(spec, source, f"node_types.{tname}")
        f.check_keys(allowed_nt)
        gpu_type = f.get("gpu_type", str)
        if gpu_type not in catalogue:
            raise f.error("gpu_type", f"unknown GPU type '{gpu_type}' (known: {', '.join(sorted(catalogue))}; add it under gpu_types)")
        node_types[tname] = NodeType(
            tname,
            gpu_type,
            gpus=f.get("gpus", int, 8, min_value=1),
            intra_node=f.get("intra_node", str, "nvswitch", choices=INTRA_NODE_KINDS),
            numa_sockets=f.get("numa_sockets", int, 2, min_value=1),
            pcie_GBps=f.get("pcie_GBps", float, 64.0, min_value=1e-3),
            network_GBps=f.get("network_GBps", float, 400.0, min_value=1e-3),
            power_base_w=f.get("power_base_w", float, 800.0, min_value=0),
        )

    nodes: list[tuple[str, str]] = []
    node_list = top.get("nodes", list)
    if not node_list:
        raise top.error("nodes", "needs at least one node group")
    for i, spec in enumerate(node_list):
        f = Fields(spec, source, f"nodes[{i}]")
        f.check_keys({"names", "type"})
        t = f.get("type", str)
        if t not in node_types:
            raise f.error("type", f"unknown node type '{t}' (defined: {', '.join(node_types)})")
        names = _names(f, "names")
        if not names:
            raise f.error("names", "missing required field")
        nodes.extend((n, t) for n in names)

    switches = []
    for i, spec in enumerate(top.get("switches", list, [])):
        f = Fields(spec, source, f"switches[{i}]")
        f.check_keys({"name", "nodes", "switches", "oversubscription"})
        switches.append(
            {
                "name": f.get("name", str),
                "nodes": _names(f, "nodes"),
                "switches": _names(f, "switches"),
                "oversubscription": f.get("oversubscription", float, 1.0, min_value=1.0),
            }
        )
    if not switches and len(nodes) > 1:
        raise top.error("switches", "a cluster of more than one node needs switches")
    domains = []
    for i, spec in enumerate(top.get("nvlink_domains", list, [])):
        f = Fields(spec, source, f"nvlink_domains[{i}]")
        f.check_keys({"name", "nodes"})
        domains.append({"name": f.get("name", str), "nodes": _names(f, "nodes")})
    try:
        return build_cluster(name, node_types, nodes, switches, extra_types, domains)
    except ValueError as e:
        field = "nvlink_domains" if "nvlink domain" in str(e) else "switches" if "switch" in str(e) else "nodes"
        raise ConfigError(source, field, str(e)) from None


def parse_seeds(text: str | int | list) -> list[int]:
    """Seeds as `0-9`, `0,3,5`, `0-4,10` (or an int or a list of ints): distinct non-negative
    integers in the order given. ValueError naming the problem otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"bad seeds {text!r}: expected integers and ranges like 0-9,12")
    if isinstance(text, int):
        text = str(text)
    if isinstance(text, list):
        text = ",".join(str(x) for x in text)
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo_text, sep, hi_text = part.partition("-")
        if not lo_text.strip().isdigit() or (sep and not hi_text.strip().isdigit()):
            raise ValueError(f"bad seeds '{text}': expected integers and ranges like 0-9,12")
        lo, hi = int(lo_text), int(hi_text) if sep else int(lo_text)
        if lo > hi:
            raise ValueError(f"bad seed range '{part}': start is after end")
        seeds.extend(range(lo, hi + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"bad seeds '{text}': a seed appears twice")
    return seeds


# Clusters loaded in this process, by file (resolved path and content): a Cluster is immutable,
# and the memo tables of the hot path (GPU picks, geometries, node counts: envs.cluster.memo) live per
# cluster object, so every env of a process on the same file shares them.
_LOADED_CLUSTERS: dict[tuple[str, bytes], Cluster] = {}


def load_cluster(name_or_path: str | Path) -> Cluster:
    """Load and validate a cluster from a config name or a YAML path. Loading a file whose
    content is unchanged gives the same `Cluster` object again."""
    if isinstance(name_or_path, Cluster):
        return name_or_path
    path = resolve_config(name_or_path, "clusters")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror}") from None
    key = (str(path.resolve()), hashlib.blake2b(raw, digest_size=16).digest())
    hit = _LOADED_CLUSTERS.get(key)
    if hit is None:  # built from the bytes hashed, so the key always names its content
        hit = cluster_from_dict(read_yaml(path, raw), str(path))
        if len(_LOADED_CLUSTERS) >= 64:  # a process that loads many files keeps the newest
            _LOADED_CLUSTERS.pop(next(iter(_LOADED_CLUSTERS)))
        _LOADED_CLUSTERS[key] = hit
    return hit
