"""The real operator (`tritonscale run` as a subprocess, real Kopf, real kubernetes
client over HTTP) against the emulated Kubernetes API."""

from __future__ import annotations

import copy
import time

import kubernetes
import yaml
from conftest import SAMPLES, exists, wait_for

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.render.kubernetes_objects import HASH_ANNOTATION, LABEL

NS = "default"


def sample(name: str = "python-cpu.yaml") -> dict:
    return yaml.safe_load((SAMPLES / name).read_text())


class Cluster:
    def __init__(self, client: kubernetes.client.ApiClient):
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.policy = kubernetes.client.PolicyV1Api(client)
        self.client = client

    def create(self, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def patch(self, name: str, patch: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, patch,
                                                          _content_type="application/merge-patch+json")

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def deployment(self, name: str) -> dict:
        return self.client.sanitize_for_serialization(self.apps.read_namespaced_deployment(name, NS))

    def children(self, name: str) -> dict:
        s = self.client.sanitize_for_serialization
        return {
            "Deployment": s(self.apps.read_namespaced_deployment(name, NS)),
            "Service": s(self.core.read_namespaced_service(name, NS)),
            "ConfigMap": s(self.core.read_namespaced_config_map(f"{name}-config", NS)),
            "PodDisruptionBudget": s(self.policy.read_namespaced_pod_disruption_budget(name, NS)),
        }

    def condition(self, name: str, type_: str) -> dict | None:
        conds = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == type_), None)


