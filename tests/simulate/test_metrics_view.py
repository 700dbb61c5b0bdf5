"""The Prometheus view: summary p95 (max by pod), rate(), queue time, pending, concurrency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tritonscale.simulate.metrics_view import PromConfig, mean_concurrency, observe, pod_utilisation, request_rate
from tritonscale.simulate.replica import BatcherConfig, Replica

CFG = PromConfig(scrape_s=15.0, window_s=60.0)


def pod(arrivals: np.ndarray, ready_at: float = 0.0, until: float = math.inf) -> Replica:
    r = Replica(0, ready_at, ready_at, BatcherConfig())
    r.add(arrivals)
    r.advance(until, until)
    r.sync()
    return r


def test_p95_is_the_max_over_pods_of_the_last_window() -> None:
    rng = np.random.default_rng(0)
    light = pod(np.sort(rng.uniform(0, 120, 6000)))  # 50 rps
    heavy = pod(np.sort(rng.uniform(0, 120, 34_000)))  # 283 rps: longer queues
    obs = observe([light, heavy], 120.0, CFG)
    lat = heavy.latencies()
    end = heavy.req_end.view
    in_window = (end > 60.0) & (end <= 120.0)
    assert obs.status == "ok"
    assert obs.p95_ms == pytest.approx(np.quantile(lat[in_window], 0.95) * 1000)
    light_done = np.sum((light.req_end.view > 60) & (light.req_end.view <= 120))
    assert obs.rps == pytest.approx((np.sum(in_window) + light_done) / 60)


def test_values_come_from_the_last_scrape() -> None:
    r = pod(np.linspace(0.0, 100.0, 5001))
    assert observe([r], 44.0, CFG) == observe([r], 30.0, CFG)


def test_young_pod_rate_uses_its_own_lifetime_and_no_rate_before_two_scrapes() -> None:
    t = np.linspace(90.0, 119.99, 3000)  # 100 rps from t=90
    r = pod(t, ready_at=90.0)
    assert request_rate([r], 120.0, CFG) == pytest.approx(100.0, rel=0.02)
    assert request_rate([pod(t, ready_at=110.0)], 120.0, CFG) is None
    assert observe([pod(t, ready_at=110.0)], 120.0, CFG).status == "no_data"


def test_idle_pod_reports_no_p95_but_zero_rate() -> None:
    r = pod(np.array([1.0, 2.0]))
    obs = observe([r], 120.0, CFG)
    assert obs.status == "ok" and obs.p95_ms is None and obs.rps == 0.0 and obs.queue_ms is None


def test_pending_counts_requests_not_yet_in_a_batch() -> None:
    # 40 requests within 40 us: the 4th completes preferred size 4, which starts at once;
    # the other 36 wait for it (28 ms), then go as 16 + 16 + 4
    r = pod(np.full(40, 10.0) + np.arange(40) * 1e-6)
    assert r.pending_at(10.01) == 36
    assert r.pending_at(10.03) == 20
    assert observe([r], 15.0, CFG).pending == 0.0  # by the 15 s scrape all are served


def test_mean_concurrency_obeys_littles_law() -> None:
    rng = np.random.default_rng(5)
    t = np.sort(rng.uniform(0, 300, 60_000))  # 200 rps
    r = pod(t)
    inside = (t > 100) & (t < 200)
    expected = 200.0 * r.latencies()[inside].mean()
    assert mean_concurrency([r], 100.0, 200.0) == pytest.approx(expected, rel=0.03)


def test_utilisation_is_the_duty_cycle() -> None:
    r = pod(np.arange(0.0, 120.0, 0.1))  # 10 rps: each request alone, 2 ms delay + 22 ms work
    assert pod_utilisation([r], 120.0, CFG) == [pytest.approx(0.22, rel=0.01)]


def test_batch_statistics_as_triton_counts_them() -> None:
    from tritonscale.simulate.metrics_view import batch_stats

    # 40 requests at once: batches 4 (28 ms), 16 (52 ms), 16 (52 ms), 4 (28 ms)
    r = pod(np.full(40, 10.0) + np.arange(40) * 1e-6)
    size, ms = batch_stats([r], 15.0, CFG)
    assert size == pytest.approx(10.0)
    assert ms == pytest.approx((4 * 28 + 16 * 52 + 16 * 52 + 4 * 28) / 40)  # request-weighted


def test_batch_fields_reach_a_decider_observation_that_declares_them(monkeypatch) -> None:
    from dataclasses import dataclass

    from tritonscale.scaling.decider import Observation
    from tritonscale.simulate import metrics_view

    @dataclass(frozen=True)
    class WithBatches(Observation):
        batch_size: float | None = None
        batch_ms: float | None = None

    monkeypatch.setattr(metrics_view, "Observation", WithBatches)
    monkeypatch.setattr(metrics_view, "_OBS_FIELDS", {"batch_size", "batch_ms"})
    obs = metrics_view.observe([pod(np.full(40, 10.0) + np.arange(40) * 1e-6)], 15.0, CFG)
    assert obs.batch_size == pytest.approx(10.0) and obs.batch_ms == pytest.approx(47.2)
