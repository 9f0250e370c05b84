"""Kueue's PodSet slices (`kueue.x-k8s.io/podset-slice-required-topology` +
`kueue.x-k8s.io/podset-slice-size`) in the extender's gang planning: a real service process
(--watch, the binpack baseline, the four-rack GB200 NVL72 cluster) against
service.testing.FakeAPIServer on 127.0.0.1, reached through a kubeconfig by the official
`kubernetes` client, as tests/test_extender_topology.py.

The cluster as the API server shows it: 72 trays of 4 GPUs, 18 a rack, each rack one NVLink
domain (one block of the model); every node carries GFD's `nvidia.com/gpu.clique` (one clique a
rack), Kueue's rack and block labels (racks 0-1 in block0, 2-3 in block1) and a half-rack label
(9 trays each: half0..half7, a level finer than the blocks). Busy pods hold
gb-000..gb-015 (rack 0 keeps 2 free trays), gb-018..gb-029 (rack 1 keeps 6) and gb-036 (rack 2
keeps 17). gb-071 (rack 3) carries rack 2's clique: a contradiction of the topology file. Each
test deletes the pods it created and leaves no gang plan (a plan ends once all its slots are
bound), so the tests hold in any order; a test that fails leaves its plan behind, and the tests
after it in the same process may fail for that.

Seen failing, one break at a time: the segment request left out of the gang's job in filter
(its slices straddle racks) and in preempt, slices ignored by preempt, every slice level planned
as the whole gang in one domain (the 20-pod gang is refused), slice levels whose domains are not
blocks passed as segments (the hostname gang is planned across trays), a contradicting clique
tray kept, the slice size's divisibility not checked, either slice annotation accepted
without the other, the annotations' errors not raised for a pod decided, or raised by parse_pod (the watch then drops busy-36: the module's fixture
never sees all busy pods, every test errors). Members bound in part of a slice: the members
completing it planned in another rack (the completion and the full-rack tests fail), or in any
rack the slices may use (both fail), its trays not held when the whole slices are planned (the
rack 1 test: a tray planned twice), the completing members left out of the plan (6 slots
expected, 4 planned), the members left of a whole-gang-in-one-domain form not confined to the
bound members' domain (the half-rack test: planned in half1).
"""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from service.domains import CLIQUE_LABEL
from service.testing import FakeAPIServer
from tests.helpers import filter_and_bind

k8s = pytest.importorskip("kubernetes.client")
wire = k8s.ApiClient().sanitize_for_serialization

CLUSTER = "gb200-nvl72-4rack"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
HALF = "example.com/half-rack"  # half a rack: 9 trays, a level finer than the blocks
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_LEVEL, SLICE_SIZE = "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"
FABRIC = "4f3d7c1e-2a9b-4c8d-9e0f-1a2b3c4d5e6f"
NODE_NAMES = [f"gb-{i:03d}" for i in range(72)]
BUSY = [*range(16), *range(18, 30), 36]
CONFLICT = "gb-071"  # in rack 3 by the topology file, labelled with rack 2's clique


def rack_of(name: str) -> int:
    return int(name.split("-")[1]) // 18


def node(name: str) -> dict:
    rack = rack_of(name)
    meta = {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.count": "4", HOSTNAME: name,
            CLIQUE_LABEL: f"{FABRIC}.{(2 if name == CONFLICT else rack) + 1}", RACK: f"rack{rack}", BLOCK: f"block{rack // 2}",
            HALF: f"half{int(name.split('-')[1]) // 9}"}
    return wire(k8s.V1Node(api_version="v1", kind="Node", metadata=k8s.V1ObjectMeta(name=name, labels=meta),
                           status=k8s.V1NodeStatus(allocatable={"nvidia.com/gpu": "4", "cpu": "144"})))


