"""What Prometheus would show the autoscalers, computed from the simulated replicas.

This mirrors the operator's queries (``scaling`` metric source) on the default
15 s scrape interval and 60 s window:

* p95: each Triton pod exports ``nv_inference_request_summary_us{quantile="0.95"}``,
  a summary over the last 60 s (``summary_s``) of *completed* requests; the operator takes
  ``max by`` over pods. A pod that completed nothing reports NaN, which ``max``
  skips; all-NaN gives ``p95_ms=None``.
* rps: ``sum(rate(nv_inference_request_success[60s]))`` -- completions per second.
* queue_ms: ``sum(rate(queue_duration_us)) / sum(rate(success))`` -- mean queue time of the
  requests completed in the window.
* pending: ``sum(nv_inference_pending_request_count)`` at the scrape; pending_min, pending_max: its
  ``min`` and ``max`` (the least- and the most-queued pod's).
* failed_rps: ``sum(rate(nv_inference_request_failure[60s]))`` -- requests the queue
  policy rejected (they never enter the latency summary, rps or queue time).
* recent_rps: ``sum(irate(success[60s]) + irate(failure[60s]))`` -- requests out of the
  queue between the last two scrapes, per second: the fastest rate Prometheus has.
* recent_served_rps: ``sum(irate(success[60s]))`` -- the same, served requests only.
* scrape_s: ``min(idelta(success[60s]) / irate(success[60s]))`` -- the seconds between a pod's
  last two scrapes (for a status note only).
* replicas: ``count(success)`` -- the pods scraped now; rate_pods: ``count(rate(success[60s]))`` --
  the series with a rate over the window (two scrapes in it): a pod scraped once since it became
  ready is in the first and not the second, a removed pod's series in the second while its scrapes
  are in the window (answered since session 64; the decider's ``complete`` step reads both).

Scrapes: a pod's series are scraped on its own grid (offset + k x scrape interval) while it
is ready and not removed: a starting pod's Triton has no series yet, and a removed pod's series
end at its last scrape. Prometheus spreads its targets over the interval: each target's offset
is a hash of its labels (``scrape.Target.offset``), so pods are scraped at unrelated phases and
an autoscaler's tick reads data of every age up to one interval. The offset here is a hash of
the pod's number (``scrape_offset``; ``PromConfig(spread=False)`` puts every pod on t = 0's
grid). Instant values (p95, pending) are those of each pod's last scrape; ``irate``
reads only live series, as the operator's queries do (``promql_queries.live_irate``).

``rate()`` is Prometheus's own (``extrapolated_rate``, as in 2.42, the version the
integration tests run): each series' increase between its first and last sample in the
range, extrapolated to the range's ends (all the way where the gap is under 1.1 sample
intervals, else by half an interval; never below the counter's zero), divided by the whole
range. So a pod younger than the window counts its completions over the window, not over its
own life, and a pod removed within the window still counts what it served before its last
scrape: ``sum(rate())`` is the fleet's average over the window, whatever the churn. A series
needs two samples in the range. ``tests/integration/test_prometheus_rate.py`` checks this
function against Debian's Prometheus.

Batch statistics: ``batch_size`` =
``irate(nv_inference_count) / irate(nv_inference_exec_count)`` (requests per model
execution) and ``batch_ms`` = ``irate(nv_inference_compute_infer_duration_us) /
irate(nv_inference_request_success)`` (Triton charges each request the whole batch's
compute time, so this is the request-weighted batch duration), between the last two scrapes.

These answers become the decider's Observation through the operator's own reading of a round of
queries (``prometheus_source.Snapshot.observation``): a window rate with no live pod is no data (the
fleet holds), as in the operator.

HPA's utilisation (GPU duty cycle: share of wall time the instance executes a
batch) and Knative's concurrency (time-averaged in-flight requests, which the
queue-proxy reports every second) are computed the same way from the same pods.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from tritonscale.scaling.decider import Observation
from tritonscale.scaling.prometheus_source import Key, Snapshot
from tritonscale.simulate.replica import Replica


@dataclass(frozen=True)
class PromConfig:
    scrape_s: float = 15.0
    window_s: float = 60.0  # rate() range (the CRD's windowSeconds)
    summary_s: float = 60.0  # age of Triton's latency summary (fixed in Triton: 60 s)
    quantile: float = 0.95
    spread: bool = True  # per-target scrape offsets, as Prometheus has (False: one grid from t = 0)

    def __post_init__(self) -> None:
        if self.scrape_s <= 0 or self.window_s <= 0 or self.summary_s <= 0:
            raise ValueError("scrape interval and windows must be > 0 s")


# The simulated service's (namespace, inferenceservice, model) in the query answers it reads.
SERIES_KEY: Key = ("default", "simulated", "model")


def last_scrape(now: float, scrape_s: float, offset: float = 0.0) -> float:
    """The last scrape at or before ``now`` of a target scraped at ``offset + k x scrape_s``."""
    # 1e-9: a tick at exactly 45.0 s sees the 45 s scrape despite float rounding
    return math.floor((now - offset) / scrape_s + 1e-9) * scrape_s + offset


def scrape_offset(r: Replica, cfg: PromConfig) -> float:
    """Where in the interval Prometheus scrapes ``r``: a hash of the pod, uniform over
    [0, scrape_s), as Prometheus hashes each target's labels; 0 without ``spread``."""
    if not cfg.spread:
        return 0.0
    return zlib.crc32(f"pod-{r.rid}".encode()) / 2**32 * cfg.scrape_s


