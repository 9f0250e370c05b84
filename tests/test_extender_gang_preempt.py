"""Preemption for a gang, all or nothing: a real service process on 127.0.0.1 with a Kubernetes
API server it reaches through the official `kubernetes` client (service.testing.FakeAPIServer),
called as kube-scheduler calls it.

kube-scheduler preempts per pod: for each pending member it POSTs `ExtenderPreemptionArgs` with
the victims it found per node (`NodeNameToVictims`, whole Pods, with nodeCacheCapable: false;
`NodeNameToMetaVictims`, UIDs only, with true) and reads `NodeNameToMetaVictims` back. The service
plans the whole gang after preemption on the offered nodes and answers each member with the one
node the plan gives it, with exactly the victims offered there; a gang that cannot fit even after
preempting every victim offered gets no node for any member.

Kueue topology requests (podset-required/-preferred-topology at the rack level) keep the plan in
one rack, with only that rack's victims preempted; a required rack that none holds after
preemption gives no member a node. Under --watch the occupancy, the victims (a running gang's
pods included) and the members already bound come from the API server's Pods."""

from __future__ import annotations

import time

import httpx
import pytest

from service.testing import FakeAPIServer, ServiceProcess
from tests.test_extender_verbs import CLUSTER, GROUP, NAMES, args, binding, busy, node, pod, run_pod
# The fixtures of test_extender_verbs: a FakeAPIServer and the service on it per module, a client on an empty state per test.
from tests.test_extender_verbs import api, client, svc  # noqa: F401

pytest.importorskip("kubernetes.client")
VICTIM_NODES = ["h100-0", "h100-1", "h100-2", "h100-3", "a100-0"]  # low-priority pods, offered as victims
HELD = [n for n in NAMES if n not in VICTIM_NODES]  # high-priority, never offered



def gang(api: FakeAPIServer, name: str, size: int = 4, gpus: int = 8, declared: int | None = None) -> list[dict]:
    """`size` pods of `gpus` GPUs (priority 1000) of the group `name` (scheduler-plugins label),
    each annotated with the gang size `declared` (default `size`), added to the API server."""
    members = [pod(f"{name}-{k}", gpus, priority=1000, labels={GROUP: name},
                   annotations={"gangsched.io/gang-size": str(declared or size)}) for k in range(size)]
    for m in members:
        api.add_pod(m)
    return members


def full_cluster(api: FakeAPIServer, client: httpx.Client, prefix: str, victim_nodes=VICTIM_NODES,
                 annotations: dict | None = None) -> dict[str, dict]:
    """Every node busy: HELD by high-priority jobs, `victim_nodes` by 8-GPU pods of priority -10
    bound through the service (so it knows them by name and UID). Returns node -> victim pod."""
    client.put("/v1/state", json=busy(HELD))
    victims = {}
    for n in victim_nodes:
        v = pod(f"{prefix}-low-{n}", 8, priority=-10, annotations=annotations)
        run_pod(api, client, v, n)
        victims[n] = dict(v, spec=dict(v["spec"], nodeName=n))  # the Pod as kube-scheduler sees it, bound
    return victims


