"""charts/tritonscale with the real helm binary against the schemas: helm lint, the values schema (what it
refuses, that it describes every value), every rendered object against the Kubernetes OpenAPI schemas, and
the generated copies (chart CRD, manifests/install.yaml) in sync with their sources. Split from
test_chart.py, as are the other test_chart_*.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml

from support.chart_render import CHART, CONFIGS, NAMESPACE, REPO, helm, helm_binary, helm_template_raw
from support.chart_render import one as _one

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; the CRD's
# x-kubernetes-validations use fieldPath, new in 1.28) and the bundled kubectl's.
KUBE_VERSIONS = ["1.28.0", "1.35.0"]
CRD_FILE = "inferenceservices.tritonscale.io.yaml"


def test_chart_crd_is_the_generated_crd():
    generated = subprocess.run([sys.executable, "-m", "tritonscale", "crd"], capture_output=True, text=True,
                               check=True).stdout
    chart_copy = (CHART / "crds" / CRD_FILE).read_text()
    assert chart_copy == generated, (
        "charts/tritonscale/crds differs from `tritonscale crd`: run .ci/render-install")
    assert (REPO / "crds" / CRD_FILE).read_text() == chart_copy, "crds/ and the chart's copy differ"


@pytest.mark.parametrize("config", CONFIGS)
def test_helm_lint_is_clean(config, tmp_path):
    out = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, values=CONFIGS[config], tmp_dir=tmp_path)
    assert "0 chart(s) failed" in out, out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("bad, message", [
    ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
    ({"replicaCount": 0}, "/replicaCount"),
    ({"leaderElection": {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 0.5}},
     "/leaderElection/retryPeriodSeconds"),
    ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"fullnameOverride": "9lives"}, "/fullnameOverride"),  # its Service's name must start with a letter
    ({"replicaCount": 3_000_000_000}, "/replicaCount"),  # beyond int32: rendered as -1294967296
    ({"image": {"repository": "x", "tag": "a b"}}, "/image/tag"),
    ({"image": {"repository": "x", "digest": "latest"}}, "/image/digest"),
    ({"seriesLabels": {"bad-name": "x"}}, "invalid propertyName 'bad-name'"),
    ({"prometheus": {"url": "", "tls": {"caConfigMap": {"name": "Trust_Bundle", "key": "ca.crt"}}}},
     "/prometheus/tls/caConfigMap/name"),
    ({"prometheus": {"url": "", "tls": {"caConfigMap": {"name": "trust", "key": "../ca.crt/x"}}}},
     "/prometheus/tls/caConfigMap/key"),
    ({"prometheus": {"url": "", "tls": {"insecureSkipVerify": "yes"}}}, "/prometheus/tls/insecureSkipVerify"),
])
def test_values_schema_rejects_bad_values(bad, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run([helm_binary(), "lint", str(CHART), "--values", str(path)], capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def _leaf_paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in _leaf_paths(v, prefix + (k,))]
    return [prefix]


def test_values_schema_describes_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = []
    for path in _leaf_paths(values):
        node = schema
        for key in path:
            while "$ref" in node:  # a local reference: "#/definitions/NAME"
                node = schema["definitions"][node["$ref"].removeprefix("#/definitions/")]
            props = node.get("properties") or {}
            if key in props:
                node = props[key]
            elif isinstance(node.get("additionalProperties"), dict):  # a map, e.g. labels
                node = node["additionalProperties"]
            else:
                missing.append(".".join(path))
                break
    assert not missing, f"values without a schema entry: {missing}"


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("config", CONFIGS)
def test_rendered_objects_pass_kubernetes_schemas(rendered, config, kube_version):
    objects = rendered[config]
    checked = []
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "PodMonitor":  # a Prometheus Operator CRD: no schema in kubernetes-validate
            _check_pod_monitor(obj)
        elif kind == "PrometheusRule":  # likewise; its rules are promtool's (test_prometheus_rules.py)
            _check_prometheus_rule(obj)
        else:
            try:
                kubernetes_validate.validate(obj, kube_version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{kind}/{name} is invalid for Kubernetes {kube_version}: {str(exc).splitlines()[0]}")
        checked.append(kind)
    expected = {"CustomResourceDefinition", "ServiceAccount", "Deployment", "Service", "PodDisruptionBudget",
                "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}  # Role: the leader Lease
    expected |= set() if config == "default" else {"PodMonitor", "ConfigMap", "PrometheusRule", "NetworkPolicy"}
    assert expected <= set(checked), checked
    print(f"\n{config} @ {kube_version}: {len(checked)} objects valid: {sorted(checked)}")


def _check_prometheus_rule(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1", obj["apiVersion"]
    groups = obj["spec"]["groups"]
    assert groups and all(g["name"] and g["rules"] for g in groups), groups
    for rule in (r for g in groups for r in g["rules"]):
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["alert"] and rule["expr"] and rule["labels"]["severity"], rule


def _check_pod_monitor(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1", obj["apiVersion"]
    spec = obj["spec"]
    selector = spec["selector"]
    assert selector.get("matchLabels") or selector.get("matchExpressions"), selector
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    for endpoint in spec["podMetricsEndpoints"]:
        assert endpoint["port"] == "metrics", endpoint
        for relabel in endpoint.get("relabelings", []):
            assert set(relabel) <= {"sourceLabels", "targetLabel", "regex", "action", "replacement", "separator",
                                    "modulus"}, relabel


def test_crd_is_apiextensions_v1(rendered):
    crd = _one(rendered["default"], "CustomResourceDefinition")
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "inferenceservices.tritonscale.io"
    assert crd["spec"]["names"]["shortNames"] == ["tis"]
    kubernetes_validate.validate(crd, KUBE_VERSIONS[0], strict=True)


def test_install_yaml_is_in_sync_with_the_chart():
    helm_binary()  # skip without helm
    fresh = subprocess.run([str(REPO / ".ci" / "render-install"), "--stdout"], capture_output=True, text=True,
                           check=True).stdout
    current = (REPO / "manifests" / "install.yaml").read_text()
    assert current == fresh, "manifests/install.yaml drifted from the chart: run .ci/render-install"
    docs = [d for d in yaml.safe_load_all(current) if d]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"app.kubernetes.io/name": "tritonscale",
                                      "pod-security.kubernetes.io/enforce": "restricted"}}}
    assert [d["kind"] for d in docs].count("CustomResourceDefinition") == 1
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(("values", "key"), [
    ({"image": {"repository": "UPPER case/x"}}, "image"),
    ({"image": {"repository": "ghcr.io/x:1.0"}}, "image"),  # a tag in the name: 'ghcr.io/x:1.0:0.5.0'
    ({"serviceAccount": {"create": False, "name": "Bad Name"}}, "serviceAccount"),
    ({"nameOverride": "UPPER_bad"}, "nameOverride"),
    ({"priorityClassName": "Bad Name"}, "priorityClassName"),
    ({"podMonitor": {"enabled": True, "namespace": "Bad NS"}}, "podMonitor"),
])
def test_the_schema_refuses_names_kubernetes_would(tmp_path, values, key):
    """Each rendered before and was refused by the API server (or, for the image, by the kubelet)."""
    proc = helm_template_raw(values, tmp_path)
    assert proc.returncode != 0 and "schema" in proc.stderr and key in proc.stderr, proc.stderr


@pytest.mark.parametrize(("quantity", "ok"), [
    ("1Gi", True), ("500m", True), ("0.5", True), (".5", True), ("1e9", True), ("2E3", True), ("1.5Gi", True),
    ("1GiB", False), ("1Q", False), ("-1", False), ("1 Gi", False),
])
def test_resources_take_every_quantity_kubernetes_takes(tmp_path, quantity, ok):
    """Kubernetes' Quantity grammar (its OpenAPI pattern, without the sign): 1e9 and .5 were refused."""
    proc = helm_template_raw({"resources": {"limits": {"memory": quantity}}}, tmp_path)
    assert (proc.returncode == 0) is ok, proc.stderr
