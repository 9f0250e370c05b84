"""The scoring service as a real process on 127.0.0.1: native scoring, health and metrics, and
bad input tried as a hostile or broken client would (a clear 4xx, never a 5xx, still serving)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload
from service.testing import REPO_ROOT, ServiceProcess
from tests.helpers import needs_service

httpx = pytest.importorskip("httpx")  # the `test` extra
needs_service()  # the `service` extra: skipped without it

BODY_TIMEOUT_S = 2.0
HEADER_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def svc():
    with ServiceProcess(["--cluster", "mixed-64gpu", "--baseline", "sect", "--body-timeout-s", str(BODY_TIMEOUT_S),
                         "--header-timeout-s", str(HEADER_TIMEOUT_S)]) as s:
        yield s


@pytest.fixture(scope="module")
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        yield c


def _states(cluster_name: str, workload: str, num_jobs: int, n: int, seed: int = 0):
    """(state, candidate set) at n decisions of an episode driven by random valid actions."""
    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    rng = np.random.default_rng(seed)
    cset = advance_to_decision(sim, 8)
    for _ in range(n):
        if sim.done:
            break
        yield sim.decision_state(), cset
        valid = np.flatnonzero(cset.mask)
        apply_candidate(sim, cset, int(valid[rng.integers(len(valid))]))
        cset = advance_to_decision(sim, 8)


def test_native_scoring_equals_the_envs_own_choice(client):
    """For simulator states (preemptions in flight included), POST /v1/score ranks first exactly
    what `make_baseline('sect').select(state, cset)` picks, with the same GPUs and victims."""
    sect = make_baseline("sect")
    compared = placements = 0
    for state, cset in _states("mixed-64gpu", "llm-mix-bursty", 80, 60):
        choice = sect.select(state, cset)
        r = client.post("/v1/score", json={"state": state.to_dict()})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["policy"] == "baseline:sect" and body["fallback"] is False
        if choice == cset.wait_index:
            assert body["wait"]["rank"] == 1 and body["wait"]["probability"] == 1.0
        else:
            top = body["candidates"][0]
            cd = cset.candidates[choice]
            assert top["rank"] == 1 and top["index"] == choice and top["probability"] == 1.0
            assert top["job_id"] == state.name_of(cd.job_id)
            assert top["gpus"] == cd.gpus.tolist()
            assert top["victims"] == [state.name_of(v) for v in cd.victims]
            placements += 1
        valid = int(cset.mask.sum()) - int(cset.mask[cset.wait_index])
        assert len(body["candidates"]) == valid
        assert [c["index"] for c in body["candidates"][1:]] == sorted(c["index"] for c in body["candidates"][1:])
        compared += 1
    assert compared >= 40 and placements >= 10


def test_score_response_describes_placements(client):
    cluster = load_cluster("mixed-64gpu")
    state, _ = next(iter(_states("mixed-64gpu", "llm-mix", 40, 1)))
    body = client.post("/v1/score", json={"state": state.to_dict(), "queue_window": 4}).json()
    assert body["queue_window"] == 4 and len(body["window"]) <= 4
    for c in body["candidates"]:
        nodes = [cluster.node_names[cluster.gpu_node[g]] for g in c["gpus"]]
        assert c["nodes"] == list(dict.fromkeys(nodes))
        assert sum(len(v) for v in c["gpus_by_node"].values()) == len(c["gpus"])
        for node, local in c["gpus_by_node"].items():
            i = cluster.node_names.index(node)
            assert all(0 <= k < cluster.node_gpus[i] for k in local)
        assert c["rule"] in ("binpack", "spread", "topology", "preempt")
        assert (c["checkpoint_cost_gpu_s"] > 0) == bool(c["victims"])
    total = sum(c["probability"] for c in body["candidates"]) + body["wait"]["probability"]
    assert total == pytest.approx(1.0)


def test_the_serving_process_never_imports_torch(client):
    assert client.get("/v1/info").json()["torch_imported"] is False
    code = ("import sys, service.app, service.k8s, service.scoring, service.__main__, agents.policy_file; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_health_readiness_metrics_and_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    client.post("/v1/score", json={"state": {"queued": [{"id": "a", "num_gpus": 2, "estimate_s": 60}]}})
    text = client.get("/metrics").text
    assert 'gangsched_requests_total{code="200",verb="score"}' in text
    assert 'gangsched_request_seconds_bucket{le="0.005",verb="score"}' in text
    assert "gangsched_fallbacks_total" in text or "gangsched_fallbacks" in text
    assert 'gangsched_model_info{baseline="sect",cluster="mixed-64gpu"' in text
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/score", "/scheduler/filter", "/scheduler/prioritize", "/scheduler/preempt", "/scheduler/bind"} <= set(paths)


BAD_SCORE_BODIES = [
    (b"{not json", 400, "invalid JSON"),
    (b"", 400, "empty body"),
    (b"\xff\xfe\x00garbage", 400, "body"),
    (b"[" * 100_000, 400, "body"),
    (json.dumps([1, 2]).encode(), 422, "body"),
    (json.dumps({"state": [1]}).encode(), 422, "body.state"),
    (json.dumps({"state": {}, "queue_window": "eight"}).encode(), 422, "body.queue_window"),
    (json.dumps({"state": {}, "queue_window": 10**9}).encode(), 422, "body.queue_window"),
    (json.dumps({"state": {"queued": [{"id": 1, "num_gpus": -8, "estimate_s": 60}]}}).encode(), 422, "queued[0].num_gpus"),
    (json.dumps({"state": {"queued": [{"id": 1, "num_gpus": 10**12, "estimate_s": 60}]}}).encode(), 422, "queued[0].num_gpus"),
    (json.dumps({"state": {"queued": [{"id": 1, "num_gpus": "8", "estimate_s": 60}]}}).encode(), 422, "queued[0].num_gpus"),
    (json.dumps({"state": {"running": [{"id": 1, "gpus": [0, 1], "estimate_s": 60, "gpu_type": "Z9"}]}}).encode(), 422, "running[0].gpu_type"),
    (json.dumps({"state": {"running": [{"id": 1, "gpus": [70], "estimate_s": 60}]}}).encode(), 422, "GPU 70 does not exist"),
    (b'{"state": {"time_s": NaN}}', 422, "time_s"),
    (json.dumps({"state": {"bogus": 1}}).encode(), 422, "bogus"),
]


@pytest.mark.parametrize("body, status, words", BAD_SCORE_BODIES)
def test_bad_native_input_gets_a_clear_4xx(client, body, status, words):
    r = client.post("/v1/score", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]
    assert client.get("/healthz").status_code == 200


def test_a_50_mb_body_gets_413_and_the_service_keeps_answering(svc, client):
    big = b'{"state": {"queued": [' + b" " * (50 << 20) + b"]}}"
    r = client.post("/v1/score", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "more than" in r.json()["detail"]
    r = client.post("/scheduler/filter", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "more than" in r.json()["Error"]
    assert client.get("/healthz").status_code == 200 and svc.alive()


def test_a_slow_client_gets_408_while_others_are_served(svc, client):
    with socket.create_connection(("127.0.0.1", svc.port)) as s:
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        start = time.monotonic()
        served = 0
        while time.monotonic() - start < BODY_TIMEOUT_S / 2:  # the service answers others meanwhile
            assert client.get("/healthz").status_code == 200
            served += 1
            s.sendall(b" ")
            time.sleep(0.05)
        s.settimeout(BODY_TIMEOUT_S * 3)
        chunks = []  # headers and body may come in separate segments: read until the server closes
        while chunk := s.recv(4096):
            chunks.append(chunk)
        reply = b"".join(chunks).decode()
    assert served > 3
    assert reply.startswith("HTTP/1.1 408"), reply
    assert "not received within" in reply
    assert client.get("/readyz").status_code == 200


def _trickle_headers(sock: socket.socket, client, give_up_s: float) -> tuple[bytes, int]:
    """Send a request line and then one header byte every 0.1 s (slowloris) until the server
    closes the connection or `give_up_s` pass; serves /healthz from `client` meanwhile.
    Returns (what the server sent, /healthz answered meanwhile)."""
    sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    sock.settimeout(0.1)
    start, served, got = time.monotonic(), 0, b""
    while time.monotonic() - start < give_up_s:
        try:
            sock.sendall(b"a")
            chunk = sock.recv(4096)
        except socket.timeout:
            assert client.get("/healthz").status_code == 200
            served += 1
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
    return got, served


def test_headers_sent_slowly_get_408_and_the_connection_is_closed(svc, client):
    give_up = HEADER_TIMEOUT_S * 4  # far past the deadline: a service without one would still be reading
    with socket.create_connection(("127.0.0.1", svc.port)) as s:
        reply, served = _trickle_headers(s, client, give_up)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"request headers: not received within 1.5 s" in reply
    assert served > 3  # others are answered while it trickles
    # a kept-alive connection: the first request answered, the next one's headers trickled
    with socket.create_connection(("127.0.0.1", svc.port)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(10)
        first = s.recv(4096)
        while b'"ok"' not in first:  # the body may come in its own segment
            first += s.recv(4096)
        assert first.startswith(b"HTTP/1.1 200")
        time.sleep(HEADER_TIMEOUT_S * 1.5)  # idle between requests: not counted (uvicorn's keep-alive governs)
        reply, _ = _trickle_headers(s, client, give_up)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    # a connection that sends nothing at all is closed too
    with socket.create_connection(("127.0.0.1", svc.port)) as s:
        s.settimeout(give_up)
        assert s.recv(4096).startswith(b"HTTP/1.1 408")
    assert client.get("/readyz").status_code == 200 and svc.alive()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
JOB_KEYS = ["id", "num_gpus", "tp_degree", "gpus", "estimate_s", "priority", "kind", "arrival_s", "mem_per_gpu_gb"]
JOBS = st.dictionaries(st.sampled_from(JOB_KEYS), st.integers(-3, 80) | st.text(max_size=4) | st.lists(st.integers(-2, 70), max_size=9)
                       | st.floats(-1e3, 1e6), max_size=len(JOB_KEYS))
STATES = st.fixed_dictionaries({}, optional={"time_s": st.floats(-10, 1e6), "running": st.lists(JOBS, max_size=3),
                                             "queued": st.lists(JOBS, max_size=3), "reserved": st.lists(JOBS, max_size=2)})
POD = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=6)},
                                                               optional={"labels": JSON, "annotations": JSON}),
                             "spec": st.fixed_dictionaries({}, optional={"containers": st.lists(JSON, max_size=2),
                                                                         "priority": JSON})})
ENVELOPES = st.fixed_dictionaries({}, optional={"Pod": POD | JSON, "Nodes": JSON, "NodeNames": st.lists(st.text(max_size=8), max_size=3) | JSON,
                                                "NodeNameToMetaVictims": JSON, "PodName": JSON, "Node": JSON})


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(["/v1/score", "/v1/state", "/scheduler/filter", "/scheduler/prioritize", "/scheduler/preempt",
                             "/scheduler/bind"]),
       body=st.one_of(JSON, ENVELOPES, st.fixed_dictionaries({"state": STATES}, optional={"queue_window": JSON}), STATES))
def test_fuzzed_json_bodies_never_get_a_5xx(client, path, body):
    method = "PUT" if path == "/v1/state" else "POST"
    r = client.request(method, path, json=body)
    assert r.status_code < 500, (path, body, r.text)
    if r.status_code >= 400:
        assert (r.json().get("detail") or r.json().get("Error")), r.text


def test_fallback_to_the_baseline_is_counted():
    """Inference that fails (here a model that raises) falls back to the baseline, is marked and
    counted; in-process, since a real export does not fail on demand."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.scoring import ModelInfo, Scorer

    class Broken:
        def score(self, *a):
            raise RuntimeError("onnxruntime exploded")

    scorer = Scorer("sect", Broken(), ModelInfo("x", "ab" * 32, 2, 8))
    app = create_app(load_cluster("mixed-64gpu"), scorer)
    with TestClient(app) as tc:
        body = tc.post("/v1/score", json={"state": {"queued": [{"id": "a", "num_gpus": 8, "estimate_s": 60}]}}).json()
        assert body["fallback"] is True and body["policy"] == "baseline:sect"
        assert body["candidates"][0]["probability"] == 1.0
        assert 'gangsched_fallbacks_total{reason="RuntimeError"}' in tc.get("/metrics").text