def preemption_args(preemptor: dict, victims: dict[str, dict], meta: bool) -> dict:
    """ExtenderPreemptionArgs as kube-scheduler sends them: nodeCacheCapable true (meta) sends
    UIDs in NodeNameToMetaVictims and null NodeNameToVictims; false sends whole Pods."""
    if meta:
        table = {n: {"Pods": [{"UID": v["metadata"]["uid"]}], "NumPDBViolations": 0} for n, v in victims.items()}
        return {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": table}
    table = {n: {"Pods": [v], "NumPDBViolations": 0} for n, v in victims.items()}
    return {"Pod": preemptor, "NodeNameToVictims": table, "NodeNameToMetaVictims": None}


def preempt(client: httpx.Client, body: dict) -> dict:
    r = client.post("/scheduler/preempt", json=body)
    assert r.status_code == 200, r.text
    return r.json()["NodeNameToMetaVictims"]


def plan_of(client: httpx.Client, key: str) -> dict | None:
    return client.get("/v1/state").json()["gang_plans"].get(key)


@pytest.mark.parametrize("meta", [True, False], ids=["NodeNameToMetaVictims", "NodeNameToVictims"])
def test_a_gang_preempts_room_for_all_its_members_one_planned_node_each(api, client, meta):
    """A 4 x 8-GPU gang on a full cluster, low-priority victims offered on five nodes. The first
    member's preempt plans the whole gang after preemption (4 of the 5 nodes) and returns one
    planned node with exactly its offered victims; the other members get the other planned nodes
    (kube-scheduler offers them the same nodes here), each once; together they free room for the
    whole gang. A member asking again gets its node again. While the victims leave, its members'
    filter keeps the plan; a member binds into it, and not outside it."""
    tag = "gm" if meta else "gf"
    victims = full_cluster(api, client, tag)
    members = gang(api, tag)
    uid = {n: v["metadata"]["uid"] for n, v in victims.items()}
    first = preempt(client, preemption_args(members[0], victims, meta))
    assert len(first) == 1, first
    (n0, v0), = first.items()
    assert v0 == {"Pods": [{"UID": uid[n0]}], "NumPDBViolations": 0}
    plan = plan_of(client, f"ml/{tag}@8")
    assert plan is not None and plan["by_preemption"] and plan["size"] == 4
    planned = {n for n, k in plan["slots"].items() if k}
    assert sum(plan["slots"].values()) == 4 and len(planned) == 4 and planned <= set(VICTIM_NODES) and n0 in planned
    assert plan["victims"] == {n: [uid[n]] for n in planned}
    given = {n0: members[0]}
    for m in members[1:]:
        out = preempt(client, preemption_args(m, victims, meta))
        assert len(out) == 1, out
        (n, v), = out.items()
        assert n in planned and n not in given and v == {"Pods": [{"UID": uid[n]}], "NumPDBViolations": 0}
        given[n] = m
    assert set(given) == planned
    freed = sum(int(c["resources"]["limits"]["nvidia.com/gpu"]) for n in given for c in victims[n]["spec"]["containers"])
    assert freed >= 4 * 8  # the victims of the members' nodes free room for the whole gang
    assert plan_of(client, f"ml/{tag}@8")["assigned"] == {f"ml/{m['metadata']['name']}": n for n, m in given.items()}
    assert preempt(client, preemption_args(members[0], victims, meta)) == first  # asked again: the same node
    # The victims are still running: kube-scheduler offers filter no node of the plan; the plan stands.
    unplanned = [n for n in NAMES if n not in planned]
    f = client.post("/scheduler/filter", json=args(members[1], unplanned)).json()
    assert f["NodeNames"] == [] and all("is placed on" in why for why in f["FailedNodes"].values()), f
    assert plan_of(client, f"ml/{tag}@8") is not None
    # The first planned node's victim has left: its member passes filter there and binds; outside the plan it is refused.
    assert client.delete(f"/v1/bindings/ml/{victims[n0]['metadata']['name']}").status_code == 200
    f = client.post("/scheduler/filter", json=args(members[0], NAMES)).json()
    assert n0 in f["NodeNames"] and set(f["NodeNames"]) <= planned
    outside = next(n for n in NAMES if n not in planned)
    assert "no reserved slot on " + outside in client.post("/scheduler/bind", json=binding(members[0], outside)).json()["Error"]
    assert client.post("/scheduler/bind", json=binding(members[0], n0)).json() == {"Error": ""}
    assert api.node_of("ml", members[0]["metadata"]["name"]) == n0
    after = plan_of(client, f"ml/{tag}@8")
    assert after["slots"][n0] == 0 and f"ml/{members[0]['metadata']['name']}" not in after["assigned"]


@pytest.mark.parametrize("meta", [True, False], ids=["NodeNameToMetaVictims", "NodeNameToVictims"])
def test_a_gang_that_cannot_fit_after_preempting_everything_offered_gets_no_node(api, client, meta):
    """Victims offered on three nodes only (the fourth node's pod is annotated non-preemptible,
    which drops its node): 4 x 8 GPUs do not fit even after preempting all of them. No member's
    preempt returns a node, and no plan is kept. A pod outside any gang offered the same
    victims still gets a node (the single-pod path)."""
    tag = "nm" if meta else "nf"
    victims = full_cluster(api, client, tag, VICTIM_NODES[:3])
    keep = pod(f"{tag}-keep", 8, priority=-10, annotations={"gangsched.io/preemptible": "false"})
    run_pod(api, client, keep, "h100-3")
    offered = dict(victims, **{"h100-3": dict(keep, spec=dict(keep["spec"], nodeName="h100-3"))})
    members = gang(api, tag)
    for m in members:
        assert preempt(client, preemption_args(m, offered, meta)) == {}
    assert plan_of(client, f"ml/{tag}@8") is None
    solo = pod(f"{tag}-solo", 8, priority=1000)
    out = preempt(client, preemption_args(solo, offered, meta))
    assert len(out) >= 1 and set(out) <= set(VICTIM_NODES[:3]), out


def test_a_smaller_gang_is_planned_on_as_few_nodes_as_it_needs(api, client):
    """A gang of 2 x 8 GPUs offered the same five nodes: the plan takes two of them, its two
    members one each, and a third pod of the group (beyond its size) gets no node."""
    victims = full_cluster(api, client, "sm")
    members = gang(api, "sm", size=3, declared=2)
    got = [preempt(client, preemption_args(m, victims, True)) for m in members]
    assert [len(g) for g in got] == [1, 1, 0], got
    plan = plan_of(client, "ml/sm@8")
    assert {n for g in got for n in g} == {n for n, k in plan["slots"].items() if k} and sum(plan["slots"].values()) == 2


def test_a_gang_preemption_plan_expires_and_follows_size_changes(tmp_path):
    """--gang-ttl-s 1: the plan a member's preempt made is released after a second (the members
    are refused at bind, and a new preempt plans again). A member declaring another gang size
    drops the plan made for the old size and plans again for the new one."""
    with FakeAPIServer() as api, ServiceProcess(["--cluster", CLUSTER, "--gang-ttl-s", "1", "--kube-api",
                                                 api.write_kubeconfig(tmp_path / "config")]) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        victims = full_cluster(api, c, "ex")
        members = gang(api, "ex")
        (n0, _), = preempt(c, preemption_args(members[0], victims, True)).items()
        assert plan_of(c, "ml/ex@8")["by_preemption"]
        time.sleep(1.5)
        assert plan_of(c, "ml/ex@8") is None
        err = c.post("/scheduler/bind", json=binding(members[0], n0)).json()["Error"]
        assert "no reserved placement" in err and api.node_of("ml", "ex-0") is None
        assert len(preempt(c, preemption_args(members[1], victims, True))) == 1  # planned again
        assert plan_of(c, "ml/ex@8")["size"] == 4
        three = pod("ex-4", 8, priority=1000, labels={GROUP: "ex"}, annotations={"gangsched.io/gang-size": "3"})
        assert len(preempt(c, preemption_args(three, victims, True))) == 1
        plan = plan_of(c, "ml/ex@8")
        assert plan["size"] == 3 and sum(plan["slots"].values()) == 3 and list(plan["assigned"]) == ["ml/ex-4"]


def test_a_gang_preempts_only_what_the_free_nodes_of_its_filter_leave_short(api, client):
    """Two nodes free (l40s-0, l40s-1), low-priority victims on five. kube-scheduler's filters pass
    the free nodes for a member (the filter call), the service fails them (the gang does not fit
    16 GPUs), and the preemption that follows offers the five victim nodes only (it offers none
    where the pod fits without). The plan takes both free nodes and preempts on two nodes, not
    four: two members' preempts return those two nodes, the others none; the free nodes pass
    the members' filter."""
    client.put("/v1/state", json=busy(["a100-1"]))
    victims = {}
    for n in VICTIM_NODES:
        v = pod(f"fr-low-{n}", 8, priority=-10)
        run_pod(api, client, v, n)
        victims[n] = v
    free = ["l40s-0", "l40s-1"]
    members = gang(api, "fr")
    f = client.post("/scheduler/filter", json=args(members[0], free)).json()
    assert f["NodeNames"] == [] and all("does not fit" in why for why in f["FailedNodes"].values()), f
    got = [preempt(client, preemption_args(m, victims, True)) for m in members]
    assert sorted(len(g) for g in got) == [0, 0, 1, 1], got
    plan = client.get("/v1/state").json()["gang_plans"]["ml/fr@8"]
    preempted = {n for g in got for n in g}
    assert {n for n, k in plan["slots"].items() if k} == preempted | set(free) and sum(plan["slots"].values()) == 4
    assert set(plan["victims"]) == preempted
    assert set(client.post("/scheduler/filter", json=args(members[2], free)).json()["NodeNames"]) == set(free)


# ---------------------------------------------------------------------- Kueue topology requests

RACK = "cloud.provider.com/topology-rack"  # Kueue's rack level (the service's --topology-labels default)
REQUIRED, PREFERRED = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
PRODUCT = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB", "l40s": "NVIDIA-L40S"}
# Racks of the victim nodes: rA {h100-0}, rB {h100-1}, rC {h100-2, h100-3}, rD {a100-0}. The policy alone
# preempts on h100-0 and h100-1 for two pods (two racks); rC is the one rack where two pods fit after preemption.
RACKS = {"h100-0": "rA", "h100-1": "rB", "h100-2": "rC", "h100-3": "rC", "a100-0": "rD", "a100-1": "rA",
         "l40s-0": "rB", "l40s-1": "rD"}


def labelled_node(name: str, rack: str) -> dict:
    return node(name, product=PRODUCT[name.split("-")[0]], labels={RACK: rack})


@pytest.fixture(scope="module")
def rack_api():
    with FakeAPIServer() as a:
        for n in NAMES:
            a.add_node(labelled_node(n, RACKS[n]))
        yield a


@pytest.fixture(scope="module")
def rack_client(rack_api, tmp_path_factory):
    """A service without --watch: the rack labels of names-only nodes are read from the API server."""
    kubeconfig = rack_api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig]) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        yield c


