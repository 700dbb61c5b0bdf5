"""The online dynamic-batching tuner, as one pure function.

    tune(observation, settings in force, bounds, state, now) -> Tuning(settings, reason, message, state)

The operator's tick (``scaling/tick.py``, while ``spec.batching.autoTune.enabled``) and the
simulator (``tritonscale simulate --batching-tuner``) both call it. It imports nothing from
tritonscale but the decider's batcher model (``decider/batcher_model.py``), so the capacity it
tunes for is the capacity the decider then plans with.

What it optimises: replicas = rate / capacity per replica, so the settings that give one replica
the most capacity at the p95 target -- the largest arrival rate whose predicted p95 stays under
the target -- and, among settings within CAPACITY_TIE of that, the lowest predicted p95 at the
rate each replica sees now (the most headroom; within P95_TIE, the plainest config). In the
batcher model (Triton's batching rule over Poisson arrivals, one model instance, batch cost
a + b*n), a delay longer than the batch time only holds batches back (p95 ~ delay + a +
b*lambda*delay), and a delay no longer than it has expired whenever the instance frees (batches
are "whatever is queued"): the capacity at the target is about the same whatever the delay up
to ~T/2, and the tuner's gain is taking an oversized delay, or a preferred size that cuts batches
short, back to that. Example (a=20 ms, b=2 ms, max batch 16, T=104 ms): a 100 ms delay predicts
p95 >= 115 ms at every rate -- no rate meets the target -- against 265 rps at the target with no
delay (what the decider plans it with; Triton's rule over the model's sample reads 277).

When it may change (reasons in CamelCase, for status.batching.reason):

* never while a rollout runs (``rollout``: pods not all updated and ready) -- Rollout;
* never without the cost fit, the target or a rate -- LearningCost / NoTarget / Idle;
* out-of-bounds settings are brought within them at once -- Bounds (the operator never passes
  any: tuned settings a narrowed spec no longer admits are brought within it as they are read,
  ``api.status.within_spec``, status.batching SpecNarrowed, by the same rule as ``Bounds.within``);
* while p95 breaches the target (above target x (1 + spec.scaling.tolerance), as for the decider)
  only when the settings in force are predicted to miss the target at the rate now, to settings
  predicted to lower p95 there by more than P95_TIE, and then at once -- BreachRelief (otherwise
  Breach: the decider answers a breach the settings do not cause with replicas);
* otherwise only for at least MIN_CAPACITY_GAIN more capacity or MIN_HEADROOM_GAIN x target
  less predicted p95 (hysteresis: smaller gains are within the fit's error), proposed by the
  same candidate for CONFIRM_S, and no sooner than MIN_CHANGE_INTERVAL_S after the last change
  (each change rolls every replica, a cold start each) -- MoreCapacity / MoreHeadroom;
* except away from settings with which no rate meets the target (capacity 0: a delay the target
  cannot hold, as ``--batching-tuner-from 150000`` starts the sandbox with): at once, as for a breach
  relief, even while p95 is within the decider's tolerance -- every request misses until they go, and
  proposals over a minute cannot say more than the model does -- MoreCapacity.

How a change rolls out (``TunerState.at_once``, which the reconciler renders as the Deployment's maxSurge):
every replica's successor starts at once (maxSurge 100%; maxUnavailable stays 0, so every old pod serves
until its successor is ready). A rollout's extra replica-time is one cold start per pod replaced however
many start together, but what it disturbs -- the readings as pods are replaced, batches mixed from two
configs, the decider's and the tuner's waits for it -- lasts one cold start, not replicas / maxSurge of
them (a quarter of the fleet at a time, Kubernetes' default, ran a change made in a flat minute into the
next climb). A full GPU pool grants the new pods one by one as old ones leave, the gradual rollout again.
Until session 101 only a change away from settings predicted to miss the target rolled at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from tritonscale.scaling.decider.batcher_model import p95_at, planned_capacity
from tritonscale.scaling.decider.steps import ms_text

# Delays tried (ms), up to the bound: a geometric ladder; the batch time of typical models
# (a few ms to ~100 ms) sits inside it, and the model says finer steps change nothing.
DELAY_LADDER_MS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
# Capacities within 2% count as equal: the cost fit's error is larger (suite: b is fitted
# within ~5% on steady ticks), so chasing a 2% gain would change settings on noise.
CAPACITY_TIE = 0.02
# Predicted p95s within 5% count as equal: the batcher model reads p95 off 2,000 Poisson arrivals, within
# 8% of the simulated replica's (tests/simulate/test_replica.py). Every candidate is served the same
# sample, so their differences are steadier than that, but a 0.5 ms delay "1% faster" than none is still
# the sample's noise, not a reason to prefer it. (Measured with it: the tuner's suite, seeds 0-1 49/56,
# held-out seeds 3-4 52/56; the README.)
P95_TIE = 0.05
# Hysteresis: a change must buy this much (capacity 5% = one replica in 20; headroom 10% of target).
MIN_CAPACITY_GAIN = 0.05
MIN_HEADROOM_GAIN = 0.10
# The same candidate must win for this long before it is applied (four 15 s ticks: a minute of
# one per-replica rate, not a single tick's noise) ...
CONFIRM_S = 60.0
# ... and changes are at least this far apart: the operator applies a change by rolling every
# replica (one cold start each, every pod at once; README "Applying a batcher change"),
# and the cost fit needs a few minutes of the new batches.
MIN_CHANGE_INTERVAL_S = 600.0
# After a change's rollout was stuck and went back: a cluster with no room for the rollout's extra
# pod (or a config its pods cannot start) rarely has it minutes later, so the tuner waits an hour
# rather than roll and go back at every MIN_CHANGE_INTERVAL_S.
STUCK_HOLD_S = 3600.0
# status.batching.tunerState's key for ``TunerState.at_once``, which the reconciler reads too
# (``api.status.rollout_at_once``): the rollout of the settings in force starts every new pod at once.
AT_ONCE_KEY = "rolloutAtOnce"


@dataclass(frozen=True)
class Settings:
    """Triton dynamic_batching settings: max_queue_delay_microseconds and preferred_batch_size."""

    delay_us: int = 0
    preferred: tuple[int, ...] = ()

    @property
    def delay_ms(self) -> float:
        return self.delay_us / 1000.0

    def describe(self) -> str:
        prefs = ",".join(str(p) for p in self.preferred) or "none"
        return f"delay {self.delay_us} us, preferred [{prefs}]"


@dataclass(frozen=True)
class Bounds:
    """What the tuner may use (spec.batching.autoTune)."""

    max_batch: int
    max_delay_us: int | None = None  # None: what the target leaves after a full batch
    preferred: tuple[int, ...] = ()  # sizes it may prefer; empty: any up to max_batch
    timeout_us: int | None = None  # the spec's queue timeout (REJECT), if it set one

    def delay_limit_us(self, cost: tuple[float, float] | None, target_ms: float | None) -> int:
        """The longest delay a candidate may have: autoTune.maxQueueDelayMicroseconds, else what the
        target leaves after a full batch -- and what the spec's queue timeout leaves after one (a request
        held for the whole delay may then wait for the batch running ahead of it; past the timeout
        Triton rejects it). The spec's rules keep an explicit bound within the timeout."""
        if self.max_delay_us is not None:
            return self.max_delay_us
        if cost is None or not target_ms:
            return 0
        a, b = cost
        full_ms = a + b * self.max_batch
        limit = target_ms - full_ms
        if self.timeout_us:
            limit = min(limit, self.timeout_us / 1000.0 - full_ms)
        return max(0, round(1000.0 * limit))

    def permits(self, size: int) -> bool:
        """``size`` is within the bounds: one of autoTune.preferredBatchSizes, or, with none given,
        any size from 1 to model.maxBatchSize (the spec's [6, 12] is as allowed as [4, 8])."""
        return size in self.preferred if self.preferred else 1 <= size <= self.max_batch

    def candidate_sizes(self) -> tuple[int, ...]:
        """The preferred sizes the tuner tries: the allowed ones, or, with none given, the powers of two
        and the maximum (the model says finer steps change little; the bound is still ``permits``)."""
        if self.preferred:
            return tuple(sorted({p for p in self.preferred if 1 <= p <= self.max_batch}))
        sizes = {self.max_batch}
        p = 1
        while p < self.max_batch:
            sizes.add(p)
            p *= 2
        return tuple(sorted(sizes))

    def within(self, s: Settings) -> Settings:
        """``s`` within the spec's explicit bounds: the delay capped at maxQueueDelayMicroseconds, preferred
        sizes the bounds do not permit dropped. (The implied delay bound only limits the candidates.)"""
        delay = s.delay_us if self.max_delay_us is None else min(s.delay_us, self.max_delay_us)
        return Settings(delay, tuple(p for p in s.preferred if self.permits(p)))