def test_schemathesis_fuzz_of_the_openapi_finds_no_5xx_and_every_answer_documented(svc):
    """No fuzzed request gets a 5xx, and each answer's status code and content type are among
    those the OpenAPI document gives for the operation (what a client generated from it expects)."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings

    schema = schemathesis.openapi.from_url(svc.url + "/openapi.json")
    failures, undocumented = [], set()

    def fuzz(operation) -> None:
        documented = operation.definition.raw.get("responses", {})

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call(base_url=svc.url)
            if response.status_code >= 500:
                failures.append((operation.path, case.body, response.status_code, response.text[:300]))
            answer = documented.get(str(response.status_code))
            if answer is None:
                undocumented.add((operation.method.upper(), operation.path, response.status_code))
            else:
                kind = response.headers.get("content-type") or ""
                kind = (kind[0] if kind else "") if isinstance(kind, list) else kind  # schemathesis: a list of values
                if response.content and kind.split(";")[0] not in answer.get("content", {}):
                    undocumented.add((operation.method.upper(), operation.path, kind))

        check()

    for result in schema.get_all_operations():
        fuzz(result.ok())
    assert not failures, failures[:3]
    assert not undocumented, sorted(undocumented, key=str)
    assert svc.alive()


def test_a_method_a_path_does_not_answer_gets_405_listing_every_method_it_does(client):
    r = client.request("OPTIONS", "/v1/state")
    assert r.status_code == 405 and r.headers["allow"] == "GET, PUT", (r.status_code, r.headers)
    r = client.request("PATCH", "/v1/score")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert client.request("PATCH", "/no/such/path").status_code == 404


def test_a_model_dir_that_does_not_exist_is_refused():
    r = subprocess.run([sys.executable, "-m", "service", "--model", str(Path("/nonexistent/model")), "--cluster", "mixed-64gpu"],
                       cwd=REPO_ROOT, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a directory" in r.stderr
    r = subprocess.run([sys.executable, "-m", "service", "--cluster", "no-such-cluster"], cwd=REPO_ROOT, check=False, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--cluster" in r.stderr


def test_the_example_state_is_a_body_the_service_scores(client, tmp_path):
    """`python -m service.example_state` (the README's quick start) writes a /v1/score body that
    the service ranks, the same for the same arguments; a bad cluster is a clear error."""
    from service.example_state import loaded_state

    out = tmp_path / "state.json"
    run = subprocess.run([sys.executable, "-m", "service.example_state", "--cluster", "mixed-64gpu", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    body = json.loads(out.read_text())
    assert body == {"state": json.loads(json.dumps(loaded_state("mixed-64gpu", "llm-mix", 200))), "queue_window": 8}
    r = client.post("/v1/score", content=out.read_bytes(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["window"] == ["bench-job"] and answer["candidates"][0]["rank"] == 1, answer
    bad = subprocess.run([sys.executable, "-m", "service.example_state", "--cluster", "no-such-cluster"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-cluster" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
