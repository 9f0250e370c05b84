"""The extender verbs against a real service process and a Kubernetes API server it reaches
through the official `kubernetes` client (service.testing.FakeAPIServer, via a kubeconfig).

Requests carry the exact JSON kube-scheduler sends (k8s.io/kube-scheduler/extender/v1: Go field
names, `null` for the unset one of Nodes/NodeNames and NodeNameToVictims/NodeNameToMetaVictims),
with Pods and Nodes serialised by the client's own ApiClient."""

from __future__ import annotations

import time

import httpx
import pytest

from envs.cluster.config import load_cluster
from service.testing import FakeAPIServer, ServiceProcess
from tests.helpers import busy_state

k8s = pytest.importorskip("kubernetes.client")
wire = k8s.ApiClient().sanitize_for_serialization
CLUSTER = "mixed-64gpu"
GROUP = "scheduling.x-k8s.io/pod-group"


def pod(name: str, gpus: int, *, priority: int | None = None, labels: dict | None = None, annotations: dict | None = None,
        node: str | None = None, namespace: str = "ml") -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    c = k8s.V1Container(name="main", image="trainer:1", resources=k8s.V1ResourceRequirements(limits=limits, requests=limits))
    return wire(k8s.V1Pod(api_version="v1", kind="Pod",
                          metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", labels=labels,
                                                    annotations=annotations),
                          spec=k8s.V1PodSpec(priority=priority, containers=[c], node_name=node)))


def node(name: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3", labels: dict | None = None) -> dict:
    meta = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "kubernetes.io/hostname": name, **(labels or {})}
    return wire(k8s.V1Node(api_version="v1", kind="Node", metadata=k8s.V1ObjectMeta(name=name, labels=meta),
                           status=k8s.V1NodeStatus(allocatable={"nvidia.com/gpu": str(gpus), "cpu": "96"})))


NAMES = load_cluster(CLUSTER).node_names


def args(p: dict, names: list[str]) -> dict:
    """ExtenderArgs as kube-scheduler sends them with nodeCacheCapable: true."""
    return {"Pod": p, "Nodes": None, "NodeNames": names}


def binding(p: dict, where: str) -> dict:
    m = p["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": where}


def busy(nodes: list[str], priority: str = "high", preemptible: bool = False) -> dict:
    return busy_state(CLUSTER, nodes, priority, preemptible)


@pytest.fixture(scope="module")
def api():
    with FakeAPIServer() as a:
        yield a


@pytest.fixture(scope="module")
def svc(api, tmp_path_factory):
    kubeconfig = api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig]) as s:
        yield s


@pytest.fixture()
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.put("/v1/state", json={"time_s": 0.0}).status_code == 200
        yield c


def run_pod(api: FakeAPIServer, client: httpx.Client, p: dict, where: str) -> None:
    """A pod the service decided (filter) and bound through the API server."""
    api.add_pod(p)
    assert client.post("/scheduler/filter", json=args(p, [where])).json()["NodeNames"] == [where]
    assert client.post("/scheduler/bind", json=binding(p, where)).json() == {"Error": ""}


# ---------------------------------------------------------------------- bind


def test_bind_creates_the_binding_through_the_api_server_and_records_the_pod(api, client):
    p = pod("b-ok", 8)
    api.add_pod(p)
    f = client.post("/scheduler/filter", json=args(p, NAMES)).json()
    where = f["NodeNames"][0]
    assert client.post("/scheduler/bind", json=binding(p, where)).json() == {"Error": ""}
    assert api.node_of("ml", "b-ok") == where  # the API server's pod is bound
    assert [r["id"] for r in client.get("/v1/state").json()["running"]] == ["ml/b-ok"]
    # A second bind of the same pod: the API server's 409 comes back in Error.
    again = client.post("/scheduler/bind", json=binding(p, where)).json()["Error"]
    assert "409" in again and "already assigned" in again


