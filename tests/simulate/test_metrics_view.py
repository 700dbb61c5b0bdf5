"""The Prometheus view: summary p95 (max by pod), rate(), queue time, pending, concurrency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tritonscale.simulate.metrics_view import (
    PromConfig,
    _area_below,
    mean_concurrency,
    observe,
    pod_utilisation,
    request_rate,
)
from tritonscale.simulate.replica import BatcherConfig, Replica

# One scrape grid from t = 0 (no per-target offsets): the exact figures below assume it.
CFG = PromConfig(scrape_s=15.0, window_s=60.0, spread=False)
SPREAD = PromConfig(scrape_s=15.0, window_s=60.0)


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
    # rate(): the samples in (60, 120] are at 75 ... 120 s; their 45 s extrapolate to the window.
    sampled = sum(np.sum((p.req_end.view > 75) & (p.req_end.view <= 120)) for p in (light, heavy))
    assert obs.rps == pytest.approx(sampled / 45)


def test_values_come_from_the_last_scrape() -> None:
    # Instant values are the last scrape's. rate() over (now - 60, now] sees the same four
    # samples anywhere between two scrapes, and extrapolates them to the same 60 s -- for a
    # series older than the window (a younger one's range reaches back before it began).
    r = pod(np.linspace(0.0, 200.0, 10001))
    assert observe([r], 134.0, CFG) == observe([r], 120.0, CFG)


def test_young_pod_rate_counts_its_requests_over_the_whole_window_and_none_before_two_scrapes() -> None:
    # Prometheus does not extrapolate a counter below zero: the series starts at 90 s at 0, so
    # rate() is its increase over the 60 s window -- half its 100 rps, as Prometheus reads it.
    t = np.linspace(90.0, 119.99, 3000)  # 100 rps from t=90
    r = pod(t, ready_at=90.0)
    assert request_rate([r], 120.0, CFG) == pytest.approx(50.0, rel=0.02)
    assert request_rate([pod(t, ready_at=110.0)], 120.0, CFG) is None
    assert observe([pod(t, ready_at=110.0)], 120.0, CFG).status == "no_data"


def test_idle_pod_reports_no_p95_but_zero_rate() -> None:
    r = pod(np.array([1.0, 2.0]))
    obs = observe([r], 120.0, CFG)
    assert obs.status == "ok" and obs.p95_ms is None and obs.rps == 0.0 and obs.queue_ms is None
    assert obs.scrape_s is None  # its counter stood still over its last two scrapes: idelta / irate is 0/0


def test_the_scrape_gap_is_the_scrape_interval() -> None:
    t = np.arange(0.0, 120.0, 0.02)
    assert observe([pod(t, ready_at=0.0)], 120.0, CFG).scrape_s == CFG.scrape_s


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


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 10.0), (3.3, 3.3), (-5.0, 0.5), (2.0, 7.25), (9.5, 20.0)])
def test_area_below_is_the_integral_of_the_count(t0: float, t1: float) -> None:
    # the compiled sum against the integral of #{x_i <= t} over [t0, t1] taken on a fine grid of t,
    # and against numpy's form of the same sum (the kernel adds in a different order)
    x = np.sort(np.random.default_rng(2).uniform(0.0, 10.0, 5_000))
    grid = np.linspace(t0, t1, 200_001)
    counted = np.searchsorted(x, grid, side="right")
    numeric = float(np.sum((counted[1:] + counted[:-1]) / 2.0 * np.diff(grid)))
    i0, i1 = np.searchsorted(x, [t0, t1], side="right")
    exact = i0 * (t1 - t0) + float(np.sum(t1 - x[i0:i1]))
    assert _area_below(x, t0, t1) == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert _area_below(x, t0, t1) == pytest.approx(numeric, rel=1e-3, abs=1e-9)


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


def test_batch_fields_reach_the_decider_observation() -> None:
    from tritonscale.simulate import metrics_view

    obs = metrics_view.observe([pod(np.full(40, 10.0) + np.arange(40) * 1e-6)], 15.0, CFG)
    assert obs.status == "ok" and obs.pods == 1.0
    assert obs.batch_size == pytest.approx(10.0) and obs.batch_ms == pytest.approx(47.2)


def test_a_window_rate_with_no_live_pod_is_no_data_as_in_the_operator() -> None:
    """The simulator reads its query answers with the operator's own code (Snapshot.observation): a
    removed pod's rate still in the window, with no pod scraped now, is the traffic of pods gone,
    fading -- no data, on which the decider holds. The simulator's own reading called it "ok" with
    0 pods."""
    from tritonscale.simulate import metrics_view

    gone = pod(np.sort(np.random.default_rng(3).uniform(0, 400, 40_000)))
    gone.removed = 200.0
    obs = metrics_view.observe([], 210.0, CFG, retired=[gone])
    assert obs.status == "no_data" and "no pod exports Triton's series now" in obs.message, obs
    assert metrics_view.observe([gone], 190.0, CFG).status == "ok"


def test_a_removed_pods_rate_fades_out_of_the_window_instead_of_vanishing() -> None:
    # Two pods at 100 rps each; one is removed at 200 s (last scrape 195 s). Its rate() counts
    # what it served in the window before that scrape, until the scrape leaves the window.
    rng = np.random.default_rng(3)
    stay, gone = (pod(np.sort(rng.uniform(0, 400, 40_000))) for _ in range(2))
    gone.removed = 200.0
    served = np.sum((gone.req_end.view > 165) & (gone.req_end.view <= 195))  # between its samples
    # 210 s: samples at 165-195 in (150, 210]; 15 s on either side is under 1.1 intervals, so
    # they extrapolate to the whole window: the gone pod still reads its full rate.
    assert request_rate([stay], 210.0, CFG, retired=[gone]) == pytest.approx(
        request_rate([stay], 210.0, CFG) + served / 30, rel=1e-9)
    assert request_rate([stay], 210.0, CFG, retired=[gone]) == pytest.approx(200.0, rel=0.03)
    # 220 s: its last sample is 25 s old, past the threshold: half an interval (7.5 s) past it.
    assert request_rate([stay], 220.0, CFG, retired=[gone]) == pytest.approx(
        request_rate([stay], 220.0, CFG) + served / 30 * (30 + 5 + 7.5) / 60, rel=1e-9)
    # 250 s: only 195 s is left in (190, 250]: one sample, no rate; the live pod alone.
    assert request_rate([stay], 250.0, CFG, retired=[gone]) == pytest.approx(100.0, rel=0.03)


@pytest.mark.parametrize(("times", "values", "start", "end", "expected"), [
    # samples every 15 s filling the range: the increase over 45 s, extrapolated to 60 s
    ([15, 30, 45, 60], [150, 300, 450, 600], 0.5, 60.5, 450 * 60 / 45 / 60),
    # the series ended 20 s before the range's end (> 1.1 x 15 s): half an interval past it
    ([15, 30, 45], [150, 300, 450], 0.5, 65.0, 300 * (30 + 14.5 + 7.5) / 30 / 64.5),
    # it started at 0: extrapolated back to where the counter was zero, not to the range's start
    ([45, 60], [0, 150], 0.0, 60.0, 150 / 60),
    # a counter that started at 50 at 45 s, rising 10/s: zero lies 5 s before the first sample
    ([45, 60], [50, 200], 0.0, 60.0, 150 * (15 + 5) / 15 / 60),
])
def test_extrapolated_rate_is_prometheus_rate(times, values, start, end, expected) -> None:
    from tritonscale.simulate.metrics_view import extrapolated_rate

    got = extrapolated_rate(np.array(times, float), np.array(values, float), start, end)
    assert got == pytest.approx(expected)


def test_prometheus_spreads_its_targets_over_the_interval() -> None:
    from tritonscale.simulate.metrics_view import pod_scrape, scrape_offset

    pods = [Replica(i, 0.0, 0.0, BatcherConfig()) for i in range(200)]
    offsets = np.array([scrape_offset(r, SPREAD) for r in pods])
    assert np.all((offsets >= 0) & (offsets < 15.0))
    # a hash, not a constant: the offsets fill the interval, about evenly
    assert np.histogram(offsets, bins=3, range=(0, 15))[0].min() >= 45
    assert scrape_offset(pods[7], SPREAD) == scrape_offset(Replica(7, 50.0, 60.0, BatcherConfig()), SPREAD)
    assert scrape_offset(pods[7], CFG) == 0.0
    r, off = pods[7], float(offsets[7])
    assert pod_scrape(r, 100.0, SPREAD) == pytest.approx(off + 15 * math.floor((100.0 - off) / 15))
    assert 85.0 < pod_scrape(r, 100.0, SPREAD) <= 100.0


def test_instant_values_are_each_pods_last_scrape_and_pending_at_their_mean_time() -> None:
    from tritonscale.simulate.metrics_view import pod_scrape

    # Six overloaded pods (2000 rps against a few hundred of capacity): each one's queue grows all
    # the time, so what a pod reports depends on when it was scraped.
    pods = [Replica(i, 0.0, 0.0, BatcherConfig()) for i in range(6)]
    for r in pods:
        r.add(np.linspace(0.0, 59.9995, 120_000))
        r.advance(60.0, 60.0)
        r.sync()
    obs = observe(pods, 60.0, SPREAD)
    times = [pod_scrape(r, 60.0, SPREAD) for r in pods]
    assert len(set(times)) == 6  # six pods, six scrape times
    assert obs.pending_at == pytest.approx(sum(times) / 6)
    assert obs.pending == sum(r.pending_at(t) for r, t in zip(pods, times, strict=True))
    assert obs.pending_min == min(r.pending_at(t) for r, t in zip(pods, times, strict=True))  # the least-queued pod
    assert 0 < obs.pending_min < obs.pending / 6
    assert obs.pending < sum(r.pending_at(60.0) for r in pods)  # older scrapes, shorter queues
    # irate over each pod's own last two scrapes
    served = sum(np.sum((r.req_end.view > t - 15) & (r.req_end.view <= t)) for r, t in zip(pods, times, strict=True))
    assert obs.recent_rps == pytest.approx(served / 15)


def test_a_pod_not_yet_scraped_since_it_became_ready_is_not_read() -> None:
    from tritonscale.simulate.metrics_view import scrape_offset

    r = Replica(3, 0.0, 0.0, BatcherConfig())
    off = scrape_offset(r, SPREAD)
    late = Replica(3, 0.0, off + 31.0, BatcherConfig())  # ready 1 s after a scrape
    late.add(np.linspace(off + 31.0, off + 44.0, 200))
    late.advance(off + 45.0, off + 45.0)
    assert observe([late], off + 44.0, SPREAD).status == "no_data"  # its first scrape is at off + 45


def test_rate_pods_counts_the_series_with_a_rate_over_the_window_as_the_operator_asks() -> None:
    """``count(rate(success[window]))``, which the operator asks beside ``count(success)``: a pod scraped
    once since it became ready has a series but no rate yet, and a removed pod's series keeps its rate
    while its scrapes are in the window. The simulator answered no such query, so the decider's
    ``complete`` step never saw a pod without a rate in the suite."""
    t = np.sort(np.random.default_rng(5).uniform(0, 200, 20_000))
    old, new = pod(t), pod(t[t >= 100.0], ready_at=100.0)
    obs = observe([old, new], 110.0, CFG)  # the new pod's one scrape is at 105 s
    assert (obs.pods, obs.rate_pods) == (2.0, 1.0)
    assert observe([old, new], 125.0, CFG).rate_pods == 2.0  # its second scrape, at 120 s
    gone = pod(t)
    gone.removed = 112.0
    obs = observe([old], 125.0, CFG, retired=[gone])
    assert (obs.pods, obs.rate_pods) == (1.0, 2.0)


def test_keda_reads_the_requests_that_arrive_rejected_ones_included() -> None:
    """Every policy's replicas run a queue timeout: the served rate alone caps at what a saturated fleet
    serves, and hid the demand it rejects from KEDA (auditF, session 84)."""
    rng = np.random.default_rng(5)
    r = Replica(0, 0.0, 0.0, BatcherConfig(queue_timeout_ms=200.0))  # saturates near 500 rps (16 per 32 ms)
    r.add(np.sort(rng.uniform(0, 180, 180 * 800)))  # 800 rps
    r.advance(180.0, 180.0)
    r.sync()
    from tritonscale.simulate.metrics_view import window_rates

    rates = window_rates([r], 180.0, CFG)
    assert rates.failure > 100.0 and rates.success < 600.0, rates
    assert request_rate([r], 180.0, CFG) == pytest.approx(rates.success + rates.failure)
    assert request_rate([r], 180.0, CFG) == pytest.approx(800.0, rel=0.05)


def test_the_kpas_window_keeps_the_in_flight_requests_of_pods_removed_within_it() -> None:
    """Knative averages the fleet-wide totals it recorded at each scrape. Read over the ready pods alone, a
    scale-down took the removed pods' share of the last minute out of the 60 s window at once: the next
    tick read half, halved again, and the fleet went 11 -> 5 -> 2 -> 1 under a steady load (auditF)."""
    from tritonscale.simulate.engine import View

    rng = np.random.default_rng(7)
    stay = pod(np.sort(rng.uniform(0, 400, 400 * 100)))  # 100 rps
    gone = pod(np.sort(rng.uniform(0, 200, 200 * 100)))  # 100 rps until it is removed at 200 s
    gone.removed = 200.0
    before = mean_concurrency([stay, gone], 150.0, 210.0)
    view = View(now=210.0, current=1, ready=1, pods=[stay], prom=CFG, retired=[gone])
    assert view.concurrency(60.0) == pytest.approx(before)
    assert view.concurrency(60.0) > 1.5 * mean_concurrency([stay], 150.0, 210.0)
