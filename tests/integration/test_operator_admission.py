"""What a namespace's admission does to the real operator's writes, on the real control plane: Pod
Security's restricted level, a ValidatingAdmissionPolicy that passes dry runs and refuses the write,
ResourceQuotas that refuse a child or a pod; each is reported, and the children come once allowed.

Split from test_operator_core.py, with test_operator_lifecycle, _spec_checks, _ownership and _admission.
Each test starts its own operator (``start_operator``) in its own namespace, on the session's one control
plane, so the four files cost no more set-up than the one did."""

from __future__ import annotations

import time

import kubernetes

from support.cluster import exists, sample, wait_for
from support.operator_cluster import Cluster
from support.operator_cluster import warning_events as _warnings
from tritonscale.api.spec import HASH_ANNOTATION, LABEL


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
    # the handler retries with a backoff (handlers.reconciler.API_RETRY_S, doubled at each retry)
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
