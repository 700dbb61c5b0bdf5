"""The decision steps after the forecast: guard, recommend, breach, settle, tolerate, measure, complete, stabilize,
climbing, limit, clamp, and drain_surge on every decision (held ones too)."""

from __future__ import annotations

import math
from dataclasses import replace

from tritonscale.scaling.decider import constants as C
from tritonscale.scaling.decider.burst_memory import burst_hold
from tritonscale.scaling.decider.model import Demand, Observation, Policy, Replicas, State, Step, _clamp
from tritonscale.scaling.decider.rate_model import (
    noise_measured,
    noise_now,
    plan_horizon,
    trend_delivery,
)
from tritonscale.scaling.decider.signals import joined, replicas_for


def guard(obs: Observation, replicas: Replicas, policy: Policy, state: State) -> tuple[Step | None, State, bool]:
    """Hold (or fall back) when there is nothing to decide on. Returns (step or None, state, metrics ok)."""
    floor, current = policy.floor, replicas.current
    failed = obs.status == "failed"
    # Counted up to the threshold, no further: a count that grew at every tick of an outage changed the
    # memory, and so every object's status, at every tick (200 objects: a status write each per tick
    # with Prometheus down; an exploration at scale, session 55). Past the threshold it says nothing new.
    st = replace(state, failures=min(state.failures + 1, max(1, policy.failure_threshold)) if failed else 0)
    if policy.target_p95_ms is None:  # nothing to scale on: the metrics, failing or not, change nothing
        if current < floor:
            return Step(floor, "BelowFloor", f"raising to the warm floor of {replicas_text(floor)}"), st, not failed
        # Held at the floor, as the field's description says: a lowered minReplicas then takes effect
        # (it held any count up to maxReplicas, so a fleet stayed at 4 after minReplicas went 4 -> 2).
        return Step(floor, "NoTarget", f"no targetP95Milliseconds: holding the warm floor of "
                                       f"{replicas_text(floor)}"), st, not failed
    if failed:
        if policy.fallback_replicas is not None and st.failures >= policy.failure_threshold:
            n = _clamp(policy.fallback_replicas, floor, policy.max_replicas)
            running = (f"running fallbackReplicas={n}" if n == policy.fallback_replicas else
                       f"running {replicas_text(n)} (fallbackReplicas={policy.fallback_replicas}, within the warm "
                       f"floor {floor} and maxReplicas {policy.max_replicas})")
            return Step(n, "FallbackAfterFailures",
                        f"metrics failed {policy.failure_threshold} or more times in a row (failureThreshold); "
                        f"{running}: {obs.message}"), st, False
        n = _clamp(current, floor, policy.max_replicas)  # the bounds still hold: never below the warm floor
        what = (f"holding {replicas_text(n)}" if n == current else f"raising to the warm floor of {replicas_text(n)}"
                if n > current else f"lowering to maxReplicas={n}")
        return Step(n, "MetricsUnavailable", f"{what}: metric source failed ({obs.message})"), st, False
    if current < floor:
        return Step(floor, "BelowFloor", f"raising to the warm floor of {replicas_text(floor)}"), st, True
    if obs.status == "no_data" or obs.rps is None:
        n = min(current, policy.max_replicas)  # the bounds still hold (the floor: BelowFloor, above)
        what = f"holding {replicas_text(n)}" if n == current else f"lowering to maxReplicas={n}"
        return Step(n, "NoData", f"{what}: no usable series for this service "
                                 f"({obs.message or 'no data'})"), st, False
    return None, st, True


def ms_text(v: float) -> str:
    """A latency for messages: whole milliseconds, or two significant digits below 10 ms (a target
    of 0.5 ms read "target 0 ms")."""
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def replicas_text(n: int) -> str:
    """``1 replica``, ``3 replicas``: the decision messages' (and the operator log's) wording."""
    return f"{n} replica{'' if n == 1 else 's'}"


