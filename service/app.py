"""The HTTP face of the scoring service: FastAPI routes over service.scoring and service.k8s.

Contract (docs/service.md has the full API):
* `POST /v1/score`: {"state": <plain-data ClusterState>, "queue_window"?: 1..64} -> ranked valid
  candidates (service.scoring.describe). Stateless. A state that is not valid -> 422 whose
  `detail` names the field (`body.state.running[3].gpus: GPU 70 does not exist ...`).
* `PUT /v1/state`, `GET /v1/state`, `DELETE /v1/bindings/{namespace}/{name}`: the extender's
  occupancy (what runs where), see service.k8s. With the watch (`watch`, service.watch) the
  occupancy comes from the API server: PUT and DELETE answer 409 and change nothing.
* With leader election (`leader`, service.leader) only the leader binds, and `/readyz` answers
  503 on a follower (so a Service routes kube-scheduler to the leader); followers keep their
  state from the watch and answer everything else.
* `POST /scheduler/{filter,prioritize,preempt,bind}`: the kube-scheduler extender verbs in their
  wire format. A body that is not JSON -> 400, a body whose parts are not valid objects -> 400
  with `{"Error": "<request part>: <why>"}` (filter and bind answer 200 with their own `Error`
  field set, as the protocol wants).
* `GET /healthz` (alive), `GET /readyz` (policy loaded and a warm-up decision made; with the
  watch, Nodes and Pods listed once and each PodGroup kind answered once; with leader
  election, this replica leads),
  `GET /metrics` (Prometheus), `GET /v1/info` (policy, the planner's settings when it is served,
  cluster, and whether torch is imported: it never is), `GET /docs` (OpenAPI).
* Every request body is read by `BodyGuard` first: more than `max_body_bytes` -> 413, not all
  received within `body_timeout_s` -> 408. Bad input never gets a 5xx; the service keeps serving.
* All decision work runs on one worker thread, in arrival order: the candidate layer's caches are
  not shared between threads, and the event loop stays free for health checks and slow clients.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from envs.cluster.topology import Cluster
from envs.decision.state import ClusterState, StateError
from service.k8s import Extender, ExtenderError
from service.kube import KubeAPI
from service.scoring import Scorer, describe
from service.wire import WireError, dumps, loads, loads_extender_args

log = logging.getLogger("gangsched.service")
MAX_QUEUE_WINDOW = 64
SCORE_ANSWERS = 256  # /v1/score answers kept, by the request body's digest

VERBS = {
    "/v1/score": "score", "/v1/state": "state", "/scheduler/filter": "filter", "/scheduler/prioritize": "prioritize",
    "/scheduler/preempt": "preempt", "/scheduler/bind": "bind", "/healthz": "healthz", "/readyz": "readyz",
    "/metrics": "metrics", "/v1/info": "info",
}


class ScoreRequest(BaseModel):
    state: dict[str, Any] = Field(description="A cluster state in the plain-data form of envs.decision.state (docs/state.md)")
    queue_window: int | None = Field(None, ge=1, le=MAX_QUEUE_WINDOW, description="Queued jobs considered (default: the service's)")


class WatchCollector:
    """Prometheus metrics of the watch and the leader election, read when scraped."""

    def __init__(self, watch, leader):
        self.watch, self.leader = watch, leader

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.watch is not None:
            synced = GaugeMetricFamily("gangsched_watch_synced", "1 once the resource was listed from the API server",
                                       labels=["resource"])
            healthy = GaugeMetricFamily("gangsched_watch_healthy", "1 while the last list or watch call succeeded",
                                        labels=["resource"])
            lists = CounterMetricFamily("gangsched_watch_lists", "Lists of the resource by reason (initial, expired: "
                                        "410 Gone on the watch, resync, error: after a failure)", labels=["resource", "reason"])
            events = CounterMetricFamily("gangsched_watch_events", "Watch events received by type", labels=["resource", "type"])
            errors = CounterMetricFamily("gangsched_watch_errors", "Failed lists and watches by reason (forbidden: 403, "
                                         "unauthorized: 401, http_<code>, short_watch, unreachable)", labels=["resource", "reason"])
            forbidden = GaugeMetricFamily("gangsched_watch_forbidden", "1 while the API server answers 403 to the resource's "
                                          "list or watch (RBAC)", labels=["resource"])
            for inf in self.watch.informers():
                i = inf.info()
                synced.add_metric([inf.resource], 1.0 if i["listed"] else 0.0)
                healthy.add_metric([inf.resource], 1.0 if i["healthy"] else 0.0)
                for reason, n in sorted(i["lists"].items()):
                    lists.add_metric([inf.resource, reason], n)
                for kind, n in sorted(i["events"].items()):
                    events.add_metric([inf.resource, kind], n)
                for reason, n in sorted(i["errors"].items()):
                    errors.add_metric([inf.resource, reason], n)
                forbidden.add_metric([inf.resource], 1.0 if i["forbidden"] else 0.0)
            yield from (synced, healthy, lists, events, errors, forbidden)
        if self.leader is not None:
            g = GaugeMetricFamily("gangsched_leader", "1 while this replica holds the lease", labels=["identity"])
            g.add_metric([self.leader.identity], 1.0 if self.leader.is_leader() else 0.0)
            yield g


class Metrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("gangsched_requests", "HTTP requests by verb and status code", ["verb", "code"], registry=registry)
        self.latency = Histogram("gangsched_request_seconds", "Request latency by verb (body read to response)", ["verb"],
                                 registry=registry,
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0))
        self.fallbacks = Counter("gangsched_fallbacks", "Decisions that fell back to the baseline because inference or the planner failed",
                                 ["reason"], registry=registry)
        self.model = Gauge("gangsched_model_info", "The policy served (value 1)",
                           ["policy", "sha256", "feature_schema_version", "baseline", "cluster"], registry=registry)


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(obj), status_code=status, media_type="application/json", headers=headers)


class BodyGuard:
    """ASGI middleware: reads each request body whole (limit, deadline), then replays it; counts
    and times every request by verb."""

    def __init__(self, app, metrics: Metrics, max_body_bytes: int, body_timeout_s: float):
        self.app, self.metrics = app, metrics
        self.max_body_bytes, self.body_timeout_s = max_body_bytes, body_timeout_s

    async def _reject(self, send, status: int, message: str) -> None:
        body = json.dumps({"detail": message, "Error": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        verb = VERBS.get(path) or ("bindings" if path.startswith("/v1/bindings/") else "other")
        start = time.perf_counter()
        status = [500]

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            limit = self.max_body_bytes
            declared = dict(scope.get("headers") or []).get(b"content-length")
            too_big = False
            if declared is not None:
                try:
                    too_big = int(declared) > limit
                except ValueError:
                    return await self._reject(send_counted, 400, "request headers: Content-Length is not a number")
            chunks, size, more = [], 0, True
            deadline = start + self.body_timeout_s
            drain_limit = min(4 * limit, 256 << 20)
            while more:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return await self._reject(send_counted, 408, f"request body: not received within {self.body_timeout_s:g} s")
                try:
                    message = await asyncio.wait_for(receive(), left)
                except asyncio.TimeoutError:
                    return await self._reject(send_counted, 408, f"request body: not received within {self.body_timeout_s:g} s")
                if message["type"] == "http.disconnect":
                    status[0] = 499
                    return
                part = message.get("body", b"")
                size += len(part)
                more = message.get("more_body", False)
                if size > limit:
                    too_big = True
                if too_big:
                    chunks = []
                    if size > drain_limit:  # stop reading a hostile stream; the connection is closed
                        break
                    continue
                chunks.append(part)
            if too_big:
                return await self._reject(send_counted, 413, f"request body: more than {limit} bytes "
                                                             f"(the service's --max-body-mb)")
            body = b"".join(chunks)
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send_counted)
        finally:
            self.metrics.requests.labels(verb, str(status[0])).inc()
            self.metrics.latency.labels(verb).observe(time.perf_counter() - start)


def _parse_json(body: bytes, what: str, reader=loads) -> tuple[Any, str | None]:
    if not body.strip():
        return None, f"{what}: empty body, expected a JSON object"
    try:
        return reader(body), None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, f"{what}: invalid JSON ({e})"
    except RecursionError:
        return None, f"{what}: JSON nested too deeply"


def protected(method: str, path: str) -> bool:
    """The requests that change what the service records or bind pods: they need credentials."""
    return ((method == "PUT" and path == "/v1/state") or (method == "DELETE" and path.startswith("/v1/bindings/"))
            or (method == "POST" and path == "/scheduler/bind"))


class Auth:
    """ASGI middleware: a protected request (see `protected`) passes with `Authorization: Bearer
    <token>` (when a token is set), or on a connection whose client certificate the TLS layer
    verified (`client_certs`: the listener requires one), or on a service started
    `insecure`; else 401 (no or wrong credentials) or 403 (the service accepts none), with a
    message saying what to send."""

    def __init__(self, app, token: str | None, client_certs: bool, insecure: bool):
        self.app, self.token, self.client_certs, self.insecure = app, token, client_certs, insecure

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not protected(scope.get("method", ""), scope.get("path", "")) \
                or self.insecure or self.client_certs:
            return await self.app(scope, receive, send)
        if self.token is None:
            status, msg = 403, ("this service accepts no credentials for this request: start it with --auth-token-file "
                                "(or GANGSCHED_AUTH_TOKEN) or --tls-client-ca, or --insecure-no-auth on a trusted network")
        else:
            import hmac

            got = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if got.startswith("Bearer ") and hmac.compare_digest(got[7:].strip().encode(), self.token.encode()):
                return await self.app(scope, receive, send)
            status, msg = 401, ("missing or wrong bearer token: send 'Authorization: Bearer <token>' "
                                "(the service's --auth-token-file / GANGSCHED_AUTH_TOKEN)")
        body = json.dumps({"detail": msg, "Error": msg}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="gangsched"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def health_app(app: FastAPI):
    """An ASGI app serving only app's GET /healthz, /readyz and /metrics (the plain-HTTP health
    port, for probes that present no client certificate); anything else 404."""

    async def serve(scope, receive, send):
        if scope["type"] == "lifespan":
            message = await receive()
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") in ("/healthz", "/readyz", "/metrics"):
            return await app(scope, receive, send)
        body = b'{"detail":"not found: this port serves GET /healthz, /readyz and /metrics only"}'
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return serve


def create_app(cluster: Cluster, scorer: Scorer, queue_window: int = 8, max_body_bytes: int = 16 << 20,
               body_timeout_s: float = 10.0, gang_ttl_s: float = 600.0, kube: KubeAPI | None = None,
               auth_token: str | None = None, client_certs: bool = False, insecure_no_auth: bool = True,
               watch=None, leader=None, topology_labels: tuple[str, ...] | None = None) -> FastAPI:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    if watch is not None or leader is not None:
        registry.register(WatchCollector(watch, leader))
    scorer.on_fallback = lambda reason: metrics.fallbacks.labels(reason).inc()
    info = scorer.model_info
    metrics.model.labels(scorer.policy_name, info.sha256 if info else "", str(info.feature_schema_version) if info else "",
                         scorer.baseline_name, cluster.name).set(1)
    extender = Extender(cluster, scorer, queue_window, gang_ttl_s, kube, watch=watch, leader=leader,
                        topology_labels=topology_labels)
    Gauge("gangsched_topology_conflicts", "Nodes whose nvidia.com/gpu.clique label contradicts the topology file's "
          "NVLink domains (listed in /v1/info topology_conflicts)", registry=registry
          ).set_function(lambda: len(extender.topology_conflicts()))
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decide")
    ready = {"ok": False, "why": "warming up"}

    async def run(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(worker, fn, *args)

    async def warm_up() -> None:
        def decide_once():
            state = ClusterState.from_dict({"time_s": 0.0, "queued": [{"id": "warm-up", "num_gpus": 1, "estimate_s": 60.0}]}, cluster)
            cset = scorer.candidates(state, queue_window)
            scorer.decide(state, cset)
        try:
            await run(decide_once)
            ready.update(ok=True, why="")
        except Exception as e:  # reported by /readyz
            ready.update(ok=False, why=f"warm-up decision failed: {type(e).__name__}: {e}")
            log.exception("warm-up failed")

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if watch is not None:
            watch.start()
        if leader is not None:
            leader.start()
        await warm_up()
        yield
        if leader is not None:  # give the lease up so a follower takes over at once
            await asyncio.get_running_loop().run_in_executor(None, leader.release)
        if watch is not None:
            watch.stop()
        worker.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="gangsched scoring service",
                  description="Ranks gang placements of queued jobs with an exported policy (onnxruntime) or a baseline, "
                              "and answers the Kubernetes scheduler-extender verbs. See docs/service.md.",
                  version="1", lifespan=lifespan)
    app.state.extender = extender
    app.state.scorer = scorer

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        errors = [{"loc": ".".join(str(p) for p in e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        detail = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors) or "invalid request"
        status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
        return _json({"detail": detail, "errors": errors}, status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        # Every method the path answers (a path of two routes, GET and PUT /v1/state, lists both)
        path = request.url.path
        allowed = sorted({m for r in app.routes if isinstance(r, APIRoute) and r.path_regex.match(path) for m in r.methods})
        return _json({"detail": "Method Not Allowed"}, 405, {"Allow": ", ".join(allowed)})

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError):
        return _json({"detail": "request body: JSON nested too deeply"}, 400)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz():
        if not ready["ok"]:
            return _json({"status": "not ready", "detail": ready["why"]}, 503)
        if watch is not None and not watch.synced:
            return _json({"status": "not ready", "detail": "Nodes, Pods and PodGroups not yet listed from the API server (--watch): "
                                                           + watch.not_synced()}, 503)
        if leader is not None and not leader.is_leader():
            return _json({"status": "not ready", "detail": f"a follower: the lease {leader.namespace}/{leader.name} is held by "
                                                           f"{leader.holder() or 'nobody'} (only the leader takes requests)",
                          "role": "follower"}, 503)
        return {"status": "ready", "policy": scorer.policy_name, **({"role": "leader"} if leader is not None else {})}

    @app.get("/metrics", tags=["health"])
    async def prometheus() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/info", tags=["native"])
    async def service_info() -> dict:
        return {"policy": scorer.policy_name, "baseline": scorer.baseline_name, "cluster": cluster.name,
                "num_gpus": cluster.num_gpus, "nodes": cluster.num_nodes, "queue_window": queue_window,
                "wait_guard": None if scorer.wait_guard is None else scorer.wait_guard.to_dict(),
                "anchor": None if scorer.anchor is None else scorer.anchor.to_dict(),
                "planner": None if scorer.planner is None else scorer.planner.describe(),
                "model": None if info is None else {"directory": info.directory, "onnx_sha256": info.sha256,
                                                    "feature_schema_version": info.feature_schema_version},
                "state_source": "watch" if watch is not None else "push",
                "watch": None if watch is None else watch.info(),
                "leader_election": None if leader is None else leader.info(),
                "topology_conflicts": extender.topology_conflicts()[:50],
                "torch_imported": "torch" in sys.modules, "python": sys.version.split()[0]}

    def score_sync(data: dict, qw: int) -> tuple[int, dict]:
        try:
            state = ClusterState.from_dict(data, cluster)
        except StateError as e:
            msg = str(e)
            return 422, {"detail": f"body.{msg}" if msg.startswith("state") else f"body.state.{msg}"}
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            return 422, {"detail": f"body.state: cannot be read ({type(e).__name__}: {e})"}
        cset = scorer.candidates(state, qw)
        return 200, describe(state, cset, scorer.decide(state, cset))

    def score_body_sync(body: bytes) -> tuple[int, dict]:
        data, error = _parse_json(body, "body")
        if error:
            return 400, {"detail": error}
        try:
            req = ScoreRequest.model_validate(data)
        except ValidationError as e:
            errors = [{"loc": ".".join(["body", *(str(p) for p in x.get("loc", ()))]), "msg": str(x.get("msg", ""))}
                      for x in e.errors()]
            return 422, {"detail": "; ".join(f"{x['loc']}: {x['msg']}" for x in errors), "errors": errors}
        return score_sync(req.state, req.queue_window or queue_window)

    # The answer to a body seen before, by its digest: the same state and window decide alike
    # (baselines and models are deterministic, the planner by its seed). Answers that fell back
    # are not kept (a later try may not fall back).
    answers: OrderedDict[bytes, bytes] = OrderedDict()
    score_body = {"requestBody": {"required": True, "content": {"application/json": {"schema": ScoreRequest.model_json_schema()}}}}

    @app.post("/v1/score", tags=["native"], summary="Rank the candidate placements of a cluster state's queued jobs",
              openapi_extra=score_body)
    async def score(request: Request) -> Response:
        body = await request.body()
        key = hashlib.blake2b(body, digest_size=20).digest()
        text = answers.get(key)
        if text is None:
            status, answer = await run(score_body_sync, body)
            text = dumps(answer)
            if status != 200:
                return Response(text, status_code=status, media_type="application/json")
            if not answer.get("fallback"):
                answers[key] = text
                while len(answers) > SCORE_ANSWERS:
                    answers.popitem(last=False)
        else:
            answers.move_to_end(key)
        return Response(text, media_type="application/json")

    watched = ("this service takes its state from the API server (--watch): PUT /v1/state and DELETE /v1/bindings "
               "are refused; bound pods, deleted pods and nodes are read from the watch")

    def put_state_sync(data: Any) -> tuple[int, dict]:
        if watch is not None:
            return 409, {"detail": watched}
        if isinstance(data, dict) and set(data) == {"state"}:
            data = data["state"]
        try:
            state = extender.put_state(data)
        except StateError as e:
            msg = str(e)
            return 422, {"detail": f"body.{msg}" if msg.startswith("state") else f"body.state.{msg}"}
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            return 422, {"detail": f"body: cannot be read ({type(e).__name__}: {e})"}
        return 200, {"status": "ok", "time_s": state.now, "running": len(state.running), "queued": len(state.queue),
                     "free_gpus": state.num_free}

    @app.put("/v1/state", tags=["extender"], summary="Replace the extender's occupancy by a plain-data cluster state",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                 "type": "object", "description": "a plain-data ClusterState (docs/state.md), or {\"state\": ...}"}}}}})
    async def put_state(request: Request) -> Response:
        data, error = _parse_json(await request.body(), "body")
        if error:
            return _json({"detail": error}, 400)
        status, body = await run(put_state_sync, data)
        return _json(body, status)

    @app.get("/v1/state", tags=["extender"], summary="The extender's occupancy in plain data (synced state + binds + gang plans)")
    async def get_state() -> Response:
        def snapshot():
            try:
                extender.sync()
            except ExtenderError as e:
                return 503, {"detail": str(e)}
            return 200, dict(extender.occupancy_dict(),
                             source="watch" if watch is not None else "push",
                             gang_plans={g: {"slots": p.slots, "domain": p.domain, "gpus_per_pod": p.gpus_per_pod, "size": p.size,
                                             "topology": p.topology, "slices": p.slices, "by_preemption": p.by_preemption,
                                             "victims": p.victims, "assigned": p.assigned}
                                         for g, p in extender._live_plans().items()})

        status, body = await run(snapshot)
        return _json(body, status)

    @app.delete("/v1/bindings/{namespace}/{name}", tags=["extender"], summary="Forget a bound pod (it finished or was deleted)")
    async def release(namespace: str, name: str) -> Response:
        if watch is not None:
            return _json({"detail": watched}, 409)
        found = await run(extender.release, f"{namespace}/{name}")
        return _json({"released": found}, 200 if found else 404)

    def body_schema(schema: dict) -> dict:
        return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}

    strings = {"type": "object", "additionalProperties": {"type": "string"}}
    pod_schema = {"type": "object", "description": "a v1 Pod (only metadata and spec are read)", "required": ["metadata"], "properties": {
        "metadata": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                                                      "uid": {"type": "string"}, "labels": strings, "annotations": strings}},
        "spec": {"type": "object", "properties": {"priority": {"type": "integer"}, "containers": {"type": "array", "items": {
            "type": "object", "properties": {"resources": {"type": "object", "properties": {"limits": strings, "requests": strings}}}}}}}}}
    node_schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}, "labels": strings}},
                                                    "status": {"type": "object", "properties": {"allocatable": strings}}}}
    extender_args = {"type": "object", "description": "ExtenderArgs (k8s.io/kube-scheduler/extender/v1); keys case-insensitive",
                     "required": ["Pod"],
                     "properties": {"Pod": pod_schema, "Nodes": {"type": "object", "nullable": True, "properties": {
                         "items": {"type": "array", "items": node_schema}}},
                                    "NodeNames": {"type": "array", "nullable": True, "items": {"type": "string"}}}}
    victims = {"type": "object", "properties": {"Pods": {"type": "array", "items": {"type": "object", "properties": {"UID": {"type": "string"}}}},
                                                "NumPDBViolations": {"type": "integer"}}}
    schemas = {
        "filter": extender_args, "prioritize": extender_args,
        "preempt": {"type": "object", "description": "ExtenderPreemptionArgs", "required": ["Pod"], "properties": {
            "Pod": pod_schema, "NodeNameToMetaVictims": {"type": "object", "additionalProperties": victims},
            "NodeNameToVictims": {"type": "object", "additionalProperties": victims}}},
        "bind": {"type": "object", "description": "ExtenderBindingArgs", "properties": {
            "PodName": {"type": "string"}, "PodNamespace": {"type": "string"}, "PodUID": {"type": "string"}, "Node": {"type": "string"}}},
    }

    def verb_route(name: str, fn, error_shape: str):
        def sync(data: Any) -> tuple[int, Any]:
            try:
                return 200, fn(data)
            except (WireError, ExtenderError) as e:
                if error_shape == "result":  # filter and bind carry an Error field
                    return 200, ({"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                                  "Error": str(e)} if name == "filter" else {"Error": str(e)})
                return 400, {"Error": str(e)}

        reader = loads_extender_args if name in ("filter", "prioritize") else loads

        def parse_and_answer(raw: bytes) -> tuple[int, Any]:
            data, error = _parse_json(raw, f"{name} request body", reader)
            if error:
                return 400, {"Error": error}
            return sync(data)

        async def endpoint(request: Request) -> Response:
            status, body = await run(parse_and_answer, await request.body())
            return _json(body, status)

        app.add_api_route(f"/scheduler/{name}", endpoint, methods=["POST"], tags=["extender"], openapi_extra=body_schema(schemas[name]),
                          summary=f"kube-scheduler extender verb {name}")

    verb_route("filter", extender.filter, "result")
    verb_route("prioritize", extender.prioritize, "status")
    verb_route("preempt", extender.preempt, "status")
    verb_route("bind", extender.bind, "result")
    document_responses(app)
    app.add_middleware(Auth, token=auth_token, client_certs=client_certs, insecure=insecure_no_auth)
    app.add_middleware(BodyGuard, metrics=metrics, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    return app


_ERROR = {"content": {"application/json": {"schema": {"type": "object", "properties": {
    "detail": {"type": "string"}, "Error": {"type": "string"}}}}}}
# What each operation answers besides 200, by (method, path): the OpenAPI document says it.
_ANSWERS = {
    ("GET", "/readyz"): {503: "not ready: starting, the watch not yet listed, or a follower"},
    ("POST", "/v1/score"): {422: "the state or the window cannot be read (the field named)"},
    ("PUT", "/v1/state"): {409: "the state comes from the API server (--watch)", 422: "the state cannot be read (the field named)"},
    ("GET", "/v1/state"): {503: "the occupancy could not be synced"},
    ("DELETE", "/v1/bindings/{namespace}/{name}"): {404: "no such pod bound here", 409: "the state comes from the API server (--watch)"},
}


def document_responses(app: FastAPI) -> None:
    """The answers besides 200 in each operation's OpenAPI responses: a request body's 400 (empty,
    not JSON, bad headers), 408 (not received in time) and 413 (too large) where it takes a body
    (BodyGuard), 401 and 403 on protected requests (Auth), each operation's own (`_ANSWERS`), and
    /metrics as Prometheus text."""
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        for method in route.methods:
            codes = dict(_ANSWERS.get((method, route.path), {}))
            if method in ("POST", "PUT"):
                codes.update({400: "the body is empty, not JSON, or its headers are bad", 408: "the body was not received in time",
                              413: "the body is larger than --max-body-mb"})
            if protected(method, route.path):
                codes.update({401: "missing or wrong bearer token", 403: "the service accepts no credentials for this request"})
            for code, what in codes.items():
                route.responses.setdefault(code, {"description": what, **_ERROR})
        if route.path == "/metrics":
            route.responses.setdefault(200, {"description": "Prometheus metrics",
                                             "content": {"text/plain": {"schema": {"type": "string"}}}})


def header_timeout_protocol(timeout_s: float):
    """uvicorn's HTTP protocol class (httptools, else h11) with a deadline on request headers: a
    connection must deliver a request's line and headers within `timeout_s` of opening (its
    first request) or of the request's first byte (later requests on a kept-alive connection),
    else it gets 408 and is closed. A client trickling headers (slowloris) holds a connection for
    that long at most; the body has BodyGuard's deadline, an idle kept-alive connection uvicorn's."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    message = f"request headers: not received within {timeout_s:g} s (the service's --header-timeout-s)".encode()
    reply = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
             b"content-length: " + str(len(message)).encode() + b"\r\n\r\n" + message)

    class HeaderDeadline(AutoHTTPProtocol):
        _header_timer = None
        _cycle_seen = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(reply)
                self.transport.close()

        def _waiting_for_headers(self) -> bool:
            cycle = getattr(self, "cycle", None)
            return cycle is None or cycle is self._cycle_seen and cycle.response_complete

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._waiting_for_headers():
                self._arm()  # the first byte of a request starts its deadline (kept-alive connections)
            super().data_received(data)
            cycle = getattr(self, "cycle", None)
            if cycle is not None and cycle is not self._cycle_seen:  # a new request's headers are complete
                self._cycle_seen = cycle
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline
