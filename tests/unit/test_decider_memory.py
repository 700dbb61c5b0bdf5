"""The decider's memory as the operator keeps it across a restart (``status.scalingState``): what it
writes reads back as a memory ``decide`` can use, and a memory from elsewhere (an older version, a hand
edit, a leader whose clock runs ahead) never stops the autoscaler. Found by fuzzing ``decide`` with
adversarial memories and readings (session 54)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest

from tritonscale.scaling import batching_tuner as bt
from tritonscale.scaling.decider import Observation, Policy, Replicas, State, decide

NOW = 1.75e9
POLICY = Policy(min_replicas=1, max_replicas=10, target_p95_ms=100.0, max_batch_size=16)


def restarted(state: State) -> State:
    """The memory as a new operator reads it: through the API server's JSON."""
    return State.from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))


def test_a_fast_models_batch_cost_survives_a_restart() -> None:
    """A batch of 0.0004 ms per item was written rounded to 0, and read back every later tick divided by it."""
    state = State(batch_samples=((4.0, 0.0004, NOW), (16.0, 0.0016, NOW)))
    samples = restarted(state).batch_samples
    assert [(n, t) for n, t, _ in samples] == [(4.0, 0.0004), (16.0, 0.0016)]


@pytest.mark.parametrize("samples", [[[4.0, 0.0, NOW]], [[0.0, 5.0, NOW]], [[4.0, -1.0, NOW]], [[-2.0, 5.0, NOW]]])
def test_a_batch_sample_of_no_size_or_no_time_is_no_measurement(samples: list[list[float]]) -> None:
    state = State.from_dict({"batchSamples": samples})
    assert state.batch_samples == ()
    d = decide(Observation("ok", p95_ms=40.0, rps=100.0, pending=0.0, pods=2.0), Replicas(2, 2), POLICY, state, NOW)
    # no batch model from it: the capacity is learned from p95 (a sample of no time would be an endless one)
    assert d.replicas == 2 and "per replica (p95)" in d.message, d.message


def test_a_batch_below_the_metrics_resolution_is_not_learned() -> None:
    obs = Observation("ok", p95_ms=1.0, rps=100.0, pending=0.0, pods=2.0, batch_size=4.0, batch_ms=5e-324)
    d = decide(obs, Replicas(2, 2), POLICY, State(), NOW)
    assert d.state.batch_samples == ()
    json.dumps(d.state.to_dict(), allow_nan=False)  # finite: the status patch would be refused otherwise


@pytest.mark.parametrize("saved", [{"failures": 1e400}, {"recommendations": [[NOW, 1e400, 1]]}])
def test_a_memory_with_a_number_past_any_int_starts_fresh(saved: dict[str, Any]) -> None:
    assert State.from_dict(json.loads(json.dumps(saved).replace("Infinity", "1e400"))) == State()


def test_the_tuners_memory_with_a_number_past_any_int_starts_fresh() -> None:
    assert bt.TunerState.from_dict(json.loads('{"candidate": {"delayUs": 1e400}}')) == bt.TunerState()


def _first_scale_down(saved: dict[str, Any] | None) -> int | None:
    """Seconds until a fleet of 8 under a load one replica serves first scales down (15 s ticks)."""
    policy = Policy(min_replicas=1, max_replicas=10, target_p95_ms=100.0, max_batch_size=4)
    state, current = State.from_dict(saved), 8
    for i in range(1, 240):
        obs = Observation(status="ok", p95_ms=20.0, rps=5.0, pending=0.0, pods=float(current), batch_size=2.0,
                          batch_ms=10.0)
        d = decide(obs, Replicas(current, current), policy, state, NOW + 15 * i)
        if d.replicas < current:
            return 15 * i
        state, current = d.state, d.replicas
    return None


@pytest.mark.parametrize("ahead", [600.0, NOW * 999])  # a leader's clock ten minutes ahead; milliseconds
def test_a_memory_stamped_ahead_of_the_clock_holds_nothing(ahead: float) -> None:
    """A recommendation stamped in the future sat in every scale-down window until its time came."""
    plain = _first_scale_down(None)
    assert plain is not None
    assert _first_scale_down({"recommendations": [[NOW + ahead, 8, 8]], "surprises": [NOW + ahead]}) == plain


def test_a_fast_models_cost_does_not_stop_the_tuner() -> None:
    """Rounded to 0.1 ms and 0.01 ms per item for its cache, a cost of 0.04 + 0.004n ms was 0, and the
    tuner divided by it at every tick."""
    score = bt.score(bt.Settings(), (0.04, 0.004), 16, 5.0, 2000.0)
    assert 0 < score.capacity_rps < float("inf")