def test_bind_refuses_a_pod_never_seen_or_of_another_uid_and_binds_nothing(api, client):
    stranger = pod("b-stranger", 8)
    api.add_pod(stranger)
    before = len(api.bindings())
    err = client.post("/scheduler/bind", json=binding(stranger, "h100-0")).json()["Error"]
    assert "never filtered or prioritized" in err and "not bound" in err
    p = pod("b-uid", 8)
    api.add_pod(p)
    client.post("/scheduler/filter", json=args(p, NAMES))
    err = client.post("/scheduler/bind", json=dict(binding(p, "h100-0"), PodUID="uid-other")).json()["Error"]
    assert "UID uid-other is not the UID uid-b-uid" in err
    assert len(api.bindings()) == before and api.node_of("ml", "b-stranger") is None and api.node_of("ml", "b-uid") is None
    assert client.get("/v1/state").json()["running"] == []


def test_bind_reports_the_api_servers_refusal(api, client):
    p = pod("b-missing", 8)  # filtered here, but no such pod in the API server
    client.post("/scheduler/filter", json=args(p, NAMES))
    err = client.post("/scheduler/bind", json=binding(p, "h100-0")).json()["Error"]
    assert "404" in err and 'pods "b-missing" not found' in err
    assert client.get("/v1/state").json()["running"] == []


# ---------------------------------------------------------------------- preempt


