"""`tritonscale run`'s TLS flags for an https Prometheus: a CA bundle that is checked at start (a
wrong file is a usage error naming the flag, not a failed query on every tick), or no check at all
when asked; both at once is refused. What reaches the operator is PrometheusSource's ``verify``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tritonscale import cli, operator_main

# `run` checks that its metrics and liveness ports are free: 0 (none), so another process on 8080 or 8081
# (an operator the sandbox started) does not fail a test of the TLS flags
NO_PORTS = ("--metrics-port", "0", "--liveness-port", "0")


@pytest.fixture
def started(monkeypatch):
    """The options `run` would start the operator with (the operator itself is not started)."""
    seen = []
    monkeypatch.setattr(operator_main, "run", lambda options: seen.append(options) or 0)
    monkeypatch.delenv("TRITONSCALE_PROMETHEUS_CA_FILE", raising=False)
    return seen


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl missing")
def test_the_ca_file_and_the_skip_flag_reach_the_prometheus_client(started, tmp_path, monkeypatch):
    ca = tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(tmp_path / "ca.key"), "-out", str(ca), "-days", "2", "-subj", "/CN=ca"],
                   check=True, capture_output=True, timeout=60)
    run = ["run", *NO_PORTS]
    assert cli.main(run) == 0
    assert cli.main([*run, "--prometheus-ca-file", str(ca)]) == 0
    assert cli.main([*run, "--prometheus-insecure-skip-tls-verify"]) == 0
    monkeypatch.setenv("TRITONSCALE_PROMETHEUS_CA_FILE", str(ca))
    assert cli.main(run) == 0
    assert [o.prometheus_tls_verify for o in started] == [True, str(ca), False, str(ca)]


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("not a certificate\n", "is not a readable PEM file of CA certificates ([X509: NO_CERTIFICATE_OR_CRL_FOUND]"),
])
def test_a_wrong_ca_file_is_a_usage_error_naming_the_flag(started, tmp_path, capsys, content, message):
    path = tmp_path / "ca.crt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--prometheus-ca-file", str(path)])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"tritonscale run: error: argument --prometheus-ca-file: '{path}'"), last
    assert message in last, last
    assert started == []


def test_a_ca_file_and_skipping_the_check_exclude_each_other(started, tmp_path, capsys):
    with pytest.raises(SystemExit):  # the CA file is read first: give it a real one
        cli.main(["run", "--prometheus-ca-file", str(tmp_path), "--prometheus-insecure-skip-tls-verify"])
    assert "is not a readable PEM file of CA certificates (Is a directory)" in capsys.readouterr().err
    ca = "/etc/ssl/certs/ca-certificates.crt"
    if not Path(ca).exists():
        pytest.skip("no system CA bundle")
    assert cli.main(["run", "--prometheus-ca-file", ca, "--prometheus-insecure-skip-tls-verify"]) == 2
    assert capsys.readouterr().err.startswith("tritonscale run: --prometheus-ca-file and "
                                              "--prometheus-insecure-skip-tls-verify exclude each other")
    assert started == []


def test_skipping_the_check_is_said_once_at_start_not_on_every_query(caplog, monkeypatch):
    """With the check off, configure says so once and silences urllib3's warning, which would
    otherwise come with the first query of every source."""
    import logging
    import warnings

    import urllib3

    from tritonscale.handlers import settings

    monkeypatch.setattr(settings, "Kube", lambda: object())
    for name in ("KUBE", "PROMETHEUS_URL", "SNAPSHOTS"):  # configure sets them: restored after
        monkeypatch.setattr(settings, name, getattr(settings, name))
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING, logger="tritonscale"):
        warnings.simplefilter("always")
        settings.configure(operator_main.OperatorOptions(prometheus_url="https://p:9090", prometheus_tls_verify=False,
                                                         metrics_port=0))
        warnings.warn("x", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)
    assert seen == []
    assert [r.getMessage() for r in caplog.records] == [
        "Prometheus's TLS certificates are not checked (--prometheus-insecure-skip-tls-verify)"]


def test_an_operator_without_a_prometheus_url_says_so_at_start(monkeypatch, caplog):
    import logging

    from tritonscale.handlers import settings

    monkeypatch.setattr(settings, "Kube", lambda: object())
    for name in ("KUBE", "PROMETHEUS_URL", "SNAPSHOTS"):  # configure sets them: restored after
        monkeypatch.setattr(settings, name, getattr(settings, name))
    with caplog.at_level(logging.WARNING, logger="tritonscale"):
        settings.configure(operator_main.OperatorOptions(metrics_port=0))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["no Prometheus URL (--prometheus-url, "
                                                                       "TRITONSCALE_PROMETHEUS_URL)"]


def test_a_watched_namespace_that_does_not_exist_is_warned_of_once(caplog):
    """`tritonscale run -n nosuchns` started and served nothing without a word."""
    with caplog.at_level("DEBUG", logger="tritonscale"):
        assert operator_main.warn_missing_namespaces(["team-a", "tema-b"], lambda: {"default", "team-a", "team-b"}) \
            == ["tema-b"]
    said = [r for r in caplog.records if r.name == "tritonscale"]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", "--namespace tema-b: no such namespace (yet); nothing there to serve until it is created")]


def test_no_right_to_list_namespaces_says_nothing_above_debug(caplog):
    def forbidden() -> set[str]:
        raise RuntimeError("403 Forbidden")

    with caplog.at_level("DEBUG", logger="tritonscale"):
        assert operator_main.warn_missing_namespaces(["team-a"], forbidden) == []
    assert [r.levelname for r in caplog.records if r.name == "tritonscale"] == ["DEBUG"]


async def test_the_operators_cache_drops_a_forgotten_urls_failure_series(monkeypatch):
    """`tritonscale run` builds its snapshot cache in configure(): a URL no InferenceService uses any more
    loses its tritonscale_metric_source_failures series there too (only the tests' default cache did),
    but not while another URL in use shows as the same label (they differ only in credentials)."""
    from prometheus_client import REGISTRY

    from tritonscale.handlers import settings
    from tritonscale.scaling import operator_metrics as om
    from tritonscale.scaling import snapshot_cache as sc

    monkeypatch.setattr(settings, "Kube", lambda: object())
    for name in ("KUBE", "PROMETHEUS_URL", "SNAPSHOTS"):  # configure sets them: restored after
        monkeypatch.setattr(settings, name, getattr(settings, name))
    settings.configure(operator_main.OperatorOptions(prometheus_url="http://p:9090", metrics_port=0))
    cache = settings.SNAPSHOTS
    now = [1000.0]
    monkeypatch.setattr(cache, "_clock", lambda: now[0])
    monkeypatch.setattr(cache, "_factory", lambda url: _Refused())

    def series(label: str, name: str = "tritonscale_metric_source_failures_total") -> float | None:
        return REGISTRY.get_sample_value(name, {"url": label})

    for url in ("http://old:9090", "http://a:x@shared:9090", "http://b:y@shared:9090"):
        await cache.get(url, 60, max_age_s=15)
        om.source_checked(settings.shown_url(url), False)
    assert series("http://old:9090", "tritonscale_metric_source_up") == 0.0
    for _ in range(2):  # b ticks on; the other two are asked for no more
        now[0] += sc.FORGET_AFTER_S / 2 + 1
        await cache.get("http://b:y@shared:9090", 60, max_age_s=15)
    assert series("http://old:9090") is None and series("http://old:9090", "tritonscale_metric_source_up") is None
    assert series("http://***@shared:9090") is not None  # b's, whose label a's forgetting must not take
    om.source_checked("http://***@shared:9090", True)  # answering again: up, the failures counted so far kept
    assert series("http://***@shared:9090", "tritonscale_metric_source_up") == 1.0
    assert series("http://***@shared:9090") == 2.0
    assert cache.urls() == {"http://b:y@shared:9090"}


class _Refused:
    def fetch(self, window_s: int):
        from tritonscale.scaling.prometheus_source import Snapshot

        return Snapshot(taken_at=0.0, ok=False, error="connection refused")


def test_a_crd_that_is_not_this_versions_is_warned_of_at_start(caplog):
    """An older CRD left by `helm upgrade` (Helm applies crds/ only at install): kubectl patched a new
    field away with an "unknown field" warning, and the operator said nothing (an exploration on a
    real API server, session 55)."""
    import copy

    from tritonscale.api.crd import SCHEMA_DIGEST_ANNOTATION, crd, crd_drift, spec_digest

    ours = crd()
    assert ours["metadata"]["annotations"][SCHEMA_DIGEST_ANNOTATION] == spec_digest(ours["spec"])
    assert crd_drift(copy.deepcopy(ours)) is None
    older = copy.deepcopy(ours)
    del older["metadata"]["annotations"]
    older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("runtime")
    changed = copy.deepcopy(ours)
    changed["metadata"]["annotations"][SCHEMA_DIGEST_ANNOTATION] = "0123456789abcdef"
    with caplog.at_level("DEBUG", logger="tritonscale"):
        assert operator_main.warn_crd_drift(lambda: copy.deepcopy(ours)) is None
        old = operator_main.warn_crd_drift(lambda: older)
        other = operator_main.warn_crd_drift(lambda: changed)
        missing = operator_main.warn_crd_drift(lambda: None)
    assert old is not None and old.startswith(
        "the CustomResourceDefinition inferenceservices.tritonscale.io in the cluster is not this operator's (no "
        f"{SCHEMA_DIGEST_ANNOTATION} annotation: an older version's; this operator's "
        f"{spec_digest(ours['spec'])}): the API server drops the fields its schema lacks")
    assert old.endswith("apply this version's: kubectl apply --server-side --force-conflicts -f "
                        "charts/tritonscale/crds/inferenceservices.tritonscale.io.yaml")
    assert other is not None and "(schema digest 0123456789abcdef; this operator's" in other
    assert missing is not None and missing.startswith("no CustomResourceDefinition inferenceservices.tritonscale.io")
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "tritonscale"]
    assert said == [("WARNING", old), ("WARNING", other), ("WARNING", missing)]


def test_no_right_to_read_the_crd_says_nothing_above_debug(caplog):
    def forbidden() -> None:
        raise RuntimeError("403 Forbidden")

    with caplog.at_level("DEBUG", logger="tritonscale"):
        assert operator_main.warn_crd_drift(forbidden) is None
    assert [r.levelname for r in caplog.records if r.name == "tritonscale"] == ["DEBUG"]


def test_ticks_waiting_on_the_api_server_do_not_starve_the_others():
    """asyncio.to_thread ran every tick on the loop's default executor, min(32, CPUs + 4) threads (6 on two
    cores): 20 objects whose status writes a slow webhook held took them all (an exploration at scale,
    session 55). The operator's startup gives the loop TICK_THREADS."""
    import asyncio
    import time

    async def forty_waits() -> float:
        await operator_main.tick_threads()
        started = time.monotonic()
        await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.5) for _ in range(40)))
        return time.monotonic() - started

    assert operator_main.TICK_THREADS >= 40
    assert asyncio.run(forty_waits()) < 1.5  # all at once; 6 threads would take 3.5 s