@dataclass(frozen=True)
class TunerObservation:
    cost: tuple[float, float] | None  # batch ms = a + b*n (the decider's lower-envelope fit)
    rate_per_replica: float | None  # arrival rate per ready replica (rps)
    target_ms: float | None  # p95 target
    p95_ms: float | None = None  # observed p95 (None: idle / unknown)
    rollout: bool = False  # pods not all updated and ready: a change now would stack reloads
    # A new pod template rolling out: pods of the earlier one remain (a scale-up alone is not one)
    updating: bool = False
    # ... and past the Deployment's progress deadline (Progressing=False, ProgressDeadlineExceeded): its
    # new pods cannot be placed (no GPU for the surge pod) or never become ready; or none of them may be
    # created (ReplicaFailure: a full GPU quota; ``batching_status.rollout_stuck``)
    stuck: bool = False
    # spec.scaling.tolerance: a p95 up to target x (1 + tolerance) is no breach, as for the decider (steps.breach)
    tolerance: float = 0.0
    # ``rollout`` is raised only by replicas of the template in force still starting (a scale-up): no pod of an
    # earlier template left, and no template waiting to roll out. A change away from settings that miss the
    # target does not wait for them (``tune``)
    starting: bool = False
    # ``cost`` is the decider's guess from one batch size (``decider.guessed_cost``), what it plans with until the
    # samples tell the cost: enough to see that no rate meets the target with the settings in force, not to rank
    # candidates by (``tune``)
    cost_guessed: bool = False


