"""The Kubernetes scheduler extender as kube-scheduler calls it, against a real service process.

Pods and Nodes are built with the official `kubernetes` client's models and serialised by its
own `ApiClient().sanitize_for_serialization` (real wire format), then wrapped in the extender
envelopes with Go field names (ExtenderArgs, ExtenderPreemptionArgs, ExtenderBindingArgs)."""

from __future__ import annotations

import math
import tempfile

import pytest

from envs.cluster.config import load_cluster
from service.testing import FakeAPIServer, ServiceProcess
from tests.helpers import busy_state, needs_service

httpx = pytest.importorskip("httpx")  # the `test` extra
client_models = pytest.importorskip("kubernetes.client")
needs_service()  # the `service` extra: skipped without it
API = client_models.ApiClient()
wire = API.sanitize_for_serialization
PRODUCTS = {"H100-80GB": "NVIDIA-H100-80GB-HBM3", "A100-80GB": "NVIDIA-A100-SXM4-80GB", "L40S-48GB": "NVIDIA-L40S"}


def pod(name: str, gpus: int | list[int], *, group: str | None = None, size: int | None = None, priority: int | None = None,
        annotations: dict | None = None, namespace: str = "ml") -> dict:
    labels, notes = {}, dict(annotations or {})
    if group:
        labels["scheduling.k8s.io/group-name"] = group
        notes["scheduling.k8s.io/group-min-member"] = str(size)
    containers = []
    for k, g in enumerate(gpus if isinstance(gpus, list) else [gpus]):
        res = client_models.V1ResourceRequirements(limits={"nvidia.com/gpu": str(g)}, requests={"nvidia.com/gpu": str(g), "cpu": "4"})
        containers.append(client_models.V1Container(name=f"c{k}", image="trainer:1", resources=res))
    return wire(client_models.V1Pod(
        api_version="v1", kind="Pod",
        metadata=client_models.V1ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", labels=labels or None,
                                            annotations=notes or None),
        spec=client_models.V1PodSpec(priority=priority, containers=containers)))