def pod_scrape(r: Replica, now: float, cfg: PromConfig) -> float:
    """Time of ``r``'s last scrape at or before ``now``."""
    return last_scrape(now, cfg.scrape_s, scrape_offset(r, cfg))


def _span(r: Replica, t: float, cfg: PromConfig) -> float:
    """Seconds of this pod's history inside the window (0: no rate yet)."""
    span = min(cfg.window_s, t - max(r.ready_at, 0.0))
    return span if span >= cfg.scrape_s - 1e-9 else 0.0


def _window(r: Replica, t0: float, t1: float) -> slice:
    end = r.req_end.view
    i0 = int(np.searchsorted(end, t0, side="right"))
    i1 = int(np.searchsorted(end, t1, side="right"))
    return slice(i0, i1)


def _successes(r: Replica, w: slice) -> np.ndarray:
    """Boolean mask over the requests in ``w``: run (not rejected by the queue policy)."""
    return r.req_rejected.a[w] == 0.0


def scrape_instants(r: Replica, now: float, range_s: float, cfg: PromConfig) -> np.ndarray:
    """Times of ``r``'s samples within the range (now - range_s, now]: points of its scrape grid
    at which it was ready and not yet removed."""
    s, off = cfg.scrape_s, scrape_offset(r, cfg)
    lo = max(math.floor((now - range_s - off) / s + 1e-9) + 1, math.ceil((max(r.ready_at, 0.0) - off) / s - 1e-9))
    hi = math.floor((now - off) / s + 1e-9)
    if r.removed is not None:
        hi = min(hi, math.ceil((r.removed - off) / s - 1e-9) - 1)
    return np.arange(lo, hi + 1, dtype=float) * s + off if hi >= lo else np.empty(0)


def extrapolated_rate(times: np.ndarray, values: np.ndarray, range_start: float, range_end: float) -> float:
    """Prometheus's ``rate()`` of one counter series (no resets) from its samples in the range:
    ``extrapolatedRate`` in promql/functions.go as of 2.42. Needs two samples."""
    first, last = float(values[0]), float(values[-1])
    increase = last - first
    sampled = float(times[-1] - times[0])
    average = sampled / (len(times) - 1)
    to_start, to_end = float(times[0]) - range_start, range_end - float(times[-1])
    if increase > 0 and first >= 0:  # a counter does not extrapolate below zero
        to_start = min(to_start, sampled * first / increase)
    threshold = 1.1 * average
    interval = sampled + (to_start if to_start < threshold else average / 2)
    interval += to_end if to_end < threshold else average / 2
    return increase * interval / sampled / (range_end - range_start)


