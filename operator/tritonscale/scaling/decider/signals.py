"""Signals and memory: arrivals now (demand), what is learned each tick, the rate to plan for."""

from __future__ import annotations

import math
from dataclasses import replace

from tritonscale.scaling.decider import constants as C
from tritonscale.scaling.decider.capacity import (
    _learn_p95_capacity,
    add_batch_sample,
    last_join,
    learn_queueing,
    ready_held,
)
from tritonscale.scaling.decider.model import Demand, Observation, PendingReading, Policy, Replicas, State
from tritonscale.scaling.decider.rate_model import (
    cold_start,
    noise_count,
    noise_measured,
    noise_now,
    plan_horizon,
    sampled_at,
)


def demand(obs: Observation, state: State, now: float) -> Demand:
    """Arrivals = requests leaving the queue (served or rejected) + the queue's growth.
    The served rate alone caps at capacity in overload; the queue's growth is the rest.

    The growth is the gauge's change between the scrapes it was read at, not between ticks:
    with ticks as often as scrapes (15 s each by default) and their phases drifting, a tick
    can read the scrape the last one read (no change in no time: the last growth still holds)
    and the next one two scrapes on (twice the change in one tick's time)."""
    failed = obs.failed_rps or 0.0
    window = (obs.rps or 0.0) + failed
    exits = obs.recent_rps if obs.recent_rps is not None else window
    pending = obs.pending or 0.0
    growth, last = 0.0, state.last_pending
    at = sampled_at(obs, now)
    if last is not None and obs.pending is not None:
        if at > last.at:
            growth = (pending - last.pending) / (at - last.at)
        else:  # the same scrape again
            growth = last.growth
    return Demand(max(0.0, exits + growth), window, pending, growth, last)


def joined(d: Demand, ready: int, ticks: int = 1) -> int:
    """Replicas that became ready within the last ``ticks`` (1 or 2) ticks: ``ready`` less the fewest
    ready at either; 0 where no earlier count is known."""
    return joined_since(d.last, ready, ticks)


def joined_since(last: PendingReading | None, ready: float, ticks: int = 1) -> int:
    """``joined``, from the last tick's reading itself."""
    counts = () if last is None else (last.ready, last.ready_before)[:ticks]
    earlier = [b for b in counts if b is not None]
    return max(0, int(ready - min(earlier))) if earlier else 0


def in_requests(policy: Policy, obs: Observation) -> Policy:
    """``policy`` with maxBatchSize in requests: Triton's maxBatchSize counts items (a request's batch
    dimension), and every rate, queue and batch size the decider reads counts requests. A full batch of
    4-item requests at maxBatchSize 16 holds 4 of them; planned as 16, a replica's capacity came out four
    times too high (an audit against a real tritonserver, session 84). ``obs.items_per_request`` None
    (one item each, as the simulator's) or at most 1 changes nothing."""
    r = obs.items_per_request
    if r is None or not math.isfinite(r) or r <= 1.0 or policy.max_batch_size <= 1:
        return policy
    return replace(policy, max_batch_size=max(1, int(policy.max_batch_size / r + 1e-9)))


def serving_pods(obs: Observation, ready: int) -> float:
    """The pods whose service the served rate sums: the ready replicas, or the pods Prometheus has
    series of now where they are more. A pod the Deployment does not count ready may still serve --
    one draining its queue as it terminates, or one the node controller marked NotReady after missed
    kubelet heartbeats (an API server outage) whose clients keep their connections -- and the
    served rate over the ready count alone then reads as more than a pod serves: three pods' 900 rps
    over one ready pod made a batch of 16 take 18 ms where it takes 52, and the capacity three times
    the real one."""
    return max(float(ready), obs.pods or 0.0)