def recommend(d: Demand, planned: float, horizon: float, cap: float | None, cap_source: str, current: int,
              policy: Policy, undelayed: float | None = None) -> Step:
    """Replicas for the planned rate plus draining the backlog within the horizon (replicas
    asked for now arrive after it, so nothing drains the backlog sooner), the drain bounded
    by C.BACKLOG_MAX_EXTRA. ``undelayed``: what a replica would serve without the queue delay in
    force, where that delay holds it well below (``capacity.undelayed_capacity``): the message says so,
    and which field to change."""
    if d.rate == 0.0 and d.window_rate == 0.0 and d.backlog == 0.0:
        return Step(policy.floor, "Idle", "no requests: back to the warm floor")
    if not cap:
        return Step(current, "LearningCapacity",
                    f"{d.rate:.1f} rps; no per-replica capacity yet ({cap_source}): holding, latency decides")
    need_rps = planned + min(d.backlog / horizon, C.BACKLOG_MAX_EXTRA * planned)
    n = replicas_for(need_rps, cap)
    reason = "LoadIncreased" if n > current else ("LoadDecreased" if n < current else "Steady")
    why = (f"{d.rate:.1f} rps now, planning {planned:.1f} rps"
           + (f" + {d.backlog:.0f} queued" if d.backlog >= 1 else "")
           + f" at ~{cap:.1f} rps per replica ({cap_source})")
    if undelayed:
        why += (f" -- the {ms_text(policy.queue_delay_ms)} ms queue delay holds it there, ~{undelayed:.1f} without it:"
                " lower batching.maxQueueDelayMicroseconds, or let batching.autoTune choose it")
    return Step(n, reason, why)


def breach(step: Step, obs: Observation, replicas: Replicas, cap: float | None, policy: Policy,
           d: Demand | None = None) -> Step:
    """A p95 breach with a queue behind it that the ready replicas are not draining: at least one
    more replica than is running, unless replicas still starting, or ready only since the last
    tick, will add capacity anyway."""
    target = float(policy.target_p95_ms or 0.0)
    p95 = obs.p95_ms
    if p95 is None or p95 <= target * (1.0 + policy.tolerance):
        return step
    ready = min(replicas.ready, replicas.current)
    pending = obs.pending or 0.0
    # The queue per ready replica, or the most-queued replica's if more: a Service balances gRPC
    # clients by connection, and the queue then sits on the few pods that drew the most of them --
    # spread over the fleet it read as no pressure at all, breach after breach.
    per_replica = max(pending / max(ready, 1), obs.pending_max or 0.0)
    queue_work = per_replica / cap * 1000.0 if cap else math.inf  # ms of work queued on a replica
    # Without a queue the replicas are keeping up: either the p95 summary still remembers a backlog
    # that is gone (it lags a minute), or the model's own latency misses the target -- neither is
    # helped by more replicas. With no capacity estimate yet, latency is all there is to go by.
    # A queue that shrinks while arrivals are below what the ready replicas serve drains by itself.
    pressure = queue_work >= C.QUEUE_PRESSURE_TARGETS * target
    draining = cap is not None and d is not None and d.growth < 0 and d.rate < ready * cap
    why = step.why + f"; p95 {ms_text(p95)} ms > target {ms_text(target)} ms"
    if not pressure:
        queued = ("no queue" if pending < 1 else
                  f"{pending:.0f} queued, {queue_work:.0f} ms of work "
                  + ("on the most-queued replica," if obs.pending_max is not None else "per ready replica,"))
        return Step(step.replicas, step.reason,
                    why + f" with {queued} under {C.QUEUE_PRESSURE_TARGETS:g}x the target: the breach adds no "
                          "replica to the plan (the p95 summary still remembers a backlog that is gone, or the "
                          "model's own latency is above the target)")
    if draining and ready >= replicas.current:
        return Step(step.replicas, step.reason, why + f"; the {pending:.0f} queued drain: arrivals are below "
                                                      f"what the {ready} ready replicas serve")
    if ready < replicas.current:
        if step.replicas <= replicas.current:
            return Step(replicas.current, "WaitingForWarmup",
                        why + f"; {replicas.current - ready} replica(s) still starting cover it")
        return Step(step.replicas, "LatencyAboveTarget", why)
    # Replicas that became ready since the last tick had no part in the queue's growth over it:
    # that growth is no evidence that they, too, fall behind. Wait one tick to see them serve.
    new = joined(d, ready) if d is not None else 0
    if new > 0 and step.replicas <= replicas.current:
        return Step(replicas.current, "WaitingForWarmup",
                    why + f"; {new} replica(s) became ready since the last tick: the queue grew without them")
    return Step(max(step.replicas, replicas.current + 1), "LatencyAboveTarget", why + ", queue building")


