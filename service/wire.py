"""Reading Kubernetes objects as kube-scheduler sends them to an extender, leniently and safely.

Contract:
* Keys are read case-insensitively (`Pod`, `pod`, `POD`), so the Go field names of
  `k8s.io/kube-scheduler/extender/v1`, the lower-case JSON tags of older schedulers and extender
  forks, and the camelCase of the Kubernetes API all read the same. JSON null reads as absent
  wherever Go writes one (nil maps, slices and pointers).
* Anything that cannot be a valid object raises `WireError`, whose message starts with the path
  of the offending part of the request (`ExtenderArgs.Pod.spec.containers[1].resources.limits
  [nvidia.com/gpu]: must be a non-negative integer, got '-2'`). The extender turns it into an
  `Error` answer or a 4xx; it never becomes a 5xx.
* GPUs a pod requests: the sum of `nvidia.com/gpu` over its containers (limits, else requests),
  or the largest of an init container if that is more (Kubernetes' effective request).
* A node's GPUs: `status.allocatable[nvidia.com/gpu]`, else the GPU Feature Discovery label
  `nvidia.com/gpu.count`; its GPU type from `nvidia.com/gpu.product` (and `nvidia.com/gpu.memory`,
  MiB) matched to the project's GPU catalogue (envs.cluster.topology.GPU_CATALOGUE).
* Request bodies are read by `loads` (any JSON) and `loads_extender_args` (ExtenderArgs whose
  Node objects are read only where the extender looks: a node's metadata name and labels and its
  status.allocatable; the rest is kept as the text received, `RawJSON`, and written back as is by
  `dumps`). Both give what `json.loads` gives, or raise what it raises; with msgspec installed
  they scan with it and fall back to `json.loads` on anything it refuses. With msgspec, the
  nodes of `Nodes` are not dicts but `NodeView`s (one typed scan of all nodes) or `LazyNode`s
  (dicts, for a node the typed scan does not take as it is), both read by `parse_node`, which
  gives from them what it gives from the decoded objects, errors included.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from envs.cluster.topology import GPU_CATALOGUE, GpuType
from envs.jobs import JOB_KIND_BY_NAME, PRIORITY_BY_NAME

GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT, GFD_COUNT, GFD_MEMORY = "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory"
# The keys (label, else annotation) naming a pod's group, first found wins: scheduler-plugins
# coscheduling (current, then its older label), Volcano (current, then the kube-batch name).
# Kueue's plain-pod groups last (label pod-group-name, annotation pod-group-total-count).
GANG_NAME_KEYS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io", "scheduling.volcano.sh/group-name",
                  "scheduling.k8s.io/group-name", "kueue.x-k8s.io/pod-group-name")
GANG_SIZE_KEY = "gangsched.io/gang-size"  # GPU-requesting members asking this pod's GPU count
MIN_MEMBER_KEYS = ("gangsched.io/gang-size", "scheduling.k8s.io/group-min-member", "scheduling.volcano.sh/group-min-member",
                   "kueue.x-k8s.io/pod-group-total-count")
# Kueue Topology Aware Scheduling: a PodSet's pods must (required) or should (preferred) run on
# nodes of one domain of the level the value names (a node label key, e.g. a rack label).
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
# Kueue TAS PodSet slices: the PodSet split into slices of SLICE_SIZE pods, each slice on nodes of
# one domain of the level SLICE_TOPOLOGY names; each annotation requires the other.
SLICE_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
ANNOTATION_PREFIX = "gangsched.io/"
TOPOLOGY_NODE_LABEL = "gangsched.io/topology-node"
MAX_GPUS_PER_POD = 1024  # more is not a request any node can hold: refused as an error
MAX_GANG_SIZE = 4096
HIGH_PRIORITY_FROM = 1000  # spec.priority >= this: the high class; < 0: low; else normal


class WireError(ValueError):
    """A request part that is not a valid object; the message starts with its path."""


# ---------------------------------------------------------------------- JSON text

try:  # optional: scans JSON in C without building the objects not read (the service runs without it)
    import msgspec

    _ANY = msgspec.json.Decoder()
    _FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
    _STRINGS = msgspec.json.Decoder(dict[str, str])
    _SCAN_ERRORS: tuple[type[Exception], ...] = (msgspec.MsgspecError, RecursionError, ValueError, TypeError)

    class _NodeMeta(msgspec.Struct):
        name: Any = None
        labels: Optional[dict[str, str]] = None

    class _NodeStatus(msgspec.Struct):
        allocatable: Optional[dict[str, Any]] = None

    class NodeView(msgspec.Struct):
        """A Node object read in one typed scan: the members parse_node reads, under their exact
        names (the rest skipped in C); `raw_json` is set after the scan to the node's text."""

        metadata: Optional[_NodeMeta] = None
        status: Optional[_NodeStatus] = None
        raw_json: Any = msgspec.field(default=None, name="gangsched.io/raw-json")  # no Node member: set after the scan

    _NODE_VIEW = msgspec.json.Decoder(NodeView)
    _NODE_VIEWS = msgspec.json.Decoder(list[NodeView])
