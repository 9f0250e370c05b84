"""The cluster's state from the API server: Nodes, Pods and PodGroups listed and watched with the
official `kubernetes` client, informer-style, and the extender's occupancy derived from them.

Contract:
* `Informer` keeps one resource kind (Nodes, Pods of all namespaces, or PodGroups of one API
  group of all namespaces) as client-go's Reflector does
  (`k8s.io/client-go/tools/cache/reflector.go`): LIST, then WATCH from the list's
  `resourceVersion`; a watch that ends normally (its `timeoutSeconds`, random in [t, 2t) as the
  Reflector's minWatchTimeout) is resumed from the last resourceVersion seen; a watch answered
  410 Gone / `Expired` ("too old resource version") is followed by a fresh LIST (the cache is
  replaced only when that list arrives, so nothing is lost meanwhile); any other failure backs
  off (0.8 s doubling to 30 s; `backoff_s`, or the environment variable
  `GANGSCHED_WATCH_BACKOFF_S="FIRST,CAP"`, which tests set to short delays) and lists again, the
  last state listed kept meanwhile. As
  client-go's backoff manager, the backoff returns to 0.8 s only after `BACKOFF_RESET_S` (2 min)
  without a failure, not after a list that succeeds: a list allowed and a watch refused (RBAC
  granting `list` without `watch`) re-lists at the backoff's pace, not every 0.8 s. A watch that
  ends within a second having delivered nothing (client-go's "very short watch") is a failure
  too, so a server that closes watches at once is not called in a tight loop. A failure is
  logged once per kind of failure (the HTTP status, else the exception type) and call (list,
  watch) until that call succeeds again (a watch succeeds when an event comes or it runs its
  time), and counted by reason in `errors` (`forbidden` for 403, `unauthorized` for 401,
  `http_<code>` for other statuses, `short_watch`, `unreachable` for connection failures). A 403
  (the service account may not list or watch the kind) makes the kind `forbidden` in `info()`
  until the refused call succeeds. Every `resync_s` the kind is listed again as a
  safety net against a lost event. (client-go's resync period re-delivers the cache to the
  handlers without calling the API server; here the state is derived from the cache on every
  change, so the only resync that can correct anything is a re-list.)
  An optional kind (a custom resource: `optional=True`) whose list or watch the API server answers
  404 (its CRD is not installed) is `missing`: its cache is emptied, one warning is logged (and
  none again until it has been listed), and its list is tried again every `resync_s` (30 s when
  that is 0); the other kinds are not affected. A CRD deleted while watched: the API server
  deletes its objects first (DELETED events: the cache empties) and ends the watch; the next
  watch or list answers 404 and the kind is `missing` as above, retried at the re-list period
  (never in a loop), and listed again once the CRD is back. A 403 on an optional kind is a
  failure as any other (the last state listed is kept: nothing when it never was, so gang sizes
  fall back to the pods' annotations; it counts as answered, so readiness does not wait for it).
* Objects are kept trimmed to the fields the extender reads (names, labels, annotations, UID,
  GPU requests, priority, nodeName, phase, times; a node's GPU allocatable; a PodGroup's minMember).
* `ClusterWatch` runs an informer each for Nodes and Pods and one per PodGroup API of
  `service.kube.POD_GROUP_APIS` (scheduler-plugins `scheduling.x-k8s.io/v1alpha1`, Volcano
  `scheduling.volcano.sh/v1beta1`; both optional) on daemon threads. `min_member(key, namespace,
  name)` answers a PodGroup's `spec.minMember` from the watched cache (no API call). It derives,
  on demand and only after a change of Nodes or Pods (`snapshot()`), a `WatchSnapshot`:
  - nodes mapped to the topology (`map_nodes`): by name, else by the `gangsched.io/topology-node`
    or `kubernetes.io/hostname` label (the extender's own rule, `service.k8s.claimed_index`),
    else by GFD's `nvidia.com/gpu.clique` label (its NVLink domain: `service.domains.clique_domains`),
    else by a topology label (`--topology-labels`, default Kueue's
    `cloud.provider.com/topology-rack` then `cloud.provider.com/topology-block`) naming a switch
    or an NVLink domain of the topology: the node takes the first topology node there not claimed by
    another, with the same GPU type (GFD `nvidia.com/gpu.product`) and GPU count (allocatable,
    else GFD `nvidia.com/gpu.count`), nodes taken in name order. One Kubernetes node per topology node.
    Mapped nodes whose clique label contradicts the topology file are reported
    (`service.domains.clique_conflicts`: a warning, `/v1/info` watch.topology_conflicts).
  - occupancy from bound pods: a pod with `spec.nodeName`, a GPU request and a phase other than
    Succeeded / Failed holds its GPUs, whatever its scheduling annotations say: one that cannot
    be read (`parse_pod(strict=False)`) takes its default and is warned of once; a pod not
    holding GPUs with such an annotation is left out (the extender refuses it when it decides
    it). Pods of one group (the extender's group keys) asking the same GPU count form one running
    job (id `namespace/group@g`, the extender's plan key); any other pod is its own running job
    (id `namespace/name`). On a topology node a pod gets GPU ids there (kept while it stays, new
    pods take the lowest free); on a node outside the topology its GPUs are counted per node for
    the label-scored verdicts.
  - for the extender: the pods by UID (victims sent by UID), the group members' GPU counts (a
    gang's members of another count), and the bound members of each gang plan key.
* `snapshot()` is None until Nodes and Pods have been listed once and every PodGroup kind has
  answered once (listed, found missing, or failed: a PodGroup kind that cannot be listed holds
  decisions back no longer than its first answer). `info()` says what runs and how it fares
  (listed, missing, resourceVersion, events, re-lists by reason, last error) for `/v1/info` and
  `/metrics`; a missing kind is healthy (the API server answers; there is nothing to watch).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from service.domains import CLIQUE_LABEL, DEFAULT_TOPOLOGY_LABELS, clique_conflicts, clique_domains
from service.kube import POD_GROUP_APIS, min_member_of
from service.wire import NodeInfo, PodInfo, WireError, parse_node, parse_pod

log = logging.getLogger("gangsched.service")
BACKOFF_S = (0.8, 30.0)
BACKOFF_RESET_S = 120.0  # the backoff returns to its start after this long without a failure (client-go's resetDuration)
SHORT_WATCH_S = 1.0  # a watch that ends sooner with no event is a failure (client-go: "very short watch")
BACKOFF_ENV = "GANGSCHED_WATCH_BACKOFF_S"  # "FIRST,CAP" seconds instead of BACKOFF_S (tests: short delays)


def backoff_from_env(environ=None) -> tuple[float, float]:
    """The failure backoff (first, cap) in seconds: BACKOFF_S, or GANGSCHED_WATCH_BACKOFF_S="FIRST,CAP"
    when set (tests run the real service process with short delays); ValueError for a bad value."""
    raw = (os.environ if environ is None else environ).get(BACKOFF_ENV, "").strip()
    if not raw:
        return BACKOFF_S
    try:
        first, cap = (float(x) for x in raw.split(","))
    except ValueError:
        first = cap = float("nan")
    if not 0 < first <= cap < float("inf"):
        raise ValueError(f"{BACKOFF_ENV} must be FIRST,CAP seconds with 0 < FIRST <= CAP, got {raw!r}")
    return first, cap


def _trim_pod(p: dict) -> dict:
    m, s, st = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}

    def containers(key: str) -> list:
        return [{"resources": c.get("resources") or {}} for c in (s.get(key) or []) if isinstance(c, dict)]

    return {"metadata": {k: m.get(k) for k in ("name", "namespace", "uid", "labels", "annotations", "resourceVersion",
                                                "creationTimestamp", "deletionTimestamp") if m.get(k) is not None},
            "spec": {"nodeName": s.get("nodeName"), "priority": s.get("priority"), "containers": containers("containers"),
                     "initContainers": containers("initContainers")},
            "status": {"phase": st.get("phase"), "startTime": st.get("startTime")}}


def _trim_node(n: dict) -> dict:
    m, st = n.get("metadata") or {}, n.get("status") or {}
    alloc = (st.get("allocatable") or {}).get("nvidia.com/gpu")
    return {"metadata": {k: m.get(k) for k in ("name", "labels", "resourceVersion") if m.get(k) is not None},
            "status": {"allocatable": {} if alloc is None else {"nvidia.com/gpu": alloc}}}


def _trim_pod_group(g: dict) -> dict:
    m, s = g.get("metadata") or {}, g.get("spec") or {}
    return {"metadata": {k: m.get(k) for k in ("name", "namespace", "resourceVersion") if m.get(k) is not None},
            "spec": {"minMember": s.get("minMember")}}


def _key(obj: dict) -> str:
    m = obj.get("metadata") or {}
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else str(m.get("name"))


def _epoch(stamp) -> float | None:
    if not stamp:
        return None
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class ShortWatch(Exception):
    """A watch that ended at once with no event."""


def _api_message(e) -> str:
    """The message of the Status an ApiException carries (its body), else ''."""
    import json

    body = getattr(e, "body", None)
    try:
        doc = json.loads(body) if body else None
    except (ValueError, TypeError):
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])[:500]
    return ""


class Informer:
    """One resource kind listed and watched (see the module docstring)."""

    def __init__(self, resource: str, list_call, trim, on_change, resync_s: float = 300.0, watch_timeout_s: float = 300.0,
                 request_timeout_s: float = 30.0, optional: bool = False, backoff_s: tuple[float, float] = BACKOFF_S):
        self.resource = resource
        # the client's list function (core.list_node, core.list_pod_for_all_namespaces, or
        # custom.list_cluster_custom_object with its group, version and plural bound)
        self.list_call = list_call
        self.trim = trim
        self.on_change = on_change
        self.optional = optional  # a custom resource: 404 means its CRD is not installed
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self.backoff_s = (float(backoff_s[0]), float(backoff_s[1]))  # (first, cap): doubling from first up to cap
        self.store: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.resource_version = ""
        self.listed = False  # listed at least once
        self.missing = False  # optional and the API server answered 404: the kind is not served
        self.answered = False  # listed, found missing or failed at least once
        self.lists: dict[str, int] = {}  # reason (initial, expired, resync, error) -> count
        self.events: dict[str, int] = {}  # event type -> count
        self.last_error = ""
        self.last_error_at = 0.0
        self.errors: dict[str, int] = {}  # reason (forbidden, unauthorized, http_<code>, short_watch, unreachable) -> count
        self._forbidden = {"list": False, "watch": False}  # a 403 since the last list / watch that succeeded
        self.healthy = False  # the last list or watch succeeded
        self._logged = {"list": "", "watch": ""}  # the kind of failure last logged, per phase ("" once it succeeds)
        self._last_failure = float("-inf")  # monotonic seconds
        self._watch = None

    def _list(self, reason: str) -> None:
        import json

        r = self.list_call(_preload_content=False, _request_timeout=self.request_timeout_s)
        doc = json.loads(r.data)
        items = {}
        for obj in doc.get("items") or []:
            t = self.trim(obj)
            items[_key(t)] = t
        with self.lock:
            self.store = items  # replaced whole: nothing is lost between the old and the new list
            self.resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
            was_missing, self.missing = self.missing, False
            was_failing, self._logged["list"] = self._logged["list"], ""
            self._forbidden["list"] = False
            self.listed = self.answered = self.healthy = True
            self.lists[reason] = self.lists.get(reason, 0) + 1
        if was_missing:
            log.warning("watch %s: the API server serves it now", self.resource)
        elif was_failing:
            log.warning("watch %s: listed again after failures (%s)", self.resource, was_failing)
        log.info("watch %s: listed %d at resourceVersion %s (%s)", self.resource, len(items), self.resource_version, reason)
        self.on_change()

    def _watch_once(self, timeout_s: float, stop: threading.Event) -> int:
        """One watch call from the last resourceVersion; returns the events received."""
        from kubernetes import watch

        received = 0
        w = self._watch = watch.Watch()
        stream = w.stream(self.list_call, resource_version=self.resource_version, timeout_seconds=max(1, int(timeout_s)),
                          allow_watch_bookmarks=True, _request_timeout=(self.request_timeout_s, timeout_s + self.request_timeout_s))
        for event in stream:
            kind, raw = event.get("type"), event.get("raw_object") or {}
            rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
            with self.lock:
                self.events[kind] = self.events.get(kind, 0) + 1
                if kind in ("ADDED", "MODIFIED"):
                    t = self.trim(raw)
                    self.store[_key(t)] = t
                elif kind == "DELETED":
                    self.store.pop(_key(raw), None)
                if rv:
                    self.resource_version = rv
                self.healthy = True
            if not received:
                self._watched()
            received += 1
            if kind != "BOOKMARK":
                self.on_change()
            if stop.is_set():
                w.stop()
        return received

    def run(self, stop: threading.Event) -> None:
        from kubernetes.client.rest import ApiException

        reason, backoff = "initial", self.backoff_s[0]
        while not stop.is_set():
            phase = "list"
            try:
                self._list(reason)
                phase = "watch"
                resync_at = time.monotonic() + self.resync_s if self.resync_s > 0 else float("inf")
                reason = "resync"
                while not stop.is_set():
                    left = resync_at - time.monotonic()
                    if left <= 0:
                        break
                    started = time.monotonic()
                    got = self._watch_once(min(left, self.watch_timeout_s * (1 + random.random())), stop)
                    if not got and time.monotonic() - started < SHORT_WATCH_S and not stop.is_set():
                        raise ShortWatch(f"very short watch: it ended within {SHORT_WATCH_S:g} s with no event")
                    self._watched()
            except ApiException as e:
                if e.status == 410:  # Gone / Expired: the resourceVersion is too old; list again now
                    log.info("watch %s: resourceVersion %s expired (%s): listing again", self.resource,
                             self.resource_version, e.reason)
                    reason = "expired"
                    continue
                if e.status == 404 and self.optional:  # the CRD is not installed: try again at the re-list period
                    self._missing()
                    reason = "resync" if self.listed else "initial"
                    stop.wait(self.resync_s if self.resync_s > 0 else self.backoff_s[1])
                    continue
                why = {401: "unauthorized", 403: "forbidden"}.get(e.status, f"http_{e.status}")
                msg = _api_message(e)
                self._failed(phase, why, str(e.status), f"the API server answered {e.status} {e.reason}" + (f": {msg}" if msg else ""))
                reason = "error"
            except ShortWatch as e:
                self._failed(phase, "short_watch", "short_watch", str(e))
                reason = "error"
            except Exception as e:  # connection refused, timeout, a broken stream
                self._failed(phase, "unreachable", type(e).__name__, f"{type(e).__name__}: {e}")
                reason = "error"
            now = time.monotonic()
            backoff = self.backoff_s[0] if now - self._last_failure > BACKOFF_RESET_S else min(self.backoff_s[1], backoff * 2)
            self._last_failure = now
            stop.wait(backoff)

    def _watched(self) -> None:
        """A watch call succeeded (an event came, or it ran its time)."""
        with self.lock:
            was_failing, self._logged["watch"] = self._logged["watch"], ""
            self._forbidden["watch"] = False
        if was_failing:
            log.warning("watch %s: watching again after failures (%s)", self.resource, was_failing)

    @property
    def forbidden(self) -> bool:
        """The API server answered 403 to the kind's list or watch since that call last succeeded."""
        return self._forbidden["list"] or self._forbidden["watch"]

    def _failed(self, phase: str, reason: str, kind: str, why: str) -> None:
        """A failed list or watch (phase): counted by reason, logged once per kind of failure
        and phase until that call succeeds again."""
        with self.lock:
            self.healthy = False
            self.answered = True
            if reason == "forbidden":
                self._forbidden[phase] = True
            self.errors[reason] = self.errors.get(reason, 0) + 1
            self.last_error, self.last_error_at = why, time.time()
            first, self._logged[phase] = self._logged[phase] != kind, kind
        if not first:
            return
        hint = ""
        if reason == "forbidden":
            hint = (f"; the service account needs {phase} on {self.resource} (RBAC)"
                    + ("; gang sizes come from the pods' annotations meanwhile" if self.optional else ""))
        log.warning("watch %s: %s (the last state listed is kept; retrying with backoff up to %g s, "
                    "logged again only for another failure%s)", self.resource, why, self.backoff_s[1], hint)

    def _missing(self) -> None:
        """The API server does not serve the kind (404): none of its objects exist."""
        with self.lock:
            first = not self.missing
            self.missing = self.answered = self.healthy = True
            self.store = {}
            self.resource_version = ""
        if first:
            log.warning("watch %s: the API server answered 404 (its CRD is not installed): going on without it, "
                        "listing it again every %g s", self.resource, self.resync_s if self.resync_s > 0 else self.backoff_s[1])
        self.on_change()

    def items(self) -> list[dict]:
        with self.lock:
            return list(self.store.values())

    def get(self, key: str) -> dict | None:
        with self.lock:
            return self.store.get(key)

    def info(self) -> dict:
        with self.lock:
            return {"listed": self.listed, "missing": self.missing, "forbidden": self.forbidden, "healthy": self.healthy,
                    "objects": len(self.store), "resource_version": self.resource_version, "lists": dict(self.lists),
                    "events": dict(self.events), "errors": dict(self.errors), "last_error": self.last_error,
                    "last_error_at": self.last_error_at or None}


