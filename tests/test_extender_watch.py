"""State from the API server (--watch) and leader election (--leader-elect): real service
processes against service.testing.FakeAPIServer on 127.0.0.1, reached through a kubeconfig by the
official `kubernetes` client as in production.

The watch: nodes mapped by name and by a topology-rack label, a node added later, a pod bound and
deleted (occupancy and scores follow), a watch expiry (410) answered by a re-list while the last
state keeps serving, PUT /v1/state refused. PodGroups watched: one created, updated or deleted
after the start changes the gang size planned (no GET per request); a PodGroup CRD that is not
installed (404) is reported once and the rest goes on. Leader election: two replicas, one Lease, exactly one
leader, the follower refuses to bind, failover when the leader stops renewing (SIGSTOP), the new
leader binds, the old one comes back a follower; and optimistic concurrency on the Lease."""

from __future__ import annotations

import os
import re
import signal
import time

import httpx
import pytest

from service.testing import FakeAPIServer, ServiceProcess

k8s = pytest.importorskip("kubernetes.client")
wire = k8s.ApiClient().sanitize_for_serialization
CLUSTER = "mixed-64gpu"
RACK = "cloud.provider.com/topology-rack"
SP = ("scheduling.x-k8s.io", "v1alpha1")  # scheduler-plugins PodGroups
VC = ("scheduling.volcano.sh", "v1beta1")  # Volcano PodGroups


def node(name: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3", labels: dict | None = None) -> dict:
    meta = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "kubernetes.io/hostname": name, **(labels or {})}
    return wire(k8s.V1Node(api_version="v1", kind="Node", metadata=k8s.V1ObjectMeta(name=name, labels=meta),
                           status=k8s.V1NodeStatus(allocatable={"nvidia.com/gpu": str(gpus), "cpu": "96"})))


def pod(name: str, gpus: int, node_name: str | None = None, namespace: str = "ml", labels: dict | None = None,
        phase: str = "Running", annotations: dict | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    c = k8s.V1Container(name="main", image="trainer:1", resources=k8s.V1ResourceRequirements(limits=limits, requests=limits))
    meta = k8s.V1ObjectMeta(name=name, namespace=namespace, labels=labels, annotations=annotations)
    return wire(k8s.V1Pod(api_version="v1", kind="Pod", metadata=meta,
                          spec=k8s.V1PodSpec(containers=[c], node_name=node_name),
                          status=k8s.V1PodStatus(phase=phase if node_name else "Pending")))


def names_args(p: dict, names: list[str]) -> dict:
    """ExtenderArgs as kube-scheduler sends them with nodeCacheCapable: true."""
    return {"Pod": p, "Nodes": None, "NodeNames": names}


def until(what, timeout_s: float = 20.0, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what.__doc__ or what}")
        time.sleep(every_s)


def held(c: httpx.Client) -> dict[str, list[int]]:
    """Running job id -> GPUs, as GET /v1/state shows the occupancy."""
    return {r["id"]: r["gpus"] for r in c.get("/v1/state").json()["running"]}


def gang_size(c: httpx.Client, p: dict, where: str = "h100-0") -> int:
    """The members of an 8-GPU pod's gang the service plans with, by filter on one free 8-GPU
    node: 1 when the pod is decided alone (the node passes), else N of "gang ... (N pods x 8 GPUs)
    does not fit" (one node holds no gang of two or more, so no plan is ever made here)."""
    res = c.post("/scheduler/filter", json=names_args(p, [where])).json()
    if res["NodeNames"] == [where]:
        return 1
    m = re.search(r"\((\d+) pods x 8 GPUs\) does not fit", (res["FailedNodes"] or {}).get(where, ""))
    assert m, res
    return int(m.group(1))


# ---------------------------------------------------------------------- the watch


@pytest.fixture(scope="module")
def api():
    with FakeAPIServer() as a:
        # h100-0, h100-1 by name; one node named as in EC2, placed by its rack label under leaf0
        a.add_node(node("h100-0"))
        a.add_node(node("h100-1"))
        a.add_node(node("ip-10-0-3-17.ec2.internal", labels={RACK: "leaf0"}))
        yield a


@pytest.fixture(scope="module")
def svc(api, tmp_path_factory):
    kubeconfig = api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5",
                         "--watch-resync-s", "0"]) as s:
        yield s