def pod(name: str, gpus: int = 4, node_name: str | None = None, labels: dict | None = None,
        annotations: dict | None = None, priority: int | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    c = k8s.V1Container(name="main", image="trainer:1", resources=k8s.V1ResourceRequirements(limits=limits, requests=limits))
    return wire(k8s.V1Pod(api_version="v1", kind="Pod",
                          metadata=k8s.V1ObjectMeta(name=name, namespace="ml", labels=labels, annotations=annotations),
                          spec=k8s.V1PodSpec(containers=[c], node_name=node_name, priority=priority),
                          status=k8s.V1PodStatus(phase="Running" if node_name else "Pending")))


def gang(group: str, size: int, notes: dict | None = None, gpus: int = 4, priority: int | None = None) -> list[dict]:
    """`size` pods of `gpus` GPUs of one group, with the annotations `notes`."""
    notes = {"gangsched.io/gang-size": str(size), **(notes or {})}
    return [pod(f"{group}-{k}", gpus, labels={"scheduling.x-k8s.io/pod-group": group}, annotations=notes, priority=priority)
            for k in range(size)]


def sliced(level: str, size, **more) -> dict:
    return {SLICE_LEVEL: level, SLICE_SIZE: str(size), **more}


@pytest.fixture(scope="module")
def api():
    with FakeAPIServer() as a:
        for name in NODE_NAMES:
            a.add_node(node(name))
        for i in BUSY:
            # busy-36: a slice level without a size (KEP-2724's JobSet default, which Kueue does not apply), running
            a.add_pod(pod(f"busy-{i}", node_name=f"gb-{i:03d}", annotations={SLICE_LEVEL: RACK} if i == 36 else None))
        yield a


@pytest.fixture(scope="module")
def client(api, tmp_path_factory):
    with api.watching_service(tmp_path_factory.mktemp("kube"), "--cluster", CLUSTER, "--baseline", "binpack") as svc:
        with httpx.Client(base_url=svc.url, timeout=60) as c:
            deadline = time.monotonic() + 30
            while len(c.get("/v1/state").json().get("running", [])) < len(BUSY):
                assert time.monotonic() < deadline, "the busy pods never showed in the occupancy"
                time.sleep(0.1)
            yield c


def filter_first(c: httpx.Client, api: FakeAPIServer, members: list[dict]) -> dict:
    """The first member created (in place: it carries its UID from here on) and filtered."""
    members[0] = api.add_pod(members[0])
    return c.post("/scheduler/filter", json={"Pod": members[0], "NodeNames": NODE_NAMES}).json()


def plan_of(c: httpx.Client, key: str) -> dict | None:
    return c.get("/v1/state").json()["gang_plans"].get(key)


def release(c: httpx.Client, api: FakeAPIServer, members: list[dict]) -> None:
    """The members deleted, and the service's occupancy back to the busy pods alone, with no gang
    plan: each test leaves the cluster as it found it."""
    for p in members:
        api.delete_pod("ml", p["metadata"]["name"])
    deadline = time.monotonic() + 30
    while len(c.get("/v1/state").json()["running"]) != len(BUSY):
        assert time.monotonic() < deadline, "the deleted members never left the occupancy"
        time.sleep(0.1)
    assert c.get("/v1/state").json()["gang_plans"] == {}


def pods_per_rack(slots: dict[str, int]) -> Counter:
    per: Counter = Counter()
    for n, k in slots.items():
        per[rack_of(n)] += k
    return per


def test_a_sliced_gang_spans_racks_with_every_slice_inside_one_nvlink_domain_where_the_plain_gang_straddles(api, client):
    # 20 pods x 4 GPUs: more than a rack's 18 trays. Without slices the policy (binpack) takes the
    # tightest racks first (rack 0's 2 free trays, rack 1's 6, then rack 2): some rack holds a
    # number of pods that is no multiple of 4.
    plain = gang("plain", 20)
    where = filter_and_bind(client, api, plain, NODE_NAMES)
    per = Counter(rack_of(n) for n in where)
    assert len(set(where)) == 20 and len(per) > 1 and any(k % 4 for k in per.values()), per
    release(client, api, plain)
    # The same gang in slices of 4 pods, each inside one NVLink clique: it spans racks too, but
    # every rack it lands in takes whole slices, all of one clique; the plan says so.
    members = gang("sliced", 20, sliced(CLIQUE_LABEL, 4))
    res = filter_first(client, api, members)
    assert res["Error"] == "" and res["NodeNames"], res
    plan = plan_of(client, "ml/sliced@4")
    assert plan["slices"].startswith(f"5 slices of 4 pods (16 GPUs) each inside one {CLIQUE_LABEL} domain "
                                     f"({SLICE_LEVEL}), as segment_gpus 16: "), plan
    where = filter_and_bind(client, api, members, NODE_NAMES)
    per = Counter(rack_of(n) for n in where)
    assert len(set(where)) == 20 and len(per) > 1 and all(k % 4 == 0 for k in per.values()), per
    assert per == pods_per_rack(plan["slots"])
    cliques = {n: api.nodes[n]["metadata"]["labels"][CLIQUE_LABEL] for n in where}
    assert all(len({cliques[n] for n in where if rack_of(n) == r}) == 1 for r in per)
    release(client, api, members)


def test_a_tray_whose_clique_contradicts_the_topology_takes_no_clique_slice(api, client):
    # One slice of 18 pods is a whole NVLink domain. Rack 2 has 17 free trays; rack 3 has 18, but
    # gb-071's clique label is rack 2's: set apart, as for a clique topology request, so no clique
    # domain holds the slice and no node passes.
    refused = gang("rackful", 18, sliced(CLIQUE_LABEL, 18))
    res = filter_first(client, api, refused)
    assert res["Error"] == "" and res["NodeNames"] == [], res
    reasons = set(res["FailedNodes"].values())
    assert len(reasons) == 1 and "does not fit the free GPUs of the offered nodes as slices of 18 pods" in reasons.pop()
    assert plan_of(client, "ml/rackful@4") is None
    # The rack label, which gb-071 carries as rack3 like the rest of rack 3, takes rack 3 whole.
    members = gang("rackful-by-rack", 18, sliced(RACK, 18))
    assert sorted(filter_and_bind(client, api, members, NODE_NAMES)) == NODE_NAMES[54:]
    release(client, api, refused[:1] + members)


def test_a_slice_level_whose_domains_are_not_blocks_keeps_the_whole_gang_in_one_domain(api, client):
    # kubernetes.io/hostname: a tray is no block of the model, so the gang's slices are kept by
    # planning the whole gang on one node: 2 pods x 2 GPUs on one tray...
    pair = gang("pair", 2, sliced(HOSTNAME, 2), gpus=2)
    res = filter_first(client, api, pair)
    assert res["Error"] == "" and len(res["NodeNames"]) == 1, res
    plan = plan_of(client, "ml/pair@2")
    assert plan["slots"] == {res["NodeNames"][0]: 2}, plan
    assert plan["slices"].endswith(f": the whole gang in one {HOSTNAME} domain: node {res['NodeNames'][0]}"), plan
    assert len(set(filter_and_bind(client, api, pair, NODE_NAMES))) == 1
    # ...and 4 pods x 2 GPUs (slices of 2) fit no 4-GPU tray: no node passes, the reason names the
    # annotation and the level.
    quad = gang("quad", 4, sliced(HOSTNAME, 2), gpus=2)
    res = filter_first(client, api, quad)
    assert res["Error"] == "" and res["NodeNames"] == [], res
    reasons = set(res["FailedNodes"].values())
    assert len(reasons) == 1, reasons
    (why,) = reasons
    assert SLICE_LEVEL in why and f"one {HOSTNAME} domain" in why and "no offered domain holds it" in why, why
    assert plan_of(client, "ml/quad@2") is None
    release(client, api, pair + quad[:1])


def test_slices_with_a_required_level_stay_in_one_domain_of_it(api, client):
    # Slices of 3 pods in racks, the whole gang of 6 in one block: block0 (rack 0's 2 free trays,
    # rack 1's 6) is the smallest block that holds it, and only rack 1 holds a slice there.
    members = gang("twolevel", 6, sliced(RACK, 3, **{REQUIRED: BLOCK}))
    res = filter_first(client, api, members)
    assert res["Error"] == "" and res["NodeNames"], res
    plan = plan_of(client, "ml/twolevel@4")
    assert pods_per_rack(plan["slots"]) == {1: 6}, plan
    assert plan["topology"] == f"required {BLOCK}: {BLOCK}=block0", plan
    assert plan["slices"].startswith("2 slices of 3 pods") and plan["slices"].endswith(f": 2 in {RACK}=rack1 in block0"), plan
    assert {rack_of(n) for n in filter_and_bind(client, api, members, NODE_NAMES)} == {1}
    release(client, api, members)


def half_bound(client, api, group: str, notes: dict, size: int = 8, bind: int = 2) -> tuple[list[dict], dict, list[str]]:
    """A gang of `size` pods with the slice annotations `notes` planned, `bind` members bound, the
    plan then expired the way kube-scheduler ends it: its open nodes are no longer offered. Returns
    the members, the old plan and the nodes offered from then on (all but the old plan's)."""
    members = [api.add_pod(p) for p in gang(group, size, notes)]
    filter_and_bind(client, api, members[:bind], NODE_NAMES)
    plan = plan_of(client, f"ml/{group}@4")
    offered = [n for n in NODE_NAMES if plan["slots"].get(n, 0) == 0]
    return members, plan, offered


def test_members_left_complete_a_half_bound_slice_in_the_rack_its_members_are_in(api, client):
    # A gang of 8 in slices of 4 racks; two members bind (half a slice), then the plan's open nodes
    # are no longer offered, so the plan goes. The six left are planned again: two complete the
    # half-bound slice in the rack its members are in, four are a whole slice inside one rack.
    members, old, offered = half_bound(client, api, "partial", sliced(RACK, 4))
    first = {rack_of(api.node_of("ml", m["metadata"]["name"])) for m in members[:2]}
    assert len(first) == 1, first
    (r,) = first
    res = client.post("/scheduler/filter", json={"Pod": members[2], "NodeNames": offered}).json()
    assert res["Error"] == "" and res["NodeNames"], res
    plan = plan_of(client, "ml/partial@4")
    assert sum(plan["slots"].values()) == 6 and set(plan["slots"]) <= set(offered), plan
    per = pods_per_rack(plan["slots"])
    assert (per[r] - 2) % 4 == 0 and all(k % 4 == 0 for q, k in per.items() if q != r), (r, per)
    assert plan["slices"].endswith("; completing the slices bound in part, each in the domain its members are in: "
                                   f"2 members in {RACK}=rack{r} in block{r // 2} (2 bound there)"), plan
    assert plan["slices"].startswith("1 slices of 4 pods (16 GPUs) each inside one "), plan
    where = filter_and_bind(client, api, members[2:], offered)
    assert Counter(where) == Counter({n: k for n, k in plan["slots"].items() if k}), where
    per = Counter(rack_of(api.node_of("ml", m["metadata"]["name"])) for m in members)
    assert sum(per.values()) == 8 and all(k % 4 == 0 for k in per.values()) and per[r] >= 4, per
    assert plan_of(client, "ml/partial@4") is None  # all slots bound
    release(client, api, members)


def test_a_half_bound_slice_takes_its_rack_s_trays_before_the_whole_slices_are_planned(api, client):
    # Two members of a gang of 8 in slices of 4 racks already run on gb-030 and gb-031 (bound
    # without a plan here), leaving rack 1 four free trays. Two of them complete the half-bound
    # slice; the two left hold no slice, so the whole slice goes to another rack, though rack 1
    # would be the tightest for it (binpack) were its completing trays not held.
    notes = {"gangsched.io/gang-size": "8", **sliced(RACK, 4)}
    running = [api.add_pod(pod(f"early-{k}", node_name=f"gb-03{k}", labels={"scheduling.x-k8s.io/pod-group": "early"},
                               annotations=notes)) for k in range(2)]
    deadline = time.monotonic() + 30
    while "ml/early@4" not in {j["id"] for j in client.get("/v1/state").json()["running"]}:
        assert time.monotonic() < deadline, "the running members never showed in the occupancy"
        time.sleep(0.1)
    members = [api.add_pod(p) for p in gang("early", 8, sliced(RACK, 4))[2:]]
    res = client.post("/scheduler/filter", json={"Pod": members[0], "NodeNames": NODE_NAMES}).json()
    assert res["Error"] == "" and res["NodeNames"], res
    plan = plan_of(client, "ml/early@4")
    assert all(k == 1 for k in plan["slots"].values()) and sum(plan["slots"].values()) == 6, plan
    per = pods_per_rack(plan["slots"])
    assert per[1] == 2 and sorted(per.values()) == [2, 4], per
    where = filter_and_bind(client, api, members, NODE_NAMES)
    per = Counter(rack_of(n) for n in where + ["gb-030", "gb-031"])
    assert len(set(where)) == 6 and per[1] == 4 and sorted(per.values()) == [4, 4], per
    release(client, api, running + members)


def test_a_half_bound_slice_whose_rack_is_full_passes_no_node(api, client):
    # As above, but the half-bound slice's rack has no free tray left outside the old plan (filled by
    # other pods): the slice cannot be completed there, and it is never completed in another rack,
    # so no node passes, the reason naming the gang, the rack and the members lacking there.
    members, old, offered = half_bound(client, api, "stuck", sliced(RACK, 4))
    on = {api.node_of("ml", m["metadata"]["name"]) for m in members[:2]}
    (r,) = {rack_of(n) for n in on}
    fill = [n for n in offered if rack_of(n) == r and int(n[3:]) not in BUSY and n not in on]
    assert fill, offered
    fillers = [api.add_pod(pod(f"fill-{n}", node_name=n)) for n in fill]
    deadline = time.monotonic() + 30
    while not {f"ml/fill-{n}" for n in fill} <= {j["id"] for j in client.get("/v1/state").json()["running"]}:
        assert time.monotonic() < deadline, "the fillers never showed in the occupancy"
        time.sleep(0.1)
    res = client.post("/scheduler/filter", json={"Pod": members[2], "NodeNames": offered}).json()
    assert res["Error"] == "" and res["NodeNames"] == [], res
    reasons = set(res["FailedNodes"].values())
    assert len(reasons) == 1, reasons
    (why,) = reasons
    assert why.startswith("gang ml/stuck asks for slices of 4 pods (16 GPUs) each inside one "
                          f"{RACK} domain ({SLICE_LEVEL}): 2 of its members are bound in {RACK}=rack{r} in block{r // 2}, "
                          "a slice in part, and it lacks 2 members there: the offered nodes of that domain have room "
                          "for 0 pods of 4 GPUs"), why
    assert plan_of(client, "ml/stuck@4") is None
    release(client, api, members + fillers)


def test_members_left_of_a_gang_kept_in_one_domain_go_where_its_members_are(api, client):
    # Half racks are finer than the blocks, so a gang in slices of half racks is kept whole in one
    # half rack: 4 pods in one slice of 4 go to half3 (gb-030..gb-035 free), the smallest half rack
    # that holds them. Two members bind (half the slice), the plan expires; half1 (gb-016, gb-017)
    # and half3's last two free trays each hold the two left, half1 first by name, but the members
    # left go to half3, where the bound ones are.
    members, old, offered = half_bound(client, api, "onehalf", sliced(HALF, 4), size=4, bind=2)
    assert {int(n[3:]) // 9 for n in old["slots"]} == {3}, old
    res = client.post("/scheduler/filter", json={"Pod": members[2], "NodeNames": offered}).json()
    assert res["Error"] == "" and res["NodeNames"], res
    plan = plan_of(client, "ml/onehalf@4")
    assert sum(plan["slots"].values()) == 2 and {int(n[3:]) // 9 for n in plan["slots"]} == {3}, plan
    assert plan["slices"].endswith(f": the whole gang in one {HALF} domain: {HALF}=half3"), plan
    where = filter_and_bind(client, api, members[2:], offered)
    assert {int(n[3:]) // 9 for n in where} == {3}, where
    release(client, api, members)


def test_a_running_pod_with_slice_annotations_the_extender_refuses_is_still_counted(client):
    # busy-36's slice level without a size would be an error for a pod to decide, not for a pod
    # that runs: the watch counts its GPUs like any other.
    running = {r["id"]: r for r in client.get("/v1/state").json()["running"]}
    assert running["ml/busy-36"]["gpus"] == list(range(36 * 4, 37 * 4))


@pytest.mark.parametrize("case, notes, words", [
    ("divide", sliced(CLIQUE_LABEL, 4), [SLICE_SIZE, "slices of 4 pods do not divide gang ml/bad-divide's 6 pods of 4 GPUs"]),
    ("fraction", sliced(CLIQUE_LABEL, "2.5"), [SLICE_SIZE, "must be a whole number of pods >= 1, got '2.5'"]),
    ("word", sliced(CLIQUE_LABEL, "two"), [SLICE_SIZE, "must be a whole number of pods >= 1, got 'two'"]),
    ("zero", sliced(CLIQUE_LABEL, 0), [SLICE_SIZE, "must be a whole number of pods >= 1, got '0'"]),
    ("no-size", {SLICE_LEVEL: CLIQUE_LABEL}, [f"annotations[{SLICE_LEVEL}]: needs {SLICE_SIZE}", "for a JobSet's pods too"]),
    ("no-level", {SLICE_SIZE: "2"}, [f"annotations[{SLICE_SIZE}]: cannot be set without {SLICE_LEVEL}"]),
    ("blank-level", sliced(" ", 2), [SLICE_LEVEL, "must be a node label key"]),
])
def test_bad_slice_annotations_are_errors_naming_the_annotation(api, client, case, notes, words):
    p = api.add_pod(gang(f"bad-{case}", 6, notes)[0])
    res = client.post("/scheduler/filter", json={"Pod": p, "NodeNames": NODE_NAMES}).json()
    assert res["NodeNames"] is None and res["Error"].startswith("ExtenderArgs.Pod.metadata."), res
    assert all(w in res["Error"] for w in words), res
    r = client.post("/scheduler/prioritize", json={"Pod": p, "NodeNames": NODE_NAMES})
    assert r.status_code == 400 and all(w in r.json()["Error"] for w in words), r.text


def test_a_sliced_gang_preempts_whole_slices_inside_nvlink_domains(tmp_path):
    """A full cluster: low-priority pods on gb-000..gb-005 (rack 0) and gb-018..gb-021 (rack 1),
    high-priority ones elsewhere; kube-scheduler offers the ten low ones as victims (UIDs) to each
    member's preempt. A gang of 10 in slices of 5 would fit the ten trays, but rack 1's four hold
    no slice: no member gets a node. A gang of 8 in slices of 4 gets one node each, 4 in each rack."""
    low_nodes = [f"gb-{i:03d}" for i in [*range(6), *range(18, 22)]]
    with FakeAPIServer() as api:
        low = {}
        for name in NODE_NAMES:
            api.add_node(node(name))
            if name in low_nodes:
                low[name] = api.add_pod(pod(f"low-{name}", node_name=name, priority=-10))
            else:
                api.add_pod(pod(f"high-{name}", node_name=name, priority=2000))
        with api.watching_service(tmp_path, "--cluster", CLUSTER, "--baseline", "binpack") as svc, \
                httpx.Client(base_url=svc.url, timeout=60) as c:
            deadline = time.monotonic() + 30
            while len(c.get("/v1/state").json().get("running", [])) < 72:
                assert time.monotonic() < deadline, "the cluster's pods never showed in the occupancy"
                time.sleep(0.1)
            table = {n: {"Pods": [{"UID": v["metadata"]["uid"]}], "NumPDBViolations": 0} for n, v in low.items()}

            def preempt(m: dict) -> dict:
                r = c.post("/scheduler/preempt", json={"Pod": api.add_pod(m), "NodeNameToVictims": None,
                                                       "NodeNameToMetaVictims": table})
                assert r.status_code == 200, r.text
                return r.json()["NodeNameToMetaVictims"]

            assert all(preempt(m) == {} for m in gang("fives", 10, sliced(CLIQUE_LABEL, 5), priority=1000)[:2])
            assert "ml/fives@4" not in c.get("/v1/state").json()["gang_plans"]
            given = {}
            for m in gang("fours", 8, sliced(CLIQUE_LABEL, 4), priority=1000):
                got = preempt(m)
                assert len(got) == 1, got
                ((n, victims),) = got.items()
                assert n not in given and victims == table[n]
                given[n] = m["metadata"]["name"]
            assert Counter(rack_of(n) for n in given) == {0: 4, 1: 4}
            plan = c.get("/v1/state").json()["gang_plans"]["ml/fours@4"]
            assert plan["by_preemption"] and plan["slices"].startswith("2 slices of 4 pods (16 GPUs) each inside one "
                                                                       f"{CLIQUE_LABEL} domain"), plan


def test_a_member_bound_outside_the_topology_is_named_not_miscounted(api, client):
    # Two members of a gang of 8 in slices of 4 racks already run: one on gb-030, one on a GPU node
    # the topology file does not know (its GPUs are counted as held outside the topology, not in
    # the occupancy). The members left cannot complete that slice in one rack, and no node passes,
    # the reason naming where the members are; were the second member forgotten (counted among the
    # members bound but not placed), the members left would make a gang no slice size divides.
    outside = "gpu-outside-0"
    api.add_node(wire(k8s.V1Node(api_version="v1", kind="Node", metadata=k8s.V1ObjectMeta(
        name=outside, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}),
        status=k8s.V1NodeStatus(allocatable={"nvidia.com/gpu": "8", "cpu": "96"}))))
    notes = {"gangsched.io/gang-size": "8", **sliced(RACK, 4)}
    held = client.get("/v1/info").json()["watch"]["pods_holding_gpus"]
    running = [api.add_pod(pod(f"apart-{k}", node_name=n, labels={"scheduling.x-k8s.io/pod-group": "apart"},
                               annotations=notes)) for k, n in enumerate(["gb-030", outside])]
    deadline = time.monotonic() + 30
    while client.get("/v1/info").json()["watch"]["pods_holding_gpus"] < held + 2:
        assert time.monotonic() < deadline, "the running members never showed"
        time.sleep(0.1)
    members = [api.add_pod(p) for p in gang("apart", 8, sliced(RACK, 4))[2:]]
    res = client.post("/scheduler/filter", json={"Pod": members[0], "NodeNames": NODE_NAMES}).json()
    assert res["Error"] == "" and res["NodeNames"] == [], res
    (why,) = set(res["FailedNodes"].values())
    assert f"its members already bound on {outside}" in why and "not inside one" in why, why
    assert plan_of(client, "ml/apart@4") is None
    api.delete_node(outside)
    release(client, api, running + members)
