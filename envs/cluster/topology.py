"""Cluster topology: GPU and node types, the switch fabric as a networkx graph, and the arrays
the hot path reads instead of walking the graph.

Bandwidths are in gigabytes per second (`_GBps`), power in watts (`_w`).

Tiers: the tier that joins two GPUs is 0 when they share a node, otherwise the level of the
lowest switch above both (1 = same leaf, 2 = same spine, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np

from envs.jobs import JOB_KIND_BY_NAME, JOB_KIND_NAMES, JobKind

# Reference point of the speed model: a job's `work_s` is its runtime on this GPU type with all
# its traffic on the ideal link for its tier.
REFERENCE_NVLINK_GBPS = 900.0  # H100 NVSwitch, the ideal for tensor-parallel traffic
REFERENCE_NET_PER_GPU_GBPS = 50.0  # 8 x 400 Gb/s per 8-GPU node, the ideal for data-parallel traffic


NUM_JOB_KINDS = len(JobKind)


@dataclass(frozen=True)
class GpuType:
    """A GPU model. `speed` is its relative speed (reference H100 = 1.0); `speed_by_kind`
    optionally overrides it per job kind (the speed-up of a faster GPU differs by workload: see
    docs/speed.md). Pass it as a mapping from JobKind (or its name: `pretrain`) to a factor > 0;
    it is stored as sorted (JobKind, factor) pairs so the type stays hashable. Kinds not given
    run at `speed`."""

    name: str
    memory_gb: float
    speed: float  # relative compute speed, reference H100 = 1.0
    nvlink_GBps: float  # 0 when the type has no NVLink
    power_busy_w: float
    power_idle_w: float
    speed_by_kind: tuple[tuple[JobKind, float], ...] = ()  # empty: every kind runs at `speed`

    def __post_init__(self):
        items = self.speed_by_kind.items() if isinstance(self.speed_by_kind, dict) else self.speed_by_kind
        pairs = {}
        for kind, factor in items:
            k = JOB_KIND_BY_NAME.get(kind) if isinstance(kind, str) else kind
            if k not in JOB_KIND_NAMES:
                raise ValueError(f"GPU type '{self.name}': speed_by_kind: unknown job kind {kind!r} "
                                 f"(known: {', '.join(JOB_KIND_NAMES.values())})")
            if not 0 < float(factor) < float("inf"):
                raise ValueError(f"GPU type '{self.name}': speed_by_kind.{JOB_KIND_NAMES[JobKind(k)]} must be a finite "
                                 f"number > 0, got {factor!r}")
            pairs[JobKind(k)] = float(factor)
        object.__setattr__(self, "speed_by_kind", tuple(sorted(pairs.items())))

    @property
    def kind_speeds(self) -> tuple[float, ...]:
        """(NUM_JOB_KINDS,) relative speed for each job kind, in JobKind order."""
        by_kind = dict(self.speed_by_kind)
        return tuple(by_kind.get(k, self.speed) for k in JobKind)


GPU_CATALOGUE: dict[str, GpuType] = {
    t.name: t
    for t in (
        GpuType("H100-80GB", 80, 1.0, 900, 700, 100),
        GpuType("A100-80GB", 80, 0.5, 600, 400, 60),
        GpuType("A100-40GB", 40, 0.45, 600, 400, 60),
        GpuType("L40S-48GB", 48, 0.35, 0, 350, 40),
        GpuType("V100-32GB", 32, 0.2, 300, 300, 40),
        GpuType("V100-16GB", 16, 0.2, 300, 300, 40),
        GpuType("P100-16GB", 16, 0.1, 160, 250, 30),
        GpuType("T4-16GB", 16, 0.08, 0, 70, 10),
        GpuType("A10-24GB", 24, 0.15, 0, 150, 20),
        # Hopper with HBM3e, and Blackwell: per-kind factors from dense BF16 (pretrain), HBM
        # bandwidth (inference) and their geometric mean (finetune); sources: docs/speed.md.
        GpuType("H200-141GB", 141, 1.0, 900, 700, 100, {"pretrain": 1.0, "finetune": 1.2, "inference": 1.43}),
        GpuType("B200-180GB", 180, 2.28, 1800, 1000, 150, {"pretrain": 2.28, "finetune": 2.33, "inference": 2.39}),
        GpuType("GB200-186GB", 186, 2.53, 1800, 1200, 150, {"pretrain": 2.53, "finetune": 2.46, "inference": 2.39}),
    )
}

# Alibaba openb GPU model codes -> catalogue types. G1/G2/G3 are undisclosed internal codes
# (trace README); the mapping below is an assumption by node size (G3 nodes are the largest)
# and is meant to be overridden with `gpu_models` when better information is available.
ALIBABA_GPU_MODELS = {
    "P100": "P100-16GB",
    "T4": "T4-16GB",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "A10": "A10-24GB",
    "G1": "A10-24GB",
    "G2": "A100-40GB",
    "G3": "A100-80GB",
}


def resolve_gpu_models(gpu_models: dict[str, str] | None) -> dict[str, str]:
    """The default Alibaba model mapping updated with `gpu_models`; targets must be catalogue types."""
    mapping = {**ALIBABA_GPU_MODELS, **(gpu_models or {})}
    for model, gpu_type in mapping.items():
        if gpu_type not in GPU_CATALOGUE:
            raise ValueError(f"GPU model '{model}' mapped to unknown GPU type '{gpu_type}' (known: {', '.join(GPU_CATALOGUE)})")
    return mapping

INTRA_NODE_KINDS = ("nvswitch", "nvlink-pairs", "pcie")
INTRA_NVSWITCH, INTRA_NVLINK_PAIRS, INTRA_PCIE = range(3)


@dataclass(frozen=True)
class NodeType:
    name: str
    gpu_type: str
    gpus: int = 8
    intra_node: str = "nvswitch"  # nvswitch | nvlink-pairs | pcie
    numa_sockets: int = 2
    pcie_GBps: float = 64.0
    network_GBps: float = 400.0  # all NICs of the node together
    power_base_w: float = 800.0  # CPUs, fans, NICs while the node is powered on


WHOLE_GANG_GPUS = 8  # the gang size fragmentation is measured against


@dataclass(frozen=True)
class NodeLists:
    gpu_type: list[int]
    memory_gb: list[float]
    min_memory_gb: float
    speed: list[float]
    gpus: list[int]
    whole_gang: list[int]
    num_types: int
    uniform_speed: bool  # every node's GPUs equally fast


@dataclass
class Cluster:
    """An immutable cluster with the derived arrays of the hot path.

    Shapes: N nodes, G GPUs, S switches, T GPU types.
    """

    name: str
    gpu_types: list[GpuType]
    node_names: list[str]
    node_type_names: list[str]
    switch_names: list[str]
    graph: nx.Graph
    node_gpu_type: np.ndarray  # (N,) int index into gpu_types
    node_gpus: np.ndarray  # (N,) int
    node_first_gpu: np.ndarray  # (N,) global id of the node's GPU 0
    node_intra: np.ndarray  # (N,) int INTRA_* code
    node_nvlink_GBps: np.ndarray  # (N,) float
    node_pcie_GBps: np.ndarray  # (N,)
    node_net_per_gpu_GBps: np.ndarray  # (N,) network bandwidth per GPU
    node_power_base_w: np.ndarray  # (N,)
    node_leaf: np.ndarray  # (N,) switch index of the node's first-level switch
    node_tier: np.ndarray  # (N, N) int8, tier joining two nodes
    switch_level: np.ndarray  # (S,) 1 = leaf
    switch_uplink_GBps: np.ndarray  # (S,) inf for top-level switches
    node_under_switch: np.ndarray  # (N, S) bool: node is inside the switch's subtree
    node_domain: np.ndarray  # (N,) int: the multi-node NVLink domain holding the node, -1 for none
    domain_names: list[str]  # (D,) the NVLink domains
    gpu_node: np.ndarray  # (G,) int
    gpu_local: np.ndarray  # (G,) index inside the node
    gpu_socket: np.ndarray  # (G,) NUMA socket inside the node
    gpu_speed: np.ndarray  # (G,) generic relative speed (capacity, or where no job is known)
    node_speed: np.ndarray  # (N,) relative speed of the node's GPU type
    gpu_memory_gb: np.ndarray  # (G,)
    tier_bandwidth_GBps: np.ndarray  # (max_tier + 1,) nominal per-GPU bottleneck of each tier
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_node)

    @property
    def num_domains(self) -> int:
        return len(self.domain_names)

    @property
    def max_tier(self) -> int:
        return int(self.node_tier.max()) if self.num_nodes > 1 else 0

    @cached_property
    def gpu_speed_by_kind(self) -> np.ndarray:
        """(G, NUM_JOB_KINDS) relative speed of each GPU for each job kind (JobKind order): its
        type's `speed_by_kind`, its `speed` (= gpu_speed) for kinds without a factor."""
        table = np.array([t.kind_speeds for t in self.gpu_types], dtype=float).reshape(len(self.gpu_types), NUM_JOB_KINDS)
        return table[self.node_gpu_type][self.gpu_node]

    @cached_property
    def speed_varies_by_kind(self) -> bool:
        """Some GPU type has per-kind factors (otherwise gpu_speed_by_kind is gpu_speed broadcast)."""
        return any(t.speed_by_kind for t in self.gpu_types)

    @cached_property
    def node_memory_gb(self) -> np.ndarray:
        """(N,) memory per GPU of each node's GPU type."""
        return np.array([t.memory_gb for t in self.gpu_types])[self.node_gpu_type]

    @cached_property
    def node_whole_gang(self) -> np.ndarray:
        """(N,) free GPUs a node needs to host an 8-GPU gang alone (all of them, if it has fewer):
        a node with fewer free is fragmented."""
        return np.minimum(WHOLE_GANG_GPUS, self.node_gpus)

    @cached_property
    def placement_domains(self) -> list[np.ndarray]:
        """The topology rule's domains, smallest first: (N, k) bool membership tables of the
        NVLink domains (when there are any), then of the switches of each level from the leaves up."""
        out = []
        if self.num_domains:
            out.append(self.node_domain[:, None] == np.arange(self.num_domains)[None, :])
        for level in range(1, int(self.switch_level.max(initial=0)) + 1):
            switches = np.flatnonzero(self.switch_level == level)
            if len(switches):
                out.append(self.node_under_switch[:, switches])
        return out

    @cached_property
    def domain_nodes(self) -> list[list[int]]:
        """(D,) the nodes of each multi-node NVLink domain, in node order."""
        out: list[list[int]] = [[] for _ in range(self.num_domains)]
        for n, d in enumerate(self.node_domain.tolist()):
            if d >= 0:
                out[d].append(n)
        return out

    @cached_property
    def domain_member(self) -> np.ndarray:
        """(N, D) int 0/1: node n is in multi-node NVLink domain d."""
        return (self.node_domain[:, None] == np.arange(self.num_domains)[None, :]).astype(np.int64)

    @cached_property
    def domain_tray(self) -> np.ndarray:
        """(D,) int: the GPUs of each node of the domain when they are all alike, else 0."""
        sizes = [{int(self.node_gpus[n]) for n in nodes} for nodes in self.domain_nodes]
        return np.array([next(iter(s)) if len(s) == 1 else 0 for s in sizes], dtype=np.int64)

    @cached_property
    def node_block(self) -> np.ndarray:
        """(N,) int64 each node's block, where a segment of a gang is placed whole (Slurm
        topology/block's base block): the multi-node NVLink domains first, in order; then, for
        the nodes outside them, one block per leaf switch in switch order (nodes under no switch
        share one)."""
        outside = self.node_domain < 0
        leaves = np.unique(self.node_leaf[outside])
        return np.where(outside, self.num_domains + np.searchsorted(leaves, self.node_leaf), self.node_domain).astype(np.int64)

    @cached_property
    def block_nodes(self) -> list[list[int]]:
        """The nodes of each block (`node_block`), in node order; a block numbers no node only
        where a domain has none."""
        out: list[list[int]] = [[] for _ in range(int(self.node_block.max(initial=-1)) + 1)]
        for n, b in enumerate(self.node_block.tolist()):
            out[b].append(n)
        return out

    def segment_straddles(self, gpus: np.ndarray, segment_gpus: int) -> int | None:
        """The first segment of a placement (each consecutive run of `segment_gpus` of `gpus`)
        whose GPUs are not all inside one block, None when every segment is."""
        block = self.node_block[self.gpu_node[np.asarray(gpus, dtype=np.int64)]].reshape(-1, segment_gpus)
        bad = np.flatnonzero((block != block[:, :1]).any(axis=1))
        return int(bad[0]) if len(bad) else None

    @cached_property
    def _spanning(self) -> dict[int, tuple[int, ...]]:
        return {}

    def spanning_domains(self, tp: int) -> tuple[int, ...]:
        """The NVLink domains whose TP groups of `tp` GPUs span trays: every node of the domain
        has the same GPU count, below `tp`, and it divides `tp`. Such a group takes tp / that
        count whole trays of one domain (the GB200 NVL72 practice: a TP or expert-parallel
        group larger than a tray gets its trays whole); elsewhere a TP group sits on one node."""
        hit = self._spanning.get(tp)
        if hit is None:
            hit = self._spanning[tp] = tuple(d for d, g in enumerate(self.domain_tray.tolist()) if 0 < g < tp and tp % g == 0)
        return hit

    def spans(self, tp: int) -> bool:
        """Some NVLink domain places TP groups of `tp` across trays (`spanning_domains`)."""
        return bool(self.spanning_domains(tp))

    @cached_property
    def node_lists(self) -> NodeLists:
        """Per-node values as Python lists, for the placement rules' loops over a few nodes
        (plain floats and ints cost less there than numpy's per-call dispatch)."""
        return NodeLists(
            gpu_type=self.node_gpu_type.tolist(),
            memory_gb=self.node_memory_gb.tolist(),
            min_memory_gb=float(self.node_memory_gb.min()) if self.num_nodes else float("inf"),
            speed=self.node_speed.tolist(),
            gpus=self.node_gpus.tolist(),
            whole_gang=self.node_whole_gang.tolist(),
            num_types=len(self.gpu_types),
            uniform_speed=bool((self.node_speed == self.node_speed[0]).all()) if self.num_nodes else True,
        )

    def eligible_nodes(self, mem_per_gpu_gb: float) -> np.ndarray:
        """(N,) bool: nodes whose GPU type has enough memory."""
        return self.node_memory_gb >= mem_per_gpu_gb

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for n in range(self.num_nodes):
            t = self.gpu_types[self.node_gpu_type[n]].name
            counts[t] = counts.get(t, 0) + int(self.node_gpus[n])
        kinds = ", ".join(f"{v} x {k}" for k, v in counts.items())
        return (
            f"{self.name}: {self.num_nodes} nodes, {self.num_gpus} GPUs ({kinds}), "
            f"{len(self.switch_names)} switches, {self.max_tier} tiers"
        )