@pytest.fixture()
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        yield c


def test_nodes_are_mapped_by_name_and_label_and_a_node_added_is_picked_up(api, client):
    info = client.get("/v1/info").json()
    assert info["state_source"] == "watch" and info["watch"]["synced"]
    assert info["watch"]["mapped_nodes"] == 3
    # The EC2-named node stands for h100-2 (the first free H100 node under leaf0): an 8-GPU H100
    # pod is decided on it by the policy (score 10), a pod bound to it holds h100-2's GPUs.
    p = pod("probe", 8)
    (score,) = client.post("/scheduler/prioritize", json=names_args(p, ["ip-10-0-3-17.ec2.internal"])).json()
    assert score["Score"] == 10
    # A node not yet in the API server is unknown: names only, nothing known, score 0.
    new = "ip-10-0-9-9.ec2.internal"
    (score,) = client.post("/scheduler/prioritize", json=names_args(pod("probe-2", 8), [new])).json()
    assert score["Score"] == 0
    api.add_node(node(new, labels={RACK: "leaf0"}))
    until(lambda: client.get("/v1/info").json()["watch"]["mapped_nodes"] == 4)
    (score,) = client.post("/scheduler/prioritize", json=names_args(pod("probe-3", 8), [new])).json()
    assert score["Score"] == 10
    api.delete_node(new)
    until(lambda: client.get("/v1/info").json()["watch"]["mapped_nodes"] == 3)


def test_a_pod_bound_and_deleted_changes_the_occupancy_and_the_scores(api, client):
    ec2 = "ip-10-0-3-17.ec2.internal"
    first_h100_2 = 16  # mixed-64gpu: h100-2's GPUs are 16..23
    ok = client.post("/scheduler/filter", json=names_args(pod("want", 8), [ec2, "h100-0"])).json()
    assert ok["NodeNames"] == [ec2, "h100-0"]
    api.add_pod(pod("busy", 6, node_name=ec2))
    api.add_pod(pod("busy-2", 2, node_name="h100-0"))
    until(lambda: set(held(client)) == {"ml/busy", "ml/busy-2"})
    state = held(client)
    assert state["ml/busy"] == list(range(first_h100_2, first_h100_2 + 6)) and len(state["ml/busy-2"]) == 2
    res = client.post("/scheduler/filter", json=names_args(pod("want-2", 8), [ec2, "h100-0"])).json()
    assert res["NodeNames"] == [] and set(res["FailedNodes"]) == {ec2, "h100-0"}
    scores = {s["Host"]: s["Score"] for s in client.post("/scheduler/prioritize", json=names_args(pod("want-3", 4), [ec2, "h100-0"])).json()}
    assert scores[ec2] == 0 and scores["h100-0"] == 10  # 2 GPUs free on the EC2 node, 6 on h100-0
    # a pod that finished holds nothing; a deleted one is gone
    api.update_pod("ml", "busy-2", lambda p: p["status"].update(phase="Succeeded"))
    api.delete_pod("ml", "busy")
    until(lambda: held(client) == {})
    res = client.post("/scheduler/filter", json=names_args(pod("want-4", 8), [ec2, "h100-0"])).json()
    assert res["NodeNames"] == [ec2, "h100-0"]
    api.delete_pod("ml", "busy-2")


def test_a_gang_running_is_one_job_and_its_members_count_as_bound(api, client):
    group = {"scheduling.x-k8s.io/pod-group": "llm"}
    api.add_pod(pod("llm-0", 8, node_name="h100-0", labels=group))
    api.add_pod(pod("llm-1", 8, node_name="h100-1", labels=group))
    until(lambda: "ml/llm@8" in held(client))
    assert len(held(client)["ml/llm@8"]) == 16
    info = client.get("/v1/info").json()["watch"]
    assert info["pods_holding_gpus"] == 2 and info["gpus_held"] == 16
    for n in ("llm-0", "llm-1"):
        api.delete_pod("ml", n)
    until(lambda: held(client) == {})


