"""What the real operator and the real API server refuse or warn of in a spec, on the real control plane:
refused at admission (the CRD's schema and CEL rules), or reported as SpecValid=False naming the spec's
field (the client's schema, the API server's dry run, a value it cannot decode, an operator-only rule);
an edit checked as a create is, a warning said, and no child changed by what is refused.

Split from test_operator_core.py, with test_operator_lifecycle, _spec_checks, _ownership and _admission.
Each test starts its own operator (``start_operator``) in its own namespace, on the session's one control
plane, so the four files cost no more set-up than the one did."""

from __future__ import annotations

import copy
import json
import time

import kubernetes
import pytest

from support.cluster import exists, sample, wait_for
from support.operator_cluster import Cluster
from support.operator_cluster import warning_events as _warnings
from tritonscale.api.spec import GROUP, PLURAL, VERSION


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
