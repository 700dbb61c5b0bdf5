"""Policy plumbing: the operator's decider is called (not copied); baselines follow their algorithms."""

from __future__ import annotations

import numpy as np
import pytest

import tritonscale.scaling.decider as decider_module
from tritonscale.simulate.arrivals import shape_arrivals
from tritonscale.simulate.benchmark import Options, build
from tritonscale.simulate.capacity import capacity_at_slo
from tritonscale.simulate.engine import ClusterConfig, simulate
from tritonscale.simulate.policies import parse_static, validate_name
from tritonscale.simulate.policies import tritonscale as tritonscale_policy
from tritonscale.simulate.policies.hpa import plain_metric_replicas, stabilize
from tritonscale.simulate.policies.keda import average_value_replicas
from tritonscale.simulate.policies.kpa import KpaState, kpa_scale
from tritonscale.simulate.policies.oracle import provision_schedule, solve
from tritonscale.simulate.policies.static import StaticPolicy
from tritonscale.simulate.replica import BatcherConfig

CLUSTER = ClusterConfig(cold_start_s=30.0, max_replicas=8)
SLO = 150.0


@pytest.fixture(scope="module")
def arrivals() -> np.ndarray:
    return shape_arrivals("steps", 500.0, 300.0, seed=1)  # 250 -> 750 -> 250 rps


@pytest.fixture(scope="module")
def calibration():
    return capacity_at_slo(BatcherConfig(), SLO, requests=20_000)


def test_the_tritonscale_policy_runs_the_operators_decider(monkeypatch, arrivals, calibration) -> None:
    assert tritonscale_policy.decider is decider_module  # the module itself, not a copy
    calls = []
    real = decider_module.decide

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(decider_module, "decide", spy)
    pol = build("tritonscale", Options(SLO, CLUSTER), calibration, initial=2)
    run = simulate(arrivals[arrivals < 60], pol, CLUSTER, 60.0)
    assert len(calls) == 3  # ticks at 15, 30, 45 s
    # the warm pods report their starts on the first tick (as the operator's first census reads the
    # running pods'), and that tick holds for want of data yet still learns them
    first = calls[0][1]
    assert first.startup_s == (CLUSTER.cold_start_s,) * 2 and calls[0][0].status == "no_data"
    assert calls[1][3].cold_start_s == CLUSTER.cold_start_s
    # at 30 s every pod has two scrapes (each at its own offset in the 15 s interval)
    obs, replicas, policy, state, now = calls[1]
    assert isinstance(obs, decider_module.Observation) and obs.status == "ok"
    assert replicas == decider_module.Replicas(current=2, ready=2)
    assert policy.target_p95_ms == SLO and now == 30.0
    assert [t.t for t in run.ticks] == [15.0, 30.0, 45.0]


@pytest.mark.parametrize("name", ["tritonscale", "hpa", "keda", "kpa", "static:3"])
def test_every_policy_produces_a_sane_schedule(name: str, arrivals, calibration) -> None:
    run = simulate(arrivals, build(name, Options(SLO, CLUSTER), calibration, initial=2), CLUSTER, 300.0)
    assert len(run.latency) == len(arrivals) and np.all(run.latency > 0)
    alive = run.replicas_over_time(np.arange(0.0, 300.0, 1.0))
    assert alive.min() >= 1 and alive.max() <= CLUSTER.max_replicas
    assert all(CLUSTER.min_replicas <= t.desired <= CLUSTER.max_replicas for t in run.ticks)
    assert run.cold_starts == sum(max(0, t.desired - t.current) for t in run.ticks)
    if name != "static:3":
        assert alive[200] > alive[10], "the 750 rps step must scale up"


def test_static_keeps_n() -> None:
    run = simulate(np.linspace(0, 100, 20_000), StaticPolicy(3), CLUSTER, 100.0)
    assert run.cold_starts == 0 and run.scale_events == 0
    assert run.replica_seconds() == pytest.approx(300.0)