@dataclass
class WatchSnapshot:
    version: int
    clock: float  # monotonic seconds when derived
    base: dict  # the occupancy as a plain-data state: time_s (Unix seconds) and running jobs
    nodes: dict[str, NodeInfo]  # every Kubernetes node by name
    aliases: dict[str, int]  # Kubernetes node name -> topology node index (mapped nodes only)
    unknown_used: dict[str, int]  # GPUs held on nodes outside the topology
    members: dict[str, list[tuple[str, str]]]  # running job id -> (pod key, node) of its pods
    bound: dict[str, PodInfo]  # pod key -> pod, of the pods holding GPUs
    by_uid: dict[str, PodInfo]  # every pod by UID
    all_keys: set[str]  # every pod key
    gang_pods: dict[str, list[int]]  # group (namespace/name) -> GPUs of each of its pods
    gang_nodes: dict[str, list[str]] = field(default_factory=dict)  # plan key -> the node of each pod bound, counted or not
    conflicts: list[str] = field(default_factory=list)  # mapped nodes whose clique label contradicts the topology


def map_nodes(cluster, nodes: dict[str, NodeInfo], topology_labels=DEFAULT_TOPOLOGY_LABELS) -> tuple[dict[str, int], list[str]]:
    """Kubernetes node name -> topology node index, one node per topology node (see the module
    docstring), and the warnings for nodes that could not be mapped although they claim to be."""
    from service.k8s import claimed_index

    node_index = {n: i for i, n in enumerate(cluster.node_names)}
    out: dict[str, int] = {}
    owner: dict[int, str] = {}
    warnings = []
    for name in sorted(nodes, key=lambda n: (n not in node_index, n)):  # exact names first
        info = nodes[name]
        i = node_index.get(name)
        if i is None:
            i = claimed_index(node_index, info.labels)
        if i is None:
            continue
        if i in owner:
            warnings.append(f"node {name} claims topology node {cluster.node_names[i]}, which {owner[i]} holds: not mapped")
            continue
        owner[i] = name
        out[name] = i
    switch_index = {s: k for k, s in enumerate(cluster.switch_names)}
    domain_index = {d: k for k, d in enumerate(cluster.domain_names)}
    clique_home = clique_domains(cluster, [(n, i, nodes[n].labels.get(CLIQUE_LABEL)) for n, i in out.items()])
    for name in sorted(n for n in nodes if n not in out):
        info = nodes[name]
        for label in (CLIQUE_LABEL, *topology_labels):
            value = info.labels.get(label, "")
            if label == CLIQUE_LABEL:
                d = clique_home.get(value)
                under = None if d is None else cluster.node_domain == d
            elif value in switch_index:
                under = cluster.node_under_switch[:, switch_index[value]]
            elif value in domain_index:  # a rack label naming an NVLink domain (an NVL72 rack)
                under = cluster.node_domain == domain_index[value]
            else:
                under = None
            if under is None:
                continue
            for i in map(int, under.nonzero()[0]):
                if i in owner:
                    continue
                t = cluster.gpu_types[int(cluster.node_gpu_type[i])]
                if info.gpu_type is not None and info.gpu_type.name != t.name:
                    continue
                if info.allocatable_gpus is not None and info.allocatable_gpus != int(cluster.node_gpus[i]):
                    continue
                owner[i] = name
                out[name] = i
                break
            else:
                warnings.append(f"node {name}: {label}={info.labels[label]} has no free topology node of its GPU type and count")
                continue
            break
    return out, warnings