def _settings_dict(s: Settings | None) -> dict[str, Any] | None:
    return None if s is None else {"delayUs": s.delay_us, "preferred": list(s.preferred)}


def _settings_of(d: Any) -> Settings | None:
    return None if not d else Settings(int(d["delayUs"]), tuple(int(p) for p in d.get("preferred") or ()))


@dataclass(frozen=True)
class TunerState:
    candidate: Settings | None = None
    candidate_since: float | None = None
    last_change: float | None = None
    # The settings before the last change, while its rollout runs: what the running pods serve, and
    # where a stuck rollout goes back to
    previous: Settings | None = None
    held_until: float | None = None  # after a stuck rollout went back: no change before this
    rolling_seen: bool = False  # the last change's rollout was seen under way (so its end is its end)
    cost: tuple[float, float] | None = None  # the batch cost the candidates were last scored with
    # The last change's rollout starts every replica's successor at once (maxSurge 100%,
    # ``render.kubernetes_objects.rollout_surge``), not a quarter of the fleet per cold start: set by every change
    # (session 101; before, only by one away from settings predicted to miss the target). Cleared with
    # ``previous``, once it rolled out, so that other rollouts (a spec edit) go a quarter at a time.
    at_once: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": _settings_dict(self.candidate), "candidateSince": self.candidate_since,
                "lastChange": self.last_change, "previous": _settings_dict(self.previous),
                "heldUntil": self.held_until, "rollingSeen": self.rolling_seen,
                "cost": None if self.cost is None else list(self.cost), AT_ONCE_KEY: self.at_once}

    @classmethod
    def from_dict(cls, d: Any) -> TunerState:
        if not isinstance(d, dict):
            return cls()
        try:
            times = [None if t is None else float(t)
                     for t in (d.get("candidateSince"), d.get("lastChange"), d.get("heldUntil"))]
            if any(t is not None and not math.isfinite(t) for t in times):
                raise ValueError("not a finite time")  # written back as NaN, the status patch would fail
            return cls(_settings_of(d.get("candidate")), times[0], times[1], _settings_of(d.get("previous")),
                       times[2], d.get("rollingSeen") is True, _cost_of(d.get("cost")), d.get(AT_ONCE_KEY) is True)
        except (TypeError, ValueError, KeyError, OverflowError):
            return cls()  # corrupt memory (1e400 read as infinity): start fresh rather than crash the tick


def _cost_of(v: Any) -> tuple[float, float] | None:
    """A stored cost [a, b], or None (absent, or not two finite non-negative numbers: re-fitted)."""
    if not isinstance(v, list) or len(v) != 2:
        return None
    try:
        a, b = float(v[0]), float(v[1])
    except (TypeError, ValueError, OverflowError):
        return None
    return (a, b) if all(math.isfinite(x) and x >= 0.0 for x in (a, b)) else None