def node(name: str, gpus: int = 8, gpu_type: str = "H100-80GB", labels: dict | None = None) -> dict:
    meta = {"nvidia.com/gpu.product": PRODUCTS.get(gpu_type, gpu_type), "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81559", "kubernetes.io/hostname": name, **(labels or {})}
    return wire(client_models.V1Node(
        api_version="v1", kind="Node", metadata=client_models.V1ObjectMeta(name=name, labels=meta),
        status=client_models.V1NodeStatus(allocatable={"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "1Ti"},
                                          capacity={"nvidia.com/gpu": str(gpus)})))


def cluster_nodes(name: str) -> list[dict]:
    c = load_cluster(name)
    return [node(n, int(c.node_gpus[i]), c.gpu_types[int(c.node_gpu_type[i])].name) for i, n in enumerate(c.node_names)]


def extender_args(p: dict, nodes: list[dict], cache: bool) -> dict:
    if cache:
        return {"Pod": p, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    return {"Pod": p, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


API_SERVER: FakeAPIServer | None = None  # the module's API server: pods are created there before they are bound


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    global API_SERVER
    with FakeAPIServer() as api, ServiceProcess(["--cluster", "mixed-64gpu", "--kube-api",
                                                 api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")]) as s:
        API_SERVER = api
        yield s


@pytest.fixture()
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.put("/v1/state", json={"time_s": 0.0}).status_code == 200  # an empty cluster, no binds
        yield c


def schedule(c: httpx.Client, p: dict, nodes: list[dict], cache: bool) -> str | None:
    """One kube-scheduler cycle: filter, prioritize the nodes that passed, bind the best."""
    r = c.post("/scheduler/filter", json=extender_args(p, nodes, cache))
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["Error"] == ""
    passed = f["NodeNames"] if cache else [n["metadata"]["name"] for n in f["Nodes"]["items"]]
    if not passed:
        return None
    r = c.post("/scheduler/prioritize", json=extender_args(p, [n for n in nodes if n["metadata"]["name"] in passed], cache))
    assert r.status_code == 200, r.text
    best = max(r.json(), key=lambda h: h["Score"])["Host"]
    meta = p["metadata"]
    API_SERVER.add_pod(p)
    b = c.post("/scheduler/bind", json={"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best})
    assert b.status_code == 200 and b.json() == {"Error": ""}, b.text
    return best


@pytest.mark.parametrize("cache", [False, True], ids=["Nodes", "NodeNames"])
def test_filter_and_prioritize_answer_the_wire_format(client, cache):
    nodes = cluster_nodes("mixed-64gpu")
    client.put("/v1/state", json=busy_state("mixed-64gpu", ["h100-0", "h100-1"]))
    p = pod("train-a", 4)
    r = client.post("/scheduler/filter", json=extender_args(p, nodes, cache))
    assert r.status_code == 200
    f = r.json()
    assert set(f) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"} and f["Error"] == ""
    if cache:
        assert f["Nodes"] is None and isinstance(f["NodeNames"], list)
        passed = f["NodeNames"]
    else:
        assert f["NodeNames"] is None
        passed = [n["metadata"]["name"] for n in f["Nodes"]["items"]]
        assert f["Nodes"]["items"] == [n for n in nodes if n["metadata"]["name"] in passed]  # the objects echoed
    assert "h100-0" in f["FailedNodes"] and "h100-1" in f["FailedNodes"] and "0 GPUs free" in f["FailedNodes"]["h100-0"]
    assert set(passed) == {"h100-2", "h100-3", "a100-0", "a100-1", "l40s-0", "l40s-1"}
    r = client.post("/scheduler/prioritize", json=extender_args(p, nodes, cache))
    prio = r.json()
    assert [h["Host"] for h in prio] == [n["metadata"]["name"] for n in nodes]
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in prio)
    scores = {h["Host"]: h["Score"] for h in prio}
    assert scores["h100-0"] == scores["h100-1"] == 0
    assert max(scores.values()) == 10
    # The same request with lower-case legacy tags and Go nulls reads the same.
    legacy = {"pod": p, "nodes": None if cache else {"items": nodes}, "nodenames": [n["metadata"]["name"] for n in nodes] if cache else None}
    assert client.post("/scheduler/prioritize", json=legacy).json() == prio


def test_gpus_are_summed_over_containers_and_init_containers_count(client):
    nodes = cluster_nodes("mixed-64gpu")
    c = load_cluster("mixed-64gpu")
    state = busy_state("mixed-64gpu", [n for n in c.node_names if n != "h100-3"])
    state["running"].append({"id": "half", "num_gpus": 4, "tp_degree": 4, "estimate_s": 60.0, "gpus": [24, 25, 26, 27]})
    client.put("/v1/state", json=state)
    f = client.post("/scheduler/filter", json=extender_args(pod("two-by-two", [2, 2]), nodes, True)).json()
    assert f["NodeNames"] == ["h100-3"]  # 4 GPUs in all: fits the 4 free ones
    f = client.post("/scheduler/filter", json=extender_args(pod("two-by-three", [2, 3]), nodes, True)).json()
    assert f["NodeNames"] == [] and "4 GPUs free, the pod asks for 5" in f["FailedNodes"]["h100-3"]


def test_a_gang_of_4_pods_x_8_gpus_lands_in_one_free_domain():
    """h100-1024gpu with every leaf but leaf07 holding at most 3 free nodes: the four 8-GPU
    members land on four nodes of leaf07, for both nodeCacheCapable settings."""
    c = load_cluster("h100-1024gpu")
    busy = [n for i, n in enumerate(c.node_names) if c.switch_names[c.node_leaf[i]] != "leaf07" and i % 8 < 5]
    nodes = cluster_nodes("h100-1024gpu")
    global API_SERVER
    module_api = API_SERVER
    with FakeAPIServer() as api, tempfile.TemporaryDirectory() as d, \
            ServiceProcess(["--cluster", "h100-1024gpu", "--kube-api", api.write_kubeconfig(f"{d}/config")]) as s, \
            httpx.Client(base_url=s.url, timeout=30) as client:
        API_SERVER = api  # schedule() creates the pods here; the module's server again after this test
        for cache in (False, True):
            assert client.put("/v1/state", json=busy_state("h100-1024gpu", busy)).status_code == 200
            placed = []
            for k in range(4):
                p = pod(f"llm-{int(cache)}-{k}", 8, group=f"llm-{int(cache)}", size=4)
                placed.append(schedule(client, p, nodes, cache))
            leaves = {c.switch_names[c.node_leaf[c.node_names.index(n)]] for n in placed}
            assert leaves == {"leaf07"} and len(set(placed)) == 4, placed
            running = client.get("/v1/state").json()["running"]
            assert {r["id"] for r in running} >= {f"ml/llm-{int(cache)}-{k}" for k in range(4)}
    API_SERVER = module_api


def test_later_gang_members_follow_the_first(client):
    """On an empty mixed-64gpu the gang's plan holds its nodes: a non-gang pod does not take
    them, and every member passes filter only on the plan's nodes."""
    nodes = cluster_nodes("mixed-64gpu")
    first = pod("g-0", 8, group="g", size=4)
    f = client.post("/scheduler/filter", json=extender_args(first, nodes, True)).json()
    plan = set(f["NodeNames"])
    assert len(plan) == 4
    assert all("gang ml/g is placed on" in why for why in f["FailedNodes"].values())
    other = client.post("/scheduler/filter", json=extender_args(pod("solo", 8), nodes, True)).json()
    assert not plan & set(other["NodeNames"])
    placed = [schedule(client, pod(f"g-{k}", 8, group="g", size=4), nodes, True) for k in range(4)]
    assert set(placed) == plan


def test_unknown_nodes_are_scored_from_their_labels(client):
    nodes = cluster_nodes("mixed-64gpu") + [node("edge-h100", 8, "H100-80GB"), node("edge-l4", 4, "NVIDIA-L4"),
                                            node("alias", 8, "A100-80GB", {"gangsched.io/topology-node": "a100-1"})]
    client.put("/v1/state", json=busy_state("mixed-64gpu", ["h100-0", "h100-1", "h100-2", "h100-3", "a100-0", "a100-1"]))
    p = pod("edge", 2)
    f = client.post("/scheduler/filter", json=extender_args(p, nodes, False)).json()
    passed = [n["metadata"]["name"] for n in f["Nodes"]["items"]]
    assert "edge-h100" in passed and "edge-l4" in passed
    # `alias` claims topology node a100-1, which is offered itself: the alias is not a100-1 a
    # second time, it is judged by its labels (8 free A100s) as outside the topology.
    assert "alias" in passed and "a100-1" in f["FailedNodes"]
    scores = {h["Host"]: h["Score"] for h in client.post("/scheduler/prioritize", json=extender_args(p, nodes, False)).json()}
    assert 1 <= scores["edge-h100"] <= 5 and 1 <= scores["edge-l4"] <= scores["edge-h100"]
    assert max(scores["l40s-0"], scores["l40s-1"]) == 10  # the policy's choice ranks above label-scored nodes


def test_preempt_returns_only_lower_priority_victims(client):
    nodes = cluster_nodes("mixed-64gpu")
    client.put("/v1/state", json=busy_state("mixed-64gpu", ["h100-2", "h100-3", "a100-0", "a100-1", "l40s-0", "l40s-1"]))
    low, same, high = pod("low", 8, priority=-10), pod("same", 8, priority=1000), pod("high", 8, priority=5000)
    for p, where in ((low, "h100-0"), (same, "h100-1")):
        client.post("/scheduler/filter", json=extender_args(p, nodes, True))
        API_SERVER.add_pod(p)
        assert client.post("/scheduler/bind", json={"PodName": p["metadata"]["name"], "PodNamespace": "ml",
                                                     "PodUID": p["metadata"]["uid"], "Node": where}).json() == {"Error": ""}
    preemptor = pod("urgent", 8, priority=1000)
    # Full victims (Pod objects) as kube-scheduler sends without nodeCacheCapable.
    args = {"Pod": preemptor, "NodeNameToVictims": {"h100-0": {"Pods": [low], "NumPDBViolations": 0},
                                                    "h100-1": {"Pods": [same], "NumPDBViolations": 0},
                                                    "h100-2": {"Pods": [high], "NumPDBViolations": 1}}}
    r = client.post("/scheduler/preempt", json=args)
    assert r.status_code == 200, r.text
    result = r.json()["NodeNameToMetaVictims"]
    assert result == {"h100-0": {"Pods": [{"UID": "uid-low"}], "NumPDBViolations": 0}}
    assert r.json()["CheckpointCostGPUSeconds"]["h100-0"] > 0
    # Meta victims (UIDs) as with nodeCacheCapable, in the lower-case legacy tag.
    meta = {"pod": preemptor, "nodeNameToMetaVictims": {"h100-0": {"Pods": [{"UID": "uid-low"}], "NumPDBViolations": 0},
                                                         "h100-1": {"Pods": [{"UID": "uid-same"}], "NumPDBViolations": 0},
                                                         "h100-2": {"Pods": [{"UID": "uid-unknown"}], "NumPDBViolations": 0}}}
    result = client.post("/scheduler/preempt", json=meta).json()["NodeNameToMetaVictims"]
    assert list(result) == ["h100-0"] and result["h100-0"]["Pods"] == [{"UID": "uid-low"}]


def test_preempt_offers_the_policys_one_node_and_no_victim_of_the_pods_priority_or_above(client):
    """Several nodes where preemption would work, pods of mixed priority. The cluster's other
    nodes are full of non-preemptible work; the H100 nodes hold (as the cluster's state says):
      h100-0: low-a (8 GPUs, priority -10)              -> low-a frees the node
      h100-1: low-b (4, -10) and high-b (4, 5000)       -> high-b may not be taken
      h100-2: same-c (8, 1000, the preemptor's own)     -> only strictly lower priorities
      h100-3: low-d (4, -10) and 4 GPUs free            -> low-d frees the other 4
    The policy (sect, the `preempt` rule) takes the cheapest victims, GPUs x (checkpoint +
    restore), the same per GPU here: low-d alone, on h100-3. So the answer is that one node with
    low-d, not every node where preemption works; and when kube-scheduler offers only h100-1 and
    h100-2, the answer is empty: no node is given with a victim of the preemptor's priority or above."""
    c = load_cluster("mixed-64gpu")
    state = busy_state("mixed-64gpu", ["a100-0", "a100-1", "l40s-0", "l40s-1"])
    placed = {"low-a": ("h100-0", 0, 8, "low"), "low-b": ("h100-1", 0, 4, "low"), "high-b": ("h100-1", 4, 4, "high"),
              "same-c": ("h100-2", 0, 8, "high"), "low-d": ("h100-3", 0, 4, "low")}
    for name, (where, first, gpus, cls) in placed.items():
        f = int(c.node_first_gpu[c.node_names.index(where)]) + first
        state["running"].append({"id": f"ml/{name}", "num_gpus": gpus, "tp_degree": gpus, "estimate_s": 7200.0,
                                 "gpus": list(range(f, f + gpus)), "priority": cls, "preemptible": True})
    assert client.put("/v1/state", json=state).status_code == 200
    pods = {"low-a": pod("low-a", 8, priority=-10), "low-b": pod("low-b", 4, priority=-10), "high-b": pod("high-b", 4, priority=5000),
            "same-c": pod("same-c", 8, priority=1000), "low-d": pod("low-d", 4, priority=-10)}
    offered = {"h100-0": ["low-a"], "h100-1": ["low-b", "high-b"], "h100-2": ["same-c"], "h100-3": ["low-d"]}
    preemptor = pod("urgent", 8, priority=1000)

    def preempt(nodes: list[str]) -> dict:
        table = {n: {"Pods": [pods[v] for v in offered[n]], "NumPDBViolations": 0} for n in nodes}
        r = client.post("/scheduler/preempt", json={"Pod": preemptor, "NodeNameToVictims": table})
        assert r.status_code == 200, r.text
        return r.json()

    result = preempt(list(offered))
    assert result["NodeNameToMetaVictims"] == {"h100-3": {"Pods": [{"UID": "uid-low-d"}], "NumPDBViolations": 0}}
    assert list(result["CheckpointCostGPUSeconds"]) == ["h100-3"]
    assert preempt(["h100-1", "h100-2"])["NodeNameToMetaVictims"] == {}


def test_bind_and_release_change_the_occupancy(client):
    nodes = cluster_nodes("mixed-64gpu")
    assert schedule(client, pod("a", 8), nodes, True) is not None
    state = client.get("/v1/state").json()
    assert [r["id"] for r in state["running"]] == ["ml/a"]
    assert client.delete("/v1/bindings/ml/a").json() == {"released": True}
    assert client.get("/v1/state").json()["running"] == []
    assert client.delete("/v1/bindings/ml/a").status_code == 404
    unknown = client.post("/scheduler/bind", json={"PodName": "never-seen", "PodNamespace": "ml", "Node": "h100-0"}).json()
    assert "never filtered or prioritized" in unknown["Error"]


@pytest.mark.parametrize("body, words", [
    ({"Pod": "not a pod", "NodeNames": ["h100-0"]}, "ExtenderArgs.Pod: required: a v1 Pod object"),
    ({"Pod": None, "NodeNames": ["h100-0"]}, "ExtenderArgs.Pod"),
    ({"Pod": {"metadata": {"name": "x"}}, "Nodes": None, "NodeNames": None}, "neither Nodes nor NodeNames"),
    ({"Pod": {"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "-2"}}}]}},
      "NodeNames": ["h100-0"]}, "containers[0].resources.limits[nvidia.com/gpu]: must be a non-negative integer"),
    ({"Pod": {"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 10**15}}}]}},
      "NodeNames": ["h100-0"]}, "is more than"),
    ({"Pod": {"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}},
      "NodeNames": ["h100-0"]}, "must be a non-negative integer"),
    ({"Pod": {"metadata": {"name": "x", "annotations": {"gangsched.io/gpu-type": "Z9000"}}}, "NodeNames": ["h100-0"]},
     "unknown GPU type 'Z9000'"),
    ({"Pod": {"metadata": {"name": "x"}}, "Nodes": {"items": [{"metadata": {"name": 5}}]}}, "Nodes.items[0].metadata.name"),
    ({"Pod": {"metadata": {"name": "x"}}, "Nodes": {"items": "all"}}, "Nodes.items: must be a list"),
    ({"Pod": {"metadata": {"name": "x"}, "spec": {"priority": "high"}}, "NodeNames": ["h100-0"]}, "spec.priority"),
    ({"Pod": {"metadata": {"name": "x"}, "spec": {"containers": "c"}}, "NodeNames": []}, "spec.containers: must be a list"),
    ({"Pod": pod("huge-gang", 8, group="huge", size=1000), "NodeNames": ["h100-0"]},
     "ExtenderArgs.Pod: as a job of 8000 GPUs (8000 GPUs do not exist on a 64-GPU cluster)"),
])
def test_bad_extender_input_gets_an_error_never_a_5xx(client, body, words):
    r = client.post("/scheduler/filter", json=body)
    assert r.status_code == 200 and words in r.json()["Error"], r.text
    r = client.post("/scheduler/prioritize", json=body)
    assert r.status_code == 400 and words in r.json()["Error"], r.text
    assert client.get("/healthz").status_code == 200


def test_empty_node_lists_and_malformed_bodies(client, svc):
    p = pod("x", 1)
    for cache in (False, True):
        f = client.post("/scheduler/filter", json=extender_args(p, [], cache)).json()
        assert f["Error"] == "" and (f["NodeNames"] == [] if cache else f["Nodes"]["items"] == [])
        assert client.post("/scheduler/prioritize", json=extender_args(p, [], cache)).json() == []
    for verb in ("filter", "prioritize", "preempt", "bind"):
        r = client.post(f"/scheduler/{verb}", content=b'{"Pod": ', headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "invalid JSON" in r.json()["Error"]
        r = client.post(f"/scheduler/{verb}", json=[1, 2, 3])
        assert r.status_code in (200, 400) and "must be a JSON object" in r.json()["Error"]
    r = client.post("/scheduler/preempt", json={"Pod": p, "NodeNameToMetaVictims": {"h100-0": {"Pods": "x"}}})
    assert r.status_code == 400 and "Pods: must be a list" in r.json()["Error"]
    r = client.put("/v1/state", json={"running": [{"id": 1, "gpus": [999], "estimate_s": 5}]})
    assert r.status_code == 422 and "running[0].gpus: GPU 999 does not exist" in r.json()["detail"]
    assert svc.alive() and client.get("/readyz").status_code == 200


def _same(a, b, where: str) -> None:
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    elif hasattr(a, "__dataclass_fields__") or hasattr(a, "__slots__") and not isinstance(a, (int, float, str)):
        assert type(a) is type(b), where
        names = getattr(a, "__dataclass_fields__", None) or a.__slots__
        for n in names:
            _same(getattr(a, n), getattr(b, n), f"{where}.{n}")
    else:
        assert a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)), (where, a, b)


def test_a_pending_job_added_to_a_state_is_what_from_dict_gives():
    """The extender queues a pod's job on a cached occupancy state (ClusterState.with_job_queued_first):
    every field, the candidates, the features and every baseline's choice equal those of a full
    `ClusterState.from_dict` with the job first in `queued`, on simulator states with preemptions
    in flight."""
    import numpy as np

    from baselines import BASELINES, make_baseline
    from envs.decision.candidates import apply_candidate, build_candidates
    from envs.decision.features import candidate_features
    from envs.decision.state import ClusterState
    from envs.sim.replay import advance_to_decision
    from envs.sim.simulator import Simulator
    from envs.workload.generator import load_workload_spec, make_workload

    cluster = load_cluster("mixed-64gpu")
    sim = Simulator(cluster, make_workload(load_workload_spec("llm-mix-bursty"), cluster, 1, num_jobs=80))
    rng = np.random.default_rng(1)
    cset = advance_to_decision(sim, 8)
    jobs = [{"id": "pending:a", "num_gpus": 8, "tp_degree": 8, "estimate_s": 900.0, "priority": 2, "kind": "pretrain",
             "comm_fraction": 0.3, "tp_comm_share": 0.5, "mem_per_gpu_gb": 60.0},
            {"id": "pending:b", "num_gpus": 3, "tp_degree": 3, "estimate_s": 50.0, "preemptible": False}]
    compared = 0
    for step in range(60):
        if sim.done:
            break
        d = sim.decision_state().to_dict()
        d["queued"] = d["queued"][:7]
        base = ClusterState.from_dict(d, cluster)
        for job in jobs:
            full = ClusterState.from_dict(dict(d, queued=[dict(job, arrival_s=d["time_s"], queued_since_s=d["time_s"])] + d["queued"]),
                                          cluster, base.speed_model)
            derived = base.with_job_queued_first(job)
            for name in ClusterState.__slots__:
                if name not in ("derived", "cluster", "speed_model"):
                    _same(getattr(derived, name), getattr(full, name), f"step {step} {name}")
            a, b = build_candidates(derived, 8), build_candidates(full, 8)
            np.testing.assert_array_equal(a.mask, b.mask)
            assert [(c.job_id, c.rule, None if c.gpus is None else c.gpus.tolist(), c.victims) for c in a.candidates] == \
                   [(c.job_id, c.rule, None if c.gpus is None else c.gpus.tolist(), c.victims) for c in b.candidates]
            for x, y in zip(candidate_features(a), candidate_features(b)):
                np.testing.assert_array_equal(x, y)
            assert all(make_baseline(n, 3).select(derived, a) == make_baseline(n, 3).select(full, b) for n in BASELINES)
            compared += 1
        valid = np.flatnonzero(cset.mask)
        apply_candidate(sim, cset, int(valid[rng.integers(len(valid))]))
        cset = advance_to_decision(sim, 8)
    assert compared >= 100
