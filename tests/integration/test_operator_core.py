"""The real operator (`tritonscale run` as a subprocess, real Kopf, real kubernetes
client over HTTP, as the chart's ServiceAccount) against the real control plane:
kube-apiserver validates, the Deployment and ReplicaSet controllers make pods, the
scheduler binds them to a test Node whose pods a stand-in marks Ready, and the
garbage collector removes children through their ownerReferences."""

from __future__ import annotations

import copy
import json
import time

import kubernetes
import pytest

from support.cluster import exists, sample, wait_for
from tritonscale.api.spec import GROUP, HASH_ANNOTATION, LABEL, PLURAL, VERSION
from tritonscale.reconcile.diff import LAST_APPLIED
from tritonscale.render.kubernetes_objects import mounted_configmap, recorded_spec


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


def test_operator_creates_children_sets_status_and_corrects_drift(api_client, namespace, models_claim, node,
                                                                  start_operator):
    op = start_operator()
    k = Cluster(api_client, namespace)
    ns = namespace

    # 1. create -> children appear, owned and labelled (how soon is a figure, printed, not a verdict).
    isvc = k.create(sample(ns))
    t0 = time.monotonic()
    kids = wait_for(lambda: k.children("linear"), 30.0, what="Deployment, Service, ConfigMap and PDB")
    print(f"children appeared {time.monotonic() - t0:.2f} s after the create")
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

    # Status: SpecValid True, Ready False until the Deployment reports ready replicas
    # (no Node yet: the real Deployment and ReplicaSet controllers made a pod that waits).
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 3, what="SpecValid")
    ready = k.condition("linear", "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ReplicasStarting"
    # No finalizer (handlers._without_finalizer): nothing holds the object, its namespace or the CRD
    # when the operator is not there to remove one.
    assert not k.get("linear")["metadata"].get("finalizers")
    st = k.get("linear")["status"]
    assert st["endpoints"] == {"http": f"http://linear.{ns}.svc:8000", "grpc": f"linear.{ns}.svc:8001"}
    assert st["model"] == "linear"
    wait_for(lambda: k.core.list_namespaced_pod(ns, label_selector=f"{LABEL}=linear").items, 10,
             what="the ReplicaSet controller's pod")

    # 2. Ready follows the Deployment's ready replicas: a Node appears, the scheduler
    # binds the pod, the stand-in marks it Ready, the Deployment controller counts it.
    # The pod has failed to schedule while there was no Node: the scheduler retries it after
    # its backoff (up to podMaxBackoffSeconds, 10 s, once earlier tests' Node events have
    # retried it a few times), then the stand-in, the Deployment controller and the operator.
    node()
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("status") == "True", 30, what="Ready=True")
    assert k.get("linear")["status"]["readyReplicas"] == 1

    # The autoscaler owns spec.replicas: scale the Deployment behind the reconciler's back ...
    k.apps.patch_namespaced_deployment("linear", ns, {"spec": {"replicas": 3}})

    # 3. a spec change propagates: config.pbtxt, the pod-template hash, and the PDB.
    old_hash = k.deployment("linear")["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
    old_cm = mounted_configmap(k.deployment("linear"))
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 500}, "scaling": {"minReplicas": 2},
                                "runtime": {"podLabels": {"team": "search"},
                                            "podAnnotations": {"sidecar.istio.io/inject": "false"}}}})
    wait_for(lambda: "max_queue_delay_microseconds: 500" in k.children("linear")["ConfigMap"]["data"]["config.pbtxt"],
             3, what="ConfigMap update")
    dep = wait_for(lambda: (d := k.deployment("linear"))["spec"]["template"]["metadata"]["annotations"][
        HASH_ANNOTATION] != old_hash and d, 3, what="pod template hash to change")
    # ... and the reconciler did not touch it.
    assert dep["spec"]["replicas"] == 3
    # the pods' own labels and annotations reach the template beside the operator's; the selector stays
    pod_meta = dep["spec"]["template"]["metadata"]
    assert pod_meta["labels"]["team"] == "search" and pod_meta["labels"][LABEL] == "linear"
    assert pod_meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert dep["spec"]["selector"]["matchLabels"] == {LABEL: "linear"}
    # The new config is a new ConfigMap; the old one is left as it was for the old ReplicaSet's pods
    # (a replacement the old ReplicaSet starts mid-rollout loads the old config, not the new one).
    new_cm = mounted_configmap(dep)
    assert new_cm != old_cm and old_cm.startswith("linear-config-")
    assert "max_queue_delay_microseconds: 500" not in k.core.read_namespaced_config_map(old_cm, ns).data[
        "config.pbtxt"]
    assert any(mounted_configmap(rs) == old_cm for rs in k.replica_sets("linear")), "the old ReplicaSet mounts it"
    # The Deployment records the spec it was made from (the last valid one, after an operator restart).
    wait_for(lambda: recorded_spec(k.deployment("linear")) == k.get("linear")["spec"], 3, what="the recorded spec")
    wait_for(lambda: k.children("linear")["PodDisruptionBudget"]["spec"]["minAvailable"] == 2, 3, what="PDB floor")
    wait_for(lambda: k.get("linear")["status"].get("observedGeneration") == k.get("linear")["metadata"]["generation"],
             3, what="observedGeneration")

    # Drift on a child is corrected: an edited image, a deleted ConfigMap.
    k.apps.patch_namespaced_deployment("linear", ns, {"spec": {"template": {"spec": {"containers": [
        {**container, "image": "evil/image:latest"}]}}}}, field_manager="kubectl-edit")
    wait_for(lambda: k.deployment("linear")["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"],
             3, what="image drift to be reverted")
    def on_linear() -> list:
        """The events on objects named linear: the InferenceService's, and its Deployment's."""
        return [e for e in k.core.list_namespaced_event(ns).items if e.involved_object.name == "linear"]

    # ... and said as drift, naming who made it (the spec did not change: not "updated to match the spec")
    try:
        reverted = wait_for(lambda: [e for e in on_linear() if e.reason == "DriftReverted"], 5,
                            what="a DriftReverted event")
    except AssertionError as exc:
        # In clean-clone CI runs of sessions 61 and 83 the drift was put back but no DriftReverted came: a
        # pass on Kopf's older body had put the last spec back (test_reconcile_freshest_spec.py). Say what
        # came instead and what the operator logged, so that a next failure shows why.
        said = [(e.type, e.reason, e.message) for e in on_linear()]
        raise AssertionError(f"{exc}; the object's events: {said}; the operator's log:\n{op.log_tail()}") from None
    assert reverted[0].type == "Warning" and "Deployment/linear" in reverted[0].message
    assert "changed by kubectl-edit, not through this InferenceService" in reverted[0].message
    # ... and keys added where the child's value is held whole (reconcile.diff.WHOLE_MAPS): a Service
    # selecting no pod, a container told to run something else.
    patched = k.core.patch_namespaced_service("linear", ns, {"spec": {"selector": {"typo": "x"}}})
    assert patched.spec.selector["typo"] == "x"
    wait_for(lambda: "typo" not in k.core.read_namespaced_service("linear", ns).spec.selector, 3,
             what="the selector key added to be removed")
    patched = k.apps.patch_namespaced_deployment("linear", ns, {"spec": {"template": {"spec": {"containers": [
        {**container, "command": ["sleep", "infinity"]}]}}}})
    assert patched.spec.template.spec.containers[0].command == ["sleep", "infinity"]
    wait_for(lambda: "command" not in k.deployment("linear")["spec"]["template"]["spec"]["containers"][0], 3,
             what="the command added to be removed")
    # ... and keys the API server refuses beside ours (reconcile.diff.EXCLUDING_KEYS): a budget given
    # maxUnavailable for its minAvailable (a merge patch putting minAvailable back alone was refused, and
    # read as an invalid spec), a Service made an ExternalName (its traffic sent elsewhere).
    floor = k.policy.read_namespaced_pod_disruption_budget("linear", ns).spec.min_available
    k.policy.patch_namespaced_pod_disruption_budget("linear", ns, [
        {"op": "remove", "path": "/spec/minAvailable"}, {"op": "add", "path": "/spec/maxUnavailable", "value": 1}])
    wait_for(lambda: (lambda b: b.spec.min_available == floor and b.spec.max_unavailable is None)(
        k.policy.read_namespaced_pod_disruption_budget("linear", ns)), 3, what="the budget put back")
    k.core.patch_namespaced_service("linear", ns, {"spec": {"type": "ExternalName", "externalName": "example.com"}})
    wait_for(lambda: (lambda svc: svc.spec.type == "ClusterIP" and svc.spec.external_name is None)(
        k.core.read_namespaced_service("linear", ns)), 3, what="the Service made ClusterIP again")
    assert (k.condition("linear", "SpecValid") or {}).get("status") == "True"
    # Once no ReplicaSet mounts the old config (its history pruned; here deleted by hand), the next pass
    # deletes it -- here the one a deleted ConfigMap starts.
    for rs in k.replica_sets("linear"):
        if mounted_configmap(rs) == old_cm:
            k.apps.delete_namespaced_replica_set(rs["metadata"]["name"], ns)
    current_cm = mounted_configmap(k.deployment("linear"))
    k.core.delete_namespaced_config_map(current_cm, ns)
    wait_for(lambda: exists(k.core.read_namespaced_config_map, current_cm, ns), 3, what="ConfigMap recreated")
    wait_for(lambda: not exists(k.core.read_namespaced_config_map, old_cm, ns), 5,
             what="the ConfigMap no pod template mounts deleted")

    # Notable actions are Kubernetes Events on the InferenceService.
    events = wait_for(lambda: [e for e in on_linear() if e.reason in ("Created", "Updated")], 5, what="events")
    assert any("Deployment/linear" in e.message for e in events)
    # a spec edit that changed the pod template (the batcher's config, above) says the pods roll
    assert any(e.reason == "Updated" and e.message == "updated Deployment/linear to match the spec; a new pod "
               "template: the pods roll" for e in events), [e.message for e in events]
    # ... from tritonscale ("From" in kubectl describe; Kopf's default says "kopf").
    assert {(e.source.component, e.reporting_component) for e in events} == {("tritonscale", "tritonscale")}
    # An edit of spec.scaling alone changes the Deployment (its spec record) but not its pod template: no
    # pod rolls, and the event does not say one does (every Deployment patch said so, an exploratory
    # review: "the pods roll", and a pass of Ready=Unknown RollingOut, which test_status covers).
    rs_before = {rs["metadata"]["name"] for rs in k.replica_sets("linear")}
    said = {e.metadata.uid for e in events}
    k.patch("linear", {"spec": {"scaling": {"maxReplicas": 7}}})
    update = wait_for(lambda: [e for e in on_linear() if e.reason == "Updated" and e.metadata.uid not in said
                               and "Deployment/linear" in e.message], 5,
                      what="the Deployment's Updated event for the scaling edit")
    assert [e.message for e in update] == ["updated Deployment/linear to match the spec"]
    # A child whose last-applied record alone differs (an upgrade writes it in a new format) gets the
    # record back, and no "updated ... to match the spec" event: nothing it does changed.
    said |= {e.metadata.uid for e in k.core.list_namespaced_event(ns).items}
    record = k.core.read_namespaced_service("linear", ns).metadata.annotations[LAST_APPLIED]
    k.core.patch_namespaced_service("linear", ns, {"metadata": {"annotations": {LAST_APPLIED: "{}"}}})
    wait_for(lambda: k.core.read_namespaced_service("linear", ns).metadata.annotations[LAST_APPLIED] == record, 5,
             what="the last-applied record written back")
    time.sleep(0.5)  # the event would be posted right after the patch
    assert not [e.message for e in on_linear() if e.metadata.uid not in said and "Service/linear" in e.message]
    assert {rs["metadata"]["name"] for rs in k.replica_sets("linear")} == rs_before

    # 5. delete: the object goes, and the garbage collector removes every child (and the
    # Deployment's ReplicaSets and Pods) through their ownerReferences.
    assert len(k.remaining_children("linear")) >= 4 + 2  # four children, >= 1 ReplicaSet, >= 1 Pod
    k.delete("linear")
    wait_for(lambda: not exists(k.get, "linear"), 5, what="InferenceService deleted")
    wait_for(lambda: not k.remaining_children("linear"), 30, interval=0.2,
             what="garbage collection of the children", detail=lambda: f"left: {k.remaining_children('linear')}")
    assert op.alive(), op.output()
    assert "Traceback" not in op.output(), op.output()
    # The autoscaler's daemon found its object gone at its next tick and ended (Kopf logs that at DEBUG,
    # so its absence of failures is what shows here), and a stopped operator holds nothing either:
    # an InferenceService deleted while it is down goes at once. One that carries the finalizer earlier
    # versions put on loses it (Kopf removes a finalizer no handler needs).
    old = sample(ns)
    old["metadata"]["finalizers"] = ["tritonscale.io/finalizer"]
    again = k.create(old)
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 3, what="SpecValid")
    wait_for(lambda: not k.get("linear")["metadata"].get("finalizers"), 5, what="the old finalizer removed")
    time.sleep(3)  # a tick of its daemon (the sample ticks every 2 s) after the first object's deletion
    assert "Daemon 'autoscale' failed" not in op.output(), op.output()[-3000:]
    op.stop()
    k.delete("linear")
    wait_for(lambda: not exists(k.get, "linear"), 5, what=f"{again['metadata']['uid']} deleted, operator stopped")
    # Kopf's line for every child event handled is left out (operator_logging.QuietChildEvents): the
    # children changed dozens of times above, and the handler's name must still be Kopf's.
    # Kopf's lines about the object name it ([namespace/name]).
    assert f"kopf.objects: [{ns}/linear] Handler 'reconcile_inference_service' succeeded." in op.output(), \
        op.output()[-3000:]
    assert "Handler 'child_changed'" not in op.output(), op.output()[-3000:]
    # The stop above cancelled the second object's daemon, as designed: no WARNING for it.
    assert "is cancelled. Will escalate" not in op.output(), op.output()[-3000:]


