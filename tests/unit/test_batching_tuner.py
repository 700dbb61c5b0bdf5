"""The pure batching tuner (scaling/batching_tuner.py): tables with a fake clock. The batcher model it
scores with is test_batcher_model.py's; status.batching and the tick's inputs are test_batching_status.py's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from support.tuner_cases import B16, COST, DEFAULT, GREEDY, MISSING, OVERSIZED, SLOW, TIGHT
from tritonscale.scaling.batching_tuner import (
    CONFIRM_S,
    MIN_CHANGE_INTERVAL_S,
    Bounds,
    Settings,
    TunerObservation,
    TunerState,
    candidates,
    scoring_cost,
    tune,
)

# ---- the tuner -------------------------------------------------------------------------------


def _obs(rate: float = 150.0, target: float | None = TIGHT, **kw: Any) -> TunerObservation:
    return TunerObservation(kw.pop("cost", COST), rate, target, **kw)


@pytest.mark.parametrize(("obs", "current", "reason"), [
    (_obs(rollout=True), OVERSIZED, "Rollout"),
    (_obs(target=None), OVERSIZED, "NoTarget"),
    (_obs(cost=None), OVERSIZED, "LearningCost"),
    (_obs(rate=0.0), OVERSIZED, "Idle"),
    (_obs(), GREEDY, "Optimal"),
    (_obs(), DEFAULT, "WithinHysteresis"),  # the same capacity and p95: not worth a reload
    (_obs(), SLOW, "Confirming"),  # first proposal
    (_obs(), MISSING, "Confirming"),  # predicted over the target, but some rate meets it: confirmed as ever
    (_obs(), OVERSIZED, "MoreCapacity"),  # no rate meets the target with it: at once, nothing to confirm
    (_obs(p95_ms=130.0), OVERSIZED, "BreachRelief"),  # breaching, and no delay lowers p95: at once
    # within the tolerance (a p95 up to target x 1.1 is no breach for the decider either): hysteresis ...
    (_obs(p95_ms=TIGHT * 1.05, tolerance=0.1), MISSING, "Confirming"),
    (_obs(p95_ms=TIGHT * 1.15, tolerance=0.1), MISSING, "BreachRelief"),
    # ... but not for settings no rate meets the target with
    (_obs(p95_ms=TIGHT * 1.05, tolerance=0.1), OVERSIZED, "MoreCapacity"),
    (_obs(p95_ms=TIGHT * 1.15, tolerance=0.1), OVERSIZED, "BreachRelief"),
    (_obs(p95_ms=130.0), GREEDY, "Optimal"),
])
def test_first_call(obs: TunerObservation, current: Settings, reason: str) -> None:
    out = tune(obs, current, B16, TunerState(), 1000.0)
    assert out.reason == reason, out.message
    assert out.changed == (reason in ("BreachRelief", "MoreCapacity"))
    if not out.changed:
        assert out.settings == current


def test_breach_relief_goes_to_greedy_batching() -> None:
    out = tune(_obs(p95_ms=130.0), OVERSIZED, B16, TunerState(), 1000.0)
    assert out.settings == GREEDY and out.state.last_change == 1000.0
    assert "capacity 0 -> 265 rps" in out.message  # what the decider plans greedy batching with here


def test_a_breach_the_settings_cannot_help_changes_nothing() -> None:
    # greedy in force on overloaded replicas: no candidate lowers p95 there, so nothing changes
    out = tune(_obs(rate=300.0, p95_ms=400.0), GREEDY, B16, TunerState(), 1000.0)
    assert not out.changed and out.reason == "Optimal"


@pytest.mark.parametrize("current", [Settings(1000, ()), Settings(50_000, (2, 4))])
def test_a_breach_the_settings_do_not_cause_rolls_nothing(current: Settings) -> None:
    """The sandbox's step (auditB, session 82): p95 473 ms against 200 right after the scale-up, from the
    backlog and the 60 s summary. The settings in force were predicted at 118 and 124 ms there, the pick at
    118 and 116: BreachRelief rolled every replica during the high phase, and with no GPU for the surge pod
    the rollout stayed half made for 4 minutes. That breach is the decider's to answer, with replicas."""
    obs = _obs(rate=24.0, target=200.0, cost=(25.4, 13.95), p95_ms=473.0, tolerance=0.1)
    out = tune(obs, current, Bounds(4), TunerState(), 1000.0)
    assert (out.reason, out.changed, out.settings) == ("Breach", False, current), out.message
    assert "predicted within the target at this rate: replicas, not the batcher, answer it" in out.message
    # without the breach the same gain is within the hysteresis, as before
    calm = tune(replace(obs, p95_ms=150.0), current, Bounds(4), TunerState(), 1000.0)
    assert calm.reason in ("WithinHysteresis", "Optimal") and not calm.changed


