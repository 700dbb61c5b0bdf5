"""Whose children they are, with the real operator on the real control plane: a name another object holds
is reported and never taken over; children orphaned by `kubectl delete --cascade=orphan` (an earlier
config's ConfigMap too) are adopted by the object applied again; an object restored from its own YAML
is reconciled.

Split from test_operator_core.py, with test_operator_lifecycle, _spec_checks, _ownership and _admission.
Each test starts its own operator (``start_operator``) in its own namespace, on the session's one control
plane, so the four files cost no more set-up than the one did."""

from __future__ import annotations

import copy
import time

from support.cluster import exists, sample, wait_for
from support.operator_cluster import Cluster
from support.operator_cluster import warning_events as _warnings
from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.render.kubernetes_objects import mounted_configmap


def test_a_name_another_object_holds_is_reported_and_never_taken_over(api_client, namespace, start_operator):
    """A user's own Service named like the InferenceService: the operator reports the conflict
    (Ready=False, NameConflict, a Warning event), writes nothing -- the Service keeps its selector
    and gains no ownerReference, so deleting the InferenceService could never delete it -- and
    creates the children once the name is free (Kopf retries the handler)."""
    from tritonscale.handlers.reconciler import CONFLICT_RETRY_S

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

    def owned_by_new() -> set[str]:  # both must be there and owned: one missing is not "all owned"
        return {c.metadata.name for c in k.core.list_namespaced_config_map(
            namespace, label_selector=f"{LABEL}=linear").items
            if any(r.uid == uid for r in c.metadata.owner_references or [])}

    wait_for(lambda: owned_by_new() == names, 15, what="both ConfigMaps owned by the new object",
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