def _api_error_fields(exc: kubernetes.client.ApiException) -> list[str]:
    body = json.loads(exc.body)
    return sorted(c.get("field", "") for c in (body.get("details") or {}).get("causes") or []
                  if c.get("field") != "<nil>")  # "some validation rules were not checked": no field


def _desired(obj: dict) -> dict:
    """What the operator wrote: everything but the status the controllers keep (the
    Deployment controller updates a Deployment's status, and its resourceVersion, as its
    pods come up, so the resourceVersion says nothing about the operator)."""
    meta = obj["metadata"]
    return {"generation": meta.get("generation"), "labels": meta.get("labels"),
            "annotations": meta.get("annotations"), "ownerReferences": meta.get("ownerReferences"),
            **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}


def test_invalid_spec_is_refused_or_reported_and_creates_nothing(api_client, namespace, start_operator):
    """What the CRD can check, the API server refuses at admission (nothing reaches the
    operator); what it cannot (the name must also be a valid Service name), the
    operator reports as SpecValid=False and creates nothing."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    ns = namespace

    # CEL rules and the structural schema: refused with every field named.
    bad = sample(ns)
    bad["metadata"]["name"] = "broken"
    bad["spec"]["scaling"].update({"minReplicas": 5, "maxReplicas": 2})
    bad["spec"]["batching"]["preferredBatchSizes"] = [4, 64]
    with pytest.raises(kubernetes.client.ApiException) as refused:
        k.create(bad)
    assert refused.value.status == 422
    assert {"spec.scaling.minReplicas", "spec.batching.preferredBatchSizes"} <= set(_api_error_fields(refused.value))
    # the rule's messageExpression, as the operator and `tritonscale render` say it
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert any(c.get("field") == "spec.scaling.minReplicas" and c["message"].endswith(
        "scaling.minReplicas must be <= scaling.maxReplicas (minReplicas 5, maxReplicas 2)") for c in causes), causes
    assert any(c.get("field") == "spec.batching.preferredBatchSizes" and c["message"].endswith(
        "must be <= model.maxBatchSize (model.maxBatchSize 16)") for c in causes), causes
    assert not exists(k.get, "broken")

    # A valid object, then a contradictory update to it: refused, and nothing that
    # serves traffic changes.
    ok = sample(ns)
    ok["metadata"]["name"] = "broken"
    k.create(ok)
    wait_for(lambda: k.condition("broken", "SpecValid") and exists(k.apps.read_namespaced_deployment, "broken", ns),
             5, what="children of a valid object")
    before = k.children("broken")
    with pytest.raises(kubernetes.client.ApiException) as refused:
        k.patch("broken", {"spec": {"model": {"warmup": {"batchSizes": [64]}}}})
    assert refused.value.status == 422 and _api_error_fields(refused.value) == ["spec.model.warmup.batchSizes"]
    time.sleep(0.5)
    after = k.children("broken")
    for kind in before:
        assert _desired(after[kind]) == _desired(before[kind]), kind

    # Garbage that is not even the right type: refused by the structural schema.
    junk = copy.deepcopy(sample(ns))
    junk["metadata"]["name"] = "junk"
    junk["spec"]["model"]["maxBatchSize"] = "lots"
    junk["spec"]["scaling"]["targetP95Milliseconds"] = -3
    with pytest.raises(kubernetes.client.ApiException) as refused:
        k.create(junk)
    assert refused.value.status == 422
    assert _api_error_fields(refused.value) == ["spec.model.maxBatchSize", "spec.scaling.targetP95Milliseconds"]

    # The name also names the Service, so it must be a DNS-1035 label, which the CRD's CEL rule on
    # metadata.name says; the API server would admit any DNS subdomain ("linear.v2") otherwise.
    dotted = sample(ns)
    dotted["metadata"]["name"] = "linear.v2"
    with pytest.raises(kubernetes.client.ApiException) as refused:
        k.create(dotted)
    assert refused.value.status == 422 and _api_error_fields(refused.value) == ["metadata.name"]
    assert "DNS-1035" in refused.value.body
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def _warnings(k: Cluster, name: str, reason: str) -> list:
    """Warning events of ``reason`` on ``name``: Kopf posts them from a queue, after the status patch
    that the test waited for (so wait for them too)."""
    return [e for e in k.core.list_namespaced_event(k.ns).items
            if e.involved_object.name == name and e.type == "Warning" and e.reason == reason]


def test_a_name_another_object_holds_is_reported_and_never_taken_over(api_client, namespace, start_operator):
    """A user's own Service named like the InferenceService: the operator reports the conflict
    (Ready=False, NameConflict, a Warning event), writes nothing -- the Service keeps its selector
    and gains no ownerReference, so deleting the InferenceService could never delete it -- and
    creates the children once the name is free (Kopf retries the handler)."""
    from tritonscale.handlers import CONFLICT_RETRY_S

    op = start_operator()
    k = Cluster(api_client, namespace)
    ns = namespace
    theirs = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "linear", "labels": {"app": "web"}},
              "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    k.core.create_namespaced_service(ns, theirs)
    # ... and a Deployment of theirs, scaled to zero: the autoscaler must not raise it to the warm floor.
    their_deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "linear"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}
    k.apps.create_namespaced_deployment(ns, their_deployment)
    k.create(sample(ns))
    cond = wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "NameConflict" and c, 5,
                    what="Ready=False, NameConflict")
    assert cond["status"] == "False" and "Service/linear" in cond["message"], cond
    assert "Deployment/linear" in cond["message"], cond
    assert (k.condition("linear", "SpecValid") or {}).get("status") == "True"
    assert k.get("linear")["status"].get("model") == "linear"  # the MODEL column of a valid spec (an audit)
    time.sleep(1.0)  # give a wrong implementation time to write something
    service = k.core.read_namespaced_service("linear", ns)
    assert service.spec.selector == {"app": "web"} and not service.metadata.owner_references
    theirs_now = k.deployment("linear")
    assert theirs_now["spec"]["replicas"] == 0 and not theirs_now["metadata"].get("ownerReferences"), theirs_now
    assert theirs_now["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx"
    assert not k.core.list_namespaced_config_map(ns, label_selector=f"{LABEL}=linear").items
    wait_for(lambda: _warnings(k, "linear", "NameConflict"), 5, what="a NameConflict Warning event")

    # The names freed: the next retry creates every child, the Service now the operator's own.
    k.core.delete_namespaced_service("linear", ns)
    k.apps.delete_namespaced_deployment("linear", ns)
    wait_for(lambda: not exists(k.apps.read_namespaced_deployment, "linear", ns), 10, what="their Deployment gone")
    kids = wait_for(lambda: k.children("linear"), CONFLICT_RETRY_S + 15, interval=0.5,
                    what="the children once the name is free")
    assert kids["Service"]["spec"]["selector"] == {LABEL: "linear"}
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("reason") != "NameConflict", 5,
             what="the conflict cleared from Ready")
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_what_the_api_server_refuses_is_reported_and_changes_no_child(api_client, namespace, start_operator):
    """What only Kubernetes' own schema checks (runtime.env and runtime.resources are free-form
    Kubernetes objects the CRD passes as they are): every write is a dry run first, so a refusal --
    by the client's schema (an EnvVar without a name) or by the API server (an env var name with
    '=' in it) -- is a SpecValid=False condition naming the Deployment's field, and no child, not
    even the ConfigMap written first, changes. (Resource quantities the operator checks itself.)"""
    op = start_operator()
    k = Cluster(api_client, namespace)
    ns = namespace
    bad = sample(ns)
    bad["spec"]["runtime"]["env"] = [{"value": "no name"}]
    k.create(bad)
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and c["status"] == "False" and c, 5,
                    what="SpecValid=False")
    assert cond["reason"] == "ChildRejected", cond
    assert "Deployment/linear" in cond["message"] and "env[0].name" in cond["message"], cond["message"]
    # named by the user's own field first, and once (the env is in the init container's too)
    assert cond["message"].startswith("spec.runtime.env[0].name (Deployment/linear spec.template.spec."), cond
    assert cond["message"].count("spec.runtime.env[0].name") == 1, cond["message"]
    assert not k.remaining_children("linear")
    wait_for(lambda: _warnings(k, "linear", "ChildRejected"), 5, what="a ChildRejected Warning event")
    # ... and the operator's log keeps it (events expire after an hour)
    assert f"WARNING tritonscale: {ns}/linear: ChildRejected: spec.runtime.env[0].name" in op.output()

    # What the client's schema passes and only the API server refuses: "=" in an env var's name.
    k.patch("linear", {"spec": {"runtime": {"env": [{"name": "A=B", "value": "x"}]}}})
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and "A=B" in c["message"] and c, 5,
                    what="SpecValid=False for the env name")
    assert cond["status"] == "False" and cond["reason"] == "ChildRejected", cond
    assert "Deployment/linear spec.template.spec.containers[0].env[0].name" in cond["message"], cond["message"]
    assert "spec.runtime.env[0].name (Deployment/linear" in cond["message"], cond["message"]
    assert not k.remaining_children("linear")
    # A config larger than a ConfigMap holds: the API server's refusal named no field ("ConfigMap/x []: Too
    # long"); the operator names the spec field that makes it so, before any request (an audit, session 80).
    k.patch("linear", {"spec": {"runtime": {"env": [{"name": "A", "value": "x"}]},
                                "model": {"parameters": {"vocabulary": "x" * 1_100_000}}}})
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and "config.pbtxt" in c["message"] and c, 10,
                    what="SpecValid=False for the config's size")
    assert cond["message"].startswith("spec.model.parameters.vocabulary: the rendered config.pbtxt is "), cond
    assert "more than the 1048576 bytes a ConfigMap holds" in cond["message"], cond
    assert not k.remaining_children("linear")
    # A Deployment larger than etcd stores (0.9 MB of env, held twice): every dry run passed (none reaches etcd),
    # the ConfigMap was written, and the Deployment's write failed on every pass (auditG, session 84).
    k.patch("linear", {"spec": {"model": {"parameters": {"vocabulary": None}},
                                "runtime": {"env": [{"name": f"V{i}", "value": "x" * 1000} for i in range(900)]}}})
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and "etcd" in c["message"] and c, 10,
                    what="SpecValid=False for the Deployment's size")
    assert cond["reason"] == "ChildRejected" and cond["message"].startswith(
        "spec.runtime.env: the rendered Deployment/linear is "), cond
    assert not k.remaining_children("linear")
    # back to the refused env (a valid spec now would make the children before the fix below)
    k.patch("linear", {"spec": {"model": {"parameters": {"vocabulary": None}},
                                "runtime": {"env": [{"name": "A=B", "value": "x"}]}}})
    wait_for(lambda: "A=B" in (k.condition("linear", "SpecValid") or {}).get("message", ""), 10,
             what="SpecValid=False for the env name again")

    # Fixed: the children appear. Then a change the API server refuses again, with a ConfigMap
    # change in it: nothing changes, the ConfigMap included.
    k.patch("linear", {"spec": {"runtime": {"env": [{"name": "GREETING", "value": "hi"}]}}})
    wait_for(lambda: k.children("linear"), 5, what="the children of the fixed spec")
    wait_for(lambda: f"INFO tritonscale: {ns}/linear: created Deployment/linear" in op.output(), 5,
             what="the creation in the operator's log")
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="SpecValid=True")
    # the Deployment controller stamps its revision annotation just after the create
    wait_for(lambda: "deployment.kubernetes.io/revision" in k.deployment("linear")["metadata"].get("annotations", {}),
             5, what="the Deployment's revision annotation")
    before = k.children("linear")
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 500},
                                "runtime": {"env": [{"value": "no name"}]}}})
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "False", 5,
             what="SpecValid=False after the refused change")
    time.sleep(0.5)
    after = k.children("linear")
    for kind in before:
        assert _desired(after[kind]) == _desired(before[kind]), kind
    assert "max_queue_delay_microseconds: 2000" in after["ConfigMap"]["data"]["config.pbtxt"]
    # The children of the last valid spec keep serving, and status keeps counting them: a scale of
    # the Deployment (here by hand; no Prometheus, so the autoscaler holds what it finds) shows in
    # status.replicas while the spec stays refused.
    assert k.get("linear")["status"]["replicas"] == 1
    k.apps.patch_namespaced_deployment_scale("linear", ns, {"spec": {"replicas": 2}})
    wait_for(lambda: k.get("linear")["status"].get("replicas") == 2, 5, what="status.replicas following the Deployment")
    assert (k.condition("linear", "SpecValid") or {}).get("reason") == "ChildRejected"
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_children_orphaned_by_a_deletion_are_adopted_by_the_object_applied_again(api_client, namespace,
                                                                                  start_operator):
    """Found by an exploratory test: `kubectl delete tis --cascade=orphan` and the same YAML applied again
    left the new object in NameConflict for good (its own children, serving, were "another object's"),
    and the advice was to delete them: an outage. Now children with no owner and this object's labels
    are taken back, as a Deployment adopts its ReplicaSets; the Deployment is the same object (no pod
    rolls). A child edited by hand meanwhile, its label taken off with it, is corrected too."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    k.create(sample(namespace))
    before = wait_for(lambda: k.children("linear"), 10, what="the children")
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="SpecValid=True")
    k.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "linear",
                                             propagation_policy="Orphan")
    wait_for(lambda: not exists(k.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, "linear"),
             10, what="the InferenceService gone")
    orphans = k.children("linear")
    assert all(not (c["metadata"].get("ownerReferences") or []) for c in orphans.values()), orphans
    uid = k.create(sample(namespace))["metadata"]["uid"]
    after = wait_for(lambda: (c := k.children("linear")) and all(
        any(r["uid"] == uid for r in x["metadata"].get("ownerReferences") or []) for x in c.values()) and c,
        10, what="every child owned by the new object")
    for kind in before:
        assert after[kind]["metadata"]["uid"] == before[kind]["metadata"]["uid"], kind
    assert after["Deployment"]["spec"]["template"] == before["Deployment"]["spec"]["template"]
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("reason") != "NameConflict"
             and (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="no NameConflict")
    def adopted() -> list:
        return [e for e in k.core.list_namespaced_event(namespace).items
                if e.involved_object.name == "linear" and e.reason == "Adopted"]
    # Kopf posts events from a queue, after the pass's status write: read once, two of four had arrived
    wait_for(lambda: len(adopted()) >= 4, 10, what="an Adopted event for each child")
    assert len(adopted()) == 4, [e.message for e in adopted()]

    # a Service edited by hand, the label that named its owner taken off with it: still corrected at once
    k.core.patch_namespaced_service("linear", namespace, [
        {"op": "remove", "path": "/metadata/labels/tritonscale.io~1inferenceservice"},
        {"op": "replace", "path": "/spec/selector", "value": {"app": "nothing"}}])
    wait_for(lambda: k.core.read_namespaced_service("linear", namespace).spec.selector == {LABEL: "linear"}, 10,
             what="the Service's selector corrected")
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_an_earlier_configs_orphaned_configmap_is_adopted_and_goes_with_the_object(api_client, namespace,
                                                                                   start_operator):
    """An exploratory audit: after a config change the Deployment's previous ReplicaSet still mounts the
    earlier config's ConfigMap. `kubectl delete tis --cascade=orphan` and the object applied again adopted
    only the children it renders, so that ConfigMap had no owner and outlived the object's deletion."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    k.create(body)
    wait_for(lambda: k.children("linear"), 10, what="the children")
    # The first template's ReplicaSet before the edit: without it (the Deployment controller had not made it
    # yet, under a loaded CI run) no ReplicaSet mounts the first config, and the operator deletes it, rightly.
    first = mounted_configmap(k.deployment("linear"))
    wait_for(lambda: any(mounted_configmap(rs) == first for rs in k.replica_sets("linear")), 15,
             what="the first template's ReplicaSet")
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 4321}}})
    configmaps = wait_for(lambda: (c := k.core.list_namespaced_config_map(
        namespace, label_selector=f"{LABEL}=linear").items) and len(c) == 2 and c, 15,
        what="two configs: the new one and the one the previous ReplicaSet mounts")
    k.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "linear",
                                             propagation_policy="Orphan")
    wait_for(lambda: not exists(k.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, "linear"),
             10, what="the InferenceService gone")
    applied = copy.deepcopy(body)
    applied["spec"].setdefault("batching", {})["maxQueueDelayMicroseconds"] = 4321
    uid = k.create(applied)["metadata"]["uid"]
    names = {c.metadata.name for c in configmaps}
    wait_for(lambda: all(any(r.uid == uid for r in c.metadata.owner_references or [])
                         for c in k.core.list_namespaced_config_map(namespace, label_selector=f"{LABEL}=linear").items
                         if c.metadata.name in names), 15, what="both ConfigMaps owned by the new object",
             detail=op.log_tail)
    assert {c.metadata.name for c in k.core.list_namespaced_config_map(
        namespace, label_selector=f"{LABEL}=linear").items} == names
    k.delete("linear")
    wait_for(lambda: not k.core.list_namespaced_config_map(namespace, label_selector=f"{LABEL}=linear").items, 60,
             what="both ConfigMaps collected with the object")
    assert "Traceback" not in op.output(), op.output()


def test_an_object_restored_from_its_own_yaml_is_reconciled(api_client, namespace, start_operator):
    """Found by an exploratory audit (session 78): `kubectl get tis -o yaml`, delete, then apply that
    YAML again (a backup restored, `kubectl replace --force`, a GitOps move). The new object carried
    the old one's diff-base annotation, equal to its spec, so Kopf saw nothing to do: no children, no
    status, no autoscaler, nothing logged, until an edit or a restart -- and the garbage collector had
    already removed the old children. An object with no status was never handled here, whatever its
    annotations say."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    k.create(sample(namespace))
    wait_for(lambda: k.children("linear"), 10, what="the children")
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="SpecValid=True")
    # Kopf writes its diff-base in the patch that ends the handling, which may come after the handler's
    # own status patch that set SpecValid
    backup = wait_for(lambda: (b := k.get("linear")) and "tritonscale.io/last-handled-configuration"
                      in (b["metadata"].get("annotations") or {}) and b, 10, what="the diff-base annotation")
    k.delete("linear")
    wait_for(lambda: not exists(k.core.read_namespaced_service, "linear", namespace), 30,
             what="the old children collected")
    restored = {"apiVersion": backup["apiVersion"], "kind": backup["kind"], "spec": backup["spec"],
                "metadata": {"name": "linear", "namespace": namespace,
                             "annotations": backup["metadata"]["annotations"],
                             "labels": backup["metadata"].get("labels") or {}}}
    uid = k.create(restored)["metadata"]["uid"]

    def owned() -> dict:  # every child made, each owned by the restored object (made one after another)
        children = k.children("linear")
        return {kind: any(r["uid"] == uid for r in child["metadata"].get("ownerReferences") or [])
                for kind, child in children.items()}

    wait_for(lambda: all(owned().values()), 15, what="the restored object's children owned by it",
             detail=lambda: str(k.remaining_children("linear")))
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 10,
             what="the restored object's status")
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_a_configmap_replaced_by_hand_is_replaced_back(api_client, namespace, start_operator):
    """Left open since session 79: the config ConfigMap is immutable, so one replaced by hand with other
    data (`kubectl replace --force`, keeping its ownerReference) could not be patched back -- the API
    server refused the patch, and the object read SpecValid=False ChildRejected until someone deleted
    the ConfigMap. Now it is deleted and created again with the rendered config, said as drift."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    k.create(sample(namespace))
    cm = wait_for(lambda: k.children("linear")["ConfigMap"], 10, what="the children")
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="SpecValid=True")
    name, rendered = cm["metadata"]["name"], cm["data"]
    forged = {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
              "metadata": {k_: cm["metadata"][k_] for k_ in ("name", "namespace", "labels", "ownerReferences")},
              "data": {"config.pbtxt": 'name: "linear"\nmax_batch_size: 1\n'}}
    k.core.delete_namespaced_config_map(name, namespace)
    k.core.create_namespaced_config_map(namespace, forged, field_manager="kubectl-replace")
    back = wait_for(lambda: (c := k.core.read_namespaced_config_map(name, namespace)).data == rendered and c, 10,
                    what="the rendered config back", detail=lambda: str(k.get("linear").get("status")))
    assert back.immutable is True and back.metadata.owner_references[0].uid == k.get("linear")["metadata"]["uid"]
    assert (k.condition("linear", "SpecValid") or {}).get("status") == "True", k.get("linear").get("status")
    events = wait_for(lambda: [e for e in k.core.list_namespaced_event(namespace).items
                               if e.reason == "DriftReverted" and name in (e.message or "")], 5,
                      what="a DriftReverted event")
    assert events[0].type == "Warning" and "changed by kubectl-replace" in events[0].message, events[0].message
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_an_edit_of_the_scaling_bounds_is_acted_on_before_the_next_tick(api_client, namespace, start_operator):
    """Found by an audit (session 78): at intervalSeconds 90 a minReplicas raised moved the
    PodDisruptionBudget at once and the Deployment 70 s later, at the next tick. The autoscaler loop
    now ticks once the reconciler has handled an edit; here the interval is 600 s, so only that tick
    can scale. And a new object's first tick, if it ran before its Deployment was made, did nothing
    and waited the whole interval (seen at 300 s): the first tick with the Deployment comes at once."""
    op = start_operator("--prometheus-url", "http://127.0.0.1:9")  # nothing there: the floor holds
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    body["spec"]["scaling"].update({"minReplicas": 1, "maxReplicas": 4, "intervalSeconds": 600})
    k.create(body)
    wait_for(lambda: (k.get("linear").get("status") or {}).get("lastTickTime"), 15, what="the first tick")
    assert k.deployment("linear")["spec"]["replicas"] == 1
    k.patch("linear", {"spec": {"scaling": {"minReplicas": 3}}})
    wait_for(lambda: k.deployment("linear")["spec"]["replicas"] == 3, 10, what="the raised floor in the Deployment",
             detail=lambda: str(k.get("linear").get("status")))
    k.patch("linear", {"spec": {"scaling": {"minReplicas": 1, "maxReplicas": 2}}})
    wait_for(lambda: k.deployment("linear")["spec"]["replicas"] == 2, 10,
             what="the lowered ceiling in the Deployment", detail=lambda: str(k.get("linear").get("status")))
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_a_value_the_api_server_cannot_decode_is_named_by_its_spec_field(api_client, namespace, start_operator):
    """Found by an exploratory test: a runAsUser past int64 in runtime.securityContext (free-form) was
    refused with Go's decoder's message and no cause, so the condition named only the Deployment."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    body["spec"]["runtime"]["securityContext"] = {"runAsUser": 10**20}
    k.create(body)
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and c["status"] == "False" and c, 5,
                    what="SpecValid=False")
    assert cond["reason"] == "ChildRejected", cond
    assert cond["message"].startswith("spec.runtime.securityContext.runAsUser (Deployment/linear "), cond["message"]
    assert not k.remaining_children("linear")
    assert "Traceback" not in op.output(), op.output()


