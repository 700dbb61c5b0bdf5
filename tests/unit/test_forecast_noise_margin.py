"""The forecast's noise margin: the plan is the level plus the trend plus NOISE_Z standard deviations
of the rate's noise."""

from __future__ import annotations

import pytest

from support.decider_cases import POLICY, rates
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import State


@pytest.mark.parametrize(("sigma", "planned"), [
    (0.0, 500.0),
    (10.0, 500.0 + 1.645 * 10.0),  # 516.45
    (40.0, 500.0 + 1.645 * 40.0),  # 565.8
])
def test_a_flat_rate_is_planned_at_its_level_plus_the_95pc_noise_margin(sigma: float, planned: float) -> None:
    """A flat 500 rps with noise sigma is planned at 500 + 1.645 sigma (the 95% one-sided quantile): without
    the margin, half the ticks' traffic would exceed the plan and a fleet sized to exactly the level would
    breach the p95 target on every upward wobble."""
    st = State(rates=rates(*((t, 500.0) for t in range(0, 241, 15))), cold_start_s=60.0)
    got, horizon = D.forecast(D.Demand(500.0, 500.0, 0.0), st, POLICY, 240.0, sigma=sigma)
    assert horizon == 75.0
    assert got == pytest.approx(planned, abs=1e-9)
    assert D.constants.NOISE_Z == 1.645
