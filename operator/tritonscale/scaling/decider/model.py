"""What the decider sees, remembers and answers: Observation, Replicas, Policy, State, Decision."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

SourceStatus = Literal["ok", "no_data", "failed"]
# Why a source gave no answer at all (MetricsAvailable's reason): Prometheus did not answer, or a setting
# left nothing to ask (no URL; --allowed-prometheus-url refuses the one given).
SourceFailure = Literal["PrometheusUnavailable", "NoPrometheusURL", "PrometheusNotAllowed"]


class PendingReading(NamedTuple):
    """What one tick keeps of its queue reading for the next (``State.last_pending``). Memories
    written by older versions hold only the first two to five fields; the rest take the defaults,
    which read as "not known". Saved as a list up to the first unknown field."""

    at: float  # when the pending gauge was scraped
    pending: float  # requests queued then, over all replicas
    ready: float | None = None  # replicas ready at that tick
    growth: float = 0.0  # the queue's growth per second read at that tick
    pending_min: float = 0.0  # the least-queued replica's queue
    ready_before: float | None = None  # replicas ready at the tick before it (None: not known)
    joined_at: float | None = None  # the last tick at which the ready count rose (None: not known)


def _known_prefix(reading: PendingReading) -> list[float]:
    """The fields up to the first unknown one, rounded (a shorter list reads back as 'not known')."""
    out: list[float] = []
    for v in reading:
        if v is None:
            break
        out.append(round(v, 3))
    return out


@dataclass(frozen=True)
class Observation:
    """What the metric source saw for one InferenceService this tick."""

    status: SourceStatus
    p95_ms: float | None = None  # None: no value (idle model reports NaN)
    rps: float | None = None  # successes per second over the window; None: no series; 0.0: idle
    queue_ms: float | None = None
    pending: float | None = None  # requests queued now (nv_inference_pending_request_count)
    pending_min: float | None = None  # the same gauge on the least-queued pod (min over pods)
    pending_max: float | None = None  # ... and on the most-queued pod (max over pods)
    batch_size: float | None = None  # mean requests per model execution
    # Mean items (inferences) per request: maxBatchSize counts items, so a full batch holds
    # maxBatchSize / this many requests. None: one each (the simulator's requests).
    items_per_request: float | None = None
    batch_ms: float | None = None  # mean execution time of one batch
    failed_rps: float | None = None  # requests rejected (queue policy) per second, over the window
    recent_rps: float | None = None  # success + failure rate between the last two scrapes (irate)
    recent_served_rps: float | None = None  # success rate between the last two scrapes (irate)
    # When the pending gauge was scraped (epoch seconds, the mean over pods): the queue's growth
    # is a change between scrapes. None: take the tick's own time.
    pending_at: float | None = None
    # Pods whose Triton series Prometheus has now (not stale): fewer than the ready replicas means
    # the rates miss some pods' traffic (their scrapes fail, or they are not scraped yet). None: not known.
    pods: float | None = None
    # Of those, the pods whose series have a rate over the window (two scrapes in it): fewer than
    # ``pods`` means the window misses some pods' traffic -- a pod scraped once so far, or a window
    # shorter than two scrape intervals, where only the pods whose scrape phase fits it have a rate.
    # None: not known (taken as ``pods``).
    rate_pods: float | None = None
    # Seconds between the last two scrapes of the most often scraped pod (None: not known). Read
    # only for a status note: the decider plans from the readings as they come.
    scrape_s: float | None = None
    message: str = ""
    # status "failed": why (MetricsAvailable's reason) -- Prometheus did not answer, or no URL / one
    # --allowed-prometheus-url refuses left nothing to ask. The decider holds alike for each.
    failure: SourceFailure = "PrometheusUnavailable"


@dataclass(frozen=True)
class Replicas:
    current: int  # Deployment spec.replicas (includes replicas still starting)
    ready: int  # replicas whose model is loaded and warm
    # Pods the scheduler could not place (PodScheduled=False, reason Unschedulable, e.g.
    # insufficient nvidia.com/gpu), and replicas whose pods the ReplicaSet may not create (the
    # Deployment's ReplicaFailure: a quota on nvidia.com/gpu): asking for more would only add more
    # Pending or refused pods.
    unschedulable: int = 0
    # Pods on nodes cordoned for a drain (spec.unschedulable): about to be evicted, which the
    # PodDisruptionBudget refuses while they are the warm floor (steps.drain_surge).
    draining: int = 0
    # Seconds from creation to Ready of pods seen becoming ready since the last tick
    # (the cold start: image pull, Triton start, model load and warmup).
    startup_s: tuple[float, ...] = ()
    # What the pods serve: a digest of the model and runtime the Deployment was made from (None:
    # unknown). The batch cost and capacity learned on one model say nothing of another.
    serving: str | None = None
    # A new pod template rolling out: old and new pods serve side by side.
    rolling_out: bool = False


@dataclass(frozen=True)
class Demand:
    """Arrivals this tick (``signals.demand``): what the plan is made for."""

    rate: float  # arrival rate now (requests per second)
    window_rate: float  # over the rate window (lags)
    backlog: float  # requests queued now
    growth: float = 0.0  # the queue's change since the last tick, per second
    last: PendingReading | None = None  # the last tick's queue reading (None: no last tick)


@dataclass(frozen=True)
class Policy:
    min_replicas: int = 1
    max_replicas: int = 10
    target_p95_ms: float | None = None
    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_up_max_step: int = 4
    scale_down_stabilization_s: float | None = None  # None: learned (cold start, burst memory)
    scale_down_max_step: int = 1
    warm_buffer: int = 0
    fallback_replicas: int | None = None
    failure_threshold: int = 3
    max_batch_size: int = 1  # the model's maxBatchSize (0 in the spec means no batching: 1)
    interval_s: float = 15.0
    window_s: float = 60.0  # the rate() window (spec.scaling.windowSeconds): the plan's level is its mean
    # The batcher settings in force (status.batching while the tuner runs, else the spec's): the
    # capacity at the target follows them (capacity.batch_capacity).
    queue_delay_ms: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()

    @property
    def floor(self) -> int:
        return min(self.min_replicas + self.warm_buffer, self.max_replicas)

    @classmethod
    def from_spec(cls, scaling: Any, max_batch_size: int = 1) -> Policy:
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
            window_s=float(scaling.window_seconds),
        )


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def _sig(v: float) -> float:
    """``v`` to six significant digits: a measurement kept for a restart (a batch of a fast model takes
    0.0004 ms per item) must not round to 0 -- read back, a zero cost divided every later tick by it."""
    return float(f"{v:.6g}")


@dataclass(frozen=True)
class State:
    """Autoscaler memory. Serialisable (``to_dict``) so it survives an operator restart."""

    # (time, recommendation, bare need): the bare need is the peak rate at full capacity,
    # without noise or trend headroom -- what the burst memory holds
    recommendations: tuple[tuple[float, int, int], ...] = ()
    failures: int = 0
    capacity_rps: float | None = None  # p95-learned per-replica rate at target (fallback)
    capacity_ceiling_rps: float | None = None  # upper bound set by the last breach, relaxing
    batch_samples: tuple[tuple[float, float, float], ...] = ()  # (mean batch size, mean batch ms, when)
    last_scale_time: float | None = None
    rates: tuple[tuple[float, float, float], ...] = ()  # (time, arrival rate, rate its plan's replicas serve)
    cold_start_s: float | None = None  # learned creation-to-ready time
    surprises: tuple[float, ...] = ()  # unforeseen jumps: demand outran the plan (or fell suddenly)
    last_pending: PendingReading | None = None  # the last tick's queue reading
    last_batch_size: float | None = None  # mean batch size at the last tick
    # (when, observed / M/D/1 p95 wait, per-replica rps, ready replicas): how much queueing the
    # traffic makes against the Poisson model, for models that do not batch (capacity.learn_queueing)
    queueing: tuple[tuple[float, float, float, float], ...] = ()
    # Replicas.serving the capacity was learned on; ROLLING_MARK appended while it was rolling out
    # (signals.forget_model), and when that rollout was seen done
    serving: str | None = None
    rolled_out_at: float | None = None
    # the replica count was last raised on a capacity guessed from one batch size (capacity.GUESSED):
    # once the capacity is known, the dead band does not hold that count (steps.tolerate)
    raised_on_guess: bool = False
    # replicas the last decision added for pods on a node being drained (steps.drain_surge): a hold while the
    # metrics fail keeps the count without them, so they go when the drain ends (they stayed for good, and
    # each tick of a drain added its pods again on top of the last surge, up to maxReplicas)
    drain_surge: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[round(t, 3), r, b] for t, r, b in self.recommendations],
            "failures": self.failures,
            "capacityRps": _r(self.capacity_rps, 4),
            "capacityCeilingRps": _r(self.capacity_ceiling_rps, 4),
            "batchSamples": [[_sig(n), _sig(t), round(w, 1)] for n, t, w in self.batch_samples],
            "lastScaleTime": self.last_scale_time,
            "rates": [[round(t, 1), round(r, 2), round(p, 2)] for t, r, p in self.rates],
            "coldStartSeconds": _r(self.cold_start_s, 1),
            "surprises": [round(t, 1) for t in self.surprises],
            "lastPending": None if self.last_pending is None else _known_prefix(self.last_pending),
            "lastBatchSize": _r(self.last_batch_size),
            "queueing": [[round(t, 1), _sig(k), _sig(r), n] for t, k, r, n in self.queueing],
            "serving": self.serving,
            "rolledOutAt": _r(self.rolled_out_at, 1),
            "raisedOnGuess": self.raised_on_guess,
            "drainSurge": self.drain_surge,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> State:
        if not d:
            return cls()
        try:
            lp = d.get("lastPending")
            return cls(
                recommendations=tuple((_finite(e[0]), int(e[1]), int(e[-1]))
                                      for e in d.get("recommendations") or ()),
                failures=int(d.get("failures") or 0),
                capacity_rps=_float_or_none(d.get("capacityRps")),
                capacity_ceiling_rps=_float_or_none(d.get("capacityCeilingRps")),
                # a batch of no size or no time is no measurement (the capacity divides by both)
                batch_samples=tuple((_finite(e[0]), _finite(e[1]), _finite(e[2]) if len(e) > 2 else 0.0)
                                    for e in d.get("batchSamples") or () if _finite(e[0]) > 0 < _finite(e[1])),
                last_scale_time=_epoch_or_none(d.get("lastScaleTime")),
                rates=tuple((_finite(e[0]), _finite(e[1]), _finite(e[-1])) for e in d.get("rates") or ()),
                cold_start_s=None if d.get("coldStartSeconds") is None else _finite(d["coldStartSeconds"]),
                surprises=tuple(_finite(t) for t in d.get("surprises") or ()),
                last_pending=(PendingReading(*(_finite(v) for v in lp[:len(PendingReading._fields)]))
                              if lp and len(lp) >= 2 else None),
                last_batch_size=None if d.get("lastBatchSize") is None else _finite(d["lastBatchSize"]),
                # entries of fewer fields (one development version wrote three) are dropped, not the memory
                queueing=tuple((_finite(e[0]), _finite(e[1]), _finite(e[2]), _finite(e[3]))
                               for e in d.get("queueing") or () if len(e) >= 4),
                serving=None if d.get("serving") is None else str(d["serving"]),
                rolled_out_at=None if d.get("rolledOutAt") is None else _finite(d["rolledOutAt"]),
                raised_on_guess=d.get("raisedOnGuess") is True,  # anything else (absent, "true", 1): not
                drain_surge=max(0, int(d.get("drainSurge") or 0)),
            )
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError):
            # corrupt or hand-edited memory (a list of maps, a number as a string, 1e400 read as infinity
            # by int()): start fresh rather than fail every tick -- the tick rewrites the memory it starts with
            return cls()

    def scale_time_from(self, before: State, now: float, interval: float) -> State:
        """This memory (decide's, of ``now``) with the lastScaleTime of ``before`` (the memory it started
        from), on this memory's clock (``until``): for a scale the API server refused."""
        return replace(self, last_scale_time=before.until(now, interval).last_scale_time)

    def until(self, now: float, interval: float) -> State:
        """The memory on this clock: the operator's stamps at most one ``interval`` ahead of ``now``. A
        memory whose stamps run further ahead (a leader on a node whose clock runs ahead) is shifted back
        whole, its newest stamp to one interval before ``now``, as if its last tick were the one before
        this: the entries keep their spacing (the rate's trend) and order, and the next reading comes after
        them. Cut instead (until session 86), a memory from a clock 60-120 s ahead lost its newest entries
        (the fleet went down a tick early), and one 600 s ahead kept its look-back 45 s too long (session
        85's HA audit, S4). ``last_pending.at`` is Prometheus' clock (when the queue was scraped): neither
        read nor shifted. A stamp more than MAX_CLOCK_AHEAD_S ahead is no clock's (a hand edit, milliseconds
        for seconds): such entries are dropped, the rest kept as they are."""
        def operator_stamps(state: State) -> list[float]:
            pending = state.last_pending
            return [e[0] for e in state.recommendations] + [e[0] for e in state.rates] + list(state.surprises) + [
                e[2] for e in state.batch_samples] + [e[0] for e in state.queueing] + [
                x for x in (state.last_scale_time, state.rolled_out_at,
                            None if pending is None else pending.joined_at) if x is not None]

        if max(operator_stamps(self), default=now) <= now + interval:
            return self
        bogus = now + MAX_CLOCK_AHEAD_S

        def kept(stamp: float | None) -> bool:
            return stamp is None or stamp <= bogus

        state = replace(
            self, recommendations=tuple(e for e in self.recommendations if kept(e[0])),
            rates=tuple(e for e in self.rates if kept(e[0])), surprises=tuple(x for x in self.surprises if kept(x)),
            batch_samples=tuple(e for e in self.batch_samples if kept(e[2])),
            queueing=tuple(e for e in self.queueing if kept(e[0])),
            last_scale_time=self.last_scale_time if kept(self.last_scale_time) else None,
            rolled_out_at=self.rolled_out_at if kept(self.rolled_out_at) else None,
            last_pending=(self.last_pending if self.last_pending is None or kept(self.last_pending.joined_at)
                          else self.last_pending._replace(joined_at=None)))
        newest = max(operator_stamps(state), default=now)
        if newest <= now + interval:
            return state
        back = newest - (now - interval)

        def at(stamp: float) -> float:
            return stamp - back

        pending = state.last_pending
        return replace(
            state,
            recommendations=tuple((at(e[0]), *e[1:]) for e in state.recommendations),
            rates=tuple((at(e[0]), *e[1:]) for e in state.rates),
            surprises=tuple(at(x) for x in state.surprises),
            batch_samples=tuple((e[0], e[1], at(e[2])) for e in state.batch_samples),
            queueing=tuple((at(e[0]), *e[1:]) for e in state.queueing),
            last_scale_time=None if state.last_scale_time is None else at(state.last_scale_time),
            rolled_out_at=None if state.rolled_out_at is None else at(state.rolled_out_at),
            last_pending=(pending if pending is None or pending.joined_at is None
                          else pending._replace(joined_at=at(pending.joined_at))),
        )


