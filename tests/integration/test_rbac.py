"""The chart's RBAC covers every API request the real operator makes, and grants
nothing else (least privilege), derived from the requests the emulated API
records (`cluster.api.calls`).

The scenario drives the real `tritonscale run` process through everything it
does today: create, children, Ready, spec change, a deleted child, an invalid
spec, delete; and a second run with a dead Prometheus and a fallback policy so
the autoscaler's writes (Deployment spec.replicas, status) are recorded too.
Nothing about the autoscaler's behaviour is asserted here; only which requests
it makes.

Run with -s to see the derived list.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import yaml
from chart_render import NON_DEFAULT_VALUES, helm_binary, helm_template, rbac_grants
from conftest import SAMPLES, wait_for

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.sandbox.kubernetes_api import KubernetesAPI

NS = "default"
TEST_AGENT = "tritonscale-rbac-test"

# Granted but never seen by the emulator, each for a reason the emulator cannot show.
GRANTED_WITHOUT_REQUEST = {
    # Children's ownerReferences set blockOwnerDeletion: true; with the
    # OwnerReferencesPermissionEnforcement admission plugin the API server checks
    # this permission on the owner. No request is made to it.
    ("tritonscale.io", "inferenceservices/finalizers", "update"),
    # The same Events under the events.k8s.io API: Kopf posts core/v1 Events today,
    # a client on the newer API needs this one.
    ("events.k8s.io", "events", "create"),
}


def _sample(name: str, **scaling: Any) -> dict[str, Any]:
    body = yaml.safe_load((SAMPLES / "python-cpu.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"]["scaling"].update(scaling)
    return body


class _Api:
    def __init__(self, client: kubernetes.client.ApiClient):
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.policy = kubernetes.client.PolicyV1Api(client)

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def patch(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, patch,
                                                   _content_type="application/merge-patch+json")

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        conds = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == type_), {})

    def config_pbtxt(self, name: str) -> str:
        return self.core.read_namespaced_config_map(f"{name}-config", NS).data["config.pbtxt"]

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False


def _lifecycle(k: _Api) -> None:
    k.create(_sample("linear"))
    wait_for(lambda: k.apps.read_namespaced_deployment("linear", NS) and k.config_pbtxt("linear"), 5,
             what="children of linear")
    k.apps.patch_namespaced_deployment_status("linear", NS, {"status": {"replicas": 1, "readyReplicas": 1}})
    wait_for(lambda: k.condition("linear", "Ready").get("status") == "True", 5, what="Ready=True")

    # A spec change that touches the ConfigMap, the Deployment's pod template and the PDB.
    k.patch("linear", {"spec": {"batching": {"maxQueueDelayMicroseconds": 500}, "scaling": {"minReplicas": 2}}})
    wait_for(lambda: "max_queue_delay_microseconds: 500" in k.config_pbtxt("linear"), 5, what="spec change")
    wait_for(lambda: k.policy.read_namespaced_pod_disruption_budget("linear", NS).spec.min_available == 2, 5,
             what="PDB floor")

    # Drift on the Service is patched back.
    k.core.patch_namespaced_service("linear", NS, {"metadata": {"labels": {"app.kubernetes.io/managed-by": "x"}}})
    wait_for(lambda: k.core.read_namespaced_service("linear", NS).metadata.labels["app.kubernetes.io/managed-by"]
             == "tritonscale", 5, what="Service drift reverted")

    k.core.delete_namespaced_config_map("linear-config", NS)
    wait_for(lambda: k.config_pbtxt("linear"), 5, what="deleted ConfigMap recreated")

    bad = _sample("broken", minReplicas=5, maxReplicas=2)
    k.create(bad)
    wait_for(lambda: k.condition("broken", "SpecValid").get("status") == "False", 5, what="SpecValid=False")

    k.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "linear")
    wait_for(lambda: k.gone("linear"), 5, what="linear deleted (finalizer released)")


def _autoscaler_with_dead_prometheus(k: _Api, start_operator, cluster) -> None:
    mark = len(cluster.api.calls)
    op = start_operator("--prometheus-url", "http://127.0.0.1:9")  # nothing listens on port 9
    wait_for(lambda: any(c.resource == PLURAL and c.verb == "watch" for c in cluster.api.calls[mark:]), 30,
             what="second operator to start watching")
    k.create(_sample("fallback", fallbackReplicas=2, failureThreshold=1, intervalSeconds=1))
    wait_for(lambda: k.apps.read_namespaced_deployment("fallback", NS), 5, what="children of fallback")
    k.apps.patch_namespaced_deployment_status("fallback", NS, {"status": {"replicas": 1, "readyReplicas": 1}})
    # Give the autoscaler a few 1 s ticks against the dead Prometheus; with
    # failureThreshold 1 it should move to fallbackReplicas. Not asserted here.
    deadline = time.monotonic() + 6
    fell_back = False
    while time.monotonic() < deadline and not fell_back:
        fell_back = k.apps.read_namespaced_deployment("fallback", NS).spec.replicas == 2
        time.sleep(1 if fell_back else 0.2)  # after the fallback, leave time for the status patch
    print(f"\nautoscaler with a dead Prometheus reached fallbackReplicas=2: {fell_back}")
    assert op.alive(), op.output()


def _used(calls) -> set[tuple[str, str, str]]:
    """(group, resource[/subresource], verb) of resource requests. Requests without a
    resource are API discovery (GET /apis/GROUP/VERSION): non-resource URLs that
    every authenticated user may read (the built-in system:discovery role)."""
    return {(c.group, c.resource + (f"/{c.subresource}" if c.subresource else ""), c.verb)
            for c in calls if c.resource}


def _fmt(triples) -> str:
    return "\n".join(f"  {g or 'core'} {r} {v}" for g, r, v in sorted(triples))


def test_chart_rbac_covers_exactly_the_recorded_requests(cluster, api_client, start_operator, tmp_path,
                                                         monkeypatch):
    helm_binary()  # skips, before the slow scenario, when helm is missing
    # The test's own requests reach the same emulator; tag them by User-Agent and
    # leave them out of the record, so `cluster.api.calls` holds only the operator's.
    api_client.user_agent = TEST_AGENT
    original = KubernetesAPI._record

    def record_operator_only(self: KubernetesAPI, request: Any) -> None:
        if request.headers.get("User-Agent") != TEST_AGENT:
            original(self, request)

    monkeypatch.setattr(KubernetesAPI, "_record", record_operator_only)

    op = start_operator()
    k = _Api(api_client)
    _lifecycle(k)
    assert "Traceback" not in op.output(), op.output()
    op.stop()
    _autoscaler_with_dead_prometheus(k, start_operator, cluster)

    used = _used(cluster.api.calls)
    discovered = sorted({c.group or "core" for c in cluster.api.calls if not c.resource})
    print(f"\nAPI requests the operator made ({len(cluster.api.calls)} calls, {len(used)} kinds):\n{_fmt(used)}")
    print(f"plus API discovery of groups: {', '.join(discovered)}")

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

    missing = used - granted
    assert not missing, f"the ClusterRole (default values) lacks:\n{_fmt(missing)}"
    unused = granted - used - GRANTED_WITHOUT_REQUEST
    assert not unused, f"the ClusterRole grants what the operator never requested:\n{_fmt(unused)}"

    # Namespaced mode (watchNamespaces: [a, b]): each Role plus the discovery
    # ClusterRole grant the same (group, resource, verb) set, because the operator
    # makes the same requests, only under per-namespace URLs.
    namespaced = helm_template(NON_DEFAULT_VALUES, tmp_path)
    roles = [o for o in namespaced if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    discovery = rbac_grants(namespaced, ("ClusterRole",))
    for role in roles:
        role_grants = rbac_grants([role], ("Role",))
        missing = {t for t in used if t not in role_grants and t not in discovery}
        assert not missing, f"Role in {role['metadata']['namespace']} + discovery ClusterRole lack:\n{_fmt(missing)}"
    # In namespaced mode Kopf also lists and watches Namespaces (the emulator
    # cannot run that mode; see TESTING.md), and the cluster-scoped grants stay read-only.
    assert {("", "namespaces", "list"), ("", "namespaces", "watch")} <= discovery
    assert {v for _, _, v in discovery} <= {"list", "watch"}, discovery
