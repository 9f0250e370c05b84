"""Latency and throughput of the scoring service on loopback (a benchmark, not a timed test).

    python -m benchmarks.service_latency [--model DIR] [--requests 1000] [--seconds 10] [--concurrency 8]
    python -m benchmarks.service_latency --policy lookahead [--decisions 40] [--scenario default]

For each cluster (mixed-64gpu, h100-1024gpu) it starts `python -m service` as a real process,
builds a loaded decision state from a simulator (sect placing jobs until the cluster is busy)
with one pending 8-GPU job, and measures, with one keep-alive client sending one request at a
time:
  * POST /v1/score of that state (stateless: the whole state travels and is validated each time);
  * POST /scheduler/prioritize of an 8-GPU pod (NodeNames, nodeCacheCapable) after a
    PUT /v1/state of the same running jobs; each request is a new pod, so no decision is reused;
then the sustained requests/s of /v1/score and of prioritize from `--concurrency` concurrent
keep-alive connections for `--seconds`, counting every non-200 answer as an error.
Latency is the client's: request written to response read. Prints a table and the command.

With `--policy lookahead` it measures the planner instead (`python -m service --policy lookahead`,
its search budget from `--scenario`, a time budget high enough that no search is cut short): for
each cluster, `--decisions` different states taken from a simulated episode (sect deciding, every
third decision once the cluster is busy), each sent once to POST /v1/score; it prints p50, p95 and
p99 ms per decision and how many answers fell back to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import sys
import time

import numpy as np

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload
from service.example_state import loaded_state
from service.testing import ServiceProcess

CASES = (("mixed-64gpu", "llm-mix", 200), ("h100-1024gpu", "llm-mix-large", 600))


def episode_states(cluster_name: str, workload: str, num_jobs: int, n: int, every: int = 3, busy: float = 0.5) -> list[dict]:
    """`n` plain-data states of one episode (sect deciding): every `every`-th decision from the
    first at which `busy` of the GPUs are allocated."""
    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, 0, num_jobs=num_jobs))
    sect = make_baseline("sect")
    cset = advance_to_decision(sim, 8)
    out, k, started = [], 0, False
    while not sim.done and len(out) < n:
        state = sim.decision_state()
        started = started or state.allocated_gpus >= busy * cluster.num_gpus
        if started and k % every == 0:
            out.append(state.to_dict())
        k += started
        apply_candidate(sim, cset, sect.select(state, cset))
        cset = advance_to_decision(sim, 8)
    return out


def planner_latency(args: argparse.Namespace, command: str) -> int:
    """The planner's cost per /v1/score decision on states of simulated episodes (see the module docstring)."""
    rows = []
    for cluster_name, workload, num_jobs in CASES:
        if cluster_name not in args.clusters:
            continue
        states = episode_states(cluster_name, workload, num_jobs, args.decisions)
        service_args = ["--cluster", cluster_name, "--policy", "lookahead", "--scenario", args.scenario,
                        "--planner-budget-ms", "600000"]
        with ServiceProcess(service_args, startup_timeout_s=300.0) as svc:
            info = svc.get("/v1/info")[1]["planner"]
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=600)
            lat, fallbacks, errors = [], 0, 0
            for state in states:
                body = json.dumps({"state": state}).encode()
                t = time.perf_counter()
                conn.request("POST", "/v1/score", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                answer = r.read()
                lat.append(time.perf_counter() - t)
                errors += r.status != 200
                fallbacks += r.status == 200 and json.loads(answer)["fallback"]
            conn.close()
            stats = svc.get("/v1/info")[1]["planner"]["stats"]
        a = np.array(lat) * 1000.0
        search = info["search"]
        rows.append((cluster_name, workload, len(states), float(np.mean([len(s["running"]) for s in states])),
                     f"k={search['k']}, preempt_k={search['preempt_k']}, samples={search['samples']}, horizon_s={search['horizon_s']:g}",
                     *np.percentile(a, [50, 95, 99]).tolist(), float(a.max()), stats["searched"], fallbacks, errors))
    print(f"command: {command}")
    print(f"POST /v1/score with `--policy lookahead --scenario {args.scenario}`: each state sent once, one request at a time, "
          "loopback; latency is the client's (request written to response read)")
    print("| cluster | states (workload) | running jobs (mean) | search | p50 ms | p95 ms | p99 ms | max ms | searched | fallbacks | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, workload, n, running, search, p50, p95, p99, worst, searched, fallbacks, errors in rows:
        print(f"| {name} | {n} ({workload}) | {running:.0f} | {search} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {worst:.1f} "
              f"| {searched} | {fallbacks} | {errors} |")
    return 0 if all(r[-1] == 0 for r in rows) else 1


def pod(name: str, gpus: int = 8, estimate_s: float = 7200.0) -> dict:
    notes = {"gangsched.io/estimate-s": str(estimate_s), "gangsched.io/kind": "pretrain", "gangsched.io/comm-fraction": "0.3"}
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "annotations": notes},
            "spec": {"priority": 0, "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def percentiles(samples: list[float]) -> tuple[float, float]:
    a = np.array(samples) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def sequential(port: int, path: str, bodies, n: int, warmup: int = 30) -> tuple[list[float], int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out, errors = [], 0
    for k in range(n + warmup):
        body = bodies(k)
        t = time.perf_counter()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        dt = time.perf_counter() - t
        errors += r.status != 200
        if k >= warmup:
            out.append(dt)
    conn.close()
    return out, errors


async def drive(port: int, path: str, bodies, seconds: float, concurrency: int) -> tuple[int, int, float, list[float]]:
    """(requests answered, errors, elapsed s, latencies s) from `concurrency` keep-alive
    connections sending for `seconds`; `bodies(k)` is the k-th request's body."""
    stop = time.perf_counter() + seconds
    done = errors = 0
    counter = [0]
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal done, errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                counter[0] += 1
                body = bodies(counter[0])
                t = time.perf_counter()
                writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                await writer.drain()
                status = int((await reader.readline()).split()[1])
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - t)
                done += 1
                errors += status != 200
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors, time.perf_counter() - start, latencies


async def sustained(port: int, path: str, bodies, seconds: float, concurrency: int) -> tuple[int, int, float]:
    """(requests answered, errors, elapsed s) from `concurrency` keep-alive connections (`drive`)."""
    return (await drive(port, path, bodies, seconds, concurrency))[:3]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="exported policy directory (default: serve the sect baseline)")
    p.add_argument("--requests", type=int, default=1000, help="sequential requests per latency figure")
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each throughput run")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--clusters", nargs="*", default=[c for c, _, _ in CASES])
    p.add_argument("--policy", choices=("lookahead",), help="measure the planner's cost per decision instead (see above)")
    p.add_argument("--decisions", type=int, default=40, help="with --policy lookahead: states sent per cluster")
    p.add_argument("--scenario", default="default", help="with --policy lookahead: the scenario whose search the planner runs")
    args = p.parse_args(argv)
    command = "python -m benchmarks.service_latency " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.policy == "lookahead":
        return planner_latency(args, command)
    rows = []
    for cluster_name, workload, num_jobs in CASES:
        if cluster_name not in args.clusters:
            continue
        state = loaded_state(cluster_name, workload, num_jobs)
        cluster = load_cluster(cluster_name)
        score_body = json.dumps({"state": state}).encode()
        base = dict(state, queued=[])
        names = list(cluster.node_names)
        service_args = ["--cluster", cluster_name] + (["--model", args.model] if args.model else [])
        with ServiceProcess(service_args) as svc:
            policy = svc.get("/v1/info")[1]["policy"]
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=30)
            conn.request("PUT", "/v1/state", body=json.dumps(base), headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200, r.read()
            r.read()
            conn.close()

            def prio(k: int, names: list[str] = names) -> bytes:  # a new pod of a new shape (its estimate): a full decision
                return json.dumps({"Pod": pod(f"p{k}", estimate_s=3600.0 + k), "Nodes": None, "NodeNames": names}).encode()

            def prio_alike(k: int, names: list[str] = names) -> bytes:  # a new pod of the same shape: decisions reused for 1 s
                return json.dumps({"Pod": pod(f"q{k}"), "Nodes": None, "NodeNames": names}).encode()

            def same_body(k: int, body: bytes = score_body) -> bytes:
                return body

            lat_score, err1 = sequential(svc.port, "/v1/score", same_body, args.requests)
            lat_prio, err2 = sequential(svc.port, "/scheduler/prioritize", prio, args.requests)
            lat_alike, err3 = sequential(svc.port, "/scheduler/prioritize", prio_alike, args.requests)
            n1, e1, t1 = asyncio.run(sustained(svc.port, "/v1/score", same_body, args.seconds, args.concurrency))
            n2, e2, t2 = asyncio.run(sustained(svc.port, "/scheduler/prioritize", prio, args.seconds, args.concurrency))
            n3, e3, t3 = asyncio.run(sustained(svc.port, "/scheduler/prioritize", prio_alike, args.seconds, args.concurrency))
            assert svc.alive()
        rows.append((cluster_name, len(state["running"]), len(score_body), policy, percentiles(lat_score), percentiles(lat_prio),
                     percentiles(lat_alike), n1 / t1, n2 / t2, n3 / t3, err1 + err2 + err3 + e1 + e2 + e3))
    print(f"command: {command}")
    print(f"{args.requests} sequential requests per latency figure; throughput: {args.concurrency} concurrent keep-alive "
          f"connections for {args.seconds:g} s; loopback, one service process")
    print("prioritize: an 8-GPU pod over every node (NodeNames); 'new shape': each pod differs (a full decision), "
          "'same shape': pods alike (a decision serves like pods for 1 s on the same occupancy)")
    print("| cluster | running jobs | policy | /v1/score p50 / p99 ms | prioritize new shape p50 / p99 ms "
          "| prioritize same shape p50 / p99 ms | req/s: /v1/score, prioritize new, same | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for name, running, size, policy, (s50, s99), (p50, p99), (a50, a99), r1, r2, r3, err in rows:
        print(f"| {name} | {running} ({size / 1024:.0f} KiB state) | {policy} | {s50:.2f} / {s99:.2f} | {p50:.2f} / {p99:.2f} "
              f"| {a50:.2f} / {a99:.2f} | {r1:.0f}, {r2:.0f}, {r3:.0f} | {err} |")
    return 0 if all(r[-1] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