def learn(state: State, obs: Observation, replicas: Replicas, policy: Policy, now: float, rate: float,
          growth: float = 0.0) -> State:
    """Update the memory: batch samples, p95 capacity (fallback), the queueing of a model that does not
    batch, rate history, rises."""
    target = float(policy.target_p95_ms or 0.0)
    ready = min(replicas.ready, replicas.current) if replicas.current > 0 else replicas.ready
    state = _learn_p95_capacity(state, obs, ready, target, policy.tolerance)
    state = learn_queueing(state, obs, ready, replicas.current, policy, now)
    if obs.batch_size and obs.batch_ms and obs.batch_size > 0 and obs.batch_ms > 0:
        # Triton adds a batch's compute time to each request in it, so batch_ms is request-weighted:
        # a + b*E[n^2]/E[n], high by b*Var(n)/n when batch sizes vary (by 28% in the slope for a
        # 4 + 3n ms model). A replica runs at most one batch at a time, so the mean batch time is also
        # at most the time between batches, ready * n / served rate -- tight exactly when replicas are
        # busy, where the variance is largest. The tighter of the two, while the ready count held
        # (replicas that came or went within the interval would be counted wrongly). Over the pods
        # that served the rate (``serving_pods``), not only the ready ones.
        batch_ms = obs.batch_ms
        if obs.recent_served_rps and ready > 0 and ready_held(state, ready):
            batch_ms = min(batch_ms, 1000.0 * obs.batch_size * serving_pods(obs, ready) / obs.recent_served_rps)
        prev = state.last_batch_size
        steady = prev is not None and abs(obs.batch_size - prev) <= C.BATCH_STEADY_CHANGE * prev
        full = obs.batch_size >= 0.9 * policy.max_batch_size  # full batches barely vary: no bias
        # A pod that became ready within the readings' span (the last two scrapes: up to two ticks)
        # took only new requests while the others drained their backlogs, so the pods ran batches of
        # different sizes, and the time weighted by requests across them reads high -- by 39% at a mean
        # batch of 3.6 for a 5 + 5n ms model (randomwalk/cold15s/loose/seed0 of the suite with that
        # model: that one sample, the lowest of its bin for BATCH_SAMPLE_TTL_S, made the fitted slope
        # 8.1 ms and the capacity 115 rps where the replica serves 170). So do the pods of a rollout,
        # old and new side by side for its whole length: a batcher change runs one delay on some pods and
        # another on the rest (a 5 + 5n ms model's tuner rollout from a 90 ms delay to none read 28.4 ms
        # at a mean batch of 3.3, against 21.5; the lowest of its bin for the rest of the hour, it held
        # the capacity 9% low).
        mixed = replicas.rolling_out or joined_since(state.last_pending, ready, ticks=2) > 0
        if steady and not mixed or full or not state.batch_samples:  # and the first sample is better than none
            state = replace(state, batch_samples=add_batch_sample(state.batch_samples, obs.batch_size, batch_ms,
                                                                  now))
        state = replace(state, last_batch_size=obs.batch_size)
    ready = min(replicas.ready, replicas.current)
    full_batch = float(policy.max_batch_size)
    last = state.last_pending
    if (obs.recent_served_rps and ready > 0 and policy.max_batch_size > 1 and (obs.pending_min or 0.0) >= full_batch
            and last is not None and last.pending_min >= full_batch and ready_held(state, ready)):
        # At least a full batch waited on every replica (on the least-queued one: ``pending_min``)
        # at both ends of the last interval: each ran full batches back to back, so the served rate
        # per replica is the saturation rate -- a sample at maxBatchSize from the first overloaded
        # ticks (the window's batch statistics lag by a whole window). A queue that filled up only
        # within the interval would read low, and replicas that became ready within it would be
        # counted for work they did not do. The total queue is no evidence: round-robin gives a
        # replica that just became ready only new requests while the others drain their backlogs,
        # and a sample from such a tick (trace/cold60s/loose/seed6: 69 ms for a full batch of 52)
        # stays the lowest of its bin for BATCH_SAMPLE_TTL_S, 15% off the capacity.
        full_ms = 1000.0 * policy.max_batch_size * serving_pods(obs, ready) / obs.recent_served_rps
        state = replace(state, batch_samples=add_batch_sample(state.batch_samples, full_batch, full_ms, now))
    rates = tuple(e for e in state.rates if now - e[0] <= rate_memory(state, policy))
    if rates and now - rates[-1][0] < 0.5 * policy.interval_s:
        rates = rates[:-1]  # a tick out of turn (within half an interval of the last) replaces it
    rates += ((now, rate, rate),)  # what the plan bought is filled in once made (see decide)
    # ``joined`` reads the last two ready counts: ``breach`` the last, ``settle`` both.
    before = last.ready if last is not None else float(ready)
    pending = (PendingReading(sampled_at(obs, now), obs.pending, float(ready), growth, obs.pending_min or 0.0, before,
                              last_join(state, ready, now))
               if obs.pending is not None else None)
    return replace(state, rates=rates, last_pending=pending)


