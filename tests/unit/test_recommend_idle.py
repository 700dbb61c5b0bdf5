"""When ``steps.recommend`` calls a service idle: no requests now, over the rate window, or queued."""

from __future__ import annotations

import pytest

from support.decider_cases import CAP, POLICY
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Demand, Step


@pytest.mark.parametrize(("d", "planned", "expect"), [
    # the last scrape read nothing, but the window still carries 600 rps: not idle, planned as usual
    (Demand(0.0, 600.0, 0.0), 600.0,
     Step(3, "Steady", "0.0 rps now, planning 600.0 rps at ~287.6 rps per replica (batch)")),
    # nothing now, nothing over the window, nothing queued: idle, back to the floor
    (Demand(0.0, 0.0, 0.0), 0.0, Step(1, "Idle", "no requests: back to the warm floor")),
])
def test_idle_needs_no_traffic_over_the_window_too(d: Demand, planned: float, expect: Step) -> None:
    """A single scrape that reads 0 rps (a gap between requests, a pod restarting) while the rate window
    still carries traffic must not send a loaded fleet to the warm floor: Idle also skips the tolerance,
    noise and climbing holds, so 3 replicas serving 600 rps would be cut at once."""
    assert D.recommend(d, planned, 75.0, CAP, "batch", 3, POLICY) == expect