def settle(step: Step, d: Demand, replicas: Replicas) -> Step:
    """No scale-up on a tick whose backlog drains while every replica is ready and some became ready
    within the last two ticks. The arrival rate is read as requests out (``irate`` over each pod's
    last two scrapes) plus the queue's change (between the scrapes of the pending gauge): when new
    replicas drain a backlog within seconds, the two cover different stretches of the drain and
    the sum can read far above the arrivals (the sandbox's step: 93 rps read for 70 offered, two
    seconds after two replicas joined, asked for a fourth). The draining backlog is itself evidence
    that the ready replicas serve more than arrives; the next tick, with the drain behind it, reads
    the arrivals again. A drain is most of the queue gone since the last reading
    (C.SETTLE_DRAINED_SHARE): the batches forming on every busy replica make a queue that wobbles
    by a few percent from tick to tick, and that is no backlog being drained. A breach with a queue
    behind it is not held (``breach`` decides those)."""
    ready = min(replicas.ready, replicas.current)
    if step.replicas <= replicas.current or ready < replicas.current or step.reason == "LatencyAboveTarget":
        return step
    queued = d.last.pending if d.last is not None else 0.0
    if not queued or d.backlog > (1.0 - C.SETTLE_DRAINED_SHARE) * queued:
        return step  # no queue before (none to drain), or most of it still there
    if joined(d, ready, ticks=2) == 0:
        return step
    return Step(replicas.current, "QueueDraining",
                step.why + f"; replicas joined within the last two ticks and the queue drained from "
                           f"{queued:.0f} to {d.backlog:.0f}: waiting a tick for a reading "
                           "without the drain")


def tolerate(step: Step, planned: float, cap: float | None, current: int, policy: Policy,
             revised: bool = False) -> Step:
    """Hysteresis on the way down: scale down only to a count whose load stays below the plan by
    the tolerance (otherwise a rate wobbling around a boundary flips the count each tick); none
    at all while the current count's load is within the tolerance.

    ``revised``: the current count was raised on a capacity guessed from one batch size, and the
    capacity is known now (``State.raised_on_guess``). The band holds a count against the rate's
    wobble; this one was asked for by an estimate since replaced, so it is not held: the scale-down
    goes to the recommendation. (A new service's first batches are all of one size, so its first
    scale-up is often on the guess, which errs low. In the batching tuner's suite,
    ``flash/cold60s/tight/seed0`` from no delay: 504 rps at a guessed 278 rps per replica asked for
    a third replica, the known 293 then left 2 at 95% of the plan, and the band held 3 for the
    20 minutes before the crowd.) Once that count is left, the band holds again."""
    if not cap or step.replicas >= current or current <= 0 or step.reason == "Idle":
        return step
    if revised:
        return Step(step.replicas, step.reason,
                    step.why + f"; {current} were asked for on a capacity guessed from one batch size, "
                               "now known: not held by the tolerance")
    load = planned / (current * cap * C.UTILISATION)
    if load >= 1.0 - policy.tolerance:
        return Step(current, "WithinTolerance", step.why + f"; load {load:.0%} of plan is within tolerance")
    down = min(current, max(step.replicas, math.ceil(planned / (cap * C.UTILISATION * (1.0 - policy.tolerance)))))
    if down > step.replicas:
        return Step(down, step.reason if down < current else "WithinTolerance",
                    step.why + f"; {step.replicas} would run within {policy.tolerance:.0%} of full: {down}")
    return step


def measure(step: Step, state: State, now: float, current: int) -> Step:
    """No scale-down (but to Idle) before the rate's noise is measured (``rate_model.noise_measured``):
    until then the plan carries no noise margin -- it is the rate's level, a low estimate of the
    need -- so it may ask for more, never for less. A new service's first readings are its
    load starting (and, in the sandbox, a step within seconds): too few differences to tell
    noise from those shifts (NOISE_SHIFTS, SHIFT_READINGS)."""
    if step.replicas >= current or step.reason == "Idle" or noise_measured(state.rates, now):
        return step
    return Step(current, "MeasuringNoise", step.why + f"; holding {current} until the rate's noise is measured")