except ImportError:  # pragma: no cover - depends on the installation
    msgspec = None


class RawJSON(bytes):
    """A JSON value's text exactly as received; `dumps` writes it back unchanged."""


def loads(body: bytes) -> Any:
    """`json.loads(body)`: the same value, or the same exception (JSONDecodeError,
    UnicodeDecodeError, RecursionError). msgspec reads what it accepts (UTF-8 JSON without NaN,
    infinities or numbers out of float range, not nested past its depth); anything else goes to
    `json.loads`."""
    if msgspec is not None:
        try:
            return _ANY.decode(body)
        except _SCAN_ERRORS:
            pass
    return json.loads(body)


def _decode_fields(raw: Any) -> Any:
    """A JSON object's members with their values left as text (msgspec.Raw), else the value."""
    try:
        return _FIELDS.decode(raw)
    except msgspec.ValidationError:  # not an object: the value itself (its reader says what is wrong)
        return _ANY.decode(raw)


def _lazy_node(raw: Any) -> Any:
    """A Node object with only what `parse_node` reads decoded: the member `get` picks for
    metadata (its name and labels) and for status (its allocatable); `raw_json` is the text."""
    node = _decode_fields(raw)
    if not isinstance(node, dict):
        return node
    for key, inner in (("metadata", ("name", "labels")), ("status", ("allocatable",))):
        picked = _picked(node, key)
        if picked is None:
            continue
        part = _decode_fields(node[picked])
        if isinstance(part, dict):
            for k in inner:
                name = _picked(part, k)
                if name is not None:
                    part[name] = _strings(part[name]) if k == "labels" else _ANY.decode(part[name])
        node[picked] = part
    return LazyNode(node, RawJSON(raw))


def _strings(raw: Any) -> Any:
    """A JSON object of strings (labels), else the value as it is (its reader says what is wrong)."""
    try:
        return _STRINGS.decode(raw)
    except msgspec.ValidationError:
        return _ANY.decode(raw)


def _picked(d: dict, key: str) -> str | None:
    """The member name `get(d, key)` reads (the key itself, else the first equal but for case)."""
    if key in d:
        return key
    k = key.lower()
    return next((name for name in d if name.lower() == k), None)


class LazyNode(dict):
    """A Node object of which only the members `parse_node` reads are decoded (the others hold
    msgspec.Raw text); `raw_json` is the whole object's text as received."""

    def __init__(self, members: dict, raw_json: RawJSON):
        super().__init__(members)
        self.raw_json = raw_json


def loads_extender_args(body: bytes) -> Any:
    """`loads(body)` for ExtenderArgs, except that each Node of `Nodes` (a NodeList's items, or a
    bare list) is a `LazyNode`: `parse_node` reads from it what it reads from the decoded object,
    and filter echoes its text. What `json.loads` would refuse raises as it does."""
    if msgspec is None:
        return json.loads(body)
    try:
        if not body.isascii():
            body.decode("utf-8")  # the parts left as text are not checked by the scan
        top = _decode_fields(body)
        if not isinstance(top, dict):
            return top
        nodes_key = _picked(top, "Nodes")
        out = {k: (v if k == nodes_key else _ANY.decode(v)) for k, v in top.items()}
        if nodes_key is not None:
            nodes = _decode_fields(top[nodes_key])
            if isinstance(nodes, dict):
                items_key = _picked(nodes, "items")
                for k in list(nodes):
                    if k != items_key:
                        nodes[k] = _ANY.decode(nodes[k])
                if items_key is not None:
                    nodes[items_key] = _items(nodes[items_key])
            elif nodes is not None:
                nodes = _items(top[nodes_key])
            out[nodes_key] = nodes
        return out
    except (UnicodeDecodeError, *_SCAN_ERRORS):
        return json.loads(body)


