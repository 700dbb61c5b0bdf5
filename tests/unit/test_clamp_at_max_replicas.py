"""``steps.clamp`` at maxReplicas: which reason and wording a count asked past it gets."""

from __future__ import annotations

import pytest

from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Policy, Replicas, Step

MAX10 = Policy(max_replicas=10, target_p95_ms=100.0)


@pytest.mark.parametrize(("step", "current", "expect"), [
    # already at 10 and held there by the scale-up window: the window's reason stands, nothing is "lowered"
    (Step(12, "StabilizingScaleUp", "plan"), 10, Step(10, "StabilizingScaleUp", "plan")),
    # at 10 and the load asks for 12: at maxReplicas
    (Step(12, "LoadIncreased", "plan"), 10, Step(10, "AtMaxReplicas", "plan; at maxReplicas=10")),
    # 12 running after maxReplicas was lowered to 10: lowered
    (Step(12, "Steady", "plan"), 12, Step(10, "AtMaxReplicas", "plan; lowering to maxReplicas=10")),
])
def test_a_count_asked_past_max_replicas(step: Step, current: int, expect: Step) -> None:
    """"lowering to maxReplicas" is for a fleet above a lowered maxReplicas only: said of a fleet already at
    it, the Scaling condition would tell the user a scale-down happened that did not, and hide the reason
    (StabilizingScaleUp) the count is held."""
    assert D.clamp(step, Replicas(current, current), MAX10) == expect
