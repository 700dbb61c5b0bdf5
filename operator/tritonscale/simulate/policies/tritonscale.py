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

from dataclasses import dataclass, field, replace

import numpy as np

from tritonscale.render.kubernetes_objects import MAX_SURGE, rollout_surge
from tritonscale.scaling import batching_status as bs
from tritonscale.scaling import batching_tuner as bt
from tritonscale.scaling import decider
from tritonscale.simulate.engine import View
from tritonscale.simulate.replica import BatcherConfig


def batcher_settings(b: BatcherConfig) -> bt.Settings:
    """A simulated batcher's queue delay and preferred sizes, as the tuner and the decider's policy take them."""
    return bt.Settings(round(b.max_queue_delay_ms * 1000), tuple(b.preferred))


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

    # --batching-tuner: the batcher settings in force (None: the cluster's, never changed) and the
    # tuner's bounds and memory; the engine applies ``batcher`` to the replicas after each step
    batcher: BatcherConfig | None = None
    bounds: bt.Bounds | None = None
    tuner_state: bt.TunerState = field(default_factory=bt.TunerState)
    tunings: list[tuple[float, str, str]] = field(default_factory=list)  # (time, reason, settings) of changes
    reload_until: float = 0.0  # the rolling reload of the last change ends then (a rollout: no change)
    reload_pause_s: float = 0.0
    tuner_verdict: str = ""  # the tuner's reason and message at the last step (--decisions' batching column)
    rollout_surge: str = MAX_SURGE  # the Deployment's maxSurge for the last change, as the reconciler renders it

    def step(self, view: View) -> tuple[int, str]:
        obs = view.observe()
        # old and new batcher settings side by side: a rollout, or a rolling reload (--batching-apply reload)
        mixing = view.rolling or view.now < self.reload_until
        replicas = decider.Replicas(current=view.current, ready=view.ready, startup_s=view.startups, rolling_out=mixing)
        before = self.state
        d = decider.decide(obs, replicas, self.policy, before, view.now)
        if self.batcher is not None and self.bounds is not None and self._tune(view, obs, d, mixing):
            # as the operator's tick does (``tick._decide_again``): the decision with the settings now in force
            d = decider.decide(obs, replicas, self.policy, before, view.now)
        self.state = d.state
        self.last = d
        return d.replicas, f"{d.reason}: {d.message}"

    def _tune(self, view: View, obs: decider.Observation, d: decider.Decision, mixing: bool) -> bool:
        """The operator's tuner call (``batching_status.tune_tick`` from the tick), with the same
        observation and the same policy update; the rollout flags come from the simulated fleet. True when
        it changed the settings."""
        assert self.batcher is not None and self.bounds is not None
        now = batcher_settings(self.batcher)
        tobs = bs.tuner_observation(obs, d, self.policy, min(view.ready, view.current),
                                    rollout=mixing or view.ready < view.current,
                                    updating=view.rolling, starting=not mixing)
        out = bt.tune(tobs, now, self.bounds, self.tuner_state, view.now)
        self.tuner_state = out.state
        self.tuner_verdict = f"{out.reason}: {out.message}"
        if out.changed:
            s = out.settings
            self.batcher = replace(self.batcher, max_queue_delay_ms=s.delay_ms, preferred=s.preferred)
            self.policy = bs.with_settings(self.policy, s)
            self.tunings.append((view.now, out.reason, s.describe()))
            self.reload_until = view.now + view.current * self.reload_pause_s
            self.rollout_surge = rollout_surge(out.state.at_once)
        return out.changed
