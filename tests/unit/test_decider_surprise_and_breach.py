"""The pure decider, step by step (surprise, recommend, breach and settle): a table (or a few cases) per step of
the pipeline; split from test_decider.py. Scenarios over time are in test_decider_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from support.decider_cases import CAP, POLICY, ok
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import PendingReading, Replicas, State, Step


# --- step: surprise ----------------------------------------------------------------------------
def test_surprise_when_the_rate_outruns_the_plan_of_a_cold_start_ago():
    # planned 120 all along, from a history long enough for the noise (noise_measured)
    hist = tuple((t, 100.0, 120.0) for t in range(-120, 181, 15))
    st = State(rates=hist, cold_start_s=60.0)
    assert D.surprise(st, D.Demand(119.0, 119.0, 0.0), 180.0).surprises == ()  # within the plan
    got = D.surprise(st, D.Demand(400.0, 400.0, 0.0), 180.0).surprises
    assert got == (180.0,)
    again = D.surprise(replace(st, surprises=got), D.Demand(400.0, 400.0, 0.0), 200.0).surprises
    assert again == (180.0,)  # one per cold start


def test_a_plan_read_low_for_one_tick_is_no_surprise_later():
    """A removed pod's rate leaves the sum a tick before its traffic shows on the others (a
    rollout, a scale-down): the plan of that tick is low, but the fleet was sized for the minute's
    highest plan, so the rate's return a cold start later is no surprise."""
    hist = tuple((t, 500.0, 550.0) for t in range(-120, 181, 15))
    dip = tuple((t, 380.0, 400.0) if t == 120 else (t, r, p) for t, r, p in hist)
    st = State(rates=dip, cold_start_s=60.0)
    assert D.surprise(st, D.Demand(520.0, 520.0, 0.0), 180.0).surprises == ()
    assert D.surprise(st, D.Demand(800.0, 800.0, 0.0), 180.0).surprises == (180.0,)  # a real rise still is


def test_the_span_of_plans_a_surprise_is_measured_against_is_the_rate_window():
    """A burst's plan from a rate window earlier hid the next burst: with 2 s ticks and a 10 s window (the
    sandbox's), bursts every 50 s, the fleet cut to 1 between them, no surprise was ever recorded (an
    exploratory review); the span covers what it is for, the one rate window a removed pod's rate is missing
    from the sum before the others' rates show its traffic."""
    burst = lambda t: 80.0 if -50 <= t <= -30 else 15.0  # noqa: E731 (the last burst, 30-50 s ago)
    hist = tuple((float(t), burst(t), 100.0 if burst(t) > 20 else 20.0) for t in range(-200, 1, 2))
    st = State(rates=hist, cold_start_s=8.0)
    now_burst = D.Demand(80.0, 80.0, 0.0)
    assert D.surprise(st, now_burst, 0.0, span=10.0).surprises == (0.0,)
    assert D.surprise(st, now_burst, 0.0, span=60.0).surprises == ()  # the last burst's plan in the span


def _jump_seen_over_three_ticks() -> State:
    """500 rps planned at 550 until t = 0, then a flash crowd's jump to 2,000 rps that the readings show
    over three ticks (each pod is scraped at its own offset): plans of 650, 1,600 and 2,200 at 0, 15 and
    30 s; the first reading of it (t = 0) was a surprise. Plans of 2,200 after."""
    before = tuple((float(t), 500.0, 550.0) for t in range(-300, 0, 15))
    jump = ((0.0, 600.0, 650.0), (15.0, 1500.0, 1600.0), (30.0, 2000.0, 2200.0))
    after = tuple((float(t), 2000.0, 2200.0) for t in range(45, 75, 15))
    return State(rates=before + jump + after, cold_start_s=60.0, surprises=(0.0,))


