"""Triton's documented autoscaling recipe: an HPA on average queue time per request.

Triton's ``deploy/k8s-onprem`` chart exposes, through the Prometheus adapter, the
Pods metric ``avg_time_queue_us`` =
``delta(nv_inference_queue_duration_us[30s]) / (1 + delta(nv_inference_request_success[30s]))``
per pod, and scales the Deployment with an HPA on it (target type AverageValue). The
HPA arithmetic is ``calcPlainMetricReplicas`` (pods without the metric yet count as
0 when scaling up), then the default behaviour: 300 s scale-down stabilisation, scale-up
by max(4 pods, 100%) per 15 s sync.

Target: the recipe's default (``averageValue: 50``, i.e. 50 us) is below the batcher's
own queue delay (2,000 us here), so it would pin any batching model at maxReplicas.
As for the other baselines, the target is instead the mean queue time per request
measured on one replica at the shared headroom (80% of the capacity at the SLO).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tritonscale.simulate.engine import View
from tritonscale.simulate.policies.hpa import SYNC_PERIOD_S, pods_metric_step
from tritonscale.simulate.policies.periodic import Periodic

METRIC_WINDOW_S = 30.0


@dataclass
class TritonQueuePolicy(Periodic):
    period_s: ClassVar[float] = SYNC_PERIOD_S
    target_queue_ms: float
    name: str = "triton-queue"
    recs: tuple[tuple[float, int], ...] = field(default=())

    def step(self, view: View) -> tuple[int, str]:
        out, why, rec, mean, self.recs = pods_metric_step(
            list(view.queue_ms(METRIC_WINDOW_S)), view, self.target_queue_ms, self.min_replicas, self.max_replicas,
            self.recs)
        return out, f"{why}: queue {mean:.1f} ms/request vs {self.target_queue_ms:.1f}, rec {rec}"