def test_what_the_api_server_accepts_with_a_warning_is_said(api_client, namespace, start_operator):
    """Found by an exploratory test: the API server accepts a pod template with two env vars of one name
    (the later hides the earlier) with a warning, which kubectl prints for the objects it writes; the
    operator writes the Deployment, and the warning reached nobody. Now it is a Warning event and a log
    line, named by the spec field, and the children are made as before."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    body["spec"]["runtime"]["env"] = [{"name": "GREETING", "value": "hi"}, {"name": "GREETING", "value": "hello"}]
    k.create(body)
    wait_for(lambda: k.children("linear"), 10, what="the children")
    events = wait_for(lambda: _warnings(k, "linear", "ChildWarning"), 5, what="a ChildWarning event")
    # named by the user's field, once (the env is the init container's too)
    assert events[0].message.startswith("the API server warns: spec.runtime.env[1] (Deployment/linear "
                                        "spec.template.spec."), events[0].message
    assert 'hides previous definition of "GREETING"' in events[0].message, events[0].message
    assert events[0].message.count("spec.runtime.env[1] (") == 1, events[0].message
    logged = f"WARNING tritonscale: {namespace}/linear: the API server warns: spec.runtime.env[1]"
    wait_for(lambda: logged in op.output(), 5, what="the warning in the operator's log")
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 5, what="SpecValid=True")
    assert "Traceback" not in op.output(), op.output()


def test_an_edit_is_checked_as_a_create_is(api_client, namespace, start_operator):
    """Found by an exploratory review. On an InferenceService that already had its children, a number in
    runtime.env[].value was refused by the API server with the Deployment echoed whole and no field
    named (with a larger env, a condition too long to write: the status stayed at the old generation),
    and a misspelt toleration key was dropped without a word, where a new InferenceService got both
    refused by field. And taking runtime.serviceAccountName out of the spec left it in force."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    doc = sample(namespace)
    doc["spec"]["runtime"]["serviceAccountName"] = "triton-reader"
    k.create(doc)
    wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 10, what="SpecValid=True")
    wait_for(lambda: k.children("linear"), 10, what="the children")
    wait_for(lambda: "deployment.kubernetes.io/revision" in k.deployment("linear")["metadata"].get("annotations", {}),
             5, what="the Deployment's revision annotation")
    # No such ServiceAccount: the ReplicaSet cannot create pods, and Ready says so (not "warm up")
    ready = wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "PodsNotCreated" and c, 10,
                     what="Ready=False PodsNotCreated")
    assert ready["status"] == "False" and 'serviceaccount "triton-reader" not found' in ready["message"], ready
    before = k.children("linear")
    for key, value, named in [
        ("env", [{"name": "OMP_NUM_THREADS", "value": 4}], "spec.runtime.env[0].value"),
        ("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "tolerationSecond": 30}],
         "spec.runtime.tolerations[0].tolerationSecond"),
        ("topologySpreadConstraints",
         [{"maxSkew": 0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}],
         "spec.runtime.topologySpreadConstraints[0].maxSkew"),
    ]:
        k.patch("linear", {"spec": {"runtime": {key: value}}})
        generation = k.get("linear")["metadata"]["generation"]
        cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and c["status"] == "False"
                        and c.get("observedGeneration") == generation and c, 10,  # noqa: B023
                        what=f"SpecValid=False for {named}")
        assert cond["reason"] == "ChildRejected", cond
        assert cond["message"].startswith(f"{named} (Deployment/linear spec.template.spec."), cond["message"]
        assert len(cond["message"]) < 1000, cond["message"]
        after = k.children("linear")
        for kind in before:
            assert _desired(after[kind]) == _desired(before[kind]), (key, kind)
        k.patch("linear", {"spec": {"runtime": {key: None}}})
        wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 10,
                 what=f"SpecValid=True without {key}")

    pod = k.deployment("linear")["spec"]["template"]["spec"]
    assert pod.get("serviceAccountName") == pod.get("serviceAccount") == "triton-reader", pod
    k.patch("linear", {"spec": {"runtime": {"serviceAccountName": None}}})
    wait_for(lambda: not {"serviceAccountName", "serviceAccount"} & set(k.deployment("linear")["spec"]["template"]
                                                                          ["spec"]), 10,
             what="the Deployment's pod template without the ServiceAccount")
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_a_restricted_namespace_is_served_with_runtime_security_context(api_client, namespace, models_claim, node,
                                                                         start_operator):
    """Pod Security admission at the restricted level refuses the pods of a spec without runAsNonRoot
    (Ready said the models were warming up, and no spec field could fix it); with
    runtime.securityContext the ReplicaSet creates them."""
    core = kubernetes.client.CoreV1Api(api_client)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    start_operator()
    k = Cluster(api_client, namespace)
    k.create(sample(namespace))
    ready = wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "PodsNotCreated" and c, 15,
                     what="Ready=False PodsNotCreated")
    assert 'violates PodSecurity "restricted' in ready["message"] and "runAsNonRoot" in ready["message"], ready
    k.patch("linear", {"spec": {"runtime": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                                                "runAsGroup": 1000}}}})
    wait_for(lambda: k.core.list_namespaced_pod(namespace, label_selector=f"{LABEL}=linear").items, 30,
             what="a pod the restricted level admits")
    node()  # the stand-in kubelet marks the admitted pod Ready: the rollout ends, the old ReplicaSet goes
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("status") == "True", 60,
             what="Ready=True once the admitted pod is ready")
    # a misspelt key is refused by field, as in runtime's other free-form blocks
    k.patch("linear", {"spec": {"runtime": {"securityContext": {"runAsNonRoot": True, "runAsUsr": 1000}}}})
    cond = wait_for(lambda: (c := k.condition("linear", "SpecValid")) and c["status"] == "False" and c, 10,
                    what="SpecValid=False for the misspelt key")
    assert cond["message"].startswith("spec.runtime.securityContext.runAsUsr (Deployment/linear"), cond["message"]