def test_a_bound_pod_whose_scheduling_annotations_cannot_be_read_still_holds_its_gpus(api, svc, client):
    """A pod the kubelet runs holds its GPUs whatever its annotations say: counted with the
    defaults of what cannot be read, each bad annotation warned of once; a pending pod with the
    same annotations is still refused, naming the annotation."""
    both = {"kueue.x-k8s.io/podset-required-topology": RACK, "kueue.x-k8s.io/podset-preferred-topology": RACK}
    api.add_pod(pod("odd-topology", 8, node_name="h100-0", annotations=both))
    api.add_pod(pod("odd-class", 8, node_name="h100-1", annotations={"gangsched.io/priority": "urgent", "gangsched.io/kind": "x"}))
    until(lambda: held(client).keys() == {"ml/odd-topology", "ml/odd-class"})
    state = {r["id"]: r for r in client.get("/v1/state").json()["running"]}
    assert state["ml/odd-topology"]["gpus"] == list(range(0, 8)) and state["ml/odd-class"]["gpus"] == list(range(8, 16))
    assert state["ml/odd-class"]["kind"] == "finetune" and state["ml/odd-class"]["priority"] == 1  # the defaults (normal)
    info = client.get("/v1/info").json()["watch"]
    assert info["pods_holding_gpus"] == 2 and info["gpus_held"] == 16
    # an 8-GPU pod finds both nodes full, and prioritize scores neither
    res = client.post("/scheduler/filter", json=names_args(pod("want-6", 8), ["h100-0", "h100-1"])).json()
    assert res["NodeNames"] == [] and set(res["FailedNodes"]) == {"h100-0", "h100-1"}
    scores = client.post("/scheduler/prioritize", json=names_args(pod("want-7", 8), ["h100-0", "h100-1"])).json()
    assert [s["Score"] for s in scores] == [0, 0]
    # the same annotations on a pod being decided: refused, naming the annotation
    res = client.post("/scheduler/filter", json=names_args(pod("want-8", 8, annotations=both), ["h100-0"])).json()
    assert "kueue.x-k8s.io/podset-preferred-topology" in res["Error"] and "not both" in res["Error"]
    # more changes derive the state again: each warning still logged once, naming the pod and the annotation
    api.add_pod(pod("other", 8, node_name="ip-10-0-3-17.ec2.internal"))
    until(lambda: "ml/other" in held(client))
    log = svc.output()
    for who, what in (("ml/odd-topology", "podset-preferred-topology]"), ("ml/odd-class", "gangsched.io/priority]"),
                      ("ml/odd-class", "gangsched.io/kind]")):
        lines = [line for line in log.splitlines() if f"Pod {who}.metadata.annotations[" in line and what in line]
        assert len(lines) == 1 and "GPUs counted" in lines[0], lines
    for n in ("odd-topology", "odd-class", "other"):
        api.delete_pod("ml", n)
    until(lambda: held(client) == {})


def test_a_watch_expiry_forces_a_relist_and_the_last_state_serves_meanwhile(api, client):
    api.add_pod(pod("kept", 8, node_name="h100-0"))
    until(lambda: "ml/kept" in held(client))
    lists = api.count("GET", "/api/v1/pods", "") - api.count("GET", "/api/v1/pods", "watch=")
    api.list_gate.clear()  # the re-list waits: the service has only what it had
    try:
        api.expire_watches()
        api.add_pod(pod("gap", 8, node_name="h100-1"))  # happens while no watch is open
        time.sleep(1.0)
        assert held(client).keys() == {"ml/kept"}  # nothing lost while the list is held back
        res = client.post("/scheduler/filter", json=names_args(pod("want-5", 8), ["h100-0"])).json()
        assert res["FailedNodes"].keys() == {"h100-0"}
    finally:
        api.list_gate.set()
    until(lambda: held(client).keys() == {"ml/kept", "ml/gap"})
    assert api.count("GET", "/api/v1/pods", "") - api.count("GET", "/api/v1/pods", "watch=") > lists
    metrics = client.get("/metrics").text
    assert 'gangsched_watch_lists_total{reason="expired",resource="pods"}' in metrics
    # and the watch goes on from the new list
    api.delete_pod("ml", "gap")
    until(lambda: held(client).keys() == {"ml/kept"})
    api.delete_pod("ml", "kept")
    until(lambda: held(client) == {})


def test_pushed_state_is_refused_when_the_watch_is_on(client):
    r = client.put("/v1/state", json={"time_s": 0.0})
    assert r.status_code == 409 and "--watch" in r.json()["detail"]
    assert client.delete("/v1/bindings/ml/x").status_code == 409


# ---------------------------------------------------------------------- PodGroups watched


