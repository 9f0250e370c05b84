"""docs/k8s: every object parses as the `kubernetes` client's model of its kind, every object
referenced is defined, names and ports agree, the kube-scheduler configs call the service where
it listens, and the service's arguments are flags it has. service/requirements.txt pins every
third-party module the service imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

k8s = pytest.importorskip("kubernetes.client")
ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "k8s"
BUILTIN_ROLES = {("ClusterRole", "system:kube-scheduler"), ("ClusterRole", "system:volume-scheduler"),
                 ("Role", "extension-apiserver-authentication-reader")}
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}  # kube-scheduler config/v1 Extender
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}


def model(doc: dict):
    """The object as the kubernetes client's model (raises on unknown kinds and bad fields)."""
    group, _, version = doc["apiVersion"].rpartition("/")
    prefix = "V1" if version == "v1" else version.capitalize()
    name = f"{prefix}{doc['kind']}"
    return k8s.ApiClient().deserialize(json.dumps(doc), name, "application/json")


def objects() -> list[dict]:
    docs = []
    for f in ("deployment.yaml", "second-scheduler.yaml", "static-pod-scheduler-objects.yaml", "static-pod-scheduler.yaml"):
        docs += [d for d in yaml.safe_load_all((DOCS / f).read_text()) if d]
    return docs


def test_every_object_parses_and_every_reference_is_defined():
    docs = objects()
    defined = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}
    for d in docs:
        m = model(d)
        assert m.metadata.name == d["metadata"]["name"]
    namespaces = {n for k, _, n in defined if k == "Namespace"}
    for d in docs:
        ns = d["metadata"].get("namespace")
        assert ns is None or ns in namespaces or ns == "kube-system", d["metadata"]
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = d["roleRef"]
            want = (ref["kind"], None if ref["kind"] == "ClusterRole" else ns, ref["name"])
            assert want in defined or (ref["kind"], ref["name"]) in BUILTIN_ROLES, ref
            for s in d["subjects"]:
                assert s["kind"] == "User" or ("ServiceAccount", s["namespace"], s["name"]) in defined, s
        if d["kind"] == "Deployment":
            pod = model(d).spec.template
            assert d["spec"]["selector"]["matchLabels"].items() <= pod.metadata.labels.items()
            assert ("ServiceAccount", ns, pod.spec.service_account_name) in defined
            for v in pod.spec.volumes:
                if v.config_map:
                    assert ("ConfigMap", ns, v.config_map.name) in defined, v
                if v.secret:
                    assert ("Secret", ns, v.secret.secret_name) in defined, v
                if v.persistent_volume_claim:
                    assert ("PersistentVolumeClaim", ns, v.persistent_volume_claim.claim_name) in defined, v
            for c in pod.spec.containers:
                assert {m.name for m in c.volume_mounts} <= {v.name for v in pod.spec.volumes}
                for e in c.env or []:
                    if e.value_from and e.value_from.secret_key_ref:
                        ref = e.value_from.secret_key_ref
                        secret = next(x for x in docs if x["kind"] == "Secret" and x["metadata"]["name"] == ref.name)
                        assert ref.key in secret["stringData"]


