"""The real operator (`tritonscale run` as a subprocess, real Kopf, real kubernetes
client over HTTP, as the chart's ServiceAccount) against the real control plane:
kube-apiserver validates, the Deployment and ReplicaSet controllers make pods, the
scheduler binds them to a test Node whose pods a stand-in marks Ready, and the
garbage collector removes children through their ownerReferences. Here an object's
life (its children, its status, edits reaching them, drift put back, its deletion),
and edits the operator acts on at once.

Split from test_operator_core.py, with test_operator_lifecycle, _spec_checks, _ownership and _admission.
Each test starts its own operator (``start_operator``) in its own namespace, on the session's one control
plane, so the four files cost no more set-up than the one did."""

from __future__ import annotations

import json
import time

from support.cluster import exists, sample, wait_for
from support.operator_cluster import Cluster
from tritonscale.api.spec import HASH_ANNOTATION, LABEL
from tritonscale.reconcile.diff import LAST_APPLIED
from tritonscale.render.deployment_records import recorded_spec
from tritonscale.render.kubernetes_objects import mounted_configmap


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
    # No finalizer (handlers.autoscale_daemon._without_finalizer): nothing holds the object, its namespace or the CRD
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
    # Without autoTune, status.batching (kubectl get tis -o wide's QUEUEDELAY) shows the spec's delay in force;
    # the autoscaler's tick writes it (the daemon wakes for a new generation).
    wait_for(lambda: ((k.get("linear")["status"].get("batching") or {}).get("maxQueueDelayMicroseconds"),
                      (k.get("linear")["status"].get("batching") or {}).get("source")) == (500, "spec"),
             20, what="status.batching to show the edited delay")
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
