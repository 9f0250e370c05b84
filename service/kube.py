"""The service's calls to the Kubernetes API server, through the official `kubernetes` client.

Contract:
* `KubeAPI.connect(spec)`: `in-cluster` (the pod's service account: token, CA and
  `KUBERNETES_SERVICE_HOST`, as `kubernetes.config.load_incluster_config`) or the path of a
  kubeconfig file (`kubernetes.config.load_kube_config`). Raises `KubeConfigError` naming what is
  missing; nothing is contacted until the first call.
* `bind(namespace, name, uid, node)`: creates the pod's `Binding` (`POST
  /api/v1/namespaces/{ns}/pods/{name}/binding`, with the pod's UID as a precondition when given).
  Returns '' on success, else the API server's answer (status code and message): the caller
  reports it in `ExtenderBindingResult.Error`.
* `pod_group_min_member(kind, namespace, name)`: `spec.minMember` of a PodGroup (scheduler-plugins
  `scheduling.x-k8s.io/v1alpha1` or Volcano `scheduling.volcano.sh/v1beta1`), None when the object
  does not exist or cannot be read (the caller falls back to the pod's annotation); a GET per
  call, used without the watch (with `--watch`, service.watch keeps PodGroups watched).
* `min_member_of(obj)`: a PodGroup object's `spec.minMember` when it is an integer >= 1, else None.
* `read_node(name)`: the Node (plain dict) or None, for nodes sent by name only.
* `node_pods(node)`: the pods bound to a node, to name the victims kube-scheduler sends by UID.
* `group_pods(namespace, selector_key, name)`: the pods of a group (label selector), as plain
  dicts, or None when they cannot be listed.
Every call has a timeout (`timeout_s`, default 3 s) and never raises for an API error.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("gangsched.service")

# PodGroup kinds by the key that names a pod's group: (API group, version, plural)
POD_GROUP_APIS = {
    "scheduling.x-k8s.io/pod-group": ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
    "pod-group.scheduling.sigs.k8s.io": ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
    "scheduling.volcano.sh/group-name": ("scheduling.volcano.sh", "v1beta1", "podgroups"),
    "scheduling.k8s.io/group-name": ("scheduling.volcano.sh", "v1beta1", "podgroups"),
}


def min_member_of(obj) -> int | None:
    """A PodGroup's `spec.minMember` when it is an integer >= 1, else None (no object, no or a bad value)."""
    v = (obj.get("spec") or {}).get("minMember") if isinstance(obj, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


class KubeConfigError(RuntimeError):
    """The API server cannot be configured (not in a pod, no kubeconfig)."""


def _message(e: Exception) -> str:
    body = getattr(e, "body", None)
    if body:
        try:
            doc = json.loads(body)
            if isinstance(doc, dict) and doc.get("message"):
                return str(doc["message"])
        except (ValueError, TypeError):
            pass
        return (body.decode(errors="replace") if isinstance(body, bytes) else str(body))[:500]
    return str(getattr(e, "reason", "") or e)[:500]


class KubeAPI:
    def __init__(self, api_client, timeout_s: float = 3.0, where: str = ""):
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.timeout_s = timeout_s
        self.where = where

    @classmethod
    def connect(cls, spec: str, timeout_s: float = 3.0) -> KubeAPI:
        try:
            from kubernetes import client, config
        except ImportError as e:  # the service extra installs it
            raise KubeConfigError(f"--kube-api {spec}: the kubernetes client is not installed ({e})") from None
        cfg = client.Configuration()
        if spec == "in-cluster":
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise KubeConfigError("--kube-api in-cluster: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)")
            try:
                config.load_incluster_config(client_configuration=cfg)
            except config.ConfigException as e:
                raise KubeConfigError(f"--kube-api in-cluster: {e}") from None
        else:
            if not os.path.exists(spec):
                raise KubeConfigError(f"--kube-api {spec}: no such kubeconfig file (or use in-cluster)")
            try:
                config.load_kube_config(config_file=spec, client_configuration=cfg)
            except (config.ConfigException, OSError, ValueError, TypeError) as e:
                raise KubeConfigError(f"--kube-api {spec}: {e}") from None
        return cls(client.ApiClient(cfg), timeout_s, cfg.host)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        meta = client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None)
        body = client.V1Binding(api_version="v1", kind="Binding", metadata=meta,
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))
        try:
            # The API server answers a Status, which the client's V1Binding model cannot read:
            # the response is not deserialised.
            self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False,
                                                    _request_timeout=self.timeout_s)
            return ""
        except ApiException as e:
            return f"binding {namespace}/{name} to {node}: the API server answered {e.status}: {_message(e)}"
        except Exception as e:  # connection refused, timeout, TLS
            return f"binding {namespace}/{name} to {node}: the API server at {self.where} could not be reached: {type(e).__name__}: {e}"

    def pod_group_min_member(self, key: str, namespace: str, name: str) -> int | None:
        from kubernetes.client.rest import ApiException

        group, version, plural = POD_GROUP_APIS[key]
        try:
            obj = self.custom.get_namespaced_custom_object(group, version, namespace, plural, name,
                                                           _request_timeout=self.timeout_s)
        except ApiException as e:
            if e.status != 404:
                log.warning("PodGroup %s/%s (%s): the API server answered %s: %s", namespace, name, group, e.status, _message(e))
            return None
        except Exception as e:
            log.warning("PodGroup %s/%s (%s): %s: %s", namespace, name, group, type(e).__name__, e)
            return None
        return min_member_of(obj)

    def read_node(self, name: str) -> dict | None:
        """The Node object as plain data, None when it does not exist or cannot be read."""
        try:
            n = self.core.read_node(name, _request_timeout=self.timeout_s)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                log.warning("node %s: %s: %s", name, type(e).__name__, e)
            return None
        return self.api_client.sanitize_for_serialization(n)

    def node_pods(self, node: str) -> list[dict] | None:
        """The pods bound to a node (field selector spec.nodeName), None when they cannot be listed."""
        try:
            r = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", _request_timeout=self.timeout_s)
        except Exception as e:
            log.warning("pods of node %s: %s: %s", node, type(e).__name__, e)
            return None
        return [self.api_client.sanitize_for_serialization(p) for p in r.items]

    def group_pods(self, namespace: str, key: str, name: str) -> list[dict] | None:
        try:
            r = self.core.list_namespaced_pod(namespace, label_selector=f"{key}={name}", _request_timeout=self.timeout_s)
        except Exception as e:
            log.warning("pods of group %s/%s: %s: %s", namespace, name, type(e).__name__, e)
            return None
        return [self.api_client.sanitize_for_serialization(p) for p in r.items]