def test_a_pod_group_created_after_the_start_sizes_the_gang_from_the_watch(api, client):
    """Both kinds (scheduler-plugins, Volcano): no PodGroup, the pod is decided alone; the
    PodGroup created later sets the gang size, read from the watched cache (no GET of it)."""
    sp = pod("sp-0", 8, labels={"scheduling.x-k8s.io/pod-group": "sp"})
    vc = pod("vc-0", 8, labels={"scheduling.volcano.sh/group-name": "vc"})
    assert gang_size(client, sp) == 1 and gang_size(client, vc) == 1
    api.add_pod_group(*SP, "ml", "sp", 3)
    api.add_pod_group(*VC, "ml", "vc", 4)
    until(lambda: gang_size(client, sp) == 3)
    until(lambda: gang_size(client, vc) == 4)
    info = client.get("/v1/info").json()["watch"]["pod_groups"]
    for resource in ("podgroups.scheduling.x-k8s.io", "podgroups.scheduling.volcano.sh"):
        assert info[resource]["listed"] and not info[resource]["missing"] and info[resource]["events"]["ADDED"] >= 1
    assert api.count("GET", "/apis/", "/podgroups/") == 0  # never a GET of one PodGroup
    metrics = client.get("/metrics").text
    assert 'gangsched_watch_synced{resource="podgroups.scheduling.volcano.sh"} 1.0' in metrics
    api.delete_pod_group(*SP, "ml", "sp")
    api.delete_pod_group(*VC, "ml", "vc")


def test_a_pod_group_min_member_update_is_seen(api, client):
    p = pod("upd-0", 8, labels={"scheduling.x-k8s.io/pod-group": "upd"})
    api.add_pod_group(*SP, "ml", "upd", 3)
    until(lambda: gang_size(client, p) == 3)
    api.add_pod_group(*SP, "ml", "upd", 5)  # the same PodGroup, minMember 5: MODIFIED
    until(lambda: gang_size(client, p) == 5)
    # its watch expired (410): the kind is listed again and a change made meanwhile is seen
    api.expire_watches()
    api.add_pod_group(*SP, "ml", "upd", 6)
    until(lambda: gang_size(client, p) == 6)
    info = client.get("/v1/info").json()["watch"]["pod_groups"]["podgroups.scheduling.x-k8s.io"]
    assert info["lists"].get("expired", 0) >= 1 and info["healthy"]
    api.delete_pod_group(*SP, "ml", "upd")


def test_a_deleted_pod_group_falls_back_to_the_pods_min_member_annotation(api, client):
    p = pod("del-0", 8, labels={"scheduling.volcano.sh/group-name": "del"},
            annotations={"scheduling.volcano.sh/group-min-member": "2"})
    assert gang_size(client, p) == 2  # no PodGroup: the annotation
    api.add_pod_group(*VC, "ml", "del", 4)
    until(lambda: gang_size(client, p) == 4)  # the PodGroup's minMember comes first
    api.delete_pod_group(*VC, "ml", "del")
    until(lambda: gang_size(client, p) == 2)
    assert api.count("GET", "/apis/", "/podgroups/") == 0


