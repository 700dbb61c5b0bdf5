"""The batching tuner's clamps and timers: the implied delay bound never goes negative, a stuck
rollout goes back within the spec's bounds, and a new candidate starts its own confirmation."""

from __future__ import annotations

import pytest

from tritonscale.scaling.batching_tuner import (
    Bounds,
    Settings,
    TunerObservation,
    TunerState,
    candidates,
    tune,
)

COST = (20.0, 2.0)  # 20 ms + 2 ms per item: a full batch of 16 takes 52 ms
TOO_TIGHT = TunerObservation(COST, 100.0, 40.0)  # a 40 ms target: 12 ms less than a full batch


@pytest.mark.parametrize(("bounds", "target", "limit_us"), [
    (Bounds(16), 40.0, 0),  # 40 - 52 = -12 ms: no delay at all, never a negative one
    (Bounds(16), 52.0, 0),  # exactly a full batch: nothing left
    (Bounds(16), 60.0, 8000),  # 8 ms left after a full batch
    (Bounds(16, timeout_us=50000), 100.0, 0),  # the 50 ms queue timeout leaves less than a batch: 0
])
def test_the_implied_delay_bound_is_never_negative(bounds: Bounds, target: float, limit_us: int) -> None:
    """A target tighter than a full batch must never give a negative max_queue_delay_microseconds bound:
    Triton refuses a config.pbtxt with a negative delay, and every candidate would be built on it."""
    assert bounds.delay_limit_us(COST, target) == limit_us


def test_no_candidate_has_a_negative_delay_under_a_target_tighter_than_a_full_batch() -> None:
    """The candidates the tuner scores under a 40 ms target (below the 52 ms full batch) all have delay 0,
    bar the settings in force: a negative delay among them would be the one picked and applied."""
    cands = candidates(Settings(20000), Bounds(16), COST, 40.0)
    assert sorted({c.delay_us for c in cands}) == [0, 20000]


def test_a_target_tighter_than_a_full_batch_tunes_the_delay_to_zero() -> None:
    """With a 20 ms delay in force and a 40 ms target the model cannot meet at full batches, the tuner
    proposes, then (after CONFIRM_S) applies delay 0 -- not -12000 us, which rendered into config.pbtxt
    would make every Triton pod of the rollout refuse its model config."""
    first = tune(TOO_TIGHT, Settings(20000), Bounds(16), TunerState(), 1000.0)
    assert (first.reason, first.settings, first.state.candidate) == ("Confirming", Settings(20000), Settings(0))
    second = tune(TOO_TIGHT, Settings(20000), Bounds(16), first.state, 1100.0)
    assert (second.reason, second.settings, second.changed) == ("MoreCapacity", Settings(0), True)


def test_a_stuck_rollout_goes_back_within_bounds_narrowed_since() -> None:
    """A stuck rollout goes back to the settings before it -- but within the spec's bounds as they are now:
    a spec narrowed meanwhile (maxQueueDelayMicroseconds 20000, preferred sizes 8 and 16) must not get
    back a 50 ms delay or a preferred size 4 it no longer allows."""
    stuck = TunerObservation(COST, 100.0, 100.0, updating=True, stuck=True)
    state = TunerState(last_change=900.0, previous=Settings(50000, (4, 8)), rolling_seen=True)
    narrowed = Bounds(16, max_delay_us=20000, preferred=(8, 16))
    got = tune(stuck, Settings(10000, (8,)), narrowed, state, 1000.0)
    assert (got.reason, got.settings, got.changed) == ("RolloutStuck", Settings(20000, (8,)), True)


def test_a_new_candidate_starts_its_own_confirmation() -> None:
    """A candidate proposed 100 s ago (preferred 16) is replaced by another (delay 0): the new one must be
    confirmed for its own CONFIRM_S, not inherit the old one's time and be applied at once -- each change
    rolls every replica."""
    state = TunerState(candidate=Settings(500, (16,)), candidate_since=900.0)
    got = tune(TOO_TIGHT, Settings(20000), Bounds(16), state, 1000.0)
    assert (got.reason, got.settings, got.changed) == ("Confirming", Settings(20000), False)
    assert (got.state.candidate, got.state.candidate_since) == (Settings(0), 1000.0)