def test_confirming_says_when_the_spacing_holds_a_change_longer() -> None:
    """It said "applied after 60s" where the 600 s spacing after the last change then held it (TooSoon)."""
    soon = tune(_obs(), SLOW, B16, TunerState(last_change=900.0), 1000.0)
    assert soon.reason == "Confirming" and "applied after 60s, and not before 600s after the last change (500s " \
        "from now)" in soon.message, soon.message
    late = tune(_obs(), SLOW, B16, TunerState(last_change=300.0), 1000.0)
    assert late.reason == "Confirming" and "applied after 60s (" in late.message, late.message


def test_a_stuck_rollout_of_a_change_goes_back_to_what_the_running_pods_serve() -> None:
    """A change whose new pods cannot be placed (no GPU for the surge pod): status.batching said the new
    settings were in force while the only serving pod ran the old ones, and the rollout never ended (found
    in the sandbox by an exploratory review). At the Deployment's progress deadline it goes back."""
    first = tune(_obs(p95_ms=130.0), OVERSIZED, B16, TunerState(), 1000.0)
    assert first.changed and first.settings == GREEDY and first.state.previous == OVERSIZED
    rolling = tune(_obs(p95_ms=130.0, rollout=True, updating=True), GREEDY, B16, first.state, 1015.0)
    assert (rolling.reason, rolling.changed, rolling.state.previous, rolling.state.rolling_seen) == \
        ("Rollout", False, OVERSIZED, True)
    assert TunerState.from_dict(rolling.state.to_dict()) == rolling.state  # survives a restart
    stuck = tune(_obs(p95_ms=130.0, rollout=True, updating=True, stuck=True), GREEDY, B16, rolling.state, 1615.0)
    assert (stuck.reason, stuck.changed, stuck.settings) == ("RolloutStuck", True, OVERSIZED)
    assert "passed the Deployment's progress deadline" in stuck.message
    # the rollback done: no change for STUCK_HOLD_S, even for a breach
    after = tune(_obs(p95_ms=130.0), OVERSIZED, B16, stuck.state, 1700.0)
    assert (after.reason, after.changed) == ("HeldAfterStuckRollout", False)
    later = tune(_obs(p95_ms=130.0), OVERSIZED, B16, stuck.state, 1615.0 + 3600.0)
    assert later.changed and later.reason == "BreachRelief"
    # a hold once the hold has passed does not keep showing it (tunerState.heldUntil in status)
    assert stuck.state.held_until is not None and stuck.state.to_dict()["heldUntil"] is not None
    for obs, reason in ((_obs(rate=0.0), "Idle"), (_obs(rollout=True), "Rollout"), (_obs(target=None), "NoTarget")):
        out = tune(obs, OVERSIZED, B16, stuck.state, 1615.0 + 3600.0)
        assert (out.reason, out.state.held_until, out.state.to_dict()["heldUntil"]) == (reason, None, None)
    assert tune(_obs(rollout=True), OVERSIZED, B16, stuck.state, 1700.0).state.held_until is not None  # not yet


def test_a_finished_rollout_forgets_the_settings_before_it() -> None:
    """Once the change has rolled out, a later stuck rollout (the user's edit, say) is not the tuner's to undo."""
    first = tune(_obs(p95_ms=130.0), OVERSIZED, B16, TunerState(), 1000.0)
    lagging = tune(_obs(p95_ms=60.0), GREEDY, B16, first.state, 1015.0)  # the reconciler has not rolled it yet
    assert lagging.state.previous == OVERSIZED
    rolling = tune(_obs(p95_ms=60.0, rollout=True, updating=True), GREEDY, B16, lagging.state, 1030.0)
    # every pod of the new template, two of a scale-up still Pending: rolled out all the same (a review found
    # the tuner then "went back" from settings every pod served)
    done = tune(_obs(p95_ms=60.0, rollout=True), GREEDY, B16, rolling.state, 1200.0)
    assert done.state.previous is None
    edit_stuck = tune(_obs(p95_ms=60.0, rollout=True, updating=True, stuck=True), GREEDY, B16, done.state, 2000.0)
    assert (edit_stuck.reason, edit_stuck.changed) == ("Rollout", False)


