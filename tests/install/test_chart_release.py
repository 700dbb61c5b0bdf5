"""charts/tritonscale's release as a whole (helm template and install --dry-run): the names it gives
objects (long, refused, or read by YAML as a bool, number or null), its NOTES walkthrough, and its
versions beside the operator's image (Dockerfile, Chart.yaml, pyproject.toml). Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from support.chart_render import CHART, NAMESPACE, REPO, helm, helm_binary, helm_template
from support.chart_render import one as _one


def test_long_release_names_and_name_override(tmp_path):
    release_objects = yaml.safe_load_all(helm("template", "platform-inference-autoscaler-prod-eu-west-1a", str(CHART),
                                              "--namespace", NAMESPACE, tmp_dir=tmp_path))
    objects = [o for o in release_objects if o]
    services = [o["metadata"]["name"] for o in objects if o["kind"] == "Service"]  # DNS-1035 labels: 63 at most
    assert services and all(len(n) <= 63 for n in services), services
    assert all(len(o["metadata"]["name"]) <= 253 for o in objects)
    objects = helm_template({"nameOverride": "triton-op", "prometheusScrapeConfig": {"enabled": True}}, tmp_path)
    jobs = yaml.safe_load(_one(objects, "ConfigMap")["data"]["tritonscale-scrape-configs.yaml"])
    operator_job = next(j for j in jobs if j["job_name"] == "tritonscale-operator")
    assert operator_job["relabel_configs"][0]["regex"] == "triton-op;operator"
    dep = _one(objects, "Deployment")
    assert dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "triton-op"


@pytest.mark.parametrize("release", ["a.b", "1st"])
def test_a_release_name_kubernetes_refuses_for_the_objects_fails_to_render(release):
    """Not halfway through the install: a ClusterRole and an operator Deployment were left behind by
    a release that then failed on its Service's name."""
    proc = subprocess.run([helm_binary(), "template", release, str(CHART)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert f'the release name gives the operator\'s objects the name "{release}-tritonscale"' in proc.stderr, \
        proc.stderr


def test_names_yaml_would_read_as_bool_number_or_null_render_as_strings(tmp_path):
    """A release, namespace or name such as `on`, `2024`, `y` or `null` (each a valid Kubernetes name) went into
    the objects unquoted: YAML read a bool, a number or null, and the install failed ("cannot unmarshal number into
    ... metadata.namespace"), or a Role for the namespace `null` had no namespace and landed in the release's
    (auditE, session 84). Every kind the chart renders, with every optional one on."""
    values = {"nameOverride": "y", "serviceAccount": {"name": "no"}, "priorityClassName": "yes",
              "watchNamespaces": ["null", "on", "2024"], "podMonitor": {"enabled": True, "namespace": "true"},
              "prometheusRule": {"enabled": True, "namespace": "off"}, "prometheusScrapeConfig": {"enabled": True},
              "grafanaDashboard": {"enabled": True, "namespace": "1e3"}, "networkPolicy": {"enabled": True},
              "prometheus": {"url": "http://prom.monitoring:9090"},
              "replicaCount": 2}
    path = tmp_path / "values.json"  # JSON: PyYAML writes y unquoted, which Helm reads as true
    path.write_text(json.dumps(values))
    out = subprocess.run([helm_binary(), "template", "on", str(CHART), "--namespace", "2024", "--values", str(path)],
                         capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert len({d["kind"] for d in docs}) >= 10, sorted({d["kind"] for d in docs})

    def strings(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("name", "namespace", "serviceAccountName", "priorityClassName") or key.startswith(
                        "app.kubernetes.io/"):
                    assert isinstance(value, (str, dict, list)), f"{where}.{key}: {value!r}"
                strings(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                strings(item, f"{where}[{i}]")

    for doc in docs:
        strings(doc, f"{doc['kind']}/{doc['metadata']['name']}")
    roles = {(d["metadata"]["namespace"]) for d in docs if d["kind"] == "Role"}
    assert {"null", "on", "2024"} <= roles, roles
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert dep["metadata"]["namespace"] == "2024" and dep["metadata"]["labels"]["app.kubernetes.io/instance"] == "on"
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "yes"


def _notes(*values: str) -> str:
    proc = subprocess.run([helm_binary(), "install", "t", str(CHART), "--dry-run=client", *values],
                          capture_output=True, text=True, check=True)
    return proc.stdout[proc.stdout.index("NOTES:"):]


def test_notes_walkthrough_matches_the_sample():
    sample = yaml.safe_load((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text())
    name = sample["metadata"]["name"]
    notes = _notes()
    for line in ["kubectl apply -f manifests/samples/python-cpu.yaml", "kubectl get tis -w",
                 f"kubectl describe tis {name}", f"kubectl get events --field-selector involvedObject.name={name}"]:
        assert line in notes, line
    assert "https://" not in notes
    # Watching listed namespaces, the sample goes in the first, and the walkthrough looks there.
    notes = _notes("--set", "watchNamespaces={team-x,team-y}")
    for line in ["sed 's/namespace: default/namespace: team-x/' manifests/samples/python-cpu.yaml | kubectl apply -f -",
                 "kubectl get tis -n team-x -w", f"kubectl describe tis -n team-x {name}",
                 f"kubectl get events -n team-x --field-selector involvedObject.name={name}"]:
        assert line in notes, line
    # An upgrade that keeps the values uses --reset-then-reuse-values: --reuse-values drops the keys a
    # newer chart added, and its templates then fail on them.
    assert "--reset-then-reuse-values" in notes and "--reuse-values" not in notes.replace("reset-then-reuse", "")


def test_dockerfile_matches_the_chart(rendered):
    dockerfile = (REPO / "operator" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.M)
    assert "pip install --no-cache-dir ." in dockerfile
    assert re.search(r"^USER 65532(:65532)?$", dockerfile, re.M)
    assert 'ENTRYPOINT ["tritonscale"]' in dockerfile and 'CMD ["run"]' in dockerfile
    pod = _one(rendered["default"], "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["securityContext"]["runAsUser"] == 65532
    assert pod["containers"][0]["args"][0] == "run"  # args replace CMD; ENTRYPOINT stays `tritonscale`
    pyproject = (REPO / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version, "Chart appVersion (the default image tag) != package version"
    # ... and the chart's own version with it: the chart stayed 0.1.0 through eight changes of its
    # values and the operator's flags, so an upgrade could start a node's cached old image.
    import tritonscale

    assert chart["version"] == version == tritonscale.__version__
