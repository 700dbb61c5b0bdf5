"""What the sandbox reads of the cluster: the live view's once-a-second reads (the Deployment, the
InferenceService, its Scaled and BatchingTuned Events, pod restarts) and, for an error message, why its
pods are not scheduled.
"""

from __future__ import annotations

import json
from typing import Any

from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION


def unscheduled(core: Any, namespace: str, name: str) -> str | None:
    """Why the service's pods are not scheduled, as the scheduler says it (PodScheduled=False), or None:
    a sandbox that never saw a ready pod named nothing when the cause was a Pending one. ``core``: a
    CoreV1Api."""
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={name}")
    except Exception:  # noqa: BLE001 -- a best-effort hint in an error message
        return None
    for pod in pods.items:
        for cond in (pod.status.conditions or []) if pod.status else []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return f"pod {pod.metadata.name} is not scheduled: {cond.reason}: {cond.message}"
    return None


class ClusterReader:
    """The once-a-second reads of the live view: the Deployment, the InferenceService, Events."""

    def __init__(self, client: Any, namespace: str, name: str) -> None:
        import kubernetes

        self.apps = kubernetes.client.AppsV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.namespace, self.name = namespace, name

    def deployment(self) -> dict[str, Any] | None:
        import kubernetes

        try:
            return json.loads(self.apps.read_namespaced_deployment(self.name, self.namespace,
                                                                  _preload_content=False).data)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def restart_counts(self) -> dict[str, int]:
        """``containerStatuses[].restartCount`` of the InferenceService's pods, as the API has them."""
        pods = json.loads(self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL}={self.name}",
                                                        _preload_content=False).data)["items"]
        return {p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in
                                           (p.get("status") or {}).get("containerStatuses") or [])
                for p in pods}

    def read(self) -> tuple[int | None, int, float | None, list[tuple[str, str, str]]]:
        """(spec.replicas, status.readyReplicas, the operator's p95, the Scaled and BatchingTuned Events
        as (uid, reason, message))."""
        dep = self.deployment() or {}
        desired = (dep.get("spec") or {}).get("replicas")
        ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        p95 = (obj.get("status") or {}).get("p95Milliseconds")
        items = json.loads(self.core.list_namespaced_event(self.namespace, _preload_content=False).data)["items"]
        return desired, ready, p95, own_events(items, obj)


def own_events(events: list[dict[str, Any]], obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The Scaled and BatchingTuned Events of this very InferenceService, as (uid, reason, message): by
    its uid, not its name alone -- on a cluster given with --kubeconfig, an earlier object of the name
    (deleted, its Events kept for an hour) had its scale counted as this run's."""
    meta = obj.get("metadata") or {}
    return [(e["metadata"]["uid"], e["reason"], e.get("message") or "") for e in events
            if e.get("reason") in ("Scaled", "BatchingTuned")
            and (e.get("involvedObject") or {}).get("name") == meta.get("name")
            and (e.get("involvedObject") or {}).get("uid") == meta.get("uid")]