def preempt_all(client: httpx.Client, members: list[dict], victims: dict[str, dict]) -> list[dict]:
    return [preempt(client, preemption_args(m, victims, True)) for m in members]


def test_a_gang_requiring_a_rack_preempts_inside_one_rack(rack_api, rack_client):
    """Victims on five nodes of four racks. A 2 x 8-GPU gang without a topology request is planned
    by the policy on h100-0 and h100-1, two racks. The same gang requiring one rack (Kueue's
    podset-required-topology) is planned in rC, the one rack where both pods fit after
    preemption: each member gets one node of rC with exactly its victims, and no victim outside
    rC is preempted for it (a domain tried holds the other nodes' free GPUs, not their victims).
    Preferring one rack gives the same plan."""
    victims = full_cluster(rack_api, rack_client, "tr-any")
    got = preempt_all(rack_client, gang(rack_api, "tr-any", size=2), victims)
    assert all(len(g) == 1 for g in got), got
    assert len({RACKS[n] for g in got for n in g}) == 2  # the policy alone crosses racks
    for tag, note in (("tr-req", REQUIRED), ("tr-pref", PREFERRED)):
        victims = full_cluster(rack_api, rack_client, tag)  # PUT /v1/state: plans dropped
        members = [pod(f"{tag}-{k}", 8, priority=1000, labels={GROUP: tag},
                       annotations={"gangsched.io/gang-size": "2", note: RACK}) for k in range(2)]
        for m in members:
            rack_api.add_pod(m)
        got = preempt_all(rack_client, members, victims)
        assert [len(g) for g in got] == [1, 1], (tag, got)
        given = [n for g in got for n in g]
        assert sorted(given) == ["h100-2", "h100-3"], (tag, given)
        for g in got:
            (n, v), = g.items()
            assert v == {"Pods": [{"UID": victims[n]["metadata"]["uid"]}], "NumPDBViolations": 0}
        plan = plan_of(rack_client, f"ml/{tag}@8")
        assert {n for n, k in plan["slots"].items() if k} == {"h100-2", "h100-3"} and set(plan["victims"]) == {"h100-2", "h100-3"}
        assert plan["topology"].endswith(f"{RACK}: {RACK}=rC"), plan["topology"]


