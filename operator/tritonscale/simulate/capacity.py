"""Per-replica capacity at the SLO, measured the way an operator would load-test one pod.

One replica, Poisson arrivals, bisection on the rate until the p95 latency equals
the target. With the defaults (20 ms + 2 ms/item, batches up to 16, 150 ms target)
that is ~285 rps: 93% of the 308 rps a saturated replica serves, because the queue
only explodes close to saturation.

The baselines are configured from this one measurement, at the same headroom
(default 80% of capacity), each in its own unit: KEDA's rps threshold, HPA's GPU
duty-cycle target, Knative's concurrency target (Little's law: rate x mean
latency, measured at that load) and the mean queue time per request for Triton's
queue-time HPA.

Common random numbers: every rate reuses the same unit-rate gaps, scaled, so the
p95 is monotone in the rate and the bisection converges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tritonscale.scaling.decider.batcher_model import bisect_up, robust_top
from tritonscale.simulate.replica import BatcherConfig, Replica

CALIBRATION_REQUESTS = 60_000  # ~3.5 minutes at 285 rps: a 95th percentile to ~1%
WARMUP_SHARE = 0.05  # drop the first 5% (the queue starts empty)


@dataclass(frozen=True)
class Calibration:
    capacity_rps: float  # Poisson rate at which one replica's p95 equals the SLO
    max_rps: float  # saturated throughput, max_batch / (a + b * max_batch)
    headroom: float  # share of capacity the baselines aim for
    busy_at_headroom: float  # GPU duty cycle at headroom x capacity
    concurrency_at_headroom: float  # mean requests in flight at headroom x capacity
    p95_at_headroom_ms: float
    queue_ms_at_headroom: float = 0.0  # mean queue time per request at headroom x capacity

    @property
    def target_rps(self) -> float:
        return self.headroom * self.capacity_rps


@dataclass(frozen=True)
class _Run:
    p95_ms: float
    mean_latency_s: float
    busy: float
    mean_queue_s: float


def _run_one(cfg: BatcherConfig, rate: float, gaps: np.ndarray) -> _Run:
    t = np.cumsum(gaps) / rate
    r = Replica(0, 0.0, 0.0, cfg)
    r.add(t)
    r.advance(math.inf, math.inf)
    r.sync()
    skip = int(len(t) * WARMUP_SHARE)
    lat = r.latencies()[skip:]
    queue = (r.req_start.view - r.arrivals.view)[skip:]
    t0, t1 = float(t[skip]), float(t[-1])
    with np.errstate(invalid="ignore"):  # rejected requests are inf: the quantile is inf, with no warning
        p95 = float(np.quantile(lat, 0.95))
    return _Run(p95 * 1000.0, float(lat.mean()),
                r.busy_seconds(t0, t1) / (t1 - t0), float(queue.mean()))


def capacity_at_slo(cfg: BatcherConfig, slo_ms: float, headroom: float = 0.8, seed: int = 0,
                    requests: int = CALIBRATION_REQUESTS) -> Calibration:
    if not 0 < headroom <= 1:
        raise ValueError("headroom must be in (0, 1]")
    gaps = np.random.default_rng(seed).exponential(1.0, requests)
    top = cfg.max_throughput_rps
    lo, hi = 0.0, top
    if _run_one(cfg, top * 1e-3, gaps).p95_ms > slo_ms:
        raise ValueError(f"the SLO of {slo_ms:g} ms is below what one replica serves even when idle "
                         f"(a batch of 1 takes {cfg.service_s(1) * 1000:g} ms plus up to "
                         f"{cfg.max_queue_delay_ms:g} ms queue delay)")
    for _ in range(30):  # 308 rps / 2**30: far finer than the Poisson noise
        mid = (lo + hi) / 2
        if _run_one(cfg, mid, gaps).p95_ms <= slo_ms:
            lo = mid
        else:
            hi = mid
    cap = lo
    at = _run_one(cfg, headroom * cap, gaps)
    return Calibration(cap, top, headroom, at.busy, headroom * cap * at.mean_latency_s, at.p95_ms,
                       at.mean_queue_s * 1000.0)


def robust_capacity_at_slo(cfg: BatcherConfig, slo_ms: float, share: float, steps: int = 64, seed: int = 0,
                           requests: int = CALIBRATION_REQUESTS) -> float:
    """The largest Poisson rate at which one replica's p95 is within ``slo_ms`` and stays within it at
    every rate down to ``share`` of it (0 if none): ``steps`` rates evenly up to saturation, then a
    bisection above the last that holds. For a queue delay longer than the batch time, whose p95 is
    not monotone in the rate (light traffic waits out the delay, heavier traffic fills batches
    before it), where ``capacity_at_slo``'s bisection assumes it is; the decider's batcher model asks
    the same of its sample (``batcher_model.ROBUST_SHARE``), so the two are compared like for like."""
    gaps = np.random.default_rng(seed).exponential(1.0, requests)
    top = cfg.max_throughput_rps
    rates = [top * (i + 1) / steps for i in range(steps)]
    i = robust_top(rates, lambda j: _run_one(cfg, rates[j], gaps).p95_ms <= slo_ms, share)
    if i is None:
        return 0.0
    if i + 1 == steps:
        return rates[i]
    return bisect_up(rates[i], rates[i + 1], lambda r: _run_one(cfg, r, gaps).p95_ms <= slo_ms)  # to top/steps/4096