def _counter(times: np.ndarray, cum: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A step-function counter (value ``cum[i]`` from ``times[i]``) sampled at ``at``."""
    i = np.searchsorted(times, at, side="right")
    return np.where(i > 0, cum[np.maximum(i - 1, 0)], 0.0) if len(cum) else np.zeros(len(at))


@dataclass(frozen=True)
class WindowRates:
    """``sum(rate(...[window]))`` over every series with two samples in the window."""

    success: float
    failure: float
    queue_s: float  # queue seconds per second (rate of the queue-duration counter)
    series: int  # pods with a rate


def window_rates(pods: Sequence[Replica], now: float, cfg: PromConfig) -> WindowRates:
    w = cfg.window_s
    success = failure = queue_s = 0.0
    series = 0
    for r in pods:
        at = scrape_instants(r, now, w, cfg)
        if len(at) < 2:
            continue
        r.sync()
        series += 1
        ends = r.batch_end.view
        success += extrapolated_rate(at, _counter(ends, r.batch_size_cum.view, at), now - w, now)
        failure += extrapolated_rate(at, _counter(r.reject_time.view, r.reject_cum.view, at), now - w, now)
        queue_s += extrapolated_rate(at, _counter(ends, r.batch_queue_cum.view, at), now - w, now)
    return WindowRates(success, failure, queue_s, series)


def observe(pods: Sequence[Replica], now: float, cfg: PromConfig, retired: Sequence[Replica] = ()) -> Observation:
    """The decider's Observation for ``now`` from the ready pods and those removed recently
    (whose series ``rate()`` still reads within the window)."""
    p95s: list[float] = []
    recent = 0.0
    recent_served = 0.0
    recent_series = 0
    pending = 0
    pending_min: int | None = None
    pending_max: int | None = None
    scraped: list[float] = []
    for r in pods:
        r.sync()
        t = pod_scrape(r, now, cfg)
        if t < r.ready_at:
            continue  # not scraped since it became ready
        scraped.append(t)
        queued = r.pending_at(t)
        pending += queued
        pending_min = queued if pending_min is None else min(pending_min, queued)
        pending_max = queued if pending_max is None else max(pending_max, queued)
        w = _window(r, t - cfg.summary_s, t)
        if w.stop > w.start:
            ok = _successes(r, w)
            if ok.any():
                lat = (r.req_end.a[w] - r.arrivals.a[w])[ok]
                p95s.append(float(np.quantile(lat, cfg.quantile)) * 1000.0)
        if _span(r, t, cfg) > 0:
            # irate(): the last two scrapes of success + failure
            j = int(np.searchsorted(r.req_end.view, t - cfg.scrape_s, side="right"))
            recent += (w.stop - j) / cfg.scrape_s
            recent_served += float(np.sum(r.req_rejected.a[j:w.stop] == 0.0)) / cfg.scrape_s
            recent_series += 1
    rates = window_rates([*pods, *retired], now, cfg)
    if not rates.series:
        return Observation(status="no_data", message="no pod has two scrapes yet")
    size, ms = batch_stats(pods, now, cfg)
    # What each query answers (None: no series, as an empty PromQL vector), read into the decider's
    # Observation by the operator's own code: the same guards (no live pod is no data; a reading that
    # is no measurement is none) and the same fields.
    answers: dict[str, float | None] = {
        "rps": rates.success,
        "p95_ms": max(p95s) if p95s else None,
        "queue_ms": (rates.queue_s / rates.success * 1000.0) if rates.success > 0 else None,
        # instant vectors over the live pods scraped since they became ready: none, no series
        "replicas": float(len(scraped)) if scraped else None,  # count(success)
        "rate_pods": float(rates.series),  # count(rate(success[window])): removed pods' series too, within it
        "pending": float(pending) if scraped else None,
        "pending_min": float(pending_min) if pending_min is not None else None,
        "pending_max": float(pending_max) if pending_max is not None else None,
        "pending_at": sum(scraped) / len(scraped) if scraped else None,  # avg(timestamp())
        "batch_size": size, "batch_ms": ms,
        "batch_items": 1.0 if size is not None else None,  # count / success: each simulated request is one item
        "failed_rps": rates.failure,
        "recent_rps": recent if recent_series else None,
        "recent_served_rps": recent_served if recent_series else None,
        # min(idelta / irate): the seconds between a pod's last two scrapes, of the pods whose counters moved
        "scrape_s": cfg.scrape_s if recent > 0 else None,
    }
    values = {signal: {SERIES_KEY: v} for signal, v in answers.items() if v is not None}
    return Snapshot(taken_at=now, ok=True, values=values, window_s=round(cfg.window_s)).observation(*SERIES_KEY)


def batch_stats(pods: Sequence[Replica], now: float, cfg: PromConfig) -> tuple[float | None, float | None]:
    """(requests per execution, request-weighted batch compute ms) between the last two scrapes
    (``irate``): a whole rate window mixes the batch sizes of a changing load, and Triton's
    request-weighted compute time then reads high."""
    execs, reqs, weighted_s = 0, 0, 0.0
    for r in pods:
        r.sync()
        t = pod_scrape(r, now, cfg)
        if _span(r, t, cfg) <= 0:
            continue
        span = cfg.scrape_s
        end, cum = r.batch_end.view, r.batch_size_cum.view
        i0 = int(np.searchsorted(end, t - span, side="right"))
        i1 = int(np.searchsorted(end, t, side="right"))
        if i1 <= i0:
            continue
        sizes = np.diff(cum[i0 - 1:i1]) if i0 else np.diff(cum[:i1], prepend=0.0)
        execs += i1 - i0
        reqs += int(sizes.sum())
        weighted_s += float(np.sum((end[i0:i1] - r.batch_start.a[i0:i1]) * sizes))
    if not execs:
        return None, None
    return reqs / execs, weighted_s / reqs * 1000.0


def pod_utilisation(pods: Sequence[Replica], now: float, cfg: PromConfig) -> list[float | None]:
    """GPU duty cycle per ready pod over the window; None for a pod without two scrapes."""
    out: list[float | None] = []
    for r in pods:
        t = pod_scrape(r, now, cfg)
        span = _span(r, t, cfg)
        out.append(r.busy_seconds(t - span, t) / span if span > 0 else None)
    return out


def request_rate(pods: Sequence[Replica], now: float, cfg: PromConfig, retired: Sequence[Replica] = ()) -> float | None:
    """``sum(rate(nv_inference_request_success[window])) + sum(rate(nv_inference_request_failure[window]))``:
    the requests that arrived, served or rejected; None when no series has a rate yet."""
    rates = window_rates([*pods, *retired], now, cfg)
    return rates.success + rates.failure if rates.series else None


@njit(cache=True)
def _area_below(x: np.ndarray, t0: float, t1: float) -> float:  # pragma: no cover
    """Integral over [t0, t1] of #{x_i <= t}, for sorted x: i0 (t1 - t0) plus the sum of t1 - x_i
    over the x_i in (t0, t1]. Compiled: the KPA asks for it per pod every 2 s, and as numpy
    calls it took a fifth of a scenario's time."""
    i0 = np.searchsorted(x, t0, side="right")
    i1 = np.searchsorted(x, t1, side="right")
    total = 0.0
    for i in range(i0, i1):
        total += t1 - x[i]
    return float(i0 * (t1 - t0) + total)


def mean_concurrency(pods: Sequence[Replica], t0: float, t1: float) -> float:
    """Time-averaged requests in flight (queued or executing) summed over pods, on [t0, t1]."""
    if t1 <= t0:
        return 0.0
    area = 0.0
    for r in pods:
        r.sync()
        area += _area_below(r.arrivals.view, t0, t1) - _area_below(r.req_end.view, t0, t1)
    return area / (t1 - t0)


def pod_queue_ms(pods: Sequence[Replica], now: float, cfg: PromConfig, window_s: float) -> list[float | None]:
    """Per ready pod: ``delta(nv_inference_queue_duration_us[w]) / (1 + delta(success[w]))`` in ms,
    Triton's k8s-onprem ``avg_time_queue_us``; None for a pod without two scrapes."""
    out: list[float | None] = []
    for r in pods:
        r.sync()
        t = pod_scrape(r, now, cfg)
        span = min(window_s, t - max(r.ready_at, 0.0))
        if span < cfg.scrape_s - 1e-9:
            out.append(None)
            continue
        end = r.req_end.view
        i0 = int(np.searchsorted(end, t - span, side="right"))
        i1 = int(np.searchsorted(end, t, side="right"))
        ok = r.req_rejected.a[i0:i1] == 0.0
        q = float(np.sum((r.req_start.a[i0:i1] - r.arrivals.a[i0:i1])[ok]))
        out.append(q * 1000.0 / (1.0 + float(ok.sum())))
    return out


def pool_quantile_ms(pods: Sequence[Replica], now: float, cfg: PromConfig, q: float,
                     window_s: float = 60.0, retired: Sequence[Replica] = ()) -> float | None:
    """``histogram_quantile(q, sum(rate(duration_bucket[w])))``: the q-quantile (ms) of the requests
    each series counted between its first and last sample in the window, weighted by that
    series' extrapolation (as ``rate()`` scales its buckets); None without any. Exact latencies
    stand in for the buckets."""
    lats: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for r in (*pods, *retired):
        at = scrape_instants(r, now, window_s, cfg)
        if len(at) < 2:
            continue
        r.sync()
        end = r.req_end.view
        w = slice(int(np.searchsorted(end, at[0], side="right")), int(np.searchsorted(end, at[-1], side="right")))
        ok = _successes(r, w)
        if not ok.any():
            continue
        counted = _counter(r.batch_end.view, r.batch_size_cum.view, at)
        scale = extrapolated_rate(at, counted, now - window_s, now) * window_s / (counted[-1] - counted[0])
        lat = (r.req_end.a[w] - r.arrivals.a[w])[ok]
        lats.append(lat)
        weights.append(np.full(len(lat), scale))
    if not lats:
        return None
    lat, weight = np.concatenate(lats), np.concatenate(weights)
    order = np.argsort(lat, kind="stable")
    rank = np.cumsum(weight[order])
    i = min(int(np.searchsorted(rank, q * rank[-1], side="left")), len(lat) - 1)
    return float(lat[order][i]) * 1000.0
