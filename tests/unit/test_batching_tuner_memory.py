"""The batching tuner's memory and tie-break: a stored cost that cannot be one is refitted, the settings
before a change are forgotten once no rollout came, and among equal candidates the shortest delay wins."""

from __future__ import annotations

from tritonscale.scaling.batching_tuner import (
    MIN_CHANGE_INTERVAL_S,
    Bounds,
    Score,
    Settings,
    TunerObservation,
    TunerState,
    best,
    tune,
)


def test_a_negative_stored_cost_is_not_read_back() -> None:
    """A hand-edited (or corrupted) status.batching.tunerState.cost of [-1, 2] is no batch cost: read back,
    it would score candidates with a negative fixed cost. It is dropped (refitted) -- the rest kept."""
    st = TunerState.from_dict({"cost": [-1.0, 2.0], "lastChange": 5.0})
    assert (st.cost, st.last_change) == (None, 5.0)
    assert TunerState.from_dict({"cost": [20.0, 2.0]}).cost == (20.0, 2.0)


def test_the_settings_before_a_change_are_forgotten_once_no_rollout_came_in_time() -> None:
    """A change whose rollout was never seen (the reconciler did not roll it out) leaves nothing to go back
    to after MIN_CHANGE_INTERVAL_S: a stuck rollout much later must not revert to settings from before it."""
    state = TunerState(last_change=0.0, previous=Settings(20000))
    no_target = TunerObservation((20.0, 2.0), 100.0, None)
    early = tune(no_target, Settings(0), Bounds(16), state, MIN_CHANGE_INTERVAL_S - 1.0)
    assert early.state.previous == Settings(20000)
    late = tune(no_target, Settings(0), Bounds(16), state, MIN_CHANGE_INTERVAL_S)
    assert (late.reason, late.state.previous) == ("NoTarget", None)


def test_among_equal_candidates_the_shortest_delay_wins_before_the_fewest_preferred_sizes() -> None:
    """Candidates with the same capacity and p95: the plainest config is the shortest delay first (a delay
    holds every lone request), then the fewest preferred sizes."""
    cands = [Settings(500, ()), Settings(0, (4, 8)), Settings(0, (4,))]
    scores = {c: Score(300.0, 50.0) for c in cands}
    assert best(cands, scores) == Settings(0, (4,))
    assert best(cands[:2], scores) == Settings(0, (4, 8))
