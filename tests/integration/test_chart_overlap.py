"""`helm install` refuses a release whose namespaces overlap another tritonscale operator's (each
release elects its own leader: both would reconcile and autoscale the same InferenceServices), on
the real API server (the chart's lookup sees the cluster only at install, not in `helm template`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.cluster import BIN, CHART, create_namespace, delete_namespace, run_tool


def _install(kubeconfig, release: str, namespace: str, *watch: str) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "helm"), "install", release, str(CHART), "-n", namespace, "--kubeconfig", str(kubeconfig)]
    if watch:
        cmd += ["--set-json", f"watchNamespaces={list(watch)!r}".replace("'", '"')]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_release_overlapping_another_operator_fails_to_install(control_plane, api_client):
    kubeconfig = control_plane.kubeconfig
    home, team_a, team_b = (create_namespace(api_client, f"overlap-{t}") for t in ("home", "a", "b"))
    releases = []
    try:
        first = _install(kubeconfig, "ovl-a", home, team_a)
        assert first.returncode == 0, first.stderr
        releases.append("ovl-a")
        # Overlapping: team-a again, or every namespace.
        for watch in ((team_a, team_b), ()):
            proc = _install(kubeconfig, "ovl-b", home, *watch)
            assert proc.returncode != 0, proc.stdout
            assert f"the tritonscale operator {home}/ovl-a-tritonscale (release ovl-a) already watches namespaces " \
                   f"{team_a}" in proc.stderr, proc.stderr
            assert "two operators would reconcile and autoscale the same InferenceServices" in proc.stderr
        # Its own namespace: fine, and an upgrade of the first is no overlap with itself.
        second = _install(kubeconfig, "ovl-b", home, team_b)
        assert second.returncode == 0, second.stderr
        releases.append("ovl-b")
        run_tool("helm", "upgrade", "ovl-a", str(CHART), "-n", home, "--kubeconfig", str(kubeconfig),
                 "--reuse-values", "--set", "replicaCount=1")
        # ... nor one that renames its objects (its Deployment is known by release, not by name).
        run_tool("helm", "upgrade", "ovl-a", str(CHART), "-n", home, "--kubeconfig", str(kubeconfig),
                 "--reuse-values", "--set", "fullnameOverride=ovl-a-op")
    finally:
        for release in releases:
            subprocess.run([str(BIN / "helm"), "uninstall", release, "-n", home, "--kubeconfig", str(kubeconfig)],
                           capture_output=True, timeout=120)
        for ns in (home, team_a, team_b):
            delete_namespace(api_client, ns)


def test_an_operator_that_is_no_helm_release_is_named_as_such(control_plane, api_client):
    """manifests/install.yaml's operator (or one rendered by `helm template`) was called "(release
    tritonscale)" and the remedy was to uninstall it, though no Helm release exists to uninstall (an
    exploration of installs, session 55)."""
    import json

    kubeconfig = control_plane.kubeconfig
    home, plain = (create_namespace(api_client, f"overlap-{t}") for t in ("rel", "plain"))
    try:
        first = _install(kubeconfig, "ovl-p", home, plain)
        assert first.returncode == 0, first.stderr
        dep = json.loads(run_tool("kubectl", "--kubeconfig", str(kubeconfig), "-n", home, "get", "deployment",
                                  "ovl-p-tritonscale", "-o", "json").stdout)
        subprocess.run([str(BIN / "helm"), "uninstall", "ovl-p", "-n", home, "--kubeconfig", str(kubeconfig)],
                       capture_output=True, timeout=120, check=True)
        # The same operator Deployment, applied with kubectl: no meta.helm.sh annotations.
        meta = dep["metadata"]
        dep["metadata"] = {"name": "tritonscale", "namespace": plain, "labels": meta["labels"]}
        dep.pop("status", None)
        manifest = Path(control_plane.kubeconfig).parent / "plain-operator.json"
        manifest.write_text(json.dumps(dep))
        run_tool("kubectl", "--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest))
        proc = _install(kubeconfig, "ovl-q", home)
        assert proc.returncode != 0, proc.stdout
        assert (f"the tritonscale operator {plain}/tritonscale (not a Helm release: manifests/install.yaml, or "
                f"rendered by helm template) already watches namespaces {plain}") in proc.stderr, proc.stderr
        assert (f"or delete that one (kubectl delete -f manifests/install.yaml, or kubectl -n {plain} delete "
                "deployment tritonscale)") in proc.stderr, proc.stderr
    finally:
        subprocess.run([str(BIN / "helm"), "uninstall", "ovl-p", "-n", home, "--kubeconfig", str(kubeconfig)],
                       capture_output=True, timeout=120)
        for ns in (home, plain):
            delete_namespace(api_client, ns)


def test_a_watched_namespace_that_does_not_exist_fails_before_anything_is_written(control_plane, api_client):
    """Its Role would go in it: the install failed only after the cluster-wide objects were written
    (ClusterRole and ClusterRoleBinding left behind by a failed release). Now the chart refuses first,
    naming the value, and writes nothing."""
    kubeconfig = control_plane.kubeconfig
    home = create_namespace(api_client, "nswatch-home")
    missing = "nswatch-missing-team"
    try:
        proc = _install(kubeconfig, "nsw", home, missing)
        assert proc.returncode != 0, proc.stdout
        assert f'watchNamespaces: namespace "{missing}" does not exist; create it first' in proc.stderr, proc.stderr
        roles = run_tool("kubectl", "--kubeconfig", str(kubeconfig), "get", "clusterroles,clusterrolebindings",
                         "-l", "app.kubernetes.io/instance=nsw", "-o", "name").stdout
        assert roles.strip() == "", roles
    finally:
        subprocess.run([str(BIN / "helm"), "uninstall", "nsw", "-n", home, "--kubeconfig", str(kubeconfig)],
                       capture_output=True, timeout=120)
        delete_namespace(api_client, home)
