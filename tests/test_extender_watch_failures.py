"""The watch (--watch) when the API server refuses or loses what it watches: real service
processes against service.testing.FakeAPIServer on 127.0.0.1, through the official `kubernetes`
client as in production.

RBAC refuses the Volcano PodGroups (403): the service gets ready, logs it once, counts it, sizes
gangs from the pods' annotations, retries with backoff, and reads the PodGroups once allowed.
RBAC allows listing Pods but not watching them: re-lists at the backoff's pace, never in a loop.
Pods refused from the start: not ready, and /readyz says why. A PodGroup CRD deleted while
watched: its gangs fall back to the annotations, the kind is retried at the re-list period (not in
a loop) and read again when the CRD is installed again. A server that ends every watch at once:
retried with backoff, not in a loop.

The services run with the failure backoff at a quarter of production's start and a short cap
(BACKOFF: 0.2 s doubling to 1.6 s, where production doubles 0.8 s to 30 s), so the pace checks
wait a quarter as long for the same counts."""

from __future__ import annotations

import time

import httpx
import pytest

from service.testing import FakeAPIServer, ServiceProcess
from service.watch import BACKOFF_ENV, BACKOFF_S, backoff_from_env
from tests.test_extender_watch import CLUSTER, SP, VC, gang_size, held, node, pod, until

pytest.importorskip("kubernetes.client")
VC_PATH = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
VC_RESOURCE = "podgroups.scheduling.volcano.sh"
BACKOFF = (0.2, 1.6)  # the services' failure backoff (first, cap) in seconds: GANGSCHED_WATCH_BACKOFF_S


def service(api: FakeAPIServer, tmp_path, *extra: str, ready_path: str = "/readyz") -> ServiceProcess:
    kubeconfig = api.write_kubeconfig(tmp_path / "config")
    return ServiceProcess(["--cluster", CLUSTER, "--kube-api", kubeconfig, "--watch", "--watch-timeout-s", "5", *extra],
                          ready_path=ready_path, env={BACKOFF_ENV: ",".join(map(str, BACKOFF))})


def vc_info(c: httpx.Client) -> dict:
    return c.get("/v1/info").json()["watch"]["pod_groups"][VC_RESOURCE]


def lists(api: FakeAPIServer, path: str) -> int:
    return api.count("GET", path) - api.count("GET", path, "watch=")


