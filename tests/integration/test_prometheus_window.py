"""A rate window shorter than two scrape intervals, against Debian's Prometheus.

``rate()`` needs two samples in its window. With ``windowSeconds`` under twice the scrape interval
only the pods whose scrape phase fits the window at the query's instant have a rate, and the sum
reads a share of the traffic as all of it -- while the instant count of series still sees every pod.
An exploration (session 55) saw a fleet that needed 5 replicas settle at 3, or flap 6 -> 5 -> 6,
while status said Available. The source now counts the pods with a rate (``rate_pods``), so the
decider keeps a replica for each pod the window misses and status says why.
"""

from __future__ import annotations

import asyncio

from support.cluster import wait_for
from support.deployment_watch import needs_prometheus
from support.triton_exporter import TritonExporter
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource

NS, NAME = "ns", "svc"
PODS, RPS = 4, 10.0
SCRAPE_S = 2.0


@needs_prometheus
def test_a_window_shorter_than_two_scrapes_counts_the_pods_it_misses(tmp_path):
    pods = [TritonExporter([NAME]).start() for _ in range(PODS)]
    for p in pods:
        p.set(NAME, rps=RPS, batch_size=4.0, batch_ms=28.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=SCRAPE_S).start()
    try:
        prom.write_targets([(p.address, {"namespace": NS, "inferenceservice": NAME, "pod": f"{NAME}-{i}"})
                            for i, p in enumerate(pods)])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        for p in pods:
            assert asyncio.run(prom.wait_target_up(p.address, timeout=30)), prom.read_log()
        source = PrometheusSource(prom.url)

        def observe(window_s: int):
            snap = source.fetch(window_s)
            assert snap.ok, snap.error
            return snap.observation(NS, NAME, NAME)

        # Twice the scrape interval and more: every pod has a rate, and the sum is the whole traffic.
        # (Once each series is older than the window: rate() extrapolates less at a series' start.)
        whole = wait_for(lambda: (o := observe(8)).status == "ok" and o.rate_pods == PODS and o.rps is not None
                         and abs(o.rps - PODS * RPS) < 0.2 * PODS * RPS and o, 30, interval=0.2,
                         what="every pod's rate over an 8 s window, the whole traffic")
        assert whole.pods == PODS
        # 3 s against 2 s scrapes: at most instants some pods have one sample in the window, no rate.
        short = wait_for(lambda: (o := observe(3)).status == "ok" and o.rate_pods is not None
                         and o.rate_pods < PODS and o, 30, interval=0.2, what="a 3 s window missing a pod")
        assert short.pods == PODS  # the instant count sees them all
        assert short.rps is not None and short.rps < (PODS - 0.5) * RPS, short  # what the pods it reads serve
    finally:
        prom.stop()
        for p in pods:
            p.stop()
