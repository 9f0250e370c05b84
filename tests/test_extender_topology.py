"""NVLink cliques and Kueue topology requests in the extender: a real service process (--watch,
the binpack baseline, the four-rack GB200 NVL72 cluster) against service.testing.FakeAPIServer
on 127.0.0.1, reached through a kubeconfig by the official `kubernetes` client.

The cluster as the API server shows it: 72 trays of 4 GPUs, 18 a rack, each rack one NVLink
domain; every node carries GFD's `nvidia.com/gpu.clique` (`<ClusterUUID>.<CliqueId>`, one clique
a rack) and Kueue's rack and block labels. gb-036 (rack 2) carries rack 1's clique: a contradiction
of the topology file. The node holding gb-071 is named `nvl-tray-71` and found by its clique
label alone. Busy pods hold gb-000..gb-015 (rack 0 keeps 2 free trays) and gb-050..gb-053.

Seen failing, one break at a time: the domain restriction dropped (the gang planned on the
offered nodes as before), a required level treated as preferred, a preferred level treated as
required, the clique label left out of the clique level's domains, clique_conflicts answering
nothing, the clique label left out of the node mapping.
"""

from __future__ import annotations

import time

import httpx
import pytest

from service.domains import CLIQUE_LABEL, clique_conflicts, clique_domains, level_key
from service.testing import FakeAPIServer
from tests.helpers import filter_and_bind
from service.wire import WireError, parse_pod

k8s = pytest.importorskip("kubernetes.client")
wire = k8s.ApiClient().sanitize_for_serialization

CLUSTER = "gb200-nvl72-4rack"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
REQUIRED, PREFERRED = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
FABRIC = "4f3d7c1e-2a9b-4c8d-9e0f-1a2b3c4d5e6f"  # the fabric cluster UUID of GFD's clique label
CONFLICT = "gb-036"  # in rack 2 by the topology file, labelled with rack 1's clique
BY_CLIQUE = "nvl-tray-71"  # named like no topology node: mapped by its clique label


def clique(rack: int) -> str:
    return f"{FABRIC}.{rack + 1}"


def rack_of(name: str) -> int:
    return 3 if name == BY_CLIQUE else int(name.split("-")[1]) // 18


def node(name: str, rack: int, labels: dict | None = None) -> dict:
    meta = {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.count": "4", "kubernetes.io/hostname": name,
            CLIQUE_LABEL: clique(rack), RACK: f"rack{rack}", BLOCK: f"block{rack // 2}", **(labels or {})}
    return wire(k8s.V1Node(api_version="v1", kind="Node", metadata=k8s.V1ObjectMeta(name=name, labels=meta),
                           status=k8s.V1NodeStatus(allocatable={"nvidia.com/gpu": "4", "cpu": "144"})))


