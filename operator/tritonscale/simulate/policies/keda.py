"""KEDA ScaledObject with a Prometheus trigger on request rate (metricType AverageValue).

Query: ``sum(rate(nv_inference_request_success[1m])) + sum(rate(nv_inference_request_failure[1m]))``,
the requests that arrive, served or rejected: every policy's replicas run the operator's default
queue timeout, and the served rate alone hid the demand a saturated fleet rejects (auditF, session 84).
KEDA hands the value to an HPA as an External metric with an average-value target (``threshold``),
so the arithmetic is the HPA's (``GetExternalPerPodMetricReplicas``): ratio = rps / (threshold x
current); within +-0.1 hold, else desired = ceil(rps / threshold); then the HPA's default 300 s
scale-down stabilisation and scale-up rate limit. It acts at the HPA's 15 s sync: KEDA's metrics
server evaluates the trigger on each of the HPA's reads (``pollingInterval``, 30 s, paces only
KEDA's own operator, its activation from and to zero; kedacore/keda#2282).

Threshold: the baselines' shared headroom (default 80%) of the measured per-replica
capacity at the SLO: 0.8 x 290 ~= 232 rps with the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from tritonscale.simulate.engine import View
from tritonscale.simulate.policies.hpa import SCALE_DOWN_STABILIZATION_S, TOLERANCE, limit_rate, stabilize
from tritonscale.simulate.policies.periodic import Periodic

SYNC_PERIOD_S = 15.0  # the HPA's --horizontal-pod-autoscaler-sync-period


def average_value_replicas(value: float, current: int, threshold: float,
                           tolerance: float = TOLERANCE) -> int:
    ratio = value / (threshold * max(current, 1))
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(value / threshold)


@dataclass
class KedaPolicy(Periodic):
    period_s: ClassVar[float] = SYNC_PERIOD_S
    threshold_rps: float
    name: str = "keda"
    recs: tuple[tuple[float, int], ...] = field(default=())

    def step(self, view: View) -> tuple[int, str]:
        rps = view.request_rate()
        if rps is None:  # no series: the HPA keeps the current scale
            return view.current, "NoMetrics"
        rec = average_value_replicas(rps, view.current, self.threshold_rps)
        rec = self.clamp(rec)
        out, self.recs = stabilize(self.recs, view.now, view.current, rec, SCALE_DOWN_STABILIZATION_S)
        out = limit_rate(out, view.current, self.min_replicas, self.max_replicas)
        return out, f"{rps:.0f} rps vs {self.threshold_rps:.0f} per replica, rec {rec}"