def test_no_capacity_either_way_is_no_gain_to_roll_the_fleet_for() -> None:
    """A target below what any setting serves (a = 50 ms, target 60 ms): every candidate's capacity at the
    target is 0, and 0 >= 0 x 1.05 read as a gain -- "capacity 0 -> 0 rps", and a rollout (found by an
    exploratory review)."""
    obs = TunerObservation((50.0, 5.0), 5.0, 60.0)
    first = tune(obs, DEFAULT, B16, TunerState(), 1000.0)
    later = tune(obs, DEFAULT, B16, first.state, 1100.0)
    assert not first.changed and not later.changed
    assert later.reason != "MoreCapacity" and later.settings == DEFAULT, later.message


def test_change_needs_the_same_candidate_for_confirm_s_then_waits_out_the_interval() -> None:
    t = 1000.0
    out = tune(_obs(), SLOW, B16, TunerState(), t)
    assert out.reason == "Confirming" and out.state.candidate == GREEDY
    out = tune(_obs(), SLOW, B16, out.state, t + CONFIRM_S - 1)
    assert out.reason == "Confirming"
    out = tune(_obs(), SLOW, B16, out.state, t + CONFIRM_S)
    assert out.changed and out.reason == "MoreCapacity" and out.settings == GREEDY
    # another change right after: too soon, even once confirmed
    later = tune(_obs(), Settings(50_000, ()), B16, TunerState(None, None, t + CONFIRM_S), t + 2 * CONFIRM_S + 1)
    later = tune(_obs(), Settings(50_000, ()), B16, later.state, t + 3 * CONFIRM_S + 2)
    assert later.reason == "TooSoon" and not later.changed
    ok = tune(_obs(), Settings(50_000, ()), B16, later.state, t + CONFIRM_S + MIN_CHANGE_INTERVAL_S)
    assert ok.changed


def test_settings_no_rate_meets_the_target_with_are_left_at_once() -> None:
    """The sandbox from a 150 ms delay (``tritonscale sandbox --batching-tuner-from 150000``; session 98): p95 216
    ms against a 200 ms target is within the 10% tolerance, so no breach, and the change waited a minute of
    proposals (68 s into the run) while the decider ran the fleet at maxReplicas for settings no rate meets the
    target with. Now it goes at the first tick that knows the cost, even right after another change (as a breach
    relief does), to every replica at once."""
    obs = _obs(rate=17.1, target=200.0, cost=(22.3, 15.38), p95_ms=216.0, tolerance=0.1)
    out = tune(obs, Settings(150_000, ()), Bounds(4), TunerState(last_change=900.0), 1000.0)
    assert (out.reason, out.changed, out.settings, out.state.at_once) == ("MoreCapacity", True, GREEDY, True)
    assert "capacity 0 -> 35 rps per replica" in out.message and "no rate meets the target" in out.message, out.message
    # a rollout still holds it, and a cost not yet known predicts nothing
    assert tune(replace(obs, rollout=True, updating=True), Settings(150_000, ()), Bounds(4), TunerState(),
                1000.0).reason == "Rollout"
    assert tune(replace(obs, cost=None), Settings(150_000, ()), Bounds(4), TunerState(), 1000.0).reason == \
        "LearningCost"


def test_a_rollout_holds_even_a_breach_relief() -> None:
    out = tune(_obs(p95_ms=200.0, rollout=True), OVERSIZED, B16, TunerState(), 1000.0)
    assert not out.changed and out.reason == "Rollout"
    out = tune(_obs(p95_ms=200.0, rollout=True, updating=True), OVERSIZED, B16, TunerState(), 1000.0)
    assert not out.changed and out.reason == "Rollout"


