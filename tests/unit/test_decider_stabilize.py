"""The pure decider, step by step (stabilize: the scale-down window and the burst memory): a table (or a few
cases) per step of the pipeline; split from test_decider.py. Scenarios over time are in
test_decider_scenarios.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.decider_cases import CAP, POLICY, rates
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Demand, State, Step


# --- step: stabilize (windows and burst memory) --------------------------------------------------
def test_scale_down_window_is_learned_unless_set():
    # what a removed replica takes to come back: the learned cold start and one tick
    assert D.scale_down_window(POLICY, State(cold_start_s=90.0))[0] == 90.0 + POLICY.interval_s
    assert D.scale_down_window(POLICY, State())[0] == D.DEFAULT_COLD_START_S + POLICY.interval_s
    assert D.scale_down_window(POLICY, State(cold_start_s=5.0))[0] == 2 * POLICY.interval_s
    assert D.scale_down_window(replace(POLICY, scale_down_stabilization_s=300.0), State())[0] == 300.0


def test_burst_hold_needs_recurring_surprises_and_grows_with_their_gaps():
    tick = POLICY.interval_s
    assert D.burst_hold(State(cold_start_s=60.0, surprises=(100.0,)), 150.0, tick) == 0.0  # one may be a one-off
    st = State(cold_start_s=60.0, surprises=(100.0, 400.0))
    assert D.burst_hold(st, 450.0, tick) == D.SURPRISE_HOLD_COLD_STARTS * 60.0  # 2 x 300 s gap < 10 cold starts
    assert D.burst_hold(st, 400.0 + D.SURPRISE_HOLD_COLD_STARTS * 60.0 + 1, tick) == 0.0  # expired
    st = State(cold_start_s=60.0, surprises=(100.0, 1000.0))
    assert D.burst_hold(st, 1100.0, tick) == min(D.MAX_BURST_HOLD_S, D.BURST_HOLD_GAPS * 900.0)
    assert D.burst_hold(State(), 0.0, tick) == 0.0


@pytest.mark.parametrize(("cold_start_s", "surprises", "hold"), [
    # 60 s cold start: each surprise costs ~75 s of misses, the budget is 180 s (10% of 1800 s)
    (60.0, (555.0, 780.0), 600.0),  # two: 150 s spent, 10 cold starts (2 x the 225 s gap is less)
    # three spent it (225 s): the next surprise would break the objective, so the memory holds its
    # longest -- not 10 cold starts (600 s; 2 x the 270 s gap is less), which the next on/off burst,
    # 740 s on, outlasted (onoff/cold60s/tight/seed6)
    (60.0, (555.0, 780.0, 1050.0), 1800.0),
    (15.0, (100.0, 200.0, 300.0), 200.0),  # 15 s: three cost ~90 s, within the budget: 2 x the gap
    (15.0, tuple(100.0 * k for k in range(1, 7)), 1800.0),  # six cost ~180 s: spent
])
def test_burst_hold_is_longest_once_the_surprises_spent_the_window_budget(cold_start_s, surprises, hold):
    st = State(cold_start_s=cold_start_s, surprises=surprises)
    assert D.burst_hold(st, surprises[-1] + 1.0, POLICY.interval_s) == hold


@pytest.mark.parametrize(("surprises", "now", "kept"), [
    ((), 100.0, ()),
    ((100.0,), 1900.0, (100.0,)),  # the last one MAX_BURST_HOLD_S ago: still remembered
    ((100.0,), 1901.0, ()),  # then forgotten
    # The group the last surprise came in, measured back from it, not from now: the first is
    # 1,830 s old, but within MAX_BURST_HOLD_S of the second, so the memory they engaged holds
    # for its whole hold after the second (steps/cold60s/tight/seed7 let go of it here)
    ((690.0, 2040.0), 2520.0, (690.0, 2040.0)),
    ((100.0, 2000.0, 2500.0), 2600.0, (2000.0, 2500.0)),  # 100 s is 2,400 s before the last
    ((690.0, 2040.0), 3841.0, ()),
])
def test_recurring_surprises_are_measured_back_from_the_last_one(surprises, now, kept):
    assert D.recurring(surprises, now) == kept


def test_the_burst_memory_holds_its_whole_hold_after_the_second_surprise():
    """Surprises at 690 and 2,040 s at a 60 s cold start engage the memory (two recur), which holds
    min(MAX_BURST_HOLD_S, 2 x the 1,350 s gap) = 1,800 s after the second. Each tick's ``surprise``
    keeps both until then, though the first is older than MAX_BURST_HOLD_S from 2,490 s on."""
    hist = tuple((float(t), 500.0, 600.0) for t in range(2220, 2521, 15))
    st = State(rates=hist, cold_start_s=60.0, surprises=(690.0, 2040.0))
    for now in (2520.0, 3000.0, 3840.0):
        after = D.surprise(st, D.Demand(500.0, 500.0, 0.0), now)
        assert after.surprises == (690.0, 2040.0)
        assert D.burst_hold(after, now, POLICY.interval_s) == D.MAX_BURST_HOLD_S
    gone = D.surprise(st, D.Demand(500.0, 500.0, 0.0), 3841.0)
    assert gone.surprises == () and D.burst_hold(gone, 3841.0, POLICY.interval_s) == 0.0


@pytest.mark.parametrize(("cold_start_s", "interval_s", "cost"), [
    (None, 15.0, D.DEFAULT_COLD_START_S + 15.0),  # nothing learned: the default cold start
    (15.0, 15.0, 30.0),
    (60.0, 15.0, 75.0),
    (180.0, 30.0, 210.0),
])
def test_a_surprise_costs_a_horizon_against_a_tenth_of_the_memory(cold_start_s, interval_s, cost):
    st = State() if cold_start_s is None else State(cold_start_s=cold_start_s)
    assert D.surprise_cost(st, interval_s) == (cost, D.SURPRISE_BUDGET * D.MAX_BURST_HOLD_S)


@pytest.mark.parametrize(("cold_start_s", "interval_s", "needed"), [
    (15.0, 15.0, 2),  # a surprise costs ~30 s of misses: a single one may be a one-off
    (60.0, 15.0, 2),  # ~75 s: two fit the budget (10% of 1800 s = 180 s)
    (75.0, 15.0, 2),  # ~90 s: two still fit
    (90.0, 15.0, 1),  # ~105 s: a second would not
    (180.0, 15.0, 1),  # ~195 s: one already spends the budget
    (600.0, 30.0, 1),
])
def test_surprises_for_memory_follows_what_a_surprise_costs(cold_start_s, interval_s, needed):
    st = State(cold_start_s=cold_start_s)
    assert D.surprises_for_memory(st, interval_s) == needed
    one = replace(st, surprises=(100.0,))
    assert (D.burst_hold(one, 150.0, interval_s) > 0.0) == (needed == 1)


def _fall_case(cold_start_s: float, now_rate: float, before: tuple[float, ...], surprises=()) -> State:
    """Readings every 15 s up to t = 600 (noise ~1 rps), then ``before`` for the last minute and
    ``now_rate`` at t = 660; returns the state after ``sudden_fall``."""
    steady = tuple((15.0 * k, 1000.0 + (k % 2)) for k in range(40))
    last = tuple((600.0 + 15.0 * (i + 1), r) for i, r in enumerate(before))
    st = State(cold_start_s=cold_start_s, rates=rates(*steady, *last, (660.0, now_rate)), surprises=surprises)
    return D.sudden_fall(st, Demand(now_rate, now_rate, 0.0), 660.0, CAP, POLICY.interval_s)


@pytest.mark.parametrize(("cold_start_s", "now_rate", "before", "surprises", "recorded"), [
    (180.0, 550.0, (1000.0, 1000.0, 1000.0), (), True),  # a step down by ~1.8 replicas
    (60.0, 550.0, (1000.0, 1000.0, 1000.0), (), False),  # short cold start: memory waits for two
    (180.0, 900.0, (1000.0, 1000.0, 1000.0), (), False),  # less than one replica's capacity
    (180.0, 940.0, (1010.0, 990.0, 970.0), (), False),  # a slope: within a minute no replica freed
    (180.0, 1000.0, (1000.0, 1600.0, 1000.0), (), False),  # a burst's end: back to the minute's level
    (180.0, 550.0, (1000.0, 1000.0, 1000.0), (500.0,), False),  # the memory already holds
])
def test_sudden_fall_engages_the_memory_only_for_a_jump_at_long_cold_starts(
        cold_start_s, now_rate, before, surprises, recorded):
    st = _fall_case(cold_start_s, now_rate, before, surprises)
    assert (660.0 in st.surprises) == recorded
    if recorded:  # and the memory then holds: the need from before the fall is kept
        assert D.burst_hold(st, 700.0, POLICY.interval_s) > 0.0


def test_stabilize_holds_the_window_maximum_and_the_burst_memory():
    st = State(cold_start_s=60.0, recommendations=((0.0, 8, 7), (50.0, 6, 5)))
    step, _ = D.stabilize(Step(3, "LoadDecreased", ""), st, POLICY, 8, 100.0, remember=3, bare=3)
    assert (step.replicas, step.reason) == (6, "StabilizingScaleDown")  # 8 is outside the 60 s window
    burst = replace(st, surprises=(5.0, 10.0))
    step, _ = D.stabilize(Step(3, "LoadDecreased", ""), burst, POLICY, 8, 100.0, remember=3, bare=3)
    assert (step.replicas, step.reason) == (7, "BurstMemory")  # the bare peak need since the surprise
    step, _ = D.stabilize(Step(9, "LoadIncreased", ""), st, POLICY, 8, 100.0, remember=9, bare=8)
    assert step.replicas == 9  # scale-up at once (window 0)


def test_a_window_the_spec_sets_is_the_whole_hold():
    """scaleDown.stabilizationSeconds, when set, is all the scale-down waits for, as the HPA's window is: the
    burst memory holds only under the learned window (the CRD: "Unset: learned ... longer while the request
    rate keeps jumping"). It held under a set one too until session 101."""
    burst = State(cold_start_s=60.0, recommendations=((0.0, 8, 7), (50.0, 6, 5)), surprises=(5.0, 10.0))
    assert D.burst_hold(burst, 100.0, POLICY.interval_s) > 0.0  # the memory is engaged
    for window, held in ((60.0, 6), (120.0, 8), (0.0, 3)):
        step, _ = D.stabilize(Step(3, "LoadDecreased", ""), burst, replace(POLICY, scale_down_stabilization_s=window),
                              8, 100.0, remember=3, bare=3)
        assert step.replicas == held and step.reason != "BurstMemory", (window, step)
    step, _ = D.stabilize(Step(3, "LoadDecreased", ""), burst, POLICY, 8, 100.0, remember=3, bare=3)
    assert (step.replicas, step.reason) == (7, "BurstMemory")  # unset: learned, the memory with it
    assert "a set scaleDown.stabilizationSeconds holds that window instead" in step.why  # how to opt out


def test_a_hold_above_the_count_found_keeps_that_count_and_says_so():
    """As the HPA's scale-down window: a hold keeps replicas and adds none. A count another writer cut below
    the burst memory (kubectl scale to 3 while 8 was held) stays at 3, and the reason says it: it read
    "holding the peak need of 8 ... -> 3 replicas"."""
    burst = State(cold_start_s=60.0, recommendations=((50.0, 8, 8),), surprises=(5.0, 10.0))
    step, _ = D.stabilize(Step(2, "LoadDecreased", ""), burst, POLICY, 3, 100.0, remember=2, bare=2)
    assert (step.replicas, step.reason) == (3, "BurstMemory")
    assert "holding the peak need of 8" in step.why and "(held at the 3 there are: a hold keeps replicas, " \
        "it adds none)" in step.why
    step, _ = D.stabilize(Step(2, "LoadDecreased", ""), burst, POLICY, 8, 100.0, remember=2, bare=2)
    assert step.replicas == 8 and "held at the" not in step.why  # the hold within the count: said as before


def test_empty_memory_seeds_the_window_with_the_current_size():
    step, st = D.stabilize(Step(2, "LoadDecreased", ""), State(), POLICY, 6, 1000.0, remember=2, bare=2)
    assert step.replicas == 6 and st.recommendations[0][1] == 6
