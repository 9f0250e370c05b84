"""A gang whose PodGroup's minMember changes while it is being placed: a real service process
(--watch) against service.testing.FakeAPIServer on 127.0.0.1, through the official `kubernetes`
client, as kube-scheduler would call it (filter, then bind).

The plan made for the old size is dropped: a member filtered after the change is planned for the
new size less the members already bound, and a member filtered before the change is refused at
bind (its plan's size is not the gang's) until filtered again. Without a size change, a plan
stands (the members bind into it)."""

from __future__ import annotations

import httpx
import pytest

from service.testing import FakeAPIServer, ServiceProcess
from tests.test_extender_watch import CLUSTER, SP, node, pod, until

pytest.importorskip("kubernetes.client")
H100 = ["h100-0", "h100-1", "h100-2", "h100-3"]
GROUP = {"scheduling.x-k8s.io/pod-group": "rs"}
PKEY = "ml/rs@8"


@pytest.fixture()
def api():
    with FakeAPIServer() as a:
        for n in H100:
            a.add_node(node(n))
        yield a


@pytest.fixture()
def client(api, tmp_path):
    kubeconfig = api.write_kubeconfig(tmp_path / "config")
    with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5",
                         "--watch-resync-s", "0"]) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        yield c


def plan(c: httpx.Client) -> dict | None:
    return c.get("/v1/state").json()["gang_plans"].get(PKEY)


def filtered(c: httpx.Client, p: dict) -> list[str]:
    res = c.post("/scheduler/filter", json={"Pod": p, "NodeNames": H100}).json()
    assert not res["Error"], res
    return res["NodeNames"]


def bind(c: httpx.Client, p: dict, where: str) -> str:
    m = p["metadata"]
    return c.post("/scheduler/bind", json={"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"],
                                           "Node": where}).json()["Error"]


def pod_group_events(c: httpx.Client) -> dict:
    return c.get("/v1/info").json()["watch"]["pod_groups"]["podgroups.scheduling.x-k8s.io"]["events"]


def test_a_min_member_change_drops_the_plan_and_plans_again_for_the_members_left(api, client):
    c = client
    api.add_pod_group(*SP, "ml", "rs", 2)
    members = [api.add_pod(pod(f"rs-{i}", 8, labels=GROUP)) for i in range(4)]
    until(lambda: c.get("/v1/info").json()["watch"]["pod_groups"]["podgroups.scheduling.x-k8s.io"]["objects"] == 1)
    # minMember 2: a plan of 2 slots
    first = filtered(c, members[0])
    p = plan(c)
    assert p["size"] == 2 and sum(p["slots"].values()) == 2 and sorted(first) == sorted(n for n, k in p["slots"].items() if k)
    # minMember 3 before any member is bound: the plan of 2 binds no one, and is dropped
    api.add_pod_group(*SP, "ml", "rs", 3)
    until(lambda: pod_group_events(c).get("MODIFIED", 0) >= 1)  # the service has seen it
    assert "is now 3 pods of 8 GPUs, its plan was made for 2" in bind(c, members[0], first[0])
    assert api.node_of("ml", "rs-0") is None
    assert plan(c) is None
    # filtered again: a plan of 3, and the member binds into it
    nodes = filtered(c, members[0])
    p = plan(c)
    assert p["size"] == 3 and sum(p["slots"].values()) == 3 and len(nodes) == 3
    assert bind(c, members[0], nodes[0]) == ""
    assert api.node_of("ml", "rs-0") == nodes[0]
    # minMember 2 with one member bound: the next member plans again for 2 - 1 = 1 pod
    api.add_pod_group(*SP, "ml", "rs", 2)

    def replanned():
        filtered(c, members[1])
        q = plan(c)
        return q is not None and q["size"] == 2 and q
    q = until(replanned)
    assert sum(q["slots"].values()) == 1
    (where,) = [n for n, k in q["slots"].items() if k]
    assert bind(c, members[1], where) == ""
    until(lambda: plan(c) is None)  # every slot bound: the plan ends
    assert api.node_of("ml", "rs-1") == where


def test_without_a_size_change_the_plan_stands(api, client):
    c = client
    api.add_pod_group(*SP, "ml", "rs", 3)
    members = [api.add_pod(pod(f"rs-{i}", 8, labels=GROUP)) for i in range(3)]
    until(lambda: c.get("/v1/info").json()["watch"]["pod_groups"]["podgroups.scheduling.x-k8s.io"]["objects"] == 1)
    nodes = filtered(c, members[0])
    slots = plan(c)["slots"]
    assert len(nodes) == 3
    for m, where in zip(members, nodes):
        assert sorted(filtered(c, m)) == sorted(n for n, k in plan(c)["slots"].items() if k)  # the same plan, fewer open slots
        assert bind(c, m, where) == ""
    assert sorted(api.node_of("ml", m["metadata"]["name"]) for m in members) == sorted(n for n, k in slots.items() if k)
    until(lambda: plan(c) is None)
