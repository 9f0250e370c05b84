"""The Kubernetes scheduler extender: kube-scheduler's filter, prioritize, preempt and bind verbs
answered from the decision state and the policy.

Contract (wire formats of `k8s.io/kube-scheduler/extender/v1`; keys read case-insensitively,
nulls accepted, see service.wire):
* `filter(ExtenderArgs) -> ExtenderFilterResult`: `Nodes` (a NodeList, echoing the objects
  received) when the request carried `Nodes`, else `NodeNames` (nodeCacheCapable); `FailedNodes`
  (could fit after other pods leave), `FailedAndUnresolvableNodes` (never: wrong GPU type, too
  little memory, too few GPUs in all), `Error`.
* `prioritize(ExtenderArgs) -> HostPriorityList`: `[{"Host", "Score"}]`, Score an integer 0..10,
  one entry per node offered.
* `preempt(ExtenderPreemptionArgs) -> ExtenderPreemptionResult`: `NodeNameToMetaVictims`; each
  node offered comes back with exactly the victims offered or is dropped (a victim known to be
  of the preemptor's priority or above, or annotated `gangsched.io/preemptible: "false"`), never
  with none. For a pod outside a gang: when the policy's place-after-preempt candidate, decided
  on the offered nodes with only the offered victims preemptible, lands on one of them, that
  node alone is returned. For a gang member: the whole gang is planned after preemption (see
  `_gang_preempt`) and the member gets the one node the plan gives it, or none when the whole
  gang does not fit even after preempting every victim offered: never half a gang's room.
  `CheckpointCostGPUSeconds` (ignored by kube-scheduler's decoder) gives the accepted cost.
* `bind(ExtenderBindingArgs) -> ExtenderBindingResult`: creates the Binding through the API
  server (`kube`), then records the pod's GPUs on the node; refused without `kube`, for a pod
  never filtered or prioritized here, another UID, or a gang member without a slot in its plan.

How a pod is decided: the pod becomes a queued job of the current decision state (occupancy =
the last `PUT /v1/state` snapshot + pods bound since + GPUs promised to gangs in flight, with the
GPUs of topology nodes not offered held back), the project's `build_candidates` makes its
candidates and the scorer (model or baseline) ranks them. A pod asks for `g` GPUs, so its job has
`tp_degree = g`: every placement keeps each pod's GPUs on one node.

Nodes map to the cluster topology by name, else by the `gangsched.io/topology-node` or
`kubernetes.io/hostname` label. A node outside the topology is scored from its labels (GFD
product and count; 1..5, below any node the policy chose) and is never an error.

Gangs (see resolve_gang, plan_key): the group from `scheduling.x-k8s.io/pod-group`,
`pod-group.scheduling.sigs.k8s.io`, `scheduling.volcano.sh/group-name` or
`scheduling.k8s.io/group-name`; the members asking the pod's GPU count from
`gangsched.io/gang-size`, else the PodGroup's minMember (or a min-member annotation) less the
members known to ask another count. The first member decides a placement for all of them (one
job of members x g GPUs); the plan (pod slots per node) is kept and its GPUs held back from other
pods. A gang that does not fit the free GPUs is planned by its first member's preempt instead,
after preemption (a plan kept while its nodes are full of victims leaving). Later members pass
filter only on the plan's nodes with free slots (score 10) and bind only
into a slot. A plan ends when all its slots are bound, after `gang_ttl_s`, or on `put_state`;
and when the gang's size changes (its PodGroup's minMember, say) before all its slots are bound:
a member filtered then plans again for the new size less the members already bound, and a
member's bind checks the size first (a plan of the old size binds no one).

Topology requests (Kueue's `kueue.x-k8s.io/podset-required-topology` / `-preferred-topology`,
whose value is a node label key naming a level: `nvidia.com/gpu.clique`, a rack or block label,
`kubernetes.io/hostname`): the offered nodes are grouped by their domain at that level
(`service.domains.level_key`), and the gang's plan is decided by the policy on one domain at a
time, every other node held back, the smallest domain whose free GPUs hold the gang first (see
`_in_one_domain`); members already bound confine it to their domain. Required and no domain
holds it: no node passes filter (so no member binds) until one does. Preferred: the usual
decision on all offered nodes.

Slice requests (Kueue's `kueue.x-k8s.io/podset-slice-required-topology` + `podset-slice-size`,
each slice of that many pods inside one domain of the level; see `_slices`): where the level's
domains are the topology's blocks (every offered block's labelled nodes in one domain of it),
the gang's job carries a segment request (`segment_gpus` = slice pods x GPUs a pod), which every
placement rule honours, alone or with a topology request for the whole gang; members already
bound that are a slice in part in a block are completed first, in the domain they are in
(`_complete_slices`); any other level: the whole gang inside one domain of it (the bound
members' domain, where some are). No plan: no node passes filter. A size that does not
divide the gang is a WireError naming the annotation (`check_slices`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.cluster.topology import Cluster
from envs.decision.candidates import build_candidates
from envs.decision.placement import PREEMPT, PREEMPT_RULES
from envs.decision.state import ClusterState, StateError
from service.domains import CLIQUE_LABEL, DEFAULT_TOPOLOGY_LABELS, clique_conflicts, describe_key, level_key
from service.kube import POD_GROUP_APIS, KubeAPI
from service.scoring import Scorer
from service.wire import (
    GANG_SIZE_KEY,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    SLICE_TOPOLOGY,
    TOPOLOGY_NODE_LABEL,
    NodeInfo,
    PodInfo,
    WireError,
    get,
    get_str,
    node_list,
    parse_node,
    parse_pod,
)

log = logging.getLogger("gangsched.service")
MAX_SCORE = 10
SEEN_PODS = 10_000  # pods remembered from filter/prioritize, for bind (which carries no request)
OK, FAIL, UNRESOLVABLE = "ok", "fail", "unresolvable"
DECISION_TTL_S = 5.0  # how long filter's decision for a pod serves its prioritize
SHAPE_TTL_S = 1.0  # how long a decision serves other pods of the same shape (outside gangs)
API_CACHE_S = 30.0  # how long a Node or PodGroup read from the API server is reused
STATE_CACHE_S = 1.0  # how long the occupancy's ClusterState is reused (its clock is at most this old)
MAX_PLANS = 1024  # gang plans kept at once (the oldest is dropped first)
BIND_GRACE_S = 60.0  # with the watch: the longest a bind recorded here stands in for the pod the watch has not shown bound


def claimed_index(node_index: dict[str, int], labels: dict[str, str]) -> int | None:
    """The topology node a Kubernetes node's labels name: `gangsched.io/topology-node`, else
    `kubernetes.io/hostname` (the first that names a topology node), else None."""
    for label in (TOPOLOGY_NODE_LABEL, "kubernetes.io/hostname"):
        i = node_index.get(labels.get(label, ""))
        if i is not None:
            return i
    return None


def plan_key(pod: PodInfo) -> str | None:
    """The key of the gang plan a pod belongs to: its gang and GPU count (a gang's launcher or
    coordinator asking for another count is decided alone), None outside a gang of several GPU pods."""
    if not pod.gang or pod.gang_size <= 1 or pod.gpus <= 0:
        return None
    return f"{pod.gang}@{pod.gpus}"


class ExtenderError(ValueError):
    """A request the extender cannot answer; the message names the request part."""


@dataclass
class Bound:
    pod: PodInfo
    node: str
    gpus: list[int] | None  # global GPU ids on a topology node; None elsewhere
    time_s: float


@dataclass
class GangPlan:
    gang: str
    gpus_per_pod: int
    slots: dict[str, int]  # topology node -> pod slots not yet bound
    domain: list[str]  # leaf switches of the plan's nodes
    created: float  # monotonic seconds
    size: int
    topology: str = ""  # the Kueue topology request it keeps, in words ("" for none)
    slices: str = ""  # the Kueue slice request it keeps, in words ("" for none)
    by_preemption: bool = False  # made by a member's preempt: kept while its nodes are not offered to filter
    victims: dict[str, list[str]] = field(default_factory=dict)  # made by preemption: topology node -> victim UIDs offered
    assigned: dict[str, str] = field(default_factory=dict)  # member (namespace/name) -> topology node its preempt was given


@dataclass
class Slices:
    """How a gang's Kueue slice request (podset-slice-required-topology + podset-slice-size) is
    planned (see `Extender._slices`)."""

    level: str
    size: int  # pods of each slice
    segment_gpus: int  # > 0: the level's domains are the topology's blocks: a segment request of this many GPUs
    nodes: dict[str, int]  # the offered topology nodes a slice may use (the others are held back)
    keys: dict[int, Any]  # topology node -> its domain at the level (`level_key`)
    words: str  # the request in words
    why: str = ""  # not "": no plan, and why
    # a slice bound in part, by block: (its domain at the level, members bound there, members it lacks,
    # the offered nodes of that domain that may take them); the members left complete these first
    partial: dict[int, tuple[Any, int, int, dict[str, int]]] = field(default_factory=dict)


@dataclass
class Verdict:
    status: str  # OK, FAIL, UNRESOLVABLE
    score: int = 0
    reason: str = ""


@dataclass
class Occupancy:
    """What the extender believes runs where (see the module docstring)."""

    base: dict = field(default_factory=lambda: {"time_s": 0.0})
    base_clock: float = 0.0
    bound: dict[str, Bound] = field(default_factory=dict)
    by_uid: dict[str, str] = field(default_factory=dict)
    plans: dict[str, GangPlan] = field(default_factory=dict)
    unknown_used: dict[str, int] = field(default_factory=dict)


class Extender:
    def __init__(self, cluster: Cluster, scorer: Scorer, queue_window: int = 8, gang_ttl_s: float = 600.0,
                 kube: KubeAPI | None = None, clock=time.monotonic, watch=None, leader=None,
                 topology_labels: tuple[str, ...] | None = None):
        self.cluster = cluster
        self.scorer = scorer
        self.queue_window = queue_window
        self.gang_ttl_s = gang_ttl_s
        self.kube = kube
        self.clock = clock
        self.watch = watch  # service.watch.ClusterWatch: the occupancy comes from the API server
        self.leader = leader  # service.leader.LeaderElector: only its leader binds
        # the order of the topology labels (most specific first): a level's value is qualified by those after it
        self.topology_labels = tuple(topology_labels or getattr(watch, "topology_labels", None) or DEFAULT_TOPOLOGY_LABELS)
        self.conflicts: OrderedDict[str, None] = OrderedDict()  # without the watch: clique conflicts seen in requests
        self.snap = None  # the watch's last snapshot taken (service.watch.WatchSnapshot)
        self.node_index = {n: i for i, n in enumerate(cluster.node_names)}
        self._node_type = [cluster.gpu_types[t] for t in cluster.node_gpu_type.tolist()]  # per topology node, as Python objects
        self._node_gpus = cluster.node_gpus.tolist()
        self.occ = Occupancy(base_clock=clock())
        self.seen: OrderedDict[str, PodInfo] = OrderedDict()
        # Kubernetes node names learnt from labels -> topology index, and each topology node's one
        # alias (the last node that claimed it): at most one alias per topology node.
        self.aliases: dict[str, int] = {}
        self.alias_of: dict[int, str] = {}
        self._api_nodes: OrderedDict[str, tuple[float, NodeInfo | None]] = OrderedDict()  # name -> (time, node read from the API)
        self._pod_groups: OrderedDict[str, tuple[float, int | None, list]] = OrderedDict()  # gang -> (time, minMember, GPUs of its pods)
        self.seen_uid: dict[str, str] = {}  # pod UID -> namespace/name, of the pods seen
        self.gang_members: dict[str, dict[str, int]] = {}  # gang -> member -> GPUs, of the members seen
        # pod key -> (monotonic time, nodes offered to its last filter): nodes kube-scheduler's own
        # filters passed for it, which a gang's preemption may plan on without victims
        self.filtered: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self.version = 0  # changes with the occupancy (sync, bind, release, gang plans)
        # The last decisions, for prioritize after filter of the same pod on the same occupancy:
        # (pod key, pod shape, version) -> (monotonic time, nodes offered, verdicts)
        self.decisions: OrderedDict[tuple, tuple[float, frozenset, dict]] = OrderedDict()
        self._states: OrderedDict[tuple, tuple[float, ClusterState]] = OrderedDict()  # see current_state

    # ------------------------------------------------------------------ occupancy

    def now_s(self) -> float:
        return float(self.occ.base.get("time_s", 0.0)) + (self.clock() - self.occ.base_clock)

    def sync(self) -> None:
        """With the watch: its latest state becomes the occupancy's base (running jobs from bound
        pods); a pod bound here is kept on top of it until the watch shows it bound, or shows
        it gone, or for BIND_GRACE_S at most. Raises ExtenderError before the first list."""
        if self.watch is None:
            return
        snap = self.watch.snapshot()
        if snap is None:
            raise ExtenderError("the service has not yet listed Nodes, Pods and PodGroups from the API server (--watch): "
                                f"no decision before it has (waiting for {self.watch.not_synced()}); see /v1/info watch")
        if snap is not self.snap:
            self.snap = snap
            self.occ.base, self.occ.base_clock = snap.base, snap.clock
            self.version += 1
        now = self.now_s()
        for key, b in list(self.occ.bound.items()):
            age = now - b.time_s
            if key in snap.bound or (key not in snap.all_keys and age > 5.0) or age > BIND_GRACE_S:
                self.release(key)

    def put_state(self, data: Any) -> ClusterState:
        """Replace the occupancy by a plain-data state (authoritative: binds recorded before and
        gang plans are dropped). Raises StateError naming the field."""
        state = ClusterState.from_dict(data, self.cluster)
        self.occ = Occupancy(base=data, base_clock=self.clock())
        self.version += 1
        return state

    def release(self, key: str) -> bool:
        b = self.occ.bound.pop(key, None)
        if b is None:
            return False
        self.occ.by_uid.pop(b.pod.uid, None)
        self.version += 1
        if b.gpus is None and b.node in self.occ.unknown_used:
            self.occ.unknown_used[b.node] = max(0, self.occ.unknown_used[b.node] - b.pod.gpus)
        return True

    def _job(self, pod: PodInfo, job_id: str, members: int, now: float) -> dict:
        comm = pod.comm_fraction if pod.comm_fraction is not None else (0.3 if members > 1 else 0.0)
        return {"id": job_id, "num_gpus": pod.gpus * members, "tp_degree": pod.gpus, "mem_per_gpu_gb": pod.mem_per_gpu_gb,
                "kind": pod.kind, "priority": pod.priority_class, "preemptible": pod.preemptible,
                "comm_fraction": comm, "tp_comm_share": 0.5 if members > 1 else 0.0, "estimate_s": pod.estimate_s}

    def _live_plans(self) -> dict[str, GangPlan]:
        t = self.clock()
        for g in [g for g, p in self.occ.plans.items() if t - p.created > self.gang_ttl_s or not any(p.slots.values())]:
            del self.occ.plans[g]
            self.version += 1
        return self.occ.plans

    def occupancy_dict(self, pending: dict | None = None, blocked: set[int] = frozenset(),
                       skip_plan: str | None = None, queued_limit: int | None = None,
                       victims: frozenset[str] | None = None, completing: tuple[tuple[int, int], ...] = ()) -> dict:
        """The current decision state in plain data: the synced base, the pods bound since (as
        running jobs), the GPUs held for gangs in flight, for `completing` ((topology node, GPUs) already
        planned for the skipped plan's gang: its slices bound in part, completed) and for `blocked`
        nodes (as reserved jobs), and `pending` (a job) queued first. With `victims` (job ids),
        every other running job is made non-preemptible: the preemption kube-scheduler offered is all there is."""
        now = self.now_s()
        base = self.occ.base
        running = list(base.get("running", []))
        ids = {r.get("id") for s in ("running", "checkpointing", "reserved", "queued") for r in base.get(s, []) if isinstance(r, dict)}
        members = self.snap.members if self.snap is not None else {}
        if self.snap is not None:
            ids |= self.snap.bound.keys()  # pods the watch shows bound (inside their jobs)
        used: set[int] = set()
        for s in ("running", "checkpointing", "reserved"):
            for r in base.get(s, []):
                used.update(r.get("gpus", []))
        for key, b in self.occ.bound.items():
            if b.gpus is None or key in ids or used.intersection(b.gpus):
                continue
            job = self._job(b.pod, key, 1, now)
            elapsed = max(0.0, now - b.time_s)
            job.update(gpus=b.gpus, arrival_s=b.time_s, work_done_s=min(elapsed, 0.95 * b.pod.estimate_s),
                       attained_gpu_s=elapsed * b.pod.gpus)
            running.append(job)
            used.update(b.gpus)
        if victims is not None:
            def offered(r) -> bool:  # the job or one of its pods (a gang's job: any member) is an offered victim
                return r.get("id") in victims or any(k in victims for k, _ in members.get(r.get("id"), ()))

            running = [r if not isinstance(r, dict) or offered(r) else dict(r, preemptible=False) for r in running]
        reserved = list(base.get("reserved", []))
        c = self.cluster
        first, count = c.node_first_gpu.tolist(), c.node_gpus.tolist()

        def take(node: int, n: int) -> list[int]:
            got = [g for g in range(first[node], first[node] + count[node]) if g not in used][:n]
            used.update(got)
            return got

        for gang, plan in self._live_plans().items():
            if gang == skip_plan:
                continue
            held: list[int] = []
            for name, slots in plan.slots.items():
                i = self.node_index.get(name)
                if i is not None and slots > 0:
                    got = take(i, slots * plan.gpus_per_pod)
                    held += got[: len(got) // plan.gpus_per_pod * plan.gpus_per_pod]
            if held:
                reserved.append({"id": f"gang-plan:{gang}", "num_gpus": len(held), "tp_degree": plan.gpus_per_pod,
                                 "gpus": held, "estimate_s": 3600.0, "queued_since_s": now, "arrival_s": now})
        kept = [g for i, k in completing for g in take(i, k)]
        if kept:
            reserved.append({"id": f"gang-plan:{skip_plan}:completing", "num_gpus": len(kept), "tp_degree": 1,
                             "gpus": kept, "estimate_s": 3600.0, "queued_since_s": now, "arrival_s": now})
        if blocked:
            held = [g for i in sorted(blocked) for g in take(i, count[i])]
            if held:
                reserved.append({"id": "unavailable-nodes", "num_gpus": len(held), "tp_degree": 1, "gpus": held,
                                 "estimate_s": 3600.0, "queued_since_s": now, "arrival_s": now, "priority": "high",
                                 "preemptible": False})
        queued = list(base.get("queued", []))[:queued_limit]
        if pending is not None:
            pending = dict(pending, arrival_s=now, queued_since_s=now)
            queued = [pending] + queued[: max(0, self.queue_window - 1)]
        return {"time_s": now, "running": running, "checkpointing": list(base.get("checkpointing", [])),
                "reserved": reserved, "queued": queued, "recent_arrivals": list(base.get("recent_arrivals", []))}

    def current_state(self, pending: dict | None = None, blocked: set[int] = frozenset(), skip_plan: str | None = None,
                      victims: frozenset[str] | None = None, held: dict[int, int] | None = None) -> ClusterState:
        """The decision state (see occupancy_dict). The occupancy part is built by
        `ClusterState.from_dict` once per (occupancy version, blocked nodes, plan skipped, GPUs
        held) and reused for STATE_CACHE_S; the pending job is then queued first by
        `ClusterState.with_job_queued_first`."""
        kept = tuple(sorted((held or {}).items()))
        key = (self.version, frozenset(blocked), skip_plan, victims, kept)
        now = self.clock()
        hit = self._states.get(key)
        try:
            if pending is None:
                return ClusterState.from_dict(self.occupancy_dict(None, blocked, skip_plan, victims=victims, completing=kept), self.cluster)
            if hit is None or now - hit[0] >= STATE_CACHE_S:
                limit = max(0, self.queue_window - 1)
                base = ClusterState.from_dict(self.occupancy_dict(None, blocked, skip_plan, queued_limit=limit, victims=victims,
                                                                  completing=kept), self.cluster)
                hit = self._states[key] = (now, base)
                while len(self._states) > 64:
                    self._states.popitem(last=False)
        except StateError as e:  # the synced state and the binds since disagree
            raise ExtenderError(f"the extender's occupancy is inconsistent ({e}): PUT /v1/state a fresh snapshot") from None
        try:
            return hit[1].with_job_queued_first(pending)
        except StateError as e:  # the pod (or its gang) is not a job this cluster can hold
            raise WireError(f"ExtenderArgs.Pod: as a job of {pending['num_gpus']} GPUs ({e.args[0].split(': ', 1)[-1]})") from None
        except ValueError as e:
            raise ExtenderError(str(e)) from None

    # ------------------------------------------------------------------ nodes

    def topology_index(self, name: str, info: NodeInfo | None) -> int | None:
        """The topology node a Kubernetes node is: by name, else by its `gangsched.io/topology-node`
        or `kubernetes.io/hostname` label (from the Node object sent, else read from the API
        server when the request carries names only). Each topology node has at most one alias,
        the last Kubernetes node that claimed it (a warning when a claim moves), so many nodes
        claiming one topology name never share it and the alias memory is bounded by the topology."""
        i = self.node_index.get(name)
        if i is not None:
            return i
        if self.snap is not None and name in self.snap.nodes:  # the watch's mapping is authoritative
            return self.snap.aliases.get(name)
        if info is None and self.kube is not None:
            info = self._api_node(name)
        if info is None:
            return self.aliases.get(name)
        claimed = claimed_index(self.node_index, info.labels)
        if claimed is None:
            old = self.aliases.pop(name, None)
            if old is not None and self.alias_of.get(old) == name:
                del self.alias_of[old]
            return None
        owner = self.alias_of.get(claimed)
        if owner != name:
            if owner is not None:
                log.warning("node %s now claims topology node %s, which %s claimed before: %s is outside the topology",
                            name, self.cluster.node_names[claimed], owner, owner)
                self.aliases.pop(owner, None)
            old = self.aliases.get(name)
            if old is not None and self.alias_of.get(old) == name:
                del self.alias_of[old]
            self.alias_of[claimed] = name
            self.aliases[name] = claimed
        return claimed

    def topology_name(self, name: str) -> str | None:
        i = self.topology_index(name, None)
        return None if i is None else self.cluster.node_names[i]

    def _api_node(self, name: str) -> NodeInfo | None:
        """The Node read from the API server (names-only requests), cached for API_CACHE_S."""
        if self.snap is not None and name in self.snap.nodes:
            return self.snap.nodes[name]
        now = self.clock()
        hit = self._api_nodes.get(name)
        if hit is None or now - hit[0] > API_CACHE_S:
            raw = self.kube.read_node(name)
            try:
                info = parse_node(raw, f"Node {name}") if raw is not None else None
            except WireError as e:
                log.warning("%s", e)
                info = None
            hit = self._api_nodes[name] = (now, info)
            self._api_nodes.move_to_end(name)
            while len(self._api_nodes) > max(64, 2 * self.cluster.num_nodes):
                self._api_nodes.popitem(last=False)
        return hit[1]

    def _static_check(self, pod: PodInfo, i: int, info: NodeInfo | None) -> Verdict | None:
        """Why topology node `i` can never take the pod, or None."""
        t = self._node_type[i]
        if pod.gpu_type is not None and t.name != pod.gpu_type.name:
            return Verdict(UNRESOLVABLE, 0, f"GPU type {t.name}, the pod asks for {pod.gpu_type.name}")
        if t.memory_gb < pod.mem_per_gpu_gb:
            return Verdict(UNRESOLVABLE, 0, f"{t.name} has {t.memory_gb:g} GB per GPU, the pod needs {pod.mem_per_gpu_gb:g} GB")
        gpus = self._node_gpus[i]
        total = gpus if info is None or info.allocatable_gpus is None else min(gpus, info.allocatable_gpus)
        if total < pod.gpus:
            return Verdict(UNRESOLVABLE, 0, f"{total} allocatable GPUs, the pod asks for {pod.gpus}")
        return None

    def _label_verdict(self, pod: PodInfo, name: str, info: NodeInfo | None) -> Verdict:
        """A node outside the topology, judged by its labels alone."""
        if info is None:
            return Verdict(OK, 0, "")  # NodeNames only: nothing known, left to kube-scheduler's own checks
        t = info.gpu_type
        if pod.gpu_type is not None and (t is None or t.name != pod.gpu_type.name):
            return Verdict(UNRESOLVABLE, 0, f"GPU type {t.name if t else 'unknown'} by its labels, the pod asks for {pod.gpu_type.name}")
        if t is not None and t.memory_gb < pod.mem_per_gpu_gb:
            return Verdict(UNRESOLVABLE, 0, f"{t.name} has {t.memory_gb:g} GB per GPU, the pod needs {pod.mem_per_gpu_gb:g} GB")
        total = info.allocatable_gpus or 0
        free = total - self.occ.unknown_used.get(name, 0) - (self.snap.unknown_used.get(name, 0) if self.snap is not None else 0)
        if total < pod.gpus:
            return Verdict(UNRESOLVABLE, 0, f"{total} GPUs by its labels, the pod asks for {pod.gpus}")
        if free < pod.gpus:
            return Verdict(FAIL, 0, f"{free} GPUs free by its labels and binds, the pod asks for {pod.gpus}")
        speed = t.speed if t is not None else 0.1
        return Verdict(OK, int(min(5, 1 + round(4 * speed))), "outside the topology: scored from its labels")

    # ------------------------------------------------------------------ decisions

    def remember(self, pod: PodInfo) -> None:
        self.seen[pod.key] = pod
        self.seen.move_to_end(pod.key)
        while len(self.seen) > SEEN_PODS:
            self.seen.popitem(last=False)
        if pod.uid:
            self.seen_uid[pod.uid] = pod.key
            while len(self.seen_uid) > SEEN_PODS:
                self.seen_uid.pop(next(iter(self.seen_uid)))
        if pod.gang:
            members = self.gang_members.setdefault(pod.gang, {})
            members[pod.key] = pod.gpus
            while len(self.gang_members) > MAX_PLANS:
                self.gang_members.pop(next(iter(self.gang_members)))

    def resolve_gang(self, pod: PodInfo) -> PodInfo:
        """The pod with its gang size counted in GPU members asking its GPU count: the annotation
        `gangsched.io/gang-size` as given; else the PodGroup's `spec.minMember` (watched with
        `--watch`, else read through the API server) or the pod's min-member annotation, less
        the group's members known to ask another GPU count (a 0-GPU launcher, a 1-GPU
        coordinator: watched, or listed through the API server, or seen here). Without any size
        the pod is decided alone."""
        if not pod.gang or pod.gpus <= 0 or pod.gang_size_key == GANG_SIZE_KEY:
            return pod
        given = pod.gang_size if pod.gang_size_given is None else pod.gang_size_given  # a pod resolved before
        size = given if pod.gang_size_key else None
        others = sum(1 for g in self.gang_members.get(pod.gang, {}).values() if g != pod.gpus)
        if self.kube is not None and pod.gang_key in POD_GROUP_APIS:
            min_member, listed = self._pod_group(pod)
            if min_member is not None:
                size = min_member
            others = max(others, sum(1 for g in listed if g != pod.gpus))
        if size is None:
            return dataclasses.replace(pod, gang_size=1, gang_size_given=given)
        return dataclasses.replace(pod, gang_size=max(1, size - others), gang_size_given=given)

    def _pod_group(self, pod: PodInfo) -> tuple[int | None, list[int]]:
        """(PodGroup minMember or None, GPU counts of the group's pods). With the watch both come
        from its caches (the watched PodGroups, the watched pods), no API call; without it, read
        through the API server (a GET of the PodGroup, a list by the group label), cached for API_CACHE_S."""
        name = pod.gang.split("/", 1)[1]
        if self.watch is not None:
            listed = [] if self.snap is None else list(self.snap.gang_pods.get(pod.gang, []))
            return self.watch.min_member(pod.gang_key, pod.namespace, name), listed
        now = self.clock()
        hit = self._pod_groups.get(pod.gang)
        if hit is None or now - hit[0] > API_CACHE_S:
            min_member = self.kube.pod_group_min_member(pod.gang_key, pod.namespace, name)
            listed = []
            for raw in self.kube.group_pods(pod.namespace, pod.gang_key, name) or []:
                try:
                    listed.append(parse_pod(raw, "group pod").gpus)
                except WireError:
                    continue
            hit = self._pod_groups[pod.gang] = (now, min_member, listed)
            self._pod_groups.move_to_end(pod.gang)
            while len(self._pod_groups) > MAX_PLANS:
                self._pod_groups.popitem(last=False)
        return hit[1], hit[2]

    @staticmethod
    def check_slices(pod: PodInfo) -> None:
        """Slice annotations that are not a valid request (`PodInfo.slice_error`), and a slice
        size (Kueue's podset-slice-size) that does not divide the gang (its GPU pods, once
        resolved; 1 for a pod alone), raise WireError naming the annotation."""
        if pod.slice_error and pod.gpus > 0:
            raise WireError(pod.slice_error)
        if pod.slice_size and pod.gpus > 0 and pod.gang_size % pod.slice_size:
            whose = f"gang {pod.gang}'s {pod.gang_size} pods" if pod.gang else "1 pod (the pod is in no gang)"
            raise WireError(f"{pod.slice_where}: slices of {pod.slice_size} pods do not divide {whose} of {pod.gpus} GPUs "
                            f"(the slice size must divide the pod set; {SLICE_TOPOLOGY} {pod.slice_level})")

    def evaluate(self, pod: PodInfo, names: list[str], infos: dict[str, NodeInfo]) -> dict[str, Verdict]:
        """A verdict (fit, score 0..10, reason) for each offered node.

        Decisions are reused on the same occupancy (`version`) over a superset of these nodes:
        the same pod's for DECISION_TTL_S (filter, then prioritize over the nodes that passed),
        and, for pods outside gangs, any pod of the same shape (GPUs, memory, type, priority,
        preemptible, kind, estimate, communication) for SHAPE_TTL_S, so a burst of like pods
        costs one decision; the state's clock is at most that old."""
        pod = self.resolve_gang(pod)
        self.check_slices(pod)
        self.remember(pod)
        now = self.clock()
        shape = (pod.gpus, pod.mem_per_gpu_gb, pod.gpu_type.name if pod.gpu_type else None, pod.priority_class,
                 pod.preemptible, pod.kind, pod.estimate_s, pod.comm_fraction, bool(infos), pod.topology_level,
                 pod.topology_required, pod.slice_level, pod.slice_size)
        keys = [(("pod", pod.key, pod.gang, pod.gang_size) + shape, DECISION_TTL_S)]
        if not (pod.gang and pod.gang_size > 1):
            keys.append((("shape",) + shape, SHAPE_TTL_S))
        for key, ttl in keys:
            hit = self.decisions.get(key + (self.version,))
            if hit is not None and now - hit[0] < ttl and hit[1].issuperset(names):
                return {n: hit[2][n] for n in names}
        verdicts = self._evaluate(pod, names, infos)
        for key, _ in keys:
            self.decisions[key + (self.version,)] = (now, frozenset(names), verdicts)
        while len(self.decisions) > 512:
            self.decisions.popitem(last=False)
        return verdicts

    def _evaluate(self, pod: PodInfo, names: list[str], infos: dict[str, NodeInfo]) -> dict[str, Verdict]:
        if pod.gpus == 0:
            return {n: Verdict(OK, 0, "") for n in names}
        verdicts: dict[str, Verdict] = {}
        topo: dict[str, int] = {}
        taken: set[int] = {self.node_index[n] for n in names if n in self.node_index}
        for n in names:
            i = self.topology_index(n, infos.get(n))
            if i is not None and n not in self.node_index:
                if i in taken:  # a second node offered as the same topology node: not that node
                    i = None
                else:
                    taken.add(i)
            if i is None:
                verdicts[n] = self._label_verdict(pod, n, infos.get(n))
                continue
            bad = self._static_check(pod, i, infos.get(n))
            if bad is not None:
                verdicts[n] = bad
            else:
                topo[n] = i
        if not topo:
            return verdicts
        plans = self._live_plans()
        pkey = plan_key(pod)
        plan = plans.get(pkey) if pkey else None
        if plan is not None and plan.size != pod.gang_size:
            self._drop_resized(pkey, plan, pod.gang_size)
            plan = None
        if plan is not None:
            open_nodes = [n for n in topo if plan.slots.get(self.cluster.node_names[topo[n]], 0) > 0]
            # A plan made by preemption stands while its nodes are not offered: they are full until its victims leave.
            if open_nodes or plan.by_preemption:
                return self._plan_verdicts(pod, plan, names, topo, verdicts)
            del plans[pkey]  # none of its nodes is offered any more: plan again for the members left
            self.version += 1
        members = self._members_left(pod, pkey) if pkey else 1
        job_id = f"pending:{pkey or pod.key}"
        job = self._job(pod, job_id, members, 0.0)
        slices = self._slices(pod, pkey, topo, infos) if pkey and pod.slice_size > 1 else None
        place = topo  # the offered topology nodes the plan may use
        held: dict[int, int] = {}  # GPUs per topology node completing the gang's slices bound in part
        scores: dict[int, int] = {}
        first_nodes: dict[int, int] = {}
        policy, topology = "", ""
        if slices is not None:
            if slices.why:
                return self._fail_all(names, topo, verdicts, slices.why)
            place = slices.nodes
            if slices.segment_gpus:
                job["segment_gpus"] = slices.segment_gpus
            if slices.partial:
                held, policy, why = self._complete_slices(pod, pkey, job_id, slices)
                if why:
                    return self._fail_all(names, topo, verdicts, why)
                whole = members - sum(lack for _, _, lack, _ in slices.partial.values())
                if whole:  # the rest: whole slices, planned as usual around the GPUs held
                    job = self._job(pod, job_id, whole, 0.0)
                    job["segment_gpus"] = slices.segment_gpus
                else:  # the members left only complete slices bound in part
                    plan = self._keep_plan(pod, pkey, held, members, "", policy, slices=self._slice_words(slices, held, "", held))
                    return self._plan_verdicts(pod, plan, names, topo, verdicts)
        offered = set(place.values())
        state = self.current_state(pending=job, blocked=set(range(self.cluster.num_nodes)) - offered, skip_plan=pkey,
                                   held=held)
        if slices is not None and not slices.segment_gpus:
            # The slice level's domains are not the topology's blocks: the whole gang in one domain of it.
            got, why = self._in_one_domain(pod, pkey, job, place, infos, state.node_free, *self._whole_gang(slices))
            if got is None:
                return self._fail_all(names, topo, verdicts, why)
            first_nodes, policy, topology = got
        elif pkey and pod.topology_level:
            got, why = self._in_one_domain(pod, pkey, job, place, infos, state.node_free, held=held)
            if got is not None:
                first_nodes, policy, topology = got
            elif pod.topology_required:  # no member passes, on a node outside the topology neither
                return self._fail_all(names, topo, verdicts, why)
            else:
                log.info("%s: placed by the usual rule (%s)", why, PREFERRED_TOPOLOGY)
        if not first_nodes:
            scores, first_nodes, policy = self._decide(state, job_id)
        if pkey:
            if not first_nodes:
                why = f"gang {pod.gang} ({members} pods x {pod.gpus} GPUs) does not fit the free GPUs of the offered nodes"
                if slices is not None:  # required: no member passes, on a node outside the topology neither
                    return self._fail_all(names, topo, verdicts, f"{why} as {slices.words}")
                for n in topo:
                    verdicts[n] = Verdict(FAIL, 0, why)
                return verdicts
            for i, k in held.items():  # with the members completing slices bound in part
                first_nodes[i] = first_nodes.get(i, 0) + k
            plan = self._keep_plan(pod, pkey, first_nodes, members, topology, policy,
                                   slices=self._slice_words(slices, first_nodes, topology, held) if slices is not None else "")
            return self._plan_verdicts(pod, plan, names, topo, verdicts)
        node_gpus, free = self._node_gpus, state.node_free.tolist()
        for n, i in topo.items():
            f = free[i]
            info = infos.get(n)
            if info is not None and info.allocatable_gpus is not None and info.allocatable_gpus < node_gpus[i]:
                f = min(f, info.allocatable_gpus - (node_gpus[i] - free[i]))  # GPUs the kubelet withholds
            if f >= pod.gpus:
                verdicts[n] = Verdict(OK, scores.get(i, 0), "")
            else:
                verdicts[n] = Verdict(FAIL, 0, f"{max(f, 0)} GPUs free, the pod asks for {pod.gpus}")
        return verdicts

    @staticmethod
    def _fail_all(names: list[str], topo: dict[str, int], verdicts: dict[str, Verdict], why: str) -> dict[str, Verdict]:
        """Every offered node that would pass fails with `why` (a required request no offered node meets)."""
        for n in names:
            if n in topo or verdicts[n].status == OK:
                verdicts[n] = Verdict(FAIL, 0, why)
        log.info("%s", why)
        return verdicts

    def _slices(self, pod: PodInfo, pkey: str, topo: dict[str, int], infos: dict[str, NodeInfo]) -> Slices:
        """How the gang's slice request is planned on the offered topology nodes `topo`.

        Where the slice level's domains are the topology's blocks (`Cluster.node_block`: an
        NVLink domain, else a leaf switch's nodes), that is where every offered block's labelled
        nodes share one domain of the level, the request becomes the model's segment request
        (`segment_gpus` = slice pods x GPUs a pod), which every placement rule honours: each slice
        inside one block, so inside one domain of the level. The nodes without the level's label
        are held back; at `nvidia.com/gpu.clique` so are the nodes outside every NVLink domain
        (their clique is the node alone) and a tray whose clique is not the one most offered trays
        of its NVLink domain carry (a contradiction of the topology file). Members already bound
        (counted per block) that are no whole number of slices in a block are a slice bound in
        part there (`partial`): the members left complete it on the offered nodes of the domain
        its members are in (`_complete_slices`), and the rest are whole slices as above. Members
        bound outside the topology or in a block without the level's label: no plan. Otherwise
        (`segment_gpus` 0) the whole gang is planned inside one domain of the level
        (`_whole_gang`), the domain of the members already bound where some are."""
        c, level, size = self.cluster, pod.slice_level, pod.slice_size
        words = f"slices of {size} pods ({size * pod.gpus} GPUs) each inside one {level} domain ({SLICE_TOPOLOGY})"
        keys: dict[int, Any] = {}
        for n, i in topo.items():
            keys[i] = level_key(c, level, i, self._node_labels(n, infos), self.topology_labels)
        block = c.node_block
        by_block: dict[int, Counter] = {}
        for i, k in keys.items():
            if k is not None:
                by_block.setdefault(int(block[i]), Counter())[k] += 1
        if level == CLIQUE_LABEL:
            major = {b: min(cnt, key=lambda k, cnt=cnt: (-cnt[k], str(k))) for b, cnt in by_block.items()}
            nodes = {n: i for n, i in topo.items() if c.node_domain[i] >= 0 and keys[i] == major[int(block[i])]}
        elif all(len(cnt) == 1 for cnt in by_block.values()):
            nodes = {n: i for n, i in topo.items() if keys[i] is not None}
        else:
            return Slices(level, size, 0, topo, keys, words)
        bound = self._bound_nodes(pkey)
        where: dict[int | None, set] = {}  # block -> the domains at the level of the members bound there
        per_block: Counter = Counter()
        block_of: dict[str, int | None] = {}
        for n in bound:
            i = self.topology_index(n, None)
            b = block_of[n] = None if i is None else int(block[i])
            per_block[b] += 1
            if i is not None:
                where.setdefault(b, set()).add(level_key(c, level, i, self._node_labels(n, infos), self.topology_labels))
        partial: dict[int, tuple[Any, int, int, dict[str, int]]] = {}
        for b, k in per_block.items():
            if k % size == 0:
                continue
            domains = where.get(b, {None})
            if b is None or len(domains) != 1 or None in domains:
                on = sorted(n for n in block_of if block_of[n] == b)
                return Slices(level, size, size * pod.gpus, nodes, keys, words,
                              why=f"gang {pod.gang} asks for {words}: its members already bound on {', '.join(on)} "
                                  f"({k}, not a whole number of slices) are not inside one {level} domain of the topology, "
                                  "so the slice they are part of cannot be completed")
            (key,) = domains
            partial[b] = (key, k % size, size - k % size,
                          {n: i for n, i in nodes.items() if int(block[i]) == b and keys[i] == key})
        return Slices(level, size, size * pod.gpus, nodes, keys, words, partial=partial)

    def _complete_slices(self, pod: PodInfo, pkey: str, job_id: str, slices: Slices) -> tuple[dict[int, int], str, str]:
        """The members left that complete the gang's slices bound in part (`Slices.partial`), each
        slice's on the offered nodes of the domain its bound members are in: the policy decides a
        job of the members it lacks with every other node held back (so no new placement rule),
        one domain after the other, each holding the GPUs of those before. Returns (GPUs per
        topology node, the policy's name, "") or ({}, "", why not): a slice is required, so it is
        never completed across domains."""
        held: dict[int, int] = {}
        policy = ""
        all_nodes = set(range(self.cluster.num_nodes))
        for b, (key, bound, lack, nodes) in sorted(slices.partial.items()):
            sub = self._job(pod, job_id, lack, 0.0)
            state = self.current_state(pending=sub, blocked=all_nodes - set(nodes.values()), skip_plan=pkey, held=held)
            _, got, policy = self._decide(state, job_id)
            if not got:
                room = sum(int(state.node_free[i]) // pod.gpus for i in nodes.values())
                return {}, "", (f"gang {pod.gang} asks for {slices.words}: {bound} of its members are bound in "
                                f"{describe_key(slices.level, key)}, a slice in part, and it lacks {lack} members there: "
                                f"the offered nodes of that domain have room for {room} pods of {pod.gpus} GPUs "
                                f"({len(nodes)} offered), and a slice is not completed in another domain")
            for i, k in got.items():
                held[i] = held.get(i, 0) + k
        return held, policy, ""

    @staticmethod
    def _whole_gang(slices: Slices) -> tuple[str, bool, str, str]:
        """`_in_one_domain`'s level, required, source and prefix for a slice level whose domains
        are not the topology's blocks: the whole gang inside one domain of it (so is each slice)."""
        return (slices.level, True,
                f"{SLICE_TOPOLOGY} with {SLICE_SIZE} {slices.size}: the level's domains are not the topology's blocks, "
                "so the whole gang is kept in one",
                f"{slices.words}: the whole gang in one {slices.level} domain")

    def _slice_words(self, slices: Slices, first_nodes: dict[int, int], topology: str, held: dict[int, int] | None = None) -> str:
        """A plan's slices in words: how many whole slices in each domain of the level, then the
        slices bound in part that its members complete (`held`, GPUs per topology node, within
        `first_nodes`), each in its domain (`GET /v1/state` gang_plans[...].slices)."""
        if not slices.segment_gpus:
            return topology
        held = held or {}
        per: Counter = Counter()
        for i, k in first_nodes.items():
            per[slices.keys.get(i)] += k - held.get(i, 0)
        parts = [f"{gpus // slices.segment_gpus} in {describe_key(slices.level, key)}" for key, gpus in
                 sorted(per.items(), key=lambda kv: describe_key(slices.level, kv[0]) if kv[0] is not None else "") if gpus]
        total = sum(per.values()) // slices.segment_gpus
        words = f"{total} {slices.words}, as segment_gpus {slices.segment_gpus}: {'; '.join(parts)}" if total else slices.words
        if slices.partial:
            words += "; completing the slices bound in part, each in the domain its members are in: " + "; ".join(
                f"{lack} members in {describe_key(slices.level, key)} ({bound} bound there)"
                for _, (key, bound, lack, _) in sorted(slices.partial.items()))
        return words

    def _keep_plan(self, pod: PodInfo, pkey: str, first_nodes: dict[int, int], members: int, topology: str, policy: str,
                   victims: dict[str, list[str]] | None = None, slices: str = "") -> GangPlan:
        """The gang's placement (GPUs per topology node) kept as its plan: pod slots per node.
        With `victims` (topology node -> victim UIDs), a plan made by preemption."""
        c = self.cluster
        slots = {c.node_names[i]: k // pod.gpus for i, k in first_nodes.items()}
        domain = sorted({c.switch_names[int(c.node_leaf[i])] for i in first_nodes if c.node_leaf[i] >= 0})
        if slices and slices == topology:  # the whole gang in one domain of the slice level: said once, as slices
            topology = ""
        plan = GangPlan(pod.gang, pod.gpus, slots, domain, self.clock(), pod.gang_size, topology, slices,
                        by_preemption=victims is not None, victims=victims or {})
        plans = self.occ.plans
        plans[pkey] = plan
        while len(plans) > MAX_PLANS:  # the oldest plan goes first
            plans.pop(next(iter(plans)))
        self.version += 1
        log.info("gang %s: %d pods x %d GPUs planned on %s (domain %s%s%s) by %s%s", pod.gang, members, pod.gpus,
                 slots, ",".join(domain), f"; {topology}" if topology else "", f"; {slices}" if slices else "", policy,
                 f", after preempting {victims}" if victims is not None else "")
        return plan

    def _bound_nodes(self, pkey: str) -> list[str]:
        """The node of each of the gang's members bound (plan key: its group and GPU count): those
        this service bound, and with the watch every such pod the API server shows on a node,
        whether or not its GPUs could be counted there (a node outside the topology, a node
        already full in the occupancy)."""
        bound = [b.node for b in self.occ.bound.values() if plan_key(b.pod) == pkey]
        if self.snap is not None:
            bound += self.snap.gang_nodes.get(pkey, [])
        return bound

    def _members_left(self, pod: PodInfo, pkey: str) -> int:
        """The gang's members asking the pod's GPU count not yet bound (at least 1: the pod)."""
        return max(1, pod.gang_size - len(self._bound_nodes(pkey)))

    def _drop_resized(self, pkey: str, plan: GangPlan, size: int) -> None:
        """A gang whose size changed since its plan was made (its PodGroup's minMember, its
        size annotation, or members of another GPU count found since): the plan, made for the old
        size, is dropped; the next member filtered plans again for the new size less the members
        already bound."""
        del self.occ.plans[pkey]
        self.version += 1
        log.info("gang %s: its size changed from %d to %d pods of %d GPUs: its plan (%s) is dropped and made again",
                 plan.gang, plan.size, size, plan.gpus_per_pod, ", ".join(f"{n}: {k}" for n, k in plan.slots.items() if k > 0))

    def _decide(self, state: ClusterState, job_id: str) -> tuple[dict[int, int], dict[int, int], str]:
        """The policy's decision for the pending job queued first in `state`: a score per
        topology node (10 for the nodes of its best placement, 1..9 for the next ones), the GPUs
        per node of the best placement ({} when it makes none) and the policy's name."""
        cset = build_candidates(state, self.queue_window, wait_guard=self.scorer.wait_guard)
        j = int(state.queue[0]) if len(state.queue) and state.name_of(int(state.queue[0])) == job_id else -1
        restrict = np.array([cd.job_id == j and cd.rule not in PREEMPT_RULES for cd in cset.candidates]) if j >= 0 else np.zeros(len(cset.candidates), bool)
        decision = self.scorer.decide(state, cset, restrict)
        c = self.cluster
        scores: dict[int, int] = {}
        first_nodes: dict[int, int] = {}
        if decision.order:
            top = decision.order[0]
            p_top = float(decision.probabilities[top])
            baseline = decision.policy.startswith(("baseline:", "planner:"))  # one choice, no probabilities
            for rank, i in enumerate(decision.order):
                cd = cset.candidates[i]
                nodes, per = np.unique(c.gpu_node[cd.gpus], return_counts=True)
                if rank == 0:
                    first_nodes = dict(zip(nodes.tolist(), per.tolist()))
                    s = MAX_SCORE
                elif baseline or p_top <= 0:
                    s = max(1, MAX_SCORE - 1 - rank)
                else:
                    s = max(1, min(MAX_SCORE - 1, round((MAX_SCORE - 1) * float(decision.probabilities[i]) / p_top)))
                for n in nodes.tolist():
                    scores[n] = max(scores.get(n, 0), s)
        return scores, first_nodes, decision.policy

    def _node_labels(self, name: str, infos: dict[str, NodeInfo]) -> dict[str, str]:
        """A Kubernetes node's labels: from the request's Node objects, else the watch, else the API server."""
        info = infos.get(name)
        if info is None and self.snap is not None:
            info = self.snap.nodes.get(name)
        if info is None and self.kube is not None and self.watch is None:
            info = self._api_node(name)
        return info.labels if info is not None else {}

    def topology_conflicts(self) -> list[str]:
        """Nodes whose clique label contradicts the topology file: the watch's, else those seen in requests."""
        if self.snap is not None:
            return list(self.snap.conflicts)
        return list(self.conflicts)

    def _in_one_domain(self, pod: PodInfo, pkey: str, job: dict, topo: dict[str, int], infos: dict[str, NodeInfo],
                       free: np.ndarray, level: str | None = None, required: bool | None = None, source: str | None = None,
                       prefix: str | None = None, held: dict[int, int] | None = None,
                       ) -> tuple[tuple[dict[int, int], str, str] | None, str]:
        """A gang placement inside one domain of the pod's topology level (Kueue's
        podset-required/-preferred-topology): the offered nodes grouped by `level_key`; the
        domains whose free GPUs hold the gang in whole pods, the smallest first (then by name),
        each decided by the policy with every other node held back, the first that yields a
        placement wins. Members already bound confine it to their domain. Returns ((GPUs per
        topology node, policy, the request in words), "") or (None, why not). `level`, `required`,
        `source` (the annotation in words) and `prefix` (of the request in words) stand in for the
        pod's topology request (a slice level planned as one domain, `_whole_gang`); `held` (GPUs
        per topology node) is taken already, by members completing slices bound in part."""
        c = self.cluster
        level = pod.topology_level if level is None else level
        required = pod.topology_required if required is None else required
        if prefix is None:
            prefix = f"{'required' if required else 'preferred'} {level}"
        groups, what, unlabelled = self._domains(pod, pkey, job, topo, infos, level, required, source)
        if groups is None:
            return None, what
        units = {k: sum(int(free[i]) // pod.gpus for i in nodes) for k, nodes in groups.items()}
        need = job["num_gpus"] // pod.gpus
        all_nodes = set(range(c.num_nodes))
        for k in sorted((k for k in groups if units[k] >= need), key=lambda k: (units[k], describe_key(level, k))):
            state = self.current_state(pending=job, blocked=all_nodes - set(groups[k]), skip_plan=pkey, held=held)
            _, first_nodes, policy = self._decide(state, job["id"])
            if first_nodes:
                return (first_nodes, policy, f"{prefix}: {describe_key(level, k)}"), ""
        best = max(groups, key=lambda k: (units[k], describe_key(level, k)), default=None)
        why = f"{what}: no offered domain holds it"
        if best is not None:
            why += f" (the most room: {describe_key(level, best)}, {units[best]} pods of {pod.gpus} GPUs free)"
        if unlabelled:
            why += f"; {unlabelled} offered nodes have no {level} label"
        return None, why

    def _domains(self, pod: PodInfo, pkey: str, job: dict, topo: dict[str, int], infos: dict[str, NodeInfo],
                 level: str | None = None, required: bool | None = None,
                 source: str | None = None) -> tuple[dict[Any, list[int]] | None, str, int]:
        """The offered topology nodes grouped by their domain at the pod's topology level
        (`level_key`), confined to the domain of the members already bound: (domain key ->
        topology nodes, the request in words, offered nodes without the level's label), or
        (None, why not, 0) when the members bound are not in one known domain. `level`,
        `required` and `source` (the annotation in words) stand in for the pod's topology request."""
        c = self.cluster
        level = pod.topology_level if level is None else level
        required = pod.topology_required if required is None else required
        if source is None:
            source = REQUIRED_TOPOLOGY if required else PREFERRED_TOPOLOGY
        kind = "requires" if required else "prefers"
        what = f"gang {pod.gang} ({job['num_gpus'] // pod.gpus} pods x {pod.gpus} GPUs) {kind} one {level} domain ({source})"
        groups: dict[Any, list[int]] = {}
        unlabelled = 0
        entries = []
        for n, i in topo.items():
            labels = self._node_labels(n, infos)
            entries.append((n, i, labels.get(CLIQUE_LABEL)))
            k = level_key(c, level, i, labels, self.topology_labels)
            if k is None:
                unlabelled += 1
            else:
                groups.setdefault(k, []).append(i)
        if level == CLIQUE_LABEL and self.snap is None:  # the watch reports its own (all mapped nodes)
            for msg in clique_conflicts(c, entries):
                if msg not in self.conflicts:
                    log.warning("topology conflict: %s", msg)
                self.conflicts[msg] = None
                self.conflicts.move_to_end(msg)
                while len(self.conflicts) > 256:
                    self.conflicts.popitem(last=False)
        bound = self._bound_nodes(pkey)
        if bound:
            keys = set()
            for n in bound:
                i = self.topology_index(n, None)
                keys.add(None if i is None else level_key(c, level, i, self._node_labels(n, infos), self.topology_labels))
            if len(keys) != 1 or None in keys:
                return None, f"{what}: its members already bound ({', '.join(sorted(set(bound)))}) are not in one known domain", 0
            (k,) = keys
            groups = {k: groups.get(k, [])}
            what += f", where its members already bound are ({describe_key(level, k)})"
        return groups, what, unlabelled

    def _plan_verdicts(self, pod: PodInfo, plan: GangPlan, names: list[str], topo: dict[str, int],
                       verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
        where = (f"gang {plan.gang} is placed on {', '.join(n for n, s in plan.slots.items() if s > 0)} "
                 f"(domain {','.join(plan.domain)}{'; ' + plan.topology if plan.topology else ''}"
                 f"{'; ' + plan.slices if plan.slices else ''}"
                 f"{'; by preemption: its nodes take its members once their victims leave' if plan.by_preemption else ''})")
        for n in names:
            if n in topo and plan.slots.get(self.cluster.node_names[topo[n]], 0) > 0:
                verdicts[n] = Verdict(OK, MAX_SCORE, "")
            elif n in topo or verdicts.get(n, Verdict(OK)).status == OK:
                verdicts[n] = Verdict(FAIL, 0, where)
        return verdicts

    # ------------------------------------------------------------------ verbs

    def _pod_and_nodes(self, args: Any, envelope: str) -> tuple[PodInfo, list[str], dict[str, NodeInfo], bool]:
        if not isinstance(args, dict):
            raise WireError(f"{envelope}: must be a JSON object, got {type(args).__name__}")
        pod = parse_pod(get(args, "Pod", envelope), f"{envelope}.Pod")
        nodes, names = node_list(args, envelope)
        if nodes is None and names is None:
            raise WireError(f"{envelope}: neither Nodes nor NodeNames given")
        self.sync()
        if nodes is not None:
            return pod, [n.name for n in nodes], {n.name: n for n in nodes}, True
        known = self.snap.nodes if self.snap is not None else {}  # names only: the watch's Node objects
        return pod, list(names), {n: known[n] for n in names if n in known}, False

    def filter(self, args: Any) -> dict:
        pod, names, infos, with_nodes = self._pod_and_nodes(args, "ExtenderArgs")
        verdicts = self.evaluate(pod, names, infos)
        if plan_key(pod):
            self.filtered[pod.key] = (self.clock(), names)
            self.filtered.move_to_end(pod.key)
            while len(self.filtered) > MAX_PLANS:
                self.filtered.popitem(last=False)
        ok = [n for n in names if verdicts[n].status == OK]
        failed = {n: v.reason for n, v in verdicts.items() if v.status == FAIL}
        never = {n: v.reason for n, v in verdicts.items() if v.status == UNRESOLVABLE}
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": never, "Error": ""}
        if with_nodes:
            result["Nodes"] = {"metadata": {}, "items": [infos[n].raw for n in ok]}
        else:
            result["NodeNames"] = ok
        return result

    def prioritize(self, args: Any) -> list[dict]:
        pod, names, infos, _ = self._pod_and_nodes(args, "ExtenderArgs")
        verdicts = self.evaluate(pod, names, infos)
        return [{"Host": n, "Score": int(verdicts[n].score) if verdicts[n].status == OK else 0} for n in names]

    def _victims_of(self, pod: PodInfo, node: str, pods: list, path: str) -> tuple[list[tuple[str, PodInfo | None]], str]:
        """The offered victims of one node as (UID, what is known of the pod), and why the node
        may not be returned ('' when it may). A full Pod is read as sent; a MetaPod {UID} is
        looked up among the pods bound or seen here, else among the node's pods listed through
        the API server. kube-scheduler offers only pods of strictly lower priority than the
        preemptor (its default preemption), so a victim known to nobody here is taken on its word."""
        out: list[tuple[str, PodInfo | None]] = []
        listed: dict[str, PodInfo] | None = None
        for k, v in enumerate(pods):
            p = f"{path}.Pods[{k}]"
            if isinstance(v, dict) and get(v, "metadata", p) is not None:
                info = parse_pod(v, p)
                uid = info.uid
            else:
                uid = get_str(v, "UID", p)
                key = self.occ.by_uid.get(uid) or self.seen_uid.get(uid)
                info = self.occ.bound[key].pod if key in self.occ.bound else self.seen.get(key) if key else None
                if info is not None and info.uid != uid:
                    info = None
                if info is None and self.snap is not None:
                    info = self.snap.by_uid.get(uid)
                if info is None and self.kube is not None:
                    if listed is None:
                        listed = {}
                        for raw in self.kube.node_pods(node) or []:
                            try:
                                q = parse_pod(raw, "node pod")
                            except WireError:
                                continue
                            listed[q.uid] = q
                    info = listed.get(uid)
            if not uid:
                return out, f"{p}: a victim without a UID cannot be named back to kube-scheduler"
            if info is not None and info.priority >= pod.priority:
                return out, f"{info.key} has priority {info.priority}, not below the preemptor's {pod.priority}"
            if info is not None and not info.preemptible:
                return out, f"{info.key} is annotated gangsched.io/preemptible: false"
            out.append((uid, info))
        if not out:
            return out, "no victims offered"
        return out, ""

    def preempt(self, args: Any) -> dict:
        """ExtenderPreemptionArgs -> ExtenderPreemptionResult. Each node kube-scheduler offered
        comes back with exactly the victims it offered (its set is already the least it found
        over every resource, CPU and memory included), or is dropped: a victim of the
        preemptor's priority or above, or annotated non-preemptible, drops its node; a node is
        never returned without victims. For a pod outside a gang, when the policy's
        place-after-preempt choice for the pod, decided on the offered nodes with only the
        offered victims preemptible, lands on one of them, that node alone is returned. A gang
        member gets the one node its gang's plan gives it, or none (`_gang_preempt`)."""
        env = "ExtenderPreemptionArgs"
        if not isinstance(args, dict):
            raise WireError(f"{env}: must be a JSON object, got {type(args).__name__}")
        pod = parse_pod(get(args, "Pod", env), f"{env}.Pod")
        self.sync()
        pod = self.resolve_gang(pod)
        self.check_slices(pod)
        self.remember(pod)
        full = get(args, "NodeNameToVictims", env)
        if full is None:
            full = get(args, "NodeToVictims", env)
        meta = get(args, "NodeNameToMetaVictims", env)
        key, table = ("NodeNameToVictims", full) if full is not None else ("NodeNameToMetaVictims", meta)
        if table is None:
            raise WireError(f"{env}: neither NodeNameToVictims nor NodeNameToMetaVictims given")
        if not isinstance(table, dict):
            raise WireError(f"{env}.{key}: must be an object of node name -> victims")
        options: dict[str, tuple[list[tuple[str, PodInfo | None]], int]] = {}
        for node, victims in table.items():
            path = f"{env}.{key}[{node}]"
            pods = get(victims, "Pods", path) or []
            if not isinstance(pods, list):
                raise WireError(f"{path}.Pods: must be a list")
            pdb = get(victims, "NumPDBViolations", path) or 0
            if isinstance(pdb, bool) or not isinstance(pdb, int):
                raise WireError(f"{path}.NumPDBViolations: must be an integer, got {pdb!r}")
            chosen, why = self._victims_of(pod, node, pods, path)
            if why:
                log.info("preempt %s: node %s dropped: %s", pod.key, node, why)
                continue
            options[node] = (chosen, pdb)
        pkey = plan_key(pod)
        if options and pkey:
            options = self._gang_preempt(pod, pkey, options)
        elif options and pod.gpus > 0:
            try:
                learned = self._learned_victims(pod, options)
            except (ExtenderError, StateError, WireError) as e:
                log.warning("preempt: no learned choice (%s)", e)
                learned = None
            if learned is not None:
                options = {learned: options[learned]}
        return {
            "NodeNameToMetaVictims": {n: {"Pods": [{"UID": uid} for uid, _ in ch], "NumPDBViolations": pdb}
                                      for n, (ch, pdb) in options.items()},
            "CheckpointCostGPUSeconds": {n: sum(p.gpus * 90.0 for _, p in ch if p is not None) for n, (ch, _) in options.items()},
        }

    def _gang_preempt(self, pod: PodInfo, pkey: str, options: dict) -> dict:
        """The preemption of a gang member: the node its gang's plan gives it, with the victims
        offered there, or nothing. Without a live plan (of the gang's current size), the whole
        gang (the members left x the pod's GPUs) is planned after preemption on the offered
        nodes (`_plan_preemption`); when it does not fit even so, no node comes back, for this
        member or any other: no half preemption. A live plan (made by preemption or by filter) is
        reused: the member is given one offered node of the plan with a slot that no other
        member's preemption was given (its own earlier one first)."""
        plan = self._live_plans().get(pkey)
        if plan is not None and plan.size != pod.gang_size:
            self._drop_resized(pkey, plan, pod.gang_size)
            plan = None
        if plan is None:
            try:
                plan = self._plan_preemption(pod, pkey, options)
            except (ExtenderError, StateError, WireError) as e:
                log.warning("preempt %s: gang %s not planned (%s): no node returned", pod.key, pod.gang, e)
                return {}
            if plan is None:
                return {}
        offered: dict[str, str] = {}  # topology node -> the offered node that is it
        for n in options:
            t = self.topology_name(n)
            if t is not None:
                offered.setdefault(t, n)
        given = Counter(t for m, t in plan.assigned.items() if m != pod.key)
        mine = plan.assigned.get(pod.key)
        for t in ([mine] if mine else []) + list(plan.slots):
            if t in offered and plan.slots.get(t, 0) - given[t] > 0:
                if mine != t:
                    plan.assigned[pod.key] = t
                    self.version += 1
                return {offered[t]: options[offered[t]]}
        log.info("preempt %s: gang %s's plan (%s) has no slot left for it on the offered nodes: no node returned",
                 pod.key, pod.gang, ", ".join(f"{t}: {k}" for t, k in plan.slots.items() if k > 0))
        return {}

    def _plan_preemption(self, pod: PodInfo, pkey: str, options: dict) -> GangPlan | None:
        """The gang's plan after preemption, kept (see `_keep_plan`), or None when the whole gang
        does not fit even after preempting every victim offered. The policy's place-after-preempt
        choice (the `preempt` rule) for one job of the members left x the pod's GPUs, on a state
        where the topology nodes neither offered nor passed by the pod's filter of this
        scheduling cycle (kube-scheduler offers no victims where the pod fits without) are held
        and only the offered victims are preemptible; when the gang fits there without
        preemption by this service's account (its victims unknown here), the usual placement.
        With a topology request, one domain of those nodes at a time (the smallest first), only
        the victims offered in it preemptible and the placement inside it; required and no domain
        holds it: None."""
        c = self.cluster
        topo: dict[str, int] = {}
        for n in options:
            i = self.topology_index(n, None)
            if i is not None and i not in topo.values() and self._static_check(pod, i, None) is None:
                topo[n] = i
        # The nodes of the pod's filter in this scheduling cycle passed kube-scheduler's own filters
        # (it offers no victims there: the pod fits without): the plan may take their free GPUs.
        at, names = self.filtered.get(pod.key, (0.0, []))
        free_nodes: dict[str, int] = {}
        if topo and self.clock() - at < DECISION_TTL_S:
            for n in names:
                i = self.topology_index(n, None)
                if (n not in options and i is not None and i not in topo.values() and i not in free_nodes.values()
                        and self._static_check(pod, i, None) is None):
                    free_nodes[n] = i
        members = self._members_left(pod, pkey)
        what = f"gang {pod.gang} ({members} pods x {pod.gpus} GPUs)"
        if not topo:
            log.info("preempt %s: %s: no offered node is a topology node that can hold its pods: no node returned", pod.key, what)
            return None
        job_id = f"pending:{pkey}"
        job = self._job(pod, job_id, members, 0.0)
        place = {**topo, **free_nodes}
        slices = self._slices(pod, pkey, place, {}) if pod.slice_size > 1 else None
        level, required, source, prefix = pod.topology_level, pod.topology_required, None, None
        if slices is not None:
            if slices.why or slices.partial:
                log.info("preempt %s: %s: no node returned", pod.key, slices.why or
                         f"gang {pod.gang} has slices bound in part ({slices.words}); a preemption that completes them "
                         "is not planned (filter completes them where room is)")
                return None
            place = slices.nodes
            if slices.segment_gpus:
                job["segment_gpus"] = slices.segment_gpus
            else:  # the slice level's domains are not the topology's blocks: the whole gang in one domain of it
                level, required, source, prefix = self._whole_gang(slices)
        everywhere = set(place.values())
        tries: list[tuple[set[int], str]] = []
        if level:
            prefix = prefix or f"{'required' if required else 'preferred'} {level}"
            groups, why, _ = self._domains(pod, pkey, job, place, {}, level, required, source)
            for k, nodes in sorted((groups or {}).items(), key=lambda kv: (sum(self._node_gpus[i] // pod.gpus for i in kv[1]),
                                                                           describe_key(level, kv[0]))):
                if sum(self._node_gpus[i] // pod.gpus for i in nodes) >= members:
                    tries.append((set(nodes), f"{prefix}: {describe_key(level, k)}"))
        if not (level and required):
            tries.append((everywhere, ""))
        all_nodes = set(range(c.num_nodes))
        for nodes, topology in tries:
            # Only the victims offered on the nodes tried are preemptible: holding the other nodes holds
            # their free GPUs only, and a victim preempted there would free room outside the domain.
            victims = frozenset(p.key for n, i in topo.items() if i in nodes for _, p in options[n][0] if p is not None)
            state = self.current_state(pending=job, blocked=all_nodes - nodes, skip_plan=pkey, victims=victims)
            first_nodes, policy = self._preempt_choice(state, job_id)
            if first_nodes and set(first_nodes) <= nodes:
                by_node = {i: n for n, i in topo.items()}
                taken = {c.node_names[i]: [uid for uid, _ in options[by_node[i]][0]] for i in first_nodes if i in by_node}
                return self._keep_plan(pod, pkey, first_nodes, members, topology, policy, victims=taken,
                                       slices=self._slice_words(slices, first_nodes, topology) if slices is not None else "")
        log.info("preempt %s: %s does not fit the offered nodes%s%s even after preempting every victim offered: "
                 "no node returned (no member preempts)", pod.key, what,
                 f" in one {level} domain" if level and required else "", f" as {slices.words}" if slices is not None else "")
        return None

    def _preempt_choice(self, state: ClusterState, job_id: str) -> tuple[dict[int, int], str]:
        """The GPUs per topology node of the policy's place-after-preempt choice (the `preempt`
        rule: victims of strictly lower priority class, as kube-scheduler offers) for the pending
        job queued first in `state`, and the policy's name; when the job fits without preemption
        (no `preempt` candidate), its usual placement; ({}, "") when it fits neither way."""
        cset = build_candidates(state, self.queue_window, wait_guard=self.scorer.wait_guard)
        j = int(state.queue[0]) if len(state.queue) and state.name_of(int(state.queue[0])) == job_id else -1
        if j < 0:
            return {}, ""
        restrict = np.array([cd.job_id == j and cd.rule == PREEMPT for cd in cset.candidates])
        decision = self.scorer.decide(state, cset, restrict)
        if decision.order:
            nodes, per = np.unique(self.cluster.gpu_node[cset.candidates[decision.order[0]].gpus], return_counts=True)
            return dict(zip(nodes.tolist(), per.tolist())), decision.policy
        _, first_nodes, policy = self._decide(state, job_id)
        return first_nodes, policy

    def _learned_victims(self, pod: PodInfo, options: dict) -> str | None:
        """The offered node the policy's place-after-preempt candidate lands on, decided on a
        state where the topology nodes not offered are held and only the offered victims are
        preemptible; None when its choice is elsewhere or it makes none."""
        offered = {i for i in (self.topology_index(n, None) for n in options) if i is not None}
        if not offered:
            return None
        victims = frozenset(p.key for ch, _ in options.values() for _, p in ch if p is not None)
        blocked = set(range(self.cluster.num_nodes)) - offered
        state = self.current_state(pending=self._job(pod, f"pending:{pod.key}", 1, 0.0), blocked=blocked, victims=victims)
        cset = build_candidates(state, self.queue_window, wait_guard=self.scorer.wait_guard)
        j = int(state.queue[0]) if len(state.queue) else -1
        # kube-scheduler's preemption takes only pods of strictly lower spec.priority (the options
        # offered): that is the `preempt` rule; `preempt-las` victims may share the pod's class.
        restrict = np.array([cd.job_id == j and cd.rule == PREEMPT for cd in cset.candidates])
        decision = self.scorer.decide(state, cset, restrict)
        if not decision.order:
            return None
        cd = cset.candidates[decision.order[0]]
        if cd.rule != PREEMPT or cd.job_id != j:
            return None
        chosen = {state.name_of(v) for v in cd.victims}
        members = self.snap.members if self.snap is not None else {}
        for i in np.unique(self.cluster.gpu_node[cd.gpus]).tolist():
            for n in options:
                if self.topology_index(n, None) != i:
                    continue
                # the chosen jobs' pods on this node (a gang's job: its members bound there)
                need = {k for j in chosen for k in ([k for k, at in members[j] if at == n] if j in members else [j])}
                if need <= {p.key for _, p in options[n][0] if p is not None}:
                    return n
        return None

    def bind(self, args: Any) -> dict:
        """ExtenderBindingArgs -> ExtenderBindingResult: creates the pod's Binding through the
        API server, then records the pod's GPUs on the node. Refused (with `Error`, nothing
        bound) when the service has no API server (`--kube-api`), for a pod this service never
        filtered or prioritized, for a UID unlike the one seen, and for a gang member without a
        reserved slot on that node in its gang's plan."""
        env = "ExtenderBindingArgs"
        if not isinstance(args, dict):
            raise WireError(f"{env}: must be a JSON object, got {type(args).__name__}")
        name, ns = get_str(args, "PodName", env), get_str(args, "PodNamespace", env) or "default"
        uid, node = get_str(args, "PodUID", env), get_str(args, "Node", env)
        if not name or not node:
            raise WireError(f"{env}: PodName and Node are required")
        key = f"{ns}/{name}"
        if self.leader is not None and not self.leader.is_leader():
            return {"Error": f"bind {key}: this replica is a follower (the lease {self.leader.namespace}/{self.leader.name} "
                             f"is held by {self.leader.holder() or 'nobody'}): not bound; the leader binds"}
        self.sync()
        if self.kube is None:
            return {"Error": f"bind {key}: this service creates no Bindings: it was started without --kube-api "
                             "(start it with --kube-api in-cluster, or remove bindVerb from the extender config)"}
        pod = self.seen.get(key)
        if pod is None:
            return {"Error": f"bind {key}: the pod was never filtered or prioritized by this service: not bound"}
        if uid and pod.uid and uid != pod.uid:
            return {"Error": f"bind {key}: UID {uid} is not the UID {pod.uid} this service decided for: not bound"}
        topo = self.topology_name(node)
        pkey = plan_key(pod)
        plan = self._live_plans().get(pkey) if pkey else None
        if pkey and plan is None:
            return {"Error": f"bind {key}: gang {pod.gang} has no reserved placement (its plan expired after "
                             f"--gang-ttl-s {self.gang_ttl_s:g} or was dropped by a state reset): not bound; filter it again"}
        if plan is not None:
            size = self.resolve_gang(pod).gang_size
            if size != plan.size:
                self._drop_resized(pkey, plan, size)
                return {"Error": f"bind {key}: gang {pod.gang} is now {size} pods of {pod.gpus} GPUs, its plan was made "
                                 f"for {plan.size}: the plan is dropped; not bound; filter it again"}
        if plan is not None and plan.slots.get(topo or "", 0) <= 0:
            open_nodes = ", ".join(n for n, k in plan.slots.items() if k > 0)
            return {"Error": f"bind {key}: gang {pod.gang} has no reserved slot on {node} (its plan: {open_nodes}): not bound"}
        err = self.kube.bind(ns, name, uid or pod.uid, node)
        if err:
            return {"Error": err}
        self.release(key)
        if uid:
            pod.uid = pod.uid or uid
        i = self.topology_index(node, None)
        gpus = None
        if pod.gpus > 0:
            if plan is not None:
                plan.slots[topo] -= 1
                plan.assigned.pop(key, None)
            if i is not None:
                state = self.current_state()
                first = int(self.cluster.node_first_gpu[i])
                free = np.flatnonzero(state.free_mask[first: first + int(self.cluster.node_gpus[i])]) + first
                gpus = free[: pod.gpus].tolist() if len(free) >= pod.gpus else None
            if gpus is None:
                self.occ.unknown_used[node] = self.occ.unknown_used.get(node, 0) + pod.gpus
        self.occ.bound[key] = Bound(pod, node, gpus, self.now_s())
        self.version += 1
        if pod.uid:
            self.occ.by_uid[pod.uid] = key
        self._live_plans()
        return {"Error": ""}