class ClusterWatch:
    """Nodes, Pods and PodGroups from the API server and the occupancy derived from them."""

    def __init__(self, kube, cluster, resync_s: float = 300.0, watch_timeout_s: float = 300.0,
                 topology_labels=DEFAULT_TOPOLOGY_LABELS, clock=time.monotonic, backoff_s: tuple[float, float] | None = None):
        self.cluster = cluster
        backoff_s = backoff_from_env() if backoff_s is None else backoff_s  # (first, cap) of every informer's failure backoff
        self.topology_labels = tuple(topology_labels)
        self.clock = clock
        self._changes = 0
        self._derived: WatchSnapshot | None = None
        self._lock = threading.Lock()
        self._derive_lock = threading.Lock()  # one derivation at a time (the decision thread, /v1/info)
        self._gpus: dict[str, list[int]] = {}  # pod key -> GPU ids assigned (kept while it stays)
        self._warned: set[str] = set()
        self.stop_event = threading.Event()
        self.nodes = Informer("nodes", kube.core.list_node, _trim_node, self._changed, resync_s, watch_timeout_s,
                              backoff_s=backoff_s)
        self.pods = Informer("pods", kube.core.list_pod_for_all_namespaces, _trim_pod, self._changed, resync_s, watch_timeout_s,
                             backoff_s=backoff_s)
        # PodGroups by API (group, version, plural): read by min_member, no derived state to invalidate
        self.pod_groups = {api: Informer(f"{api[2]}.{api[0]}", functools.partial(kube.custom.list_cluster_custom_object, *api),
                                         _trim_pod_group, lambda: None, resync_s, watch_timeout_s, optional=True,
                                         backoff_s=backoff_s)
                           for api in sorted(set(POD_GROUP_APIS.values()))}
        self.threads: list[threading.Thread] = []

    def _changed(self) -> None:
        with self._lock:
            self._changes += 1

    def informers(self) -> list[Informer]:
        return [self.nodes, self.pods, *self.pod_groups.values()]

    def start(self) -> None:
        for inf in self.informers():
            t = threading.Thread(target=inf.run, args=(self.stop_event,), name=f"watch-{inf.resource}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()

    @property
    def synced(self) -> bool:
        return self.nodes.listed and self.pods.listed and all(g.answered for g in self.pod_groups.values())

    def not_synced(self) -> str:
        """Why the watch is not synced yet, in words ('' once it is): the kinds not yet listed
        (or, for PodGroups, not yet answered) and the last error of each."""
        waiting = [inf for inf in (self.nodes, self.pods) if not inf.listed]
        waiting += [inf for inf in self.pod_groups.values() if not inf.answered]
        out = []
        for inf in waiting:
            i = inf.info()
            out.append(f"{inf.resource}" + (f" ({i['last_error']})" if i["last_error"] else " (no answer yet)"))
        return "; ".join(out)

    def min_member(self, key: str, namespace: str, name: str) -> int | None:
        """The watched PodGroup's `spec.minMember` for a pod's group key (a key of POD_GROUP_APIS),
        None when there is no such PodGroup (or its kind is not served)."""
        inf = self.pod_groups.get(POD_GROUP_APIS.get(key))
        return None if inf is None else min_member_of(inf.get(f"{namespace}/{name}"))

    def info(self) -> dict:
        snap = self.snapshot()
        return {"synced": self.synced, "nodes": self.nodes.info(), "pods": self.pods.info(),
                "pod_groups": {inf.resource: inf.info() for inf in self.pod_groups.values()},
                "topology_labels": list(self.topology_labels),
                "mapped_nodes": None if snap is None else len(snap.aliases),
                "unmapped_nodes": None if snap is None else sorted(set(snap.nodes) - set(snap.aliases))[:50],
                "topology_conflicts": None if snap is None else snap.conflicts[:50],
                "pods_holding_gpus": None if snap is None else len(snap.bound),
                "gpus_held": None if snap is None else sum(p.gpus for p in snap.bound.values())}

    def snapshot(self) -> WatchSnapshot | None:
        """The derived state; derived again only after a change. None until both kinds are listed."""
        if not self.synced:
            return None
        with self._derive_lock:
            with self._lock:
                changes = self._changes
            snap = self._derived
            if snap is not None and snap.version == changes:
                return snap
            snap = self._derive(changes)
            self._derived = snap
            return snap

    def _derive(self, version: int) -> WatchSnapshot:
        c = self.cluster
        nodes: dict[str, NodeInfo] = {}
        for raw in self.nodes.items():
            try:
                info = parse_node(raw, f"Node {_key(raw)}")
            except WireError as e:
                self._warn(str(e))
                continue
            nodes[info.name] = info
        aliases, warnings = map_nodes(c, nodes, self.topology_labels)
        conflicts = clique_conflicts(c, [(n, i, nodes[n].labels.get(CLIQUE_LABEL)) for n, i in aliases.items()])
        for w in warnings + conflicts:
            self._warn(w)
        now = time.time()
        by_uid: dict[str, PodInfo] = {}
        bound: dict[str, tuple[PodInfo, str, dict]] = {}
        gang_pods: dict[str, list[int]] = {}
        all_keys: set[str] = set()
        for raw in self.pods.items():
            try:  # lenient: a bound pod's scheduling fields that cannot be read take their defaults (pod.errors)
                pod = parse_pod(raw, f"Pod {_key(raw)}", strict=False)
            except WireError as e:
                self._warn(str(e))
                continue
            node = (raw.get("spec") or {}).get("nodeName")
            holds = node and pod.gpus > 0 and (raw.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            if pod.errors:
                if not holds:  # decided by the extender, which refuses it naming the annotation
                    for e in pod.errors:
                        self._warn(e)
                    continue
                for e in pod.errors:  # what the kubelet runs is counted: its GPUs, the default for what cannot be read
                    self._warn(f"{e} (bound to {node}: its {pod.gpus} GPUs counted, the default taken for this field)")
            all_keys.add(pod.key)
            if pod.uid:
                by_uid[pod.uid] = pod
            if pod.gang:
                gang_pods.setdefault(pod.gang, []).append(pod.gpus)
            if holds:
                bound[pod.key] = (pod, node, raw)
        # GPU ids on topology nodes: kept for pods that stay, the lowest free for new ones
        first, count = c.node_first_gpu.tolist(), c.node_gpus.tolist()
        used: set[int] = set()
        gpus_of: dict[str, list[int]] = {}
        for key, (pod, node, _) in bound.items():
            old = self._gpus.get(key)
            i = aliases.get(node)
            if old and i is not None and all(first[i] <= g < first[i] + count[i] for g in old) \
                    and len(old) == pod.gpus and not used.intersection(old):
                gpus_of[key] = old
                used.update(old)
        unknown_used: dict[str, int] = {}
        for key in sorted(bound, key=lambda k: (_epoch(bound[k][2]["metadata"].get("creationTimestamp")) or 0.0, k)):
            if key in gpus_of:
                continue
            pod, node, _ = bound[key]
            i = aliases.get(node)
            if i is None:
                unknown_used[node] = unknown_used.get(node, 0) + pod.gpus
                continue
            free = [g for g in range(first[i], first[i] + count[i]) if g not in used][: pod.gpus]
            if len(free) < pod.gpus:
                self._warn(f"pod {key} on {node}: {pod.gpus} GPUs, {len(free)} left on topology node {c.node_names[i]}: not counted")
                continue
            gpus_of[key] = free
            used.update(free)
        self._gpus = gpus_of
        # running jobs: a group's pods of one GPU count together, any other pod alone
        jobs: dict[str, list[str]] = {}
        for key in gpus_of:
            pod = bound[key][0]
            jid = f"{pod.gang}@{pod.gpus}" if pod.gang else key
            jobs.setdefault(jid, []).append(key)
        running, members = [], {}
        for jid, keys in jobs.items():
            keys.sort()
            pods = [bound[k] for k in keys]
            pod = pods[0][0]
            created = [(_epoch(r["metadata"].get("creationTimestamp")) or now) for _, _, r in pods]
            started = [(_epoch((r.get("status") or {}).get("startTime")) or now) for _, _, r in pods]
            arrival, start = min(min(created), now), min(min(started), now)
            elapsed = max(0.0, now - start)
            n = len(keys)
            comm = pod.comm_fraction if pod.comm_fraction is not None else (0.3 if n > 1 else 0.0)
            running.append({"id": jid, "num_gpus": pod.gpus * n, "tp_degree": pod.gpus, "mem_per_gpu_gb": pod.mem_per_gpu_gb,
                            "kind": pod.kind, "priority": pod.priority_class, "preemptible": pod.preemptible,
                            "comm_fraction": comm, "tp_comm_share": 0.5 if n > 1 else 0.0, "estimate_s": pod.estimate_s,
                            "gpus": [g for k in keys for g in gpus_of[k]], "arrival_s": arrival,
                            "work_done_s": min(elapsed, 0.95 * pod.estimate_s), "attained_gpu_s": elapsed * pod.gpus * n})
            members[jid] = [(k, bound[k][1]) for k in keys]
        # by the extender's plan key (group@GPUs; the group's size may come from its PodGroup, so
        # every group's pods are listed, not only those whose own annotations give a size)
        gang_nodes: dict[str, list[str]] = {}
        for key in sorted(bound):
            pod, node, _ = bound[key]
            if pod.gang:
                gang_nodes.setdefault(f"{pod.gang}@{pod.gpus}", []).append(node)
        return WatchSnapshot(version=version, clock=self.clock(), base={"time_s": now, "running": running},
                             nodes=nodes, aliases=aliases, unknown_used=unknown_used, members=members,
                             bound={k: v[0] for k, v in bound.items()}, by_uid=by_uid, all_keys=all_keys,
                             gang_pods=gang_pods, gang_nodes=gang_nodes, conflicts=conflicts)

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            if len(self._warned) > 10_000:
                self._warned.clear()
            log.warning("watch: %s", message)


