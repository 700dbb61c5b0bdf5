"""charts/tritonscale with the real helm binary: lint, render, validate every
object against the Kubernetes OpenAPI schemas, and keep the generated copies
(chart CRD, manifests/install.yaml) in sync with their sources.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml

from support.chart_render import CHART, NAMESPACE, NON_DEFAULT_VALUES, REPO, helm, helm_binary, helm_template
from support.spec_cases import PROMETHEUS_URLS

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; the CRD's
# x-kubernetes-validations use fieldPath, new in 1.28) and the bundled kubectl's.
KUBE_VERSIONS = ["1.28.0", "1.35.0"]
CONFIGS = {"default": None, "non-default": NON_DEFAULT_VALUES}
# replicaCount 2 (the default): leader election over the release's Lease, client-go's timings.
# The chart's default --max-upgrade-rollouts (values.yaml maxUpgradeRollouts), before the election flags
UPGRADE_ARG = "--max-upgrade-rollouts=1"
LEADER_ELECTION_ARGS = ["--leader-elect", "--leader-elect-resource-name=tritonscale",
                        f"--leader-elect-resource-namespace={NAMESPACE}", "--leader-elect-lease-duration=15",
                        "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"]
POD_NAME_ENV = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
CRD_FILE = "inferenceservices.tritonscale.io.yaml"

# The operator's own metrics (names final), served on :8080.
OPERATOR_METRICS = {
    "tritonscale_decisions_total", "tritonscale_observed_p95_milliseconds", "tritonscale_target_p95_milliseconds",
    "tritonscale_desired_replicas", "tritonscale_ready_replicas", "tritonscale_tick_duration_seconds",
    "tritonscale_leader",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, values in CONFIGS.items():
        out[name] = helm_template(values, tmp_path_factory.mktemp(name), include_crds=True)
    return out


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: found {[o['metadata']['name'] for o in found]}"
    return found[0]


# ---- the CRD ---------------------------------------------------------------------------

def test_chart_crd_is_the_generated_crd():
    generated = subprocess.run([sys.executable, "-m", "tritonscale", "crd"], capture_output=True, text=True,
                               check=True).stdout
    chart_copy = (CHART / "crds" / CRD_FILE).read_text()
    assert chart_copy == generated, (
        "charts/tritonscale/crds differs from `tritonscale crd`: run .ci/render-install")
    assert (REPO / "crds" / CRD_FILE).read_text() == chart_copy, "crds/ and the chart's copy differ"


# ---- lint ------------------------------------------------------------------------------

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


# ---- every rendered object against the Kubernetes OpenAPI schemas ------------------------

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


# ---- what the objects say -----------------------------------------------------------------

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
        == "ghcr.io/tritonscale/tritonscale:0.4.0"
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


@pytest.mark.parametrize("values, message", [
    ({"serviceAccount": {"create": False}}, "serviceAccount.name: name the ServiceAccount to run as"),
    ({"replicaCount": 2, "podDisruptionBudget": {"maxUnavailable": 2}},
     "podDisruptionBudget.maxUnavailable must be less than replicaCount"),
    ({"prometheus": {"url": "https://prometheus.monitoring:9090",
                     "tls": {"caConfigMap": {"name": "trust", "key": "ca.crt"}, "insecureSkipVerify": True}}},
     "prometheus.tls.caConfigMap.name and prometheus.tls.insecureSkipVerify exclude each other"),
    ({"prometheus": {"url": "http://p:9090", "urlSecret": {"name": "prom", "key": "url"}}},
     "prometheus.url and prometheus.urlSecret.name exclude each other"),
    # the operator would refuse it at start (its queries went to .../api/v1/query/api/v1/query)
    ({"prometheus": {"url": "http://prom.monitoring:9090/api/v1/query"}},
     "prometheus.url: give the Prometheus server's base URL, without /api/v1/query: the operator adds the API's "
     "path (http://prom.monitoring:9090)"),
    # URLs the operator's --prometheus-url refuses (the pods would crash-loop after a clean install): the message
    # says what is wrong (the schema's pattern printed only its regex)
    ({"prometheus": {"url": "prometheus:9090"}}, 'prometheus.url: "prometheus:9090" must start with http:// or https://'),
    ({"prometheus": {"url": "http://prom:abc"}}, 'prometheus.url: "http://prom:abc" must be http(s)://HOST[:PORT][/PATH]'),
    ({"prometheus": {"url": "http://x:99999"}}, 'prometheus.url: "http://x:99999": the port must be 1-65535'),
    ({"prometheus": {"url": "http://x:0"}}, 'prometheus.url: "http://x:0": the port must be 1-65535'),
    ({"prometheus": {"url": "http://:9090"}}, 'prometheus.url: "http://:9090" must be http(s)://HOST[:PORT][/PATH]'),
    ({"prometheus": {"url": "http://prom:9090/a\\b"}}, "must have no space or backslash"),  # refused by the operator
    ({"prometheus": {"allowedUrls": ["http://p:9090", "http://prom:9090/a\\b"]}},
     'prometheus.allowedUrls[1]: "http://prom:9090/a\\\\b" must have no space or backslash'),
    ({"prometheus": {"url": "http://prom:9090/?a=b"}},
     "must have no query or fragment: the operator appends /api/v1/query"),
    ({"prometheus": {"url": "http://prom:9090/#x"}},
     'prometheus.url: "http://prom:9090/#x" must have no query or fragment'),
    # credentials would show in the Deployment's args; the message does not repeat them
    ({"prometheus": {"url": "http://admin:s3cret@prom:9090"}},
     "prometheus.url: a URL with credentials would show in the operator's arguments; give it through "
     "prometheus.urlSecret"),
])
def test_values_that_would_install_something_unsafe_fail_to_render(values, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "s3cret" not in proc.stderr


@pytest.mark.parametrize("url", PROMETHEUS_URLS)
def test_the_chart_accepts_the_prometheus_urls_the_operator_accepts(url, tmp_path):
    """prometheus.url renders exactly when `tritonscale run --prometheus-url` would accept it (a URL the chart
    passes and the operator refuses is a crash loop after a clean install)."""
    from tritonscale.api.spec import prometheus_base_url

    try:
        prometheus_base_url(url)
        operator_accepts = True
    except ValueError:
        operator_accepts = False
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"prometheus": {"url": url}}))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)
    # ... but for credentials, which the chart takes only from prometheus.urlSecret (not into the Deployment)
    assert (proc.returncode == 0) == (operator_accepts and "@" not in url), proc.stderr


def test_the_chart_knows_every_flag_of_the_operator() -> None:
    """The chart refuses an extraArgs flag that `tritonscale run` does not have (the operator would exit at
    start, a crash loop after `helm install` said deployed): its list must be the parser's."""
    from tritonscale.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(getattr(a, "choices", None), dict))
    run = commands.choices["run"]
    flags = {o for a in run._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    template = (CHART / "templates" / "deployment.yaml").read_text()
    listed = re.search(r'\$runFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed, "no $runFlags list in the Deployment template"
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == flags
    # and the flags that take no value ("--verbose=1": "ignored explicit argument"), short ones too
    no_value = {o for a in run._actions if a.nargs == 0 for o in a.option_strings if o not in ("-h", "--help")}
    listed = re.search(r'\$noValueFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed, "no $noValueFlags list in the Deployment template"
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == no_value
    listed = re.search(r'\$valueFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed and set(re.findall(r'"([^"]+)"', listed.group(1))) <= flags - no_value


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "extraArgs: --bogus: tritonscale run has no flag --bogus (the operator would exit at start)"),
    (["--verbos=1"], "extraArgs: --verbos=1: tritonscale run has no flag --verbos"),
    (["-x"], "extraArgs: -x: tritonscale run takes no -x (its short flags: -v, repeatable, and -n NAMESPACE"),
    (["-vx"], "extraArgs: -vx: tritonscale run takes no -vx"),  # argparse: "ignored explicit argument 'x'"
    # "'1a' is not a Prometheus label name", and "expected NAME=VALUE"
    (["--series-label=1a=b"], "extraArgs: --series-label=1a=b: --series-label takes NAME=VALUE, NAME a Prometheus"),
    (["--series-label", "team"], "extraArgs: team: --series-label takes NAME=VALUE"),
    # argparse: "ignored explicit argument '1'" and "expected one argument"
    (["--verbose=1"], "extraArgs: --verbose=1: --verbose takes no value (the operator would exit at start)"),
    (["-v=true"], "extraArgs: -v=true: -v takes no value"),
    (["-v", "--series-label"], "extraArgs: --series-label needs a value after it (the operator would exit at start)"),
    (["--allowed-prometheus-url"], "extraArgs: --allowed-prometheus-url needs a value after it"),
])
def test_an_extra_arg_the_operator_does_not_take_fails_to_render(args, message, tmp_path):
    proc = helm_template_raw({"extraArgs": args}, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_the_flags_the_chart_leaves_to_extra_args_render(tmp_path):
    args = ["--series-label", "team=search", "--allowed-prometheus-url=http://p:9090", "-v"]
    (c,) = _one(helm_template({"extraArgs": args}, tmp_path), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["args"][-4:] == args


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


def test_a_prometheus_url_with_credentials_comes_from_a_secret(tmp_path):
    """prometheus.urlSecret: the URL (credentials and all) reaches the operator only as env from the
    Secret, not as an argument or a value in the Deployment."""
    dep = _one(helm_template({"prometheus": {"urlSecret": {"name": "prom-cred", "key": "url"}}}, tmp_path),
               "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert not [a for a in c["args"] if a.startswith("--prometheus-url")]
    assert c["env"][0] == {"name": "TRITONSCALE_PROMETHEUS_URL",
                           "valueFrom": {"secretKeyRef": {"name": "prom-cred", "key": "url"}}}


def test_an_https_prometheus_ca_from_a_config_map_or_no_check(tmp_path):
    """prometheus.tls: the ConfigMap's key is mounted read-only and passed as --prometheus-ca-file;
    insecureSkipVerify passes --prometheus-insecure-skip-tls-verify; by default neither (the
    image's system CAs)."""
    (tmp_path / "ca").mkdir()
    (tmp_path / "skip").mkdir()
    url = "https://prometheus.monitoring:9090"
    spec = _one(helm_template({"prometheus": {"url": url, "tls": {"caConfigMap": {"name": "trust-bundle",
                                                                                    "key": "prometheus-ca.pem"}}}},
                              tmp_path / "ca"), "Deployment")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert "--prometheus-ca-file=/etc/tritonscale/prometheus-ca/prometheus-ca.pem" in c["args"]
    assert "--prometheus-insecure-skip-tls-verify" not in c["args"]
    assert {"name": "prometheus-ca", "mountPath": "/etc/tritonscale/prometheus-ca", "readOnly": True} \
        in c["volumeMounts"]
    assert {"name": "prometheus-ca", "configMap": {"name": "trust-bundle", "items": [
        {"key": "prometheus-ca.pem", "path": "prometheus-ca.pem"}]}} in spec["volumes"]
    (c,) = _one(helm_template({"prometheus": {"url": url, "tls": {"insecureSkipVerify": True}}}, tmp_path / "skip"),
                "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--prometheus-insecure-skip-tls-verify" in c["args"]
    assert not [a for a in c["args"] if a.startswith("--prometheus-ca-file")]
    assert [m["name"] for m in c["volumeMounts"]] == ["tmp"]


def test_pod_monitor_scrape_timeout_is_left_to_prometheus_unless_set(tmp_path):
    """Prometheus refuses a timeout longer than the interval; left out, it takes the shorter of its
    global timeout and the interval (so interval: 5s just works)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    objects = helm_template({"podMonitor": {"enabled": True, "interval": "5s"}}, tmp_path / "a")
    for pm in (o for o in objects if o["kind"] == "PodMonitor"):
        (endpoint,) = pm["spec"]["podMetricsEndpoints"]
        assert endpoint["interval"] == "5s" and "scrapeTimeout" not in endpoint
    objects = helm_template({"podMonitor": {"enabled": True, "interval": "5s", "scrapeTimeout": "4s"}}, tmp_path / "b")
    assert {pm["spec"]["podMetricsEndpoints"][0]["scrapeTimeout"] for pm in objects if pm["kind"] == "PodMonitor"} \
        == {"4s"}


@pytest.mark.parametrize(("interval", "timeout", "ok"), [
    ("5s", "5s", True), ("1m30s", "90s", True), ("1s", "500ms", True),
    ("5s", "6s", False), ("1m30s", "90001ms", False), ("500ms", "1s", False),
    ("1d", "2h", True), ("1h", "1d", False), ("1w", "6d23h59m59s", True),
])
def test_pod_monitor_scrape_timeout_longer_than_the_interval_is_refused(tmp_path, interval, timeout, ok):
    """Prometheus refuses such a scrape config ('scrape timeout greater than scrape interval'): it rendered,
    installed, and the Triton pods were never scraped."""
    proc = helm_template_raw({"podMonitor": {"enabled": True, "interval": interval, "scrapeTimeout": timeout}},
                             tmp_path)
    assert (proc.returncode == 0) is ok, proc.stderr
    if not ok:
        assert f"podMonitor.scrapeTimeout ({timeout}) must not be longer than podMonitor.interval ({interval})" \
            in proc.stderr, proc.stderr


@pytest.mark.parametrize(("interval", "ok"), [
    ("1m30s", True), ("1d", True), ("2h30m", True), ("250ms", True),
    ("30s1m", False), ("1h1h", False), ("", False), ("1.5s", False),
])
def test_pod_monitor_durations_are_what_the_podmonitor_crd_takes(tmp_path, interval, ok):
    """The CRD's pattern: units largest first, each once (y w d h m s ms). 30s1m rendered before and the
    API server refused the PodMonitor; 1d was refused here, which the CRD takes."""
    proc = helm_template_raw({"podMonitor": {"enabled": True, "interval": interval}}, tmp_path)
    assert (proc.returncode == 0) is ok, proc.stderr
    if not ok:
        assert "schema" in proc.stderr and "interval" in proc.stderr, proc.stderr


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


def test_pod_monitors(rendered):
    objects = rendered["non-default"]
    triton = _one(objects, "PodMonitor", "tritonscale-triton")
    assert triton["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert triton["spec"]["selector"] == {"matchExpressions": [
        {"key": "tritonscale.io/inferenceservice", "operator": "Exists"}]}
    assert triton["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}
    (endpoint,) = triton["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel["inferenceservice"] == ["__meta_kubernetes_pod_label_tritonscale_io_inferenceservice"]
    assert relabel["namespace"] == ["__meta_kubernetes_namespace"]

    operator = _one(objects, "PodMonitor", "tritonscale-operator")
    dep = _one(objects, "Deployment")
    assert operator["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    (endpoint,) = operator["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True


def test_prometheus_scrape_config(rendered):
    text = (CHART / "files" / "prometheus-scrape-config.yaml").read_text()
    jobs = {job["job_name"]: job for job in yaml.safe_load(text)}
    triton = jobs["tritonscale-triton"]
    assert triton["kubernetes_sd_configs"] == [{"role": "pod"}]
    relabel = triton["relabel_configs"]
    keeps = [(r["source_labels"], r["regex"]) for r in relabel if r.get("action") == "keep"]
    assert (["__meta_kubernetes_pod_label_tritonscale_io_inferenceservice"], ".+") in keeps
    assert (["__meta_kubernetes_pod_container_port_name"], "metrics") in keeps
    targets = {r["target_label"]: r["source_labels"] for r in relabel if "target_label" in r}
    assert targets == {"inferenceservice": ["__meta_kubernetes_pod_label_tritonscale_io_inferenceservice"],
                       "namespace": ["__meta_kubernetes_namespace"], "pod": ["__meta_kubernetes_pod_name"]}
    assert jobs["tritonscale-operator"]["honor_labels"] is True
    # honor_labels trusts the scraped pods' labels: only the operator's namespace is discovered (any pod
    # with the operator's labels, in any tenant's namespace, could label series as another's service)
    assert jobs["tritonscale-operator"]["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": ["tritonscale-system"]}}]

    # The scrape job keeps the operator pod by the labels the chart gives it.
    dep = _one(rendered["default"], "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (keep,) = [r for r in jobs["tritonscale-operator"]["relabel_configs"]
               if r.get("action") == "keep" and "app" in r["source_labels"][0]]
    values = [labels[s.removeprefix("__meta_kubernetes_pod_label_").replace("app_kubernetes_io_",
                                                                            "app.kubernetes.io/")]
              for s in keep["source_labels"]]
    assert re.fullmatch(keep["regex"], ";".join(values)), (keep, values)

    # Triton pods really carry the label and the port the job keeps.
    from tritonscale.api.spec import LABEL
    from tritonscale.render.triton_containers import METRICS_PORT
    assert LABEL == "tritonscale.io/inferenceservice" and METRICS_PORT == 8002

    cm = _one(rendered["non-default"], "ConfigMap", "tritonscale-prometheus-scrape-config")
    assert cm["data"]["tritonscale-scrape-configs.yaml"] == text.rstrip("\n")
    # a release in another namespace: its ConfigMap's operator job discovers the pods there
    other = [d for d in yaml.safe_load_all(helm("template", "tritonscale", str(CHART), "--namespace", "team-ops",
                                                "--set", "prometheusScrapeConfig.enabled=true")) if d]
    cm = _one(other, "ConfigMap", "tritonscale-prometheus-scrape-config")
    jobs = {job["job_name"]: job for job in yaml.safe_load(cm["data"]["tritonscale-scrape-configs.yaml"])}
    assert jobs["tritonscale-operator"]["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["team-ops"]}


def test_grafana_dashboard(rendered):
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"namespace", "inferenceservice"} <= variables
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    flat = [re.sub(r"\s+", " ", e) for e in exprs]
    selector = 'namespace=~"$namespace", inferenceservice=~"$inferenceservice"'
    for must in [
        f'max by (namespace, inferenceservice) (nv_inference_request_summary_us{{quantile="0.95", {selector}}}) / 1000',
        f"tritonscale_target_p95_milliseconds{{{selector}}}",
        f"tritonscale_desired_replicas{{{selector}}}",
        f"tritonscale_ready_replicas{{{selector}}}",
        f"sum by (namespace, inferenceservice) (rate(nv_inference_request_success{{{selector}}}[$__rate_interval]))",
    ]:
        assert any(must in e for e in flat), f"no panel queries {must}"
    used = set(re.findall(r"\btritonscale_[a-z0-9_]+", " ".join(exprs + [json.dumps(dashboard["templating"])])))
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    assert used <= OPERATOR_METRICS, f"dashboard uses metrics the operator does not export: {used - OPERATOR_METRICS}"

    cm = _one(rendered["non-default"], "ConfigMap", "tritonscale-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["tritonscale.json"]) == dashboard


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


# ---- manifests/install.yaml ---------------------------------------------------------------

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


def helm_template_raw(values: dict[str, Any], tmp_path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)


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


@pytest.mark.parametrize("release", ["a.b", "1st"])
def test_a_release_name_kubernetes_refuses_for_the_objects_fails_to_render(release):
    """Not halfway through the install: a ClusterRole and an operator Deployment were left behind by
    a release that then failed on its Service's name."""
    proc = subprocess.run([helm_binary(), "template", release, str(CHART)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert f'the release name gives the operator\'s objects the name "{release}-tritonscale"' in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize(("arg", "flag"), [
    ("--metrics-port=9999", "--metrics-port"), ("--liveness-port", "--liveness-port"),
    ("--namespace=other", "--namespace"), ("-n", "-n"), ("--prometheus-url=http://p:9090", "--prometheus-url"),
    ("--leader-elect-lease-duration=30", "--leader-elect-lease-duration"),
    ("-nkube-system", "-n"), ("-vnkube-system", "-n"),  # a short flag's value in the same word
    # set from prometheus.tls.insecureSkipVerify; beside a CA ConfigMap the operator exited at every start
    ("--prometheus-insecure-skip-tls-verify", "--prometheus-insecure-skip-tls-verify"),
    ("--max-upgrade-rollouts=0", "--max-upgrade-rollouts"),  # the maxUpgradeRollouts value's
])
def test_extra_args_may_not_set_what_the_chart_sets(tmp_path, arg, flag):
    """The later flag wins in the operator: --metrics-port 9999 left the container port, the Service and
    the PodMonitor on 8080, and metrics broke silently. -nkube-system watched a namespace the chart's
    RBAC and its overlap check knew nothing of."""
    proc = helm_template_raw({"extraArgs": [arg, "1"]}, tmp_path)
    assert proc.returncode != 0
    assert f"extraArgs: {arg}: {flag} is set by the chart" in proc.stderr, proc.stderr


@pytest.mark.parametrize("values", [
    {"seriesLabels": {"cluster": "prod"}, "extraArgs": ["--series-label=cluster=prod"]},
    {"seriesLabels": {"cluster": "prod"}, "extraArgs": ["--series-label", "cluster=eu"]},
    {"extraArgs": ["--series-label", "cluster=a", "--verbose", "--series-label=cluster=b"]},
])
def test_a_series_label_given_twice_is_refused(tmp_path, values):
    """The operator exits at start on it ("--series-label cluster is given twice"): the chart rendered
    it, and the pods crash-looped."""
    proc = helm_template_raw(values, tmp_path)
    assert proc.returncode != 0
    assert "the series label cluster is given twice (seriesLabels or extraArgs)" in proc.stderr, proc.stderr


def test_series_labels_of_other_names_add_up(tmp_path):
    proc = helm_template_raw({"seriesLabels": {"cluster": "prod"},
                              "extraArgs": ["--series-label", "region=eu", "--series-label=zone=a"]}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dep = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--series-label=cluster=prod" in args
    assert args[-3:] == ["--series-label", "region=eu", "--series-label=zone=a"]


def test_extra_args_that_only_add_are_passed_on(tmp_path):
    proc = helm_template_raw({"extraArgs": ["--verbose", "-v", "--series-label=cluster=prod"]}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dep = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][-3:] == ["--verbose", "-v",
                                                                               "--series-label=cluster=prod"]


def test_the_operator_takes_no_abbreviated_flag():
    """What makes the check above by exact name enough: argparse would otherwise read --names=x or
    --prometheus-u=... as --namespace and --prometheus-url."""
    from tritonscale.cli import build_parser

    for args in (["run", "--names=kube-system"], ["run", "--prometheus-u=http://p:9090"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(args)
        assert exit_.value.code == 2


@pytest.mark.parametrize("key", ["app.kubernetes.io/instance", "app.kubernetes.io/name",
                                 "app.kubernetes.io/component"])
def test_pod_labels_may_not_replace_the_charts_own(tmp_path, key):
    """instance rendered the key twice and failed at install (selector does not match template labels);
    component installed and quietly took the operator out of its PodMonitor and scrape job."""
    proc = helm_template_raw({"podLabels": {key: "x"}}, tmp_path)
    assert proc.returncode != 0
    assert f"podLabels: {key} is the chart's own label" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("values", "key"), [
    ({"image": {"repository": "UPPER case/x"}}, "image"),
    ({"image": {"repository": "ghcr.io/x:1.0"}}, "image"),  # a tag in the name: 'ghcr.io/x:1.0:0.4.0'
    ({"serviceAccount": {"create": False, "name": "Bad Name"}}, "serviceAccount"),
    ({"nameOverride": "UPPER_bad"}, "nameOverride"),
    ({"priorityClassName": "Bad Name"}, "priorityClassName"),
    ({"podMonitor": {"enabled": True, "namespace": "Bad NS"}}, "podMonitor"),
])
def test_the_schema_refuses_names_kubernetes_would(tmp_path, values, key):
    """Each rendered before and was refused by the API server (or, for the image, by the kubelet)."""
    proc = helm_template_raw(values, tmp_path)
    assert proc.returncode != 0 and "schema" in proc.stderr and key in proc.stderr, proc.stderr


def test_a_registry_with_a_port_is_a_valid_repository(tmp_path):
    (dep,) = [o for o in helm_template({"image": {"repository": "localhost:5000/team/tritonscale"}}, tmp_path)
              if o["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost:5000/team/tritonscale:0.4.0"



@pytest.mark.parametrize(("quantity", "ok"), [
    ("1Gi", True), ("500m", True), ("0.5", True), (".5", True), ("1e9", True), ("2E3", True), ("1.5Gi", True),
    ("1GiB", False), ("1Q", False), ("-1", False), ("1 Gi", False),
])
def test_resources_take_every_quantity_kubernetes_takes(tmp_path, quantity, ok):
    """Kubernetes' Quantity grammar (its OpenAPI pattern, without the sign): 1e9 and .5 were refused."""
    proc = helm_template_raw({"resources": {"limits": {"memory": quantity}}}, tmp_path)
    assert (proc.returncode == 0) is ok, proc.stderr


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


def test_allowed_prometheus_urls_become_flags(tmp_path):
    """prometheus.allowedUrls: the Prometheus URLs a spec may name (the operator's pod sends the queries)."""
    urls = ["http://prometheus-operated.monitoring.svc:9090", "https://thanos.example/api/tenants/ml"]
    (dep,) = [o for o in helm_template({"prometheus": {"allowedUrls": urls}}, tmp_path) if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    given = [a for a in args if a.startswith("--allowed-prometheus-url")]
    assert given == [f"--allowed-prometheus-url={u}" for u in urls]
    (default,) = [o for o in helm_template(None, tmp_path / "d") if o["kind"] == "Deployment"]
    assert not [a for a in default["spec"]["template"]["spec"]["containers"][0]["args"] if "allowed" in a]


# ---- the NetworkPolicy ---------------------------------------------------------------------

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


def test_alerts_on_the_operator_need_a_scrape_of_it(tmp_path):
    """prometheusRule.enabled alone named the job of a PodMonitor the chart did not render: no series had it, and
    TritonscaleOperatorAbsent (critical, absent(...)) fired for good (auditE, session 84)."""
    proc = helm_template_raw({"prometheusRule": {"enabled": True}}, tmp_path)
    assert proc.returncode != 0 and "prometheusRule.enabled: the alerts read the operator's own metrics" in proc.stderr
    for values, job in [({"podMonitor": {"enabled": True}}, f"{NAMESPACE}/tritonscale-operator"),
                        ({"prometheusScrapeConfig": {"enabled": True}}, "tritonscale-operator"),
                        ({"operatorJob": "ops/operator"}, "ops/operator")]:
        rule_values = {"enabled": True, **({"operatorJob": values.pop("operatorJob")} if "operatorJob" in values
                                           else {})}
        (rule,) = [d for d in helm_template({**values, "prometheusRule": rule_values}, tmp_path)
                   if d["kind"] == "PrometheusRule"]
        exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] ==
                 "TritonscaleOperatorAbsent"]
        leader = f'tritonscale_leader{{job="{job}"}}'
        assert exprs == [f"absent({leader})\nor max by (job) ({leader}) < 1\n"], (values, exprs)


def test_the_operator_pods_do_not_hold_their_nodes_for_the_cluster_autoscaler(tmp_path):
    """The /tmp emptyDir holds nothing to keep: without the annotation cluster-autoscaler's default
    --skip-nodes-with-local-storage never scaled the operator's nodes down. podAnnotations may say otherwise."""
    key = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"

    def annotations(values: dict[str, Any]) -> dict[str, str]:
        (dep,) = [d for d in helm_template(values, tmp_path) if d["kind"] == "Deployment"]
        return dep["spec"]["template"]["metadata"]["annotations"]

    assert annotations({}) == {key: "tmp"}
    assert annotations({"podAnnotations": {"a": "b", key: ""}}) == {"a": "b", key: ""}