def test_pod_groups_forbidden_fall_back_to_annotations_logged_once_and_read_once_allowed(tmp_path):
    with FakeAPIServer() as api:
        api.add_node(node("h100-0"))
        api.add_node(node("h100-1"))
        api.add_pod_group(*VC, "ml", "vc", 4)  # exists, but the service may not read it
        api.add_pod_group(*SP, "ml", "sp", 3)
        api.forbid(VC_RESOURCE)
        with service(api, tmp_path, "--watch-resync-s", "0") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            assert s.get("/readyz")[0] == 200  # a refused PodGroup kind does not hold readiness back
            info = vc_info(c)
            assert info["forbidden"] and not info["healthy"] and not info["listed"] and info["errors"]["forbidden"] >= 1
            assert "403 Forbidden" in info["last_error"] and 'cannot list resource "podgroups"' in info["last_error"]
            vc = pod("vc-0", 8, labels={"scheduling.volcano.sh/group-name": "vc"},
                     annotations={"scheduling.volcano.sh/group-min-member": "2"})
            assert gang_size(c, vc) == 2  # the annotation, not the PodGroup's 4
            sp = pod("sp-0", 8, labels={"scheduling.x-k8s.io/pod-group": "sp"})
            assert gang_size(c, sp) == 3  # the other kind is read as ever
            api.add_pod(pod("busy", 8, node_name="h100-1"))  # and Pods are watched
            until(lambda: "ml/busy" in held(c))
            # retried with backoff (0.2, 0.4 s, ...), never in a loop, and logged once
            start, calls = time.monotonic(), api.count("GET", VC_PATH)
            until(lambda: vc_info(c)["errors"]["forbidden"] >= 3)
            assert api.count("GET", VC_PATH) - calls <= 3 + (time.monotonic() - start) / BACKOFF[0]
            calls = api.count("GET", VC_PATH)
            time.sleep(1.0)  # by now the backoff is 0.8 s or more: a try or two; a loop: hundreds
            assert api.count("GET", VC_PATH) - calls <= 1 + 1.0 / BACKOFF[0]
            assert s.output().count(f"watch {VC_RESOURCE}: the API server answered 403") == 1
            assert "needs list on podgroups.scheduling.volcano.sh (RBAC)" in s.output()
            metrics = c.get("/metrics").text
            assert f'gangsched_watch_errors_total{{reason="forbidden",resource="{VC_RESOURCE}"}}' in metrics
            assert f'gangsched_watch_forbidden{{resource="{VC_RESOURCE}"}} 1.0' in metrics
            assert 'gangsched_watch_forbidden{resource="pods"} 0.0' in metrics
            # RBAC fixed: the PodGroup is read at the next try
            api.allow(VC_RESOURCE)
            until(lambda: gang_size(c, vc) == 4)
            info = vc_info(c)
            assert info["listed"] and info["healthy"] and not info["forbidden"]
            assert f"watch {VC_RESOURCE}: listed again after failures" in s.output()
            assert f'gangsched_watch_forbidden{{resource="{VC_RESOURCE}"}} 0.0' in c.get("/metrics").text


def test_a_watch_forbidden_while_the_list_is_allowed_relists_at_the_backoffs_pace(tmp_path):
    """RBAC granting list but not watch on Pods: each list succeeds and each watch answers 403.
    The backoff is not reset by the list, so Pods are listed at 0, 0.2, 0.6, 1.4, 3.0 s... (BACKOFF),
    not every 0.2 s; the occupancy still follows at each list."""
    with FakeAPIServer() as api:
        api.add_node(node("h100-0"))
        api.forbid("pods", ["watch"])
        with service(api, tmp_path, "--watch-resync-s", "0") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            first = lists(api, "/api/v1/pods")
            time.sleep(2.0)
            relists = lists(api, "/api/v1/pods") - first
            assert 1 <= relists <= 4, relists  # 3 (at 0.2, 0.6, 1.4 s); every 0.2 s would be 10
            assert s.output().count("watch pods: the API server answered 403") == 1
            assert "needs watch on pods (RBAC)" in s.output()
            assert f"retrying with backoff up to {BACKOFF[1]:g} s" in s.output()  # the service took BACKOFF
            info = c.get("/v1/info").json()["watch"]["pods"]
            assert info["forbidden"] and info["errors"]["forbidden"] >= 2 and info["lists"]["error"] >= 1
            api.add_pod(pod("busy", 8, node_name="h100-0"))
            until(lambda: "ml/busy" in held(c), timeout_s=30)  # seen at the next list
            api.allow("pods")
            until(lambda: c.get("/v1/info").json()["watch"]["pods"]["healthy"], timeout_s=40)
            api.delete_pod("ml", "busy")
            until(lambda: held(c) == {}, timeout_s=10)  # watched again: seen at once


def test_pods_forbidden_from_the_start_keep_the_service_unready_and_say_why(tmp_path):
    with FakeAPIServer() as api:
        api.add_node(node("h100-0"))
        api.forbid("pods", ["list", "watch"])
        with service(api, tmp_path, ready_path="/healthz") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            until(lambda: c.get("/v1/info").json()["watch"]["pods"]["errors"].get("forbidden"))
            r = c.get("/readyz")
            assert r.status_code == 503
            assert "pods (the API server answered 403 Forbidden: pods is forbidden" in r.json()["detail"]
            res = c.post("/scheduler/filter", json={"Pod": pod("early", 8), "NodeNames": ["h100-0"]}).json()
            assert res["NodeNames"] is None and "403 Forbidden" in res["Error"]
            api.allow("pods")
            until(lambda: c.get("/readyz").status_code == 200)


