"""The capacity learners' clamps: the batch cost fit never has a negative fixed cost, and the p95-only
learner (no batch statistics) respects the tolerance, the last breach's ceiling and its 1%-a-tick relax."""

from __future__ import annotations

import pytest

from support.decider_cases import POLICY
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, Replicas, State


@pytest.mark.parametrize(("samples", "cost"), [
    # (size 4, 10 ms), (size 16, 100 ms): least squares says a = -20 ms, b = 7.5 ms/item; a is clamped to 0
    (((4.0, 10.0, 0.0), (16.0, 100.0, 0.0)), (0.0, 7.5)),
    (((4.0, 28.0, 0.0), (12.0, 44.0, 0.0)), (20.0, 2.0)),  # a clean 20 + 2n
])
def test_the_batch_cost_fit_never_has_a_negative_fixed_cost(samples: tuple[tuple[float, float, float], ...],
                                                            cost: tuple[float, float]) -> None:
    """A negative fixed batch cost would make a batch of one "take" less than nothing and the capacity at
    small batches come out far too high (or divide by a non-positive batch time): the fit keeps a >= 0."""
    assert D.batch_cost(samples) == pytest.approx(cost)


def _learned(state: State, p95: float) -> tuple[float | None, float | None]:
    """The p95 learner after one tick at 300 rps on 3 ready replicas (100 per replica), target 100 ms."""
    obs = Observation(status="ok", p95_ms=p95, rps=300.0, recent_rps=300.0)  # no batch statistics
    st = D.learn(state, obs, Replicas(3, 3), POLICY, 1000.0, 300.0)
    return st.capacity_rps, st.capacity_ceiling_rps


@pytest.mark.parametrize(("state", "p95", "expect"), [
    # 105 ms: within the 10% tolerance, no breach -- an estimate (100 x 1.05^-0.5), but no ceiling
    (State(), 105.0, (pytest.approx(97.5900073), None)),
    # 120 ms: a breach -- the estimate (100 x 1.2^-0.5) is the capacity and the ceiling
    (State(), 120.0, (pytest.approx(91.2870929), pytest.approx(91.2870929))),
    # p95 half the target would raise an 80 rps capacity, but last breach's ceiling of 80 relaxes
    # only 1% a tick: both 80.8
    (State(capacity_rps=80.0, capacity_ceiling_rps=80.0), 50.0, (pytest.approx(80.8), pytest.approx(80.8))),
])
def test_the_p95_capacity_learner(state: State, p95: float, expect: tuple[object, object]) -> None:
    """Without batch statistics the capacity is learned from p95 alone: a p95 within the tolerance must not
    set a breach ceiling (it would cap the capacity low for good), and after a breach the capacity rises no
    faster than the ceiling relaxes (1% a tick), so a flat p95 cannot run the capacity -- and the fleet's
    shrinking -- away."""
    assert _learned(state, p95) == expect