@pytest.mark.parametrize(("now", "rate", "surprised", "why"), [
    # 75 s after the first reading, the plans of a cold start ago (0-15 s: at most 1,600) are below
    # 2,000, but the plan of 30 s, while the jump still showed, covers it: the same jump, its replicas
    # starting -- no second surprise (one flash crowd counted twice engaged the burst memory)
    (75.0, 2000.0, False, "the same jump"),
    (75.0, 2600.0, True, "a rise above what the jump's own plans asked for"),
    # 30 minutes on, the jump's plans are long out of the window: a new burst of the same height after
    # a scale-down is a surprise again (on/off traffic's bursts recur at one height)
    (1800.0, 2000.0, True, "a later burst of the same height"),
])
def test_a_jump_seen_over_several_ticks_is_one_surprise(now, rate, surprised, why):
    st = _jump_seen_over_three_ticks()
    if now > 100:  # back at 500 rps (planned at 550) for the half hour before
        st = replace(st, rates=st.rates + tuple((float(t), 500.0, 550.0) for t in range(75, int(now), 15)))
    got = D.surprise(st, D.Demand(rate, rate, 0.0), now).surprises
    assert (got[-1] == now) is surprised, why


@pytest.mark.parametrize(("planned", "cap", "served"), [
    (500.0, 100.0, 6 * 90.0),  # 500 rps at 90 (0.9 x 100) a replica: 6 replicas, 540 rps
    (540.0, 100.0, 540.0),  # exactly 6 replicas' worth
    (10.0, 100.0, 90.0),  # one replica at least
    (500.0, None, 500.0),  # capacity unknown: the plan itself
])
def test_bought_is_what_the_plans_whole_replicas_serve(planned, cap, served):
    assert D.bought(planned, cap) == pytest.approx(served)


def test_decide_remembers_what_its_plan_bought_so_a_rise_within_the_last_replica_is_no_surprise():
    """Steady 500 rps on replicas of CAP: the plan buys whole replicas, and a rise a cold start
    later that they still serve (the last one's spare room) costs nothing -- no surprise."""
    st, now = State(cold_start_s=60.0), 0.0
    for _ in range(16):  # every plan a cold start before the rise had its noise measured
        now += 15.0
        d = D.decide(ok(500.0), Replicas(6, 6), POLICY, st, now)
        st = d.state
    served = st.rates[-1][2]
    assert served == pytest.approx(D.bought(d.details["planned_rps"], d.details["capacity_rps"]))
    assert served > d.details["planned_rps"] + 10.0  # spare room in the last replica
    rise = (served + d.details["planned_rps"]) / 2  # above the plan, within what it bought
    assert D.surprise(st, D.Demand(rise, rise, 0.0), now + 60.0).surprises == ()
    assert D.surprise(st, D.Demand(served + 50.0, served + 50.0, 0.0), now + 60.0).surprises == (now + 60.0,)