def scoring_cost(fitted: tuple[float, float], kept: tuple[float, float] | None, max_batch: int) -> tuple[float, float]:
    """The cost to score candidates with: the one they were last scored with while the fit stays
    within CAPACITY_TIE of it at both ends of the batch range (a batch of one and a full one), else
    the fit. A cost that close moves every capacity by about as much, which the tuner already
    counts as a tie; re-scoring on each tick's jitter of the fit (the suite: +-0.5% tick to tick)
    served the batcher model's sample to all the candidates again each time, about 3 s of CPU."""
    if kept is None:
        return fitted

    def batch_ms(c: tuple[float, float], n: int) -> float:
        return c[0] + c[1] * n

    close = all(abs(batch_ms(fitted, n) - batch_ms(kept, n)) <= CAPACITY_TIE * batch_ms(kept, n)
                for n in (1, max(1, max_batch)))
    return kept if close else fitted


@dataclass(frozen=True)
class Tuning:
    settings: Settings  # to be in force after this call
    reason: str
    message: str
    state: TunerState
    changed: bool


@dataclass(frozen=True)
class Score:
    capacity_rps: float  # per replica, p95 at the target
    p95_now_ms: float  # predicted at the rate per replica now


def score(s: Settings, cost: tuple[float, float], max_batch: int, target_ms: float, rate: float) -> Score:
    """Capacity at the target (0: no rate meets it) and p95 now. The capacity is the one the decider
    plans these settings with (``batcher_model.planned_capacity``; session 91: until then the sample's
    figure, up to 4-5% above it, which changed no run of e2e/bench_batching_tuner.py). Both depend on
    the cost only through the batcher model's curves, cached on the cost to three significant digits
    (finer than the fit's error; rounded to 0.1 ms and 0.01 ms per item, a fast model's 0.04 + 0.004n
    ms was a cost of 0, and its capacity a division by it); p95 now is read off the curve
    (``batcher_model.p95_at``)."""
    return Score(planned_capacity(cost, max_batch, target_ms, s.delay_ms, s.preferred, best_effort=False),
                 p95_at(cost, max_batch, s.delay_ms, s.preferred, rate))


def candidates(current: Settings, bounds: Bounds, cost: tuple[float, float], target_ms: float) -> list[Settings]:
    """Delays on the ladder up to the bound (and the bound itself) x no preferred size, each
    allowed size alone, all allowed sizes; and the settings in force."""
    limit = bounds.delay_limit_us(cost, target_ms)
    delays = sorted({round(d * 1000) for d in DELAY_LADDER_MS if d * 1000 <= limit} | {limit})
    sizes = bounds.candidate_sizes()
    prefs: list[tuple[int, ...]] = [()] + [(p,) for p in sizes] + ([sizes] if len(sizes) > 1 else [])
    out = [Settings(d, p) for d in delays for p in prefs]
    return out + ([current] if current not in out else [])


def best(cands: list[Settings], scores: dict[Settings, Score]) -> Settings:
    """The most capacity; within CAPACITY_TIE of it, the lowest p95 now (within P95_TIE), then the
    shortest delay and the fewest preferred sizes (the plainest config)."""
    top = max(scores[c].capacity_rps for c in cands)
    tied = [c for c in cands if scores[c].capacity_rps >= top * (1.0 - CAPACITY_TIE)]
    low = min(scores[c].p95_now_ms for c in tied)
    calm = [c for c in tied if scores[c].p95_now_ms <= low * (1.0 + P95_TIE)] if math.isfinite(low) else tied
    return min(calm, key=lambda c: (c.delay_us, len(c.preferred), c.preferred))


ROLLOUT_WHY = "pods are not all updated and ready: no change until the rollout ends"


