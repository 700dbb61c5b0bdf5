"""The stand-in exporter (tests/support/triton_exporter.py) the integration tests scrape: a pod
serves at most full batches back to back, and rejects the rest of its share."""

from __future__ import annotations

import re
import time

from support.triton_exporter import TritonExporter


def _totals(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))


def _rates(exporter: TritonExporter, seconds: float = 0.3) -> tuple[float, float]:
    first = exporter.render()
    t0 = time.monotonic()
    time.sleep(seconds)
    second = exporter.render()
    dt = time.monotonic() - t0
    return tuple((_totals(second, n) - _totals(first, n)) / dt  # type: ignore[return-value]
                 for n in ("nv_inference_request_success", "nv_inference_request_failure"))


def test_a_pod_serves_at_most_its_saturation_rate_and_rejects_the_rest():
    pods = [1]
    exporter = TritonExporter(["m"], pods=lambda: pods[0])
    try:
        exporter.set("m", rps=1500.0, batch_size=16.0, batch_ms=52.0)
        exporter.render()  # the pod's series exist from here
        served, failed = _rates(exporter)
        saturation = 1000 * 16 / 52  # 307.7 rps
        assert abs(served - saturation) < 0.1 * saturation, served
        assert abs(failed - (1500 - saturation)) < 0.1 * 1500, failed

        pods[0] = 6  # 250 rps each: all served; the failure counters stay, at 0
        exporter.render()
        served, failed = _rates(exporter)
        assert abs(served - 1500) < 0.1 * 1500, served
        assert failed < 1.0, failed
        assert "nv_inference_request_failure{" in exporter.render()
    finally:
        exporter.server.server_close()


def test_below_saturation_there_is_no_failure_series():
    exporter = TritonExporter(["m"], pods=lambda: 3)
    try:
        exporter.set("m", rps=300.0, batch_size=16.0, batch_ms=52.0)
        exporter.render()
        served, _ = _rates(exporter)
        assert abs(served - 300) < 30, served
        assert "nv_inference_request_failure{" not in exporter.render()
    finally:
        exporter.server.server_close()
