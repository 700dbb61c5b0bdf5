"""The simulator's ``rate()`` against Debian's Prometheus.

The simulator reads Prometheus's ``rate()`` through ``metrics_view.extrapolated_rate`` (the
suite's KEDA, SLO-ratio and tritonscale's window signals depend on it). Here test exporters
stand for three pods scraped every second: one steady, one removed from service discovery
(its series ends inside the window), one started late (its series begins inside it, at a
counter that started at zero). For each, the raw samples Prometheus holds in the range are
fed to ``extrapolated_rate``, and the result must be Prometheus's own ``rate()`` at the same
evaluation time.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from support.deployment_watch import needs_prometheus
from support.triton_exporter import TritonExporter
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.simulate.metrics_view import extrapolated_rate

NAME = "svc"
WINDOW_S = 10


def _labels(pod: str) -> dict[str, str]:
    return {"namespace": "ns", "inferenceservice": NAME, "pod": pod}


@needs_prometheus
def test_extrapolated_rate_is_what_prometheus_computes_for_steady_removed_and_young_series(tmp_path):
    steady, removed, young = (TritonExporter([NAME]).start() for _ in range(3))
    for p in (steady, removed, young):
        p.set(NAME, rps=100.0)
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0).start()
    try:
        prom.write_targets([(steady.address, _labels("steady")), (removed.address, _labels("removed"))])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        for p in (steady, removed):
            assert asyncio.run(prom.wait_target_up(p.address, timeout=30)), prom.read_log()
        time.sleep(WINDOW_S + 2)
        young = TritonExporter([NAME]).start()  # its counter starts at zero now
        young.set(NAME, rps=100.0)
        prom.write_targets([(steady.address, _labels("steady")), (young.address, _labels("young"))])
        removed.stop()
        assert asyncio.run(prom.wait_target_up(young.address, timeout=30)), prom.read_log()
        time.sleep(5)
        at = round(time.time() - 0.5, 3)  # scraped by now; Prometheus works in milliseconds
        for pod in ("steady", "removed", "young"):
            sel = f'nv_inference_request_success{{pod="{pod}"}}'
            raw = asyncio.run(prom.query(f"{sel}[{WINDOW_S}s]", at))
            rate = asyncio.run(prom.query(f"rate({sel}[{WINDOW_S}s])", at))
            assert len(raw) == 1 and len(rate) == 1, (pod, raw, rate)
            # Times relative to the evaluation, from Prometheus's integer milliseconds: epoch
            # seconds as floats would cost the comparison seven digits.
            samples = np.array([[(round(float(ts) * 1000) - round(at * 1000)) / 1000, float(v)]
                                for ts, v in raw[0]["values"]])
            assert len(samples) >= 2, (pod, samples)
            ours = extrapolated_rate(samples[:, 0], samples[:, 1], -WINDOW_S, 0.0)
            theirs = float(rate[0]["value"][1])
            print(f"{pod}: {len(samples)} samples {samples[0, 0]:+.2f}..{samples[-1, 0]:+.2f} s, "
                  f"first value {samples[0, 1]:.0f}; Prometheus rate {theirs:.3f}, ours {ours:.3f}")
            assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-9), pod
            if pod == "removed":  # its series really ends inside the window ...
                assert -samples[-1, 0] > 1.5
            if pod == "young":  # ... and this one really begins inside it
                assert samples[0, 0] + WINDOW_S > 1.5
    finally:
        prom.stop()
        for p in (steady, removed, young):
            p.stop()
