"""Throughput of the scoring service under concurrent clients, and the extender verbs on 2,000
full Node objects (a benchmark printing figures, not a timed test).

    python -m benchmarks.service_speed [--seconds 10] [--concurrency 4 8] [--runs 3] [--nodes 2000]
                                       [--node-requests 20] [--images 0 10] [--state-calls 500]
                                       [--only score|nodes|state|stages] [--clusters h100-1024gpu mixed-64gpu]
                                       [--bodies KIND ...] [--model DIR] [--base-root DIR] [--encode-per-request]

It starts `python -m service` as a real process on 127.0.0.1 (service.testing.ServiceProcess)
and measures, from this process, on loopback:

* `/v1/score` on each of `--clusters` (default h100-1024gpu) with a loaded state
  (benchmarks.service_latency.loaded_state; on h100-1024gpu 72 running jobs, one pending 8-GPU
  job, 44 KiB), served by the sect baseline or by `--model`: `--concurrency` keep-alive
  connections send for `--seconds`; requests/s, and p50 / p99 latency (request written to
  response read) over every request of the run. For each of `--bodies`: "same state" (every
  request the same bytes, as a client asking again about an unchanged cluster), "distinct
  states" (each request's `time_s` differs, so the service parses and decides every one afresh;
  its running jobs are those of the last request, whose derived terms it keeps) and "distinct
  running sets" (also one running job's `comm_fraction` differs, so the speed model's terms of
  the running jobs are made afresh, as when jobs start or end between requests). Each `--runs`
  times; the best and the median run are printed. The distinct bodies are encoded before the
  runs (2,048 of each kind, sent in turn: a body comes back long after the service has let its
  answer go), so the client's own work per request is writing and reading bytes; with
  `--encode-per-request` the client encodes each body (44 KiB of JSON) as it sends it, as this
  benchmark did before, and that encoding shares the machine's cores with the service. With
  `--base-root DIR` the service of another checkout (the code before a change; its native core
  built) runs beside this tree's, the two measured in turn (A B, B A, ...) for each figure.
  Each row also gives the service process's CPU time per request (user + system of all its
  threads, from /proc, Linux): the least and the median over the runs; unlike requests/s it
  does not count time spent waiting for a core the client or other work holds.
* filter and prioritize on `--nodes` full Node objects, as kube-scheduler sends them with
  `nodeCacheCapable: false`: a v1 NodeList whose nodes carry what a GPU node's kubelet, GPU
  Feature Discovery and Node Feature Discovery report (35 labels, annotations, taints,
  capacity, allocatable, 4 conditions, addresses, nodeInfo, and `--images` image entries; the
  kubelet reports up to 50), about 4 KiB a node without images; the cluster is a 2,000-node
  topology file like h100-1024gpu's (DGX H100 nodes, leaves of 8, written to a temporary
  folder), with a busy occupancy (`PUT /v1/state`). Each request is a new 8-GPU pod (a full
  decision, no reuse), sent one at a time; time from request written to response read,
  `--node-requests` each, p50 / p99 / min.

* in this process, `ClusterState.from_dict` on the same h100-1024gpu state (parsed from its
  JSON), `--state-calls` calls of each path, interleaved: the field-by-field reference, the bulk
  path when its memo of running sets holds this one (a cluster whose running jobs did not change
  since the last request, as the "distinct states" bodies above), and when it does not (the memo
  emptied before each call; and so with the speed model's running_rates by its per-job loop);
  and `envs.cluster.speed.running_rates` alone on that state's 72 running jobs, the loop and the
  vectorised path; median and p99 ms.

* in this process, the stages of a `/v1/score` request as the service runs them, without HTTP
  (`--only stages`): reading the JSON, the request model, `ClusterState.from_dict`, the candidate
  set (`Scorer.candidates`), the decision, the answer's form (`describe`) and its encoding, on
  `--stage-calls` distinct states of each of `--clusters`, served by `--model` or sect; mean ms
  per stage. Each request is timed two ways in turn: as served (the native core's placements and
  features where the service takes them) and with every placement and the features in Python
  over the compiled kernels, as the service ran before; the two share the machine's load.

With GANGSCHED_STATE_BULK=0 the service runs the reference alone, with GANGSCHED_RATES_VECTOR=0
`running_rates` by its per-job loop alone (the "before" of the same machine and load). Prints `uptime`'s load average before and after each part: on a shared machine the figures
include waiting for a core.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.service_latency import drive
from service.testing import ServiceProcess

SCORE_CLUSTER, SCORE_WORKLOAD, SCORE_JOBS = "h100-1024gpu", "llm-mix-large", 600


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


SCORE_CASES = {"h100-1024gpu": ("llm-mix-large", 600), "mixed-64gpu": ("llm-mix", 200)}
BODY_POOL = 2048  # distinct bodies per kind, encoded before the runs and sent in turn


def score_bodies(state: dict) -> dict:
    """The three kinds of /v1/score body (`k`: the request's number): the same state, distinct
    states and distinct running sets (the module docstring)."""
    same = json.dumps({"state": state}).encode()
    t0 = float(state["time_s"])
    running = state["running"]

    def same_body(k: int) -> bytes:
        return same

    def distinct_body(k: int) -> bytes:  # the same cluster a moment later: a state never seen before
        return json.dumps({"state": dict(state, time_s=t0 + k * 1e-3)}).encode()

    def new_running_body(k: int) -> bytes:  # and one running job's profile changed: a running set never seen before
        i = k % len(running)
        changed = dict(running[i], comm_fraction=min(1.0, running[i]["comm_fraction"] + (k + 1) * 1e-9))
        return json.dumps({"state": dict(state, time_s=t0 + k * 1e-3, running=running[:i] + [changed] + running[i + 1:])}).encode()

    return {"same state": same_body, "distinct states": distinct_body, "distinct running sets": new_running_body}


def process_cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads), from /proc (Linux); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pooled(make, n: int = BODY_POOL):
    """`make`'s first `n` bodies encoded now, then sent in turn: body k is body k % n. A body
    comes back after n - 1 others, long after the service's 256 kept answers and 64 running sets
    have let it go, so every request is still decided afresh."""
    pool = [make(k) for k in range(n)]
    return lambda k: pool[k % n]


def score_throughput(args: argparse.Namespace) -> list[str]:
    from benchmarks.service_latency import loaded_state

    rows, head = [], []
    for cluster in args.clusters:
        workload, jobs = SCORE_CASES[cluster]
        state = loaded_state(cluster, workload, jobs)
        kinds = {name: make for name, make in score_bodies(state).items() if name in args.bodies}
        if not args.encode_per_request:
            kinds = {name: (make if name == "same state" else pooled(make)) for name, make in kinds.items()}
        service_args = ["--cluster", cluster] + (["--model", args.model] if args.model else [])
        sides = [("this tree", None)] + ([("base", args.base_root)] if args.base_root else [])
        procs = [ServiceProcess(service_args, root=root, startup_timeout_s=300.0) for _, root in sides]
        try:
            for svc in procs:
                svc.__enter__()
                asyncio.run(drive(svc.port, "/v1/score", kinds.get("distinct states", next(iter(kinds.values()))), 1.0, 2))  # warm-up
            policy = procs[0].get("/v1/info")[1]["policy"]
            for mode, bodies in kinds.items():
                for c in args.concurrency:
                    runs: dict[str, list] = {name: [] for name, _ in sides}
                    load = [load_average()]
                    for r in range(args.runs):  # the sides interleaved: A B, B A, A B, ...
                        order = list(zip(sides, procs))
                        for (name, _), svc in (order if r % 2 == 0 else order[::-1]):
                            cpu = process_cpu_s(svc.proc.pid)
                            n, err, elapsed, lat = asyncio.run(drive(svc.port, "/v1/score", bodies, args.seconds, c))
                            cpu = (process_cpu_s(svc.proc.pid) - cpu) / max(n, 1) * 1000.0
                            ms = np.array(lat) * 1000.0
                            runs[name].append((n / elapsed, float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), err, cpu))
                    load.append(load_average())
                    for name, side in runs.items():
                        best = max(side)
                        median = sorted(side)[len(side) // 2]
                        cpu = sorted(x[4] for x in side)
                        rows.append(f"| {cluster} | {policy} | {mode} | {c} | {name} | {best[0]:.0f} ({best[1]:.1f} / {best[2]:.1f}) "
                                    f"| {median[0]:.0f} ({median[1]:.1f} / {median[2]:.1f}) | {cpu[0]:.2f} / {cpu[len(cpu) // 2]:.2f} "
                                    f"| {sum(x[3] for x in side)} | {load[0]} -> {load[1]} |")
            assert all(svc.alive() for svc in procs)
        finally:
            for svc in procs:
                svc.__exit__(None, None, None)
        head.append(f"POST /v1/score on {cluster}, {len(json.dumps({'state': state}).encode()) / 1024:.0f} KiB state "
                    f"({len(state['running'])} running jobs)")
    encoding = ("each body encoded by the client as it is sent (--encode-per-request)" if args.encode_per_request
                else f"bodies encoded before the runs ({BODY_POOL} distinct ones of each kind, sent in turn)")
    head += [f"{args.runs} runs of {args.seconds:g} s each per side; best and median run by req/s; {encoding}"
             + (f"; base: the service of {args.base_root}, runs interleaved with this tree's" if args.base_root else ""),
             "| cluster | policy | bodies | connections | service | best: req/s (p50 / p99 ms) | median: req/s (p50 / p99 ms) "
             "| service CPU ms per request: least / median run | errors | load average (1, 5, 15 min) before -> after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    return head + rows


def score_stages(args: argparse.Namespace) -> list[str]:
    """In this process, the stages of a /v1/score request as the service runs them
    (service.app's score handler without HTTP), on `--stage-calls` distinct states of each of
    `--clusters`, the policy of `--model` or sect: per stage, the mean ms. Two ways, request by
    request in turn: as the service runs (`Scorer.candidates`, `Scorer.features`: the native
    core where it serves), and with every placement and the features in Python over the compiled
    kernels (`build_candidates`, `candidate_features`: the service before the native core took them)."""
    from benchmarks.service_latency import loaded_state
    from envs.cluster.config import load_cluster
    from envs.decision.candidates import build_candidates
    from envs.decision.features import candidate_features
    from envs.decision.state import ClusterState
    from service.app import ScoreRequest
    from service.scoring import Scorer, describe, load_onnx_policy
    from service.wire import dumps, loads

    rows = ["/v1/score's stages in process (the service's own calls, no HTTP), distinct states (each `time_s` differs), "
            f"{args.stage_calls} requests after 100 untimed, the two ways in turn; mean ms per request; load average "
            f"{load_average()} at the start",
            "| cluster | policy | placements and features | read JSON | request model | from_dict | candidates | decide "
            "| describe | encode | total |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cluster_name in args.clusters:
        workload, jobs = SCORE_CASES[cluster_name]
        cluster = load_cluster(cluster_name)
        bodies = score_bodies(loaded_state(cluster_name, workload, jobs))["distinct states"]

        def scorer() -> Scorer:
            return Scorer("sect", *load_onnx_policy(args.model)) if args.model else Scorer("sect")

        native, python = scorer(), scorer()
        python.features = candidate_features  # the instance's, over the class's native path
        ways = [("as served", native, getattr(native, "candidates", None)),
                ("Python (compiled kernels)", python, lambda st, q, s=python: build_candidates(st, q, wait_guard=s.wait_guard))]
        ways = [w for w in ways if w[2] is not None]  # a checkout without Scorer.candidates: its own way only
        sums = {name: np.zeros(7) for name, _, _ in ways}
        n = args.stage_calls + 100
        encoded = [bodies(k) for k in range(n)]
        for k, body in enumerate(encoded):
            for name, sc, candidates in (ways if k % 2 == 0 else ways[::-1]):
                t = [time.perf_counter()]
                data = loads(body)
                t.append(time.perf_counter())
                req = ScoreRequest.model_validate(data)
                t.append(time.perf_counter())
                state = ClusterState.from_dict(req.state, cluster)
                t.append(time.perf_counter())
                cset = candidates(state, 8)
                t.append(time.perf_counter())
                decision = sc.decide(state, cset)
                t.append(time.perf_counter())
                answer = describe(state, cset, decision)
                t.append(time.perf_counter())
                dumps(answer)
                t.append(time.perf_counter())
                if k >= 100:
                    sums[name] += np.diff(t)
        for name, total in sums.items():
            ms = total / args.stage_calls * 1000.0
            rows.append(f"| {cluster_name} | {native.policy_name} | {name} | " + " | ".join(f"{x:.3f}" for x in ms)
                        + f" | {ms.sum():.3f} |")
    return rows


def state_build(args: argparse.Namespace) -> list[str]:
    from benchmarks.service_latency import loaded_state
    from envs.cluster.config import load_cluster
    from envs.cluster.memo import per_cluster
    from envs.cluster.speed import SpeedModel
    from envs.decision.state import ClusterState, _from_dict_reference

    cluster, model = load_cluster(SCORE_CLUSTER), SpeedModel()
    data = json.loads(json.dumps(loaded_state(SCORE_CLUSTER, SCORE_WORKLOAD, SCORE_JOBS)))
    running_sets = per_cluster(cluster, ("running set", model))

    def miss():
        running_sets.clear()
        return ClusterState.from_dict(data, cluster, model)

    from envs.cluster import speed

    def miss_loop():  # the running set new, its rates by the per-job loop (GANGSCHED_RATES_VECTOR=0)
        speed._RATES_VECTOR = False
        try:
            return miss()
        finally:
            speed._RATES_VECTOR = vector

    vector = speed._RATES_VECTOR
    state = ClusterState.from_dict(data, cluster, model)
    rates_args = (cluster, [state.profiles[j] for j in state.running.tolist()], state.uplink_demand, state.node_pressure, model)
    paths = {"reference (field by field)": lambda: _from_dict_reference(data, cluster, model, 60.0),
             "bulk, running set seen before": lambda: ClusterState.from_dict(data, cluster, model),
             "bulk, running set new": miss,
             "bulk, running set new, rates by the loop": miss_loop,
             "running_rates alone, the loop (running_rates_reference)": lambda: speed.running_rates_reference(*rates_args),
             "running_rates alone, vectorised": lambda: speed._running_rates_vector(*rates_args)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    load = [load_average()]
    for f in paths.values():
        f()
    for _ in range(args.state_calls):
        for name, f in paths.items():
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    load.append(load_average())
    rows = [f"ClusterState.from_dict in process, {SCORE_CLUSTER} ({len(data['running'])} running jobs, "
            f"{len(data['recent_arrivals'])} recent arrivals), {args.state_calls} calls of each path, interleaved; "
            f"load average {load[0]} -> {load[1]}",
            "| path | median ms | p99 ms |", "|---|---|---|"]
    for name, t in times.items():
        ms = np.array(t) * 1000.0
        rows.append(f"| {name} | {np.median(ms):.3f} | {np.percentile(ms, 99):.3f} |")
    return rows


# ---------------------------------------------------------------------- 2,000 full Node objects


def cluster_yaml(nodes: int, leaf: int = 8) -> str:
    """A topology file like h100-1024gpu's with `nodes` DGX H100 nodes (names gpu0001...)."""
    width = max(4, len(str(nodes)))
    lines = [f"# {nodes * 8} H100 GPUs: {nodes} DGX nodes, leaves of {leaf}, 2 spines (benchmarks.service_speed)",
             f"name: h100-{nodes}node", "node_types:", "  dgx-h100:", "    gpu_type: H100-80GB", "    gpus: 8",
             "    intra_node: nvswitch", "    numa_sockets: 2", "    pcie_GBps: 64", "    network_GBps: 400",
             "    power_base_w: 1200", "nodes:", f'  - {{names: "gpu[{1:0{width}d}-{nodes:0{width}d}]", type: dgx-h100}}',
             "switches:"]
    leaves = (nodes + leaf - 1) // leaf
    for k in range(leaves):
        lo, hi = k * leaf + 1, min(nodes, (k + 1) * leaf)
        lines.append(f'  - {{name: leaf{k:03d}, nodes: "gpu[{lo:0{width}d}-{hi:0{width}d}]", oversubscription: 2.0}}')
    for s in range(2):
        lines.append(f'  - {{name: spine{s}, switches: "leaf[000-{leaves - 1:03d}]"}}')
    return "\n".join(lines) + "\n"


def full_node(name: str, i: int, images: int, gpus: int = 8) -> dict:
    """A v1 Node as kube-scheduler holds it for a DGX H100 node with GPU Feature Discovery."""
    rack = i // 8
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1a",
        "cloud.provider.com/topology-block": f"block{rack // 8:03d}", "cloud.provider.com/topology-rack": f"rack{rack:03d}",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel", "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1021-aws",
        "feature.node.kubernetes.io/pci-10de.present": "true", "feature.node.kubernetes.io/rdma.available": "true",
        "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "127", "nvidia.com/cuda.driver.rev": "08",
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/gfd.timestamp": "1733490000",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.deploy.container-toolkit": "true", "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.machine": "p5.48xlarge", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single"}
    resources = {"cpu": "192", "ephemeral-storage": "3750000000Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                 "memory": "2097152000Ki", "nvidia.com/gpu": str(gpus), "pods": "110", "vpc.amazonaws.com/efa": "32"}
    t = "2026-12-06T10:00:00Z"
    conditions = [{"type": k, "status": s, "lastHeartbeatTime": t, "lastTransitionTime": t, "reason": r, "message": m}
                  for k, s, r, m in (("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                                     ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                                     ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                                     ("Ready", "True", "KubeletReady", "kubelet is posting ready status"))]
    return {
        "metadata": {"name": name, "uid": f"{i:08x}-0000-4000-8000-{i:012x}", "resourceVersion": str(100000 + i),
                     "creationTimestamp": "2026-11-01T00:00:00Z", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,kernel-version.full,pci-10de.present",
                                     "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{i:017x}"})}},
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24", "podCIDRs": [f"10.{i // 256}.{i % 256}.0/24"],
                 "providerID": f"aws:///us-east-1a/i-{i:017x}",
                 "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": dict(resources), "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"}, {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": f"ec2{i:029x}", "bootID": f"{i:032x}",
                                "kernelVersion": "6.8.0-1021-aws", "osImage": "Ubuntu 22.04.5 LTS",
                                "containerRuntimeVersion": "containerd://1.7.22", "kubeletVersion": "v1.31.2",
                                "kubeProxyVersion": "v1.31.2", "operatingSystem": "linux", "architecture": "amd64"},
                   "images": [{"names": [f"nvcr.io/nvidia/pytorch@sha256:{i * 7919 + k:064x}", f"nvcr.io/nvidia/pytorch:24.{k:02d}-py3"],
                               "sizeBytes": 9_000_000_000 + k} for k in range(images)]},
    }


def busy_occupancy(node_names: list[str], every: int = 3) -> dict:
    """Every `every`-th node runs an 8-GPU job, every other one a 4-GPU job on half its GPUs."""
    running = []
    for i, _ in enumerate(node_names):
        if i % every == 0:
            running.append({"id": f"busy-{i}", "num_gpus": 8, "tp_degree": 8, "gpus": list(range(8 * i, 8 * i + 8)),
                            "estimate_s": 7200.0, "arrival_s": 0.0, "work_done_s": 600.0})
        elif i % every == 1:
            running.append({"id": f"half-{i}", "num_gpus": 4, "tp_degree": 4, "gpus": list(range(8 * i, 8 * i + 4)),
                            "estimate_s": 7200.0, "arrival_s": 0.0, "work_done_s": 600.0})
    return {"time_s": 3600.0, "running": running}


def new_pod(k: int) -> dict:
    notes = {"gangsched.io/estimate-s": str(3600 + k), "gangsched.io/kind": "pretrain"}
    return {"metadata": {"name": f"bench-{k}", "namespace": "bench", "uid": f"uid-bench-{k}", "annotations": notes},
            "spec": {"priority": 0, "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def node_verbs(args: argparse.Namespace) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"h100-{args.nodes}node.yaml"
        path.write_text(cluster_yaml(args.nodes))
        width = max(4, len(str(args.nodes)))
        names = [f"gpu{k + 1:0{width}d}" for k in range(args.nodes)]
        with ServiceProcess(["--cluster", str(path), "--max-body-mb", "256"], startup_timeout_s=300.0) as svc:
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=120)

            def call(method: str, url: str, body: bytes) -> tuple[int, bytes, float]:
                t = time.perf_counter()
                conn.request(method, url, body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                return r.status, data, time.perf_counter() - t

            status, data, _ = call("PUT", "/v1/state", json.dumps(busy_occupancy(names)).encode())
            assert status == 200, data
            k = 0
            for images in args.images:
                nodes = [full_node(n, i, images) for i, n in enumerate(names)]
                load = [load_average()]
                for verb in ("filter", "prioritize"):
                    times, size, passed = [], 0, 0
                    for _ in range(args.node_requests + 2):
                        k += 1
                        body = json.dumps({"Pod": new_pod(k), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}).encode()
                        size = len(body)
                        status, data, dt = call("POST", f"/scheduler/{verb}", body)
                        assert status == 200, data[:500]
                        answer = json.loads(data)
                        if verb == "filter":
                            assert not answer["Error"], answer["Error"]
                            passed = len(answer["Nodes"]["items"])
                        else:
                            passed = sum(1 for h in answer if h["Score"] > 0)
                        times.append(dt)
                    ms = np.array(times[2:]) * 1000.0  # the first two warm the caches of a new body size
                    what = f"{passed} nodes pass" if verb == "filter" else f"{passed} nodes scored > 0"
                    rows.append((verb, images, size, what, *np.percentile(ms, [50, 99]).tolist(), float(ms.min())))
                load.append(load_average())
                rows[-1] += (f"{load[0]} -> {load[1]}",)
                rows[-2] += (f"{load[0]} -> {load[1]}",)
            conn.close()
            assert svc.alive()
    head = [f"filter and prioritize on {args.nodes} full Node objects (Nodes, nodeCacheCapable false), a {args.nodes}-node "
            f"H100 topology, a third of the nodes full and a third half full; each request a new 8-GPU pod, one at a time, "
            f"{args.node_requests} requests",
            "| verb | images per node | request body | answer | p50 ms | p99 ms | min ms | load average before -> after |",
            "|---|---|---|---|---|---|---|---|"]
    return head + [f"| {v} | {im} | {size / 1e6:.1f} MB | {what} | {p50:.0f} | {p99:.0f} | {lo:.0f} | {load} |"
                   for v, im, size, what, p50, p99, lo, load in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each /v1/score run")
    p.add_argument("--concurrency", type=int, nargs="+", default=[4, 8], help="keep-alive connections sending at once")
    p.add_argument("--runs", type=int, default=3, help="/v1/score runs per figure (best and median printed)")
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--node-requests", type=int, default=20, help="filter and prioritize requests per figure")
    p.add_argument("--images", type=int, nargs="+", default=[0, 10], help="image entries per Node (the kubelet reports up to 50)")
    p.add_argument("--state-calls", type=int, default=500, help="in-process from_dict calls of each path")
    p.add_argument("--only", choices=("score", "nodes", "state", "stages"))
    p.add_argument("--stage-calls", type=int, default=1000, help="with --only stages: timed requests per cluster")
    p.add_argument("--clusters", nargs="+", default=["h100-1024gpu"], choices=sorted(SCORE_CASES),
                   help="clusters whose /v1/score is measured")
    p.add_argument("--bodies", nargs="+", default=["same state", "distinct states", "distinct running sets"],
                   choices=("same state", "distinct states", "distinct running sets"), help="/v1/score body kinds measured")
    p.add_argument("--model", help="exported policy the service serves (default: the sect baseline)")
    p.add_argument("--base-root", help="also run the service of this checkout (another version of the code), its "
                                       "/v1/score runs interleaved with this tree's")
    p.add_argument("--encode-per-request", action="store_true",
                   help="the client encodes each /v1/score body as it sends it (as this benchmark did before)")
    args = p.parse_args(argv)
    print("command: python -m benchmarks.service_speed " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"cpus: {os.cpu_count()}, load average at start: {load_average()}")
    if args.only in (None, "score"):
        print("\n".join(score_throughput(args)))
    if args.only in (None, "nodes"):
        print("\n".join(node_verbs(args)))
    if args.only in (None, "state"):
        print("\n".join(state_build(args)))
    if args.only in (None, "stages"):
        print("\n".join(score_stages(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