def test_a_missing_pod_group_crd_is_reported_once_and_nodes_and_pods_are_still_watched(tmp_path):
    """Only the scheduler-plugins CRD installed: the Volcano kind's list answers 404. The service
    gets ready, reports it (one log line, /v1/info missing), watches Nodes, Pods and the other
    kind as ever, sizes a Volcano gang by its annotation, and lists the kind again at the re-list
    period: the CRD installed later is picked up."""
    with FakeAPIServer(crds=[SP]) as api:
        api.add_node(node("h100-0"))
        api.add_node(node("h100-1"))
        kubeconfig = api.write_kubeconfig(tmp_path / "config")
        with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5",
                             "--watch-resync-s", "1"]) as s, httpx.Client(base_url=s.url, timeout=30) as c:
            info = c.get("/v1/info").json()["watch"]
            assert info["synced"] and info["mapped_nodes"] == 2
            vc_info, sp_info = info["pod_groups"]["podgroups.scheduling.volcano.sh"], info["pod_groups"]["podgroups.scheduling.x-k8s.io"]
            assert vc_info["missing"] and not vc_info["listed"] and vc_info["healthy"]
            assert sp_info["listed"] and not sp_info["missing"]
            api.add_pod(pod("busy", 8, node_name="h100-1"))  # Pods are watched
            until(lambda: "ml/busy" in held(c))
            api.add_node(node("h100-2"))  # and Nodes
            until(lambda: c.get("/v1/info").json()["watch"]["mapped_nodes"] == 3)
            sp = pod("sp-0", 8, labels={"scheduling.x-k8s.io/pod-group": "sp"})
            api.add_pod_group(*SP, "ml", "sp", 3)  # the other kind is watched
            until(lambda: gang_size(c, sp) == 3)
            vc = pod("vc-0", 8, labels={"scheduling.volcano.sh/group-name": "vc"},
                     annotations={"scheduling.volcano.sh/group-min-member": "2"})
            assert gang_size(c, vc) == 2
            vc_lists = api.count("GET", "/apis/scheduling.volcano.sh/v1beta1/podgroups")
            until(lambda: api.count("GET", "/apis/scheduling.volcano.sh/v1beta1/podgroups") >= vc_lists + 2)  # retried
            assert s.output().count("podgroups.scheduling.volcano.sh: the API server answered 404") == 1  # reported once
            api.install_crd(*VC)
            api.add_pod_group(*VC, "ml", "vc", 4)
            until(lambda: gang_size(c, vc) == 4)
            vc_info = c.get("/v1/info").json()["watch"]["pod_groups"]["podgroups.scheduling.volcano.sh"]
            assert vc_info["listed"] and not vc_info["missing"] and vc_info["objects"] == 1
            assert "ml/busy" in held(c)


# ---------------------------------------------------------------------- leader election


def replica(kubeconfig: str, identity: str) -> ServiceProcess:
    return ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--leader-elect",
                           "--leader-elect-lease", "gangsched-system/gangsched", "--leader-elect-identity", identity,
                           "--leader-elect-lease-duration-s", "3", "--leader-elect-renew-deadline-s", "2",
                           "--leader-elect-retry-period-s", "0.5"], ready_path="/healthz")


def leading(s: ServiceProcess) -> bool:
    return s.get("/v1/info")[1]["leader_election"]["leader"]


def schedule(c: httpx.Client, api: FakeAPIServer, name: str, where: str) -> dict:
    """filter then bind, as kube-scheduler does, for a pod created in the API server."""
    p = api.add_pod(pod(name, 8))
    c.post("/scheduler/filter", json=names_args(p, [where]))
    m = p["metadata"]
    return c.post("/scheduler/bind", json={"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"],
                                           "Node": where}).json()


def test_two_replicas_one_leader_failover_and_the_new_leader_binds(tmp_path):
    with FakeAPIServer() as api:
        for n in ("h100-0", "h100-1", "h100-2", "h100-3"):
            api.add_node(node(n))
        kubeconfig = api.write_kubeconfig(tmp_path / "config")
        with replica(kubeconfig, "replica-a") as a, replica(kubeconfig, "replica-b") as b:
            until(lambda: leading(a) or leading(b))
            for _ in range(10):  # exactly one, over time
                assert [leading(a), leading(b)].count(True) == 1
                time.sleep(0.1)
            leader, follower = (a, b) if leading(a) else (b, a)
            lease = api.lease("gangsched-system", "gangsched")["spec"]
            name = {a: "replica-a", b: "replica-b"}
            assert lease["holderIdentity"] == name[leader] and lease["leaseDurationSeconds"] == 3
            transitions = lease["leaseTransitions"]
            assert leader.get("/readyz")[0] == 200 and follower.get("/readyz")[0] == 503
            with httpx.Client(base_url=follower.url, timeout=30) as fc, httpx.Client(base_url=leader.url, timeout=30) as lc:
                got = schedule(fc, api, "on-follower", "h100-0")
                assert "follower" in got["Error"] and api.node_of("ml", "on-follower") is None
                assert schedule(lc, api, "on-leader", "h100-1") == {"Error": ""}
                assert api.node_of("ml", "on-leader") == "h100-1"
                # the follower's state comes from the watch: it sees the leader's bind
                until(lambda: "ml/on-leader" in held(fc))
                # the leader stops renewing (paused): the follower takes over after the lease expires
                os.kill(leader.proc.pid, signal.SIGSTOP)
                try:
                    until(lambda: leading(follower), timeout_s=15)
                    lease = api.lease("gangsched-system", "gangsched")["spec"]
                    assert lease["holderIdentity"] == name[follower] and lease["leaseTransitions"] == transitions + 1
                    assert follower.get("/readyz")[0] == 200
                    assert schedule(fc, api, "after-failover", "h100-2") == {"Error": ""}
                    assert api.node_of("ml", "after-failover") == "h100-2"
                finally:
                    os.kill(leader.proc.pid, signal.SIGCONT)
                # the old leader comes back a follower: it does not bind
                until(lambda: leader.get("/v1/info")[1]["leader_election"]["holder"] == name[follower])
                assert not leading(leader) and leader.get("/readyz")[0] == 503
                got = schedule(lc, api, "on-old-leader", "h100-3")
                assert "follower" in got["Error"] and api.node_of("ml", "on-old-leader") is None
                assert [leading(a), leading(b)].count(True) == 1