def test_every_thread_that_may_call_the_api_server_has_a_connection_to_keep():
    """Session 86's audit at 200-300 InferenceServices: 32 pooled connections for 16 Kopf workers and 64 tick
    threads; every pass after a restart discarded about 32 connections, with a warning each, for good."""
    import kopf

    from tritonscale.kube import client as kc

    settings = kopf.OperatorSettings()
    operator_main.configure(settings=settings)
    assert settings.execution.max_workers + operator_main.TICK_THREADS <= kc.API_CONNECTIONS


def test_allowed_prometheus_urls_reach_the_operator_and_refuse_the_others(started, capsys, monkeypatch):
    """--allowed-prometheus-url: a spec's URL that is none of them (nor under one) is not queried, and its
    ticks say why (the operator's pod would otherwise query any address a spec names)."""
    from tritonscale.handlers import autoscale_daemon, settings

    run = ["run", *NO_PORTS]
    assert cli.main([*run, "--allowed-prometheus-url", "http://prom.monitoring:9090",
                     "--allowed-prometheus-url", "https://thanos.example/tenants/a"]) == 0
    options = started[-1]
    assert options.allowed_prometheus_urls == ("http://prom.monitoring:9090", "https://thanos.example/tenants/a")
    with pytest.raises(SystemExit):
        cli.main([*run, "--allowed-prometheus-url", "prom.monitoring:9090"])  # no scheme
    assert "--allowed-prometheus-url" in capsys.readouterr().err
    monkeypatch.setattr(settings, "ALLOWED_PROMETHEUS_URLS", options.allowed_prometheus_urls)
    assert settings.not_allowed(None) is None  # the operator's own --prometheus-url
    assert settings.not_allowed("http://prom.monitoring:9090/") is None
    assert settings.not_allowed("https://alice:pw@thanos.example/tenants/a/x") is None
    refused = settings.not_allowed("http://bob:secret@10.0.0.5:8080/admin")
    assert refused == ("spec.scaling.prometheus.url http://***@10.0.0.5:8080/admin is not a Prometheus this "
                       "operator may query (its --allowed-prometheus-url: http://prom.monitoring:9090, "
                       "https://thanos.example/tenants/a); name one of them, or a path under one")
    # the tick's snapshot: never asked, and the reason names the setting, not an outage
    import asyncio
    snap = asyncio.run(autoscale_daemon._snapshot("http://10.0.0.5:8080/admin", "http://10.0.0.5:8080/admin", 60, 15.0))
    assert (snap.ok, snap.failure, snap.error) == (False, "PrometheusNotAllowed", settings.not_allowed(
        "http://10.0.0.5:8080/admin"))
    assert snap.observation("ns", "svc", "m").failure == "PrometheusNotAllowed"
    none = asyncio.run(autoscale_daemon._snapshot(None, None, 60, 15.0))
    assert (none.ok, none.failure) == (False, "NoPrometheusURL") and none.error.startswith("no Prometheus URL: set")
    monkeypatch.setattr(settings, "ALLOWED_PROMETHEUS_URLS", ())
    assert settings.not_allowed("http://10.0.0.5:8080/admin") is None  # none given: any