def complete(step: Step, obs: Observation, replicas: Replicas, state: State, current: int) -> Step:
    """A scale-down while fewer pods export Triton's series than were ready at the last tick too
    keeps one replica for each pod missing from them: the rates then sum only the pods Prometheus
    scrapes (a pod whose scrapes fail: a busy pod's often time out first), and each missing pod is
    taken to carry a replica's worth of load -- as the Kubernetes HPA takes a pod without metrics to
    use 100% of its target on a scale-down. So the fleet never falls below what the seen load needs
    plus the pods unseen, and a pod whose scrapes fail for good does not hold it at its peak for ever.
    A replica ready only since the last tick is not counted (its model's series start at its first
    scrape; at a tick shorter than the scrape interval that can take longer, and the hold lasts until
    it is scraped). Scale-ups are left alone: a low reading that still asks for more is right."""
    last = state.last_pending  # this tick's reading once ``learn`` ran: ``ready_before`` is the last tick's
    settled = replicas.ready if last is None or last.ready_before is None else min(replicas.ready,
                                                                                  int(last.ready_before))
    if step.replicas >= current or obs.pods is None:
        return step
    # Pods with a series but no rate over the window are missing from the rates as well (a window
    # shorter than two scrape intervals: only the pods whose scrape phase fits it have a rate).
    windowed = obs.rate_pods is not None and obs.rate_pods < obs.pods
    seen = min(obs.pods, obs.rate_pods) if windowed and obs.rate_pods is not None else obs.pods
    if seen >= settled:
        return step
    missing = settled - math.floor(seen)
    n = min(current, step.replicas + missing)
    if n == step.replicas:
        return step
    what = ("have a rate over the window (two scrapes in it)" if windowed and obs.pods >= settled
            else "export Triton's series now")
    return Step(n, "PartialData", step.why + f"; only {seen:.0f} of the {settled} ready replicas {what}: "
                                             "one replica kept for each missing pod")


def climbing(step: Step, state: State, policy: Policy, current: int, now: float, sigma: float | None = None,
             horizon: float | None = None, planned: float | None = None) -> Step:
    """No scale-down while the rate climbs out of the scale-down window's lowest reading by more than
    CLIMB_NOISES x its noise (as the difference of two readings: x sqrt(2)), until the plan carries the
    climb. A rate that turns up out of a fall shows in the readings before the trend sees it: the
    trend's span still holds the fall. A replica removed then is wanted back within a horizon, a cold
    start after it is asked for again. Once the forecast has seen the climb, the plan (``planned``, for
    the rate a horizon ahead) reaches where the climb leads -- the latest reading plus the climb's own
    pace since the low (the rise over the time since it) over the horizon, extrapolated no further
    than the trend is (TREND_MAX_HORIZON_S, and scaled as the trend is by the share of its trends the
    rate has delivered, ``trend_delivery``, so plan and climb are compared alike: a whole climb against
    a scaled plan held sawtooth tops at 180 s past what the static peak fleet costs, session 66) -- and
    the plan decides again: holding the fleet of before
    the fall through a long climb kept replicas the climb needed only at its top. Without ``planned``
    the hold lasts as long as the climb. 0 turns it off."""
    if C.CLIMB_NOISES <= 0 or step.replicas >= current or step.reason == "Idle":
        return step
    window, _ = scale_down_window(policy, state)
    recent = [e for e in state.rates if now - e[0] <= window]
    if len(recent) < 2:
        return step
    t_low, low = min(((e[0], e[1]) for e in recent), key=lambda e: e[1])
    rise = recent[-1][1] - low
    if rise <= C.CLIMB_NOISES * math.sqrt(2.0) * noise_now(state, now, sigma):
        return step
    why = step.why + (f"; the rate climbs {rise:.0f} rps out of the lowest reading of the last {window:.0f}s: "
                      "no scale-down")
    if planned is not None:
        full = plan_horizon(state, policy) if horizon is None else horizon
        h = min(full, C.TREND_MAX_HORIZON_S)
        delivery = trend_delivery(state.rates, now, full, policy.window_s)
        ahead = recent[-1][1] + delivery * rise / max(recent[-1][0] - t_low, policy.interval_s) * h
        if planned >= ahead:
            return step  # the forecast carries the climb: the plan is for where it leads within the horizon
        why += f" until the plan reaches where the climb leads, {ahead:.0f} rps"
    return Step(current, "RateClimbing", why)


