"""The burst memory's edges: how long it holds after surprises at unequal gaps, and which fall counts
as a sudden one."""

from __future__ import annotations

import pytest

from support.decider_cases import rates
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import State


@pytest.mark.parametrize(("surprises", "now", "hold"), [
    # gaps of 10 s and 390 s: held 2 x the longest gap, 780 s (10 cold starts would be only 100 s)
    ((400.0, 410.0, 800.0), 1000.0, 780.0),
    ((400.0, 410.0, 800.0), 1580.0, 780.0),  # 780 s after the last surprise: still held
    ((400.0, 410.0, 800.0), 1581.0, 0.0),  # past it: over
])
def test_the_hold_follows_the_longest_gap_between_surprises(surprises: tuple[float, ...], now: float,
                                                            hold: float) -> None:
    """Three surprises with gaps of 10 s and 390 s: bursts recur about every 390 s, so the peak is held
    2 x 390 s. Taken from the shortest gap (20 s, under the 100 s of 10 cold starts) the memory would let
    the replicas go 100 s after the last burst, and the next one, 390 s on, would find them gone."""
    st = State(surprises=surprises, cold_start_s=10.0)
    assert D.burst_hold(st, now, 15.0) == hold


CAP = 100.0  # rps per replica, planned at 90% (UTILISATION)


@pytest.mark.parametrize(("rate", "surprises"), [
    (405.0, (1000.0,)),  # 95 rps down: more than 0.9 replica's planned capacity -- a sudden fall
    (415.0, ()),  # 85 rps down: less than 90 -- no replica freed, no surprise
])
def test_a_sudden_fall_is_a_drop_of_one_replicas_planned_capacity(rate: float, surprises: tuple[float, ...]) -> None:
    """With a cold start so long (120 s) that one surprise engages the burst memory, a drop below every
    reading of the last minute by at least one replica's *planned* capacity (90 of 100 rps) is recorded as a
    surprise, so the fleet keeps the need from before the fall. Compared with the full 100 rps, a 95 rps
    drop would be ignored, and the return to 500 rps would find a replica removed a cold start away."""
    st = State(rates=rates((950.0, 500.0), (980.0, 500.0), (1000.0, rate)), cold_start_s=120.0)
    got = D.sudden_fall(st, D.Demand(rate, rate, 0.0), 1000.0, CAP, 15.0, sigma=1.0)
    assert got.surprises == surprises
