"""The scale-up look-back window on an empty or lapsed memory: the seed entry that stands for "the
current count was recommended just now" holds scale-downs, never scale-ups."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.decider_cases import POLICY
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import State, Step

UP_WINDOW = replace(POLICY, scale_up_stabilization_s=60.0)
NOW = 1000.0


@pytest.mark.parametrize(("state", "expect"), [
    # a new object: no memory at all
    (State(), Step(5, "LoadIncreased", "plan")),
    # a memory whose newest entry (t=100) is older than the scale-down window: lapsed, seeded anew
    (State(recommendations=((100.0, 3, 3),), cold_start_s=60.0), Step(5, "LoadIncreased", "plan")),
    # a real recommendation of 3 inside the 60 s scale-up window does hold the scale-up
    (State(recommendations=((990.0, 3, 3),), cold_start_s=60.0),
     Step(3, "StabilizingScaleUp", "plan; scale-up window holds 3")),
])
def test_the_seed_never_holds_a_first_scale_up(state: State, expect: Step) -> None:
    """With scaleUp.stabilizationSeconds > 0, a new InferenceService (or one whose memory lapsed after an
    operator outage) must scale up at its first tick that asks for it: the seeded "3 recommended just now"
    is an assumption for the scale-down window, not a recommendation the scale-up window may hold to."""
    step, _ = D.stabilize(Step(5, "LoadIncreased", "plan"), state, UP_WINDOW, 3, NOW, 5, 5)
    assert step == expect