def test_a_source_label_no_object_reports_any_more_goes(monkeypatch):
    """tritonscale_metric_source_up for "" (no URL) or a URL not allowed is no cache's to forget: it goes once
    no InferenceService's tick reports it (else TritonscaleMetricsFailing fired until a restart)."""
    from prometheus_client import REGISTRY

    from tritonscale.handlers import autoscale_daemon

    monkeypatch.setattr(autoscale_daemon, "_source_label", {})
    monkeypatch.setattr(autoscale_daemon, "_source_failing", {})

    def up(label: str) -> float | None:
        return REGISTRY.get_sample_value("tritonscale_metric_source_up", {"url": label})

    autoscale_daemon._source_checked("uid-a", "", False)
    autoscale_daemon._source_checked("uid-b", "", False)
    assert up("") == 0.0
    autoscale_daemon._source_checked("uid-a", "http://prom:9090", True)  # a's spec now names a URL: b still has none
    assert up("") == 0.0 and up("http://prom:9090") == 1.0
    autoscale_daemon._source_gone("uid-b")  # b deleted: nobody reports "" any more
    assert up("") is None
    autoscale_daemon._source_gone("uid-a")
    assert up("http://prom:9090") is None


def test_the_source_gauge_is_0_while_any_object_on_the_url_fails(monkeypatch):
    """auditM D4: two objects on URLs shown alike (each tenant's own credentials, both http://***@prom:9090)
    set the gauge in turn, 1, 0, 1 at every tick, so TritonscaleMetricsFailing (0 for 10 minutes) never
    fired for the one whose credentials are wrong. It is 0 while any fails, 1 once none does."""
    from prometheus_client import REGISTRY

    from tritonscale.handlers import autoscale_daemon, settings

    monkeypatch.setattr(autoscale_daemon, "_source_label", {})
    monkeypatch.setattr(autoscale_daemon, "_source_failing", {})
    shown = settings.shown_url("http://alice:right@prom:9090")
    assert settings.shown_url("http://bob:WRONG@prom:9090") == shown

    def up() -> float | None:
        return REGISTRY.get_sample_value("tritonscale_metric_source_up", {"url": shown})

    for _ in range(3):  # ticks in turn
        autoscale_daemon._source_checked("uid-alice", shown, True)
        assert up() == 0.0 or _ == 0
        autoscale_daemon._source_checked("uid-bob", shown, False)
        assert up() == 0.0
    autoscale_daemon._source_checked("uid-bob", shown, True)  # bob's credentials fixed
    assert up() == 1.0
    autoscale_daemon._source_checked("uid-bob", shown, False)
    autoscale_daemon._source_gone("uid-bob")  # the failing one deleted: alice answers
    assert up() == 1.0
    autoscale_daemon._source_gone("uid-alice")
