"""``steps.climbing``: the size of a climb that holds a scale-down, and how far ahead the plan must reach
to end the hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.decider_cases import POLICY, rates
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import State, Step

DOWN = Step(2, "LoadDecreased", "plan")
WINDOWED = replace(POLICY, scale_down_stabilization_s=120.0)


@pytest.mark.parametrize(("rise", "expect"), [
    (20.0, DOWN),  # under 1.645 x sqrt(2) x 10 = 23.3 rps: two readings' noise, no climb
    (30.0, Step(3, "RateClimbing", "plan; the rate climbs 30 rps out of the lowest reading of the last 120s: "
                                   "no scale-down")),
])
def test_a_climb_is_judged_against_the_noise_of_a_difference_of_two_readings(rise: float, expect: Step) -> None:
    """A rise of 20 rps out of the window's low, at a noise of 10 rps, is within what two noisy readings
    differ by (sqrt(2) x 10 x 1.645 = 23.3): the scale-down goes on. Judged against one reading's noise
    (16.5) it would hold every scale-down of a noisy but flat rate."""
    st = State(rates=rates((880.0, 500.0), (940.0, 480.0), (1000.0, 480.0 + rise)))
    assert D.climbing(DOWN, st, WINDOWED, 3, 1000.0, sigma=10.0) == expect


@pytest.mark.parametrize(("planned", "expect"), [
    (900.0, DOWN),  # the plan reaches 600 + 100/60 x 140 = 833: it carries the climb
    (800.0, Step(3, "RateClimbing", "plan; the rate climbs 100 rps out of the lowest reading of the last 120s: "
                                    "no scale-down until the plan reaches where the climb leads, 833 rps")),
])
def test_the_climb_is_extrapolated_no_further_than_the_trend_is(planned: float, expect: Step) -> None:
    """With a 300 s horizon the climb (100 rps in 60 s) is extrapolated over TREND_MAX_HORIZON_S (140 s),
    as the forecast's trend is: a plan of 900 rps carries it. Extrapolated over the whole 300 s (1,100 rps)
    the hold would keep replicas the forecast itself never plans for."""
    st = State(rates=rates((940.0, 500.0), (1000.0, 600.0)))
    assert D.climbing(DOWN, st, WINDOWED, 3, 1000.0, sigma=5.0, horizon=300.0, planned=planned) == expect
