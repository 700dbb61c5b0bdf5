"""The autoscaling decision, as one pure function built from named steps.

    decide(observation, replicas, policy, state, now) -> Decision(replicas, reason, message, state)

The operator's per-object tick and the trace simulator (``tritonscale simulate``)
both call this function; neither copies it. It imports nothing from tritonscale.

The steps, in the order the Kubernetes HPA documents its own (metrics ->
recommendation -> stabilization -> rate limits -> min/max), each a small pure
function that returns its result and the reason for it:

1. ``guard``      -- source failed, no target, no series, below the floor: hold or fall back.
2. ``learn``      -- update the memory: batch cost samples, the rate history, the cold-start
                     time, rises of the rate.
3. ``demand``     -- arrival rate now (requests out of the queue plus the queue's growth) and
                     the backlog.
4. ``forecast``   -- the rate to plan for when a replica asked for now is ready: the current
                     rate plus its trend over one cold start.
5. ``recommend``  -- replicas = (planned rate + backlog / tick) / (capacity x utilisation);
                     idle traffic goes back to the floor.
6. ``breach``     -- a p95 breach with a queue behind it asks for one more replica than is
                     running (bounded: "more", not "p95/target times more").
7. ``tolerate``   -- the dead band: no scale-down for a load within the tolerance.
8. ``stabilize``  -- scale-up/down look-back windows; the scale-down window defaults to the
                     learned cold start, longer while the rate keeps jumping (burst memory).
9. ``limit``      -- at most maxStep replicas up or down per tick.
10. ``clamp``     -- [floor, maxReplicas]; never ask for more while pods are unschedulable.

Constants below were chosen with the scenario suite (``tritonscale simulate --suite``:
traffic classes x cold starts x SLOs x seeds); their comments give the reason and the
suite figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional

# --- constants (each cites its reason; figures are from the scenario suite) -----------------

# Share of a replica's capacity at the target the rate signal plans for. Capacity is
# already "at the target" (the largest batch whose two batch times fit in it), so the
# margin only covers rate noise within a tick and the error of the cost fit; growth
# is planned for separately (forecast) and bursts by the burst memory.
UTILISATION = 0.9
# Before the first pod was seen starting, assume this cold start (s): the sandbox's
# CPU model starts in ~2 s, a GPU model with a large image in minutes.
DEFAULT_COLD_START_S = 60.0
# The rate history kept for level, trend, noise and surprises: one sample per 10 s at most,
# as far back as the longest of them looks (NOISE_S, or two horizons for long cold starts).
RATE_SAMPLE_S = 10.0
# Trend: fitted over the last two minutes at least (longer for longer cold starts).
TREND_S = 120.0
TREND_HORIZON_SHARE = 1.0
# Rate noise: the rate's tick-to-tick variability (robust: median absolute difference of
# consecutive samples over the last five minutes, as a standard deviation) is planned for at
# the one-sided 95% normal quantile -- the objective is a p95. Poisson traffic at hundreds of
# rps has ~1% noise per tick; the shared Azure trace's 10 s bursts show as ~10%.
NOISE_S = 300.0
NOISE_Z = 1.645
# The level the plan starts from: the mean of the last minute, or the latest sample if higher.
LEVEL_S = 60.0
# Surprises: the rate exceeded, by more than its noise, what was planned a cold start ago --
# a rise the plan did not foresee. A reactive scaler pays a whole cold start of misses for
# each one. Once surprises recur (SURPRISES_FOR_MEMORY: a single one may be a one-off flash
# crowd, and holding capacity after it would only cost), the peak need is held (burst memory)
# for SURPRISE_HOLD_COLD_STARTS cold starts, so surprises cost at most ~1/10 of the time -- the
# budget of a 90% window objective -- and at least twice the longest gap seen between them
# (the next gap may be longer than the few seen), at most MAX_BURST_HOLD_S.
SURPRISE_HOLD_COLD_STARTS = 10.0
BURST_HOLD_GAPS = 2.0
MAX_BURST_HOLD_S = 1800.0
MAX_SURPRISES = 8
SURPRISES_FOR_MEMORY = 2
# Draining a backlog asks for at most this share more than the planned rate: round-robin gives
# new replicas only new requests, so extra replicas drain the old queues only by taking new
# traffic off them (drain rate = saturation - rate/replicas), which gains little beyond a quarter
# more replicas; the queue timeout (2 x target by default) bounds a backlog anyway.
BACKLOG_MAX_EXTRA = 0.25
# Queue evidence for a breach: a queue of at least this many target-times of work per
# ready replica means the replicas really are behind (the p95 summary lags by a minute).
QUEUE_PRESSURE_TARGETS = 1.0
# p95 learning, only without batch statistics (see _learn_p95_capacity).
CAPACITY_EXPONENT = 0.5
MAX_EXTRAPOLATION = 2.0
CAPACITY_ALPHA = 0.3
BREACH_CEILING_RELAX = 1.01
MIN_LEARNING_RPS = 0.5
# Batch-cost model: one (batch size, batch ms) sample per batch-size bin, so what was seen
# at large batches during a burst is still known after an hour of steady traffic at small
# ones; bins are 1 wide up to 16, then 1/16 of the size (<= ~64 bins). Triton's per-request
# compute time weights each batch by its size, so a tick whose batch sizes vary (a load
# change) reads high, never low: each bin keeps its lowest time (the lower envelope), and
# forgets it after BATCH_SAMPLE_TTL_S so a slower model is learned again.
MAX_BATCH_BINS = 64
BATCH_SAMPLE_TTL_S = 1800.0
# A tick whose mean batch size moved more than this from the last one mixes small and large
# batches (a load change): its request-weighted time is biased high, so it is not a sample.
BATCH_STEADY_CHANGE = 0.2
# Scale-down window without a spec value: this many cold starts (learned).
SCALE_DOWN_COLD_STARTS = 1.0
MIN_BATCH_SPREAD = 1.0
SINGLE_BATCH_MIN_SHARE = 0.25

SourceStatus = Literal["ok", "no_data", "failed"]


@dataclass(frozen=True)
class Observation:
    """What the metric source saw for one InferenceService this tick."""

    status: SourceStatus
    p95_ms: Optional[float] = None  # None: no value (idle model reports NaN)
    rps: Optional[float] = None  # successes per second over the window; None: no series; 0.0: idle
    queue_ms: Optional[float] = None
    pending: Optional[float] = None  # requests queued now (nv_inference_pending_request_count)
    batch_size: Optional[float] = None  # mean requests per model execution
    batch_ms: Optional[float] = None  # mean execution time of one batch
    failed_rps: Optional[float] = None  # requests rejected (queue policy) per second, over the window
    recent_rps: Optional[float] = None  # success + failure rate between the last two scrapes (irate)
    recent_served_rps: Optional[float] = None  # success rate between the last two scrapes (irate)
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
    scale_down_stabilization_s: Optional[float] = None  # None: learned (cold start, burst memory)
    scale_down_max_step: int = 1
    warm_buffer: int = 0
    fallback_replicas: Optional[int] = None
    failure_threshold: int = 3
    max_batch_size: int = 1  # the model's maxBatchSize (0 in the spec means no batching: 1)
    interval_s: float = 15.0

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
            warm_buffer=scaling.warm_buffer,
            fallback_replicas=scaling.fallback_replicas,
            failure_threshold=scaling.failure_threshold,
            interval_s=float(scaling.interval_seconds),
        )


def _r(v: Optional[float], nd: int = 3) -> Optional[float]:
    return None if v is None else round(v, nd)


@dataclass(frozen=True)
class State:
    """Autoscaler memory. Serialisable (``to_dict``) so it survives an operator restart."""

    # (time, recommendation, bare need): the bare need is the peak rate at full capacity,
    # without noise or trend headroom -- what the burst memory holds
    recommendations: tuple[tuple[float, int, int], ...] = ()
    failures: int = 0
    capacity_rps: Optional[float] = None  # p95-learned per-replica rate at target (fallback)
    capacity_ceiling_rps: Optional[float] = None  # upper bound set by the last breach, relaxing
    batch_samples: tuple[tuple[float, float, float], ...] = ()  # (mean batch size, mean batch ms, when)
    last_scale_time: Optional[float] = None
    rates: tuple[tuple[float, float, float], ...] = ()  # (time, arrival rate, rate planned for) history
    cold_start_s: Optional[float] = None  # learned creation-to-ready time
    surprises: tuple[float, ...] = ()  # times demand outran the warm replicas unforeseen
    last_pending: Optional[tuple[float, ...]] = None  # (time, pending, ready replicas) at the last tick
    last_batch_size: Optional[float] = None  # mean batch size at the last tick

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[round(t, 3), r, b] for t, r, b in self.recommendations],
            "failures": self.failures,
            "capacityRps": _r(self.capacity_rps, 4),
            "capacityCeilingRps": _r(self.capacity_ceiling_rps, 4),
            "batchSamples": [[round(n, 3), round(t, 3), round(w, 1)] for n, t, w in self.batch_samples],
            "lastScaleTime": self.last_scale_time,
            "rates": [[round(t, 1), round(r, 2), round(p, 2)] for t, r, p in self.rates],
            "coldStartSeconds": _r(self.cold_start_s, 1),
            "surprises": [round(t, 1) for t in self.surprises],
            "lastPending": None if self.last_pending is None else [round(v, 3) for v in self.last_pending],
            "lastBatchSize": _r(self.last_batch_size),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "State":
        if not d:
            return cls()
        try:
            lp = d.get("lastPending")
            return cls(
                recommendations=tuple((float(e[0]), int(e[1]), int(e[-1]))
                                      for e in d.get("recommendations") or ()),
                failures=int(d.get("failures") or 0),
                capacity_rps=d.get("capacityRps"),
                capacity_ceiling_rps=d.get("capacityCeilingRps"),
                batch_samples=tuple((float(e[0]), float(e[1]), float(e[2]) if len(e) > 2 else 0.0)
                                    for e in d.get("batchSamples") or ()),
                last_scale_time=d.get("lastScaleTime"),
                rates=tuple((float(e[0]), float(e[1]), float(e[-1])) for e in d.get("rates") or ()),
                cold_start_s=None if d.get("coldStartSeconds") is None else float(d["coldStartSeconds"]),
                surprises=tuple(float(t) for t in d.get("surprises") or ()),
                last_pending=None if not lp else tuple(float(v) for v in lp),
                last_batch_size=None if d.get("lastBatchSize") is None else float(d["lastBatchSize"]),
            )
        except (TypeError, ValueError, IndexError):
            return cls()  # corrupt memory: start fresh rather than crash the tick


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, for the Scaling condition and Events
    message: str  # human explanation with the numbers behind it
    state: State
    metrics_ok: bool
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One step's result: a replica count and why."""

    replicas: int
    reason: str
    why: str


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