def test_a_write_refused_after_its_dry_run_passed_is_reported(api_client, namespace, start_operator):
    """An admission policy that lets dry runs through (a change freeze on Deployments' templates):
    the Deployment's patch is refused after the ConfigMap's was written. The Ready condition and a
    Warning event say what happened; once the policy goes, the change lands."""
    admission = kubernetes.client.AdmissionregistrationV1Api(api_client)
    policy_name = f"freeze-{namespace}"
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                         "operations": ["UPDATE"], "resources": ["deployments"]}]},
                 "validations": [{"expression": "request.dryRun == true || "
                                                "object.spec.template == oldObject.spec.template",
                                  "message": "templates are frozen"}]}})
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": policy_name},
               "spec": {"policyName": policy_name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": namespace}}}}}
    op = start_operator()
    k = Cluster(api_client, namespace)
    try:
        k.create(sample(namespace))
        wait_for(lambda: (k.condition("linear", "SpecValid") or {}).get("status") == "True", 10, what="SpecValid")
        admission.create_validating_admission_policy_binding(binding)
        time.sleep(1.5)  # the policy is enforced once the API server's informer has it
        k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 700}}})
        cond = wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "ChildWriteFailed" and c,
                        10, what="Ready=False ChildWriteFailed")
        assert "Deployment/linear could not be written" in cond["message"] and "frozen" in cond["message"], cond
        wait_for(lambda: _warnings(k, "linear", "ChildWriteFailed"), 5, what="a ChildWriteFailed Warning event")
    finally:
        for delete in (admission.delete_validating_admission_policy_binding,
                       admission.delete_validating_admission_policy):
            try:
                delete(policy_name)
            except kubernetes.client.ApiException:
                pass
    wait_for(lambda: "max_queue_delay_microseconds: 700" in k.children("linear")["ConfigMap"]["data"]["config.pbtxt"]
             and k.deployment("linear")["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION], 60,
             what="the change landing once the policy is gone")
    assert op.alive()


def _no_services_quota(k: Cluster) -> None:
    """A ResourceQuota "no-services" that allows no Service in ``k``'s namespace, enforced once this returns."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-services"},
             "spec": {"hard": {"services": "0"}}}
    k.core.create_namespaced_resource_quota(k.ns, quota)
    wait_for(lambda: (k.core.read_namespaced_resource_quota("no-services", k.ns).status.hard or {}), 10,
             what="the quota's status (enforced from then on)")


def test_a_child_a_resource_quota_refuses_is_reported(api_client, namespace, start_operator):
    """Found by an exploratory audit (session 80): a ResourceQuota that refuses a child (here no Service
    may be made) answers the dry run with 403, not as an invalid spec; the handler retried with Kopf's
    backoff and nothing else said why -- no status, no event, a blank STATUS column. The Ready condition
    and a Warning event now quote the quota, and the children come once it allows them."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    _no_services_quota(k)
    k.create(sample(namespace))
    cond = wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "ChildWriteFailed" and c,
                    15, what="Ready=False ChildWriteFailed", detail=op.log_tail)
    assert cond["status"] == "False" and "Service/linear could not be written" in cond["message"], cond
    assert "exceeded quota: no-services" in cond["message"], cond
    wait_for(lambda: _warnings(k, "linear", "ChildWriteFailed"), 5, what="a ChildWriteFailed Warning event")
    k.core.delete_namespaced_resource_quota("no-services", namespace)
    # the handler retries with a backoff (handlers.API_RETRY_S, doubled at each retry)
    wait_for(lambda: exists(k.core.read_namespaced_service, "linear", namespace), 60,
             what="the Service once the quota is gone")
    assert op.alive()
    assert "Traceback" not in op.output(), op.output()


