"""How far apart Prometheus scrapes the pods, read from Debian's Prometheus by the operator's own query.

The autoscaler's figures were all measured at a 15 s scrape; MetricsAvailable says when the pods are
scraped less often (``tick_status._scrape_note``). The ``scrape_s`` query reads the seconds between each pod's
last two scrapes from the counter Triton moves with every request (``idelta / irate``).
"""

from __future__ import annotations

import asyncio

import pytest

from support.cluster import wait_for
from support.deployment_watch import needs_prometheus
from support.triton_exporter import TritonExporter
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource

NS, NAME = "ns", "svc"
KEY = (NS, NAME, NAME)


@needs_prometheus
@pytest.mark.parametrize("scrape_s", [1.0, 3.0])
def test_the_scrape_gap_is_the_interval_prometheus_scrapes_at(tmp_path, scrape_s):
    busy = TritonExporter([NAME]).start()
    busy.set(NAME, rps=100.0)
    idle = TritonExporter(["idle"]).start()
    idle.set("idle", rps=0.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=scrape_s).start()
    try:
        prom.write_targets([(busy.address, {"namespace": NS, "inferenceservice": NAME, "pod": f"{NAME}-0"}),
                            (idle.address, {"namespace": NS, "inferenceservice": "idle", "pod": "idle-0"})])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        source = PrometheusSource(prom.url)

        def gap() -> dict | None:
            snap = source.fetch(int(4 * scrape_s) + 2)  # a window holding at least three scrapes
            assert snap.ok, snap.error
            return snap.values.get("scrape_s", {}) or None

        seen = wait_for(gap, 10 * scrape_s + 10, what="two scrapes of the busy pod", interval=0.2)
        assert seen[KEY] == pytest.approx(scrape_s, abs=0.25 * scrape_s), seen
        # a counter that does not move says nothing of its scrapes: no series, not 0 s -- though the idle
        # pod's series are there
        snap = source.fetch(int(4 * scrape_s) + 2)
        assert snap.values["replicas"].get((NS, "idle", "idle")) == 1.0, snap.values
        assert (NS, "idle", "idle") not in snap.values.get("scrape_s", {}), snap.values
        obs = source.fetch(int(4 * scrape_s) + 2).observation(*KEY)
        assert obs.status == "ok" and obs.scrape_s == pytest.approx(scrape_s, abs=0.25 * scrape_s)
    finally:
        prom.stop()
        busy.stop()
        idle.stop()
