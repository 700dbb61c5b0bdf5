"""A service with no Triton series says why, from its scrape targets' ``up`` on Debian's Prometheus:
the scrapes fail, they reach something that exports no Triton series for the model, or there is no
target with the service's labels."""

from __future__ import annotations

import asyncio
import socket

from support.cluster import wait_for
from support.deployment_watch import needs_prometheus
from support.triton_exporter import TritonExporter
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource

NS = "ns"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_prometheus
def test_no_data_says_what_the_services_scrape_targets_show(tmp_path):
    live = TritonExporter(["served"]).start()
    live.set("served", rps=10.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0).start()
    try:
        down = f"127.0.0.1:{_closed_port()}"
        prom.write_targets([(live.address, {"namespace": NS, "inferenceservice": "other", "pod": "other-0"}),
                            (down, {"namespace": NS, "inferenceservice": "broken", "pod": "broken-0"})])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        assert asyncio.run(prom.wait_target_up(live.address, timeout=30)), prom.read_log()
        source = PrometheusSource(prom.url)

        def message(name: str, model: str) -> str:
            snap = source.fetch(30)
            assert snap.ok, snap.error
            obs = snap.observation(NS, name, model)
            assert obs.status == "no_data", obs
            return obs.message

        broken = wait_for(lambda: "fail" in (m := message("broken", "broken")) and m, 20,
                          what="the failing target's up == 0")
        assert broken.endswith(": Prometheus's scrapes of 1 of 1 target(s) labelled inferenceservice=broken fail "
                               "(up == 0; Prometheus's /targets page gives the error)"), broken
        assert message("other", "wanted").endswith(
            ": Prometheus scrapes 1 target(s) labelled inferenceservice=other, but none exports Triton's series "
            "for model=wanted: the model has not loaded yet, the port is not Triton's metrics port, or the model is "
            "named otherwise")
        assert message("absent", "absent").endswith(
            ": Prometheus has no scrape target labelled namespace=ns, inferenceservice=absent: no pod of it runs "
            "yet, or no PodMonitor or scrape config selects its pods and adds these labels")
    finally:
        prom.stop()
        live.stop()