def test_a_gang_requiring_a_rack_that_no_rack_holds_after_preemption_gets_no_node(rack_api, rack_client):
    """A 3 x 8-GPU gang requiring one rack: no rack has three nodes with victims (rC has two), so
    no member's preempt returns a node and no plan is kept, though the cluster has five victim
    nodes. The same gang preferring one rack falls back to a plan across racks."""
    victims = full_cluster(rack_api, rack_client, "tn-req")
    members = [pod(f"tn-req-{k}", 8, priority=1000, labels={GROUP: "tn-req"},
                   annotations={"gangsched.io/gang-size": "3", REQUIRED: RACK}) for k in range(3)]
    for m in members:
        rack_api.add_pod(m)
    assert preempt_all(rack_client, members, victims) == [{}, {}, {}]
    assert plan_of(rack_client, "ml/tn-req@8") is None
    f = rack_client.post("/scheduler/filter", json=args(members[0], NAMES)).json()
    assert f["NodeNames"] == [], f
    victims = full_cluster(rack_api, rack_client, "tn-pref")
    members = [pod(f"tn-pref-{k}", 8, priority=1000, labels={GROUP: "tn-pref"},
                   annotations={"gangsched.io/gang-size": "3", PREFERRED: RACK}) for k in range(3)]
    for m in members:
        rack_api.add_pod(m)
    got = preempt_all(rack_client, members, victims)
    assert [len(g) for g in got] == [1, 1, 1], got
    assert len({RACKS[n] for g in got for n in g}) >= 2
    assert plan_of(rack_client, "ml/tn-pref@8")["topology"] == ""