def test_an_edit_is_handled_at_once_while_a_refused_write_waits_for_its_retry(api_client, namespace,
                                                                             start_operator):
    """A write the API server refused (here a ResourceQuota; RBAC or a webhook alike) is retried after a delay
    doubled at each retry (5, 10, 20, 40 s ...), and Kopf ran no handler for an edit made meanwhile: the
    edit that follows a fix waited for the retry (an exploratory audit: 32 s; up to 5 minutes). Now an edit
    ends the delay (kopf_settings.EditsCutRetryDelays)."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    _no_services_quota(k)
    k.create(sample(namespace))
    wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] == "ChildWriteFailed", 15,
             what="Ready=False ChildWriteFailed", detail=op.log_tail)
    time.sleep(17.0)  # retries at about 5 and 15 s: the next is 20 s after the second
    k.core.delete_namespaced_resource_quota("no-services", namespace)
    edited = time.monotonic()
    k.patch("linear", {"spec": {"scaling": {"maxReplicas": 5}}})
    wait_for(lambda: exists(k.core.read_namespaced_service, "linear", namespace), 10,
             what="the Service soon after the edit, not at the retry", detail=op.log_tail)
    assert time.monotonic() - edited < 10
    wait_for(lambda: (c := k.condition("linear", "Ready")) and c["reason"] != "ChildWriteFailed", 15,
             what="Ready past ChildWriteFailed", detail=op.log_tail)
    assert k.get("linear")["status"]["observedGeneration"] == k.get("linear")["metadata"]["generation"]
    assert "Traceback" not in op.output(), op.output()


def test_pods_are_made_under_a_quota_on_cpu_and_memory(api_client, namespace, start_operator):
    """A ResourceQuota on requests.cpu and limits.memory (common in shared namespaces) refuses a pod any of
    whose containers leaves them unset: the ReplicaSet made no pod ("must specify requests.cpu for:
    model-fetch"), and no spec field reached the init container (an audit, session 80). It now takes the
    triton container's cpu and memory."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
             "spec": {"hard": {"requests.cpu": "4", "limits.memory": "8Gi"}}}
    k.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(lambda: (k.core.read_namespaced_resource_quota("compute", namespace).status.hard or {}), 10,
             what="the quota's status (enforced from then on)")
    body = sample(namespace)
    body["spec"]["runtime"]["resources"] = {"requests": {"cpu": "500m", "memory": "512Mi"},
                                            "limits": {"memory": "1Gi"}}
    k.create(body)
    pods = wait_for(lambda: k.core.list_namespaced_pod(namespace, label_selector=f"{LABEL}=linear").items, 20,
                    what="a pod under the quota", detail=lambda: str(k.get("linear").get("status")))
    (init,) = pods[0].spec.init_containers
    assert init.resources.requests == {"cpu": "500m", "memory": "512Mi"} and init.resources.limits == {"memory": "1Gi"}
    assert op.alive()


