"""Kubernetes HPA (autoscaling/v2) on a utilisation target, as the controller computes it.

Signal: GPU duty cycle per pod (share of wall time executing a batch; DCGM's
``DCGM_FI_DEV_GPU_UTIL``), averaged over the Prometheus window, as a Pods metric.
Algorithm (``replica_calculator.go`` ``calcPlainMetricReplicas`` + ``horizontal.go``):

* ratio = mean utilisation of pods with metrics / target; within +-tolerance (0.1)
  nothing changes; otherwise desired = ceil(ratio x pods with metrics);
* pods without metrics yet (starting) count as 0% when scaling up and as exactly
  on target when scaling down; if that flips the direction, hold;
* stabilisation: scale-down takes the highest recommendation of the last 300 s,
  scale-up the lowest of the last 0 s;
* rate limits (default behaviour): up by max(4 pods, 100%) per 15 s sync, down by
  up to 100%; then clamp to [min, max].

Caveat, measured: with dynamic batching the duty cycle is ~100% from a third of
capacity up (at 100 rps one replica is busy 96% of the time: batches just get
larger), so any target below 100% keeps asking for more replicas. That is the
known weakness of GPU utilisation as a scaling signal for batched inference, and
the reason this baseline tends to sit at maxReplicas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from tritonscale.simulate.engine import View
from tritonscale.simulate.policies.periodic import Periodic

SYNC_PERIOD_S = 15.0  # --horizontal-pod-autoscaler-sync-period
TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
SCALE_DOWN_STABILIZATION_S = 300.0  # behavior.scaleDown.stabilizationWindowSeconds default
SCALE_UP_PODS = 4  # behavior.scaleUp policies default: 4 pods or 100% per 15 s, whichever is more


def plain_metric_replicas(usages: Sequence[float | None], current: int, target: float,
                          tolerance: float = TOLERANCE) -> tuple[int, str]:
    """HPA's recommendation from per-pod usages (None: pod has no metrics yet)."""
    have = [u for u in usages if u is not None]
    missing = current - len(have)
    if not have:
        return current, "NoMetrics"
    ratio = sum(have) / (len(have) * target)
    if missing <= 0:
        if abs(1.0 - ratio) <= tolerance:
            return current, "WithinTolerance"
        return math.ceil(ratio * len(have)), "Ratio"
    fill = target if ratio < 1.0 else 0.0  # missing pods: on target for scale-down, idle for scale-up
    new_ratio = (sum(have) + fill * missing) / ((len(have) + missing) * target)
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current, "HoldForMissingPods"
    n = math.ceil(new_ratio * (len(have) + missing))
    if (new_ratio < 1.0 and n > current) or (new_ratio > 1.0 and n < current):
        return current, "HoldForMissingPods"
    return n, "Ratio"


def stabilize(recs: tuple[tuple[float, int], ...], now: float, current: int, rec: int,
              down_window_s: float, up_window_s: float = 0.0) -> tuple[int, tuple[tuple[float, int], ...]]:
    """HPA's stabilizeRecommendationWithBehaviors; returns (replicas, kept history)."""
    keep = max(down_window_s, up_window_s)
    recs = tuple((t, r) for t, r in recs if now - t < keep) + ((now, rec),)
    up = min([r for t, r in recs if now - t <= up_window_s] or [rec])
    down = max(r for t, r in recs if now - t < down_window_s or t == now)
    out = current
    if out < up:
        out = up
    if out > down:
        out = down
    return out, recs


def limit_rate(desired: int, current: int, lo: int, hi: int) -> int:
    up_limit = max(current + SCALE_UP_PODS, 2 * current)
    return max(lo, min(hi, min(desired, up_limit)))


def pods_metric_step(values: list[float | None], view: View, target: float, lo: int, hi: int,
                     recs: tuple[tuple[float, int], ...]) -> tuple[int, str, int, float, tuple[tuple[float, int], ...]]:
    """One HPA sync on a Pods metric (None: a pod without the metric yet): recommendation,
    clamp, stabilisation, rate limit. Returns (replicas, reason, recommendation, mean value,
    kept history) -- shared by every HPA-based baseline, whatever its metric."""
    values = values + [None] * (view.current - len(values))  # starting pods: no metrics
    rec, why = plain_metric_replicas(values, view.current, target)
    rec = max(lo, min(hi, rec))
    out, recs = stabilize(recs, view.now, view.current, rec, SCALE_DOWN_STABILIZATION_S)
    out = limit_rate(out, view.current, lo, hi)
    have = [v for v in values if v is not None]
    return out, why, rec, (sum(have) / len(have) if have else float("nan")), recs


@dataclass
class HpaPolicy(Periodic):
    period_s: ClassVar[float] = SYNC_PERIOD_S
    target_utilisation: float = 0.7
    name: str = "hpa"
    recs: tuple[tuple[float, int], ...] = field(default=())

    def step(self, view: View) -> tuple[int, str]:
        out, why, rec, mean, self.recs = pods_metric_step(
            list(view.utilisation()), view, self.target_utilisation, self.min_replicas, self.max_replicas, self.recs)
        return out, f"{why}: utilisation {mean:.0%} vs {self.target_utilisation:.0%}, rec {rec}"
