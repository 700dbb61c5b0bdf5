"""A removed pod's series against Debian's Prometheus: the operator's fast rates drop it at once.

Two test exporters stand for two pods of one InferenceService, scraped every second. When one
pod leaves service discovery (a scale-down), Prometheus writes staleness markers for its series,
but range vectors ignore them: plain ``sum(irate(x[30s]))`` repeats the gone pod's last rate
until its samples leave the range. The operator's queries (``promql_queries.live_irate``)
must read only the pod still there -- else a scale-down from n replicas reads n/(n-1) of the
traffic and scales straight back up.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from support.cluster import wait_for
from support.deployment_watch import needs_prometheus
from support.triton_exporter import TritonExporter
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource

NS, NAME = "ns", "svc"
KEY = (NS, NAME, NAME)
WINDOW_S = 30


def _labels(pod: str, service: str = NAME) -> dict[str, str]:
    return {"namespace": NS, "inferenceservice": service, "pod": pod}


@needs_prometheus
def test_a_removed_pods_rate_leaves_the_fast_signals_at_once(tmp_path):
    pods = [TritonExporter([NAME]).start() for _ in range(2)]
    for p in pods:
        p.set(NAME, rps=100.0, failed_rps=20.0, batch_size=4.0, batch_ms=28.0)
    # Another service whose Triton has no failure series at all: its arrivals are the served ones.
    plain = TritonExporter(["plain"]).start()
    plain.set("plain", rps=50.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0).start()
    try:
        plain_target = (plain.address, _labels("plain-0", "plain"))
        prom.write_targets([(p.address, _labels(f"{NAME}-{i}")) for i, p in enumerate(pods)] + [plain_target])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        for p in pods + [plain]:
            assert asyncio.run(prom.wait_target_up(p.address, timeout=30)), prom.read_log()
        source = PrometheusSource(prom.url)

        def snapshot(key: tuple[str, str, str] = KEY) -> dict[str, float]:
            """Every signal of one service, from one round of the operator's queries."""
            snap = source.fetch(WINDOW_S)
            assert snap.ok, snap.error
            return {sig: v[key] for sig, v in snap.values.items() if key in v}

        both = wait_for(lambda: (s := snapshot()).get("recent_rps", 0.0) > 200 and s, 20,
                        what="irate over both pods")
        assert both["recent_rps"] == pytest.approx(240.0, rel=0.05)  # served + rejected, two pods
        # The pending gauges' scrape time, in epoch seconds (the decider's queue growth is per
        # scrape): within the last scrape interval or two (1 s here).
        assert 0.0 < time.time() - both["pending_at"] < 3.0
        assert both["recent_served_rps"] == pytest.approx(200.0, rel=0.05)
        # Its own targets' second scrape may come a moment later than the first service's.
        plain_rps = wait_for(lambda: snapshot((NS, "plain", "plain")).get("recent_rps"), 10,
                             what="irate over the plain service's pod", interval=0.2)
        assert plain_rps == pytest.approx(50.0, rel=0.05)

        # Scale-down: the pod leaves service discovery and stops.
        prom.write_targets([(pods[0].address, _labels(f"{NAME}-0")), plain_target])
        pods.pop().stop()
        after = wait_for(lambda: (s := snapshot()).get("replicas") == 1.0 and s, 15, interval=0.2,
                         what="the removed pod's series to go stale")
        removed_at = time.monotonic()
        # The unfiltered sum still counts the gone pod: what the filter is for.
        plain_sum = f'sum(irate(nv_inference_request_success{{inferenceservice="{NAME}"}}[{WINDOW_S}s]))'
        phantom = asyncio.run(prom.query(plain_sum))
        elapsed = time.monotonic() - removed_at
        assert elapsed < WINDOW_S / 2  # the gone pod's samples are still inside the range
        assert float(phantom[0]["value"][1]) == pytest.approx(200.0, rel=0.05)
        assert after["recent_rps"] == pytest.approx(120.0, rel=0.05)
        assert after["recent_served_rps"] == pytest.approx(100.0, rel=0.05)
        assert after["batch_size"] == pytest.approx(4.0, rel=0.05)
        assert after["batch_ms"] == pytest.approx(28.0, rel=0.05)
    finally:
        prom.stop()
        for p in pods + [plain]:
            p.stop()


@needs_prometheus
def test_pods_whose_scrapes_fail_are_counted_out_and_none_left_is_no_data(tmp_path):
    """A pod that stops answering its scrapes (it stays in service discovery): Prometheus marks its
    series stale at the failed scrape, so the count of pods exporting series drops (the decider then
    holds scale-down: PartialData), while rate() over the window still reads its earlier samples.
    With every pod's scrape failing the window's fading rate is no data, not a falling load -- read
    as the load it took a fleet of 9 down to 8 before NoData held it."""
    pods = [TritonExporter([NAME]).start() for _ in range(2)]
    for p in pods:
        p.set(NAME, rps=100.0, batch_size=4.0, batch_ms=28.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0).start()
    try:
        prom.write_targets([(p.address, _labels(f"{NAME}-{i}")) for i, p in enumerate(pods)])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        for p in pods:
            assert asyncio.run(prom.wait_target_up(p.address, timeout=30)), prom.read_log()
        source = PrometheusSource(prom.url)

        def observe():
            snap = source.fetch(WINDOW_S)
            assert snap.ok, snap.error
            return snap.observation(NS, NAME, NAME)

        both = wait_for(lambda: (o := observe()).status == "ok" and o.pods == 2.0 and o, 20,
                        what="both pods' series")
        assert both.rps and both.rps > 0
        pods[1].stop()  # its scrapes now fail; the target stays
        one = wait_for(lambda: (o := observe()).pods == 1.0 and o, 15, interval=0.2, what="one pod counted out")
        assert one.status == "ok" and one.rps is not None
        pods[0].stop()
        gone = wait_for(lambda: (o := observe()).status == "no_data" and o, 15, interval=0.2,
                        what="no live series left")
        assert gone.message.startswith("no pod exports Triton's series now (stale in Prometheus")
        assert "rps read over the window is of earlier scrapes" in gone.message  # rate() still reads them
    finally:
        prom.stop()
        for p in pods:
            p.stop()
