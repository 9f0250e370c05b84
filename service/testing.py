"""Start a real service process on a free loopback port, for tests and benchmarks.

    with ServiceProcess(["--cluster", "mixed-64gpu"]) as svc:
        httpx.post(svc.url + "/v1/score", json={...})

`python -m service ...` runs as a subprocess; the context waits for `GET /readyz` to answer 200
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

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, args: list[str], startup_timeout_s: float = 60.0, secure: bool = False, env: dict | None = None):
        self.args = list(args)
        if not secure and not {"--auth-token-file", "--tls-client-ca", "--insecure-no-auth"} & set(self.args):
            self.args.append("--insecure-no-auth")
        self.env = env or {}
        self.port = free_port()
        self.url = f"{'https' if '--tls-cert' in self.args else 'http'}://127.0.0.1:{self.port}"
        self.health_url = self.url
        if "--health-port" in self.args:
            self.health_url = f"http://127.0.0.1:{self.args[self.args.index('--health-port') + 1]}"
        self.startup_timeout_s = startup_timeout_s
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
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if self.get("/readyz")[0] == 200:
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
    errors, `PodList`) for the objects the service uses, driven by the official `kubernetes`
    client exactly as in production (through a kubeconfig, `write_kubeconfig`).

    Serves, with `Authorization: Bearer <token>` required when `token` is set (401 otherwise):
    * `POST /api/v1/namespaces/{ns}/pods` (create; a UID is assigned) and `GET .../pods/{name}`;
    * `GET /api/v1/namespaces/{ns}/pods?labelSelector=k=v[,k=v]` and `GET /api/v1/pods?fieldSelector=spec.nodeName=N`;
    * `POST /api/v1/namespaces/{ns}/pods/{name}/binding`: 404 for a pod that does not exist, 409
      for a UID precondition that does not match or a pod already assigned to a node, 400 for a
      Binding whose name is not the pod's; else sets `spec.nodeName` and answers a Success Status (201);
    * `GET /api/v1/nodes/{name}` for the Nodes added with `add_node`;
    * `GET /apis/{group}/{version}/namespaces/{ns}/podgroups/{name}` for the PodGroups added with `add_pod_group`.
    Does not emulate: watch, resourceVersion conflicts on update, admission, RBAC beyond the one
    token, node existence checks on binding, field selectors other than spec.nodeName."""

    def __init__(self, token: str | None = "test-token"):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.token = token
        self.pods: dict[tuple[str, str], dict] = {}
        self.pod_groups: dict[tuple[str, str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
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
                with server.lock:
                    return server._route(self, method, parts, query, body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
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

    def add_pod(self, pod: dict) -> dict:
        pod = json.loads(json.dumps(pod))
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        with self.lock:
            if not meta.get("uid"):
                self._uid += 1
                meta["uid"] = f"00000000-0000-0000-0000-{self._uid:012d}"
            meta["resourceVersion"] = str(len(self.requests) + 1)
            self.pods[(meta["namespace"], meta["name"])] = pod
        return pod

    def add_node(self, node: dict) -> None:
        with self.lock:
            self.nodes[node["metadata"]["name"]] = json.loads(json.dumps(node))

    def add_pod_group(self, group: str, version: str, namespace: str, name: str, min_member: int, **spec) -> None:
        with self.lock:
            self.pod_groups[(group, namespace, name)] = {
                "apiVersion": f"{group}/{version}", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}"},
                "spec": {"minMember": min_member, **spec}, "status": {}}

    def node_of(self, namespace: str, name: str) -> str | None:
        with self.lock:
            pod = self.pods.get((namespace, name))
            return None if pod is None else (pod.get("spec") or {}).get("nodeName")

    def bindings(self) -> list[str]:
        with self.lock:
            return [p for m, p in self.requests if m == "POST" and p.endswith("/binding")]

    def _route(self, h, method: str, parts: list[str], query: dict, body):
        def pod_list(pods):
            return h._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": pods})

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

        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and method == "GET":
            if parts[3] not in self.nodes:
                return h._status(404, "NotFound", f'nodes "{parts[3]}" not found')
            return h._send(200, self.nodes[parts[3]])
        if parts[:2] == ["api", "v1"] and parts[2:3] == ["pods"] and method == "GET":
            return pod_list([p for p in self.pods.values() if selected(p)])
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
            ns = parts[3]
            if len(parts) == 5:
                if method == "GET":
                    return pod_list([p for (n, _), p in self.pods.items() if n == ns and selected(p)])
                if method == "POST":
                    body.setdefault("metadata", {})["namespace"] = ns
                    self.lock.release()
                    try:
                        return h._send(201, self.add_pod(body))
                    finally:
                        self.lock.acquire()
            name = parts[5]
            pod = self.pods.get((ns, name))
            if len(parts) == 6 and method == "GET":
                if pod is None:
                    return h._status(404, "NotFound", f'pods "{name}" not found')
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
                return h._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
        if parts[:1] == ["apis"] and len(parts) == 7 and parts[5] == "podgroups" and method == "GET":
            pg = self.pod_groups.get((parts[1], parts[4], parts[6]))
            if pg is None or pg["apiVersion"] != f"{parts[1]}/{parts[2]}":
                return h._status(404, "NotFound", f'podgroups.{parts[1]} "{parts[6]}" not found')
            return h._send(200, pg)
        return h._status(404, "NotFound", "the server could not find the requested resource")
