"""What Prometheus would show the autoscalers, computed from the simulated replicas.

This mirrors the operator's queries (``scaling`` metric source) on the default
15 s scrape interval and 60 s window:

* p95: each Triton pod exports ``nv_inference_request_summary_us{quantile="0.95"}``,
  a summary over the last 60 s (``summary_s``) of *completed* requests; the operator takes
  ``max by`` over pods. A pod that completed nothing reports NaN, which ``max``
  skips; all-NaN gives ``p95_ms=None``.
* rps: ``sum(rate(nv_inference_request_success[60s]))`` -- completions per second
  over the window. A pod younger than the window contributes its completions over
  its own lifetime; a pod with fewer than two scrapes (< 15 s old) has no rate yet.
* queue_ms: ``rate(queue_duration_us) / rate(success)`` -- mean queue time of the
  requests completed in the window.
* pending: ``sum(nv_inference_pending_request_count)`` at the scrape.
* failed_rps: ``sum(rate(nv_inference_request_failure[60s]))`` -- requests the queue
  policy rejected (they never enter the latency summary, rps or queue time).
* recent_rps: ``sum(irate(success[60s]) + irate(failure[60s]))`` -- requests out of the
  queue between the last two scrapes, per second: the fastest rate Prometheus has.
* recent_served_rps: ``sum(irate(success[60s]))`` -- the same, served requests only.

Values are those of the last scrape at or before ``now`` (the scrape grid starts at
t = 0). Only ready pods are scraped: a starting pod's Triton has no series yet and a
removed pod's series go stale -- at once, as the operator's ``irate`` queries read them
(``prometheus_source.live_irate``); Prometheus's ``rate()`` would still count what a gone
pod served within the window.

Batch statistics, for a decider that wants them: ``batch_size`` =
``irate(nv_inference_count) / irate(nv_inference_exec_count)`` (requests per model
execution) and ``batch_ms`` = ``irate(nv_inference_compute_infer_duration_us) /
irate(nv_inference_request_success)`` (Triton charges each request the whole batch's
compute time, so this is the request-weighted batch duration), between the last two scrapes. They are passed
only if ``Observation`` declares fields of those names.

HPA's utilisation (GPU duty cycle: share of wall time the instance executes a
batch) and Knative's concurrency (time-averaged in-flight requests, which the
queue-proxy reports every second) are computed the same way from the same pods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tritonscale.scaling.decider import Observation
from tritonscale.simulate.replica import Replica


@dataclass(frozen=True)
class PromConfig:
    scrape_s: float = 15.0
    window_s: float = 60.0  # rate() range (the CRD's windowSeconds)
    summary_s: float = 60.0  # age of Triton's latency summary (fixed in Triton: 60 s)
    quantile: float = 0.95

    def __post_init__(self) -> None:
        if self.scrape_s <= 0 or self.window_s <= 0 or self.summary_s <= 0:
            raise ValueError("scrape interval and windows must be > 0 s")


_OBS_FIELDS = {f.name for f in fields(Observation)}


def last_scrape(now: float, scrape_s: float) -> float:
    # 1e-9: a tick at exactly 45.0 s sees the 45 s scrape despite float rounding
    return math.floor(now / scrape_s + 1e-9) * scrape_s


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


def observe(pods: Sequence[Replica], now: float, cfg: PromConfig) -> Observation:
    """The decider's Observation for ``now`` from the ready pods."""
    t = last_scrape(now, cfg.scrape_s)
    p95s: list[float] = []
    rps = 0.0
    failed = 0.0
    recent = 0.0
    recent_served = 0.0
    recent_series = 0
    queue_s = 0.0
    served = 0
    pending = 0
    series = 0
    for r in pods:
        r.sync()
        pending += r.pending_at(t)
        w = _window(r, t - cfg.summary_s, t)
        if w.stop > w.start:
            ok = _successes(r, w)
            if ok.any():
                lat = (r.req_end.a[w] - r.arrivals.a[w])[ok]
                p95s.append(float(np.quantile(lat, cfg.quantile)) * 1000.0)
        span = _span(r, t, cfg)
        if span > 0:
            series += 1
            k = int(np.searchsorted(r.req_end.view, t - span, side="right"))
            ok = r.req_rejected.a[k:w.stop] == 0.0
            cnt = int(ok.sum())
            rps += cnt / span
            failed += (w.stop - k - cnt) / span
            queue_s += float(np.sum((r.req_start.a[k:w.stop] - r.arrivals.a[k:w.stop])[ok]))
            served += cnt
            # irate(): the last two scrapes of success + failure
            j = int(np.searchsorted(r.req_end.view, t - cfg.scrape_s, side="right"))
            recent += (w.stop - j) / cfg.scrape_s
            recent_served += float(np.sum(r.req_rejected.a[j:w.stop] == 0.0)) / cfg.scrape_s
            recent_series += 1
    if not series:
        return Observation(status="no_data", message="no pod has two scrapes yet")
    extra: dict[str, Any] = {}
    if {"batch_size", "batch_ms"} & _OBS_FIELDS:
        size, ms = batch_stats(pods, now, cfg)
        extra = {k: v for k, v in (("batch_size", size), ("batch_ms", ms)) if k in _OBS_FIELDS}
    if "failed_rps" in _OBS_FIELDS:
        extra["failed_rps"] = failed
    if "recent_rps" in _OBS_FIELDS and recent_series:
        extra["recent_rps"] = recent
    if "recent_served_rps" in _OBS_FIELDS and recent_series:
        extra["recent_served_rps"] = recent_served
    return Observation(
        status="ok",
        p95_ms=max(p95s) if p95s else None,
        rps=rps,
        queue_ms=(queue_s / served * 1000.0) if served else None,
        pending=float(pending),
        **extra,
    )