def test_a_tuner_failure_does_not_stop_the_tick(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from tritonscale.scaling import tick

    def broken(*_: Any) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(tick.bs, "tune_tick", broken)
    with caplog.at_level(logging.DEBUG, logger="tritonscale.autoscaler"):
        assert tick._tune(None, {}, None, None, None, 1, {}, NOW, "ns/x") is None  # type: ignore[arg-type]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["ns/x: the batching tuner failed, scaling goes on without it: ZeroDivisionError: "
                      "float division by zero"]


def _steady_seven() -> tuple[State, float]:
    """A memory of 20 minutes at ~1,600 rps on 7 replicas (15 s ticks, a learned 10 s cold start: a 30 s
    scale-down window), as the operator writes it to status; and the time of its last tick."""
    state, current, now = State(cold_start_s=10.0), 2, NOW
    for i in range(80):
        d = decide(_busy(1600.0 + (37 * i) % 101 - 50), Replicas(current, current), _BUSY_POLICY, state, now)
        state, current, now = d.state, d.replicas, now + 15.0
    assert current == 7
    return restarted(state), now - 15.0


_BUSY_POLICY = Policy(min_replicas=2, max_replicas=10, target_p95_ms=100.0, max_batch_size=16, window_s=60.0)


def _busy(rps: float) -> Observation:
    return Observation("ok", p95_ms=60.0, rps=rps, pending=2.0, queue_ms=5.0, batch_size=16.0, batch_ms=52.0)


@pytest.mark.parametrize("gap", [35.0, 60.0, 600.0])
def test_a_memory_older_than_the_scale_down_window_does_not_let_one_low_reading_scale_down(gap: float) -> None:
    """auditJ D1: a failover, a restart or a Prometheus outage longer than the scale-down window left a
    restored memory with no recommendation in the window, and the first tick's one low reading (a dip,
    a pod's scrape missing) removed a replica, which the next tick asked for again: 7 -> 6 -> 7. A
    continuing leader, and an empty memory, hold 7 on the same reading; so does a lapsed memory now."""
    saved, last = _steady_seven()
    d = decide(_busy(700.0), Replicas(7, 7), _BUSY_POLICY, saved, last + gap)
    assert d.replicas == 7, d.message
    d = decide(_busy(700.0), Replicas(7, 7), _BUSY_POLICY, State(cold_start_s=10.0), last + gap)
    assert d.replicas == 7  # the empty memory, for comparison


def test_a_prometheus_outage_longer_than_the_window_does_not_let_one_low_reading_scale_down() -> None:
    saved, last = _steady_seven()
    state, t = saved, last
    for _ in range(2):  # two failed ticks: the next good one is 45 s after the last, past the 30 s window
        t += 15.0
        d = decide(Observation("failed", message="connection refused"), Replicas(7, 7), _BUSY_POLICY, state, t)
        state = d.state
    d = decide(_busy(700.0), Replicas(7, 7), _BUSY_POLICY, state, t + 15.0)
    assert d.replicas == 7


def test_a_lapsed_memory_still_scales_down_once_the_low_load_lasts_a_window() -> None:
    """The seed holds the count for one window, as the HPA's does for a new object; a load that stays low
    then scales down."""
    saved, last = _steady_seven()
    state, t, counts = saved, last + 60.0, []
    for _ in range(6):
        d = decide(_busy(700.0), Replicas(7, 7), _BUSY_POLICY, state, t)
        state, t = d.state, t + 15.0
        counts.append(d.replicas)
    assert counts[0] == 7 and min(counts) < 7


def test_a_window_shorter_than_a_tick_is_not_a_lapse_at_every_tick() -> None:
    """With stabilizationSeconds under the tick interval every tick finds its last recommendation out of the
    window; seeding there would hold every count for good. Such a window scales down at once."""
    policy = Policy(min_replicas=1, max_replicas=10, target_p95_ms=100.0, max_batch_size=16, window_s=60.0,
                    scale_down_stabilization_s=5.0)
    state, current, now = State(cold_start_s=10.0), 2, NOW
    for i in range(80):
        d = decide(_busy(1500.0 + (37 * i) % 101 - 50), Replicas(current, current), policy, state, now)
        state, current, now = d.state, d.replicas, now + 15.0
    counts = []
    for _ in range(6):  # the load falls for good: with the lapse read at every tick the count never moved
        d = decide(_busy(300.0), Replicas(current, current), policy, state, now)
        state, now = d.state, now + 15.0
        counts.append(d.replicas)
    assert min(counts) < current


def _after_a_handover(skew: float) -> list[int]:
    """Counts the next leader decides after a burst that its predecessor scaled 2 -> 5 for ended at the
    handover; the predecessor's clock ran ``skew`` seconds ahead of the next leader's."""
    policy = Policy(min_replicas=1, max_replicas=12, target_p95_ms=100.0, max_batch_size=4)

    def obs(rps: float, n: int) -> Observation:
        p95 = min(900.0, 30.0 * max(1.0, rps / (200 * n)) ** 3)
        return Observation("ok", p95_ms=p95, rps=rps, pending=0.0, pods=float(n), batch_size=2.0, batch_ms=10.0)

    state, n = State(), 2
    for i in range(240):
        d = decide(obs(150.0 if i < 236 else 1200.0, n), Replicas(n, n), policy, state, NOW + skew - 15 * (240 - i))
        state, n = d.state, d.replicas
    state, counts = restarted(state), [n]
    for k in range(1, 30):
        d = decide(obs(150.0, n), Replicas(n, n), policy, state, NOW + 15 * k)
        state, n = d.state, d.replicas
        counts.append(n)
    return counts


