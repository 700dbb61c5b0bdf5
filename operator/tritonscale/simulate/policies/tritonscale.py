"""The operator's autoscaler: ``tritonscale.scaling.decider.decide``, called as the operator calls it.

The decider is imported as a module and looked up at every tick (``decider.decide``),
never copied, so the simulator exercises exactly the product's code -- including any
monkeypatched constant in an experiment.

Each tick (``interval_s``, the CRD's ``intervalSeconds``, default 15 s) builds the
Observation from the Prometheus view (p95 max over pods, summed rates, mean queue
time, pending, batch statistics) and passes Replicas(current = pods incl. starting,
ready, startup_s = creation-to-ready times of pods ready since the last tick), as the
operator reads them from the Deployment's pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tritonscale.scaling import decider
from tritonscale.simulate.engine import View


@dataclass
class TritonscalePolicy:
    policy: decider.Policy
    interval_s: float = 15.0
    initial: int | None = None
    name: str = "tritonscale"
    state: decider.State = field(default_factory=decider.State)
    last: decider.Decision | None = None

    def initial_replicas(self, default: int) -> int:
        return self.initial if self.initial is not None else default

    def tick_times(self, horizon: float) -> np.ndarray:
        return np.arange(self.interval_s, horizon, self.interval_s)

    def step(self, view: View) -> tuple[int, str]:
        obs = view.observe()
        d = decider.decide(obs, decider.Replicas(current=view.current, ready=view.ready, startup_s=view.startups),
                           self.policy, self.state, view.now)
        self.state = d.state
        self.last = d
        return d.replicas, f"{d.reason}: {d.message}"