def test_a_large_spec_applied_with_kubectl_is_handled_without_errors(api_client, namespace, start_operator):
    """~140 KiB of model parameters with kubectl apply's copy of the object beside it: Kopf's own record
    of the spec (its diff-base annotation) is kept small, so its writes are not refused ("Too long": 256
    KiB for all annotations) -- they were, with two tracebacks at every event of the object -- and an
    edit of an elided part still reaches the children at once."""
    op = start_operator()
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    body["spec"]["model"]["parameters"] = {f"p{i}": "v" * 1000 for i in range(140)}
    applied = json.dumps(body, separators=(",", ":"))
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": applied}
    k.create(body)
    wait_for(lambda: exists(k.apps.read_namespaced_deployment, "linear", namespace), 10, what="the children")
    first = mounted_configmap(k.deployment("linear"))
    k.patch("linear", {"spec": {"model": {"parameters": {"p7": "w" * 1000}}}})
    wait_for(lambda: mounted_configmap(k.deployment("linear")) != first, 10,
             what="the edit of an elided parameter rolled out (a new config)")
    config = k.children("linear")["ConfigMap"]["data"]["config.pbtxt"]
    assert "w" * 1000 in config
    stored = k.get("linear")["metadata"]["annotations"]["tritonscale.io/last-handled-configuration"]
    assert len(stored) <= 16 * 1024 + 1 and "sha256:" in stored
    time.sleep(1.0)
    assert "Too long" not in op.output() and "Traceback" not in op.output(), op.output()[-3000:]
    assert op.alive()