@pytest.mark.parametrize("skew", [60.0, 120.0, 600.0])
def test_a_memory_from_a_clock_ahead_decides_as_it_would_on_the_readers_clock(skew: float) -> None:
    """Session 85's HA audit (S4): entries stamped more than an interval ahead were dropped, so a memory from a
    leader whose clock ran a minute or two ahead lost its newest entries (the fleet went down a tick early)
    and one ten minutes ahead lost its look-back (held 45 s longer). Shifted back whole, it decides as the
    same memory written on the reader's clock does."""
    same_clock = _after_a_handover(0.0)
    assert same_clock[0] == 5 and same_clock[-1] == 1  # the burst's fleet, then the warm floor
    assert _after_a_handover(skew) == same_clock


def test_a_memory_shifted_back_keeps_its_spacing_and_order() -> None:
    state = State(recommendations=((NOW + 570.0, 4, 4), (NOW + 600.0, 8, 8)),
                  rates=((NOW + 585.0, 100.0, 120.0), (NOW + 600.0, 400.0, 480.0)), surprises=(NOW + 600.0,),
                  last_scale_time=NOW + 600.0)
    shifted = state.until(NOW, 15.0)
    assert [e[0] for e in shifted.recommendations] == [NOW - 45.0, NOW - 15.0]
    assert [e[0] for e in shifted.rates] == [NOW - 30.0, NOW - 15.0]
    assert shifted.surprises == (NOW - 15.0,) and shifted.last_scale_time == NOW - 15.0
    assert state.until(NOW + 600.0, 15.0) is state  # on the writer's clock: as written


def test_prometheus_clock_ahead_shifts_nothing() -> None:
    """Session 86's review (F3): the queue reading's time is Prometheus' clock (PromQL timestamp()), not the
    operator's; counted among the stamps, a Prometheus 40 s ahead shifted the whole memory back at every tick,
    and it aged almost four times too fast."""
    from tritonscale.scaling.decider import PendingReading

    state = State(recommendations=((NOW - 30.0, 4, 4), (NOW - 15.0, 4, 4)), rates=((NOW - 15.0, 100.0, 120.0),),
                  last_pending=PendingReading(NOW + 40.0, 3.0, 4.0, joined_at=NOW - 15.0))
    assert state.until(NOW, 15.0) is state


def test_a_shift_takes_the_last_join_along_and_leaves_the_scrape_time() -> None:
    """F4: the last join (the operator's clock) moves with the memory; the scrape time (Prometheus') does not."""
    from tritonscale.scaling.decider import PendingReading

    state = State(recommendations=((NOW + 600.0, 8, 8),),
                  last_pending=PendingReading(NOW + 2.0, 3.0, 8.0, joined_at=NOW + 600.0))
    shifted = state.until(NOW, 15.0)
    assert shifted.recommendations == ((NOW - 15.0, 8, 8),)
    assert shifted.last_pending is not None and (shifted.last_pending.at, shifted.last_pending.joined_at) == (
        NOW + 2.0, NOW - 15.0)


def test_a_stamp_no_clock_would_give_is_dropped_and_the_rest_kept() -> None:
    """F5: one entry stamped in milliseconds shifted every good entry about 1e9 s into the past, erasing the
    memory. An entry more than an hour ahead is no clock's: it goes, and the rest stays as written."""
    state = State(recommendations=((NOW - 60.0, 3, 3), (NOW * 1000.0, 8, 8)), surprises=(NOW - 45.0,))
    kept = state.until(NOW, 15.0)
    assert kept.recommendations == ((NOW - 60.0, 3, 3),) and kept.surprises == (NOW - 45.0,)


def test_a_refused_scale_keeps_the_last_scale_time_on_the_memorys_clock() -> None:
    """F10: a refused scale put back the memory's earlier lastScaleTime unshifted beside shifted entries, and the
    next tick shifted the whole memory again (recommendations read 630 s old instead of 45 s)."""
    before = State(recommendations=((NOW + 585.0, 4, 4), (NOW + 600.0, 4, 4)), last_scale_time=NOW + 590.0)
    decided = replace(before.until(NOW, 15.0), last_scale_time=NOW)  # decide() stamps this tick's scale
    kept = decided.scale_time_from(before, NOW, 15.0)
    assert kept.last_scale_time == NOW - 25.0
    assert kept.until(NOW + 15.0, 15.0) is kept  # nothing ahead: the next tick shifts nothing