def test_operator_creates_children_sets_status_and_corrects_drift(cluster, api_client, start_operator):
    op = start_operator()
    k = Cluster(api_client)

    # 1. create -> children appear within 2 s, owned and labelled.
    isvc = k.create(sample())
    t0 = time.monotonic()
    kids = wait_for(lambda: k.children("linear"), 2.0, what="Deployment, Service, ConfigMap and PDB")
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0
    for kind, obj in kids.items():
        meta = obj["metadata"]
        assert meta["labels"][LABEL] == "linear", kind
        (ref,) = meta["ownerReferences"]
        assert ref["uid"] == isvc["metadata"]["uid"] and ref["kind"] == "InferenceService", kind
        assert ref["controller"] is True, kind
    dep = kids["Deployment"]
    assert dep["spec"]["replicas"] == 1  # the warm floor
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-config=summary_latencies=true" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/models/linear/ready"
    assert "max_queue_delay_microseconds: 2000" in kids["ConfigMap"]["data"]["config.pbtxt"]
    assert kids["PodDisruptionBudget"]["spec"]["minAvailable"] == 1

    # Status: SpecValid True, Ready False until the Deployment reports ready replicas.
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 3, what="SpecValid")
    ready = k.condition("linear", "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ReplicasStarting"
    st = k.get("linear")["status"]
    assert st["endpoints"] == {"http": "http://linear.default.svc:8000", "grpc": "linear.default.svc:8001"}
    assert st["model"] == "linear"

    # 2. Ready follows the Deployment's ready replicas (KMock runs no controllers: patch status ourselves).
    k.apps.patch_namespaced_deployment_status("linear", NS, {"status": {"replicas": 1, "readyReplicas": 1}})
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("status") == "True", 3, what="Ready=True")
    assert k.get("linear")["status"]["readyReplicas"] == 1

    # The autoscaler owns spec.replicas: scale the Deployment behind the reconciler's back ...
    k.apps.patch_namespaced_deployment("linear", NS, {"spec": {"replicas": 3}})

    # 3. a spec change propagates: config.pbtxt, the pod-template hash, and the PDB.
    old_hash = k.deployment("linear")["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 500}, "scaling": {"minReplicas": 2}}})
    wait_for(lambda: "max_queue_delay_microseconds: 500" in k.children("linear")["ConfigMap"]["data"]["config.pbtxt"],
             3, what="ConfigMap update")
    dep = wait_for(lambda: (d := k.deployment("linear"))["spec"]["template"]["metadata"]["annotations"][
        HASH_ANNOTATION] != old_hash and d, 3, what="pod template hash to change")
    # ... and the reconciler did not touch it.
    assert dep["spec"]["replicas"] == 3
    wait_for(lambda: k.children("linear")["PodDisruptionBudget"]["spec"]["minAvailable"] == 2, 3, what="PDB floor")
    wait_for(lambda: k.get("linear")["status"].get("observedGeneration") == k.get("linear")["metadata"]["generation"],
             3, what="observedGeneration")

    # Drift on a child is corrected: an edited image, a deleted ConfigMap.
    k.apps.patch_namespaced_deployment("linear", NS, {"spec": {"template": {"spec": {"containers": [
        {**container, "image": "evil/image:latest"}]}}}})
    wait_for(lambda: k.deployment("linear")["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"],
             3, what="image drift to be reverted")
    k.core.delete_namespaced_config_map("linear-config", NS)
    wait_for(lambda: exists(k.core.read_namespaced_config_map, "linear-config", NS), 3, what="ConfigMap recreated")

    # Notable actions are Kubernetes Events on the InferenceService.
    events = wait_for(lambda: [e for e in k.core.list_namespaced_event(NS).items
                               if e.involved_object.name == "linear" and e.reason in ("Created", "Updated")],
                      5, what="events")
    assert any("Deployment/linear" in e.message for e in events)

    # 5. delete: the object goes; children carry the ownerReference that garbage collection
    # follows (the emulator has no garbage collector, so we check the reference itself).
    k.delete("linear")
    wait_for(lambda: not exists(k.get, "linear"), 5, what="InferenceService deleted")
    assert k.children("linear")["Service"]["metadata"]["ownerReferences"][0]["uid"] == isvc["metadata"]["uid"]
    assert op.alive(), op.output()
    assert "Traceback" not in op.output(), op.output()


def test_invalid_spec_sets_condition_and_creates_nothing(cluster, api_client, start_operator):
    op = start_operator()
    k = Cluster(api_client)

    bad = sample()
    bad["metadata"]["name"] = "broken"
    bad["spec"]["scaling"].update({"minReplicas": 5, "maxReplicas": 2})
    bad["spec"]["batching"]["preferredBatchSizes"] = [4, 64]
    k.create(bad)
    cond = wait_for(lambda: k.condition("broken", "SpecValid"), 3, what="SpecValid condition")
    assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
    assert "spec.scaling.minReplicas" in cond["message"]
    assert "spec.batching.preferredBatchSizes" in cond["message"]
    time.sleep(1.0)  # give a wrong implementation time to create something
    assert not exists(k.apps.read_namespaced_deployment, "broken", NS)
    assert not exists(k.core.read_namespaced_service, "broken", NS)
    assert not exists(k.core.read_namespaced_config_map, "broken-config", NS)
    warnings = [e for e in k.core.list_namespaced_event(NS).items
                if e.involved_object.name == "broken" and e.type == "Warning"]
    assert warnings and warnings[0].reason == "InvalidSpec"

    # Fixing the spec recovers: children appear and SpecValid turns True.
    k.patch("broken", {"spec": {"scaling": {"minReplicas": 1}, "batching": {"preferredBatchSizes": [4, 8]}}})
    wait_for(lambda: exists(k.apps.read_namespaced_deployment, "broken", NS), 3, what="children after fix")
    wait_for(lambda: k.condition("broken", "SpecValid")["status"] == "True", 3, what="SpecValid=True")

    # A contradictory update to a running service changes nothing that serves traffic.
    before = k.children("broken")
    k.patch("broken", {"spec": {"model": {"warmup": {"batchSizes": [64]}}}})
    wait_for(lambda: k.condition("broken", "SpecValid")["status"] == "False", 3, what="SpecValid=False")
    time.sleep(0.5)
    after = k.children("broken")
    for kind in before:
        assert after[kind]["metadata"]["resourceVersion"] == before[kind]["metadata"]["resourceVersion"], kind

    # Garbage that is not even the right type: a condition, not a crash.
    junk = copy.deepcopy(sample())
    junk["metadata"]["name"] = "junk"
    junk["spec"]["model"]["maxBatchSize"] = "lots"
    junk["spec"]["scaling"]["targetP95Milliseconds"] = -3
    k.create(junk)
    cond = wait_for(lambda: k.condition("junk", "SpecValid"), 3, what="junk condition")
    assert "spec.model.maxBatchSize" in cond["message"] and "spec.scaling.targetP95Milliseconds" in cond["message"]
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()
