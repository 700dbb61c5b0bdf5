"""The Prometheus the operator queries, as charts/tritonscale passes it on (helm template): a URL rendered
exactly when the operator would take it, credentials only from a Secret, TLS from a ConfigMap's CA or no
check, the allowed URLs a spec may name; and the other values that would install something unsafe.
Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from support.chart_render import CHART, helm_binary, helm_template
from support.chart_render import one as _one
from support.spec_cases import PROMETHEUS_URLS


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


def test_allowed_prometheus_urls_become_flags(tmp_path):
    """prometheus.allowedUrls: the Prometheus URLs a spec may name (the operator's pod sends the queries)."""
    urls = ["http://prometheus-operated.monitoring.svc:9090", "https://thanos.example/api/tenants/ml"]
    (dep,) = [o for o in helm_template({"prometheus": {"allowedUrls": urls}}, tmp_path) if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    given = [a for a in args if a.startswith("--allowed-prometheus-url")]
    assert given == [f"--allowed-prometheus-url={u}" for u in urls]
    (default,) = [o for o in helm_template(None, tmp_path / "d") if o["kind"] == "Deployment"]
    assert not [a for a in default["spec"]["template"]["spec"]["containers"][0]["args"] if "allowed" in a]