def test_the_lease_is_written_with_optimistic_concurrency(tmp_path):
    """A replica that read the Lease before another renewed it cannot overwrite it (409)."""
    from service.kube import KubeAPI
    from service.leader import LeaderElector

    with FakeAPIServer() as api:
        kube = KubeAPI.connect(api.write_kubeconfig(tmp_path / "config"))
        a = LeaderElector(kube, "gangsched-system", "lease", "a", 3, 2, 0.5)
        assert a.try_acquire_or_renew() and api.lease("gangsched-system", "lease")["spec"]["holderIdentity"] == "a"
        a.step()
        assert a.is_leader()
        later = [1000.0]
        b = LeaderElector(kube, "gangsched-system", "lease", "b", 3, 2, 0.5, clock=lambda: later[0])
        assert not b.try_acquire_or_renew()  # held by a, first seen now
        later[0] += 10  # b's clock: a's lease looks expired
        put = b.api.replace_namespaced_lease

        def renew_first(*args, **kwargs):  # a renews between b's read and b's write
            a.step()
            return put(*args, **kwargs)

        b.api.replace_namespaced_lease = renew_first
        assert not b.try_acquire_or_renew() and "409" in b.last_error
        assert api.lease("gangsched-system", "lease")["spec"]["holderIdentity"] == "a" and a.is_leader()
        b.api.replace_namespaced_lease = put
        a.release()  # a gives the lease up: b takes it at once, one transition more
        assert api.lease("gangsched-system", "lease")["spec"]["holderIdentity"] == ""
        assert b.try_acquire_or_renew()
        spec = api.lease("gangsched-system", "lease")["spec"]
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        # a leader that has not renewed within its renew deadline no longer acts as leader, even
        # before its next try (a paused process, an API server it cannot reach)
        b.step()
        assert b.is_leader()
        later[0] += 2.5
        assert not b.is_leader()
        api.refuse_leases = True
        b.step()
        assert not b.is_leader() and "503" in b.last_error


def test_no_decision_before_the_first_list_and_the_last_state_serves_when_the_api_server_is_gone(tmp_path):
    api = FakeAPIServer().__enter__()
    try:
        api.add_node(node("h100-0"))
        api.add_pod(pod("busy", 8, node_name="h100-0"))
        api.list_gate.clear()
        kubeconfig = api.write_kubeconfig(tmp_path / "config")
        with ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5"],
                            ready_path="/healthz") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            assert s.get("/readyz")[0] == 503
            res = c.post("/scheduler/filter", json=names_args(pod("early", 8), ["h100-0"])).json()
            assert "not yet listed" in res["Error"] and res["NodeNames"] is None
            assert c.post("/scheduler/prioritize", json=names_args(pod("early", 8), ["h100-0"])).status_code == 400
            api.list_gate.set()
            until(lambda: s.get("/readyz")[0] == 200)
            assert "ml/busy" in held(c)
            api.__exit__(None, None, None)  # the API server goes away
            until(lambda: not c.get("/v1/info").json()["watch"]["pods"]["healthy"])
            assert "gangsched_watch_healthy{resource=\"pods\"} 0.0" in c.get("/metrics").text
            assert "ml/busy" in held(c) and s.get("/readyz")[0] == 200  # the last state keeps serving
            res = c.post("/scheduler/filter", json=names_args(pod("late", 8), ["h100-0"])).json()
            assert res["FailedNodes"].keys() == {"h100-0"}
    finally:
        api.list_gate.set()
        api.__exit__(None, None, None)
