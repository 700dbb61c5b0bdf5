"""Knative Pod Autoscaler (``pkg/autoscaler/scaling/autoscaler.go``) on concurrency.

Every 2 s tick, from the time-averaged requests in flight over the stable (60 s)
and panic (6 s = 10% of stable) windows:

* desired stable/panic pods = ceil(observed / target), each clamped to
  [floor(ready / 2), ceil(1000 x ready)] (max scale-down rate 2, max scale-up rate 1000);
* panic starts when panic pods / ready >= 2.0 (200%); while panicking the count is
  max(stable, panic, highest so far) -- it never drops; panic ends a stable window
  (60 s) after the last over-threshold tick;
* otherwise the stable count wins; scale-down delay 0; min scale 1.

Target concurrency per pod: Little's law at the baselines' shared headroom --
rate x mean latency measured at 80% of the per-replica capacity (~14 requests
in flight with the defaults). It plays the role of containerConcurrency x
target-utilisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from tritonscale.simulate.engine import View
from tritonscale.simulate.policies.periodic import Periodic

TICK_S = 2.0
STABLE_WINDOW_S = 60.0
PANIC_WINDOW_S = 6.0
PANIC_THRESHOLD = 2.0
MAX_SCALE_UP_RATE = 1000.0
MAX_SCALE_DOWN_RATE = 2.0


@dataclass(frozen=True)
class KpaState:
    panic_since: float | None = None  # time of the last over-threshold tick while panicking
    max_panic_pods: int = 0


def kpa_scale(stable: float, panic: float, ready: int, target: float, state: KpaState,
              now: float) -> tuple[int, str, KpaState]:
    ready = max(1, ready)
    max_up = math.ceil(MAX_SCALE_UP_RATE * ready)
    max_down = math.floor(ready / MAX_SCALE_DOWN_RATE)
    dspc = min(max(math.ceil(stable / target), max_down), max_up)
    dppc = min(max(math.ceil(panic / target), max_down), max_up)
    over = dppc / ready >= PANIC_THRESHOLD
    if over:
        state = KpaState(now, state.max_panic_pods)  # enter, or extend, panic
    elif state.panic_since is not None and now - state.panic_since > STABLE_WINDOW_S:
        state = KpaState()  # the surge has made it into the stable window
    if state.panic_since is not None:
        n = max(dspc, dppc, state.max_panic_pods)  # only increases while panicking
        state = KpaState(state.panic_since, n)
        return n, f"Panic: {panic:.1f} in flight (6 s) / {target:.1f} -> {dppc}, holding {n}", state
    return dspc, f"Stable: {stable:.1f} in flight (60 s) / {target:.1f} -> {dspc}", state


@dataclass
class KpaPolicy(Periodic):
    period_s: ClassVar[float] = TICK_S
    target_concurrency: float
    name: str = "kpa"
    state: KpaState = KpaState()

    def step(self, view: View) -> tuple[int, str]:
        stable = view.concurrency(STABLE_WINDOW_S)
        panic = view.concurrency(PANIC_WINDOW_S)
        n, why, self.state = kpa_scale(stable, panic, view.ready, self.target_concurrency, self.state, view.now)
        return self.clamp(n), why
