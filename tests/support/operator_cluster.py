"""An InferenceService and its children in one namespace as the integration tests see them (cluster admin's
client): ``Cluster`` reads and writes the object and reads what the operator made of it;
``warning_events`` are the Warning events on an object (the test modules import it as ``_warnings``)."""

from __future__ import annotations

import kubernetes

from support.cluster import exists
from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.render.kubernetes_objects import mounted_configmap


class Cluster:
    def __init__(self, client: kubernetes.client.ApiClient, namespace: str):
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.policy = kubernetes.client.PolicyV1Api(client)
        self.client = client
        self.ns = namespace

    def create(self, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def patch(self, name: str, patch: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, patch,
                                                          _content_type="application/merge-patch+json")

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def deployment(self, name: str) -> dict:
        return self.client.sanitize_for_serialization(self.apps.read_namespaced_deployment(name, self.ns))

    def replica_sets(self, name: str) -> list[dict]:
        s = self.client.sanitize_for_serialization
        return [s(r) for r in self.apps.list_namespaced_replica_set(self.ns, label_selector=f"{LABEL}={name}").items]

    def children(self, name: str) -> dict:
        """The children; the ConfigMap is the one the Deployment's pod template mounts (NAME-config-HASH)."""
        s = self.client.sanitize_for_serialization
        deployment = s(self.apps.read_namespaced_deployment(name, self.ns))
        return {
            "Deployment": deployment,
            "Service": s(self.core.read_namespaced_service(name, self.ns)),
            "ConfigMap": s(self.core.read_namespaced_config_map(mounted_configmap(deployment), self.ns)),
            "PodDisruptionBudget": s(self.policy.read_namespaced_pod_disruption_budget(name, self.ns)),
        }

    def remaining_children(self, name: str) -> list[str]:
        """Children (and grandchildren) of ``name`` still in the API: by name, and by label
        for the ReplicaSets and Pods the Deployment controller made."""
        ns, sel = self.ns, f"{LABEL}={name}"
        found = [kind for kind, read, obj in (
            ("Deployment", self.apps.read_namespaced_deployment, name),
            ("Service", self.core.read_namespaced_service, name),
            ("PodDisruptionBudget", self.policy.read_namespaced_pod_disruption_budget, name),
        ) if exists(read, obj, ns)]
        found += [f"ConfigMap/{c.metadata.name}"
                  for c in self.core.list_namespaced_config_map(ns, label_selector=sel).items]
        found += [f"ReplicaSet/{r.metadata.name}"
                  for r in self.apps.list_namespaced_replica_set(ns, label_selector=sel).items]
        found += [f"Pod/{p.metadata.name}" for p in self.core.list_namespaced_pod(ns, label_selector=sel).items]
        return found

    def condition(self, name: str, type_: str) -> dict | None:
        conds = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == type_), None)

    def ready_pods(self, name: str) -> int:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"{LABEL}={name}").items
        return sum(1 for p in pods if not p.metadata.deletion_timestamp and any(
            c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])))


def warning_events(k: Cluster, name: str, reason: str) -> list:
    """Warning events of ``reason`` on ``name``: Kopf posts them from a queue, after the status patch
    that the test waited for (so wait for them too)."""
    return [e for e in k.core.list_namespaced_event(k.ns).items
            if e.involved_object.name == name and e.type == "Warning" and e.reason == reason]
