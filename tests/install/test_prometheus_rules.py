"""The chart's alerting rules (charts/tritonscale/files/prometheus-rules.yaml): Prometheus' own
promtool checks them and runs their unit tests (tests/install/prometheus-rules.test.yaml), they
query only metrics the operator exports, and the chart's PrometheusRule carries them as the values
ask (the operator's job, extra labels, alerts left out)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest

import tritonscale.leader_election  # noqa: F401  (registers tritonscale_leader)
import tritonscale.scaling.operator_metrics  # noqa: F401  (registers the rest)
from support.chart_render import CHART, NAMESPACE, helm_binary, helm_template
from tritonscale.sandbox.prometheus_server import find_prometheus

RULES = CHART / "files" / "prometheus-rules.yaml"
TESTS = Path(__file__).with_name("prometheus-rules.test.yaml")
ALERTS = ["TritonscaleOperatorAbsent", "TritonscaleLatencyAboveTarget", "TritonscaleAtMaxReplicas",
          "TritonscaleBelowWarmFloor", "TritonscaleScaleFailing", "TritonscaleMetricsFailing",
          "TritonscaleUpgradeStalled"]


def _promtool() -> str:
    try:
        promtool = find_prometheus().with_name("promtool")
    except RuntimeError as e:
        pytest.skip(f"prometheus absent: {e}")
    if not promtool.exists():
        pytest.skip(f"no promtool beside {find_prometheus()}")
    return str(promtool)


def _run(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run([_promtool(), *args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _file_rules(job: str | None = None) -> list[dict[str, Any]]:
    """The file's rules; with ``job`` (quoted), as the chart renders them for that job."""
    text = RULES.read_text()
    if job is not None:
        text = text.replace('job="tritonscale-operator"', f"job={job}")
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_promtool_accepts_the_rules():
    assert "SUCCESS: 7 rules found" in _run("check", "rules", str(RULES))


def test_the_rules_unit_tests_pass():
    """Each alert fires when it should (after its `for`) and stays quiet when it should not."""
    assert "SUCCESS" in _run("test", "rules", TESTS.name, cwd=TESTS.parent)


def test_every_alert_has_a_unit_test_that_fires_it():
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case["exp_alerts"]}
    assert [r["alert"] for r in _file_rules()] == ALERTS
    assert fired == set(ALERTS)


def test_the_rules_query_only_metrics_the_operator_exports():
    exported = set(re.findall(r"^# TYPE (\S+) ", generate_latest(REGISTRY).decode(), re.M))
    used = {m for r in _file_rules() for m in re.findall(r"\btritonscale_[a-z0-9_]+", r["expr"])}
    assert used, "no tritonscale_ metric in the rules"
    assert used <= exported, f"not exported by the operator: {used - exported}"


def _rule_spec(values: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    objects = helm_template({"prometheusRule": {"enabled": True}, **values}, tmp_path)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    return rule


def test_the_prometheus_rule_names_the_charts_operator_job(tmp_path):
    objects = helm_template({"prometheusRule": {"enabled": True}, "podMonitor": {"enabled": True}}, tmp_path)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor" and o["metadata"]["name"].endswith("-operator")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    # The Prometheus Operator's job label for a PodMonitor's targets: namespace/name. Every selector names
    # it: a release's rules read its own operator's series only (auditM D1).
    job = f'{monitor["metadata"]["namespace"]}/{monitor["metadata"]["name"]}'
    assert rules == _file_rules(f'"{job}"')
    assert all(f'job="{job}"' in r["expr"] for r in rules) and 'job="tritonscale-operator"' not in str(rules)
    # Prometheus takes the rendered groups as a rule file
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump(rule["spec"]))
    assert "SUCCESS: 7 rules found" in _run("check", "rules", str(tmp_path / "rendered.yaml"))


def test_the_prometheus_rule_takes_labels_a_job_and_leaves_alerts_out(tmp_path):
    rule = _rule_spec({"prometheusRule": {"enabled": True, "namespace": "monitoring",
                                          "labels": {"release": "kube-prometheus-stack"},
                                          "ruleLabels": {"team": "ml-platform", "severity": "page"},
                                          "operatorJob": 'ops/tritonscale "a"',
                                          "disabled": ["TritonscaleBelowWarmFloor"]}}, tmp_path)
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert [r["alert"] for r in rules] == [a for a in ALERTS if a != "TritonscaleBelowWarmFloor"]
    assert all(r["labels"] == {"team": "ml-platform", "severity": "page"} for r in rules)
    assert rules[0]["expr"].startswith('absent(tritonscale_leader{job="ops/tritonscale \\"a\\""})')  # escaped
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump(rule["spec"]))
    assert "SUCCESS: 6 rules found" in _run("check", "rules", str(tmp_path / "rendered.yaml"))


@pytest.mark.parametrize("enabled", ["prometheusRule", "prometheusScrapeConfig"])
def test_an_unknown_alert_to_leave_out_is_refused(enabled, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({enabled: {"enabled": True},
                                    "prometheusRule": {"enabled": enabled == "prometheusRule",
                                                       "disabled": ["TritonscaleLatencyTooHigh"]}}))
    proc = subprocess.run([helm_binary(), "template", "x", str(CHART), "--values", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0, proc.stdout
    assert ("prometheusRule.disabled: TritonscaleLatencyTooHigh is none of the chart's alerts "
            "(TritonscaleOperatorAbsent, ") in proc.stderr


def test_the_scrape_config_map_carries_the_rules_for_a_hand_configured_prometheus(tmp_path):
    objects = helm_template({"prometheusScrapeConfig": {"enabled": True}}, tmp_path)
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("scrape-config")]
    assert yaml.safe_load(cm["data"]["tritonscale-rules.yaml"]) == yaml.safe_load(RULES.read_text())


def test_the_scrape_config_map_s_rules_leave_out_the_disabled_alerts(tmp_path):
    """prometheusRule.disabled left the alerts out of the PrometheusRule only: the ConfigMap's copy for a
    hand-configured Prometheus kept them (an audit, session 80)."""
    objects = helm_template({"prometheusScrapeConfig": {"enabled": True},
                             "prometheusRule": {"disabled": ["TritonscaleOperatorAbsent", "TritonscaleAtMaxReplicas"]}},
                            tmp_path)
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("scrape-config")]
    text = cm["data"]["tritonscale-rules.yaml"]
    rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert [r["alert"] for r in rules] == [a for a in ALERTS
                                           if a not in ("TritonscaleOperatorAbsent", "TritonscaleAtMaxReplicas")]
    assert rules == [r for r in _file_rules() if r["alert"] in {r["alert"] for r in rules}]  # as the file says them
    (tmp_path / "rendered.yaml").write_text(text)
    assert f"SUCCESS: {len(ALERTS) - 2} rules found" in _run("check", "rules", str(tmp_path / "rendered.yaml"))

