"""The install artefacts against a real kube-apiserver: the CRD is accepted (structural
schema, CEL rules within the cost budget), `kubectl apply -f manifests/install.yaml`
succeeds on a fresh control plane, and `helm install` of the chart succeeds (the
session's control plane is set up that way; see conftest)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import kubernetes
import pytest
import yaml

from support.cluster import BIN, OPERATOR_NAMESPACE, REPO, client_for, run_tool
from tritonscale.cluster import ClusterError, ControlPlane

CRD_FILE = REPO / "crds" / "inferenceservices.tritonscale.io.yaml"
CRD_NAME = "inferenceservices.tritonscale.io"


@pytest.fixture(scope="module")
def fresh_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own, with nothing installed."""
    plane = ControlPlane(tmp_path_factory.mktemp("fresh-control-plane"))
    try:
        plane.start()
    except ClusterError as exc:
        pytest.fail(f"the control plane did not start: {exc}", pytrace=False)
    yield plane
    plane.stop()


def _crd_conditions(client: kubernetes.client.ApiClient) -> dict[str, str]:
    crd = kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition(CRD_NAME)
    return {c.type: c.status for c in crd.status.conditions or []}


def _wait_established(client: kubernetes.client.ApiClient) -> dict[str, str]:
    deadline = time.monotonic() + 30
    while (conds := _crd_conditions(client)).get("Established") != "True":
        assert time.monotonic() < deadline, conds
        time.sleep(0.1)
    return conds


def test_crd_is_accepted_by_a_fresh_api_server(fresh_plane):
    kubeconfig = str(fresh_plane.kubeconfig)
    proc = run_tool("kubectl", "--kubeconfig", kubeconfig, "create", "-f", str(CRD_FILE))
    assert "Warning" not in proc.stderr, proc.stderr  # e.g. a rule near its cost limit
    client = client_for(kubeconfig)
    conds = _wait_established(client)
    assert conds.get("NamesAccepted") == "True" and "NonStructuralSchema" not in conds, conds
    # Stored as written: every CEL rule compiled and within the cost budget (the API
    # server refuses the whole CRD otherwise), none pruned.
    stored = client.sanitize_for_serialization(
        kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition(CRD_NAME))
    written = yaml.safe_load(CRD_FILE.read_text())

    def rules(crd: dict) -> list[str]:
        return sorted(v["rule"] for v in _walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))

    assert rules(stored) == rules(written) and len(rules(written)) >= 10
    out = run_tool("kubectl", "--kubeconfig", kubeconfig, "get", "tis", "-A").stderr
    assert "No resources found" in out