def test_a_spec_an_operator_only_rule_refuses_is_admitted_and_reported_and_stays_writable(
        api_client, namespace, start_operator):
    """An OPERATOR_ONLY rule (rules.py: added while objects that break it may exist) is not in the CRD: the API
    server does not ratchet a spec-wide CEL rule for an unchanged object, and such an object's every write -- its
    status, a finalizer's removal -- was refused (auditO D1). The operator says SpecValid=False naming the field,
    creates nothing, and the object can still be annotated and deleted."""
    start_operator()
    k = Cluster(api_client, namespace)
    body = sample(namespace)
    body["metadata"]["name"] = "trt"
    body["spec"]["model"]["backend"] = "tensorrt"
    body["spec"]["runtime"]["gpus"] = 0
    k.create(body)
    cond = wait_for(lambda: (c := k.condition("trt", "SpecValid")) and c["status"] == "False" and c, 10,
                    what="SpecValid=False")
    assert "spec.model.backend" in cond["message"] and "runs only on GPUs" in cond["message"], cond
    assert not exists(k.apps.read_namespaced_deployment, "trt", namespace)
    k.patch("trt", {"metadata": {"annotations": {"note": "still writable"}}})
    k.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "trt")
    wait_for(lambda: not exists(k.get, "trt"), 10, what="trt deleted")