def _items(raw: Any) -> Any:
    """A list of Node objects: each a `NodeView` when the typed scan takes it as it is (a
    non-empty name, labels that are all strings and an allocatable object, under their exact
    member names: what parse_node would read), else a `LazyNode` (a member absent or named in
    another case, a value of another type: parse_node reads it as the decoded object, and says
    what is wrong), so what parse_node gives is the same either way."""
    try:
        items = _ITEMS.decode(raw)
    except msgspec.ValidationError:  # not a list
        return _ANY.decode(raw)
    try:
        views = _NODE_VIEWS.decode(raw)  # all in one scan
    except msgspec.ValidationError:  # some node is not of the view's types: each on its own
        views = None
    out = []
    for k, r in enumerate(items):
        if views is not None:
            v = views[k]
        else:
            try:
                v = _NODE_VIEW.decode(r)
            except msgspec.ValidationError:
                out.append(_lazy_node(r))
                continue
        m, st = v.metadata, v.status
        if m is None or st is None or type(m.name) is not str or not m.name or m.labels is None or st.allocatable is None:
            out.append(_lazy_node(r))
            continue
        v.raw_json = RawJSON(r)
        out.append(v)
    return out


def dumps(obj: Any) -> bytes:
    """Compact JSON of `obj` (as `json.dumps(obj, separators=(",", ":"))`), with each `RawJSON`
    in it written as its text."""
    raws: list[bytes] = []
    token = uuid.uuid4().hex  # a fresh placeholder: no string of the answer can hold it

    def default(o: Any) -> Any:
        if isinstance(o, RawJSON):
            raws.append(o)
            return f"{token}{len(raws) - 1}"
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    text = json.dumps(obj, separators=(",", ":"), default=default).encode()
    if not raws:
        return text
    return re.sub(rb'"' + token.encode() + rb'(\d+)"', lambda m: raws[int(m.group(1))], text)


