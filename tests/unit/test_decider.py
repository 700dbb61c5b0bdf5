"""The pure decider: tables and fake-clock scenarios (bursts, flapping, idle, cold starts, outages)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tritonscale.scaling.decider import (
    Observation,
    Policy,
    Replicas,
    State,
    decide,
)

POLICY = Policy(min_replicas=1, max_replicas=10, target_p95_ms=100.0, scale_down_stabilization_s=300.0)


def ok(p95: float | None, rps: float, queue: float | None = None) -> Observation:
    return Observation(status="ok", p95_ms=p95, rps=rps, queue_ms=queue)


FAILED = Observation(status="failed", message="connection refused")
NO_DATA = Observation(status="no_data", message="no series")


class Loop:
    """Drives the decider like the operator does: a tick every ``interval`` seconds, and
    replicas that become ready ``cold_start`` seconds after they were asked for."""

    def __init__(self, policy: Policy, replicas: int = 1, interval: float = 15.0, cold_start: float = 0.0):
        self.policy, self.interval, self.cold_start = policy, interval, cold_start
        self.now = 0.0
        self.state = State()
        self.current = replicas
        self.started: list[float] = [-1e9] * replicas  # start time of each replica
        self.history: list[tuple[float, int, str]] = []

    @property
    def ready(self) -> int:
        return sum(1 for t in self.started if self.now - t >= self.cold_start)

    def tick(self, obs: Observation):
        d = decide(obs, Replicas(self.current, self.ready), self.policy, self.state, self.now)
        if d.replicas > self.current:
            self.started += [self.now] * (d.replicas - self.current)
        elif d.replicas < self.current:
            self.started = self.started[: d.replicas]
        self.current, self.state = d.replicas, d.state
        self.history.append((self.now, d.replicas, d.reason))
        self.now += self.interval
        return d

    def scale_events(self) -> int:
        return sum(1 for a, b in zip(self.history, self.history[1:]) if a[1] != b[1])


# --- tables ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "obs, current, ready, state, expect_replicas, expect_reason",
    [
        # p95 3x target on 2 warm replicas: panic, proportional size 6 (within the +4 step).
        (ok(300, 100), 2, 2, State(capacity_rps=50), 6, "Panic"),
        # Mild breach (1.3x): the breach lowers capacity to 50/1.3**0.5 = 43.9 rps, and
        # 100 rps at 75% of that needs 4 (more than the proportional 3).
        (ok(130, 100), 2, 2, State(capacity_rps=50), 4, "LatencyAboveTarget"),
        # Scale-down inside the dead band: 337.5 rps is 90% of 10 x 50 x 0.75: hold.
        (ok(80, 337.5), 10, 10, State(capacity_rps=50), 10, "WithinTolerance"),
        # Scale-up is never held by the dead band: 85 rps needs 3 at 37.5 per replica.
        (ok(80, 85), 2, 2, State(capacity_rps=50), 3, "LoadIncreased"),
        # Source failed: hold.
        (FAILED, 4, 4, State(), 4, "MetricsUnavailable"),
        # No series: hold, never scale down.
        (NO_DATA, 4, 4, State(capacity_rps=50), 4, "NoData"),
        # Below the floor for any reason: raise to it at once.
        (ok(10, 1), 0, 0, State(), 1, "BelowFloor"),
        # Breach while 2 of 4 replicas are still starting: those cover the 1.5x breach.
        (ok(150, 100), 4, 2, State(capacity_rps=50), 4, "WaitingForWarmup"),
    ],
)
def test_decision_table(obs, current, ready, state, expect_replicas, expect_reason):
    d = decide(obs, Replicas(current, ready), POLICY, state, now=1000.0)
    assert (d.replicas, d.reason) == (expect_replicas, expect_reason), d.message
    assert d.message  # every decision explains itself


def test_scale_up_is_rate_limited_and_clamped_to_max():
    d = decide(ok(1000, 1000), Replicas(2, 2), POLICY, State(capacity_rps=10), now=0.0)
    assert d.replicas == 2 + POLICY.scale_up_max_step
    assert "limited to +4" in d.message
    p = replace(POLICY, max_replicas=3)
    d = decide(ok(1000, 1000), Replicas(2, 2), p, State(capacity_rps=10), now=0.0)
    assert d.replicas == 3 and d.reason == "AtMaxReplicas"


def test_never_below_min_plus_warm_buffer_nor_above_max():
    p = replace(POLICY, min_replicas=2, warm_buffer=1, scale_down_stabilization_s=0, scale_down_max_step=10)
    d = decide(ok(None, 0.0), Replicas(8, 8), p, State(capacity_rps=50), now=0.0)
    assert d.replicas == 3 and d.reason == "Idle"
    d = decide(ok(5000, 10_000), Replicas(9, 9), replace(p, scale_up_max_step=100), State(capacity_rps=1), now=0.0)
    assert d.replicas == 10


def test_no_target_holds_between_floor_and_ceiling():
    p = replace(POLICY, target_p95_ms=None)
    assert decide(ok(999, 999), Replicas(3, 3), p, State(), 0.0).replicas == 3
    assert decide(ok(999, 999), Replicas(0, 0), p, State(), 0.0).replicas == 1


def test_state_roundtrips_through_status_dict():
    d = decide(ok(300, 100), Replicas(2, 2), POLICY, State(capacity_rps=50), now=1000.0)
    again = State.from_dict(d.state.to_dict())
    assert again.capacity_rps == pytest.approx(d.state.capacity_rps, rel=1e-3)
    assert again.recommendations == d.state.recommendations
    assert again.panic_until == d.state.panic_until == 1000.0 + POLICY.scale_down_stabilization_s
    assert State.from_dict({"recommendations": "garbage"}) == State()  # corrupt memory: fresh start


# --- scenarios with a fake clock ---------------------------------------------------------------

def test_burst_scales_up_fast_then_down_slowly_after_stabilization():
    loop = Loop(POLICY, replicas=1)
    for _ in range(4):  # steady 40 rps served by one replica at half the target
        loop.tick(ok(50, 40))
    assert loop.current == 1 and loop.state.capacity_rps >= 40
    d = loop.tick(ok(400, 200))  # burst: 4x target
    assert d.reason == "Panic" and loop.current == 5  # +4 in one tick
    t_burst_end = loop.now
    while loop.now - t_burst_end < 120:  # burst served at 5 replicas for 2 minutes
        loop.tick(ok(70, 200))
    peak = loop.current
    assert peak >= 5
    t_drop = loop.now
    downs = []
    while loop.now - t_drop < 900:  # load falls back
        d = loop.tick(ok(50, 40))
        downs.append((loop.now - t_drop, loop.current))
    first_down = next(t for t, n in downs if n < peak)
    assert first_down >= POLICY.scale_down_stabilization_s  # no scale-down inside the window
    assert loop.current == 1  # back to the floor, one replica per tick
    assert all(b >= a - 1 for (_, a), (_, b) in zip(downs, downs[1:]))


def test_flapping_load_does_not_flap_replicas():
    loop = Loop(POLICY, replicas=3)
    loop.state = State(capacity_rps=50)
    for i in range(80):  # 20 minutes alternating 100 and 140 rps every tick
        loop.tick(ok(70, 100 if i % 2 else 140))
    # Up once to cover the 140 peaks, then the down-window keeps it there.
    assert loop.scale_events() <= 2, loop.history


def test_idle_returns_to_floor_but_no_data_does_not():
    loop = Loop(replace(POLICY, scale_down_max_step=10), replicas=6)
    loop.state = State(capacity_rps=50)
    for _ in range(40):  # 10 minutes with no series at all: hold
        loop.tick(NO_DATA)
    assert loop.current == 6
    for _ in range(25):  # idle (rate 0, p95 NaN) for > 300 s: floor
        loop.tick(ok(None, 0.0))
    assert loop.current == 1 and loop.history[-1][2] == "Idle"


def test_cold_start_does_not_overscale():
    # Replicas take 90 s to warm up; the breach persists until they are ready.
    loop = Loop(POLICY, replicas=2, cold_start=90.0)
    loop.state = State(capacity_rps=50)
    loop.tick(ok(180, 150))  # 1.8x on 2 replicas -> 4 (ceil(2*1.8)), capacity says 4
    asked = loop.current
    assert asked == 4
    for _ in range(5):  # 75 s: still breaching while the new replicas start
        loop.tick(ok(180, 150))
    assert loop.current == asked, loop.history  # it waited for the warmup instead of piling on
    assert {r for _, _, r in loop.history[1:]} == {"WaitingForWarmup"}


def test_outage_holds_then_fallback_after_threshold_then_recovers():
    p = replace(POLICY, fallback_replicas=5, failure_threshold=3)
    loop = Loop(p, replicas=3)
    loop.state = State(capacity_rps=50)
    loop.tick(FAILED)
    loop.tick(FAILED)
    assert loop.current == 3 and loop.history[-1][2] == "MetricsUnavailable"
    d = loop.tick(FAILED)
    assert loop.current == 5 and d.reason == "FallbackAfterFailures" and not d.metrics_ok
    d = loop.tick(ok(60, 100))  # source back: failures reset, normal decisions resume
    assert d.state.failures == 0 and d.metrics_ok


def test_outage_without_fallback_never_scales_down():
    loop = Loop(POLICY, replicas=4)
    for _ in range(100):
        d = loop.tick(FAILED)
        assert d.replicas == 4
    assert loop.state.failures == 100


def test_batch_cost_model_finds_capacity_and_sizes_the_service():
    """Triton's batch statistics (mean batch size, mean batch time) are enough to know a
    replica's capacity without ever breaching: cost 20 + 2n ms, max batch 16, target
    150 ms -> 16 / 52 ms = 308 rps per replica; 1,000 rps at 75% of that -> 5 replicas."""
    p = replace(POLICY, target_p95_ms=150, max_batch_size=16, scale_down_stabilization_s=60)
    loop = Loop(p, replicas=10)
    for i in range(60):
        per = 1000.0 / loop.ready
        n = min(16.0, 1.0 + per / 40.0 + (i % 3))  # batch size grows with load, with jitter
        loop.tick(Observation(status="ok", p95_ms=60, rps=1000.0, batch_size=n, batch_ms=20 + 2 * n))
    d = loop.tick(Observation(status="ok", p95_ms=60, rps=1000.0, batch_size=8, batch_ms=36))
    assert d.details["capacity_rps"] == pytest.approx(1000 * 16 / 52, rel=0.01)
    assert "batch cost" in d.message
    assert loop.current == 5


def test_batch_capacity_respects_a_tight_target():
    from tritonscale.scaling.decider import batch_capacity, batch_cost
    assert batch_cost(((4, 28), (8, 36), (12, 44))) == pytest.approx((20, 2))
    # Two batch times of 20 + 2n must fit in 60 ms: n* = 5, 5 / 30 ms = 166.7 rps.
    assert batch_capacity((20, 2), 16, 60) == pytest.approx(1000 * 5 / 30)
    assert batch_capacity((20, 2), 16, 150) == pytest.approx(1000 * 16 / 52)
    # One sample, no spread: half fixed, half per item.
    assert batch_cost(((8, 40),)) == pytest.approx((20, 2.5))


def test_flat_latency_under_target_does_not_ratchet_replicas_up():
    """Regression: p95 that does not respond to load (service time ~ 90% of target) once
    made the capacity estimate fall with every added replica -- a runaway to maxReplicas."""
    loop = Loop(POLICY, replicas=3)
    for _ in range(200):
        loop.tick(ok(90, 120))
    assert loop.current <= 4, loop.history[-5:]
    assert loop.scale_events() <= 1


def test_slack_recovers_from_a_capacity_estimate_learned_during_a_backlog():
    """Regression from the Prometheus integration test: a breach that persisted while
    replicas were added left capacity ~5 rps; at 5 rps with p95 at 20% of target the
    decider then held 2 replicas forever. Sustained slack must walk it back to the floor."""
    p = replace(POLICY, scale_down_stabilization_s=10)
    loop = Loop(p, replicas=2, interval=2.0)
    loop.state = State(capacity_rps=5.25, capacity_ceiling_rps=7.8)
    for _ in range(15):
        loop.tick(ok(20, 5.0))
    assert loop.current == 1
    assert "LatencySlack" in {r for _, _, r in loop.history}


def test_empty_memory_does_not_skip_the_scale_down_window():
    """A fresh State (new object, lost status) must not scale down on its first reading."""
    d = decide(ok(None, 0.0), Replicas(6, 6), POLICY, State(capacity_rps=50), now=5000.0)
    assert d.replicas == 6 and d.reason == "StabilizingScaleDown"
    loop = Loop(POLICY, replicas=6)
    loop.state = State(capacity_rps=50)
    while loop.current == 6:
        loop.tick(ok(None, 0.0))
    assert loop.history[-1][0] >= POLICY.scale_down_stabilization_s