def scale_down_window(policy: Policy, state: State) -> tuple[float, str]:
    """The scale-down look-back window and why: the spec's, or the time a removed replica takes
    to come back -- a cold start and a tick (``plan_horizon``). A rate that returns within that
    time finds the fleet short until the replica asked for again is ready; and a replica idle for
    less than a cold start is cheaper kept than re-created."""
    if policy.scale_down_stabilization_s is not None:
        return policy.scale_down_stabilization_s, "spec"
    return max(C.SCALE_DOWN_HORIZONS * plan_horizon(state, policy), 2 * policy.interval_s), "cold start + tick"


def _prune(hist: tuple[tuple[float, int, int], ...], before: float) -> tuple[tuple[float, int, int], ...]:
    """Drop entries older than ``before`` that a later entry dominates (no lower recommendation,
    no lower bare need): a window's maximum never needs them, so a steady service keeps one."""
    out: list[tuple[float, int, int]] = []
    best_r = best_b = -1
    for e in reversed(hist):
        if e[0] >= before or e[1] > best_r or e[2] > best_b:
            out.append(e)
        best_r, best_b = max(best_r, e[1]), max(best_b, e[2])
    return tuple(reversed(out))


def stabilize(step: Step, state: State, policy: Policy, current: int, now: float,
              remember: int, bare: int) -> tuple[Step, State]:
    """HPA-style look-back windows. ``remember`` goes into the history (a breach's extra replica
    too, so it is held for a scale-down window instead of flapping away at the next tick).
    Scale-down keeps the highest recommendation of the scale-down window and, while the burst
    memory holds, the highest bare need (the rate at full capacity -- ``bare_capacity``, at most
    saturation -- with no breach extra) since the last surprise's hold began. A window the spec sets
    (``scaleDown.stabilizationSeconds``) is the whole of it, as the HPA's is: the CRD says the window is
    learned, and longer while the rate keeps jumping, only when unset, and a service whose jumps are
    one-offs (a single flash crowd at a long cold start engages the memory for 30 minutes) has only
    this field to say so. The memory held under a set window until session 101 (since the memory was
    split out of the window, 12ff842)."""
    window, source = scale_down_window(policy, state)
    hold = burst_hold(state, now, policy.interval_s) if policy.scale_down_stabilization_s is None else 0.0
    keep = max(policy.scale_up_stabilization_s, window, hold)
    newest = max((e[0] for e in state.recommendations), default=None)
    # A memory whose newest recommendation is older than the window holds none of the window's: the
    # ticks between were not made (a failover or restart gap, a Prometheus outage, a new leader whose
    # clock runs ahead). It is seeded as an empty one is; the older entries stay for the burst memory.
    # Only for a window of a tick or more: with a shorter one every tick finds its last entry out of
    # the window, and a continuing leader has no recommendation in it either.
    lapsed = newest is not None and policy.interval_s <= window < now - newest
    seed = (now - 0.001, current, current) if newest is None or lapsed else None
    if seed is not None:
        # No memory of the window (a new object, lost status, a Deployment scaled by hand, a lapse):
        # assume the current size was recommended just now, as the HPA does, so the first low reading
        # cannot scale down without a whole window. Stamped a millisecond back so a zero-length window
        # does not see it; scale-up ignores it altogether.
        state = replace(state, recommendations=state.recommendations + (seed,))
    hist = tuple(e for e in state.recommendations if now - e[0] <= keep) + ((now, remember, bare),)
    state = replace(state, recommendations=_prune(hist, now - policy.scale_up_stabilization_s))
    rec, desired, reason, why = step.replicas, current, step.reason, step.why
    if rec > current:
        up = [r for t, r, _ in hist[:-1] if (t, r, r) != seed and now - t <= policy.scale_up_stabilization_s]
        desired = max(current, min(up + [rec]))
        if desired < rec:
            reason, why = "StabilizingScaleUp", why + f"; scale-up window holds {desired}"
    elif rec < current:
        held = max(r for t, r, _ in hist if now - t <= window)
        burst = max((b for t, _, b in hist if now - t <= hold), default=0) if hold else 0
        desired = min(current, max(held, burst, rec))
        if desired > rec:
            if burst >= held and burst > rec:
                reason = "BurstMemory"
                why += (f"; holding the peak need of {burst} for {hold:.0f}s after the rate's last unforeseen "
                        f"jump {now - state.surprises[-1]:.0f}s ago (a set scaleDown.stabilizationSeconds holds "
                        f"that window instead)")
            else:
                reason = "StabilizingScaleDown"
                why += f"; highest recommendation in the last {window:.0f}s ({source}) is {held}"
            if max(held, burst) > current:
                # As the HPA's scale-down window: a hold keeps replicas and adds none, so a count another
                # writer cut below it (kubectl scale, an HPA), or a scale-up the step limit cut short, stays.
                # It read "holding the peak need of 8 ... -> 3 replicas".
                why += f" (held at the {current} there are: a hold keeps replicas, it adds none)"
    return Step(desired, reason, why), state


