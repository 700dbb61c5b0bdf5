"""Per-replica capacity at the latency target, from Triton's batch statistics (the batch cost
a + b*n) or, without them, from p95."""

from __future__ import annotations

import math
from dataclasses import replace

from tritonscale.scaling.decider import constants as C
from tritonscale.scaling.decider.batcher_model import (
    md1_p95_capacity,
    md1_p95_wait_ms,
    planned_capacity,
    saturation_rps,
)
from tritonscale.scaling.decider.model import Observation, Policy, State


def _batch_bin(n: float) -> int:
    return round(n) if n < 16 else 16 + round(math.log(n / 16) / math.log(17 / 16))


def _measured(n: float, ms: float) -> bool:
    """A batch of ``n`` requests taking ``ms`` is a measurement: a size, and a time no shorter than the
    resolution of Triton's duration counters (``MIN_BATCH_MS``)."""
    return n > 0 and math.isfinite(ms) and ms >= C.MIN_BATCH_MS


def add_batch_sample(samples: tuple[tuple[float, float, float], ...], n: float, ms: float,
                     now: float) -> tuple[tuple[float, float, float], ...]:
    """Per batch-size bin keep the lowest time seen in the last BATCH_SAMPLE_TTL_S (see
    MAX_BATCH_BINS): samples (size, ms, when), sorted by size."""
    if not _measured(n, ms):
        return samples
    b = _batch_bin(n)
    smaller = [e[1] for e in samples if e[0] < n and _batch_bin(e[0]) != b and now - e[2] <= C.BATCH_SAMPLE_TTL_S]
    if smaller and ms < min(smaller):
        # A batch takes no less time than a smaller one: a sample faster than every smaller batch seen is
        # a bad reading (one tick's served rate read at 20000 rps where 700 arrived made a full batch
        # take 2.4 ms, and that sample, the lowest of its bin, set the capacity for BATCH_SAMPLE_TTL_S).
        return samples
    old = [e for e in samples if _batch_bin(e[0]) == b and now - e[2] <= C.BATCH_SAMPLE_TTL_S]
    new = min(old + [(n, ms, now)], key=lambda e: e[1])
    kept = [e for e in samples if _batch_bin(e[0]) != b] + [new]
    kept.sort()
    while len(kept) > C.MAX_BATCH_BINS:  # drop the middle bin: the ends carry the slope
        kept.pop(len(kept) // 2)
    return tuple(kept)


def batch_cost(samples: tuple[tuple[float, ...], ...]) -> tuple[float, float] | None:
    """Least-squares (a, b) of batch_ms = a + b*n over (size, ms, ...) samples, both >= 0;
    None without samples."""
    samples = tuple(e for e in samples if _measured(e[0], e[1]))  # a memory from elsewhere
    if not samples:
        return None
    ns = [e[0] for e in samples]
    ts = [e[1] for e in samples]
    n_mean, t_mean = sum(ns) / len(ns), sum(ts) / len(ts)
    if max(ns) - min(ns) < C.MIN_BATCH_SPREAD:
        return t_mean / 2, t_mean / (2 * n_mean)  # no spread: split fixed/per-item evenly
    var = sum((n - n_mean) ** 2 for n in ns)
    b = sum((n - n_mean) * (t - t_mean) for n, t in zip(ns, ts, strict=False)) / var
    b = max(b, 0.0)
    a = max(t_mean - b * n_mean, 0.0)
    if a == 0.0 and b == 0.0:
        return None
    return a, b


def slope_known(samples: tuple[tuple[float, ...], ...], max_batch: int) -> bool:
    """Whether the batch samples tell the cost's slope (b of a + b*n): batch sizes spread by
    MIN_BATCH_SPREAD, or a model that does not batch. One batch size alone fits any split of fixed
    and per-item cost (``batch_cost`` then halves it)."""
    if not samples:
        return False
    sizes = [e[0] for e in samples]
    return max_batch <= 1 or max(sizes) - min(sizes) >= C.MIN_BATCH_SPREAD


def capacity_known(samples: tuple[tuple[float, ...], ...], max_batch: int) -> bool:
    """Whether the samples tell a replica's capacity: the slope is known (``slope_known``), or a batch
    near the maximum was seen -- full batches serve the same whatever the split of their cost."""
    return slope_known(samples, max_batch) or bool(samples) and max(e[0] for e in samples) >= 0.9 * max_batch


def learned_cost(samples: tuple[tuple[float, ...], ...], max_batch: int) -> tuple[float, float] | None:
    """The fitted batch cost once the decider's capacity is known (``capacity_known``), else None: what
    the batching tuner weighs settings by. One batch size near the maximum counts, though it does not
    tell the split of a + b*n (a true 5 + 10n ms read from batches of 15 alone as 77.5 + 5.2n puts a
    batch of 2 at 88 ms, not 25): full batches are all that an oversized queue delay -- the poor start
    the tuner exists to leave -- ever shows, and waiting for a spread of sizes there kept the tuner
    from ever relieving the breach it causes (tests/simulate/test_batching_tuner_sim.py). Once sizes
    spread, the fit corrects itself. Tiny batches of one size say nothing of full ones: None."""
    return batch_cost(samples) if capacity_known(samples, max_batch) else None


def batch_capacity(cost: tuple[float, float], max_batch: int, target_ms: float, delay_ms: float = 0.0,
                   preferred: tuple[int, ...] = (), share: float | None = None) -> float:
    """Requests per second per replica that the decider plans at UTILISATION of: with greedy
    batching (the queue delay no longer than the batch time n* of the fluid model, the largest
    batch whose two batch times fit in the target, so it has expired whenever the instance
    frees) the p95 capacity of ``batcher_model.greedy_capacity`` (the closed form
    ``greedy_p95_capacity``, held within the error band of Triton's rule over a sample) -- the
    queueing of random batch sizes is in it, so the plan lands on it, never above ``share`` of
    saturation (rate_model.saturation_share: the rate's unforeseen movement; UTILISATION when not
    given): min(p95 capacity, share x saturation) / UTILISATION. E.g. a=20, b=2, max 16: 294 rps
    at a 104 ms target, planned at 265 (the simulated replica: 267) whatever the share; at a
    312 ms target the p95 capacity is 301 and saturation 308, planned at 277 at a share of 0.9
    and at 301 from a share of 0.98. A target within two batches of one is met only
    by a lightly loaded replica, one request at a time (the M/D/1 floor of greedy_p95_capacity);
    one that even a batch of one cannot meet gets the rate of batches of one, 1 / (a + b): the
    lowest latency there is.

    A longer delay holds batches back, and the p95 capacity is the batcher model's
    (``batcher_model.delayed_capacity``: Triton's rule over Poisson arrivals, held within the same
    band by the heavy-traffic limit), planned the same way: a tuned delay changes what the decider
    plans with at once, while the learned cost a + b*n -- the model's, not the settings' -- stays.
    E.g. a 100 ms delay with preferred sizes [4, 8, 16] at a 104 ms target: 229 rps (the sample 240,
    the simulated replica 237), where the mean-value model before session 67 said 143. Both branches
    are ``batcher_model.planned_capacity``, which the batching tuner weighs settings by too."""
    a, b = cost
    big = max(1, max_batch)
    rate = planned_capacity(cost, big, target_ms, delay_ms, preferred)  # the branch above, shared with the tuner
    if rate <= 0.0:
        return 1000.0 / (a + b)
    return min(rate, saturation_ceiling(cost, big, share)) / C.UTILISATION


def saturation_ceiling(cost: tuple[float, float], max_batch: int, share: float | None) -> float:
    """The most a replica is planned to serve whatever its batcher: ``share`` of saturation (UTILISATION when
    not given), before the division by UTILISATION (``batch_capacity``, ``unbatched_capacity``)."""
    return (C.UTILISATION if share is None else share) * saturation_rps(cost, max_batch)


def _learn_p95_capacity(state: State, obs: Observation, ready: int, target: float, tolerance: float) -> State:
    """Fallback without batch statistics: each tick with traffic estimates the rate a replica
    serves with p95 at target, assuming p95 grows with the square root of per-replica load
    near the target; only a breach lowers it (at once), otherwise it rises smoothed, capped by
    the last breach's ceiling (relaxing 1% a tick), so flat p95 cannot run away."""
    cap, ceiling = state.capacity_rps, state.capacity_ceiling_rps
    if ceiling is not None:
        ceiling *= C.BREACH_CEILING_RELAX
    if obs.p95_ms is None or not obs.rps or ready <= 0 or obs.p95_ms <= 0 or obs.rps / ready < C.MIN_LEARNING_RPS:
        return replace(state, capacity_ceiling_rps=ceiling)
    per = obs.rps / ready
    ratio = obs.p95_ms / target
    est = per * min(ratio ** -C.CAPACITY_EXPONENT, C.MAX_EXTRAPOLATION)
    if ratio > 1.0 + tolerance:
        cap = est if cap is None else min(cap, est)
        ceiling = est if ceiling is None else min(ceiling, est)
    elif cap is None:
        cap = est
    elif est > cap:
        cap += C.CAPACITY_ALPHA * (est - cap)
    if ceiling is not None and cap is not None:
        cap = min(cap, ceiling)
    return replace(state, capacity_rps=cap, capacity_ceiling_rps=ceiling)


# The capacity's source when it comes from the queueing measured (``unbatched_capacity``): the one
# figure that depends on the fleet it is for.
QUEUEING_OBSERVED = "batch cost, queueing observed"
# ... and when it is a guess from one batch size (``capacity``): a count raised on it is not held by
# the dead band once the capacity is known (``steps.tolerate``).
GUESSED = "batch cost, one batch size"


def ready_held(state: State, ready: int) -> bool:
    """The last tick saw the same number of ready replicas: the interval's rates were served by them."""
    last = state.last_pending
    return last is not None and last.ready == ready


def last_join(state: State, ready: float, now: float) -> float:
    """The last tick at which the ready count rose: now if it rose since the last tick (or nothing is
    known of the last), else the last tick's record -- that tick itself for a memory written before
    the record was kept."""
    last = state.last_pending
    if last is None or last.ready is None or ready > last.ready:
        return now
    return last.joined_at if last.joined_at is not None else last.at


def learn_queueing(state: State, obs: Observation, ready: int, current: int, policy: Policy, now: float) -> State:
    """For a model that does not batch (maxBatchSize <= 1): how much the traffic queues against the
    M/D/1 model its capacity comes from (Poisson arrivals) -- the p95 wait observed over the rate
    window over the model's p95 wait at the rate each ready replica served, at most 1 (never
    below the model). The routing decides it: round-robin per request makes each replica's
    arrivals far more regular than Poisson (over 8 replicas the simulated replica serves about
    three times the M/D/1 capacity at a target of two service times), a random or per-connection
    split leaves them Poisson. Measured only while no pod is starting and the ready count held
    since the last tick (the window's p95 is then this fleet's), not over a p95 window that holds
    the backlog of a fleet that was short (``_drained_backlog``), and only where the model queues
    enough for a ratio to mean something (QUEUEING_MIN_WAIT_SERVICES); each kept for NOISE_S,
    with the number of ready replicas it was measured over (see ``unbatched_capacity``)."""
    kept = tuple(e for e in state.queueing if now - e[0] <= C.NOISE_S)
    cost = batch_cost(state.batch_samples) if policy.max_batch_size <= 1 else None
    if (cost is None or obs.p95_ms is None or not obs.rps or ready <= 0 or ready != current
            or not ready_held(state, ready) or _drained_backlog(obs, state, ready, policy, now)):
        return state if kept == state.queueing else replace(state, queueing=kept)
    service = cost[0] + cost[1]
    per = obs.rps / ready
    model = md1_p95_wait_ms(per / 1000.0, service)
    if model is None or model < C.QUEUEING_MIN_WAIT_SERVICES * service:
        return replace(state, queueing=kept)
    ratio = min(1.0, max(0.0, obs.p95_ms - service) / model)
    return replace(state, queueing=(kept + ((now, ratio, per, float(ready)),))[-C.MAX_QUEUEING_SAMPLES:])


def _drained_backlog(obs: Observation, state: State, ready: int, policy: Policy, now: float) -> bool:
    """A p95 over the target within its window (P95_SUMMARY_S, or the rate window if longer) of replicas
    joining: the window holds the queue the fleet built while it was short -- round-robin gives the
    new replicas only new requests, and the old ones drain their backlogs -- not the queueing of this
    fleet at this rate. Counted, it reads as Poisson queueing (a ratio of 1) and sizes the fleet by the
    M/D/1 model after every burst: no batching (--max-batch 1), ``flash/cold180s/tight/seed0``,
    5 -> 9 replicas as the crowd's five became ready, where 5 served it within the target."""
    target = policy.target_p95_ms
    if not target or obs.p95_ms is None or obs.p95_ms <= target:
        return False
    return now - last_join(state, ready, now) < max(C.P95_SUMMARY_S, policy.window_s)


def unbatched_capacity(state: State, cost: tuple[float, float], target: float, share: float | None,
                       fleet: int | None = None) -> float | None:
    """The capacity of a model that does not batch, with the queueing it was measured to see
    (``learn_queueing``: the median ratio, once there are three -- a window that held a burst
    does not undo the rest): the rate at which the M/D/1 model's p95 wait is the target's slack
    over that ratio, for a fleet of ``fleet`` replicas (None: as measured). Round-robin makes a
    replica's arrivals more regular the more replicas it splits them over -- every N-th arrival of
    a Poisson stream has 1/N of its squared coefficient of variation, and queueing scales with it
    -- so a ratio measured over N replicas counts N / fleet times larger for a smaller fleet, at
    most 1 (a lone replica sees Poisson arrivals), and as measured for a larger one (no credit
    for regularity not seen). Without the scaling a ratio measured over four or five replicas
    took flash crowds' fleets down to one replica that then missed the target (suite, no
    batching, seeds 0-2: 64 of 126 scenarios met the criteria without the scaling, 43 with
    measurements counted only for fleets at least as large, 70 with it).

    The decider plans at UTILISATION of it, as of the p95 figure it falls back on without batch
    statistics: it is an estimate, and the share covers its error. At most ``share`` of
    saturation (UTILISATION when not given), and at most MAX_EXTRAPOLATION times the highest
    rate per replica it was measured at: the ratio holds near the loads it was seen at, and the
    next measurements, at the higher load, tell whether it still does. None without enough
    measurements."""
    seen = state.queueing
    if len(seen) < 3:
        return None
    ratios = sorted(k if fleet is None or fleet >= n else min(1.0, k * n / max(fleet, 1)) for _, k, _, n in seen)
    ratio = ratios[len(ratios) // 2]
    service = cost[0] + cost[1]
    top = saturation_ceiling(cost, 1, share)
    slack = target - service
    if slack <= 0:
        return None  # no rate meets the target, whatever the queueing
    rate = md1_p95_capacity(service, service + slack / ratio) if ratio > 0 else 0.0
    if rate <= 0.0:  # no queueing seen, or a wait beyond the exact formula's reach
        rate = top
    return min(rate, top, C.MAX_EXTRAPOLATION * max(e[2] for e in seen))


def capacity(state: State, policy: Policy, target: float, obs: Observation | None = None,
             share: float | None = None, fleet: int | None = None) -> tuple[float | None, str]:
    """Per-replica requests per second at the target, and where the figure comes from; None while
    the batch statistics cannot tell it yet. One batch size seen says nothing about the slope of
    the cost: capacity is known once batch sizes spread (MIN_BATCH_SPREAD), or a batch near the
    maximum was seen, or the model does not batch (maxBatchSize <= 1). Until then one batch size
    that is a good share of the maximum gives a guess: a remembered one, or this tick's where none
    is and the load moves too fast for a sample. A tick whose batch size moved mixes small batches
    and large, and Triton's request-weighted batch time then reads high (why ``learn`` keeps no
    sample from it): at the sandbox's step from 15 to 70 rps (20 + 15n ms, maxBatchSize 4) the step's
    tick read 69-74 ms at a mean of 2.4-3.0 per batch, where such batches take 56-64 ms.
    ``share``: of saturation, at most (batch_capacity); ``fleet``: the replicas it is for, where
    that matters (``unbatched_capacity``)."""
    samples = state.batch_samples
    cost = batch_cost(samples)
    if cost is not None:
        if capacity_known(samples, policy.max_batch_size):
            modelled = batch_capacity(cost, policy.max_batch_size, target, policy.queue_delay_ms,
                                      policy.preferred_batch_sizes, share)
            learned = unbatched_capacity(state, cost, target, share, fleet) if policy.max_batch_size <= 1 else None
            if learned is not None and learned > modelled:  # never below the Poisson model
                return learned, QUEUEING_OBSERVED
            return modelled, "batch cost"
        guess = guessed_cost(samples, policy.max_batch_size, obs)
        if guess is not None:
            return batch_capacity(guess, policy.max_batch_size, target, policy.queue_delay_ms,
                                  policy.preferred_batch_sizes, share), GUESSED
        # tiny batches only: replicas are far from full, and extrapolating their cost to large
        # batches could be off by the batching gain itself
        return None, "batch cost: only small batches seen so far"
    return state.capacity_rps, "p95"


def undelayed_capacity(state: State, policy: Policy, target: float, obs: Observation | None, share: float | None,
                       cap: float | None, source: str) -> float | None:
    """What one replica would serve at the target without the queue delay in force (the same cost, batch
    sizes and preferred sizes, ``batch_capacity`` with no delay), where that is more than the tolerance above
    ``cap``, the capacity planned with that delay; else None. The decider's message names it: a delay that
    holds each replica below what greedy batching serves buys replicas for nothing, and the count alone does
    not say why (the sandbox's model, 20 + 15n ms, maxBatchSize 4, at a 200 ms target: a 150 ms delay is met
    only below ~1.2 rps a replica, so the fleet went to maxReplicas, where without the delay a replica serves
    ~41). Only for a capacity from the batch cost (learned, or guessed from one batch size). Not weighed, so
    that healthy settings cost no second capacity a tick:
    - a gap within the tolerance: the dead band, in which the decider does not move for a load either;
    - a delay no longer than the tolerance's share of the target (the suite's 2 ms of 104, the samples'
      2-5 ms): Triton holds a request no longer than the delay, so it moves p95 by no more than the decider
      tolerates of p95 itself. A bound in latency, not in capacity: a delay as long as the batch time of
      the largest batch whose two batch times fit in the target -- one the instance has always waited out
      by the time it frees -- still cost 72% of a replica's capacity at 1.5 full-batch times (20 + 5n ms,
      maxBatchSize 4, a 30 ms delay at a 60 ms target: 11.6 against 41.8 rps);
    - a capacity within the tolerance of the share of saturation ``batch_capacity`` never passes."""
    if (not cap or policy.queue_delay_ms <= policy.tolerance * target or policy.max_batch_size <= 1
            or source not in ("batch cost", GUESSED)):
        return None
    samples, big = state.batch_samples, policy.max_batch_size
    cost = learned_cost(samples, big) or guessed_cost(samples, big, obs)  # the one ``capacity`` planned with
    if cost is None:
        return None
    if cap * (1.0 + policy.tolerance) >= saturation_ceiling(cost, big, share) / C.UTILISATION:
        return None  # batch_capacity never passes this: no delay can cost the tolerance
    free = batch_capacity(cost, big, target, 0.0, policy.preferred_batch_sizes, share)
    return free if free > cap * (1.0 + policy.tolerance) else None


def guessed_cost(samples: tuple[tuple[float, ...], ...], max_batch: int,
                 obs: Observation | None = None) -> tuple[float, float] | None:
    """The batch cost ``capacity`` guesses while the samples do not tell it (``capacity_known`` False): one
    batch size, already a good share of the maximum (SINGLE_BATCH_MIN_SHARE), its time split half fixed, half
    per item -- a fair guess, which errs low (more replicas) for fixed-cost models; this tick's larger batches
    (``obs``) only where no remembered sample is large enough. None with no such batch, or where the samples
    tell the cost (``batch_cost`` is then the fit)."""
    if not samples or batch_cost(samples) is None or capacity_known(samples, max_batch):
        return None
    sizes = [e[0] for e in samples]
    guesses = [(e[0], e[1]) for e in samples]
    if (obs is not None and obs.batch_size and obs.batch_ms and obs.batch_size > max(sizes)
            and max(sizes) < C.SINGLE_BATCH_MIN_SHARE * max_batch):
        guesses.append((obs.batch_size, obs.batch_ms))  # the load moves: this tick's larger batches
    n, t = max(guesses)
    if n < C.SINGLE_BATCH_MIN_SHARE * max_batch:
        return None
    return batch_cost(((n, t, 0.0),))


def bare_capacity(cap: float | None, source: str, state: State, policy: Policy) -> float | None:
    """The most one replica serves, for the burst memory's bare need (the level at full capacity,
    without the plan's margins): the capacity figure, but never above saturation -- maxBatchSize
    requests per batch time, K / (a + b K) of the learned cost. The figure is the planned rate
    over UTILISATION, and where a steady rate lets replicas run up to the p95 capacity
    (``saturation_share`` 1) it passes saturation: 301 / 0.9 = 334 rps against 308 for a + b n =
    20 + 2n ms, K = 16, at a 312 ms target. A burst of 4,800 rps then read as a need of 15
    replicas where 16 were needed (suite, 16 replicas at the peak: on/off bursts at the loose
    target missed one to three windows per burst). None while the capacity is unknown."""
    cost = batch_cost(state.batch_samples) if cap and source.startswith("batch cost") else None
    return min(cap, saturation_rps(cost, policy.max_batch_size)) if cap and cost is not None else cap