def test_the_pod_group_crd_deleted_while_watched_falls_back_and_returns(tmp_path):
    """The Volcano CRD deleted at runtime: its PodGroups are deleted (DELETED events), the watch
    ends and the kind answers 404; gangs fall back to the annotation, the kind is listed again
    every re-list period (1 s here), not in a loop, and read again once the CRD is back."""
    with FakeAPIServer() as api:
        api.add_node(node("h100-0"))
        api.add_node(node("h100-1"))
        api.add_pod_group(*VC, "ml", "vc", 4)
        with service(api, tmp_path, "--watch-resync-s", "1") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            vc = pod("vc-0", 8, labels={"scheduling.volcano.sh/group-name": "vc"},
                     annotations={"scheduling.volcano.sh/group-min-member": "2"})
            assert gang_size(c, vc) == 4
            assert api.remove_crd(*VC) == 1
            until(lambda: gang_size(c, vc) == 2)
            until(lambda: vc_info(c)["missing"])
            info = vc_info(c)
            assert info["healthy"] and info["objects"] == 0 and info["events"].get("DELETED", 0) >= 1
            calls = api.count("GET", VC_PATH)
            time.sleep(2.25)
            assert 1 <= api.count("GET", VC_PATH) - calls <= 4  # once per re-list period (2); a loop: hundreds
            assert s.output().count(f"watch {VC_RESOURCE}: the API server answered 404") == 1
            api.add_pod(pod("busy", 8, node_name="h100-1"))  # Pods are watched meanwhile
            until(lambda: "ml/busy" in held(c))
            api.install_crd(*VC)
            api.add_pod_group(*VC, "ml", "vc", 5)
            until(lambda: gang_size(c, vc) == 5)
            info = vc_info(c)
            assert info["listed"] and not info["missing"] and info["objects"] == 1
            assert f"watch {VC_RESOURCE}: the API server serves it now" in s.output()


def test_a_server_that_ends_every_watch_at_once_is_not_called_in_a_loop(tmp_path):
    with FakeAPIServer() as api:
        api.add_node(node("h100-0"))
        api.close_watches_at_once = True
        with service(api, tmp_path, "--watch-resync-s", "0") as s, httpx.Client(base_url=s.url, timeout=30) as c:
            calls = api.count("GET", "/api/v1/nodes", "watch=")
            time.sleep(1.0)
            assert api.count("GET", "/api/v1/nodes", "watch=") - calls <= 4  # 0.2, 0.4 s backoff; a loop: hundreds
            info = c.get("/v1/info").json()["watch"]["nodes"]
            assert info["errors"]["short_watch"] >= 1 and "very short watch" in info["last_error"]
            assert s.output().count("watch nodes: very short watch") == 1
            api.close_watches_at_once = False
            until(lambda: c.get("/v1/info").json()["watch"]["nodes"]["healthy"], timeout_s=30)
            api.add_node(node("h100-1"))
            until(lambda: c.get("/v1/info").json()["watch"]["mapped_nodes"] == 2, timeout_s=10)


def test_the_backoff_is_productions_unless_the_environment_sets_it():
    assert backoff_from_env({}) == BACKOFF_S == (0.8, 30.0)
    assert backoff_from_env({BACKOFF_ENV: " "}) == BACKOFF_S
    assert backoff_from_env({BACKOFF_ENV: "0.2,1.6"}) == (0.2, 1.6)
    for bad in ("0.2", "0,1", "2,1", "a,b", "0.2,inf", "0.2,1.6,3"):
        with pytest.raises(ValueError, match=BACKOFF_ENV):
            backoff_from_env({BACKOFF_ENV: bad})