def test_helm_install_of_a_namespace_it_creates_and_watches(fresh_plane):
    """A team's own operator in its own namespace, watching only it, with the README's `--create-namespace`: the
    chart's check that each watched namespace exists ran at render, before Helm made the namespace, and refused
    every such install (auditE, session 84). Runs on the fresh plane before install.yaml's operator is there (a
    release beside it would be refused as overlapping: a cluster-wide operator watches this namespace too)."""
    kubeconfig = str(fresh_plane.kubeconfig)
    ns = "team-own"
    base = ("helm", "--kubeconfig", kubeconfig, "--namespace", ns)
    proc = run_tool(*base, "install", "team", str(REPO / "charts" / "tritonscale"), "--create-namespace",
                    "--skip-crds", "--set-json", f'watchNamespaces=["{ns}"]', "--set", "replicaCount=1")
    try:
        assert "STATUS: deployed" in proc.stdout, proc.stdout
        rbac = kubernetes.client.RbacAuthorizationV1Api(client_for(kubeconfig))
        assert rbac.read_namespaced_role("team-tritonscale", ns).metadata.namespace == ns
    finally:
        run_tool(*base, "uninstall", "team", "--wait")
    # Another namespace that does not exist is still refused at render, naming it
    missing = subprocess.run([str(BIN / "helm"), *base[1:], "install", "team", str(REPO / "charts" / "tritonscale"),
                              "--skip-crds", "--set-json", 'watchNamespaces=["team-own", "team-nowhere"]'],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and 'watchNamespaces: namespace "team-nowhere" does not exist' in missing.stderr


def _walk(node: dict) -> list[dict]:
    found = list(node.get("x-kubernetes-validations") or [])
    for sub in (node.get("properties") or {}).values():
        found += _walk(sub)
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"])
    return found


def test_kubectl_apply_install_yaml(fresh_plane):
    kubeconfig = str(fresh_plane.kubeconfig)
    proc = run_tool("kubectl", "--kubeconfig", kubeconfig, "apply", "-f", str(REPO / "manifests" / "install.yaml"))
    applied = {line.split()[0] for line in proc.stdout.splitlines()}
    print(proc.stdout)
    for obj in ("namespace/tritonscale-system", f"customresourcedefinition.apiextensions.k8s.io/{CRD_NAME}",
                "serviceaccount/tritonscale", "clusterrole.rbac.authorization.k8s.io/tritonscale",
                "clusterrolebinding.rbac.authorization.k8s.io/tritonscale", "service/tritonscale-metrics",
                "deployment.apps/tritonscale"):
        assert obj in applied, (obj, proc.stdout)
    client = client_for(kubeconfig)
    _wait_established(client)
    ns = kubernetes.client.CoreV1Api(client).read_namespace(OPERATOR_NAMESPACE)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The Deployment controller made a ReplicaSet and a pod (which waits: no Node here),
    # and Pod Security admission let the restricted pod in.
    apps, core = kubernetes.client.AppsV1Api(client), kubernetes.client.CoreV1Api(client)
    deadline = time.monotonic() + 30
    while not core.list_namespaced_pod(OPERATOR_NAMESPACE).items:
        assert time.monotonic() < deadline, apps.read_namespaced_deployment("tritonscale", OPERATOR_NAMESPACE).status
        time.sleep(0.2)
    # The RBAC it installs lets the ServiceAccount do what the operator does.
    sa = f"system:serviceaccount:{OPERATOR_NAMESPACE}:tritonscale"
    for verb, resource in (("watch", "inferenceservices.tritonscale.io"), ("patch", "deployments.apps"),
                           ("list", "pods"), ("create", "events")):
        out = run_tool("kubectl", "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource, "--as", sa, "-A")
        assert out.stdout.strip() == "yes", (verb, resource)
    # ... and no more: no pods deleted, no secrets.
    for verb, resource in (("delete", "pods"), ("get", "secrets")):
        proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource,
                               "--as", sa, "-A"], capture_output=True, text=True, timeout=60)
        assert proc.stdout.strip() == "no", (verb, resource, proc.stdout)
    # Leader election (two replicas): its own Lease in its own namespace, nothing more.
    lease_checks = [("update", "leases.coordination.k8s.io/tritonscale", OPERATOR_NAMESPACE, "yes"),
                    ("create", "leases.coordination.k8s.io", OPERATOR_NAMESPACE, "yes"),
                    ("update", "leases.coordination.k8s.io/other", OPERATOR_NAMESPACE, "no"),
                    ("list", "leases.coordination.k8s.io", OPERATOR_NAMESPACE, "no"),
                    ("update", "leases.coordination.k8s.io/tritonscale", "kube-system", "no")]
    for verb, resource, namespace, expected in lease_checks:
        proc = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", kubeconfig, "auth", "can-i", verb, resource,
                               "--as", sa, "-n", namespace], capture_output=True, text=True, timeout=60)
        assert proc.stdout.strip() == expected, (verb, resource, namespace, proc.stdout, proc.stderr)
    assert apps.read_namespaced_deployment("tritonscale", OPERATOR_NAMESPACE).spec.replicas == 2
    assert kubernetes.client.PolicyV1Api(client).read_namespaced_pod_disruption_budget(
        "tritonscale", OPERATOR_NAMESPACE).spec.max_unavailable == 1


def test_helm_install_succeeds(control_plane, operator_install, admin_client):
    """The session's control plane got its operator by `helm install` (see conftest)."""
    assert "STATUS: deployed" in operator_install.helm_output, operator_install.helm_output
    status = json.loads(run_tool("helm", "status", operator_install.release, "--namespace", OPERATOR_NAMESPACE,
                                 "--kubeconfig", str(control_plane.kubeconfig), "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    conds = _wait_established(admin_client)
    assert "NonStructuralSchema" not in conds
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin_client)
    binding = rbac.read_cluster_role_binding(operator_install.release)
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", operator_install.service_account, OPERATOR_NAMESPACE)]


def test_the_charts_network_policy_is_accepted_by_the_api_server(admin_client, tmp_path):
    """The chart's NetworkPolicy (networkPolicy.enabled) passes the real kube-apiserver's validation -- named
    ports, peers, protocols -- as a server-side dry run in the operator's namespace: nothing is created."""
    from support.chart_render import NON_DEFAULT_VALUES, helm_template

    (policy,) = [o for o in helm_template(NON_DEFAULT_VALUES, tmp_path) if o["kind"] == "NetworkPolicy"]
    policy["metadata"]["namespace"] = OPERATOR_NAMESPACE
    api = kubernetes.client.NetworkingV1Api(admin_client)
    made = api.create_namespaced_network_policy(OPERATOR_NAMESPACE, policy, dry_run="All")
    assert made.spec.policy_types == ["Ingress", "Egress"]
    assert [p.port for p in made.spec.ingress[0].ports] == ["metrics"]
    with pytest.raises(kubernetes.client.ApiException):
        api.read_namespaced_network_policy(policy["metadata"]["name"], OPERATOR_NAMESPACE)  # a dry run only
