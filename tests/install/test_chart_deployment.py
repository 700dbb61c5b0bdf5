"""The operator's Deployment as charts/tritonscale renders it (helm template): its defaults and the
non-default configuration, replicas and leader election, the image, security contexts, pod labels and
annotations, maxUpgradeRollouts. Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from support.chart_render import CHART, NAMESPACE, helm, helm_binary, helm_template, helm_template_raw
from support.chart_render import one as _one

# replicaCount 2 (the default): leader election over the release's Lease, client-go's timings.
# The chart's default --max-upgrade-rollouts (values.yaml maxUpgradeRollouts), before the election flags
UPGRADE_ARG = "--max-upgrade-rollouts=1"
LEADER_ELECTION_ARGS = ["--leader-elect", "--leader-elect-resource-name=tritonscale",
                        f"--leader-elect-resource-namespace={NAMESPACE}", "--leader-elect-lease-duration=15",
                        "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"]
POD_NAME_ENV = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


def test_operator_deployment_defaults(rendered):
    objects = rendered["default"]
    dep = _one(objects, "Deployment", "tritonscale")
    # Two replicas behind the leader Lease: a rollout may overlap them.
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert c["image"] == f"ghcr.io/tritonscale/tritonscale:{chart['appVersion']}" \
        == "ghcr.io/tritonscale/tritonscale:0.5.0"
    assert c["args"] == ["run", "--metrics-port=8080", "--liveness-port=8081", UPGRADE_ARG, *LEADER_ELECTION_ARGS]
    assert c["env"] == [POD_NAME_ENV]  # no Prometheus by default
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    # Ready once it answers, and 10 s of it before an old pod goes: a new pod that exits at start (a
    # Prometheus URL it refuses) stops the rollout -- with no readinessProbe it counted as available the
    # moment its container started (an exploration of helm upgrades, session 55).
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert dep["spec"]["minReadySeconds"] == 10
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 8080, "healthz": 8081}
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"},
                              "limits": {"cpu": "500m", "memory": "1Gi"}}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["name"] == "tmp" and "emptyDir" in pod["volumes"][0]
    sa = _one(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    binding = _one(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == _one(objects, "ClusterRole")["metadata"]["name"]

    svc = _one(objects, "Service", "tritonscale-metrics")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert not [o for o in objects if o["kind"] in ("PodMonitor", "ConfigMap", "NetworkPolicy")]
    assert [o["metadata"]["name"] for o in objects if o["kind"] in ("Role", "RoleBinding")] == [
        "tritonscale-leader-election"] * 2


def test_operator_deployment_non_default(rendered):
    objects = rendered["non-default"]
    (c,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["run", "--metrics-port=8080", "--liveness-port=8081",
                         "--prometheus-url=http://prometheus.monitoring:9090",
                         "--prometheus-ca-file=/etc/tritonscale/prometheus-ca/ca.crt", "--namespace=a", "--namespace=b",
                         "--verbose", UPGRADE_ARG, *LEADER_ELECTION_ARGS]
    assert c["env"] == [{"name": "TRITONSCALE_PROMETHEUS_URL", "value": "http://prometheus.monitoring:9090"},
                        POD_NAME_ENV]
    # Namespaced mode: the namespaced rules only in a and b; cluster-wide only read-only lookups.
    for ns in ("a", "b"):
        role = _one([o for o in objects if o["metadata"].get("namespace") == ns], "Role")
        binding = _one([o for o in objects if o["metadata"].get("namespace") == ns], "RoleBinding")
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    (cr,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert {v for rule in cr["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert [r["resources"] for r in cr["rules"] if "get" in r["verbs"]] == [["nodes"]]  # the drain surge's reads
    resources = {r for rule in cr["rules"] for r in rule["resources"]}
    assert resources == {"namespaces", "customresourcedefinitions", "nodes"}


def test_replica_count_2_renders_leader_election_pdb_and_anti_affinity(tmp_path):
    """`helm template --set replicaCount=2`: everything two replicas need."""
    objects = [d for d in yaml.safe_load_all(helm("template", "tritonscale", str(CHART), "--namespace", NAMESPACE,
                                                  "--set", "replicaCount=2")) if d]
    dep = _one(objects, "Deployment")
    selector = dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][3:] == [UPGRADE_ARG, *LEADER_ELECTION_ARGS]
    # Preferred, not required: one node must still run both (e.g. a single-node cluster).
    assert dep["spec"]["template"]["spec"]["affinity"] == {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}}}]}}
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    # a pod that is not Ready may go (it acts on nothing): with both crash-looping, drains hung (auditE, session 84)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector},
                           "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    # The Lease only, in the release namespace, with the verbs the election uses: get and
    # update limited to the Lease's name; create cannot be limited by name.
    role = _one(objects, "Role", "tritonscale-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["tritonscale"],
         "verbs": ["get", "update"]}]
    binding = _one(objects, "RoleBinding", "tritonscale-leader-election")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "tritonscale-leader-election"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tritonscale", "namespace": NAMESPACE}]
    # Timings from values; the election's own rules on them are the chart's too.
    values = {"replicaCount": 3, "affinity": {"nodeAffinity": {}},
              "leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20.5, "retryPeriodSeconds": 4}}
    dep = _one(helm_template(values, tmp_path), "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][-3:] == ["--leader-elect-lease-duration=30", "--leader-elect-renew-deadline=20.5",
                              "--leader-elect-retry-period=4"]
    assert dep["spec"]["replicas"] == 3 and dep["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {}}


@pytest.mark.parametrize("timings, message", [
    ({"leaseDurationSeconds": 10, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2},
     "leaseDurationSeconds must be greater than leaderElection.renewDeadlineSeconds"),
    ({"leaseDurationSeconds": 15, "renewDeadlineSeconds": 4, "retryPeriodSeconds": 4},
     "renewDeadlineSeconds must be greater than 1.2 x leaderElection.retryPeriodSeconds"),
])
def test_unsafe_leader_election_timings_fail_to_render(timings, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"leaderElection": timings}))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_image_digest_series_labels_and_extra_args(tmp_path):
    digest = "sha256:" + "ab" * 32
    objects = helm_template({"image": {"digest": digest}, "seriesLabels": {"cluster": "prod"},
                             "extraArgs": ["--verbose"], "serviceAccount": {"create": False, "name": "ops"}},
                            tmp_path)
    dep = _one(objects, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"ghcr.io/tritonscale/tritonscale@{digest}"
    assert "--series-label=cluster=prod" in c["args"] and c["args"][-1] == "--verbose"
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    assert not [o for o in objects if o["kind"] == "ServiceAccount"]


def test_one_replica_elects_too_and_rolls_with_recreate(tmp_path):
    """One pod holds the Lease as well: a `helm upgrade --set replicaCount=2` that also changes the
    pod template makes the Deployment controller scale the old ReplicaSet to 2 before it rolls, and
    two old pods without an election both acted."""
    objects = helm_template({"replicaCount": 1}, tmp_path)
    dep = _one(objects, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert "minReadySeconds" not in dep["spec"]  # nothing to keep running: Recreate stops it first
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert c["args"] == ["run", "--metrics-port=8080", "--liveness-port=8081", UPGRADE_ARG, *LEADER_ELECTION_ARGS]
    assert [e["name"] for e in c["env"]] == ["POD_NAME"]
    assert "affinity" not in dep["spec"]["template"]["spec"]
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert _one(objects, "Role", "tritonscale-leader-election")["rules"][1]["resourceNames"] == ["tritonscale"]


@pytest.mark.parametrize(("value", "args"), [
    (0, ["--max-upgrade-rollouts=0"]),  # every fleet at once
    (3, ["--max-upgrade-rollouts=3"]),
    # absent, as from `helm upgrade --reuse-values` of a release of an older chart: the operator's own
    # default (1), not `int nil` = 0, which would have lifted the limit without a word
    (None, []),
])
def test_max_upgrade_rollouts_is_passed_when_set(tmp_path, value, args):
    proc = helm_template_raw({"maxUpgradeRollouts": value}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dep = _one([d for d in yaml.safe_load_all(proc.stdout) if d], "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert [a for a in c["args"] if a.startswith("--max-upgrade-rollouts")] == args


def test_max_upgrade_rollouts_below_zero_is_refused(tmp_path):
    proc = helm_template_raw({"maxUpgradeRollouts": -1}, tmp_path)
    assert proc.returncode != 0 and "maxUpgradeRollouts" in proc.stderr, proc.stderr


@pytest.mark.parametrize("key", ["app.kubernetes.io/instance", "app.kubernetes.io/name",
                                 "app.kubernetes.io/component"])
def test_pod_labels_may_not_replace_the_charts_own(tmp_path, key):
    """instance rendered the key twice and failed at install (selector does not match template labels);
    component installed and quietly took the operator out of its PodMonitor and scrape job."""
    proc = helm_template_raw({"podLabels": {key: "x"}}, tmp_path)
    assert proc.returncode != 0
    assert f"podLabels: {key} is the chart's own label" in proc.stderr, proc.stderr


def test_a_registry_with_a_port_is_a_valid_repository(tmp_path):
    (dep,) = [o for o in helm_template({"image": {"repository": "localhost:5000/team/tritonscale"}}, tmp_path)
              if o["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost:5000/team/tritonscale:0.5.0"


def test_the_security_contexts_are_values_so_openshift_can_assign_the_user(tmp_path):
    """OpenShift's restricted SCC gives each namespace a user range and refuses a fixed runAsUser: the ids
    can be nulled (Helm deletes a key set to null), the rest of the hardening stays."""
    nulls = {"podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
             "securityContext": {"runAsUser": None, "runAsGroup": None}}
    pod = _one(helm_template(nulls, tmp_path), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    sc = pod["containers"][0]["securityContext"]
    assert not {"runAsUser", "runAsGroup"} & set(sc)
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["runAsNonRoot"] is True
    (tmp_path / "x").mkdir()
    other = _one(helm_template({"podSecurityContext": {"runAsUser": 1000680000}}, tmp_path / "x"),
                 "Deployment")["spec"]["template"]["spec"]
    assert other["securityContext"]["runAsUser"] == 1000680000 and other["securityContext"]["fsGroup"] == 65532


def test_the_operator_pods_do_not_hold_their_nodes_for_the_cluster_autoscaler(tmp_path):
    """The /tmp emptyDir holds nothing to keep: without the annotation cluster-autoscaler's default
    --skip-nodes-with-local-storage never scaled the operator's nodes down. podAnnotations may say otherwise."""
    key = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"

    def annotations(values: dict[str, Any]) -> dict[str, str]:
        (dep,) = [d for d in helm_template(values, tmp_path) if d["kind"] == "Deployment"]
        return dep["spec"]["template"]["metadata"]["annotations"]

    assert annotations({}) == {key: "tmp"}
    assert annotations({"podAnnotations": {"a": "b", key: ""}}) == {"a": "b", key: ""}
