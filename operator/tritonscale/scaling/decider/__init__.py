"""The autoscaling decision, as one pure function built from named steps.

    decide(observation, replicas, policy, state, now) -> Decision(replicas, reason, message, state)

The operator's per-object tick and the trace simulator (``tritonscale simulate``)
both call this function; neither copies it. It imports nothing from tritonscale.

The steps, in the order the Kubernetes HPA documents its own (metrics ->
recommendation -> stabilization -> rate limits -> min/max), each a small pure
function that returns its result and the reason for it:

1. ``guard``      -- source failed, no target, no series, below the floor: hold or fall back.
2. ``learn``      -- update the memory: batch cost samples, the rate history, rises of the
                     rate, and for a model that does not batch how much its traffic queues
                     against the M/D/1 model (the cold-start time is learned first, before
                     ``guard``, after ``forget_model`` drops what was learned of a model the
                     pods no longer serve).
3. ``demand``     -- arrival rate now (requests out of the queue plus the queue's growth) and
                     the backlog.
4. ``forecast``   -- the rate to plan for when a replica asked for now is ready: the current
                     rate plus its trend over the horizon, from when the data was scraped
                     (``data_age``) to one cold start and one tick after now, scaled by the share
                     of its earlier trends the rate went on to deliver (``trend_delivery``).
5. ``recommend``  -- replicas = (planned rate + backlog / horizon) / (capacity x utilisation);
                     idle traffic goes back to the floor.
6. ``breach``     -- a p95 breach with a queue behind it asks for one more replica than is
                     running (bounded: "more", not "p95/target times more").
   ``settle``     -- no scale-up while the queue drains right after replicas joined (the
                     arrival reading then mixes the drain's stretches), all replicas ready.
7. ``tolerate``   -- the dead band: no scale-down for a load within the tolerance (none for
                     a count raised on a capacity guessed from one batch size, once it is known).
   ``measure``    -- no scale-down (but to the floor when idle) before the rate's noise is
                     measured: until then the plan carries no noise margin.
   ``complete``   -- while fewer pods export Triton's series than are ready (the rates then
                     miss those pods' traffic), a scale-down keeps a replica for each missing pod.
8. ``stabilize``  -- scale-up/down look-back windows; the scale-down window defaults to the
                     learned cold start and a tick (what a removed replica takes to come back),
                     longer while the rate keeps jumping (burst memory; at long cold starts
                     from its first unforeseen jump up, or ``sudden_fall`` down).
   ``climbing``   -- no scale-down while the rate climbs out of the scale-down window's lowest
                     reading beyond its noise: a rate turning up out of a fall, before the trend
                     sees it -- until the plan reaches where the climb leads within the horizon.
9. ``limit``      -- at most maxStep replicas up or down per tick.
10. ``clamp``     -- [floor, maxReplicas]; never ask for more while pods are unschedulable or not created.
    ``drain_surge`` -- on every decision, held ones too: one more replica for each pod on a node
                     being drained, so the PodDisruptionBudget lets the drain through.

Constants (``constants.py``) were chosen with the scenario suite (``tritonscale simulate --suite``:
traffic classes x cold starts x SLOs x seeds); their comments give the reason and the
suite figure.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from tritonscale.scaling.decider import constants
from tritonscale.scaling.decider.burst_memory import (
    burst_hold,
    sudden_fall,
    surprise_cost,
    surprises_for_memory,
)
from tritonscale.scaling.decider.capacity import (
    GUESSED,
    QUEUEING_OBSERVED,
    add_batch_sample,
    bare_capacity,
    batch_capacity,
    batch_cost,
    capacity,
    capacity_known,
    guessed_cost,
    learned_cost,
    slope_known,
    undelayed_capacity,
)
from tritonscale.scaling.decider.constants import *  # noqa: F403 (read-only copies, for callers and tests)
from tritonscale.scaling.decider.model import (
    Decision,
    Demand,
    Observation,
    PendingReading,
    Policy,
    Replicas,
    SourceFailure,
    SourceStatus,
    State,
    Step,
    _clamp,
)
from tritonscale.scaling.decider.rate_model import (
    cold_start,
    data_age,
    forecast,
    horizon_rise,
    level,
    noise,
    noise_measured,
    plan_horizon,
    saturation_share,
    trend,
    trend_delivery,
)
from tritonscale.scaling.decider.signals import (
    bought,
    demand,
    forget_model,
    in_requests,
    learn,
    learn_cold_start,
    recurring,
    surprise,
)
from tritonscale.scaling.decider.steps import (
    breach,
    clamp,
    climbing,
    complete,
    drain_surge,
    guard,
    limit,
    measure,
    recommend,
    replicas_text,
    scale_down_window,
    settle,
    stabilize,
    tolerate,
)


def decide(obs: Observation, replicas: Replicas, policy: Policy, state: State, now: float) -> Decision:
    policy = in_requests(policy, obs)  # maxBatchSize in requests, as every reading counts them
    current = replicas.current
    details: dict[str, Any] = {"current": current, "ready": replicas.ready, "floor": policy.floor,
                               "max": policy.max_replicas}

    def done(step: Step, st: State, ok: bool, source: str | None = None) -> Decision:
        before = _clamp(step.replicas, policy.floor, policy.max_replicas)
        step = drain_surge(step, replicas, policy)
        n = _clamp(step.replicas, policy.floor, policy.max_replicas)
        st = replace(st, drain_surge=max(0, n - before))
        if n != step.replicas:  # a step that held or asked past the bounds: say which bound decided
            bound = f"maxReplicas={policy.max_replicas}" if n < step.replicas else f"the warm floor of {policy.floor}"
            step = replace(step, why=f"{step.why}; bounded by {bound}")
        if n != current:  # ``source``: the capacity this tick planned with (None: it planned with none)
            st = replace(st, last_scale_time=now, raised_on_guess=n > current and source == GUESSED)
        # "holding 2 replicas: ... -> 2 replicas" said the count twice (an audit): a message that opens
        # with the count it holds ends without the arrow
        said = n == current and step.why.startswith(f"holding {replicas_text(n)}")
        return Decision(n, step.reason, step.why if said else f"{step.why} -> {replicas_text(n)}", st, ok, details)

    state = learn_cold_start(forget_model(state.until(now, policy.interval_s), replicas, now, policy.window_s),
                             replicas)
    # A hold (metrics failing, no series) keeps the count without the replicas a drain added (State.drain_surge):
    # done() adds those again while the drain lasts, and they go when it ends.
    base = replace(replicas, current=max(1, current - state.drain_surge)) if state.drain_surge else replicas
    held, state, ok = guard(obs, base, policy, state)
    if held is not None:
        if held.reason in ("FallbackAfterFailures", "NoTarget"):  # a recommendation like any other, as
            # KEDA's fallback is to the HPA: through the windows and steps, so a source that fails off and on
            # cannot swing the fleet between the fallback and the need at each good tick, and a target
            # removed from a loaded service lowers it to the floor at the scale-down pace, not in one tick
            held, state = stabilize(held, state, policy, current, now, held.replicas, held.replicas)
            held = limit(held, current, policy)
        return done(held, state, ok)
    target = float(policy.target_p95_ms or 0.0)
    d = demand(obs, state, now)
    state = learn(state, obs, replicas, policy, now, d.rate, d.growth)
    now_level = level(d, state, now, policy.window_s)  # the plan's and ``bare``'s: later steps leave the rates alone
    age = data_age(obs, now, policy)
    sigma = noise(state.rates, now)  # the rate's noise, read by four steps below: once per tick
    share = saturation_share(state, now, plan_horizon(state, policy, age), now_level, sigma)
    cap, source = capacity(state, policy, target, obs, share, fleet=current)
    planned, horizon = forecast(d, state, policy, now, age, sigma, now_level)
    details.update(rps=obs.rps, rate=d.rate, planned_rps=planned, horizon_s=horizon, backlog=d.backlog,
                   p95_ms=obs.p95_ms, capacity_rps=cap)
    state = replace(state, rates=state.rates[:-1] + ((now, d.rate, bought(planned, cap)),))
    state = surprise(state, d, now, sigma, max(policy.window_s, policy.interval_s))
    state = sudden_fall(state, d, now, cap, policy.interval_s, sigma)
    demanded = recommend(d, planned, horizon, cap, source, current, policy,
                         undelayed_capacity(state, policy, target, obs, share, cap, source))
    if demanded.replicas < current and source == QUEUEING_OBSERVED:  # fewer replicas: their own capacity
        fewer = capacity(state, policy, target, obs, share, fleet=demanded.replicas)
        demanded = max(demanded, recommend(d, planned, horizon, *fewer, current, policy), key=lambda s: s.replicas)
    step = breach(demanded, obs, replicas, cap, policy, d)
    step = settle(step, d, replicas)
    step = tolerate(step, planned, cap, current, policy, revised=state.raised_on_guess and source != GUESSED)
    step = measure(step, state, now, current)
    step = complete(step, obs, replicas, state, current)
    details["recommendation"] = step.replicas
    full = bare_capacity(cap, source, state, policy)
    bare = math.ceil(now_level / full) if full else current
    step, state = stabilize(step, state, policy, current, now, max(demanded.replicas, step.replicas), bare)
    step = climbing(step, state, policy, current, now, sigma, horizon, planned)
    step = limit(step, current, policy)
    step = clamp(step, replicas, policy)
    return done(step, state, True, source)


__all__ = [
    "Decision", "Demand", "Observation", "PendingReading", "Policy", "Replicas", "SourceFailure", "SourceStatus",
    "State", "Step",
    "add_batch_sample",
    "bare_capacity", "batch_capacity", "bought", "batch_cost", "breach", "burst_hold", "capacity", "clamp",
    "capacity_known", "climbing", "complete", "guessed_cost", "learned_cost", "slope_known",
    "cold_start", "constants", "drain_surge",
    "data_age", "decide", "demand", "forecast", "forget_model", "guard", "horizon_rise", "in_requests", "learn",
    "learn_cold_start", "level",
    "limit", "measure", "noise", "noise_measured",
    "plan_horizon", "recommend", "recurring", "replicas_text", "saturation_share", "scale_down_window", "settle",
    "stabilize", "sudden_fall", "surprise", "surprise_cost", "surprises_for_memory", "tolerate", "trend",
    "trend_delivery", "undelayed_capacity",
]