def build_cluster(
    name: str,
    node_types: dict[str, NodeType],
    nodes: list[tuple[str, str]],
    switches: list[dict],
    gpu_types: dict[str, GpuType] | None = None,
    nvlink_domains: list[dict] | None = None,
) -> Cluster:
    """Build a cluster from resolved parts.

    nodes: (node name, node type name) in order.
    switches: dicts with `name`, `nodes` (names), `switches` (child switch names) and
    `oversubscription` (downlink : uplink capacity of the switch's uplink, >= 1).
    nvlink_domains: dicts with `name` and `nodes` (names): nodes whose GPUs share one NVLink
    fabric (a rack-scale domain such as GB200 NVL72: trays of one NVSwitch node type). Between
    two nodes of a domain the tier is 0, as inside a node: traffic stays on NVLink.
    Raises ValueError naming the offending element on inconsistent input.
    """
    catalogue = dict(GPU_CATALOGUE)
    catalogue.update(gpu_types or {})
    type_names = sorted({node_types[t].gpu_type for _, t in nodes})
    for t in type_names:
        if t not in catalogue:
            raise ValueError(f"unknown GPU type '{t}' (known: {', '.join(sorted(catalogue))})")
    used_types = [catalogue[t] for t in type_names]
    type_index = {t: i for i, t in enumerate(type_names)}

    node_index = {n: i for i, (n, _) in enumerate(nodes)}
    if len(node_index) != len(nodes):
        raise ValueError("duplicate node names in 'nodes'")
    switch_index = {s["name"]: i for i, s in enumerate(switches)}
    if len(switch_index) != len(switches):
        raise ValueError("duplicate switch names in 'switches'")

    graph = nx.Graph()
    for n, t in nodes:
        nt = node_types[t]
        graph.add_node(n, kind="node", node_type=t)
        for g in range(nt.gpus):
            gpu = f"{n}/gpu{g}"
            graph.add_node(gpu, kind="gpu", gpu_type=nt.gpu_type, socket=g * nt.numa_sockets // nt.gpus)
            graph.add_edge(n, gpu, bandwidth_GBps=nt.pcie_GBps, link="pcie")
        if nt.intra_node == "nvswitch":
            for a in range(nt.gpus):
                for b in range(a + 1, nt.gpus):
                    graph.add_edge(f"{n}/gpu{a}", f"{n}/gpu{b}", bandwidth_GBps=catalogue[nt.gpu_type].nvlink_GBps, link="nvlink")
        elif nt.intra_node == "nvlink-pairs":
            for a in range(0, nt.gpus - 1, 2):
                graph.add_edge(f"{n}/gpu{a}", f"{n}/gpu{a + 1}", bandwidth_GBps=catalogue[nt.gpu_type].nvlink_GBps, link="nvlink")

    parents: dict[str, list[str]] = {s["name"]: [] for s in switches}
    node_parent: dict[str, list[str]] = {n: [] for n, _ in nodes}
    for s in switches:
        graph.add_node(s["name"], kind="switch")
    for s in switches:
        for n in s.get("nodes", []):
            if n not in node_index:
                raise ValueError(f"switch '{s['name']}': unknown node '{n}' in 'nodes'")
            node_parent[n].append(s["name"])
            nt = node_types[nodes[node_index[n]][1]]
            graph.add_edge(s["name"], n, bandwidth_GBps=nt.network_GBps, link="network")
        for c in s.get("switches", []):
            if c not in switch_index:
                raise ValueError(f"switch '{s['name']}': unknown switch '{c}' in 'switches'")
            parents[c].append(s["name"])
    orphans = [n for n, p in node_parent.items() if not p]
    if orphans and len(nodes) > 1:
        raise ValueError(f"nodes not attached to any switch: {', '.join(orphans[:5])}")
    multi = [n for n, p in node_parent.items() if len(p) > 1]
    if multi:
        raise ValueError(f"node '{multi[0]}' is listed under more than one switch")

    # Levels: a leaf (no child switches) is 1; a switch is one above its highest child.
    children = {s["name"]: list(s.get("switches", [])) for s in switches}
    level: dict[str, int] = {}

    def switch_level(s: str, seen: tuple[str, ...] = ()) -> int:
        if s in seen:
            raise ValueError(f"switch '{s}' is part of a cycle")
        if s not in level:
            level[s] = 1 + max((switch_level(c, seen + (s,)) for c in children[s]), default=0)
        return level[s]

    for s in switches:
        switch_level(s["name"])

    # Ancestor sets: which switches hold each node in their subtree.
    def ancestors(s: str) -> set[str]:
        out = {s}
        for p in parents[s]:
            out |= ancestors(p)
        return out

    N, S = len(nodes), len(switches)
    node_under = np.zeros((N, S), dtype=bool)
    for n, p in node_parent.items():
        for s in p:
            for a in ancestors(s):
                node_under[node_index[n], switch_index[a]] = True
    levels = np.array([level[s["name"]] for s in switches], dtype=np.int64)

    node_tier = np.zeros((N, N), dtype=np.int64)
    if N > 1:
        no_common = 10_000
        for i in range(N):
            common = node_under[i][None, :] & node_under  # (N, S)
            node_tier[i] = np.where(common, levels[None, :], no_common).min(axis=1)
            node_tier[i, i] = 0
        if (node_tier >= no_common).any():
            a, b = np.argwhere(node_tier >= no_common)[0]
            raise ValueError(f"the fabric is not connected: nodes '{nodes[a][0]}' and '{nodes[b][0]}' share no switch")
    node_domain = np.full(N, -1, dtype=np.int64)
    domain_names: list[str] = []
    for d in nvlink_domains or []:
        dname = d["name"]
        if dname in domain_names:
            raise ValueError(f"nvlink domain '{dname}' is defined twice")
        members = list(d.get("nodes", []))
        if len(members) < 2:
            raise ValueError(f"nvlink domain '{dname}' needs at least two nodes")
        kinds = set()
        for n in members:
            if n not in node_index:
                raise ValueError(f"nvlink domain '{dname}': unknown node '{n}'")
            i = node_index[n]
            if node_domain[i] >= 0:
                raise ValueError(f"nvlink domain '{dname}': node '{n}' is already in domain '{domain_names[node_domain[i]]}'")
            nt = node_types[nodes[i][1]]
            if nt.intra_node != "nvswitch" or catalogue[nt.gpu_type].nvlink_GBps <= 0:
                raise ValueError(f"nvlink domain '{dname}': node '{n}' has no NVSwitch (its type '{nt.name}' is {nt.intra_node})")
            kinds.add(nt.gpu_type)
            node_domain[i] = len(domain_names)
        if len(kinds) > 1:
            raise ValueError(f"nvlink domain '{dname}' mixes GPU types ({', '.join(sorted(kinds))})")
        domain_names.append(dname)
    same_domain = (node_domain[:, None] == node_domain[None, :]) & (node_domain[:, None] >= 0)
    node_tier[same_domain] = 0
    node_tier = node_tier.astype(np.int8)

    nt_list = [node_types[t] for _, t in nodes]
    node_gpus = np.array([nt.gpus for nt in nt_list], dtype=np.int64)
    node_first = np.concatenate([[0], np.cumsum(node_gpus)[:-1]]).astype(np.int64)
    node_gpu_type = np.array([type_index[nt.gpu_type] for nt in nt_list], dtype=np.int64)
    node_net_per_gpu = np.array([nt.network_GBps / nt.gpus for nt in nt_list])

    # A switch's uplink carries at most what its subtree can send, divided by oversubscription.
    over = np.array([float(s.get("oversubscription", 1.0)) for s in switches])
    node_net = np.array([nt.network_GBps for nt in nt_list])
    uplink = np.full(S, np.inf)
    for si, s in enumerate(switches):
        if parents[s["name"]]:
            uplink[si] = node_net[node_under[:, si]].sum() / over[si]
            graph.add_edges_from(
                ((s["name"], p) for p in parents[s["name"]]), bandwidth_GBps=uplink[si] / len(parents[s["name"]]), link="uplink"
            )

    leaf = np.array([switch_index[node_parent[n][0]] if node_parent[n] else -1 for n, _ in nodes], dtype=np.int64)
    gpu_node = np.repeat(np.arange(N), node_gpus)
    gpu_local = np.concatenate([np.arange(g) for g in node_gpus]) if N else np.zeros(0, dtype=np.int64)
    sockets = np.array([nt.numa_sockets for nt in nt_list])
    gpu_socket = gpu_local * sockets[gpu_node] // node_gpus[gpu_node]
    speed = np.array([t.speed for t in used_types])
    memory = np.array([t.memory_gb for t in used_types])

    # Nominal per-GPU bottleneck of each tier, for features and documentation: tier 0 is the
    # slowest intra-node link, tier k >= 1 the network share after the worst oversubscription
    # crossed on the way up to level k.
    max_tier = int(node_tier.max()) if N > 1 else 0
    intra = np.array([INTRA_NODE_KINDS.index(nt.intra_node) for nt in nt_list])
    nvlink = np.array([catalogue[nt.gpu_type].nvlink_GBps if nt.intra_node != "pcie" else 0.0 for nt in nt_list])
    pcie = np.array([nt.pcie_GBps for nt in nt_list])
    tier_bw = np.zeros(max_tier + 1)
    tier_bw[0] = float(np.where(intra == INTRA_NVSWITCH, nvlink, pcie / 2).min()) if N else 0.0
    for k in range(1, max_tier + 1):
        worst = max([float(over[si]) for si in range(S) if levels[si] < k and parents[switches[si]["name"]]], default=1.0)
        tier_bw[k] = float(node_net_per_gpu.min()) / (worst if k > 1 else 1.0)

    return Cluster(
        name=name,
        gpu_types=used_types,
        node_names=[n for n, _ in nodes],
        node_type_names=[t for _, t in nodes],
        switch_names=[s["name"] for s in switches],
        graph=graph,
        node_gpu_type=node_gpu_type,
        node_gpus=node_gpus,
        node_first_gpu=node_first,
        node_intra=intra,
        node_nvlink_GBps=nvlink,
        node_pcie_GBps=pcie,
        node_net_per_gpu_GBps=node_net_per_gpu,
        node_power_base_w=np.array([nt.power_base_w for nt in nt_list]),
        node_leaf=leaf,
        node_tier=node_tier,
        switch_level=levels,
        switch_uplink_GBps=uplink,
        node_under_switch=node_under,
        node_domain=node_domain,
        domain_names=domain_names,
        gpu_node=gpu_node,
        gpu_local=gpu_local,
        gpu_socket=gpu_socket,
        gpu_speed=speed[node_gpu_type][gpu_node],
        node_speed=speed[node_gpu_type],
        gpu_memory_gb=memory[node_gpu_type][gpu_node],
        tier_bandwidth_GBps=tier_bw,
    )