def tune(obs: TunerObservation, current: Settings, bounds: Bounds, state: TunerState, now: float) -> Tuning:
    def hold(reason: str, why: str, st: TunerState | None = None) -> Tuning:
        return Tuning(current, reason, why, state if st is None else st, False)  # ``state`` as it is by then

    def change(to: Settings, reason: str, why: str) -> Tuning:
        # Every change rolls out to every replica at once (``at_once``; the module's docstring says why: the same
        # extra replica-time, the disturbance over one cold start in, not replicas / maxSurge of them -- 9 minutes
        # for 4 pods at a 180 s cold start: README, "Applying")
        message = f"{current.describe()} -> {to.describe()}: {why}; rolled out to every replica at once"
        return Tuning(to, reason, message, TunerState(None, None, now, previous=current, cost=state.cost,
                                                      at_once=True), True)

    if obs.updating and obs.stuck and state.previous is not None and state.previous != current:
        # A change whose pods the cluster cannot place or start: the running pods serve the settings
        # before it, and the half-made rollout holds a Pending pod (and the autoscaler, which asks for
        # no more while pods are unschedulable). Back to those, as `kubectl rollout undo` would.
        back = bounds.within(state.previous)  # the spec may have narrowed since
        return Tuning(back, "RolloutStuck",
                      f"{current.describe()} -> {back.describe()}: the rollout of {current.describe()} "
                      f"passed the Deployment's progress deadline (its new pods could not be placed or did not "
                      f"become ready), or its ReplicaSet may create none of them (a full quota): back to the settings "
                      f"the running pods serve; no change for "
                      f"{STUCK_HOLD_S:.0f}s", TunerState(None, None, now, held_until=now + STUCK_HOLD_S), True)
    if state.previous is not None:
        if obs.updating and not state.rolling_seen:
            state = replace(state, rolling_seen=True)
        elif not obs.updating and (state.rolling_seen or state.last_change is None
                                   or now - state.last_change >= MIN_CHANGE_INTERVAL_S):
            # rolled out (or none came: the reconciler did not roll the change out): nothing to go back to
            state = replace(state, previous=None, rolling_seen=False, at_once=False)
    if state.held_until is not None and now >= state.held_until:
        state = replace(state, held_until=None)  # passed: status shows no hold that no longer holds
    if not obs.target_ms:  # first: the one hold only a spec edit ends (a pod not ready hid it as Rollout)
        return hold("NoTarget", "no scaling.targetP95Milliseconds to tune against")
    # While replicas of a scale-up start, a change away from settings predicted to miss the target goes ahead
    # (below): every old pod misses until its successor is ready, and waiting for the scale-up's pods first puts
    # the change's cold start after theirs. Those pods, started with the old settings, are replaced like the rest.
    # Anything else waits for the pods, as for a rollout.
    starting = obs.rollout and obs.starting
    if obs.rollout and not starting:
        return hold("Rollout", ROLLOUT_WHY)
    if state.held_until is not None:
        return hold("HeldAfterStuckRollout", f"a rollout of the tuner's last change was stuck; no change for "
                                             f"{state.held_until - now:.0f}s more")
    fitted = bounds.within(current)
    if fitted != current:
        if starting:
            return hold("Rollout", ROLLOUT_WHY)
        return change(fitted, "Bounds", "the settings in force were outside spec.batching.autoTune's bounds")
    if starting and (obs.cost is None or not obs.rate_per_replica or obs.rate_per_replica <= 0):
        return hold("Rollout", ROLLOUT_WHY)
    if obs.cost is None:
        return hold("LearningCost", "no batch cost a + b*n learned yet from Triton's batch statistics (batches of "
                                    "one size alone do not tell the cost per item)")
    if not obs.rate_per_replica or obs.rate_per_replica <= 0:
        return hold("Idle", "no traffic: nothing to tune for")
    if obs.cost_guessed:
        cost = obs.cost  # not kept: the fit, once known, is scored afresh
    else:
        cost = scoring_cost(obs.cost, state.cost, bounds.max_batch)
        state = replace(state, cost=cost)
    target, rate = obs.target_ms, obs.rate_per_replica
    cands = candidates(current, bounds, cost, target)
    scores = {c: score(c, cost, bounds.max_batch, target, rate) for c in cands}
    pick, mine = best(cands, scores), scores[current]
    theirs = scores[pick]
    numbers = (f"a={cost[0]:.1f} ms, b={cost[1]:.2f} ms/item, {rate:.1f} rps per replica, target {ms_text(target)} ms: "
               f"capacity {mine.capacity_rps:.0f} -> {theirs.capacity_rps:.0f} rps per replica, predicted p95 "
               f"{_ms(mine.p95_now_ms)} -> {_ms(theirs.p95_now_ms)}")
    # No rate meets the target with the settings in force (an oversized delay), and some does with the pick: every
    # request misses until they go, and a minute of proposals cannot tell more than the model does -- the change is
    # made at once, as a breach relief is, whether or not p95 is yet past the decider's tolerance
    hopeless = mine.capacity_rps <= 0.0 < theirs.capacity_rps
    guessed = ", from a cost guessed from one batch size" if obs.cost_guessed else ""
    leave_why = f"{numbers}{guessed}; not confirmed first: no rate meets the target with the settings in force"
    if obs.cost_guessed:
        # The decider plans with the guess, and with such settings it would ask for every replica it may (the
        # sandbox from a 150 ms delay went to maxReplicas at its first tick and filled the GPUs the change's pods
        # then waited for). They are left on the guess too; anything finer waits for the fit.
        if hopeless:
            return change(pick, "MoreCapacity", leave_why)
        return hold("LearningCost", f"the batch cost is only guessed from one batch size so far ({numbers}): "
                                    f"settings are changed on a guess only away from ones no rate meets the "
                                    f"target with")
    breaching = obs.p95_ms is not None and obs.p95_ms > target * (1.0 + obs.tolerance)
    # The settings in force are predicted to miss the target at the rate each replica sees: every request on an
    # old pod misses until its pod goes, so a change away from them need not wait for a scale-up's pods
    missing = mine.p95_now_ms > target
    if starting and not missing:
        return hold("Rollout", ROLLOUT_WHY)
    if pick == current:
        return hold("Optimal", f"the settings in force are the best predicted ({numbers})",
                    replace(state, candidate=None, candidate_since=None))
    if breaching and obs.p95_ms is not None:
        # Only when the settings in force are predicted to miss the target at the rate each replica sees,
        # and the pick to do better by more than the model's noise. A breach the settings do not cause (a
        # load step, the backlog of a burst, the 60 s summary's memory of one) is the decider's to answer
        # with replicas: a change then rolled every replica, a cold start each, for a predicted 118 -> 118 ms
        # (auditB, session 82), and with no room for the surge pod the rollout stuck half made.
        if missing and theirs.p95_now_ms < mine.p95_now_ms * (1.0 - P95_TIE):
            return change(pick, "BreachRelief", f"p95 {ms_text(obs.p95_ms)} ms > target; {numbers}")
        why = ("the settings in force are predicted within the target at this rate: replicas, not the batcher, "
               "answer it" if mine.p95_now_ms <= target else "no change is predicted to lower it")
        return hold("Breach", f"p95 {ms_text(obs.p95_ms)} ms > target and {why} ({numbers})",
                    replace(state, candidate=None, candidate_since=None))
    # No capacity either way (a target below what any setting serves): no gain, whatever 0 >= 0 says
    gain = theirs.capacity_rps > 0 and theirs.capacity_rps >= mine.capacity_rps * (1.0 + MIN_CAPACITY_GAIN)
    headroom = mine.p95_now_ms - theirs.p95_now_ms >= MIN_HEADROOM_GAIN * target \
        and theirs.capacity_rps >= mine.capacity_rps * (1.0 - CAPACITY_TIE)
    if not (gain or headroom):
        return hold("WithinHysteresis", f"the best gain is too small to reload the model for ({numbers})",
                    replace(state, candidate=None, candidate_since=None))
    if hopeless:  # (a gain: the pick has capacity, the settings in force none)
        return change(pick, "MoreCapacity", leave_why)
    since = state.candidate_since if state.candidate == pick and state.candidate_since is not None else now
    proposing = replace(state, candidate=pick, candidate_since=since)
    if now - since < CONFIRM_S:
        # the spacing after the last change may hold it longer (it said "applied after 60s", then TooSoon)
        spaced = None if state.last_change is None else state.last_change + MIN_CHANGE_INTERVAL_S
        spacing = "" if spaced is None or spaced <= since + CONFIRM_S else (
            f", and not before {MIN_CHANGE_INTERVAL_S:.0f}s after the last change ({spaced - now:.0f}s from now)")
        return hold("Confirming", f"{pick.describe()} proposed {now - since:.0f}s ago, applied after "
                                  f"{CONFIRM_S:.0f}s{spacing} ({numbers})", proposing)
    if state.last_change is not None and now - state.last_change < MIN_CHANGE_INTERVAL_S:
        return hold("TooSoon", f"last change {now - state.last_change:.0f}s ago (at least "
                               f"{MIN_CHANGE_INTERVAL_S:.0f}s apart); proposing {pick.describe()} ({numbers})",
                    proposing)
    return change(pick, "MoreCapacity" if gain else "MoreHeadroom", numbers)


def _ms(v: float) -> str:
    return "overloaded" if math.isinf(v) else f"{ms_text(v)} ms"


__all__ = ["Bounds", "Score", "Settings", "TunerObservation", "TunerState", "Tuning", "best", "candidates",
           "score", "tune"]