def test_the_service_is_reached_where_it_listens_with_flags_it_has():
    from service.__main__ import parse_args

    docs = objects()
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangsched")
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gangsched")
    pod = dep["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for p in svc["spec"]["ports"]:
        assert p["targetPort"] in ports
    a = parse_args(container["args"])
    assert a.kube_api == "in-cluster" and a.health_port == ports["health"] and a.tls_client_ca
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "health"
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    for f in (a.tls_cert, a.tls_key, a.tls_client_ca, a.cluster):
        assert any(f.startswith(m + "/") for m in mounts), f
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gangsched-cluster")
    from envs.cluster.config import load_cluster
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(cm["data"]["cluster.yaml"])
        f.flush()
        assert load_cluster(f.name).num_gpus == 64
    sched_cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gangsched-scheduler-config")
    configs = [("second", yaml.safe_load(sched_cm["data"]["scheduler-config.yaml"])),
               ("edited", yaml.safe_load((DOCS / "scheduler-config.yaml").read_text()))]
    sched = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangsched-scheduler")
    sched_mounts = [m["mountPath"] for m in sched["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    for which, cfg in configs:
        assert cfg["kind"] == "KubeSchedulerConfiguration" and cfg["percentageOfNodesToScore"] == 100
        (ext,) = cfg["extenders"]
        assert set(ext) <= EXTENDER_FIELDS and set(ext["tlsConfig"]) <= TLS_FIELDS, which
        url = urlparse(ext["urlPrefix"])
        assert url.scheme == "https" and ext["enableHTTPS"] and url.path == "/scheduler"
        assert url.port == svc["spec"]["ports"][0]["port"]
        assert ext["bindVerb"] == "bind" and ext["managedResources"][0]["name"] == "nvidia.com/gpu"
        if which == "second":
            assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local"
            assert [p["schedulerName"] for p in cfg["profiles"]] == ["gangsched"]
            assert cfg["leaderElection"]["resourceNamespace"] == "gangsched-system"
            for f in ("caFile", "certFile", "keyFile"):
                assert any(ext["tlsConfig"][f].startswith(m + "/") for m in sched_mounts), f
            assert any(sched["spec"]["template"]["spec"]["containers"][0]["command"][1].endswith(m + "/scheduler-config.yaml")
                       for m in sched_mounts)


def test_the_static_pod_scheduler_reaches_the_service_through_its_nodeport_and_holds_its_lease():
    """The kubeadm static-pod variant: its config is where the pod reads it, on host paths the pod
    mounts; the extender URL is the NodePort of a Service selecting the service's pods at the
    port they serve; its Lease is one kubeadm's scheduler user may hold through the manifests' RBAC."""
    docs = objects()
    pod = next(d for d in docs if d["kind"] == "Pod" and d["metadata"]["name"] == "gangsched-scheduler")
    spec = model(pod).spec
    assert spec.host_network and pod["metadata"]["namespace"] == "kube-system"
    (c,) = spec.containers
    mounts = {m.mount_path: m.name for m in c.volume_mounts}
    host = {v.name: v.host_path.path for v in spec.volumes}
    assert set(mounts.values()) <= set(host)
    assert all(host[name] == path for path, name in mounts.items())  # mounted where it lies on the host
    flags = dict(a.split("=", 1) for a in c.command[1:] if "=" in a)
    assert flags["--secure-port"] != "10259"  # kubeadm's own scheduler serves there on the same host network
    assert c.liveness_probe.http_get.port == int(flags["--secure-port"])

    def on_host(path: str) -> bool:
        return any(path == m or path.startswith(m + "/") for m in mounts)

    cfg = yaml.safe_load((DOCS / "static-pod-scheduler-config.yaml").read_text())
    assert on_host(flags["--config"]) and flags["--config"].endswith("/scheduler-config.yaml")
    assert on_host(cfg["clientConnection"]["kubeconfig"]) and cfg["percentageOfNodesToScore"] == 100
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["gangsched"]
    (ext,) = cfg["extenders"]
    assert set(ext) <= EXTENDER_FIELDS and set(ext["tlsConfig"]) <= TLS_FIELDS
    for f in ("caFile", "certFile", "keyFile"):
        assert on_host(ext["tlsConfig"][f]), f
    url = urlparse(ext["urlPrefix"])
    assert url.scheme == "https" and ext["enableHTTPS"] and url.path == "/scheduler" and url.hostname == "127.0.0.1"
    assert ext["bindVerb"] == "bind" and ext["managedResources"][0]["name"] == "nvidia.com/gpu"
    nodeport = next(d for d in docs if d["kind"] == "Service" and d["spec"].get("type") == "NodePort")
    (port,) = nodeport["spec"]["ports"]
    assert port["nodePort"] == url.port and 30000 <= url.port <= 32767
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangsched")
    assert nodeport["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert nodeport["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert port["targetPort"] in {p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    lease = cfg["leaderElection"]
    assert lease["leaderElect"] and lease["resourceLock"] == "leases"
    user = ("User", "system:kube-scheduler")  # kubeadm's scheduler.conf signs in as this user
    for verb in ("create", "get", "update"):
        assert grants(docs, user, lease["resourceNamespace"], "coordination.k8s.io", "leases", verb, lease["resourceName"]), verb


def scheduler_configs() -> list[tuple[str, dict]]:
    """Every KubeSchedulerConfiguration under docs/k8s: a YAML document of that kind, or one held as text in a
    ConfigMap's data (what a scheduler Deployment mounts), named by where it lies."""
    found = []
    for f in sorted(DOCS.glob("*.yaml")):
        for i, d in enumerate(yaml.safe_load_all(f.read_text())):
            if not d:
                continue
            if d.get("kind") == "KubeSchedulerConfiguration":
                found.append((f"{f.name}[{i}]", d))
            for key, text in (d.get("data") or {}).items() if d.get("kind") == "ConfigMap" else ():
                if "KubeSchedulerConfiguration" in text:
                    for j, c in enumerate(yaml.safe_load_all(text)):
                        if c and c.get("kind") == "KubeSchedulerConfiguration":
                            found.append((f"{f.name}[{i}] {d['metadata']['name']}/{key}[{j}]", c))
    return found


def num_candidates(args: dict, num_nodes: int) -> int:
    """kube-scheduler's DefaultPreemption calculateNumCandidates (pkg/scheduler/framework/plugins/defaultpreemption):
    the nodes its dry run looks at before it stops, from the plugin's args (unset fields take the v1 defaults)."""
    pct = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    n = num_nodes * pct // 100
    return min(max(n, absolute), num_nodes)


PREEMPTION_ARGS = {"apiVersion", "kind", "minCandidateNodesPercentage", "minCandidateNodesAbsolute"}  # config/v1 DefaultPreemptionArgs


def test_every_scheduler_config_offers_preemption_candidates_on_every_node():
    """A gang's preemption plan is made on the candidates kube-scheduler's DefaultPreemption offers; by default its
    dry run stops at max(10 % of the nodes, 100), so on a cluster of more than 100 GPU nodes it would offer some
    only. Every profile of every scheduler config sets the plugin's args (as kubescheduler.config.k8s.io/v1
    DefaultPreemptionArgs, values kube-scheduler's validation accepts) to look at all nodes, and does not disable
    the plugin."""
    configs = scheduler_configs()
    names = {n.split("[")[0] for n, _ in configs}
    assert {"scheduler-config.yaml", "second-scheduler.yaml", "static-pod-scheduler-config.yaml"} <= names, names
    for where, cfg in configs:
        assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1", where
        assert cfg.get("profiles"), where
        for profile in cfg["profiles"]:
            who = f"{where} profile {profile.get('schedulerName')}"
            plugin_names = [p["name"] for p in profile.get("pluginConfig") or []]
            assert len(plugin_names) == len(set(plugin_names)), who  # kube-scheduler refuses a plugin configured twice
            entry = next((p for p in profile.get("pluginConfig") or [] if p["name"] == "DefaultPreemption"), None)
            assert entry is not None, f"{who}: no pluginConfig for DefaultPreemption"
            args = entry.get("args") or {}
            assert set(args) <= PREEMPTION_ARGS, (who, args)
            assert args.get("kind", "DefaultPreemptionArgs") == "DefaultPreemptionArgs", who
            assert args.get("apiVersion", cfg["apiVersion"]) == "kubescheduler.config.k8s.io/v1", who
            pct, absolute = args.get("minCandidateNodesPercentage"), args.get("minCandidateNodesAbsolute")
            assert type(pct) is int and 0 <= pct <= 100, (who, pct)  # ValidateDefaultPreemptionArgs
            assert type(absolute) is int and absolute >= 0 and (pct, absolute) != (0, 0), (who, absolute)
            assert pct == 100, who
            for n in (1, 50, 100, 101, 150, 1000, 1024, 5000):
                assert num_candidates(args, n) == n, (who, n)
            for point in ("postFilter", "multiPoint"):
                disabled = ((profile.get("plugins") or {}).get(point) or {}).get("disabled") or []
                assert not {d["name"] for d in disabled} & {"DefaultPreemption", "*"}, (who, point)
    assert num_candidates({}, 1000) == 100  # the default: 100 of 1,000 nodes


def grants(docs: list[dict], account: tuple[str, str], namespace: str | None, group: str, resource: str, verb: str,
           name: str | None = None) -> bool:
    """Whether the roles bound to the ServiceAccount (namespace, name), or to ("User", name), allow `verb` on `resource`
    (of API `group`, named `name`) in `namespace` (None: cluster-scoped), by the manifests' own RBAC."""
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any((s["kind"], s["name"]) == account if account[0] == "User"
                   else s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == account for s in b["subjects"]):
            continue
        bound_ns = b["metadata"].get("namespace")  # a RoleBinding grants in its namespace only
        if bound_ns is not None and bound_ns != namespace:
            continue
        ref = b["roleRef"]
        role = next((d for d in docs if d["kind"] == ref["kind"] and d["metadata"]["name"] == ref["name"]
                     and d["metadata"].get("namespace") == (bound_ns if ref["kind"] == "Role" else None)), None)
        for rule in (role or {}).get("rules", []):
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] \
                    and (not rule.get("resourceNames") or name in rule["resourceNames"]):
                return True
    return False


def test_the_service_account_may_watch_and_hold_its_lease():
    """--watch lists and watches Pods, Nodes and PodGroups cluster-wide; --leader-elect creates, reads and
    updates its Lease in the lease's namespace; the pod name it uses as identity is in its env."""
    from service.__main__ import parse_args

    docs = objects()
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangsched")
    pod = dep["spec"]["template"]["spec"]
    account = (dep["metadata"]["namespace"], pod["serviceAccountName"])
    container = pod["containers"][0]
    a = parse_args(container["args"])
    assert a.watch and a.leader_elect and dep["spec"]["replicas"] >= 2
    for resource in ("pods", "nodes"):
        for verb in ("list", "watch"):
            assert grants(docs, account, None, "", resource, verb), (resource, verb)
    from service.kube import POD_GROUP_APIS

    for group, _, plural in set(POD_GROUP_APIS.values()):  # --watch lists and watches every PodGroup kind
        for verb in ("list", "watch"):
            assert grants(docs, account, None, group, plural, verb), (group, plural, verb)
    assert grants(docs, account, None, "", "pods/binding", "create")
    ns, _, name = a.leader_elect_lease.partition("/")
    assert grants(docs, account, ns, "coordination.k8s.io", "leases", "create")
    for verb in ("get", "update"):
        assert grants(docs, account, ns, "coordination.k8s.io", "leases", verb, name), verb
    assert not grants(docs, account, "kube-system", "coordination.k8s.io", "leases", "update", name)
    env = {e["name"] for e in container["env"]}
    assert a.leader_elect_identity == "$(POD_NAME)" and "POD_NAME" in env


def test_the_images_requirements_pin_every_module_the_service_imports():
    out = subprocess.run([sys.executable, "-c", "import sys, service.app, service.kube, kubernetes.client; "
                          "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    import importlib.metadata as md

    dist_of = md.packages_distributions()
    needed = {d.lower().replace("_", "-") for m in out for d in dist_of.get(m, [])} - {"gangsched"}
    pinned = {}
    for line in (ROOT / "service" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"service/requirements.txt: {line} is not pinned"
            pinned[name.lower().replace("_", "-")] = version
    # Transitive dependencies of the pinned packages come with them; the direct imports must be pinned.
    direct = {"numpy", "networkx", "pyyaml", "numba", "gymnasium", "fastapi", "uvicorn", "onnxruntime", "prometheus-client",
              "kubernetes"}
    assert {"numpy", "numba", "gymnasium", "fastapi", "kubernetes"} <= needed  # (onnxruntime, uvicorn: imported on use)
    assert direct <= set(pinned), direct - set(pinned)
    assert "torch" not in needed
