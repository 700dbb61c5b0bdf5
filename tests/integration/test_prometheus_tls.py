"""An https Prometheus (Debian's, serving TLS with ``--web.config.file``): the operator checks its
certificate by default, trusts it with ``--prometheus-ca-file``, and skips the check only when told
(``--prometheus-insecure-skip-tls-verify``). An untrusted one is a failed snapshot with one plain
sentence -- the tick holds, as for any Prometheus failure -- never a metric read from it."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from support.deployment_watch import needs_prometheus
from tritonscale import process_group
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource
from tritonscale.scaling.promql_queries import SIGNALS


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "prometheus.crt", directory / "prometheus.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=prometheus",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


@needs_prometheus
@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl missing: apt-get install -y openssl")
# The unchecked fetch below warns per request; the operator silences that warning once at start
# (handlers.configure), which this test, building its sources directly, does not run.
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_an_https_prometheus_is_trusted_only_through_its_ca(tmp_path):
    cert, key = _self_signed(tmp_path)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0, tls=(cert, key)).start()
    try:
        assert prom.url.startswith("https://127.0.0.1:")
        assert process_group.wait_http_ok_blocking(prom.url, "/-/ready", 30, prom.is_alive,
                                                 verify=ssl.create_default_context(cafile=str(cert))), \
            prom.read_log()

        untrusted = PrometheusSource(prom.url).fetch(10)
        assert not untrusted.ok and untrusted.values == {}
        assert untrusted.error == (f"Prometheus at {prom.url}: its TLS certificate is not trusted "
                                   "(self-signed certificate): give its CA with --prometheus-ca-file")

        trusted = PrometheusSource(prom.url, verify=str(cert)).fetch(10)
        assert trusted.ok, trusted.error
        assert trusted.queries == len(SIGNALS)

        # its CA given, but another name in the URL than the certificate's: giving the CA is not the fix
        by_name = prom.url.replace("127.0.0.1", "localhost")
        mismatch = PrometheusSource(by_name, verify=str(cert)).fetch(10)
        assert not mismatch.ok and mismatch.error.startswith(
            f"Prometheus at {by_name}: its TLS certificate is not for this host name ("), mismatch.error
        assert mismatch.error.endswith("put a name the certificate names in the Prometheus URL")

        unchecked = PrometheusSource(prom.url, verify=False).fetch(10)
        assert unchecked.ok, unchecked.error

        plain = PrometheusSource(prom.url.replace("https://", "http://"), verify=str(cert)).fetch(10)
        assert not plain.ok  # http to a TLS port: Prometheus answers 400, a failure, not data
    finally:
        prom.stop()
