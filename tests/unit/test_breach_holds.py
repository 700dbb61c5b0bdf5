"""What ``steps.breach`` does with a p95 inside the tolerance band, with replicas that just joined,
and with a queue that drains while replicas are still starting."""

from __future__ import annotations

import pytest

from support.decider_cases import CAP, POLICY, ok
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Demand, PendingReading, Replicas, Step

PLAN = Step(3, "Steady", "plan")


@pytest.mark.parametrize(("p95", "expect"), [
    (105.0, Step(3, "Steady", "plan")),  # inside target x (1 + 0.1): no breach, the plan stands
    (110.0, Step(3, "Steady", "plan")),  # at the band's edge: still none
    (115.0, Step(4, "LatencyAboveTarget", "plan; p95 115 ms > target 100 ms, queue building")),
])
def test_a_p95_within_the_tolerance_band_is_no_breach(p95: float, expect: Step) -> None:
    """A p95 above the target but within spec.scaling.tolerance of it (100 ms, tolerance 0.1: up to
    110 ms) is no breach, even with a deep queue behind it: the fleet must not grow a replica each
    time p95 wobbles a few percent over the target, which the user allowed for with the tolerance."""
    got = D.breach(PLAN, ok(600.0, p95=p95, pending=900.0), Replicas(3, 3), CAP, POLICY)
    assert got == expect


def test_a_load_driven_scale_up_is_not_cut_to_warmup_because_a_replica_just_joined() -> None:
    """A replica that became ready at the last tick makes breach wait a tick *instead of adding one*
    -- but a plan that already asks for more (5 of 3, the load rose) goes through: cutting it to
    WaitingForWarmup would hold 3 replicas through a breach while the load needs 5."""
    joined_last_tick = Demand(900.0, 900.0, 900.0, 5.0, PendingReading(985.0, 825.0, 2.0))
    breaching = ok(900.0, p95=300.0, pending=900.0)
    got = D.breach(Step(5, "LoadIncreased", "plan"), breaching, Replicas(3, 3), CAP, POLICY, joined_last_tick)
    assert got == Step(5, "LatencyAboveTarget", "plan; p95 300 ms > target 100 ms, queue building")
    # the plan at the current count does wait the tick
    held = D.breach(Step(3, "Steady", "plan"), breaching, Replicas(3, 3), CAP, POLICY, joined_last_tick)
    assert (held.replicas, held.reason) == (3, "WaitingForWarmup")


def test_a_draining_queue_while_replicas_still_start_holds_the_count() -> None:
    """The queue shrinks (growth < 0) and arrivals are below what the 3 ready replicas serve, but a
    fourth is still starting: breach holds the 4 (WaitingForWarmup). Passing the plan through would
    scale a breaching service *down* to 2, removing the replica about to relieve it."""
    draining = Demand(300.0, 300.0, 900.0, -5.0, PendingReading(985.0, 975.0, 3.0))
    got = D.breach(Step(2, "LoadDecreased", "plan"), ok(300.0, p95=300.0, pending=900.0), Replicas(4, 3), CAP,
                   POLICY, draining)
    assert got == Step(4, "WaitingForWarmup",
                       "plan; p95 300 ms > target 100 ms; 1 replica(s) still starting cover it")
