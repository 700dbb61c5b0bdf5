"""The SLO-ratio policy of llm-d's KEDA guide ("SLO-Aware Autoscaling with KEDA -- the
control law", llm-d docs/architecture/autoscaling/slo-aware-keda.md).

1. Signal, every 15 s: ``s_raw = p90 / SLO`` from the pool's merged latency histogram
   over 1 minute (NaN / no traffic -> 0), clamped at C = 2 and averaged over 45 s.
2. Desired replicas, with n provisioned, r ready and the in-flight credit
   c = r/n (when 0 < r < n, else 1):

   * s > 0.55: d = n + ceil(n * (s*c/0.55 - 1))  (scale up, credited);
   * s < 0.40: d = n - floor(n * (1 - s/0.40))  (scale down, uncredited);
   * otherwise d = n.
3. The KEDA-generated HPA's behaviour from the guide: scale-up by max(100%, 4 pods)
   per 60 s with a 30 s stabilisation window (min over the window); scale-down by 1
   pod per 120 s with a 180 s window (max over the window).

The guide's signal is P90 of TTFT/TPOT for LLMs; for a Triton model the one latency is
the request latency, so s = p90(request latency) / target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from tritonscale.simulate.engine import View
from tritonscale.simulate.policies.periodic import Periodic

TICK_S = 15.0
CLAMP = 2.0
SMOOTH_S = 45.0
UP_THRESHOLD = 0.55
DOWN_THRESHOLD = 0.40
UP_WINDOW_S = 30.0
UP_PERIOD_S = 60.0
DOWN_WINDOW_S = 180.0
DOWN_PERIOD_S = 120.0


def desired(s: float, n: int, r: int) -> int:
    """The guide's formula (step 2)."""
    if s > UP_THRESHOLD:
        c = r / n if 0 < r < n else 1.0
        return n + math.ceil(n * (s * c / UP_THRESHOLD - 1.0))
    if s < DOWN_THRESHOLD:
        return n - math.floor(n * (1.0 - s / DOWN_THRESHOLD))
    return n


@dataclass
class SloRatioPolicy(Periodic):
    period_s: ClassVar[float] = TICK_S
    slo_ms: float
    name: str = "slo-ratio"
    samples: list[tuple[float, float]] = field(default_factory=list)  # (t, clamped s_raw)
    recs: list[tuple[float, int]] = field(default_factory=list)  # (t, d)
    sizes: list[tuple[float, int]] = field(default_factory=list)  # (t, replicas after the tick)
    last_down: float = -math.inf

    def step(self, view: View) -> tuple[int, str]:
        now, n = view.now, view.current
        p90 = view.pool_quantile_ms(0.9, 60.0)
        raw = 0.0 if p90 is None else min(p90 / self.slo_ms, CLAMP)
        self.samples = [(t, v) for t, v in self.samples if now - t < SMOOTH_S] + [(now, raw)]
        s = sum(v for _, v in self.samples) / len(self.samples)
        d = self.clamp(desired(s, n, view.ready))
        self.recs = [(t, r) for t, r in self.recs if now - t < DOWN_WINDOW_S] + [(now, d)]
        out = n
        up = min(r for t, r in self.recs if now - t < UP_WINDOW_S)
        down = max(r for t, r in self.recs if now - t < DOWN_WINDOW_S)
        if up > n:
            base = min((k for t, k in self.sizes if now - t < UP_PERIOD_S), default=n)
            out = min(up, max(2 * base, base + 4))
            out = max(out, n)
        elif down < n and now - self.last_down >= DOWN_PERIOD_S:
            out = n - 1
            self.last_down = now
        out = self.clamp(out)
        self.sizes = [(t, k) for t, k in self.sizes if now - t < UP_PERIOD_S] + [(now, out)]
        return out, f"s={s:.2f} (p90 {p90 if p90 is not None else float('nan'):.0f} ms), d={d}"