def rate_memory(state: State, policy: Policy) -> float:
    """How far back the rate history reaches (s): as far as the longest of its readers looks --
    the noise (NOISE_S, or its readings at long ticks: ``_noise_readings``), or RISE_HORIZONS + 1
    horizons of rises for long cold starts."""
    return max(C.NOISE_S, noise_count() * policy.interval_s,
               (C.RISE_HORIZONS + 1) * plan_horizon(state, policy, policy.interval_s))


ROLLING_MARK = "~"  # State.serving: learned while this model was rolling out beside the one before


def forget_model(state: State, replicas: Replicas, now: float = 0.0, settle_s: float = 0.0) -> State:
    """Forget what was learned of one model's speed when the pods start serving another
    (``Replicas.serving``: a new model, precision, image or resources). The batch cost, the
    capacities and the queueing ratio were measured on the old one, and a slower new model would
    be planned at the old one's capacity for as long as the samples live. What was learned while
    the new template rolled out (old and new pods side by side) is forgotten again ``settle_s``
    (the rate window) after it is done: the rates of that window still hold the old pods' last
    scrapes. The rate history, the cold start and the burst memory describe the traffic and stay.
    Unknown (None) keeps everything, and the first known value is adopted: memory from before it
    was recorded is assumed to be of the model in force."""
    key = replicas.serving
    if key is None or state.serving == key:
        return state
    rolling = key + ROLLING_MARK
    if state.serving is None:
        return replace(state, serving=rolling if replicas.rolling_out else key)
    forgotten = replace(state, batch_samples=(), capacity_rps=None, capacity_ceiling_rps=None, queueing=(),
                        last_batch_size=None)
    if state.serving != rolling:  # another model: learned anew, settled once its rollout is done
        return replace(forgotten, serving=rolling, rolled_out_at=None if replicas.rolling_out else now)
    if replicas.rolling_out:
        return replace(state, rolled_out_at=None)
    if state.rolled_out_at is None:
        return replace(state, rolled_out_at=now)
    if now - state.rolled_out_at >= settle_s:
        return replace(forgotten, serving=key, rolled_out_at=None)
    return state


def learn_cold_start(state: State, replicas: Replicas) -> State:
    """The cold start, from the creation-to-ready times of pods that became ready: a longer start
    counts at once (plan for the slow case), shorter ones pull it down slowly. Learned before
    anything else, whatever the metrics say: a pod's start is seen once, and a tick that holds
    for want of metrics (no series yet, Prometheus down) must not lose it."""
    if not replicas.startup_s:
        return state
    seen = max(replicas.startup_s)
    old = state.cold_start_s
    return replace(state, cold_start_s=seen if old is None or seen > old else old + 0.3 * (seen - old))


def replicas_for(rate: float, cap: float) -> int:
    """Whole replicas for ``rate``, each planned at UTILISATION of ``cap``."""
    return math.ceil(rate / (cap * C.UTILISATION))


