"""What charts/tritonscale lets the operator reach (helm template): the RBAC grant of delete on its
children, given only where an admission plugin checks it, and the NetworkPolicy's ingress and egress.
Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from support.chart_render import CHART, NAMESPACE, NON_DEFAULT_VALUES, helm, helm_binary, helm_template
from support.chart_render import one as _one

_DELETE_OF_CHILDREN = {("apps", "deployments", "delete"), ("", "services", "delete"),
                       ("policy", "poddisruptionbudgets", "delete")}


@pytest.mark.parametrize(("args", "granted"), [
    ((), False),  # auto, and no OpenShift API: no delete of a Deployment, Service or PDB anywhere
    (("--api-versions", "config.openshift.io/v1"), True),  # auto on OpenShift
    (("--set", "rbac.ownerReferencesPermissionEnforcement=true"), True),
    (("--set", "rbac.ownerReferencesPermissionEnforcement=false", "--api-versions", "config.openshift.io/v1"), False),
    (("--set-json", 'watchNamespaces=["a"]', "--set", "rbac.ownerReferencesPermissionEnforcement=true"), True),
    # unset (helm upgrade --reuse-values from a release before the value): auto
    (("--set", "rbac.ownerReferencesPermissionEnforcement=null", "--api-versions", "config.openshift.io/v1"), True),
    (("--set", "rbac.ownerReferencesPermissionEnforcement=null"), False),
])
def test_delete_on_the_children_is_granted_only_for_the_admission_plugin_that_checks_it(args, granted):
    """auditK D3: the ClusterRole granted delete on every Deployment, Service and PodDisruptionBudget of the
    cluster (kube-system's too) for the OwnerReferencesPermissionEnforcement plugin alone, which most clusters
    do not run. ConfigMaps keep theirs: unmounted configs are deleted."""
    from support.chart_render import rbac_grants

    objects = [d for d in yaml.safe_load_all(helm("template", "tritonscale", str(CHART), "--namespace", NAMESPACE,
                                                  *args)) if d]
    grants = rbac_grants(objects, ("ClusterRole", "Role"))
    assert (_DELETE_OF_CHILDREN <= grants) is granted and not (_DELETE_OF_CHILDREN & grants and not granted)
    assert ("", "configmaps", "delete") in grants


def test_the_adoption_grant_takes_auto_true_or_false_only():
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--set",
                           "rbac.ownerReferencesPermissionEnforcement=yes"], capture_output=True, text=True)
    assert proc.returncode != 0 and "ownerReferencesPermissionEnforcement" in proc.stderr


def _egress_ports(policy: dict[str, Any]) -> list[list[tuple[int | str, str]]]:
    return [[(p["port"], p["protocol"]) for p in rule["ports"]] for rule in policy["spec"]["egress"]]


def test_network_policy_lets_in_the_operators_ports_and_out_dns_the_api_server_and_prometheus(rendered, tmp_path):
    """An egress NetworkPolicy was the README's advice only (session 57's note): the chart renders one, its
    Prometheus ports read from the URLs the operator may query."""
    objects = rendered["non-default"]
    policy = _one(objects, "NetworkPolicy")
    dep = _one(objects, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    names = {p["name"] for p in c["ports"]}
    metrics, health = policy["spec"]["ingress"]
    assert [p["port"] for p in metrics["ports"]] == ["metrics"] and [p["port"] for p in health["ports"]] == ["healthz"]
    assert {"metrics", "healthz"} <= names  # the container's own port names
    assert metrics["from"] == NON_DEFAULT_VALUES["networkPolicy"]["metricsFrom"] and "from" not in health
    dns, api, prom = policy["spec"]["egress"]
    assert _egress_ports(policy) == [[(53, "UDP"), (53, "TCP")], [(443, "TCP"), (6443, "TCP")], [(9090, "TCP")]]
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert "to" not in api and "to" not in prom  # no peers given: any address, on those ports

    # every URL's port, 80/443 by scheme where it names none, the listed ones; once each; peers and extra rules
    peers = [{"ipBlock": {"cidr": "10.0.0.2/32"}}]
    extra = {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 8443, "protocol": "TCP"}]}
    values = {"prometheus": {"url": "https://prom.monitoring", "allowedUrls": [
                  "http://thanos.monitoring/tenants/a", "http://[fd00::1]:9090", "https://prom.monitoring"]},
              "networkPolicy": {"enabled": True, "apiServer": {"to": peers, "ports": [6443]},
                                "prometheus": {"to": peers, "ports": [9090, 10902]}, "dns": {"to": []},
                                "extraEgress": [extra]}}
    policy = _one(helm_template(values, tmp_path), "NetworkPolicy")
    assert _egress_ports(policy) == [[(53, "UDP"), (53, "TCP")], [(6443, "TCP")],
                                     [(443, "TCP"), (80, "TCP"), (9090, "TCP"), (10902, "TCP")],
                                     [(8443, "TCP")]]
    dns, api, prom, more = policy["spec"]["egress"]
    assert "to" not in dns and api["to"] == peers and prom["to"] == peers and more == extra


def test_network_policy_without_a_prometheus_port_it_can_read_is_a_one_line_error(tmp_path):
    """prometheus.url in a Secret (or none at all): the chart cannot read a port, and says which value names it."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"networkPolicy": {"enabled": True},
                                    "prometheus": {"urlSecret": {"name": "prom-cred", "key": "url"}}}))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "networkPolicy.prometheus.ports: name the port(s) of the Prometheus the operator queries" in proc.stderr
    path.write_text(yaml.safe_dump({"networkPolicy": {"enabled": True, "prometheus": {"ports": [70000]}}}))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "/networkPolicy/prometheus/ports/0" in proc.stderr, proc.stderr