def drain_surge(step: Step, replicas: Replicas, policy: Policy) -> Step:
    """Pods on a node being drained (cordoned) are started again elsewhere first, as a rollout's
    maxSurge does: one more replica for each, within maxReplicas. The PodDisruptionBudget keeps
    ``minReplicas`` available, so at minReplicas it refuses every eviction and the drain (a
    node upgrade) waits for good; once the extra replicas are ready it allows them one by one, the
    ReplicaSet replaces each evicted pod on another node, and when none is left on a cordoned
    node the decision needs no surge and the fleet comes back down. Applied to every decision,
    a held one included (a Prometheus outage does not stop a drain). While pods are
    unschedulable, no more than are asked for already: the surge's own pod waiting for room is
    kept, not removed at one tick and asked for again at the next."""
    if replicas.draining <= 0:
        return step
    want = min(step.replicas + replicas.draining, policy.max_replicas)
    if replicas.unschedulable > 0:
        want = min(want, replicas.current)
    n = max(step.replicas, want)
    if n <= step.replicas:
        return step
    return Step(n, "DrainSurge", step.why + f"; {replicas.draining} pod(s) on a node being drained (cordoned): "
                                            f"{n} replicas, so that their replacements are warm before they go")


def limit(step: Step, current: int, policy: Policy) -> Step:
    if step.replicas > current + policy.scale_up_max_step:
        return Step(current + policy.scale_up_max_step, step.reason,
                    step.why + f"; limited to +{policy.scale_up_max_step} per tick")
    if step.replicas < current - policy.scale_down_max_step:
        return Step(current - policy.scale_down_max_step, step.reason,
                    step.why + f"; limited to -{policy.scale_down_max_step} per tick")
    return step


def clamp(step: Step, replicas: Replicas, policy: Policy) -> Step:
    n = _clamp(step.replicas, policy.floor, policy.max_replicas)
    if replicas.unschedulable > 0 and n > replicas.current:
        return Step(max(replicas.current, policy.floor), "Unschedulable",
                    step.why + f"; {replicas.unschedulable} pod(s) cannot be scheduled or created "
                               f"(the Schedulable condition says why): not asking for more")
    if n < step.replicas and n < replicas.current:  # maxReplicas lowered below the fleet (a spec edit)
        return Step(n, "AtMaxReplicas", step.why + f"; lowering to maxReplicas={policy.max_replicas}")
    if n == policy.max_replicas and step.replicas >= policy.max_replicas and n > replicas.current - 1 \
            and step.reason in ("LoadIncreased", "LatencyAboveTarget"):
        return Step(n, "AtMaxReplicas", step.why + f"; at maxReplicas={policy.max_replicas}")
    if n == policy.floor == replicas.current and step.replicas < n and step.reason == "LoadDecreased":
        # holding at the floor is no decrease (the reason read LoadDecreased for as long as the load stayed low)
        return Step(n, "AtWarmFloor", step.why + f"; held at the warm floor of {replicas_text(n)}")
    return Step(n, step.reason, step.why)