def test_the_first_plans_made_before_the_noise_was_measured_are_no_evidence_of_a_surprise():
    """A new service's first plans are its first readings, with no noise margin (noise needs
    2 x NOISE_SHIFTS x SHIFT_READINGS + 1 differences): a later reading above one of them is no evidence. The same
    reading against the same plans, made once enough samples preceded them, is a surprise. (With
    three differences, as before, the plans at 60 and 75 s counted, and 390 was a surprise.)
    Within one minute of plans it is all of them or none (``signals.surprise``)."""
    first = ((-15.0, 371.0, 371.0), (0.0, 375.0, 375.0),
             (15.0, 376.0, 376.0), (30.0, 377.0, 377.0), (45.0, 380.0, 380.0), (60.0, 365.0, 365.0),
             (75.0, 366.0, 366.0), (90.0, 384.0, 384.0), (105.0, 377.0, 380.0), (120.0, 378.0, 381.0))
    st = State(rates=first + ((135.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(st, D.Demand(390.0, 390.0, 0.0), 135.0).surprises == ()
    later = tuple((t + 120.0, r, p) for t, r, p in first[2:])  # the same plans, once ten samples preceded them
    st = State(rates=first + later + ((255.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(st, D.Demand(390.0, 390.0, 0.0), 255.0).surprises == (255.0,)
    # ... and a minute of plans only some of which had their noise is no evidence either: the others
    # alone would be a lower bar than the fleet was sized for
    mixed = State(rates=first + later[:3] + ((180.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(mixed, D.Demand(390.0, 390.0, 0.0), 180.0).surprises == ()


# --- step: recommend ---------------------------------------------------------------------------
@pytest.mark.parametrize(("demand", "planned", "cap", "current", "replicas", "reason"), [
    (D.Demand(0.0, 0.0, 0.0), 0.0, CAP, 5, 1, "Idle"),
    (D.Demand(500.0, 500.0, 0.0), 500.0, None, 3, 3, "LearningCapacity"),
    (D.Demand(1000.0, 1000.0, 0.0), 1000.0, CAP, 2, math.ceil(1000 / (CAP * D.UTILISATION)), "LoadIncreased"),
    (D.Demand(1000.0, 1000.0, 7500.0), 1000.0, CAP, 2, math.ceil((1000 + 100) / (CAP * D.UTILISATION)),
     "LoadIncreased"),  # 7,500 queued drain over the 75 s horizon: +100 rps
    (D.Demand(1000.0, 1000.0, 1e6), 1000.0, CAP, 2, math.ceil(1000 * (1 + D.BACKLOG_MAX_EXTRA) / (CAP * D.UTILISATION)),
     "LoadIncreased"),  # a huge backlog: a quarter more at most
    (D.Demand(200.0, 200.0, 0.0), 200.0, CAP, 4, 1, "LoadDecreased"),
])
def test_recommend(demand, planned, cap, current, replicas, reason):
    step = D.recommend(demand, planned, 75.0, cap, "batch cost", current, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


# --- step: breach ------------------------------------------------------------------------------
@pytest.mark.parametrize(("obs", "rep", "rec", "replicas", "reason"), [
    (ok(900, p95=80, pending=500), Replicas(4, 4), 4, 4, "Steady"),  # no breach
    (ok(900, p95=300, pending=0), Replicas(4, 4), 4, 4, "Steady"),  # breach, no queue: the summary lags
    (ok(900, p95=300, pending=500), Replicas(4, 4), 4, 5, "LatencyAboveTarget"),  # one more, not 3x more
    (ok(900, p95=3000, pending=5000), Replicas(4, 4), 4, 5, "LatencyAboveTarget"),  # still one more
    (ok(900, p95=300, pending=500), Replicas(4, 4), 7, 7, "LatencyAboveTarget"),  # the rate asks more already
    (ok(900, p95=300, pending=500), Replicas(6, 4), 5, 6, "WaitingForWarmup"),  # starting replicas cover it
])
def test_breach_is_bounded(obs, rep, rec, replicas, reason):
    step = D.breach(Step(rec, "Steady", ""), obs, rep, CAP, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


def test_a_breach_without_queue_pressure_says_both_causes_and_the_queue_it_weighed():
    """It said "the summary lags" only, also while 40 requests were queued and for a model whose own
    latency was above the target for good (an exploratory review's finding)."""
    none = D.breach(Step(4, "Steady", "x"), ok(900, p95=300, pending=0), Replicas(4, 4), CAP, POLICY)
    # "more replicas would not help" read as a contradiction appended to a scale-up the plan made (an
    # exploratory review): it is the breach rule's share that is none
    assert "with no queue under 1x the target: the breach adds no replica to the plan" in none.why, none.why
    assert "or the model's own latency is above the target" in none.why, none.why
    small = D.breach(Step(4, "Steady", "x"), ok(900, p95=300, pending=10), Replicas(4, 4), CAP, POLICY)
    assert small.replicas == 4
    assert f"with 10 queued, {10 / 4 / CAP * 1000:.0f} ms of work per ready replica, under 1x" in small.why, small.why


@pytest.mark.parametrize(("pending", "most_queued", "replicas", "reason"), [
    # 40 queued over 4 replicas is 35 ms of work each at ~288 rps: under the target
    (40, None, 4, "Steady"),  # a source without the most-queued pod's gauge: the mean, as before
    (40, 10, 4, "Steady"),  # spread evenly: no pressure
    (40, 40, 5, "LatencyAboveTarget"),  # all on one pod (gRPC clients that drew it): 139 ms of work there
])
def test_a_breach_weighs_the_most_queued_replica(pending, most_queued, replicas, reason):
    """A Service balances gRPC clients by connection: the queue sits on the pods that drew the most clients,
    and spread over the fleet it read as no pressure, breach after breach (``simulate --routing connection
    --connections 64``: "p95 254 ms > target 104 ms with 23 queued, 20 ms of work per ready replica")."""
    obs = replace(ok(900, p95=300, pending=pending), pending_max=most_queued)
    step = D.breach(Step(4, "Steady", "x"), obs, Replicas(4, 4), CAP, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)
    if most_queued == 10:
        assert f"with 40 queued, {40 / 4 / CAP * 1000:.0f} ms of work on the most-queued replica" in step.why, step.why


@pytest.mark.parametrize(("before", "replicas", "reason"), [
    (4.0, 5, "LatencyAboveTarget"),  # the same 4 served the interval and the queue grew: one more
    (2.0, 4, "WaitingForWarmup"),  # 2 joined since the last tick: the growth was measured without them
    (None, 5, "LatencyAboveTarget"),  # no last tick to compare with: the breach rule as before
])
def test_breach_waits_a_tick_for_replicas_that_just_became_ready(before, replicas, reason):
    last = None if before is None else PendingReading(0.0, 350.0, before)
    growing = D.Demand(900.0, 900.0, 500.0, growth=10.0, last=last)
    step = D.breach(Step(4, "Steady", ""), ok(900, p95=300, pending=500), Replicas(4, 4), CAP, POLICY, growing)
    assert (step.replicas, step.reason) == (replicas, reason)


# --- step: settle ------------------------------------------------------------------------------
@pytest.mark.parametrize(("before", "earlier", "queued", "rep", "rec", "reason", "replicas"), [
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 4, "QueueDraining", 3),  # joined at this tick, backlog drains: hold
    (3.0, 1.0, (11.0, 2.0), Replicas(3, 3), 4, "QueueDraining", 3),  # joined the tick before (the sandbox's step)
    (3.0, 1.0, (20.0, 10.0), Replicas(3, 3), 4, "QueueDraining", 3),  # half the queue gone: a drain
    (3.0, 3.0, (30.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no one joined within two ticks
    (3.0, 1.0, (33.0, 31.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # forming batches wobble: no drain
    (3.0, 1.0, (11.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # the queue holds: the reading is arrivals
    (3.0, 1.0, (11.0, 21.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # the queue grows: scale up
    (3.0, 1.0, (None, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no earlier queue reading
    (3.0, 1.0, (0.0, 0.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no queue then or now: nothing drained
    (2.0, 1.0, (30.0, 11.0), Replicas(4, 3), 5, "LoadIncreased", 5),  # a replica still starting: not all ready
    (None, None, (30.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no earlier ticks to compare with
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 3, "Steady", 3),  # no scale-up to hold
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 2, "LoadDecreased", 2),  # scale-down is not its business
])
def test_settle_holds_scale_up_while_new_replicas_drain_the_queue(before, earlier, queued, rep, rec, reason,
                                                                     replicas):
    was, now = queued
    growth = 0.0 if was is None else (now - was) / 2.0  # the sandbox's 2 s ticks
    last = None if was is None else PendingReading(0.0, was, before, 0.0, 0.0, earlier)  # None: no last reading
    d = D.Demand(93.0, 70.0, now, growth=growth, last=last)
    step = D.settle(Step(rec, "LoadIncreased" if rec > 3 else ("Steady" if rec == 3 else "LoadDecreased"), ""),
                    d, rep)
    assert (step.replicas, step.reason) == (replicas, reason)


def test_settle_leaves_a_breach_with_a_queue_to_the_breach_rule():
    d = D.Demand(93.0, 70.0, 5.0, growth=-11.5, last=PendingReading(0.0, 28.0, 1.0, 0.0, 0.0, 1.0))
    step = D.settle(Step(4, "LatencyAboveTarget", ""), d, Replicas(3, 3))
    assert (step.replicas, step.reason) == (4, "LatencyAboveTarget")


def test_the_last_two_ready_counts_reach_demand():
    """learn records the ready count of the tick before the last, and demand reads both."""
    st = State(last_pending=PendingReading(0.0, 30.0, 1.0, 5.0, 10.0))  # 1 ready at the last tick (an old memory)
    st = D.learn(st, replace(ok(70, pending=28.0), pending_at=2.0), Replicas(3, 3), POLICY, 2.0, 70.0)
    assert st.last_pending is not None and st.last_pending[2:3] + st.last_pending[5:6] == (3.0, 1.0)
    d = D.demand(replace(ok(70, pending=5.0), pending_at=4.0), st, 4.0)
    assert d.last is not None and (d.last.ready, d.last.ready_before, d.last.pending) == (3.0, 1.0, 28.0)
    old = D.demand(ok(70), State(last_pending=PendingReading(0.0, 30.0, 1.0, 5.0, 10.0)), 4.0).last
    assert old is not None and old.ready_before is None