@pytest.mark.parametrize("name, ok", [("static:4", 4), ("static:0", None), ("static:x", None), ("hpa", None)])
def test_policy_names(name: str, ok) -> None:
    if ok:
        assert parse_static(name) == ok and validate_name(name) == name
    elif name.startswith("static"):
        with pytest.raises(ValueError):
            parse_static(name)
        with pytest.raises(ValueError):
            validate_name(name)
    else:  # a policy's own name: no static fleet, and a name the simulator knows
        assert parse_static(name) is None and validate_name(name) == name
    with pytest.raises(ValueError, match="unknown policy"):
        validate_name("hpa2")


@pytest.mark.parametrize("usages, current, expected", [
    ([0.9, 0.9], 2, (3, "Ratio")),  # 0.9 / 0.7 = 1.29 on 2 pods -> 3
    ([0.75, 0.74], 2, (2, "WithinTolerance")),  # ratio 1.06, within 0.1
    ([0.2, 0.2], 2, (1, "Ratio")),
    # starting pods count as 0% for a scale-up: (1 + 1 + 0) / (3 x 0.7) = 0.95, within tolerance
    ([1.0, 1.0, None], 3, (3, "HoldForMissingPods")),
    # ... and (1 + 1 + 0 + 0) / (4 x 0.7) = 0.71 would flip to a scale-down: hold
    ([1.0, 1.0, None, None], 4, (4, "HoldForMissingPods")),
    ([], 2, (2, "NoMetrics")),
])
def test_hpa_ratio(usages, current, expected) -> None:
    assert plain_metric_replicas(usages, current, 0.7) == expected


def test_hpa_scale_down_takes_the_highest_recommendation_of_300s() -> None:
    recs = ()
    out, recs = stabilize(recs, 0.0, 5, 5, 300.0)
    out, recs = stabilize(recs, 100.0, 5, 2, 300.0)
    assert out == 5
    out, recs = stabilize(recs, 301.0, 5, 2, 300.0)
    assert out == 2


def test_keda_average_value() -> None:
    assert average_value_replicas(1100.0, 4, 232.0) == 5  # ratio 1.19: ceil(1100 / 232)
    assert average_value_replicas(1000.0, 4, 232.0) == 4  # ratio 1.08: within tolerance
    assert average_value_replicas(300.0, 4, 232.0) == 2


def test_kpa_panics_on_a_burst_and_never_scales_down_while_panicking() -> None:
    n, why, st = kpa_scale(stable=10.0, panic=60.0, ready=2, target=10.0, state=KpaState(), now=0.0)
    assert n == 6 and why.startswith("Panic")
    n, why, st = kpa_scale(stable=10.0, panic=10.0, ready=6, target=10.0, state=st, now=30.0)
    assert n == 6  # still panicking (60 s since the last over-threshold tick not yet passed)
    n, why, st = kpa_scale(stable=10.0, panic=10.0, ready=6, target=10.0, state=st, now=61.0)
    assert n == 3 and why.startswith("Stable")  # halving at most per tick (6 / 2)


def test_oracle_schedule_starts_pods_a_cold_start_ahead() -> None:
    # C = one window: during window w the pods for max(need[w], need[w + 1])
    assert provision_schedule([2, 5, 3, 1], 60.0, 60.0) == [(0.0, 5), (120.0, 3), (180.0, 1)]
    # C = 30 s: the 5 pods of window 1 are created at 30 s
    assert provision_schedule([2, 5, 3], 60.0, 30.0) == [(0.0, 2), (30.0, 5), (120.0, 3)]


def test_oracle_meets_the_slo_in_every_window(arrivals, calibration) -> None:
    sol = solve(arrivals, 300.0, CLUSTER, SLO, calibration.capacity_rps)
    assert sol.meets_slo
    assert max(sol.needs) >= 3 > min(sol.needs)
