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
* `preempt(ExtenderPreemptionArgs) -> ExtenderPreemptionResult`: `NodeNameToMetaVictims`; only
  pods of strictly lower `spec.priority` than the preemptor (and not annotated
  `gangsched.io/preemptible: "false"`) are ever victims. When the policy's place-after-preempt
  candidate for the pod lands on an offered node with allowed victims, that node alone is
  returned (the learned choice); otherwise each node with its cheapest sufficient victims.
  `CheckpointCostGPUSeconds` (ignored by kube-scheduler's decoder) gives the accepted cost.
* `bind(ExtenderBindingArgs) -> ExtenderBindingResult`: records the pod's GPUs on the node
  (occupancy) and, with a `binder`, creates the Binding through the API server.

How a pod is decided: the pod becomes a queued job of the current decision state (occupancy =
the last `PUT /v1/state` snapshot + pods bound since + GPUs promised to gangs in flight, with the
GPUs of topology nodes not offered held back), the project's `build_candidates` makes its
candidates and the scorer (model or baseline) ranks them. A pod asks for `g` GPUs, so its job has
`tp_degree = g`: every placement keeps each pod's GPUs on one node.

Nodes map to the cluster topology by name, else by the `gangsched.io/topology-node` or
`kubernetes.io/hostname` label. A node outside the topology is scored from its labels (GFD
product and count; 1..5, below any node the policy chose) and is never an error.

Gangs: pods labelled `scheduling.k8s.io/group-name` or `scheduling.volcano.sh/group-name`, with
the member count from the annotation `gangsched.io/gang-size`, `scheduling.k8s.io/group-min-member`
or `scheduling.volcano.sh/group-min-member`. The first member decides a placement for the whole
gang (one job of members x g GPUs); the plan (pod slots per node) is kept and its GPUs are held
back from other pods. Later members pass filter only on the plan's nodes with free slots (score 10).
A bind uses a slot; a plan ends when all its slots are bound or after `gang_ttl_s`.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.candidates import build_candidates
from envs.placement import PREEMPT, PREEMPT_RULES
from envs.state import ClusterState, StateError
from envs.topology import Cluster
from service.scoring import Scorer
from service.wire import (
    TOPOLOGY_NODE_LABEL,
    NodeInfo,
    PodInfo,
    WireError,
    get,
    get_str,
    node_list,
    parse_pod,
)

log = logging.getLogger("gangsched.service")
MAX_SCORE = 10
SEEN_PODS = 10_000  # pods remembered from filter/prioritize, for bind (which carries no request)
OK, FAIL, UNRESOLVABLE = "ok", "fail", "unresolvable"
DECISION_TTL_S = 5.0  # how long filter's decision for a pod serves its prioritize
SHAPE_TTL_S = 1.0  # how long a decision serves other pods of the same shape (outside gangs)
STATE_CACHE_S = 1.0  # how long the occupancy's ClusterState is reused (its clock is at most this old)
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


class KubeBinder:
    """Creates `Binding`s through the API server with the pod's service account (in-cluster)."""

    def __init__(self, host: str | None = None, token_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/token",
                 ca_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", timeout_s: float = 5.0):
        if host is None:
            h, p = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not h:
                raise RuntimeError("--bind-api in-cluster: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)")
            host = f"https://{h}:{p}"
        self.host, self.token_path, self.timeout_s = host.rstrip("/"), token_path, timeout_s
        self.context = ssl.create_default_context(cafile=ca_path) if os.path.exists(ca_path) else None

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """'' on success, else the API server's error."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        if uid:
            body["metadata"]["uid"] = uid
        req = urllib.request.Request(f"{self.host}/api/v1/namespaces/{namespace}/pods/{name}/binding",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if os.path.exists(self.token_path):
            with open(self.token_path) as f:
                req.add_header("Authorization", f"Bearer {f.read().strip()}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.context):
                return ""
        except urllib.error.HTTPError as e:
            return f"binding {namespace}/{name} to {node}: API server answered {e.code}: {e.read()[:500].decode(errors='replace')}"
        except (urllib.error.URLError, OSError) as e:
            return f"binding {namespace}/{name} to {node}: {e}"


class Extender:
    def __init__(self, cluster: Cluster, scorer: Scorer, queue_window: int = 8, gang_ttl_s: float = 600.0,
                 binder: KubeBinder | None = None, clock=time.monotonic):
        self.cluster = cluster
        self.scorer = scorer
        self.queue_window = queue_window
        self.gang_ttl_s = gang_ttl_s
        self.binder = binder
        self.clock = clock
        self.node_index = {n: i for i, n in enumerate(cluster.node_names)}
        self.occ = Occupancy(base_clock=clock())
        self.seen: OrderedDict[str, PodInfo] = OrderedDict()
        self.aliases: dict[str, int] = {}  # node names learnt from labels -> topology index
        self.version = 0  # changes with the occupancy (sync, bind, release, gang plans)
        # The last decisions, for prioritize after filter of the same pod on the same occupancy:
        # (pod key, pod shape, version) -> (monotonic time, nodes offered, verdicts)
        self.decisions: OrderedDict[tuple, tuple[float, frozenset, dict]] = OrderedDict()
        self._states: OrderedDict[tuple, tuple[float, ClusterState]] = OrderedDict()  # see current_state

    # ------------------------------------------------------------------ occupancy

    def now_s(self) -> float:
        return float(self.occ.base.get("time_s", 0.0)) + (self.clock() - self.occ.base_clock)

    def put_state(self, data: Any) -> ClusterState:
        """Replace the occupancy by a plain-data state (authoritative: binds recorded before are
        dropped; gang plans stay). Raises StateError naming the field."""
        state = ClusterState.from_dict(data, self.cluster)
        self.occ = Occupancy(base=data, base_clock=self.clock(), plans=self.occ.plans)
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
                       skip_plan: str | None = None, queued_limit: int | None = None) -> dict:
        """The current decision state in plain data: the synced base, the pods bound since (as
        running jobs), the GPUs held for gangs in flight and for `blocked` nodes (as reserved
        jobs), and `pending` (a job) queued first."""
        now = self.now_s()
        base = self.occ.base
        running = list(base.get("running", []))
        ids = {r.get("id") for s in ("running", "checkpointing", "reserved", "queued") for r in base.get(s, []) if isinstance(r, dict)}
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

    def current_state(self, pending: dict | None = None, blocked: set[int] = frozenset(), skip_plan: str | None = None) -> ClusterState:
        """The decision state (see occupancy_dict). The occupancy part is built by
        `ClusterState.from_dict` once per (occupancy version, blocked nodes, plan skipped) and
        reused for STATE_CACHE_S; the pending job is then queued first by `ClusterState.with_job_queued_first`."""
        key = (self.version, frozenset(blocked), skip_plan)
        now = self.clock()
        hit = self._states.get(key)
        try:
            if pending is None:
                return ClusterState.from_dict(self.occupancy_dict(None, blocked, skip_plan), self.cluster)
            if hit is None or now - hit[0] >= STATE_CACHE_S:
                limit = max(0, self.queue_window - 1)
                base = ClusterState.from_dict(self.occupancy_dict(None, blocked, skip_plan, queued_limit=limit), self.cluster)
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
        i = self.node_index.get(name)
        if i is None and info is not None:
            for label in (TOPOLOGY_NODE_LABEL, "kubernetes.io/hostname"):
                i = self.node_index.get(info.labels.get(label, ""))
                if i is not None:
                    break
            if i is not None:
                self.aliases[name] = i
        return i if i is not None else self.aliases.get(name)

    def _static_check(self, pod: PodInfo, i: int, info: NodeInfo | None) -> Verdict | None:
        """Why topology node `i` can never take the pod, or None."""
        c = self.cluster
        t = c.gpu_types[int(c.node_gpu_type[i])]
        if pod.gpu_type is not None and t.name != pod.gpu_type.name:
            return Verdict(UNRESOLVABLE, 0, f"GPU type {t.name}, the pod asks for {pod.gpu_type.name}")
        if t.memory_gb < pod.mem_per_gpu_gb:
            return Verdict(UNRESOLVABLE, 0, f"{t.name} has {t.memory_gb:g} GB per GPU, the pod needs {pod.mem_per_gpu_gb:g} GB")
        total = int(c.node_gpus[i]) if info is None or info.allocatable_gpus is None else min(int(c.node_gpus[i]), info.allocatable_gpus)
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
        free = total - self.occ.unknown_used.get(name, 0)
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

    def evaluate(self, pod: PodInfo, names: list[str], infos: dict[str, NodeInfo]) -> dict[str, Verdict]:
        """A verdict (fit, score 0..10, reason) for each offered node.

        Decisions are reused on the same occupancy (`version`) over a superset of these nodes:
        the same pod's for DECISION_TTL_S (filter, then prioritize over the nodes that passed),
        and, for pods outside gangs, any pod of the same shape (GPUs, memory, type, priority,
        preemptible, kind, estimate, communication) for SHAPE_TTL_S, so a burst of like pods
        costs one decision; the state's clock is at most that old."""
        self.remember(pod)
        now = self.clock()
        shape = (pod.gpus, pod.mem_per_gpu_gb, pod.gpu_type.name if pod.gpu_type else None, pod.priority_class,
                 pod.preemptible, pod.kind, pod.estimate_s, pod.comm_fraction, bool(infos))
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
        for n in names:
            i = self.topology_index(n, infos.get(n))
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
        plan = plans.get(pod.gang) if pod.gang else None
        if plan is not None and plan.gpus_per_pod == pod.gpus:
            open_nodes = [n for n in topo if plan.slots.get(self.cluster.node_names[topo[n]], 0) > 0]
            if open_nodes:
                return self._plan_verdicts(pod, plan, names, topo, verdicts)
            del plans[pod.gang]  # none of its nodes is offered any more: plan again for the members left
            self.version += 1
        members = 1
        if pod.gang and pod.gang_size > 1:
            done = sum(1 for b in self.occ.bound.values() if b.pod.gang == pod.gang)
            members = max(1, pod.gang_size - done)
        offered = set(topo.values())
        blocked = set(range(self.cluster.num_nodes)) - offered
        job_id = f"pending:{pod.gang or pod.key}"
        state = self.current_state(pending=self._job(pod, job_id, members, 0.0), blocked=blocked, skip_plan=pod.gang)
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
        free = state.node_free
        if pod.gang and pod.gang_size > 1:
            if not first_nodes:
                for n in topo:
                    verdicts[n] = Verdict(FAIL, 0, f"gang {pod.gang} ({members} pods x {pod.gpus} GPUs) does not fit "
                                                   "the free GPUs of the offered nodes")
                return verdicts
            slots = {c.node_names[i]: k // pod.gpus for i, k in first_nodes.items()}
            domain = sorted({c.switch_names[int(c.node_leaf[i])] for i in first_nodes if c.node_leaf[i] >= 0})
            plan = GangPlan(pod.gang, pod.gpus, slots, domain, self.clock(), pod.gang_size)
            plans[pod.gang] = plan
            self.version += 1
            log.info("gang %s: %d pods x %d GPUs planned on %s (domain %s) by %s", pod.gang, members, pod.gpus,
                     slots, ",".join(domain), decision.policy)
            return self._plan_verdicts(pod, plan, names, topo, verdicts)
        for n, i in topo.items():
            f = int(free[i])
            info = infos.get(n)
            if info is not None and info.allocatable_gpus is not None and info.allocatable_gpus < int(c.node_gpus[i]):
                f = min(f, info.allocatable_gpus - (int(c.node_gpus[i]) - int(free[i])))  # GPUs the kubelet withholds
            if f >= pod.gpus:
                verdicts[n] = Verdict(OK, scores.get(i, 0), "")
            else:
                verdicts[n] = Verdict(FAIL, 0, f"{max(f, 0)} GPUs free, the pod asks for {pod.gpus}")
        return verdicts

    def _plan_verdicts(self, pod: PodInfo, plan: GangPlan, names: list[str], topo: dict[str, int],
                       verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
        where = f"gang {plan.gang} is placed on {', '.join(n for n, s in plan.slots.items() if s > 0)} (domain {','.join(plan.domain)})"
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
        if nodes is not None:
            return pod, [n.name for n in nodes], {n.name: n for n in nodes}, True
        return pod, list(names), {}, False

    def filter(self, args: Any) -> dict:
        pod, names, infos, with_nodes = self._pod_and_nodes(args, "ExtenderArgs")
        verdicts = self.evaluate(pod, names, infos)
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

    def _victim(self, v: Any, path: str) -> tuple[str, PodInfo | None]:
        """(uid, what is known of the pod) of a victim: a full Pod, or a MetaPod {UID}."""
        if isinstance(v, dict) and get(v, "metadata", path) is not None:
            p = parse_pod(v, path)
            return p.uid, p
        uid = get_str(v, "UID", path)
        key = self.occ.by_uid.get(uid)
        return uid, (self.occ.bound[key].pod if key in self.occ.bound else None)

    def preempt(self, args: Any) -> dict:
        env = "ExtenderPreemptionArgs"
        if not isinstance(args, dict):
            raise WireError(f"{env}: must be a JSON object, got {type(args).__name__}")
        pod = parse_pod(get(args, "Pod", env), f"{env}.Pod")
        self.remember(pod)
        full = get(args, "NodeNameToVictims", env) or get(args, "NodeToVictims", env)
        meta = get(args, "NodeNameToMetaVictims", env)
        key, table = ("NodeNameToVictims", full) if full is not None else ("NodeNameToMetaVictims", meta)
        if table is None:
            raise WireError(f"{env}: neither NodeNameToVictims nor NodeNameToMetaVictims given")
        if not isinstance(table, dict):
            raise WireError(f"{env}.{key}: must be an object of node name -> victims")
        state = self.current_state()
        options: dict[str, tuple[list[tuple[str, PodInfo]], int, float]] = {}
        for node, victims in table.items():
            path = f"{env}.{key}[{node}]"
            pods = get(victims, "Pods", path) or []
            if not isinstance(pods, list):
                raise WireError(f"{path}.Pods: must be a list")
            pdb = get(victims, "NumPDBViolations", path) or 0
            allowed = []
            for k, v in enumerate(pods):
                uid, info = self._victim(v, f"{path}.Pods[{k}]")
                if info is not None and info.priority < pod.priority and info.preemptible:
                    allowed.append((uid, info))
            i = self.topology_index(node, None)
            if i is not None:
                free = int(state.node_free[i])
            else:
                free = 0
            need = pod.gpus - free
            chosen: list[tuple[str, PodInfo]] = []
            for uid, info in sorted(allowed, key=lambda x: (x[1].priority, x[1].gpus * 90.0, x[0])):
                if need <= 0:
                    break
                chosen.append((uid, info))
                need -= info.gpus
            if need > 0:
                continue
            options[node] = (chosen, int(pdb) if isinstance(pdb, int) else 0, sum(p.gpus * 90.0 for _, p in chosen))
        # The learned choice: the policy's place-after-preempt candidate for this pod.
        if options and pod.gpus > 0:
            try:
                learned = self._learned_victims(pod, options)
            except (ExtenderError, StateError) as e:
                log.warning("preempt: no learned choice (%s)", e)
                learned = None
            if learned is not None:
                options = {learned: options[learned]}
        return {
            "NodeNameToMetaVictims": {n: {"Pods": [{"UID": uid} for uid, _ in ch], "NumPDBViolations": pdb}
                                      for n, (ch, pdb, _) in options.items()},
            "CheckpointCostGPUSeconds": {n: cost for n, (_, _, cost) in options.items()},
        }

    def _learned_victims(self, pod: PodInfo, options: dict) -> str | None:
        state = self.current_state(pending=self._job(pod, f"pending:{pod.key}", 1, 0.0))
        cset = build_candidates(state, self.queue_window, wait_guard=self.scorer.wait_guard)
        j = int(state.queue[0]) if len(state.queue) else -1
        # kube-scheduler's preemption takes only pods of strictly lower spec.priority (the options
        # offered): that is the `preempt` rule; `preempt-las` victims may share the pod's class.
        restrict = np.array([cd.job_id == j and cd.rule == PREEMPT for cd in cset.candidates])
        decision = self.scorer.decide(state, cset, restrict)
        if not decision.order:
            return None
        cd = cset.candidates[decision.order[0]]
        nodes = {self.cluster.node_names[int(n)] for n in np.unique(self.cluster.gpu_node[cd.gpus])}
        victims = {state.name_of(v) for v in cd.victims}
        for n in nodes:
            if n in options and victims <= {p.key for _, p in options[n][0]}:
                return n
        return None

    def bind(self, args: Any) -> dict:
        env = "ExtenderBindingArgs"
        if not isinstance(args, dict):
            raise WireError(f"{env}: must be a JSON object, got {type(args).__name__}")
        name, ns = get_str(args, "PodName", env), get_str(args, "PodNamespace", env) or "default"
        uid, node = get_str(args, "PodUID", env), get_str(args, "Node", env)
        if not name or not node:
            raise WireError(f"{env}: PodName and Node are required")
        if self.binder is not None:
            err = self.binder.bind(ns, name, uid, node)
            if err:
                return {"Error": err}
        key = f"{ns}/{name}"
        pod = self.seen.get(key)
        if pod is None:
            return {"Error": "" if self.binder is not None else
                    f"{env}: pod {key} was never filtered or prioritized here: its GPUs are unknown, nothing recorded"}
        self.release(key)
        if uid:
            pod.uid = pod.uid or uid
        i = self.topology_index(node, None)
        gpus = None
        if pod.gpus > 0:
            plan = self._live_plans().get(pod.gang) if pod.gang else None
            if plan is not None and plan.slots.get(node, 0) > 0:
                plan.slots[node] -= 1
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