def batch_stats(pods: Sequence[Replica], now: float, cfg: PromConfig) -> tuple[float | None, float | None]:
    """(requests per execution, request-weighted batch compute ms) between the last two scrapes
    (``irate``): a whole rate window mixes the batch sizes of a changing load, and Triton's
    request-weighted compute time then reads high."""
    t = last_scrape(now, cfg.scrape_s)
    execs, reqs, weighted_s = 0, 0, 0.0
    for r in pods:
        r.sync()
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
    t = last_scrape(now, cfg.scrape_s)
    out: list[float | None] = []
    for r in pods:
        span = _span(r, t, cfg)
        out.append(r.busy_seconds(t - span, t) / span if span > 0 else None)
    return out


def request_rate(pods: Sequence[Replica], now: float, cfg: PromConfig) -> float | None:
    """``sum(rate(nv_inference_request_success[window]))``; None when no pod has a rate yet."""
    t = last_scrape(now, cfg.scrape_s)
    total, series = 0.0, 0
    for r in pods:
        r.sync()
        span = _span(r, t, cfg)
        if span > 0:
            series += 1
            end = r.req_end.view
            i0 = int(np.searchsorted(end, t - span, side="right"))
            i1 = int(np.searchsorted(end, t, side="right"))
            total += float(np.sum(r.req_rejected.a[i0:i1] == 0.0)) / span  # successes only
    return total if series else None


def _area_below(x: np.ndarray, t0: float, t1: float) -> float:
    """Integral over [t0, t1] of #{x_i <= t}, for sorted x."""
    i0 = int(np.searchsorted(x, t0, side="right"))
    i1 = int(np.searchsorted(x, t1, side="right"))
    return i0 * (t1 - t0) + float(np.sum(t1 - x[i0:i1]))


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
    t = last_scrape(now, cfg.scrape_s)
    out: list[float | None] = []
    for r in pods:
        r.sync()
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
                     window_s: float = 60.0) -> float | None:
    """``histogram_quantile(q, sum(rate(duration_bucket[w])))`` over all ready pods: the q-quantile
    (ms) of the requests completed in the last ``window_s``; None without any."""
    t = last_scrape(now, cfg.scrape_s)
    lats = []
    for r in pods:
        r.sync()
        w = _window(r, t - window_s, t)
        if w.stop > w.start:
            ok = _successes(r, w)
            lats.append((r.req_end.a[w] - r.arrivals.a[w])[ok])
    lat = np.concatenate(lats) if lats else np.empty(0)
    return float(np.quantile(lat, q)) * 1000.0 if len(lat) else None