def get(d: Any, key: str, path: str = "") -> Any:
    """d[key] read case-insensitively; None when absent or null. `d` None reads as empty."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise WireError(f"{path or 'request'}: must be an object, got {type(d).__name__}")
    if key in d:
        return d[key]
    k = key.lower()
    for name, value in d.items():
        if isinstance(name, str) and name.lower() == k:
            return value
    return None


def get_any(d: Any, keys: tuple[str, ...], path: str = "") -> Any:
    for k in keys:
        v = get(d, k, path)
        if v is not None:
            return v
    return None


def get_dict(d: Any, key: str, path: str) -> dict:
    v = get(d, key, path)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WireError(f"{path}.{key}: must be an object, got {type(v).__name__}")
    return v


def get_list(d: Any, key: str, path: str) -> list:
    v = get(d, key, path)
    if v is None:
        return []
    if not isinstance(v, list):
        raise WireError(f"{path}.{key}: must be a list, got {type(v).__name__}")
    return v


def get_str(d: Any, key: str, path: str, default: str = "") -> str:
    v = get(d, key, path)
    if v is None:
        return default
    if not isinstance(v, str):
        raise WireError(f"{path}.{key}: must be a string, got {type(v).__name__}")
    return v


def string_map(d: Any, key: str, path: str) -> dict[str, str]:
    m = get_dict(d, key, path)
    for k, v in m.items():
        if not isinstance(v, str):
            raise WireError(f"{path}.{key}[{k}]: must be a string, got {type(v).__name__}")
    return m


_INT = re.compile(r"^\s*[+-]?\d+\s*$")


def count(value: Any, path: str, maximum: int) -> int:
    """A non-negative integer quantity (`8`, `"8"`); refuses fractions, negatives and more than
    `maximum`, naming `path`."""
    if isinstance(value, bool):
        raise WireError(f"{path}: must be a non-negative integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _INT.match(value) and len(value) < 30:
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise WireError(f"{path}: must be a non-negative integer, got {value!r}")
    if value > maximum:
        raise WireError(f"{path}: {value} is more than {maximum}")
    return value


def _number(value: str, path: str, lo: float, hi: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise WireError(f"{path}: must be a number, got {value!r}") from None
    if not lo <= v <= hi:  # also refuses NaN
        raise WireError(f"{path}: must be in [{lo:g}, {hi:g}], got {value!r}")
    return v


# ---------------------------------------------------------------------- GPU types


@lru_cache(maxsize=1024)
def gpu_type_from_product(product: str | None, memory_mib: str | None = None) -> GpuType | None:
    """The catalogue type of a GFD product label (`NVIDIA-H100-80GB-HBM3`, `Tesla-V100-SXM2-16GB`,
    `NVIDIA-L40S`); None when no family matches."""
    if not product:
        return None
    tokens = [t for t in re.split(r"[-_\s]+", product.upper()) if t]
    mem_gb = None
    for t in tokens:
        m = re.fullmatch(r"(\d+)GB", t)
        if m:
            mem_gb = int(m.group(1))
    if mem_gb is None and memory_mib:
        try:
            mem_gb = round(float(memory_mib) / 1024)
        except ValueError:
            mem_gb = None
    family = [t for name, t in GPU_CATALOGUE.items() if name.rsplit("-", 1)[0].upper() in tokens]
    if not family:
        return None
    if mem_gb is not None:
        return min(family, key=lambda t: abs(t.memory_gb - mem_gb))
    return max(family, key=lambda t: t.memory_gb)


def gpu_type_named(name: str, path: str) -> GpuType:
    """A GPU type a pod asks for: a catalogue name (`H100-80GB`) or a GFD product string."""
    t = GPU_CATALOGUE.get(name) or gpu_type_from_product(name)
    if t is None:
        raise WireError(f"{path}: unknown GPU type {name!r} (known: {', '.join(GPU_CATALOGUE)})")
    return t


# ---------------------------------------------------------------------- pods


@dataclass
class PodInfo:
    key: str  # namespace/name: the job id in the decision state
    name: str
    namespace: str
    uid: str
    gpus: int  # GPUs requested by the pod
    priority: int  # spec.priority (0 when absent)
    priority_class: int  # 0 low, 1 normal, 2 high (envs.jobs)
    preemptible: bool
    estimate_s: float
    kind: str
    mem_per_gpu_gb: float
    comm_fraction: float | None  # None: the default for its gang size
    gpu_type: GpuType | None
    gang: str | None  # namespace/group name
    gang_size: int  # pods of the gang (1: not a gang); see gang_size_key
    gang_key: str | None = None  # the label or annotation that named the group
    gang_size_key: str | None = None  # the annotation that gave gang_size (None: none did)
    gang_size_given: int | None = None  # once resolved (service.k8s.resolve_gang): gang_size as parsed
    labels: dict[str, str] = field(default_factory=dict)
    topology_level: str | None = None  # the node label key of a Kueue topology request (None: none)
    topology_required: bool = False  # required (True) or preferred (False)
    slice_level: str | None = None  # the node label key of a Kueue slice request (None: none)
    slice_size: int = 0  # pods of each slice (0: no slice request)
    slice_where: str = ""  # the request path of the slice size annotation, for errors found later
    slice_error: str = ""  # what is wrong with the slice annotations ("" nothing): raised when the pod is decided
    errors: list[str] = field(default_factory=list)  # parse_pod(strict=False): the fields read as their defaults, why


def _container_gpus(containers: list, path: str) -> list[int]:
    out = []
    for i, c in enumerate(containers):
        cp = f"{path}[{i}]"
        res = get_dict(c, "resources", cp)
        total = None
        for part in ("limits", "requests"):
            q = get_dict(res, part, f"{cp}.resources")
            v = get(q, GPU_RESOURCE, f"{cp}.resources.{part}")
            if v is not None:
                total = count(v, f"{cp}.resources.{part}[{GPU_RESOURCE}]", MAX_GPUS_PER_POD)
                break
        out.append(total or 0)
    return out


def parse_pod(pod: Any, path: str, strict: bool = True) -> PodInfo:
    """The pod as the extender and the watch read it. What names the pod and what it holds (an
    object, its metadata name, its labels and annotations as string maps, its containers' GPU
    requests) raises WireError when it cannot be read. So do the scheduling fields
    (`spec.priority`, the gangsched.io annotations, the group size, the Kueue topology
    annotations) when `strict`; otherwise each one that cannot be read takes its default (as
    if absent) and its message is kept in `PodInfo.errors`: the watch counts a pod bound to a
    node with the GPUs it requests whatever its annotations say, as the kubelet runs it. The
    slice annotations never raise here (`PodInfo.slice_error`, raised when the pod is decided)."""
    if not isinstance(pod, dict):
        raise WireError(f"{path}: required: a v1 Pod object, got {type(pod).__name__ if pod is not None else 'null'}")
    meta = get_dict(pod, "metadata", path)
    spec = get_dict(pod, "spec", path)
    name = get_str(meta, "name", f"{path}.metadata")
    if not name:
        raise WireError(f"{path}.metadata.name: required")
    namespace = get_str(meta, "namespace", f"{path}.metadata", "default") or "default"
    labels = string_map(meta, "labels", f"{path}.metadata")
    notes = string_map(meta, "annotations", f"{path}.metadata")
    sp = f"{path}.spec"
    gpus = sum(_container_gpus(get_list(spec, "containers", sp), f"{sp}.containers"))
    init = _container_gpus(get_list(spec, "initContainers", sp), f"{sp}.initContainers")
    gpus = max([gpus, *init])
    if gpus > MAX_GPUS_PER_POD:
        raise WireError(f"{sp}.containers: {gpus} GPUs in total is more than {MAX_GPUS_PER_POD}")
    errors: list[str] = []

    def read(reader, default):
        """reader(); on WireError, raised when strict, else kept in errors and `default` used."""
        try:
            return reader()
        except WireError as e:
            if strict:
                raise
            errors.append(str(e))
            return default

    priority = read(lambda: _spec_priority(spec, sp), 0)

    def note(key: str) -> str | None:
        v = notes.get(ANNOTATION_PREFIX + key)
        return v if v is None else v.strip()

    ap = f"{path}.metadata.annotations[{ANNOTATION_PREFIX}"
    default_class = 0 if priority < 0 else 2 if priority >= HIGH_PRIORITY_FROM else 1
    priority_class = read(lambda: _one_of(note("priority"), PRIORITY_BY_NAME, f"{ap}priority]", None), None)
    priority_class = default_class if priority_class is None else PRIORITY_BY_NAME[priority_class]
    preemptible = read(lambda: _true_or_false(note("preemptible"), f"{ap}preemptible]"), True)
    kind = read(lambda: _one_of(note("kind") or None, JOB_KIND_BY_NAME, f"{ap}kind]", "finetune"), "finetune")

    def number(key: str, lo: float, hi: float, default: float | None) -> float | None:
        v = note(key)
        return default if v is None else read(lambda: _number(v, f"{ap}{key}]", lo, hi), default)

    est = number("estimate-s", 1.0, 1e9, 3600.0)
    mem = number("mem-per-gpu-gb", 0.0, 1e4, 1.0)
    comm = number("comm-fraction", 0.0, 0.99, None)
    gtype = read(lambda: gpu_type_named(note("gpu-type"), f"{ap}gpu-type]"), None) if note("gpu-type") else None
    group = group_key = None
    for k in GANG_NAME_KEYS:
        group = labels.get(k) or notes.get(k)
        if group:
            group_key = k
            break
    size, size_key = read(lambda: _group_size(notes, labels, path), (1, None)) if group else (1, None)
    level, required = read(lambda: _topology_request(notes, labels, path), (None, False))
    try:  # not raised here: a running pod is counted by the watch whatever its slice annotations say
        slice_level, slice_size, slice_where = _slice_request(notes, labels, path)
        slice_error = ""
    except WireError as e:
        slice_level, slice_size, slice_where, slice_error = None, 0, "", str(e)
    return PodInfo(
        key=f"{namespace}/{name}", name=name, namespace=namespace, uid=get_str(meta, "uid", f"{path}.metadata"),
        gpus=gpus, priority=priority, priority_class=priority_class,
        preemptible=preemptible, estimate_s=est, kind=kind, mem_per_gpu_gb=mem,
        comm_fraction=comm, gpu_type=gtype, gang=f"{namespace}/{group}" if group else None, gang_size=size, labels=labels,
        gang_key=group_key, gang_size_key=size_key, topology_level=level, topology_required=required,
        slice_level=slice_level, slice_size=slice_size, slice_where=slice_where, slice_error=slice_error, errors=errors,
    )


def _spec_priority(spec: dict, sp: str) -> int:
    prio_raw = get(spec, "priority", sp)
    if prio_raw is None:
        return 0
    if isinstance(prio_raw, bool) or not isinstance(prio_raw, int) or abs(prio_raw) > 2**31:
        raise WireError(f"{sp}.priority: must be a 32-bit integer, got {prio_raw!r}")
    return prio_raw


def _one_of(value: str | None, allowed: dict, where: str, default):
    """value when it is a key of allowed, default when absent; else WireError naming `where`."""
    if value is None:
        return default
    if value not in allowed:
        raise WireError(f"{where}: must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _true_or_false(value: str | None, where: str) -> bool:
    if value is None:
        return True
    if value.lower() not in ("true", "false"):
        raise WireError(f"{where}: must be true or false, got {value!r}")
    return value.lower() == "true"


def _group_size(notes: dict[str, str], labels: dict[str, str], path: str) -> tuple[int, str | None]:
    """(pods of the group, the key that gave it) from the first of MIN_MEMBER_KEYS set, else (1, None)."""
    for k in MIN_MEMBER_KEYS:
        v = notes.get(k, labels.get(k))
        if v is not None:
            where = f"{path}.metadata.annotations[{k}]" if k in notes else f"{path}.metadata.labels[{k}]"
            size = count(v, where, MAX_GANG_SIZE)
            if size < 1:
                raise WireError(f"{where}: must be at least 1, got {v!r}")
            return size, k
    return 1, None


def _topology_request(notes: dict[str, str], labels: dict[str, str], path: str) -> tuple[str | None, bool]:
    """(node label key, required) of Kueue's podset-required-topology or -preferred-topology,
    else (None, False); both on one pod, or a value that is no label key, raise WireError."""
    level, required = None, False
    for k, req in ((REQUIRED_TOPOLOGY, True), (PREFERRED_TOPOLOGY, False)):
        v = notes.get(k, labels.get(k))
        if v is None:
            continue
        where = f"{path}.metadata.annotations[{k}]" if k in notes else f"{path}.metadata.labels[{k}]"
        if level is not None:
            raise WireError(f"{where}: a pod asks for one topology level, not both {REQUIRED_TOPOLOGY} and {PREFERRED_TOPOLOGY}")
        v = v.strip()
        if not v or any(ch.isspace() for ch in v) or len(v) > 316:
            raise WireError(f"{where}: must be a node label key (such as cloud.provider.com/topology-rack), got {v!r}")
        level, required = v, req
    return level, required


def _slice_request(notes: dict[str, str], labels: dict[str, str], path: str) -> tuple[str | None, int, str]:
    """(slice level, pods per slice, the size annotation's path) of Kueue's
    `podset-slice-required-topology` + `podset-slice-size`, or (None, 0, ""). Each needs the other
    (as Kueue's webhook checks, JobSets included: KEP-2724 describes a JobSet default to the Job's
    parallelism that Kueue does not apply); the level is a node label key, the size an integer
    >= 1. Raises WireError naming the annotation; parse_pod keeps the message in `slice_error`
    for the extender to raise when it decides the pod (service.k8s `check_slices`), where it also
    checks that the size divides the gang."""
    found = {}
    for k in (SLICE_TOPOLOGY, SLICE_SIZE):
        v = notes.get(k, labels.get(k))
        if v is not None:
            found[k] = (v.strip(), f"{path}.metadata.annotations[{k}]" if k in notes else f"{path}.metadata.labels[{k}]")
    if not found:
        return None, 0, ""
    if SLICE_SIZE not in found:
        raise WireError(f"{found[SLICE_TOPOLOGY][1]}: needs {SLICE_SIZE} (the pods of each slice) beside it, "
                        "as Kueue's webhook requires, for a JobSet's pods too: set it on the pod template "
                        "(for one slice per Job of a JobSet, the Job's parallelism)")
    if SLICE_TOPOLOGY not in found:
        raise WireError(f"{found[SLICE_SIZE][1]}: cannot be set without {SLICE_TOPOLOGY} (the level each slice is inside)")
    level, where = found[SLICE_TOPOLOGY]
    if not level or any(ch.isspace() for ch in level) or len(level) > 316:
        raise WireError(f"{where}: must be a node label key (such as nvidia.com/gpu.clique), got {level!r}")
    raw, where = found[SLICE_SIZE]
    if not _INT.match(raw) or len(raw) >= 30:
        raise WireError(f"{where}: must be a whole number of pods >= 1, got {raw!r}")
    size = int(raw)
    if size < 1:
        raise WireError(f"{where}: must be a whole number of pods >= 1, got {raw!r}")
    if size > MAX_GANG_SIZE:
        raise WireError(f"{where}: {size} is more than {MAX_GANG_SIZE}")
    return level, size, where


# ---------------------------------------------------------------------- nodes


@dataclass
class NodeInfo:
    name: str
    labels: dict[str, str]
    allocatable_gpus: int | None  # None: not given
    gpu_type: GpuType | None  # from the GFD labels
    raw: Any = None  # the object as received (echoed back by filter)


def parse_node(node: Any, path: str) -> NodeInfo:
    if msgspec is not None and type(node) is NodeView:  # name, labels and allocatable checked by the typed scan
        labels, alloc = node.metadata.labels, node.status.allocatable
        v = alloc.get(GPU_RESOURCE) if GPU_RESOURCE in alloc else get(alloc, GPU_RESOURCE)
        gpus = None
        if type(v) is str and v.isdigit() and v.isascii() and len(v) < 6 and int(v) <= 1 << 16:  # "8": count's answer, no regex
            gpus = int(v)
        elif v is not None:
            gpus = count(v, f"{path}.status.allocatable[{GPU_RESOURCE}]", 1 << 16)
        elif labels.get(GFD_COUNT) is not None:
            gpus = count(labels[GFD_COUNT], f"{path}.metadata.labels[{GFD_COUNT}]", 1 << 16)
        return NodeInfo(node.metadata.name, labels, gpus,
                        gpu_type_from_product(labels.get(GFD_PRODUCT), labels.get(GFD_MEMORY)), node.raw_json)
    if not isinstance(node, dict):
        raise WireError(f"{path}: must be a v1 Node object, got {type(node).__name__ if node is not None else 'null'}")
    meta = get_dict(node, "metadata", path)
    name = get_str(meta, "name", f"{path}.metadata")
    if not name:
        raise WireError(f"{path}.metadata.name: required")
    labels = string_map(meta, "labels", f"{path}.metadata")
    status = get_dict(node, "status", path)
    alloc = get_dict(status, "allocatable", f"{path}.status")
    v = get(alloc, GPU_RESOURCE, f"{path}.status.allocatable")
    gpus = None
    if v is not None:
        gpus = count(v, f"{path}.status.allocatable[{GPU_RESOURCE}]", 1 << 16)
    elif labels.get(GFD_COUNT) is not None:
        gpus = count(labels[GFD_COUNT], f"{path}.metadata.labels[{GFD_COUNT}]", 1 << 16)
    raw = node.raw_json if isinstance(node, LazyNode) else node
    return NodeInfo(name, labels, gpus, gpu_type_from_product(labels.get(GFD_PRODUCT), labels.get(GFD_MEMORY)), raw)


def node_list(args: dict, path: str) -> tuple[list[NodeInfo] | None, list[str] | None]:
    """`Nodes` (a v1 NodeList, or a bare list of nodes) and `NodeNames` of ExtenderArgs."""
    nodes = get(args, "Nodes", path)
    names = get(args, "NodeNames", path)
    parsed = None
    if nodes is not None:
        items = nodes if isinstance(nodes, list) else get(nodes, "items", f"{path}.Nodes")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise WireError(f"{path}.Nodes.items: must be a list, got {type(items).__name__}")
        parsed = [parse_node(n, f"{path}.Nodes.items[{i}]") for i, n in enumerate(items)]
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise WireError(f"{path}.NodeNames: must be a list of node names")
    return parsed, names