def test_preempt_with_meta_victims_names_unknown_uids_through_the_api_server(api, client):
    """nodeCacheCapable: UIDs only, of pods this service never saw (bound by another scheduler).
    The node's pods listed through the API server name them: h100-0's victim is annotated
    non-preemptible (its node is dropped), h100-1's is an ordinary low-priority pod (kept, with
    exactly the victim offered)."""
    keep = pod("pm-keep", 8, priority=-10, annotations={"gangsched.io/preemptible": "false"}, node="h100-0")
    low = pod("pm-low", 8, priority=-10, node="h100-1")
    api.add_pod(keep)
    api.add_pod(low)
    preemptor = pod("pm-urgent", 8, priority=1000)
    body = {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        "h100-0": {"Pods": [{"UID": "uid-pm-keep"}], "NumPDBViolations": 0},
        "h100-1": {"Pods": [{"UID": "uid-pm-low"}], "NumPDBViolations": 0}}}
    r = client.post("/scheduler/preempt", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["NodeNameToMetaVictims"] == {"h100-1": {"Pods": [{"UID": "uid-pm-low"}], "NumPDBViolations": 0}}


def test_preempt_trusts_kube_schedulers_victims_it_cannot_name_and_never_returns_a_node_without_victims(client):
    """Full victims (nodeCacheCapable: false) the occupancy does not hold: the service thinks
    h100-0 free, kube-scheduler says it needs a victim. Every node comes back with exactly the
    victims offered (never an empty list, which kube-scheduler rejects); a node offered with no
    victims does not come back."""
    v0, v1 = pod("pf-a", 8, priority=-5, node="h100-0"), pod("pf-b", 4, priority=-5, node="h100-1")
    body = {"Pod": pod("pf-urgent", 8, priority=100), "NodeNameToMetaVictims": None, "NodeNameToVictims": {
        "h100-0": {"Pods": [v0], "NumPDBViolations": 0}, "h100-1": {"Pods": [v1], "NumPDBViolations": 1},
        "h100-2": {"Pods": [], "NumPDBViolations": 0}}}
    r = client.post("/scheduler/preempt", json=body)
    assert r.status_code == 200, r.text
    out = r.json()["NodeNameToMetaVictims"]
    assert out == {"h100-0": {"Pods": [{"UID": "uid-pf-a"}], "NumPDBViolations": 0},
                   "h100-1": {"Pods": [{"UID": "uid-pf-b"}], "NumPDBViolations": 1}}


def test_preempt_decides_on_the_offered_nodes_even_when_the_pod_fits_elsewhere(api, client):
    """All H100s run low-priority pods bound here; the A100 and L40S nodes are free but not
    offered (kube-scheduler's other filters ruled them out). The policy's place-after-preempt
    choice is made on the offered nodes alone: one node comes back, with its offered victims,
    not every node (as when the free nodes made the pod look placeable without preemption)."""
    client.put("/v1/state", json=busy(["l40s-0", "l40s-1"]))
    victims = {}
    for k, n in enumerate(["h100-0", "h100-1", "h100-2"]):
        v = pod(f"po-low-{k}", 8, priority=-10)
        run_pod(api, client, v, n)
        victims[n] = v
    body = {"Pod": pod("po-urgent", 8, priority=1000), "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        n: {"Pods": [{"UID": v["metadata"]["uid"]}], "NumPDBViolations": 0} for n, v in victims.items()}}
    out = client.post("/scheduler/preempt", json=body).json()["NodeNameToMetaVictims"]
    assert len(out) == 1, out
    (n, v), = out.items()
    assert v == {"Pods": [{"UID": victims[n]["metadata"]["uid"]}], "NumPDBViolations": 0}


# ---------------------------------------------------------------------- nodes


def test_names_only_nodes_map_to_the_topology_through_their_labels_read_from_the_api(api, client):
    """nodeCacheCapable sends names only; `ip-10-0-3-17.ec2.internal` is topology node h100-3
    by its label, read from the API server: it is scored as h100-3 (the only free node), and a
    pod bound there takes h100-3's GPUs."""
    api.add_node(node("ip-10-0-3-17.ec2.internal", labels={"gangsched.io/topology-node": "h100-3"}))
    client.put("/v1/state", json=busy(["h100-0", "h100-1", "h100-2", "a100-0", "a100-1", "l40s-0", "l40s-1"]))
    p = pod("alias-a", 8)
    api.add_pod(p)
    f = client.post("/scheduler/filter", json=args(p, ["ip-10-0-3-17.ec2.internal"])).json()
    assert f["NodeNames"] == ["ip-10-0-3-17.ec2.internal"]
    prio = client.post("/scheduler/prioritize", json=args(p, ["ip-10-0-3-17.ec2.internal"])).json()
    assert prio == [{"Host": "ip-10-0-3-17.ec2.internal", "Score": 10}]
    assert client.post("/scheduler/bind", json=binding(p, "ip-10-0-3-17.ec2.internal")).json() == {"Error": ""}
    q = pod("alias-b", 1)
    f = client.post("/scheduler/filter", json=args(q, ["ip-10-0-3-17.ec2.internal"])).json()
    assert f["NodeNames"] == [] and "0 GPUs free" in f["FailedNodes"]["ip-10-0-3-17.ec2.internal"]  # the bind took h100-3's GPUs


def test_two_nodes_claiming_one_topology_node_never_share_it(client):
    """Two Node objects labelled as topology node a100-0: within a request only one is a100-0
    (the other is scored from its labels as outside the topology); across requests the last
    claim wins."""
    a = node("claim-a", labels={"gangsched.io/topology-node": "a100-0"})
    b = node("claim-b", labels={"gangsched.io/topology-node": "a100-0"})
    client.put("/v1/state", json=busy([n for n in NAMES if n != "a100-0"]))
    p = pod("claims", 8)
    body = {"Pod": p, "Nodes": {"metadata": {}, "items": [a, b]}, "NodeNames": None}
    scores = {h["Host"]: h["Score"] for h in client.post("/scheduler/prioritize", json=body).json()}
    assert sorted(scores.values()) != [10, 10] and max(scores.values()) == 10, scores
    state = client.get("/v1/state").json()
    assert state["running"]  # the service still answers from one occupancy


# ---------------------------------------------------------------------- gangs


def test_a_gang_plans_only_its_gpu_members_and_binds_only_into_its_plan(api, client):
    """A PodGroup (scheduler-plugins, minMember 6) of one 0-GPU launcher, one 1-GPU coordinator
    and four 8-GPU workers, labelled scheduling.x-k8s.io/pod-group. The plan is 4 x 8 GPUs (the
    launcher and coordinator do not count); the coordinator does not replace it; a worker is
    refused on a node outside the plan and bound inside it; a state reset drops the plan."""
    api.add_pod_group("scheduling.x-k8s.io", "v1alpha1", "ml", "llm", 6)
    labels = {GROUP: "llm"}
    launcher, coord = pod("llm-launcher", 0, labels=labels), pod("llm-coord", 1, labels=labels)
    workers = [pod(f"llm-w{k}", 8, labels=labels) for k in range(4)]
    for p in [launcher, coord, *workers]:
        api.add_pod(p)
    f = client.post("/scheduler/filter", json=args(workers[0], NAMES)).json()
    plan = set(f["NodeNames"])
    assert len(plan) == 4, f
    assert all("gang ml/llm is placed on" in why for why in f["FailedNodes"].values())
    client.post("/scheduler/filter", json=args(coord, NAMES))
    plans = client.get("/v1/state").json()["gang_plans"]
    assert list(plans) == ["ml/llm@8"] and set(plans["ml/llm@8"]["slots"]) == plan
    outside = next(n for n in NAMES if n not in plan)
    err = client.post("/scheduler/bind", json=binding(workers[0], outside)).json()["Error"]
    assert "no reserved slot on " + outside in err and api.node_of("ml", "llm-w0") is None
    inside = sorted(plan)
    assert client.post("/scheduler/bind", json=binding(workers[0], inside[0])).json() == {"Error": ""}
    assert api.node_of("ml", "llm-w0") == inside[0]
    f = client.post("/scheduler/filter", json=args(workers[1], NAMES)).json()
    assert set(f["NodeNames"]) == plan - {inside[0]}
    assert client.put("/v1/state", json={"time_s": 0.0}).status_code == 200
    assert client.get("/v1/state").json()["gang_plans"] == {}
    err = client.post("/scheduler/bind", json=binding(workers[1], inside[1])).json()["Error"]
    assert "no reserved placement" in err and api.node_of("ml", "llm-w1") is None


def test_a_gangs_reservation_is_released_after_its_timeout_and_api_errors_come_back(tmp_path):
    """--gang-ttl-s 1: a plan not bound within a second is released (its members are refused
    until filtered again). A kubeconfig with a wrong token: the API server's 401 is the bind's Error."""
    with FakeAPIServer() as api, ServiceProcess(["--cluster", CLUSTER, "--gang-ttl-s", "1", "--kube-api",
                                                 api.write_kubeconfig(tmp_path / "config", token="wrong")]) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        g = [pod(f"t-{k}", 8, annotations={"gangsched.io/gang-size": "2"}, labels={GROUP: "t"}) for k in range(2)]
        f = c.post("/scheduler/filter", json=args(g[0], NAMES)).json()
        assert len(f["NodeNames"]) == 2
        assert list(c.get("/v1/state").json()["gang_plans"]) == ["ml/t@8"]
        time.sleep(1.5)
        assert c.get("/v1/state").json()["gang_plans"] == {}
        err = c.post("/scheduler/bind", json=binding(g[0], f["NodeNames"][0])).json()["Error"]
        assert "no reserved placement" in err
        solo = pod("t-solo", 2)
        c.post("/scheduler/filter", json=args(solo, NAMES))
        err = c.post("/scheduler/bind", json=binding(solo, "h100-0")).json()["Error"]
        assert "401" in err and c.get("/v1/state").json()["running"] == []


def test_without_an_api_server_bind_is_refused_and_records_nothing():
    with ServiceProcess(["--cluster", CLUSTER]) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        p = pod("n-1", 8)
        c.post("/scheduler/filter", json=args(p, NAMES))
        r = c.post("/scheduler/bind", json=binding(p, "h100-0"))
        assert r.status_code == 200 and "started without --kube-api" in r.json()["Error"]
        assert c.get("/v1/state").json()["running"] == []