def test_a_scale_ups_starting_pods_do_not_hold_a_change_away_from_settings_that_miss_the_target() -> None:
    """Only replicas of the template in force still starting (``starting``): every old pod misses until its
    successor is ready, and waiting for the scale-up's pods first put the change's cold start after theirs
    (steps/cold180s/tight/seed1 of the tuner's evaluation: proposed at 30 s, changed at 210 s instead of 90 s).
    Anything else waits for them."""
    starting: dict[str, Any] = {"rollout": True, "starting": True}
    relief = tune(_obs(p95_ms=130.0, **starting), OVERSIZED, B16, TunerState(), 1000.0)
    assert (relief.reason, relief.changed, relief.settings, relief.state.at_once) == \
        ("BreachRelief", True, GREEDY, True)
    # predicted at 114 ms, no breach measured yet: proposed and confirmed as ever, then at once
    first = tune(_obs(**starting), MISSING, B16, TunerState(), 1000.0)
    assert (first.reason, first.changed) == ("Confirming", False)
    later = tune(_obs(**starting), MISSING, B16, first.state, 1000.0 + CONFIRM_S)
    assert (later.reason, later.changed, later.state.at_once) == ("MoreCapacity", True, True)
    # no rate meets the target with 100 ms: not confirmed first
    oversized = tune(_obs(**starting), OVERSIZED, B16, TunerState(), 1000.0)
    assert (oversized.reason, oversized.changed, oversized.state.at_once) == ("MoreCapacity", True, True)
    # 50 ms is predicted within the target at this rate, and a cost or a rate still unknown predicts nothing:
    # they wait for the pods, as for a rollout (not Confirming, LearningCost, Idle); so does a bounds change
    for obs, current, bounds in ((_obs(**starting), Settings(50_000, ()), B16),
                                 (_obs(cost=None, **starting), OVERSIZED, B16),
                                 (_obs(rate=0.0, **starting), OVERSIZED, B16),
                                 (_obs(p95_ms=130.0, **starting), OVERSIZED, Bounds(16, max_delay_us=50_000))):
        out = tune(obs, current, bounds, TunerState(), 1000.0)
        assert (out.reason, out.changed) == ("Rollout", False), out.message
    # the flag means nothing without a rollout to qualify
    assert tune(_obs(starting=True), Settings(50_000, ()), B16, TunerState(), 1000.0).reason != "Rollout"


def test_bounds_narrowed_apply_at_once_and_candidates_stay_within_them() -> None:
    bounds = Bounds(16, max_delay_us=5000, preferred=(8, 16))
    out = tune(_obs(), Settings(20_000, (4, 8)), bounds, TunerState(), 1000.0)
    assert out.changed and out.reason == "Bounds" and out.settings == Settings(5000, (8,))
    for c in candidates(GREEDY, bounds, COST, TIGHT):
        assert c.delay_us <= 5000 and set(c.preferred) <= {8, 16}


def test_any_size_up_to_the_maximum_is_within_bounds_that_name_none() -> None:
    """autoTune.preferredBatchSizes empty: "any size up to model.maxBatchSize". A spec's [6, 12] is
    within that, so no Bounds change (a rollout of every pod) before anything is known; the powers
    of two are only the sizes the tuner tries."""
    for current in (Settings(2000, (6, 12)), Settings(2000, (3, 6, 12)), Settings(0, (16,))):
        out = tune(TunerObservation(None, None, 100.0), current, B16, TunerState(), 5.0)
        assert not out.changed and out.reason == "LearningCost", out
        assert out.settings == current
    assert Bounds(12).within(Settings(2000, (3, 6, 12, 13))) == Settings(2000, (3, 6, 12))
    assert Bounds(16, preferred=(8,)).within(Settings(0, (6, 8))) == Settings(0, (8,))


def test_implied_delay_bound_is_what_the_target_leaves_after_a_full_batch() -> None:
    assert max(c.delay_us for c in candidates(GREEDY, B16, COST, TIGHT)) == 52_000  # 104 - 52 ms


@pytest.mark.parametrize(("fitted", "kept", "scored"), [
    ((20.1, 2.01), None, (20.1, 2.01)),  # nothing scored yet: the fit
    ((20.1, 2.01), COST, COST),  # 22.11 vs 22 ms (0.5%), 52.26 vs 52 ms (0.5%): the jitter of a fit
    ((20.0, 2.06), COST, COST),  # 52.96 vs 52 ms at a full batch (1.8%)
    ((20.0, 2.08), COST, (20.0, 2.08)),  # 53.28 vs 52 ms (2.5%): moved
    ((20.4, 2.0), COST, COST),  # 22.4 vs 22 ms (1.8%): within 2%
    ((20.5, 2.0), COST, (20.5, 2.0)),  # 22.5 vs 22 ms (2.3%): moved
    ((20.0, 1.9), COST, (20.0, 1.9)),  # 50.4 vs 52 ms at 16 (3.1%): moved
])
def test_candidates_are_scored_with_the_kept_cost_until_the_fit_moves_past_the_capacity_tie(
        fitted: tuple[float, float], kept: tuple[float, float] | None, scored: tuple[float, float]) -> None:
    assert scoring_cost(fitted, kept, 16) == scored


