"""Preemption for a gang, all or nothing: a real service process on 127.0.0.1 with a Kubernetes
API server it reaches through the official `kubernetes` client (service.testing.FakeAPIServer),
called as kube-scheduler calls it.

kube-scheduler preempts per pod: for each pending member it POSTs `ExtenderPreemptionArgs` with
the victims it found per node (`NodeNameToVictims`, whole Pods, with nodeCacheCapable: false;
`NodeNameToMetaVictims`, UIDs only, with true) and reads `NodeNameToMetaVictims` back. The service
plans the whole gang after preemption on the offered nodes and answers each member with the one
node the plan gives it, with exactly the victims offered there; a gang that cannot fit even after
preempting every victim offered gets no node for any member."""

from __future__ import annotations

import time

import httpx
import pytest

from service.testing import FakeAPIServer, ServiceProcess
from tests.test_extender_verbs import CLUSTER, GROUP, NAMES, args, binding, busy, pod, run_pod

pytest.importorskip("kubernetes.client")
VICTIM_NODES = ["h100-0", "h100-1", "h100-2", "h100-3", "a100-0"]  # low-priority pods, offered as victims
HELD = [n for n in NAMES if n not in VICTIM_NODES]  # high-priority, never offered


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