# The most a memory's stamps may run ahead of this clock and still be read as another node's clock (shifted
# back, ``State.until``): clocks under NTP differ by seconds, a badly set one by minutes. Further ahead is no
# clock (a hand edit, milliseconds read as seconds), and only those entries go.
MAX_CLOCK_AHEAD_S = 3600.0


# What a remembered number may be: the memory holds times (epoch seconds, at most MAX_EPOCH_S), rates,
# milliseconds and batch sizes, none near 1e12. Past it a number is corrupt (a hand edit): 1e300 rates
# overflowed the trend's sums, and a capacity of 5e-324 a division, on every tick (session 104's fuzzing of
# status). Below the floor a number is taken as 0 (a capacity of 0 is none yet; a batch of size 0 is dropped).
MAX_REMEMBERED = 1e12
MIN_REMEMBERED = 1e-9


def _finite(v: Any) -> float:
    """A float that JSON can carry back and the decider's arithmetic can take: "inf" or "nan" in a
    hand-edited status would be written back as Infinity or NaN, which the API server refuses -- every
    later status patch would fail; and a magnitude past MAX_REMEMBERED is refused too."""
    f = float(v)
    if not math.isfinite(f) or abs(f) > MAX_REMEMBERED:
        raise ValueError(f"not a finite number within {MAX_REMEMBERED:g}: {v!r}")
    return 0.0 if abs(f) < MIN_REMEMBERED else f


def _float_or_none(v: Any) -> float | None:
    return None if v is None else _finite(v)


# The last second of year 9999: status.lastScaleTime is written as an RFC 3339 time from this.
MAX_EPOCH_S = 253402300799.0


def _epoch_or_none(v: Any) -> float | None:
    t = _float_or_none(v)
    if t is not None and not 0.0 <= t <= MAX_EPOCH_S:
        raise ValueError(f"not a time: {v!r}")
    return t


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
