"""The chart's RBAC covers every API request the real operator makes, and grants
nothing else (least privilege), on the real kube-apiserver.

The operator runs as the chart's ServiceAccount (helm-installed, default values,
token from the TokenRequest API), so the RBAC authorizer decides every request;
the API server's audit log records each one with its response code. The scenario
drives the real `tritonscale run` process through everything it does today:
create, children, Ready, spec change, drift on a child, a deleted child, an
invalid object, delete; and a second run with a dead Prometheus and a fallback
policy so the autoscaler's writes (Deployment spec.replicas, status, the pod
census) are recorded too. Both runs use the chart's leader election flags (default
values: two replicas), so the Lease requests are recorded too: the first run creates
the Lease, renews it and hands it back on SIGTERM; the second takes it. The test
fails on any 403 and on any grant no request used (but one, whose use an admission
plugin makes, shown separately).

Run with -s to see the derived list.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest

from support.chart_render import NON_DEFAULT_VALUES, helm_template, rbac_grants
from support.cluster import OPERATOR_NAMESPACE, RELEASE, client_for, sample, wait_for
from support.operator_cluster import Cluster
from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.render.kubernetes_objects import mounted_configmap

# Granted, and used by admission rather than by a request: children's ownerReferences
# set blockOwnerDeletion: true, and with the OwnerReferencesPermissionEnforcement
# admission plugin (on in the test control plane, as in OpenShift) the API server
# checks `update` on the owner's finalizers. test_finalizers_grant_is_what_admission_checks
# shows the operator's writes fail without it.
# The same plugin lets an ownerReference be set on an existing object only by who may delete it
# (adopting orphaned children: "cannot set an ownerRef on a resource you can't delete"); that grant is
# rbac.ownerReferencesPermissionEnforcement's, not the default's on a cluster without OpenShift's API
# (tests/install/test_chart_rbac_and_network_policy.py), so the default values grant no delete of a
# Deployment, Service or PDB.
GRANTED_WITHOUT_REQUEST = {("tritonscale.io", "inferenceservices/finalizers", "update")}


def _sample(namespace: str, name: str, **scaling: Any) -> dict[str, Any]:
    body = sample(namespace)
    body["metadata"]["name"] = name
    body["spec"]["scaling"].update(scaling)
    return body


class _Api(Cluster):
    """``Cluster`` and what this test reads besides: the mounted ConfigMap's name and config.pbtxt, and
    whether the object is gone."""

    def configmap(self, name: str) -> str:
        """The ConfigMap the Deployment mounts (NAME-config-HASH)."""
        return mounted_configmap(self.deployment(name))

    def config_pbtxt(self, name: str) -> str:
        return self.core.read_namespaced_config_map(self.configmap(name), self.ns).data["config.pbtxt"]

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False


def _lifecycle(k: _Api) -> None:
    ns = k.ns
    k.create(_sample(ns, "linear"))
    wait_for(lambda: k.apps.read_namespaced_deployment("linear", ns) and k.config_pbtxt("linear"), 5,
             what="children of linear")
    wait_for(lambda: (k.condition("linear", "Ready") or {}).get("status") == "True", 15, what="Ready=True")

    # A spec change that touches the ConfigMap, the Deployment's pod template and the PDB.
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 500}, "scaling": {"minReplicas": 2}}})
    wait_for(lambda: "max_queue_delay_microseconds: 500" in k.config_pbtxt("linear"), 5, what="spec change")
    wait_for(lambda: k.policy.read_namespaced_pod_disruption_budget("linear", ns).spec.min_available == 2, 5,
             what="PDB floor")

    # Drift on the Service is patched back.
    k.core.patch_namespaced_service("linear", ns, {"metadata": {"labels": {"app.kubernetes.io/managed-by": "x"}}})
    wait_for(lambda: k.core.read_namespaced_service("linear", ns).metadata.labels["app.kubernetes.io/managed-by"]
             == "tritonscale", 5, what="Service drift reverted")

    # ... and on the ConfigMap (its data is immutable: a new config is a new ConfigMap; its labels are not).
    current = k.configmap("linear")
    k.core.patch_namespaced_config_map(current, ns, {"metadata": {"labels": {"app.kubernetes.io/managed-by": "x"}}})
    wait_for(lambda: k.core.read_namespaced_config_map(current, ns).metadata.labels["app.kubernetes.io/managed-by"]
             == "tritonscale", 5, what="ConfigMap label drift reverted")

    # A ConfigMap no pod template mounts is deleted (here once the old ReplicaSets are gone; in a
    # cluster, once the Deployment prunes its history), at the pass a deleted ConfigMap starts.
    old = {c.metadata.name for c in k.core.list_namespaced_config_map(ns, label_selector=f"{LABEL}=linear").items}
    current = k.configmap("linear")
    assert old - {current}, "the spec change left the old ConfigMap for the old ReplicaSet"
    for rs in k.apps.list_namespaced_replica_set(ns, label_selector=f"{LABEL}=linear").items:
        if rs.spec.template.metadata.annotations != k.apps.read_namespaced_deployment(
                "linear", ns).spec.template.metadata.annotations:
            k.apps.delete_namespaced_replica_set(rs.metadata.name, ns)
    k.core.delete_namespaced_config_map(current, ns)
    wait_for(lambda: k.config_pbtxt("linear"), 5, what="deleted ConfigMap recreated")
    wait_for(lambda: {c.metadata.name for c in k.core.list_namespaced_config_map(
        ns, label_selector=f"{LABEL}=linear").items} == {current}, 5, what="the unmounted ConfigMaps deleted")

    # An object the API server admits but the operator refuses (a GPU count in the free-form resources
    # that disagrees with runtime.gpus: CEL cannot see inside those).
    conflicting = _sample(ns, "linear-v2")
    conflicting["spec"]["runtime"].update(gpus=1, resources={"limits": {"nvidia.com/gpu": 2}})
    k.create(conflicting)
    wait_for(lambda: (k.condition("linear-v2", "SpecValid") or {}).get("status") == "False", 5, what="SpecValid=False")

    k.delete("linear")
    wait_for(lambda: k.gone("linear"), 5, what="linear deleted")


def _chart_leader_election_args() -> list[str]:
    """The --leader-elect flags of the chart's Deployment (default values)."""
    (dep,) = [o for o in helm_template() if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    elect = [a for a in args if a.startswith("--leader-elect")]
    assert "--leader-elect" in elect, args
    return elect


def _delete_lease(api_client: kubernetes.client.ApiClient) -> None:
    """No Lease left by an earlier test: the first run must create it."""
    try:
        kubernetes.client.CoordinationV1Api(api_client).delete_namespaced_lease(RELEASE, OPERATOR_NAMESPACE)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


def _autoscaler_with_dead_prometheus(k: _Api, start_operator) -> Any:
    # nothing listens on port 9
    op = start_operator("--prometheus-url", "http://127.0.0.1:9", *_chart_leader_election_args())
    k.create(_sample(k.ns, "fallback", fallbackReplicas=2, failureThreshold=1, intervalSeconds=1))
    wait_for(lambda: k.apps.read_namespaced_deployment("fallback", k.ns), 5, what="children of fallback")
    # Give the autoscaler a few 1 s ticks against the dead Prometheus; with
    # failureThreshold 1 it should move to fallbackReplicas. Not asserted here.
    deadline = time.monotonic() + 6
    fell_back = False
    while time.monotonic() < deadline and not fell_back:
        fell_back = k.apps.read_namespaced_deployment("fallback", k.ns).spec.replicas == 2
        time.sleep(1 if fell_back else 0.2)  # after the fallback, leave time for the status patch
    print(f"\nautoscaler with a dead Prometheus reached fallbackReplicas=2: {fell_back}")
    assert op.alive(), op.output()
    return op


def _fmt(triples) -> str:
    return "\n".join(f"  {g or 'core'} {r} {v}" for g, r, v in sorted(triples))


def test_chart_rbac_covers_exactly_the_requests_in_the_audit_log(api_client, namespace, models_claim, node,
                                                                  operator_install, audit_log, start_operator,
                                                                  tmp_path):
    node()
    _delete_lease(api_client)
    k = _Api(api_client, namespace)
    op = start_operator(*_chart_leader_election_args())
    _lifecycle(k)
    assert "Traceback" not in op.output(), op.output()
    op.stop()
    op2 = _autoscaler_with_dead_prometheus(k, start_operator)
    op2.stop()

    requests = list(audit_log.requests(op.audit_mark, user=operator_install.user))
    refused = sorted({(r.verb, r.resource, r.namespace, r.name) for r in requests if r.code == 403})
    assert not refused, f"the chart's RBAC refused the operator: {refused}"
    used = {r.triple for r in requests if r.resource}
    # Requests without a resource are API discovery (GET /apis/GROUP/VERSION): non-resource
    # URLs that every authenticated user may read (the built-in system:discovery role).
    discovered = sorted({r.uri for r in requests if not r.resource})
    print(f"\nAPI requests the operator made ({len(requests)} audit events, {len(used)} kinds):\n{_fmt(used)}")
    print(f"plus API discovery: {', '.join(discovered)}")

    default = helm_template()
    cluster_roles = [o for o in default if o["kind"] == "ClusterRole"]
    assert len(cluster_roles) == 1, [o["metadata"]["name"] for o in cluster_roles]
    rules = cluster_roles[0]["rules"]
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            assert not any("*" in item for item in rule.get(key, [])), f"wildcard in {rule}"
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule fields: {rule}"
    granted = rbac_grants(cluster_roles, ("ClusterRole",))
    print(f"granted by ClusterRole {cluster_roles[0]['metadata']['name']}:\n{_fmt(granted)}")

    # The leader election's Role: the Lease only, in the release namespace.
    (election_role,) = [o for o in default if o["kind"] == "Role"]
    assert election_role["metadata"]["namespace"] == OPERATOR_NAMESPACE
    election = rbac_grants([election_role], ("Role",))
    print(f"granted by Role {election_role['metadata']['name']}:\n{_fmt(election)}")
    leases = [r for r in requests if r.resource == "leases"]
    assert leases and {r.namespace for r in leases} == {OPERATOR_NAMESPACE}
    named = {n for rule in election_role["rules"] for n in rule.get("resourceNames", [])}
    assert named == {RELEASE} and {r.name for r in leases if r.verb != "create"} == named

    missing = used - granted - election
    assert not missing, f"the ClusterRole and the Role (default values) lack:\n{_fmt(missing)}"
    unused = (granted | election) - used - GRANTED_WITHOUT_REQUEST
    assert not unused, f"the chart grants what the operator never requested:\n{_fmt(unused)}"

    # Namespaced mode (watchNamespaces: [a, b]): each Role plus the discovery
    # ClusterRole grant the same (group, resource, verb) set, because the operator
    # makes the same requests, only under per-namespace URLs.
    namespaced = helm_template(NON_DEFAULT_VALUES, tmp_path)
    roles = [o for o in namespaced if o["kind"] == "Role" and o["metadata"]["namespace"] != OPERATOR_NAMESPACE]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    discovery = rbac_grants(namespaced, ("ClusterRole",))
    (namespaced_election,) = [o for o in namespaced if o["kind"] == "Role" and o not in roles]
    assert rbac_grants([namespaced_election], ("Role",)) == election
    for role in roles:
        role_grants = rbac_grants([role], ("Role",))
        missing = {t for t in used if t not in role_grants and t not in discovery and t not in election}
        assert not missing, f"Role in {role['metadata']['namespace']} + discovery ClusterRole lack:\n{_fmt(missing)}"
    # In namespaced mode Kopf also lists and watches Namespaces (test_operator_namespaced
    # runs that mode under these Roles on the API server), and the cluster-scoped
    # grants stay read-only (the autoscaler's reads of Nodes, the drain surge's, are gets).
    assert {("", "namespaces", "list"), ("", "namespaces", "watch")} <= discovery
    assert {v for _, _, v in discovery} <= {"get", "list", "watch"}, discovery
    assert {res for _, res, v in discovery if v == "get"} == {"nodes"}, discovery


def test_finalizers_grant_is_what_admission_checks(api_client, namespace, operator_install):
    """The one grant no request uses: without `update` on inferenceservices/finalizers,
    the API server (OwnerReferencesPermissionEnforcement) refuses the children the
    operator writes, which carry blockOwnerDeletion: true."""
    owner = kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _sample(namespace, "owner"))
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "owner-config", "labels": {LABEL: "owner"},
        "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "name": "owner",
                             "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}}

    # The chart's ClusterRole less that one rule, bound to a probe user the admin impersonates.
    rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
    (chart_role,) = [o for o in helm_template() if o["kind"] == "ClusterRole"]
    rules = [r for r in chart_role["rules"] if r["resources"] != ["inferenceservices/finalizers"]]
    assert len(rules) == len(chart_role["rules"]) - 1
    probe = f"rbac-probe-{namespace}"
    rbac.create_cluster_role({"metadata": {"name": probe}, "rules": rules})
    rbac.create_cluster_role_binding({"metadata": {"name": probe},
                                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": probe},
                                      "subjects": [{"kind": "User", "name": probe}]})
    try:
        impersonated = kubernetes.client.ApiClient(api_client.configuration)
        impersonated.set_default_header("Impersonate-User", probe)
        wait_for(lambda: kubernetes.client.AuthorizationV1Api(impersonated).create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "configmaps"}}}
        ).status.allowed, 10, what="the probe's binding to take effect")
        with pytest.raises(kubernetes.client.ApiException) as refused:
            kubernetes.client.CoreV1Api(impersonated).create_namespaced_config_map(namespace, child)
        assert refused.value.status in (403, 422), refused.value.body
        assert "cannot set blockOwnerDeletion" in refused.value.body, refused.value.body

        # The chart's full ClusterRole, as the operator's ServiceAccount: admitted.
        kubernetes.client.CoreV1Api(client_for(operator_install.kubeconfig)).create_namespaced_config_map(
            namespace, child)
    finally:
        rbac.delete_cluster_role_binding(probe)
        rbac.delete_cluster_role(probe)
