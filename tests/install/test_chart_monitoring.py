"""What charts/tritonscale renders for monitoring (helm template): the PodMonitors and their durations,
the plain Prometheus scrape config, the alerts' need of a scrape of the operator, the Grafana dashboard.
Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from support.chart_render import CHART, NAMESPACE, helm, helm_template, helm_template_raw
from support.chart_render import one as _one

# The operator's own metrics (names final), served on :8080.
OPERATOR_METRICS = {
    "tritonscale_decisions_total", "tritonscale_observed_p95_milliseconds", "tritonscale_target_p95_milliseconds",
    "tritonscale_desired_replicas", "tritonscale_ready_replicas", "tritonscale_tick_duration_seconds",
    "tritonscale_leader",
}


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