def pod(name: str, gpus: int = 4, node_name: str | None = None, labels: dict | None = None,
        annotations: dict | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    c = k8s.V1Container(name="main", image="trainer:1", resources=k8s.V1ResourceRequirements(limits=limits, requests=limits))
    return wire(k8s.V1Pod(api_version="v1", kind="Pod",
                          metadata=k8s.V1ObjectMeta(name=name, namespace="ml", labels=labels, annotations=annotations),
                          spec=k8s.V1PodSpec(containers=[c], node_name=node_name),
                          status=k8s.V1PodStatus(phase="Running" if node_name else "Pending")))


def gang(group: str, size: int, topology: dict | None = None) -> list[dict]:
    """`size` pods of 4 GPUs of one group, with a Kueue topology annotation."""
    notes = {"gangsched.io/gang-size": str(size), **(topology or {})}
    return [pod(f"{group}-{k}", labels={"scheduling.x-k8s.io/pod-group": group}, annotations=notes) for k in range(size)]


NODE_NAMES = [f"gb-{i:03d}" for i in range(71)] + [BY_CLIQUE]


@pytest.fixture(scope="module")
def api():
    with FakeAPIServer() as a:
        for name in NODE_NAMES:
            n = node(name, rack_of(name), {CLIQUE_LABEL: clique(1)} if name == CONFLICT else None)
            if name == BY_CLIQUE:
                del n["metadata"]["labels"][RACK]  # its clique label alone places it
            a.add_node(n)
        for i in [*range(16), *range(50, 54)]:
            a.add_pod(pod(f"busy-{i}", node_name=f"gb-{i:03d}"))
        yield a


@pytest.fixture(scope="module")
def svc(api, tmp_path_factory):
    with api.watching_service(tmp_path_factory.mktemp("kube"), "--cluster", CLUSTER, "--baseline", "binpack") as s:
        yield s


@pytest.fixture(scope="module")
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        deadline = time.monotonic() + 30
        while len(c.get("/v1/state").json().get("running", [])) < 20:
            assert time.monotonic() < deadline, "the busy pods never showed in the occupancy"
            time.sleep(0.1)
        yield c


def names_args(p: dict) -> dict:
    return {"Pod": p, "Nodes": None, "NodeNames": NODE_NAMES}


def policy_racks(c: httpx.Client, pods: int) -> set[int]:
    """The racks of the served policy's own first placement of `pods` x 4 GPUs on the service's
    current occupancy (POST /v1/score on GET /v1/state), as if no topology were asked for."""
    state = {k: v for k, v in c.get("/v1/state").json().items() if k not in ("source", "gang_plans")}
    state["queued"] = [{"id": "probe", "num_gpus": 4 * pods, "tp_degree": 4, "estimate_s": 3600.0}]
    ranked = c.post("/v1/score", json={"state": state}).json()["candidates"]
    return {rack_of(n) for n in ranked[0]["nodes"]}


def labels_of(api: FakeAPIServer, name: str) -> dict:
    return api.nodes[name]["metadata"]["labels"]


def test_a_clique_gang_is_bound_inside_one_clique_though_the_policy_would_cross_racks(api, client):
    # The policy served (binpack) places a 4 x 4-GPU gang on this occupancy across racks 0 and 1:
    # rack 0's two free trays first (the tighter fit), then two of rack 1.
    assert policy_racks(client, 4) == {0, 1}
    # The same gang asking for one NVLink clique is planned and bound inside one: the smallest
    # clique that holds it (rack 2's, 13 trays free once gb-036, labelled with rack 1's clique, is
    # set apart), never the contradicting tray.
    where = filter_and_bind(client, api, gang("llm", 4, {REQUIRED: CLIQUE_LABEL}), NODE_NAMES)
    assert len(set(where)) == 4
    assert {labels_of(api, n)[CLIQUE_LABEL] for n in where} == {clique(2)} and CONFLICT not in where


def test_a_gang_planned_again_stays_in_the_clique_of_its_members_already_bound(api, client):
    members = [api.add_pod(p) for p in gang("half", 4, {REQUIRED: CLIQUE_LABEL})]
    where = filter_and_bind(client, api, members[:2], NODE_NAMES)
    home = {labels_of(api, n)[CLIQUE_LABEL] for n in where}
    assert len(home) == 1
    plan = client.get("/v1/state").json()["gang_plans"]["ml/half@4"]
    # The plan's open slots are no longer offered: the two members left are planned again, inside
    # the clique of the two bound, not in rack 0's clique (the smallest that holds two).
    offered = [n for n in NODE_NAMES if plan["slots"].get(n, 0) == 0]
    where += filter_and_bind(client, api, members[2:], offered)
    assert {labels_of(api, n)[CLIQUE_LABEL] for n in where} == home and len(set(where)) == 4


def test_a_required_rack_gang_is_bound_inside_one_rack(api, client):
    assert len(policy_racks(client, 5)) == 2  # rack 0's two free trays, then three of rack 1
    where = filter_and_bind(client, api, gang("rack-ok", 5, {REQUIRED: RACK}), NODE_NAMES)
    assert len({labels_of(api, n)[RACK] for n in where}) == 1 and len(set(where)) == 5


def test_a_required_rack_gang_no_rack_holds_is_not_bound(api, client):
    # 19 trays: more than a rack has, though the cluster has over 40 free.
    members = [api.add_pod(p) for p in gang("rack-big", 19, {REQUIRED: RACK})]
    # offered with a node nobody knows (outside the topology, nothing read of it): it fails too
    res = client.post("/scheduler/filter", json={"Pod": members[0], "NodeNames": NODE_NAMES + ["gpu-elsewhere"]}).json()
    assert res["Error"] == "" and res["NodeNames"] == [] and "gpu-elsewhere" in res["FailedNodes"]
    reasons = set(res["FailedNodes"].values())
    assert any(f"requires one {RACK} domain" in r and "no offered domain holds it" in r for r in reasons), reasons
    m = members[0]["metadata"]
    bound = client.post("/scheduler/bind", json={"PodName": m["name"], "PodNamespace": "ml", "PodUID": m["uid"],
                                                 "Node": "gb-020"}).json()
    assert "no reserved placement" in bound["Error"]
    assert all(api.node_of("ml", p["metadata"]["name"]) is None for p in members)
    assert "ml/rack-big@4" not in client.get("/v1/state").json()["gang_plans"]


def test_a_preferred_rack_stays_in_one_rack_when_one_holds_it_and_falls_back_when_none_does(api, client):
    assert len(policy_racks(client, 4)) == 2
    where = filter_and_bind(client, api, gang("pref-ok", 4, {PREFERRED: RACK}), NODE_NAMES)
    assert len({labels_of(api, n)[RACK] for n in where}) == 1
    members = [api.add_pod(p) for p in gang("pref-big", 19, {PREFERRED: RACK})]
    res = client.post("/scheduler/filter", json=names_args(members[0])).json()
    assert res["Error"] == "" and len(res["NodeNames"]) == 19
    assert len({labels_of(api, n)[RACK] for n in res["NodeNames"]}) > 1
    plan = client.get("/v1/state").json()["gang_plans"]["ml/pref-big@4"]
    assert plan["topology"] == "" and sum(plan["slots"].values()) == 19


def test_a_clique_label_contradicting_the_topology_is_reported_and_a_node_is_mapped_by_its_clique(client):
    info = client.get("/v1/info").json()
    assert info["watch"]["mapped_nodes"] == 72 and BY_CLIQUE not in info["watch"]["unmapped_nodes"]
    conflicts = info["topology_conflicts"]
    assert len(conflicts) == 1 and conflicts[0].startswith(f"node {CONFLICT} ") and clique(1) in conflicts[0]
    assert conflicts == info["watch"]["topology_conflicts"]
    metrics = client.get("/metrics").text
    assert "gangsched_topology_conflicts 1.0" in metrics


# ---------------------------------------------------------------------- the rules, in process


class _Cluster:
    """The parts of a Cluster that service.domains reads: 6 nodes, two NVLink domains of 2, two alone."""
    node_names = [f"n{i}" for i in range(6)]
    domain_names = ["rackA", "rackB"]

    def __init__(self):
        import numpy as np

        self.node_domain = np.array([0, 0, 1, 1, -1, -1])


def test_clique_conflicts_name_each_contradiction():
    c = _Cluster()
    ok = [("n0", 0, "u.1"), ("n1", 1, "u.1"), ("n2", 2, "u.2"), ("n3", 3, "u.2"), ("n4", 4, "u.9")]
    assert clique_conflicts(c, ok) == []
    # a domain whose trays carry two cliques (3 nodes so the majority is clear)
    split = clique_conflicts(c, [("n0", 0, "u.1"), ("n1", 1, "u.3"), ("x", 0, "u.1")])
    assert len(split) == 1 and split[0].startswith("node n1 ") and "partitioned" in split[0]
    # a node outside any NVLink domain sharing a clique with nodes of one
    alone = clique_conflicts(c, [("n0", 0, "u.1"), ("n1", 1, "u.1"), ("n4", 4, "u.1")])
    assert len(alone) == 1 and alone[0].startswith("node n4 ")
    # a clique value naming another domain of the file
    named = clique_conflicts(c, [("n0", 0, "rackB")])
    assert len(named) == 1 and "names NVLink domain rackB" in named[0]
    assert clique_domains(c, ok) == {"u.1": 0, "u.2": 1, "rackA": 0, "rackB": 1}
    assert "u.3" not in clique_domains(c, [("n0", 0, "u.3"), ("n2", 2, "u.3")])  # disagreeing: no domain


def test_level_keys():
    c = _Cluster()
    assert level_key(c, CLIQUE_LABEL, 0, {CLIQUE_LABEL: "u.1"}) == ("rackA", "u.1")
    assert level_key(c, CLIQUE_LABEL, 0, {CLIQUE_LABEL: "u.1"}) != level_key(c, CLIQUE_LABEL, 1, {CLIQUE_LABEL: "u.2"})
    assert level_key(c, CLIQUE_LABEL, 4, {}) != level_key(c, CLIQUE_LABEL, 5, {})  # outside a domain: each alone
    # a rack label is unique only inside its block (Kueue): the block qualifies it
    assert level_key(c, RACK, 0, {RACK: "r1", BLOCK: "b1"}) != level_key(c, RACK, 1, {RACK: "r1", BLOCK: "b2"})
    assert level_key(c, RACK, 0, {BLOCK: "b1"}) is None
    assert level_key(c, "kubernetes.io/hostname", 2, {}) == ("node", "n2")


def test_topology_annotations_are_read_and_checked():
    p = parse_pod(pod("a", annotations={REQUIRED: RACK}), "Pod")
    assert (p.topology_level, p.topology_required) == (RACK, True)
    p = parse_pod(pod("b", annotations={PREFERRED: CLIQUE_LABEL}), "Pod")
    assert (p.topology_level, p.topology_required) == (CLIQUE_LABEL, False)
    with pytest.raises(WireError, match="one topology level"):
        parse_pod(pod("c", annotations={REQUIRED: RACK, PREFERRED: BLOCK}), "Pod")
    with pytest.raises(WireError, match="node label key"):
        parse_pod(pod("d", annotations={REQUIRED: " "}), "Pod")
    # Kueue's plain-pod groups are gangs: pod-group-name label, pod-group-total-count annotation
    p = parse_pod(pod("e", labels={"kueue.x-k8s.io/pod-group-name": "g"},
                      annotations={"kueue.x-k8s.io/pod-group-total-count": "3"}), "Pod")
    assert (p.gang, p.gang_size) == ("ml/g", 3)
