"""The autoscaling decision, as one pure function.

    decide(observation, replicas, policy, state, now) -> Decision(replicas, reason, message, state)

The operator's per-object tick and the trace simulator (`tritonscale simulate`)
both call this function; neither copies it.

Signals
-------
* p95 latency is the SLO signal: a breach scales up, whatever else says.
* Request rate is the leading signal: it rises before the queue builds up.
  It is turned into replicas through a learned per-replica *capacity*, so
  users state a latency target, not a throughput guess. Two ways to learn it:

  - from the batch cost (preferred): Triton exports the mean batch size
    (``nv_inference_count / nv_inference_exec_count``) and the mean batch
    execution time. A least-squares fit of time = a + b*n over recent ticks
    gives the saturation throughput of one replica, n*/(a + b*n*), at the
    largest batch n* <= maxBatchSize whose two batch times (wait for the
    running batch, then run its own) still fit in the target;
  - from p95 alone (fallback, when batch statistics are missing): see
    ``_learn_capacity``. With dynamic batching p95 barely moves until a
    replica saturates (in the trace simulator p95/target was 0.41 at 60% and
    0.66 at 100% of capacity), so this estimate is rougher.
* Queue time and pending requests confirm pressure (a queue that eats half
  the latency budget means the replica set is saturated even if p95 still
  looks fine because Triton's summary window lags).

Normalisation, in order (as the Kubernetes HPA does): tolerance, stabilization
windows, panic hold, per-step rate limits, then the [floor, maxReplicas] clamp.
Every step can replace the reason, so the last reason explains the result.

Missing data never scales down: a failed source holds (or applies
``fallbackReplicas`` after ``failureThreshold`` consecutive failures), and a
source that returns no series at all holds. Zero traffic is data, not a gap:
with a request rate of exactly 0 the service is idle and may return to the
floor after the scale-down window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional

# Capacity learning. Each tick with traffic gives one estimate of the rate a
# replica serves with p95 exactly at target, assuming p95 grows with the square
# of per-replica load near the target (est = per_replica_rps / ratio**0.5, with
# ratio = p95/target). At ratio 2 (p95 twice the target) the estimate is 71% of
# the observed load; at ratio 0.5 it is 141%. Extrapolation is capped at 2x the
# observed load: at very low ratios p95 is mostly service time and says little.
#
# Only a breach lowers the estimate (at once). Without a breach it only rises,
# smoothed (alpha 0.3: ~3 ticks). That asymmetry matters: if the estimate could
# fall while p95 sits flat under target, adding replicas would lower the
# per-replica rate, lower the estimate, and ask for more replicas -- a runaway.
# A breach also sets a ceiling on later upward learning, relaxing 1% per tick
# (x2.7 after 100 ticks, 25 min at 15 s), so the decider does not walk back down
# into the same breach every scale-down window.
CAPACITY_EXPONENT = 0.5
MAX_EXTRAPOLATION = 2.0
CAPACITY_ALPHA = 0.3
BREACH_CEILING_RELAX = 1.01
# Below this per-replica rate the rate() is mostly noise: 0.5 rps is 30 requests a minute.
MIN_LEARNING_RPS = 0.5

# Queue time at or above this share of the target is pressure even while p95 is
# under target (the 60 s summary lags a fresh burst by up to a window).
QUEUE_PRESSURE_SHARE = 0.5

# Slack exploration: with p95 under half the target, step down one replica even
# if the capacity estimate disagrees. An estimate learned during a backlog (a
# cold start, a burst) can be far too low, and nothing else would correct it:
# at 20 ms p95 against a 100 ms target the rate signal alone kept 2 replicas
# where 1 sufficed. The step still passes the scale-down window, so the slack
# must last a whole window (300 s by default) first.
SLACK_RATIO = 0.5

# Per-replica load targeted by the rate signal, relative to the learned capacity.
# 25% headroom: in the shared Azure LLM trace, 10-second bursts run 20-25% above
# the minute mean, and a new replica needs a cold start (60 s in the simulator)
# before it helps. 0.85 missed a window there; 0.75 met every one.
UTILISATION_TARGET = 0.75

# Batch-cost model: keep this many (batch size, batch ms) samples (~10 min at 15 s).
BATCH_SAMPLES = 40
# A fit needs batch sizes that differ by at least this much; with less spread the
# slope is noise, and the fixed/per-item split falls back to half and half.
MIN_BATCH_SPREAD = 1.0

SourceStatus = Literal["ok", "no_data", "failed"]


@dataclass(frozen=True)
class Observation:
    """What the metric source saw for one InferenceService this tick."""

    status: SourceStatus
    p95_ms: Optional[float] = None  # None: no value (idle model reports NaN)
    rps: Optional[float] = None  # None: no series; 0.0: idle
    queue_ms: Optional[float] = None
    pending: Optional[float] = None
    batch_size: Optional[float] = None  # mean requests per model execution
    batch_ms: Optional[float] = None  # mean execution time of one batch
    failed_rps: Optional[float] = None  # requests rejected (queue policy) per second, over the window
    recent_rps: Optional[float] = None  # success + failure rate between the last two scrapes (irate)
    message: str = ""


@dataclass(frozen=True)
class Replicas:
    current: int  # Deployment spec.replicas (includes replicas still starting)
    ready: int  # replicas whose model is loaded and warm
    # Pods the scheduler could not place (PodScheduled=False, reason Unschedulable, e.g.
    # insufficient nvidia.com/gpu): asking for more would only add more Pending pods.
    unschedulable: int = 0
    # Seconds from creation to Ready of pods seen becoming ready since the last tick
    # (the cold start: image pull, Triton start, model load and warmup).
    startup_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class Policy:
    min_replicas: int = 1
    max_replicas: int = 10
    target_p95_ms: Optional[float] = None
    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_up_max_step: int = 4
    scale_down_stabilization_s: float = 300.0
    scale_down_max_step: int = 1
    panic_threshold: float = 2.0
    warm_buffer: int = 0
    fallback_replicas: Optional[int] = None
    failure_threshold: int = 3
    max_batch_size: int = 1  # the model's maxBatchSize (0 in the spec means no batching: 1)

    @property
    def floor(self) -> int:
        return min(self.min_replicas + self.warm_buffer, self.max_replicas)

    @classmethod
    def from_spec(cls, scaling: Any, max_batch_size: int = 1) -> "Policy":
        """Build from ``tritonscale.api.spec.ScalingSpec`` (and the model's maxBatchSize)."""
        return cls(
            max_batch_size=max(1, max_batch_size),
            min_replicas=scaling.min_replicas,
            max_replicas=scaling.max_replicas,
            target_p95_ms=scaling.target_p95_milliseconds,
            tolerance=scaling.tolerance,
            scale_up_stabilization_s=scaling.scale_up.stabilization_seconds,
            scale_up_max_step=scaling.scale_up.max_step,
            scale_down_stabilization_s=scaling.scale_down.stabilization_seconds,
            scale_down_max_step=scaling.scale_down.max_step,
            panic_threshold=scaling.panic_threshold,
            warm_buffer=scaling.warm_buffer,
            fallback_replicas=scaling.fallback_replicas,
            failure_threshold=scaling.failure_threshold,
        )


@dataclass(frozen=True)
class State:
    """Autoscaler memory. Serialisable (``to_dict``) so it survives an operator restart."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, raw recommendation)
    failures: int = 0
    panic_until: Optional[float] = None
    capacity_rps: Optional[float] = None  # learned per-replica request rate at target
    capacity_ceiling_rps: Optional[float] = None  # upper bound set by the last breach, relaxing
    batch_samples: tuple[tuple[float, float], ...] = ()  # (mean batch size, mean batch ms)
    last_scale_time: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[round(t, 3), r] for t, r in self.recommendations],
            "failures": self.failures,
            "panicUntil": self.panic_until,
            "capacityRps": None if self.capacity_rps is None else round(self.capacity_rps, 4),
            "capacityCeilingRps": None if self.capacity_ceiling_rps is None else round(self.capacity_ceiling_rps, 4),
            "batchSamples": [[round(n, 3), round(t, 3)] for n, t in self.batch_samples],
            "lastScaleTime": self.last_scale_time,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "State":
        if not d:
            return cls()
        try:
            return cls(
                recommendations=tuple((float(t), int(r)) for t, r in d.get("recommendations") or ()),
                failures=int(d.get("failures") or 0),
                panic_until=d.get("panicUntil"),
                capacity_rps=d.get("capacityRps"),
                capacity_ceiling_rps=d.get("capacityCeilingRps"),
                batch_samples=tuple((float(n), float(t)) for n, t in d.get("batchSamples") or ()),
                last_scale_time=d.get("lastScaleTime"),
            )
        except (TypeError, ValueError):
            return cls()  # corrupt memory: start fresh rather than crash the tick


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, for the Scaling condition and Events
    message: str  # human explanation with the numbers behind it
    state: State
    metrics_ok: bool
    details: dict[str, Any] = field(default_factory=dict)


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


def _learn_capacity(state: State, obs: Observation, ready: int, target: float, tolerance: float) -> State:
    cap, ceiling = state.capacity_rps, state.capacity_ceiling_rps
    if ceiling is not None:
        ceiling *= BREACH_CEILING_RELAX
    if obs.p95_ms is None or not obs.rps or ready <= 0 or obs.p95_ms <= 0 or obs.rps / ready < MIN_LEARNING_RPS:
        return replace(state, capacity_ceiling_rps=ceiling)
    per = obs.rps / ready
    ratio = obs.p95_ms / target
    est = per * min(ratio ** -CAPACITY_EXPONENT, MAX_EXTRAPOLATION)
    if ratio > 1.0 + tolerance:
        cap = est if cap is None else min(cap, est)
        ceiling = est if ceiling is None else min(ceiling, est)
    elif cap is None:
        cap = est
    elif est > cap:
        cap += CAPACITY_ALPHA * (est - cap)
    if ceiling is not None and cap is not None:
        cap = min(cap, ceiling)
    return replace(state, capacity_rps=cap, capacity_ceiling_rps=ceiling)


def batch_cost(samples: tuple[tuple[float, float], ...]) -> Optional[tuple[float, float]]:
    """Least-squares (a, b) of batch_ms = a + b*n, both >= 0; None without samples."""
    if not samples:
        return None
    ns = [n for n, _ in samples]
    ts = [t for _, t in samples]
    n_mean, t_mean = sum(ns) / len(ns), sum(ts) / len(ts)
    if max(ns) - min(ns) < MIN_BATCH_SPREAD:
        return t_mean / 2, t_mean / (2 * n_mean)  # no spread: split fixed/per-item evenly
    var = sum((n - n_mean) ** 2 for n in ns)
    b = sum((n - n_mean) * (t - t_mean) for n, t in zip(ns, ts)) / var
    b = max(b, 0.0)
    a = max(t_mean - b * n_mean, 0.0)
    if a == 0.0 and b == 0.0:
        return None
    return a, b


def batch_capacity(cost: tuple[float, float], max_batch: int, target_ms: float) -> float:
    """Requests per second one replica sustains: the largest batch n* <= max_batch with
    2*(a + b*n*) <= target (a request may wait for the running batch, then runs in its
    own), at n*/(a + b*n*) per ms. E.g. a=20, b=2, max 16, target 150: n*=16, 308 rps."""
    a, b = cost
    n_star = max_batch
    while n_star > 1 and 2 * (a + b * n_star) > target_ms:
        n_star -= 1
    return 1000.0 * n_star / (a + b * n_star)


def _learn_batches(state: State, obs: Observation) -> State:
    if obs.batch_size is None or obs.batch_ms is None or obs.batch_size <= 0 or obs.batch_ms <= 0:
        return state
    samples = (state.batch_samples + ((obs.batch_size, obs.batch_ms),))[-BATCH_SAMPLES:]
    return replace(state, batch_samples=samples)


def _window(state: State, now: float, keep_s: float, rec: int) -> tuple[tuple[float, int], ...]:
    hist = tuple((t, r) for t, r in state.recommendations if now - t <= keep_s)
    return hist + ((now, rec),)


def decide(obs: Observation, replicas: Replicas, policy: Policy, state: State, now: float) -> Decision:
    floor, ceiling = policy.floor, policy.max_replicas
    current = replicas.current
    ready = min(replicas.ready, current) if current > 0 else replicas.ready
    details: dict[str, Any] = {"current": current, "ready": ready, "floor": floor, "max": ceiling}

    def done(n: int, reason: str, message: str, st: State, ok: bool = True) -> Decision:
        n = _clamp(n, floor, ceiling)
        if n != current:
            st = replace(st, last_scale_time=now)
        return Decision(n, reason, message, st, ok, details)

    # --- metric source failed: hold, or fall back after N consecutive failures -------------
    if obs.status == "failed":
        st = replace(state, failures=state.failures + 1)
        if policy.fallback_replicas is not None and st.failures >= policy.failure_threshold:
            n = _clamp(policy.fallback_replicas, floor, ceiling)
            return done(n, "FallbackAfterFailures",
                        f"metrics failed {st.failures} times in a row (threshold {policy.failure_threshold}); "
                        f"running fallbackReplicas={n}: {obs.message}", st, ok=False)
        n = max(current, floor)
        return done(n, "MetricsUnavailable",
                    f"holding {n} replicas: metric source failed ({obs.message})", st, ok=False)

    state = replace(state, failures=0)
    if current < floor:
        return done(floor, "BelowFloor", f"raising to the warm floor of {floor} replicas", state)
    if policy.target_p95_ms is None:
        return done(current, "NoTarget", "no targetP95Milliseconds: holding between the floor and the ceiling",
                    state)

    target = policy.target_p95_ms
    tol = policy.tolerance
    if obs.status == "no_data" or obs.rps is None:
        return done(current, "NoData",
                    f"holding {current} replicas: no series for this service yet ({obs.message or 'no data'})",
                    state, ok=False)

    state = _learn_batches(_learn_capacity(state, obs, ready, target, tol), obs)
    cost = batch_cost(state.batch_samples)
    batch_model = cost is not None
    cap = batch_capacity(cost, policy.max_batch_size, target) if cost else state.capacity_rps
    rps, p95 = obs.rps, obs.p95_ms
    ratio = (p95 / target) if p95 is not None else 0.0
    details.update(rps=rps, p95_ms=p95, capacity_rps=cap, ratio=round(ratio, 3))

    # --- raw recommendation ----------------------------------------------------------------
    panic = ratio >= policy.panic_threshold
    queue_pressure = obs.queue_ms is not None and obs.queue_ms >= QUEUE_PRESSURE_SHARE * target
    breach = ratio > 1.0 + tol
    if rps == 0.0:
        rec, reason = floor, "Idle"
        why = "no requests in the window: back to the warm floor"
    else:
        rate_rec = math.ceil(rps / (cap * UTILISATION_TARGET)) if cap else current
        if breach or queue_pressure:
            # Proportional to the breach on the replicas that actually serve; replicas
            # still starting are counted as coming capacity, not added again.
            pressure = max(ratio, 1.0 + tol) if breach else 1.0 + tol
            lat_rec = math.ceil(max(ready, 1) * pressure)
            rec = max(rate_rec, lat_rec, current + (0 if ready < current else 1))
            reason = "Panic" if panic else ("LatencyAboveTarget" if breach else "QueueBuilding")
            why = (f"p95 {p95:.0f} ms vs target {target:.0f} ms" if p95 is not None else "p95 n/a") + \
                  (f", queue {obs.queue_ms:.0f} ms" if queue_pressure else "") + \
                  f", {rps:.1f} rps on {ready} warm replica(s)"
            if rec <= current and ready < current:
                reason = "WaitingForWarmup"
                why += f"; {current - ready} replica(s) still starting cover it"
        else:
            rec = rate_rec
            load = rps / (current * cap * UTILISATION_TARGET) if cap and current else 1.0
            if cap and rec < current and load >= 1.0 - tol:
                # The dead band holds scale-down only: scaling up late costs the SLO,
                # scaling down late costs a little money.
                rec, reason = current, "WithinTolerance"
            else:
                reason = "LoadIncreased" if rec > current else ("LoadDecreased" if rec < current else "Steady")
            if (not batch_model and p95 is not None and ratio < SLACK_RATIO and rec >= current
                    and ready >= current):
                rec, reason = current - 1, "LatencySlack"
            why = (f"{rps:.1f} rps at ~{cap:.1f} rps per replica"
                   f"{' (batch cost)' if batch_model else ' (from p95)'}" if cap else f"{rps:.1f} rps") + \
                  (f", p95 {p95:.0f}/{target:.0f} ms" if p95 is not None else "")
    rec = _clamp(rec, floor, ceiling)
    details["recommendation"] = rec

    # --- stabilization (HPA-style look-back windows) ---------------------------------------
    keep = max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
    seed = (now - 0.001, current) if not state.recommendations else None
    if seed is not None:
        # No memory (a new object, lost status, a Deployment scaled by hand): assume the
        # current size was recommended just now, as the HPA does, so the first low reading
        # cannot scale down without a whole stabilization window. Stamped a millisecond
        # back, so a zero-length window (stabilizationSeconds: 0) does not see it;
        # scale-up ignores it altogether.
        state = replace(state, recommendations=(seed,))
    hist = _window(state, now, keep, rec)
    state = replace(state, recommendations=hist)
    if panic:
        # Like Knative's panic mode, no scale-down while panicking: here for one
        # scale-down window after the last panic-level reading (300 s by default), so
        # a user who shortens that window for a bursty service also shortens the hold.
        state = replace(state, panic_until=now + policy.scale_down_stabilization_s)
    desired = current
    if rec > current:
        up_window = [r for t, r in hist if (t, r) != seed and now - t <= policy.scale_up_stabilization_s]
        desired = max(current, min(up_window))
        if desired < rec:
            reason, why = "StabilizingScaleUp", why + f"; scale-up window holds {desired}"
    elif rec < current:
        down_window = [r for t, r in hist if now - t <= policy.scale_down_stabilization_s]
        desired = min(current, max(down_window))
        if state.panic_until is not None and now < state.panic_until:
            desired = current
            reason, why = "PanicHold", why + f"; no scale-down for {state.panic_until - now:.0f}s after panic"
        elif desired > rec:
            reason = "StabilizingScaleDown"
            why += f"; highest recommendation in the last {policy.scale_down_stabilization_s:.0f}s is {desired}"

    # --- rate limits -------------------------------------------------------------------------
    if desired > current + policy.scale_up_max_step:
        desired = current + policy.scale_up_max_step
        why += f"; limited to +{policy.scale_up_max_step} per tick"
    if desired < current - policy.scale_down_max_step:
        desired = current - policy.scale_down_max_step
        why += f"; limited to -{policy.scale_down_max_step} per tick"

    if breach and rec >= ceiling and desired >= ceiling:
        reason, why = "AtMaxReplicas", why + f"; at maxReplicas={ceiling}"
    return done(desired, reason, f"{why} -> {_clamp(desired, floor, ceiling)} replicas", state)