# ---------------------------------------------------------------------- state from the watch (--watch)


def watched_service(api: FakeAPIServer, tmp_path, racks: dict[str, str]):
    """A service with --watch on `api`, whose Nodes (every topology node, by name, with its rack
    label) are added first."""
    for n in NAMES:
        api.add_node(labelled_node(n, racks[n]))
    return api.watching_service(tmp_path, "--cluster", CLUSTER)


def until(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def running_ids(c: httpx.Client) -> set[str]:
    return {r["id"] for r in c.get("/v1/state").json()["running"]}


def test_under_watch_a_gang_preempts_a_running_gang_and_binds_once_its_victims_leave(tmp_path):
    """--watch: the occupancy, the victims and the gangs come from the API server's Pods, nothing
    from PUT /v1/state or binds. A low-priority gang of 2 x 8 GPUs runs on h100-0 and h100-1 (one
    job of the watch's state), low-priority pods on h100-2, h100-3 and a100-0, high-priority ones
    elsewhere. kube-scheduler offers UIDs only. A 4 x 8-GPU gang's preempts plan the whole gang on
    four of the five nodes (so at least one of the running gang's pods, known as a victim through
    the watch, is preempted) and give each member one node. kube-scheduler deletes the victims;
    once the watch shows them gone, each member passes filter on the plan's nodes and binds there,
    and the watch then shows the new gang as one running job of 32 GPUs."""
    with FakeAPIServer() as api:
        with watched_service(api, tmp_path, RACKS) as s, httpx.Client(base_url=s.url, timeout=30) as c:
            for n in ("a100-1", "l40s-0", "l40s-1"):
                api.add_pod(pod(f"hi-{n}", 8, priority=2000, node=n))
            low = {}
            for k, n in enumerate(("h100-0", "h100-1")):
                low[n] = api.add_pod(pod(f"old-{k}", 8, priority=-10, node=n, labels={GROUP: "old"},
                                         annotations={"gangsched.io/gang-size": "2"}))
            for n in ("h100-2", "h100-3", "a100-0"):
                low[n] = api.add_pod(pod(f"low-{n}", 8, priority=-10, node=n))
            until(lambda: running_ids(c) == {"ml/old@8", "ml/low-h100-2", "ml/low-h100-3", "ml/low-a100-0",
                                             "ml/hi-a100-1", "ml/hi-l40s-0", "ml/hi-l40s-1"})
            members = gang(api, "new")
            got = preempt_all(c, members, low)
            assert [len(g) for g in got] == [1, 1, 1, 1], got
            given = {n: m for g, m in zip(got, members) for n in g}
            assert len(given) == 4 and given.keys() & {"h100-0", "h100-1"}
            for g in got:
                (n, v), = g.items()
                assert v == {"Pods": [{"UID": low[n]["metadata"]["uid"]}], "NumPDBViolations": 0}
            plan = plan_of(c, "ml/new@8")
            assert plan["by_preemption"] and {n for n, k in plan["slots"].items() if k} == set(given)
            # While the victims run, kube-scheduler's own filters pass no planned node; the plan stands.
            f = c.post("/scheduler/filter", json=args(members[0], [n for n in NAMES if n not in given])).json()
            assert f["NodeNames"] == [] and plan_of(c, "ml/new@8") is not None, f
            for n in given:  # kube-scheduler deletes the victims it nominated the members for
                api.delete_pod("ml", low[n]["metadata"]["name"])
            left = [n for n in low if n not in given]  # the one victim node outside the plan keeps running
            until(lambda: sum(r["num_gpus"] for r in c.get("/v1/state").json()["running"]) == 8 * (3 + len(left)))
            for n, m in given.items():
                f = c.post("/scheduler/filter", json=args(m, NAMES)).json()
                assert n in f["NodeNames"] and set(f["NodeNames"]) <= set(given), f
                assert c.post("/scheduler/bind", json=binding(m, n)).json() == {"Error": ""}
                assert api.node_of("ml", m["metadata"]["name"]) == n
            until(lambda: "ml/new@8" in running_ids(c))
            job = next(r for r in c.get("/v1/state").json()["running"] if r["id"] == "ml/new@8")
            assert job["num_gpus"] == 32 and plan_of(c, "ml/new@8") is None


def test_under_watch_a_gang_with_a_member_running_preempts_for_the_rest_in_its_rack(tmp_path):
    """--watch, a 3 x 8-GPU gang requiring one rack, one member already running on l40s-1 (rack rB,
    seen only through the watch). Victims on h100-0, h100-1 (rack rA) and h100-2, h100-3 (rB) and
    a100-0 (rC). The preempts plan the two members left (not three) in rB, where the running
    member is, though rA holds two pods as well and comes first by name."""
    racks = {"h100-0": "rA", "h100-1": "rA", "h100-2": "rB", "h100-3": "rB", "a100-0": "rC", "a100-1": "rB",
             "l40s-0": "rC", "l40s-1": "rB"}
    notes = {"gangsched.io/gang-size": "3", REQUIRED: RACK}
    with FakeAPIServer() as api:
        with watched_service(api, tmp_path, racks) as s, httpx.Client(base_url=s.url, timeout=30) as c:
            for n in ("a100-1", "l40s-0"):
                api.add_pod(pod(f"hi-{n}", 8, priority=2000, node=n))
            api.add_pod(pod("wt-0", 8, priority=1000, node="l40s-1", labels={GROUP: "wt"}, annotations=notes))
            low = {n: api.add_pod(pod(f"low-{n}", 8, priority=-10, node=n)) for n in VICTIM_NODES}
            until(lambda: len(running_ids(c)) == 8)
            members = [api.add_pod(pod(f"wt-{k}", 8, priority=1000, labels={GROUP: "wt"}, annotations=notes)) for k in (1, 2)]
            got = preempt_all(c, members, low)
            assert sorted(n for g in got for n in g) == ["h100-2", "h100-3"], got
            plan = plan_of(c, "ml/wt@8")
            assert plan["size"] == 3 and sum(plan["slots"].values()) == 2
            assert plan["topology"].endswith(f"{RACK}: {RACK}=rB") and "rB" in plan["topology"]
