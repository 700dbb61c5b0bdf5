"""An HorizontalPodAutoscaler on the operator's Deployment, on the real kube-controller-manager: the
autoscaler owns spec.replicas and puts its own count back, and says who else wrote it -- a Warning
event naming the HPA's field manager, once -- instead of flapping in silence."""

from __future__ import annotations

import kubernetes

from support.cluster import sample, wait_for
from tritonscale.api.spec import GROUP, PLURAL, VERSION


def test_an_hpa_on_the_deployment_is_overruled_and_named(api_client, namespace, start_operator):
    op = start_operator("--prometheus-url", "http://127.0.0.1:9")  # nothing listens: the floor is held
    custom = kubernetes.client.CustomObjectsApi(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    body = sample(namespace)
    body["spec"]["scaling"].update(minReplicas=2, intervalSeconds=2)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    wait_for(lambda: apps.read_namespaced_deployment("linear", namespace).spec.replicas == 2, 15,
             what="the Deployment at the floor of 2")
    kubernetes.client.AutoscalingV2Api(api_client).create_namespaced_horizontal_pod_autoscaler(namespace, {
        "metadata": {"name": "linear"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "linear"},
                 "minReplicas": 1, "maxReplicas": 1,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                     "type": "Utilization", "averageUtilization": 50}}}]}})

    def said() -> list:
        return [e for e in core.list_namespaced_event(namespace).items
                if e.involved_object.name == "linear" and e.reason == "ReplicasSetElsewhere"]

    events = wait_for(said, 60, what="a ReplicasSetElsewhere event (the HPA controller syncs every 15 s)")
    (event,) = events
    assert event.type == "Warning"
    assert "set by kube-controller-manager (through /scale), not the 2 this operator asked for" in event.message, \
        event.message
    wait_for(lambda: apps.read_namespaced_deployment("linear", namespace).spec.replicas == 2, 10,
             what="the floor put back")
    assert op.alive() and "Traceback" not in op.output(), op.output()[-2000:]