def test_the_tuner_keeps_the_cost_it_scored_with_so_jitter_does_not_rescore() -> None:
    first = tune(_obs(), SLOW, B16, TunerState(), 0.0)
    assert first.state.cost == COST
    again = tune(_obs(cost=(20.1, 2.01)), SLOW, B16, first.state, 15.0)
    assert again.state.cost == COST and again.reason == "Confirming"
    moved = tune(_obs(cost=(25.0, 2.0)), SLOW, B16, again.state, 30.0)
    assert moved.state.cost == (25.0, 2.0)
    assert "a=25.0 ms" in moved.message
    relief = tune(_obs(p95_ms=130.0, cost=(20.1, 2.01)), OVERSIZED, B16, TunerState(cost=COST), 0.0)
    assert relief.changed and relief.state.cost == COST  # a change keeps it too


def test_state_survives_a_round_trip_and_corrupt_memory_starts_fresh() -> None:
    st = TunerState(Settings(5000, (8, 16)), 12.5, 3.0, cost=(20.0, 2.0))
    assert TunerState.from_dict(st.to_dict()) == st
    assert TunerState.from_dict({**st.to_dict(), "cost": ["x", 1]}) == replace(st, cost=None)
    assert TunerState.from_dict({**st.to_dict(), "cost": [20.0, "nan"]}) == replace(st, cost=None)
    assert TunerState.from_dict({"candidate": {"delayUs": "x"}}) == TunerState()
    assert TunerState.from_dict(None) == TunerState()
    assert TunerState.from_dict({"lastChange": "inf"}) == TunerState()
    assert TunerState.from_dict({"candidateSince": "nan"}) == TunerState()


def test_every_change_rolls_out_to_every_replica_at_once() -> None:
    """A change starts every new pod at once (TunerState.at_once, which the reconciler renders as maxSurge 100%):
    away from settings predicted to miss the target at the rate now (an oversized delay), where every old pod
    misses until it goes, and -- since session 101 -- from settings within the target too (it rolled a quarter
    of the fleet at a time, and a change made in a flat minute ran its waves into the next climb)."""
    t = 1000.0
    relief = tune(_obs(p95_ms=130.0), OVERSIZED, B16, TunerState(), t)
    assert (relief.reason, relief.state.at_once) == ("BreachRelief", True)
    assert "rolled out to every replica at once" in relief.message
    # no breach measured yet (within the tolerance), but the 70 ms delay is predicted at 114 ms: at once too
    out = tune(_obs(), MISSING, B16, TunerState(), t)
    out = tune(_obs(), MISSING, B16, out.state, t + CONFIRM_S)
    assert (out.reason, out.state.at_once) == ("MoreCapacity", True)
    # 50 ms is predicted at 90 ms at this rate, within the 104 ms target: more headroom, at once as well
    calm = tune(_obs(), Settings(50_000, ()), B16, TunerState(), t)
    calm = tune(_obs(), Settings(50_000, ()), B16, calm.state, t + CONFIRM_S)
    assert (calm.reason, calm.changed, calm.state.at_once) == ("MoreHeadroom", True, True)
    assert calm.message.endswith("; rolled out to every replica at once")
    # a tick before the reconciler rendered the change (no rollout seen yet) keeps the flag: the rollout is to come
    early = tune(_obs(p95_ms=130.0), GREEDY, B16, relief.state, t + 15.0)
    assert (early.state.previous, early.state.at_once) == (OVERSIZED, True)
    # the flag lives while the change rolls out (a restart keeps it), and goes when the rollout is done
    rolling = tune(_obs(p95_ms=60.0, rollout=True, updating=True), GREEDY, B16, relief.state, t + 15.0)
    assert rolling.state.at_once and TunerState.from_dict(rolling.state.to_dict()) == rolling.state
    assert rolling.state.to_dict()["rolloutAtOnce"] is True
    done = tune(_obs(p95_ms=60.0), GREEDY, B16, rolling.state, t + 200.0)
    assert (done.state.previous, done.state.at_once, done.state.to_dict()["rolloutAtOnce"]) == (None, False, False)
    # going back from a stuck rollout is not at once: the settings it goes back to were the trouble
    stuck = tune(_obs(p95_ms=130.0, rollout=True, updating=True, stuck=True), GREEDY, B16, rolling.state, t + 700.0)
    assert (stuck.reason, stuck.state.at_once) == ("RolloutStuck", False)
    # only a literal true is read back
    assert TunerState.from_dict({"rolloutAtOnce": "true"}).at_once is False
