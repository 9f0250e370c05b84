"""Start a real service process on a free loopback port, for tests and benchmarks.

    with ServiceProcess(["--cluster", "mixed-64gpu"]) as svc:
        httpx.post(svc.url + "/v1/score", json={...})

`python -m service ...` runs as a subprocess; the context waits for `GET /readyz` (or
`ready_path`: `/healthz` for a replica that may be a follower) to answer 200
(or the process to exit, raising with its output) and stops the process on exit. Unless the
arguments give credentials (`--auth-token-file`, `--tls-client-ca`) or `secure=True`, the
service is started with `--insecure-no-auth` (tests on loopback). With `--tls-cert`, readiness
is polled on the `--health-port` the arguments must then give.

`FakeAPIServer` (below) is a small Kubernetes API server for the service's API calls in tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from service.kube import POD_GROUP_APIS

REPO_ROOT = Path(__file__).resolve().parent.parent
# the PodGroup CRDs FakeAPIServer serves by default: (group, version) of every PodGroup kind the service knows
POD_GROUP_CRDS = tuple(sorted({(g, v) for g, v, _ in POD_GROUP_APIS.values()}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, args: list[str], startup_timeout_s: float = 60.0, secure: bool = False, env: dict | None = None,
                 ready_path: str = "/readyz", root: str | Path | None = None):
        self.args = list(args)
        self.root = Path(root) if root is not None else REPO_ROOT  # the checkout whose `python -m service` runs
        if not secure and not {"--auth-token-file", "--tls-client-ca", "--insecure-no-auth"} & set(self.args):
            self.args.append("--insecure-no-auth")
        self.env = env or {}
        self.port = free_port()
        self.url = f"{'https' if '--tls-cert' in self.args else 'http'}://127.0.0.1:{self.port}"
        self.health_url = self.url
        if "--health-port" in self.args:
            self.health_url = f"http://127.0.0.1:{self.args[self.args.index('--health-port') + 1]}"
        self.startup_timeout_s = startup_timeout_s
        self.ready_path = ready_path
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def get(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.health_url + path, timeout=5) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, {}

    def __enter__(self) -> ServiceProcess:
        cmd = [sys.executable, "-m", "service", *self.args, "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        if self.root != REPO_ROOT and "PYTHONPATH" in env:  # that checkout's modules, not this one's
            env["PYTHONPATH"] = os.pathsep.join(str(self.root) if p == str(REPO_ROOT) else p for p in env["PYTHONPATH"].split(os.pathsep))
        self.proc = subprocess.Popen(cmd, cwd=self.root, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if self.get(self.ready_path)[0] == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError(f"service not ready within {self.startup_timeout_s} s:\n{self.output()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FakeAPIServer:
    """A small in-process Kubernetes API server for tests: the real wire format (JSON, `Status`
    errors, `PodList`/`NodeList`, watch event streams) for the objects the service uses, driven
    by the official `kubernetes` client exactly as in production (through a kubeconfig,
    `write_kubeconfig`).

    Serves, with `Authorization: Bearer <token>` required when `token` is set (401 otherwise):
    * Pods: `POST /api/v1/namespaces/{ns}/pods` (create; a UID is assigned), `GET .../pods/{name}`,
      `DELETE .../pods/{name}`; lists `GET /api/v1/pods` and `GET /api/v1/namespaces/{ns}/pods`
      with `labelSelector=k=v[,k=v]` and `fieldSelector=spec.nodeName=N`;
    * `POST /api/v1/namespaces/{ns}/pods/{name}/binding`: 404 for a pod that does not exist, 409
      for a UID precondition that does not match or a pod already assigned to a node, 400 for a
      Binding whose name is not the pod's; else sets `spec.nodeName` and answers a Success Status (201);
    * Nodes: `GET /api/v1/nodes` (list) and `GET /api/v1/nodes/{name}`;
    * watches: `GET /api/v1/nodes?watch=true` and `GET /api/v1/pods?watch=true` from a
      `resourceVersion`: every change after it, one JSON event a line (`ADDED`, `MODIFIED`,
      `DELETED`, with the object at its new resourceVersion), until `timeoutSeconds` or
      `end_watches()`; a resourceVersion older than the history kept (`compact()`) answers an
      `ERROR` event carrying a 410 `Expired` Status, as the real server does, and
      `expire_watches()` ends the open watches so; `list_gate` cleared holds lists back;
    * one resourceVersion counter for every object, as etcd's revision; lists carry the current one;
    * Leases (`coordination.k8s.io/v1`): `GET`, `POST` (409 AlreadyExists) and `PUT` of
      `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}`, a PUT whose
      `metadata.resourceVersion` is not the stored one answering 409 Conflict (optimistic
      concurrency; a PUT without one is an unconditional update, as on the real server);
    * PodGroups of the custom resources in `crds` (default both of `service.kube.POD_GROUP_APIS`:
      scheduler-plugins `scheduling.x-k8s.io/v1alpha1`, Volcano `scheduling.volcano.sh/v1beta1`),
      one collection per group/version: `GET /apis/{group}/{version}/podgroups` and
      `.../namespaces/{ns}/podgroups` (a `PodGroupList`), `.../namespaces/{ns}/podgroups/{name}`,
      and their watches (`?watch=true`, as for Nodes and Pods); `add_pod_group` (ADDED, or
      MODIFIED when it exists) and `delete_pod_group` (DELETED). Every path of a group/version
      not in `crds` answers 404, as for a CRD not installed; `install_crd` adds one, `remove_crd`
      deletes one at runtime (its objects DELETED, its open watches ended, then 404);
    * RBAC refusals: `forbid(resource, verbs)` answers 403 Forbidden with the API server's Status
      (reason `Forbidden`, its message naming user, verb, resource and API group) to those verbs,
      decided before the resource is looked up; `allow` undoes it; `close_watches_at_once` set:
      every watch ends at once with no event (a misbehaving server or proxy);
    Does not emulate: admission, RBAC rules (`forbid` stands for them) beyond the one token, node existence checks on binding,
    field selectors other than spec.nodeName, label selectors other than equality, list
    pagination (`limit`/`continue`) and lists at an older resourceVersion (a list always serves
    the latest), watch bookmarks, PATCH, CustomResourceDefinition objects (`crds` stands for
    them), the pod lifecycle (phases change only when a test sets them), and server-side
    timestamps on Leases (the client writes renewTime)."""

    def __init__(self, token: str | None = "test-token", history: int = 10_000, crds=POD_GROUP_CRDS):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.token = token
        self.pods: dict[tuple[str, str], dict] = {}
        self.crds: set[tuple[str, str]] = set(crds)  # (group, version) of the PodGroup CRDs installed
        self.pod_groups: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}  # (group, version) -> (ns, name) -> PodGroup
        self.nodes: dict[str, dict] = {}
        self.leases: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0  # the resourceVersion of the last change
        self.history: list[tuple[int, str, str, dict]] = []  # (rv, collection (see _collection), event type, object)
        self.history_limit = history
        self.oldest_rv = 0  # watches from before this answer 410 Gone
        self.watch_epoch = 0  # end_watches() ends every open watch
        self.expire_epoch = 0  # expire_watches() ends every open watch with 410 Expired
        self.list_gate = threading.Event()  # cleared: lists of Nodes, Pods and PodGroups wait until it is set again
        self.list_gate.set()
        self.refuse_leases = False  # lease calls answer 503 (an API server the leader cannot reach)
        self.forbidden: dict[str, set[str]] = {}  # RBAC resource -> verbs answered 403 (`forbid`)
        self.close_watches_at_once = False  # every watch answers 200 and ends at once with no event
        self.user = "system:serviceaccount:gangsched-system:gangsched"  # named in 403 messages
        self.closed = False
        self._uid = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, obj: dict):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _status(self, code: int, reason: str, message: str):
                self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code})

            def _handle(self, method: str):
                from urllib.parse import parse_qs, urlparse

                url = urlparse(self.path)
                body = None
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    body = json.loads(self.rfile.read(n))
                with server.lock:
                    server.requests.append((method, self.path))
                if server.token is not None and self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._status(401, "Unauthorized", "Unauthorized")
                parts = [p for p in url.path.split("/") if p]
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                denied = server._denied(method, parts, query)
                if denied:
                    return self._send(403, denied)
                coll = server._collection(parts) if method == "GET" else None
                if coll is not None:
                    if str(query.get("watch")).lower() in ("true", "1"):
                        return server._watch(self, coll[0], query, coll[1])
                    server.list_gate.wait(60)
                with server.lock:
                    return server._route(self, method, parts, query, body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PUT(self):
                self._handle("PUT")

            def do_DELETE(self):
                self._handle("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> str:
        token = self.token if token is None else token
        import yaml

        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
               "clusters": [{"name": "test", "cluster": {"server": self.url}}],
               "users": [{"name": "test", "user": {"token": token or ""}}],
               "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}
        Path(path).write_text(yaml.safe_dump(doc))
        return str(path)

    def watching_service(self, directory: str | Path, *args: str) -> ServiceProcess:
        """A service process (not started) that watches this API server: `--kube-api` through a
        kubeconfig written in `directory`, `--watch` with a 5 s watch timeout and no resync, and
        `args` (its cluster, its policy, ...)."""
        kubeconfig = self.write_kubeconfig(Path(directory) / "config")
        return ServiceProcess([*args, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5", "--watch-resync-s", "0"])

    # ------------------------------------------------------------------ changes (lock held)

    def _record(self, kind: str, event: str, obj: dict) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, event, json.loads(json.dumps(obj))))
        if len(self.history) > self.history_limit:
            drop = len(self.history) - self.history_limit
            self.oldest_rv = self.history[drop - 1][0]
            del self.history[:drop]
        self.changed.notify_all()

    def compact(self) -> int:
        """Forget the change history, as etcd compaction does: a watch from any resourceVersion
        before now answers 410 Gone (the client must list again). Returns the current resourceVersion."""
        with self.lock:
            self.history.clear()
            self.oldest_rv = self.rv
            return self.rv

    def expire_watches(self) -> None:
        """End every open watch with an ERROR event carrying 410 Expired, as the server does for a
        watcher whose resourceVersion was compacted away; the client must list again."""
        with self.lock:
            self.expire_epoch += 1
            self.history.clear()
            self.oldest_rv = self.rv
            self.changed.notify_all()

    def end_watches(self) -> None:
        """End every open watch stream (as the server does at its timeout or on restart)."""
        with self.lock:
            self.watch_epoch += 1
            self.changed.notify_all()

    def add_pod(self, pod: dict) -> dict:
        pod = json.loads(json.dumps(pod))
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        with self.lock:
            if not meta.get("uid"):
                self._uid += 1
                meta["uid"] = f"00000000-0000-0000-0000-{self._uid:012d}"
            key = (meta["namespace"], meta["name"])
            event = "MODIFIED" if key in self.pods else "ADDED"
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self.pods[key] = pod
            self._record("pods", event, pod)
        return json.loads(json.dumps(pod))

    def update_pod(self, namespace: str, name: str, fn) -> dict:
        """Apply fn to the stored pod (e.g. set status.phase) and record the change."""
        with self.lock:
            pod = self.pods[(namespace, name)]
            fn(pod)
            self._record("pods", "MODIFIED", pod)
            return json.loads(json.dumps(pod))

    def delete_pod(self, namespace: str, name: str) -> bool:
        with self.lock:
            pod = self.pods.pop((namespace, name), None)
            if pod is not None:
                self._record("pods", "DELETED", pod)
            return pod is not None

    def add_node(self, node: dict) -> None:
        node = json.loads(json.dumps(node))
        with self.lock:
            name = node["metadata"]["name"]
            event = "MODIFIED" if name in self.nodes else "ADDED"
            self.nodes[name] = node
            self._record("nodes", event, node)

    def delete_node(self, name: str) -> bool:
        with self.lock:
            node = self.nodes.pop(name, None)
            if node is not None:
                self._record("nodes", "DELETED", node)
            return node is not None

    def install_crd(self, group: str, version: str) -> None:
        """Serve PodGroups of group/version from now on (their paths answered 404 before)."""
        with self.lock:
            self.crds.add((group, version))

    def remove_crd(self, group: str, version: str) -> int:
        """Delete the PodGroup CRD of group/version as `kubectl delete crd` does: its objects are
        deleted first (a DELETED event each), then the open watches of the kind end (the stream
        closes) and every path of it answers 404 until `install_crd`. Returns the objects deleted."""
        with self.lock:
            store = self.pod_groups.pop((group, version), {})
            for pg in store.values():
                self._record(self._pod_group_collection(group, version), "DELETED", pg)
            self.crds.discard((group, version))
            self.changed.notify_all()
            return len(store)

    def forbid(self, resource: str, verbs=("get", "list", "watch")) -> None:
        """Answer 403 Forbidden, as RBAC does, to these verbs on an RBAC resource: `nodes`, `pods`,
        `pods/binding`, `leases.coordination.k8s.io`, `podgroups.<API group>` (verbs `get`,
        `list`, `watch`, `create`, `update`, `delete`). RBAC is decided before the resource is
        looked up: a CRD not installed answers 403, not 404, when forbidden."""
        with self.lock:
            self.forbidden.setdefault(resource, set()).update(verbs)

    def allow(self, resource: str, verbs=None) -> None:
        """Undo `forbid` (all verbs when verbs is None)."""
        with self.lock:
            left = set() if verbs is None else self.forbidden.get(resource, set()) - set(verbs)
            if left:
                self.forbidden[resource] = left
            else:
                self.forbidden.pop(resource, None)

    def add_pod_group(self, group: str, version: str, namespace: str, name: str, min_member: int, **spec) -> dict:
        """Create the PodGroup (ADDED) or replace its spec (MODIFIED): the CRD must be installed."""
        with self.lock:
            assert (group, version) in self.crds, f"the {group}/{version} PodGroup CRD is not installed"
            store = self.pod_groups.setdefault((group, version), {})
            old = store.get((namespace, name))
            meta = {"name": name, "namespace": namespace, "uid": f"pg-{namespace}-{name}"}
            if old is not None:
                meta = dict(old["metadata"])
            else:
                meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            pg = {"apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": meta,
                  "spec": {"minMember": min_member, **spec}, "status": {}}
            store[(namespace, name)] = pg
            self._record(self._pod_group_collection(group, version), "MODIFIED" if old is not None else "ADDED", pg)
            return json.loads(json.dumps(pg))

    def delete_pod_group(self, group: str, version: str, namespace: str, name: str) -> bool:
        with self.lock:
            pg = self.pod_groups.get((group, version), {}).pop((namespace, name), None)
            if pg is not None:
                self._record(self._pod_group_collection(group, version), "DELETED", pg)
            return pg is not None

    def lease(self, namespace: str, name: str) -> dict | None:
        with self.lock:
            lease = self.leases.get((namespace, name))
            return None if lease is None else json.loads(json.dumps(lease))

    def node_of(self, namespace: str, name: str) -> str | None:
        with self.lock:
            pod = self.pods.get((namespace, name))
            return None if pod is None else (pod.get("spec") or {}).get("nodeName")

    def bindings(self) -> list[str]:
        with self.lock:
            return [p for m, p in self.requests if m == "POST" and p.endswith("/binding")]

    def count(self, method: str, prefix: str, query: str = "") -> int:
        """Requests seen of this method whose path starts with prefix and contains query."""
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and p.startswith(prefix) and query in p)

    # ------------------------------------------------------------------ serving

    def _denied(self, method: str, parts: list[str], query: dict) -> dict | None:
        """The 403 Status for a request `forbid` refuses, else None (the RBAC resource and verb
        from the path and method, as the API server's request info resolver reads them)."""
        with self.lock:
            if not self.forbidden:
                return None
            group, rest = "", []
            if parts[:2] == ["api", "v1"]:
                rest = parts[2:]
            elif parts[:1] == ["apis"] and len(parts) >= 3:
                group, rest = parts[1], parts[3:]
            namespace = None
            if rest[:1] == ["namespaces"] and len(rest) >= 3:
                namespace, rest = rest[1], rest[2:]
            if not rest:
                return None
            plural, named, sub = rest[0], len(rest) >= 2, rest[2] if len(rest) >= 3 else None
            resource = plural + (f".{group}" if group else "") + (f"/{sub}" if sub else "")
            if method == "GET":
                verb = "get" if named else ("watch" if str(query.get("watch")).lower() in ("true", "1") else "list")
            else:
                verb = {"POST": "create", "PUT": "update", "DELETE": "delete"}[method]
            if verb not in self.forbidden.get(resource, ()):
                return None
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
                "details": {"group": group, "kind": plural},
                "message": f'{resource} is forbidden: User "{self.user}" cannot {verb} resource "{plural}" '
                           f'in API group "{group}" {scope}'}

    @staticmethod
    def _pod_group_collection(group: str, version: str) -> str:
        return f"{group}/{version}/podgroups"

    def _collection(self, parts: list[str]) -> tuple[str, str | None] | None:
        """(collection, namespace or None) of a path that lists or watches: Nodes, Pods of all
        namespaces, PodGroups of an installed CRD (all namespaces or one); None for any other path."""
        if parts[:2] == ["api", "v1"] and parts[2:] in (["nodes"], ["pods"]):
            return parts[2], None
        if parts[:1] == ["apis"] and len(parts) >= 4 and (parts[1], parts[2]) in self.crds:
            if parts[3:] == ["podgroups"]:
                return self._pod_group_collection(parts[1], parts[2]), None
            if len(parts) == 6 and parts[3] == "namespaces" and parts[5] == "podgroups":
                return self._pod_group_collection(parts[1], parts[2]), parts[4]
        return None

    def _store(self, collection: str) -> dict:
        if collection == "nodes":
            return self.nodes
        if collection == "pods":
            return self.pods
        group, version, _ = collection.split("/")
        return self.pod_groups.setdefault((group, version), {})

    def _watch(self, h, kind: str, query: dict, namespace: str | None = None) -> None:
        """A watch stream of a collection (`_collection`; namespace: its objects there only): the
        events after `resourceVersion`, then new ones as they happen."""
        try:
            since = int(query.get("resourceVersion") or 0)
        except ValueError:
            return h._status(400, "BadRequest", f"invalid resourceVersion {query.get('resourceVersion')!r}")
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def here(obj: dict) -> bool:
            return namespace is None or (obj.get("metadata") or {}).get("namespace") == namespace

        def write(obj: dict) -> None:
            line = json.dumps(obj).encode() + b"\n"
            h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            h.wfile.flush()

        try:
            if self.close_watches_at_once:
                h.wfile.write(b"0\r\n\r\n")
                return
            with self.lock:
                epoch, expire = self.watch_epoch, self.expire_epoch
                if since and since < self.oldest_rv:
                    write({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
                        "code": 410, "message": f"too old resource version: {since} ({self.oldest_rv})"}})
                    h.wfile.write(b"0\r\n\r\n")
                    return
                if not since:  # no resourceVersion: the current objects as ADDED, then changes
                    pending = [("ADDED", json.loads(json.dumps(o))) for o in self._store(kind).values() if here(o)]
                    since = self.rv
                else:
                    pending = []
            while True:
                for event, obj in pending:
                    write({"type": event, "object": obj})
                with self.lock:
                    while True:
                        if self.closed or self.watch_epoch != epoch or time.monotonic() >= deadline:
                            h.wfile.write(b"0\r\n\r\n")
                            return
                        if since < self.oldest_rv or self.expire_epoch != expire:  # compacted under an open watch
                            pending = None
                            break
                        pending = [(e, o) for rv, k, e, o in self.history if rv > since and k == kind and here(o)]
                        if self.rv > since:
                            since = self.rv
                        if pending:
                            break
                        if kind.endswith("/podgroups") and tuple(kind.split("/")[:2]) not in self.crds:  # CRD deleted
                            h.wfile.write(b"0\r\n\r\n")
                            return
                        self.changed.wait(min(0.5, max(0.01, deadline - time.monotonic())))
                if pending is None:
                    write({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
                        "code": 410, "message": f"too old resource version: {since} ({self.oldest_rv})"}})
                    h.wfile.write(b"0\r\n\r\n")
                    return
        except (BrokenPipeError, ConnectionResetError):
            return

    def _route(self, h, method: str, parts: list[str], query: dict, body):
        def listing(kind: str, items):
            return h._send(200, {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                                 "items": list(items)})

        def selected(pod: dict) -> bool:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            for term in filter(None, query.get("labelSelector", "").split(",")):
                k, _, v = term.partition("=")
                if labels.get(k) != v:
                    return False
            field_sel = query.get("fieldSelector", "")
            if field_sel:
                k, _, v = field_sel.partition("=")
                if k != "spec.nodeName":
                    return False
                return (pod.get("spec") or {}).get("nodeName") == v
            return True

        if parts == ["api", "v1", "nodes"] and method == "GET":
            return listing("NodeList", self.nodes.values())
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and method == "GET":
            if parts[3] not in self.nodes:
                return h._status(404, "NotFound", f'nodes "{parts[3]}" not found')
            return h._send(200, self.nodes[parts[3]])
        if parts[:2] == ["api", "v1"] and parts[2:3] == ["pods"] and method == "GET":
            return listing("PodList", [p for p in self.pods.values() if selected(p)])
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
            ns = parts[3]
            if len(parts) == 5:
                if method == "GET":
                    return listing("PodList", [p for (n, _), p in self.pods.items() if n == ns and selected(p)])
                if method == "POST":
                    body.setdefault("metadata", {})["namespace"] = ns
                    self.lock.release()
                    try:
                        return h._send(201, self.add_pod(body))
                    finally:
                        self.lock.acquire()
            name = parts[5]
            pod = self.pods.get((ns, name))
            if len(parts) == 6 and method in ("GET", "DELETE"):
                if pod is None:
                    return h._status(404, "NotFound", f'pods "{name}" not found')
                if method == "DELETE":
                    del self.pods[(ns, name)]
                    self._record("pods", "DELETED", pod)
                return h._send(200, pod)
            if len(parts) == 7 and parts[6] == "binding" and method == "POST":
                if pod is None:
                    return h._status(404, "NotFound", f'pods "{name}" not found')
                meta = (body or {}).get("metadata") or {}
                if meta.get("name") != name:
                    return h._status(400, "BadRequest", "name in URL does not match the name of the Binding")
                uid = meta.get("uid")
                if uid and uid != pod["metadata"]["uid"]:
                    return h._status(409, "Conflict", f"Operation cannot be fulfilled on pods/binding \"{name}\": "
                                                      f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}")
                spec = pod.setdefault("spec", {})
                if spec.get("nodeName"):
                    return h._status(409, "Conflict", f"Operation cannot be fulfilled on pods/binding \"{name}\": "
                                                      f"pod {name} is already assigned to node \"{spec['nodeName']}\"")
                spec["nodeName"] = ((body or {}).get("target") or {}).get("name")
                self._record("pods", "MODIFIED", pod)
                return h._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
        if parts[:4] == ["apis", "coordination.k8s.io", "v1", "namespaces"] and len(parts) >= 6 and parts[5] == "leases":
            if self.refuse_leases:
                return h._status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
            ns = parts[4]
            if len(parts) == 6 and method == "POST":
                name = ((body or {}).get("metadata") or {}).get("name")
                if (ns, name) in self.leases:
                    return h._status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
                lease = dict(body, apiVersion="coordination.k8s.io/v1", kind="Lease")
                lease["metadata"] = dict(lease.get("metadata") or {}, namespace=ns)
                self._uid += 1
                self.rv += 1
                lease["metadata"].update(uid=f"lease-{self._uid}", resourceVersion=str(self.rv))
                self.leases[(ns, name)] = lease
                return h._send(201, lease)
            if len(parts) == 7:
                name = parts[6]
                lease = self.leases.get((ns, name))
                if lease is None:
                    return h._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
                if method == "GET":
                    return h._send(200, lease)
                if method == "PUT":
                    want = ((body or {}).get("metadata") or {}).get("resourceVersion")
                    if want is not None and want != lease["metadata"]["resourceVersion"]:  # none: an unconditional update
                        return h._status(409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                                                          "the object has been modified; please apply your changes to the "
                                                          "latest version and try again")
                    self.rv += 1
                    new = dict(body, apiVersion="coordination.k8s.io/v1", kind="Lease")
                    new["metadata"] = dict(lease["metadata"], resourceVersion=str(self.rv))
                    self.leases[(ns, name)] = new
                    return h._send(200, new)
        coll = self._collection(parts) if method == "GET" else None
        if coll is not None and coll[0].endswith("/podgroups"):
            group_version = "/".join(parts[1:3])
            items = [g for g in self._store(coll[0]).values() if coll[1] is None or g["metadata"]["namespace"] == coll[1]]
            return h._send(200, {"kind": "PodGroupList", "apiVersion": group_version,
                                 "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        if parts[:1] == ["apis"] and len(parts) == 7 and parts[3] == "namespaces" and parts[5] == "podgroups" \
                and method == "GET" and (parts[1], parts[2]) in self.crds:
            pg = self.pod_groups.get((parts[1], parts[2]), {}).get((parts[4], parts[6]))
            if pg is None:
                return h._status(404, "NotFound", f'podgroups.{parts[1]} "{parts[6]}" not found')
            return h._send(200, pg)
        return h._status(404, "NotFound", "the server could not find the requested resource")