def bought(planned: float, cap: float | None) -> float:
    """The rate the replicas a plan asks for serve at the target: ``replicas_for`` the plan (as
    ``steps.recommend`` sizes them, before any backlog), at least one; the plan itself while the
    capacity is unknown."""
    if not cap:
        return planned
    return max(1, replicas_for(planned, cap)) * (cap * C.UTILISATION)


def _noise_known(rates: tuple[tuple[float, float, float], ...], i: int) -> bool:
    """The plan of sample ``i`` was made with a noise estimate: ``noise`` saw enough differences."""
    return noise_measured(rates[:i + 1], rates[i][0])


def surprise(state: State, d: Demand, now: float, sigma: float | None = None, span: float = C.LEVEL_S) -> State:
    """Record a surprise: the rate now exceeds, by more than its noise, what the replicas asked
    for one cold start ago serve at the target (``bought``: whole replicas, so a rise within the
    last one's spare room costs nothing and is no surprise) -- the highest over the ``span`` before
    (the policy's rate window, ``Policy.window_s``: a removed pod's rate leaves the sum of rates
    before the traffic it served shows on the others, which takes one rate window, and a plan read
    low then shrinks no fleet; a longer span let a burst's plan from a window earlier hide the next
    burst after a scale-down: the sandbox's 50 s bursts at a 10 s window recorded none, and the fleet
    went 3 -> 1 at each burst's start and back). Whether or not capacity happened to
    be there (the burst memory may have held it), a scaler that follows the plan would have been
    short. Rising edge: at most one per cold start, and none that the plans made while the last
    surprise's rise reached the readings (one ``span`` after it) cover: a jump shows over two or
    three ticks (each pod is scraped at its own offset), and the plans of a cold start before the
    later ticks still predate its end -- one flash crowd counted twice engaged the burst memory that
    waits for a second (the suite: "Adopted in session 59"). A plan made before the rate's
    noise could be measured (the first ticks of a new service or memory: too few earlier
    samples) carries no noise margin, so the next noisy reading would pass it by chance: it is
    no evidence either way. ``sigma``: the rate's ``noise`` now, if the caller has it."""
    horizon = cold_start(state)
    window = [i for i, e in enumerate(state.rates) if horizon <= now - e[0] <= horizon + span]
    # Every plan of that minute, or none: leaving out only the plans made before the noise was
    # measured would compare with the others alone -- a lower bar, and a surprise where the fleet
    # was sized for the higher ones.
    past = [state.rates[i][2] for i in window] if all(_noise_known(state.rates, i) for i in window) else []
    kept = recurring(state.surprises, now)
    if kept and past:
        # The plans made while the last surprise's rise showed in the readings (one ``span``): a
        # rate they cover is that rise still, its replicas starting, not a second one.
        since = max(kept[-1], now - horizon - span)  # within the window's reach
        past += [e[2] for e in state.rates if since <= e[0] <= kept[-1] + span and e[0] < now]
    if past and d.rate - C.NOISE_Z * noise_now(state, now, sigma) > max(past) \
            and (not kept or now - kept[-1] > horizon):
        kept = (kept + (now,))[-C.MAX_SURPRISES:]
    return replace(state, surprises=kept)


def recurring(surprises: tuple[float, ...], now: float) -> tuple[float, ...]:
    """The surprises to remember at ``now``: those within MAX_BURST_HOLD_S before the last one,
    while the last is within MAX_BURST_HOLD_S of now; none after that. The burst memory counts
    them when the last surprise comes and then holds for ``burst_memory.burst_hold`` after it; were each
    forgotten MAX_BURST_HOLD_S after its own time, the memory two surprises engaged would end
    when the first aged out, however recent the second (``steps/cold60s/tight/seed7``: surprises
    at 690 and 2,040 s, the hold announced for 1,800 s after the second, and the fleet let go of
    its peak at 2,520 s, 60 s before the rate came back to it)."""
    if not surprises or now - surprises[-1] > C.MAX_BURST_HOLD_S:
        return ()
    return tuple(t for t in surprises if surprises[-1] - t <= C.MAX_BURST_HOLD_S)