# --- capacity --------------------------------------------------------------------------------
def _batch_bin(n: float) -> int:
    return round(n) if n < 16 else 16 + round(math.log(n / 16) / math.log(17 / 16))


def add_batch_sample(samples: tuple[tuple[float, float, float], ...], n: float, ms: float,
                     now: float) -> tuple[tuple[float, float, float], ...]:
    """Per batch-size bin keep the lowest time seen in the last BATCH_SAMPLE_TTL_S (see
    MAX_BATCH_BINS): samples (size, ms, when), sorted by size."""
    b = _batch_bin(n)
    old = [e for e in samples if _batch_bin(e[0]) == b and now - e[2] <= BATCH_SAMPLE_TTL_S]
    new = min(old + [(n, ms, now)], key=lambda e: e[1])
    kept = [e for e in samples if _batch_bin(e[0]) != b] + [new]
    kept.sort()
    while len(kept) > MAX_BATCH_BINS:  # drop the middle bin: the ends carry the slope
        kept.pop(len(kept) // 2)
    return tuple(kept)


def batch_cost(samples: tuple[tuple[float, ...], ...]) -> Optional[tuple[float, float]]:
    """Least-squares (a, b) of batch_ms = a + b*n over (size, ms, ...) samples, both >= 0;
    None without samples."""
    if not samples:
        return None
    ns = [e[0] for e in samples]
    ts = [e[1] for e in samples]
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


def _learn_p95_capacity(state: State, obs: Observation, ready: int, target: float, tolerance: float) -> State:
    """Fallback without batch statistics: each tick with traffic estimates the rate a replica
    serves with p95 at target, assuming p95 grows with the square root of per-replica load
    near the target; only a breach lowers it (at once), otherwise it rises smoothed, capped by
    the last breach's ceiling (relaxing 1% a tick), so flat p95 cannot run away."""
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


def capacity(state: State, policy: Policy, target: float) -> tuple[Optional[float], str]:
    """Per-replica requests per second at the target, and where the figure comes from; None while
    the batch statistics cannot tell it yet. One batch size seen says nothing about the slope of
    the cost: capacity is known once batch sizes spread (MIN_BATCH_SPREAD), or a batch near the
    maximum was seen, or the model does not batch (maxBatchSize <= 1)."""
    samples = state.batch_samples
    cost = batch_cost(samples)
    if cost is not None:
        sizes = [e[0] for e in samples]
        known = (policy.max_batch_size <= 1 or max(sizes) - min(sizes) >= MIN_BATCH_SPREAD
                 or max(sizes) >= 0.9 * policy.max_batch_size)
        if known:
            return batch_capacity(cost, policy.max_batch_size, target), "batch cost"
        if max(sizes) >= SINGLE_BATCH_MIN_SHARE * policy.max_batch_size:
            # one batch size, already a good share of the maximum: the cost split half fixed, half
            # per item there is a fair guess, and errs low (more replicas) for fixed-cost models
            return batch_capacity(cost, policy.max_batch_size, target), "batch cost, one batch size"
        # tiny batches only: replicas are far from full, and extrapolating their cost to large
        # batches could be off by the batching gain itself
        return None, "batch cost: only small batches seen so far"
    return state.capacity_rps, "p95"


# --- the steps ---------------------------------------------------------------------------------
def guard(obs: Observation, replicas: Replicas, policy: Policy, state: State) -> tuple[Optional[Step], State, bool]:
    """Hold (or fall back) when there is nothing to decide on. Returns (step or None, state, metrics ok)."""
    floor, current = policy.floor, replicas.current
    if obs.status == "failed":
        st = replace(state, failures=state.failures + 1)
        if policy.fallback_replicas is not None and st.failures >= policy.failure_threshold:
            n = _clamp(policy.fallback_replicas, floor, policy.max_replicas)
            return Step(n, "FallbackAfterFailures",
                        f"metrics failed {st.failures} times in a row (threshold {policy.failure_threshold}); "
                        f"running fallbackReplicas={n}: {obs.message}"), st, False
        n = max(current, floor)
        return Step(n, "MetricsUnavailable", f"holding {n} replicas: metric source failed ({obs.message})"), st, False
    state = replace(state, failures=0)
    if current < floor:
        return Step(floor, "BelowFloor", f"raising to the warm floor of {floor} replicas"), state, True
    if policy.target_p95_ms is None:
        return Step(current, "NoTarget", "no targetP95Milliseconds: holding between the floor and the ceiling"), \
            state, True
    if obs.status == "no_data" or obs.rps is None:
        return Step(current, "NoData", f"holding {current} replicas: no series for this service yet "
                                       f"({obs.message or 'no data'})"), state, False
    return None, state, True


@dataclass(frozen=True)
class Demand:
    rate: float  # arrival rate now (requests per second)
    window_rate: float  # over the rate window (lags)
    backlog: float  # requests queued now
    growth: float = 0.0  # the queue's change since the last tick, per second


def demand(obs: Observation, state: State, now: float) -> Demand:
    """Arrivals = requests leaving the queue (served or rejected) + the queue's growth.
    The served rate alone caps at capacity in overload; the queue's growth is the rest."""
    failed = obs.failed_rps or 0.0
    window = (obs.rps or 0.0) + failed
    exits = obs.recent_rps if obs.recent_rps is not None else window
    pending = obs.pending or 0.0
    growth = 0.0
    if state.last_pending is not None and obs.pending is not None and now > state.last_pending[0]:
        growth = (pending - state.last_pending[1]) / (now - state.last_pending[0])
    return Demand(max(0.0, exits + growth), window, pending, growth)


def learn(state: State, obs: Observation, replicas: Replicas, policy: Policy, now: float, rate: float) -> State:
    """Update the memory: batch samples, p95 capacity (fallback), cold start, rate history, rises."""
    target = float(policy.target_p95_ms or 0.0)
    ready = min(replicas.ready, replicas.current) if replicas.current > 0 else replicas.ready
    state = _learn_p95_capacity(state, obs, ready, target, policy.tolerance)
    if obs.batch_size and obs.batch_ms and obs.batch_size > 0 and obs.batch_ms > 0:
        prev = state.last_batch_size
        steady = prev is not None and abs(obs.batch_size - prev) <= BATCH_STEADY_CHANGE * prev
        full = obs.batch_size >= 0.9 * policy.max_batch_size  # full batches barely vary: no bias
        if steady or full or not state.batch_samples:  # and the first sample is better than none
            state = replace(state, batch_samples=add_batch_sample(state.batch_samples, obs.batch_size, obs.batch_ms,
                                                                  now))
        state = replace(state, last_batch_size=obs.batch_size)
    ready = min(replicas.ready, replicas.current)
    deep = ready * policy.max_batch_size
    last = state.last_pending
    if (obs.recent_served_rps and ready > 0 and policy.max_batch_size > 1 and (obs.pending or 0.0) >= deep
            and last is not None and last[1] >= deep and len(last) > 2 and last[2] == ready):
        # At least a full batch waited on every replica at both ends of the last interval: each ran
        # full batches back to back, so the served rate per replica is the saturation rate -- a
        # sample at maxBatchSize from the first overloaded ticks (the window's batch statistics lag
        # by a whole window). A queue that filled up only within the interval would read low, and
        # replicas that became ready within it would be counted for work they did not do.
        full_ms = 1000.0 * policy.max_batch_size * ready / obs.recent_served_rps
        state = replace(state, batch_samples=add_batch_sample(state.batch_samples, float(policy.max_batch_size),
                                                              full_ms, now))
    if replicas.startup_s:
        seen = max(replicas.startup_s)
        old = state.cold_start_s
        # a longer start counts at once (plan for the slow case); shorter ones pull it down slowly
        state = replace(state, cold_start_s=seen if old is None or seen > old else old + 0.3 * (seen - old))
    memory = max(NOISE_S, 2 * (cold_start(state) + policy.interval_s))
    rates = tuple(e for e in state.rates if now - e[0] <= memory)
    if rates and now - rates[-1][0] < RATE_SAMPLE_S:
        rates = rates[:-1]  # keep one sample per RATE_SAMPLE_S: replace the latest
    rates += ((now, rate, rate),)  # the plan is filled in once made (see decide)
    pending = (now, obs.pending, float(ready)) if obs.pending is not None else None
    return replace(state, rates=rates, last_pending=pending)


def surprise(state: State, d: Demand, now: float) -> State:
    """Record a surprise: the rate now exceeds, by more than its noise, the rate planned for one
    cold start ago -- what replicas asked for then were sized for. Whether or not capacity
    happened to be there (the burst memory may have held it), a scaler that follows the plan
    would have been short. Rising edge: at most one per cold start."""
    horizon = cold_start(state)
    past = [e for e in state.rates if now - e[0] >= horizon]
    kept = tuple(t for t in state.surprises if now - t <= MAX_BURST_HOLD_S)
    if past and d.rate - NOISE_Z * noise(state.rates, now) > past[-1][2] \
            and (not kept or now - kept[-1] > horizon):
        kept = (kept + (now,))[-MAX_SURPRISES:]
    return replace(state, surprises=kept)


def cold_start(state: State) -> float:
    return state.cold_start_s if state.cold_start_s is not None else DEFAULT_COLD_START_S


def _fit(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and its standard error (inf with fewer than 3 points)."""
    n = len(pts)
    if n < 3:
        return 0.0, math.inf
    tm = sum(t for t, _ in pts) / n
    rm = sum(r for _, r in pts) / n
    sxx = sum((t - tm) ** 2 for t, _ in pts)
    if sxx <= 0:
        return 0.0, math.inf
    slope = sum((t - tm) * (r - rm) for t, r in pts) / sxx
    res = sum((r - rm - slope * (t - tm)) ** 2 for t, r in pts)
    return slope, math.sqrt(res / (n - 2) / sxx)


def _slope2(pts: list[tuple[float, float]]) -> float:
    """Least-squares slope of two or more points."""
    tm = sum(t for t, _ in pts) / len(pts)
    rm = sum(r for _, r in pts) / len(pts)
    sxx = sum((t - tm) ** 2 for t, _ in pts)
    return 0.0 if sxx <= 0 else sum((t - tm) * (r - rm) for t, r in pts) / sxx


def trend(rates: tuple[tuple[float, float, float], ...], now: float, horizon: float) -> float:
    """A rising trend (rps per second) worth extrapolating: the lower 95% confidence bound of
    the least-squares slope over the last max(TREND_S, horizon) -- look back as far as the plan
    looks ahead -- and no more than either half of that window rises (a ramp rises in both
    halves; a step in one only, and is met by the rate itself, not extrapolated). 0 if none."""
    span = max(TREND_S, TREND_HORIZON_SHARE * horizon)
    pts = [(e[0], e[1]) for e in rates if now - e[0] <= span]
    older = [(t, r) for t, r in pts if now - t > span / 2]
    newer = [(t, r) for t, r in pts if now - t <= span / 2]
    slope, se = _fit(pts)
    halves = min(_slope2(older), _slope2(newer)) if len(older) >= 2 and len(newer) >= 2 else 0.0
    return max(0.0, min(slope - NOISE_Z * se, halves))


def noise(rates: tuple[tuple[float, float, float], ...], now: float) -> float:
    """Standard deviation of the rate's tick-to-tick noise over the last NOISE_S, from the median
    absolute deviation of consecutive differences (a steady trend or a single step barely moves it)."""
    pts = [e[1] for e in rates if now - e[0] <= NOISE_S]
    diffs = sorted(b - a for a, b in zip(pts, pts[1:]))
    if len(diffs) < 3:
        return 0.0
    mid = diffs[len(diffs) // 2]  # a steady trend moves every difference alike: take it out
    dev = sorted(abs(x - mid) for x in diffs)
    # the difference of two iid normals has sd sigma*sqrt(2); its MAD is 0.6745 of that
    return 1.4826 * dev[len(dev) // 2] / math.sqrt(2.0)


def forecast(d: Demand, state: State, policy: Policy, now: float) -> tuple[float, float]:
    """(rate to plan for, horizon): the rate when a replica asked for now is ready -- the
    level (last minute's mean, or the latest sample if higher), plus a rising trend over the
    horizon (cold start + one tick), plus the rate's noise at the 95% quantile."""
    horizon = cold_start(state) + policy.interval_s
    plan = level(d, state, now) + trend(state.rates, now, horizon) * horizon + NOISE_Z * noise(state.rates, now)
    return plan, horizon


def level(d: Demand, state: State, now: float) -> float:
    """The rate now: the last minute's mean, or the latest sample if higher."""
    recent = [e[1] for e in state.rates if now - e[0] <= LEVEL_S] or [d.rate]
    return max(d.rate, sum(recent) / len(recent))


def recommend(d: Demand, planned: float, horizon: float, cap: Optional[float], cap_source: str, current: int,
              policy: Policy) -> Step:
    """Replicas for the planned rate plus draining the backlog within the horizon (replicas
    asked for now arrive after it, so nothing drains the backlog sooner), the drain bounded
    by BACKLOG_MAX_EXTRA."""
    if d.rate == 0.0 and d.window_rate == 0.0 and d.backlog == 0.0:
        return Step(policy.floor, "Idle", "no requests: back to the warm floor")
    if not cap:
        return Step(current, "LearningCapacity",
                    f"{d.rate:.1f} rps; no per-replica capacity yet ({cap_source}): holding, latency decides")
    need_rps = planned + min(d.backlog / horizon, BACKLOG_MAX_EXTRA * planned)
    n = math.ceil(need_rps / (cap * UTILISATION))
    reason = "LoadIncreased" if n > current else ("LoadDecreased" if n < current else "Steady")
    why = (f"{d.rate:.1f} rps now, planning {planned:.1f} rps"
           + (f" + {d.backlog:.0f} queued" if d.backlog >= 1 else "")
           + f" at ~{cap:.1f} rps per replica ({cap_source})")
    return Step(n, reason, why)


def breach(step: Step, obs: Observation, replicas: Replicas, cap: Optional[float], policy: Policy,
           d: Optional[Demand] = None) -> Step:
    """A p95 breach with a queue behind it that the ready replicas are not draining: at least one
    more replica than is running, unless replicas still starting will add capacity anyway."""
    target = float(policy.target_p95_ms or 0.0)
    p95 = obs.p95_ms
    if p95 is None or p95 <= target * (1.0 + policy.tolerance):
        return step
    ready = min(replicas.ready, replicas.current)
    pending = obs.pending or 0.0
    queue_work = pending / max(ready, 1) / cap * 1000.0 if cap else math.inf  # ms of work queued per replica
    # Without a queue the replicas are keeping up: either the p95 summary still remembers a backlog
    # that is gone (it lags a minute), or the model's own latency misses the target -- neither is
    # helped by more replicas. With no capacity estimate yet, latency is all there is to go by.
    # A queue that shrinks while arrivals are below what the ready replicas serve drains by itself.
    pressure = queue_work >= QUEUE_PRESSURE_TARGETS * target
    draining = bool(cap) and d is not None and d.growth < 0 and d.rate < ready * cap
    why = step.why + f"; p95 {p95:.0f} ms > target {target:.0f} ms"
    if not pressure:
        return Step(step.replicas, step.reason, why + " with no queue behind it (the summary lags)")
    if draining and ready >= replicas.current:
        return Step(step.replicas, step.reason, why + f"; the {pending:.0f} queued drain: arrivals are below "
                                                      f"what the {ready} ready replicas serve")
    if ready < replicas.current:
        if step.replicas <= replicas.current:
            return Step(replicas.current, "WaitingForWarmup",
                        why + f"; {replicas.current - ready} replica(s) still starting cover it")
        return Step(step.replicas, "LatencyAboveTarget", why)
    return Step(max(step.replicas, replicas.current + 1), "LatencyAboveTarget", why + ", queue building")


def tolerate(step: Step, planned: float, cap: Optional[float], current: int, policy: Policy) -> Step:
    """Hysteresis on the way down: scale down only to a count whose load stays below the plan by
    the tolerance (otherwise a rate wobbling around a boundary flips the count each tick); none
    at all while the current count's load is within the tolerance."""
    if not cap or step.replicas >= current or current <= 0 or step.reason == "Idle":
        return step
    load = planned / (current * cap * UTILISATION)
    if load >= 1.0 - policy.tolerance:
        return Step(current, "WithinTolerance", step.why + f"; load {load:.0%} of plan is within tolerance")
    down = min(current, max(step.replicas, math.ceil(planned / (cap * UTILISATION * (1.0 - policy.tolerance)))))
    if down > step.replicas:
        return Step(down, step.reason if down < current else "WithinTolerance",
                    step.why + f"; {step.replicas} would run within {policy.tolerance:.0%} of full: {down}")
    return step


def scale_down_window(policy: Policy, state: State) -> tuple[float, str]:
    """The scale-down look-back window and why: the spec's, or one cold start (a replica idle
    for less than a cold start is cheaper kept than re-created)."""
    if policy.scale_down_stabilization_s is not None:
        return policy.scale_down_stabilization_s, "spec"
    return max(SCALE_DOWN_COLD_STARTS * cold_start(state), 2 * policy.interval_s), "cold start"


def burst_hold(state: State, now: float) -> float:
    """How long the burst memory holds the peak need after the last surprise (0: no surprise)."""
    if len(state.surprises) < SURPRISES_FOR_MEMORY:
        return 0.0
    hold = SURPRISE_HOLD_COLD_STARTS * cold_start(state)
    gaps = [b - a for a, b in zip(state.surprises, state.surprises[1:])]
    if gaps:
        hold = max(hold, BURST_HOLD_GAPS * max(gaps))
    hold = min(hold, MAX_BURST_HOLD_S)
    return hold if now - state.surprises[-1] <= hold else 0.0


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
    memory holds, the highest bare need (the rate at full capacity, no breach extra) since the
    last surprise's hold began."""
    window, source = scale_down_window(policy, state)
    hold = burst_hold(state, now)
    keep = max(policy.scale_up_stabilization_s, window, hold)
    seed = (now - 0.001, current, current) if not state.recommendations else None
    if seed is not None:
        # No memory (a new object, lost status, a Deployment scaled by hand): assume the current
        # size was recommended just now, as the HPA does, so the first low reading cannot scale
        # down without a whole window. Stamped a millisecond back so a zero-length window does
        # not see it; scale-up ignores it altogether.
        state = replace(state, recommendations=(seed,))
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
                why += (f"; holding the peak need of {burst} for {hold:.0f}s after the rate outran the "
                        f"replicas {now - state.surprises[-1]:.0f}s ago")
            else:
                reason = "StabilizingScaleDown"
                why += f"; highest recommendation in the last {window:.0f}s ({source}) is {held}"
    return Step(desired, reason, why), state


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
                    step.why + f"; {replicas.unschedulable} pod(s) cannot be scheduled "
                               f"(no node has the resources): not asking for more")
    if n == policy.max_replicas and step.replicas >= policy.max_replicas and n > replicas.current - 1 \
            and step.reason in ("LoadIncreased", "LatencyAboveTarget"):
        return Step(n, "AtMaxReplicas", step.why + f"; at maxReplicas={policy.max_replicas}")
    return Step(n, step.reason, step.why)


def decide(obs: Observation, replicas: Replicas, policy: Policy, state: State, now: float) -> Decision:
    current = replicas.current
    details: dict[str, Any] = {"current": current, "ready": replicas.ready, "floor": policy.floor,
                               "max": policy.max_replicas}

    def done(step: Step, st: State, ok: bool) -> Decision:
        n = _clamp(step.replicas, policy.floor, policy.max_replicas)
        if n != current:
            st = replace(st, last_scale_time=now)
        return Decision(n, step.reason, f"{step.why} -> {n} replicas", st, ok, details)

    held, state, ok = guard(obs, replicas, policy, state)
    if held is not None:
        return done(held, state, ok)
    target = float(policy.target_p95_ms or 0.0)
    d = demand(obs, state, now)
    state = learn(state, obs, replicas, policy, now, d.rate)
    cap, source = capacity(state, policy, target)
    planned, horizon = forecast(d, state, policy, now)
    details.update(rps=obs.rps, rate=d.rate, planned_rps=planned, horizon_s=horizon, backlog=d.backlog,
                   p95_ms=obs.p95_ms, capacity_rps=cap)
    state = replace(state, rates=state.rates[:-1] + ((now, d.rate, planned),))
    state = surprise(state, d, now)
    demanded = recommend(d, planned, horizon, cap, source, current, policy)
    step = breach(demanded, obs, replicas, cap, policy, d)
    step = tolerate(step, planned, cap, current, policy)
    details["recommendation"] = step.replicas
    bare = math.ceil(level(d, state, now) / cap) if cap else current
    step, state = stabilize(step, state, policy, current, now, max(demanded.replicas, step.replicas), bare)
    step = limit(step, current, policy)
    step = clamp(step, replicas, policy)
    return done(step, state, True)
