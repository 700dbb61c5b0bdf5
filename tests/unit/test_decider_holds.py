"""The pure decider, step by step (the holds: tolerate, measure, climbing and complete): a table (or a few cases)
per step of the pipeline; split from test_decider.py. Scenarios over time are in test_decider_scenarios.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.decider_cases import A_MS, B_MS, CAP, POLICY, known_capacity, ok, rates, sawtooth
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import PendingReading, Replicas, State, Step


# --- step: tolerate ----------------------------------------------------------------------------
@pytest.mark.parametrize(("rec", "planned", "current", "replicas", "reason"), [
    (3, 4 * CAP * D.UTILISATION * 0.95, 4, 4, "WithinTolerance"),  # 95% of plan: hold
    (2, 4 * CAP * D.UTILISATION * 0.5, 4, 3, "LoadDecreased"),  # 2 would run full: 3, with hysteresis
    (2, 4 * CAP * D.UTILISATION * 0.4, 4, 2, "LoadDecreased"),
    (6, 4 * CAP * D.UTILISATION * 1.3, 4, 6, "LoadIncreased"),  # scale-up is never held back
])
def test_tolerate_holds_scale_down_only(rec, planned, current, replicas, reason):
    step = D.tolerate(Step(rec, "LoadDecreased" if rec < current else "LoadIncreased", ""), planned, CAP,
                      current, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


@pytest.mark.parametrize(("rec", "planned", "current", "revised", "replicas", "reason"), [
    (2, 3 * CAP * D.UTILISATION * 2 / 3 * 0.95, 3, True, 2, "LoadDecreased"),  # 2 at 95%: no band for it
    (2, 3 * CAP * D.UTILISATION * 2 / 3 * 0.95, 3, False, 3, "WithinTolerance"),  # ... which holds 3 otherwise
    (3, 4 * CAP * D.UTILISATION * 0.95, 4, True, 3, "LoadDecreased"),  # within the band at 4: still not held
    (6, 4 * CAP * D.UTILISATION * 1.3, 4, True, 6, "LoadIncreased"),  # a scale-up is its own
])
def test_tolerate_does_not_hold_a_count_raised_on_a_revised_guess(rec, planned, current, revised, replicas, reason):
    step = D.tolerate(Step(rec, "LoadDecreased" if rec < current else "LoadIncreased", ""), planned, CAP,
                      current, POLICY, revised=revised)
    assert (step.replicas, step.reason) == (replicas, reason)
    assert ("guessed from one batch size" in step.why) is (revised and rec < current)


_FLAT = 2 * CAP * D.UTILISATION * 0.95  # 2 replicas carry it at 95% of the plan: within the tolerance


def _flat(state: State, now: float) -> State:
    """``state`` with a flat rate history long enough for the noise (steps.measure lets it scale down),
    the recommendation of 3 older than the scale-down window and the last tick's of 2 within it
    (steps.stabilize: a memory with none in the window is a lapse, and holds the count)."""
    return replace(state, rates=tuple((now - 15.0 * k, _FLAT, _FLAT) for k in range(30, 0, -1)),
                   recommendations=((now - 200.0, 3, 2), (now - 15.0, 2, 2)))


@pytest.mark.parametrize(("raised_on_guess", "replicas"), [(True, 2), (False, 3)])
def test_a_count_raised_on_a_guess_is_released_once_the_capacity_is_known(raised_on_guess, replicas):
    st = _flat(known_capacity(State(raised_on_guess=raised_on_guess)), 1000.0)
    d = D.decide(ok(_FLAT, batch=8.0), Replicas(3, 3), POLICY, st, 1000.0)
    assert d.replicas == replicas, d.message
    assert d.state.raised_on_guess is (raised_on_guess and replicas == 3)  # a scale-down clears it


def test_a_count_raised_on_a_guess_is_held_while_the_capacity_is_still_the_guess():
    st = _flat(State(batch_samples=((8.0, A_MS + 8 * B_MS, 1000.0),), raised_on_guess=True), 1000.0)
    d = D.decide(ok(_FLAT, batch=8.0), Replicas(3, 3), POLICY, st, 1000.0)
    assert "one batch size" in d.message and d.replicas == 3 and d.state.raised_on_guess


@pytest.mark.parametrize(("samples", "flag"), [
    (((8.0, A_MS + 8 * B_MS, 0.0),), True),  # one batch size: the scale-up rests on the guess
    (None, False),  # the cost line known
])
def test_a_scale_up_records_whether_it_rested_on_a_guess(samples, flag):
    st = known_capacity() if samples is None else State(batch_samples=samples)
    d = D.decide(ok(3 * CAP, batch=8.0), Replicas(2, 2), POLICY, st, 15.0)
    assert d.replicas > 2 and d.state.raised_on_guess is flag, d.message


# --- step: measure -----------------------------------------------------------------------------
SHORT = tuple((15.0 * k, 500.0, 500.0) for k in range(9))  # 8 differences: the noise is not measured yet
LONG = tuple((15.0 * k, 500.0, 500.0) for k in range(10))  # 9: it is (2 x NOISE_SHIFTS x SHIFT_READINGS + 1)


@pytest.mark.parametrize(("hist", "step", "current", "replicas", "reason"), [
    (SHORT, D.Step(3, "LoadDecreased", "x"), 5, 5, "MeasuringNoise"),  # a plan without its margin: no less
    (LONG, D.Step(3, "LoadDecreased", "x"), 5, 3, "LoadDecreased"),
    (SHORT, D.Step(7, "LoadIncreased", "x"), 5, 7, "LoadIncreased"),  # more, at once
    (SHORT, D.Step(1, "Idle", "x"), 5, 1, "Idle"),  # no requests: nothing to measure
    (SHORT, D.Step(5, "Steady", "x"), 5, 5, "Steady"),
])
def test_measure_holds_scale_down_until_the_noise_is_measured(hist, step, current, replicas, reason):
    now = hist[-1][0]
    assert D.noise_measured(hist, now) == (len(hist) - 1 >= 2 * D.NOISE_SHIFTS * D.SHIFT_READINGS + 1)
    got = D.measure(step, State(rates=hist), now, current)
    assert (got.replicas, got.reason) == (replicas, reason)


# --- step: climbing ----------------------------------------------------------------------------
FLAT = tuple((15.0 * k, 1000.0 + (5.0 if k % 2 else -5.0), 0.0) for k in range(20))  # noise ~5 rps
VEE = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 760.0), (360.0, 830.0))
FALL = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 650.0), (360.0, 600.0))
WOBBLE = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 701.0), (360.0, 703.0))
# two minutes up at 2 rps/s out of a drop: in the 75 s window the low is 820 rps at 360 s and the latest reading
# 970, so the climb leads to 970 + 2 rps/s x 75 s (a 60 s cold start and a tick) = 1,120 rps
SEEN = FLAT + rates(*((300.0 + 15.0 * k, 700.0 + 30.0 * k) for k in range(10)))


@pytest.mark.parametrize(("hist", "step", "planned", "replicas", "reason"), [
    (VEE, D.Step(3, "LoadDecreased", "x"), None, 5, "RateClimbing"),  # 130 rps out of the window's low of 700
    (FALL, D.Step(3, "LoadDecreased", "x"), None, 3, "LoadDecreased"),  # still falling: the low is now
    (WOBBLE, D.Step(3, "LoadDecreased", "x"), None, 3, "LoadDecreased"),  # 3 rps over the low: within the noise
    (VEE, D.Step(7, "LoadIncreased", "x"), None, 7, "LoadIncreased"),  # scale-ups are not its business
    (VEE, D.Step(1, "Idle", "x"), None, 1, "Idle"),  # no requests: the floor
    (SEEN, D.Step(3, "LoadDecreased", "x"), 1120.0, 3, "LoadDecreased"),  # the plan carries the climb
    (SEEN, D.Step(3, "LoadDecreased", "x"), 1100.0, 5, "RateClimbing"),  # not yet where the climb leads
    (SEEN, D.Step(3, "LoadDecreased", "x"), None, 5, "RateClimbing"),  # no plan given: held while it climbs
])
def test_climbing_holds_a_scale_down_while_the_rate_climbs_out_of_the_windows_low(hist, step, planned, replicas,
                                                                                    reason):
    now = hist[-1][0]
    got = D.climbing(step, State(rates=hist, cold_start_s=60.0), POLICY, 5, now, planned=planned)
    assert (got.replicas, got.reason) == (replicas, reason)
    if reason == "RateClimbing" and hist is VEE:
        assert "climbs 130 rps out of the lowest reading of the last 75s" in got.why
    if planned == 1100.0:
        assert "until the plan reaches where the climb leads, 1120 rps" in got.why


def test_climbing_expects_the_climb_to_go_on_as_far_as_the_rate_delivered_its_trends(monkeypatch):
    # SEEN's climb leads to 970 + 2 rps/s x 75 s; a rate that delivered half its trends, to 970 + 75
    monkeypatch.setattr(D.steps, "trend_delivery", lambda *a: 0.5)
    state = State(rates=SEEN, cold_start_s=60.0)
    held = D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, SEEN[-1][0], planned=1040.0)
    assert held.reason == "RateClimbing" and "where the climb leads, 1045 rps" in held.why
    assert D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, SEEN[-1][0], planned=1045.0).replicas == 3


def test_climbing_out_of_the_trough_after_a_ramp_is_held_on_the_delivery_of_few_ticks(monkeypatch):
    """The next ramp out of the trough after a sawtooth's top (``ramps/cold60s/loose/seed1`` at 2,685 s, session
    100): the only ticks whose trend can be checked are the four at the last ramp's top, each followed by the
    drop. Their raw share, 0, said the climb leads nowhere, and the fleet came down as the ramp began; counted
    with three more ticks that delivered the mean rise whole (3/7), the climb leads past the plan and holds."""
    climb = sawtooth(1) + rates((300.0, 600.0), (315.0, 660.0), (330.0, 720.0))
    assert D.trend_delivery(climb, 330.0, 75.0, POLICY.window_s) == pytest.approx(3.0 / 7.0)
    got = D.climbing(D.Step(3, "LoadDecreased", "x"), State(rates=climb, cold_start_s=60.0), POLICY, 5, 330.0,
                     sigma=10.0, planned=760.0)
    # 720 + 3/7 x (120 rps since the window's first low, at 255 s: 1.6 rps/s) x 75 s
    assert got.reason == "RateClimbing" and "where the climb leads, 771 rps" in got.why, got
    monkeypatch.setattr(D.constants, "TREND_EVIDENCE", 0)  # the raw share: the climb leads to 720, below the plan
    assert D.climbing(D.Step(3, "LoadDecreased", "x"), State(rates=climb, cold_start_s=60.0), POLICY, 5, 330.0,
                      sigma=10.0, planned=760.0).replicas == 3


def test_climbing_reads_only_the_scale_down_window(monkeypatch):
    # at a 15 s cold start the window is 30 s (cold start + tick): the low of 700 rps at 330 s is outside
    # it, and the climb is counted from 830 rps at 360 s
    state = State(rates=VEE + rates((375.0, 900.0), (390.0, 970.0)), cold_start_s=15.0)
    got = D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, 390.0)
    assert got.reason == "RateClimbing" and "climbs 140 rps out of the lowest reading of the last 30s" in got.why
    monkeypatch.setattr(D.constants, "CLIMB_NOISES", 0.0)  # off
    assert D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, 390.0).replicas == 3


# --- step: complete -----------------------------------------------------------------------------
@pytest.mark.parametrize(("step", "pods", "ready_before", "replicas", "reason"), [
    # 4 of 6 pods unseen: the rate reads a third of the load; one replica kept per missing pod
    (D.Step(3, "LoadDecreased", "x"), 2.0, 6, 6, "PartialData"),
    (D.Step(1, "Idle", "x"), 2.0, 6, 5, "PartialData"),  # the unseen pods may be the busy ones
    (D.Step(1, "LoadDecreased", "x"), 5.0, 6, 2, "PartialData"),  # one unseen: the seen load's 1, and 1
    (D.Step(3, "LoadDecreased", "x"), 2.0, None, 6, "PartialData"),  # no earlier tick: the ready count now
    (D.Step(3, "LoadDecreased", "x"), 6.0, 6, 3, "LoadDecreased"),
    (D.Step(3, "LoadDecreased", "x"), 7.0, 6, 3, "LoadDecreased"),  # a starting pod scraped too: no matter
    (D.Step(3, "LoadDecreased", "x"), None, 6, 3, "LoadDecreased"),  # a source that does not count pods
    (D.Step(3, "LoadDecreased", "x"), 4.0, 4, 3, "LoadDecreased"),  # 2 ready since the last tick, unscraped yet
    (D.Step(3, "LoadDecreased", "x"), 3.0, 4, 4, "PartialData"),
    (D.Step(9, "LoadIncreased", "x"), 2.0, 6, 9, "LoadIncreased"),  # a low reading that still asks for more
    (D.Step(6, "Steady", "x"), 2.0, 6, 6, "Steady"),
])
def test_complete_keeps_a_replica_for_each_pod_missing_from_the_series(step, pods, ready_before, replicas, reason):
    obs = replace(ok(100.0), pods=pods)
    state = State(last_pending=PendingReading(0.0, 0.0, 6.0, 0.0, 0.0, ready_before))
    got = D.complete(step, obs, Replicas(6, 6), state, 6)
    assert (got.replicas, got.reason) == (replicas, reason)
    if reason == "PartialData":
        settled = min(6, ready_before or 6)
        assert got.why.endswith(f"only {pods:.0f} of the {settled} ready replicas export Triton's series now: "
                                "one replica kept for each missing pod")


@pytest.mark.parametrize(("step", "pods", "rate_pods", "replicas", "what"), [
    # a window shorter than two scrape intervals: every pod has series, 3 of 6 a rate -- half the load read
    (D.Step(3, "LoadDecreased", "x"), 6.0, 3.0, 6, "have a rate over the window (two scrapes in it)"),
    (D.Step(2, "LoadDecreased", "x"), 6.0, 5.0, 3, "have a rate over the window (two scrapes in it)"),
    (D.Step(3, "LoadDecreased", "x"), 4.0, 3.0, 6, "export Triton's series now"),  # scrapes failing too
    (D.Step(3, "LoadDecreased", "x"), 6.0, 6.0, 3, None),
    (D.Step(3, "LoadDecreased", "x"), 6.0, None, 3, None),  # a source that does not count them (the simulator)
    (D.Step(8, "LoadIncreased", "x"), 6.0, 3.0, 8, None),  # scale-ups are left alone
])
def test_complete_keeps_a_replica_for_each_pod_without_a_rate_over_the_window(step, pods, rate_pods, replicas, what):
    """A windowSeconds under twice the scrape interval read a third to half of the traffic as all of it,
    status said Available, and the fleet settled at 3 where 5 were needed, or flapped 6 -> 5 -> 6 (an
    exploration against Debian's Prometheus, session 55)."""
    obs = replace(ok(100.0), pods=pods, rate_pods=rate_pods)
    state = State(last_pending=PendingReading(0.0, 0.0, 6.0, 0.0, 0.0, 6))
    got = D.complete(step, obs, Replicas(6, 6), state, 6)
    assert got.replicas == replicas
    if what is None:
        assert got.reason == step.reason
    else:
        assert got.reason == "PartialData" and f"ready replicas {what}: one replica kept" in got.why, got.why


def test_noise_is_measured_over_the_last_five_minutes_or_enough_readings_at_long_ticks():
    """At 15 s ticks the last NOISE_S hold 20 readings; at 60 s ticks only 5 or 6, never the 10 the
    noise needs, so a slow-ticking service would never measure it -- and, held by ``measure``, never
    scale down. There the last readings enough for both lags' estimates count instead, and the rate
    history keeps that many."""
    wobble = (3.0, -4.0, 6.0, -1.0, 2.0, -7.0, 5.0, 0.0, -3.0, 4.0)
    slow = tuple((60.0 * k, 500.0 + wobble[k], 500.0) for k in range(10))
    now = slow[-1][0]
    assert sum(1 for e in slow if now - e[0] <= D.NOISE_S) == 6
    assert D.noise_measured(slow, now) and D.noise(slow, now) > 0.0
    assert not D.noise_measured(slow[:9], slow[8][0])  # eight differences: not yet
    fast = tuple((15.0 * k, 500.0, 500.0) for k in range(40))
    assert D.noise_measured(fast, fast[-1][0])
    policy = replace(POLICY, interval_s=60.0)
    assert D.signals.rate_memory(State(cold_start_s=15.0), policy) >= 14 * 60.0  # 15 readings at 60 s
