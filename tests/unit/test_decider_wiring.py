"""decide()-level wiring: that settle runs in the pipeline, and what the history remembers for the
scale-down window and the burst memory (the recommendation with the breach's or demand's extra, and
the bare need of the rate now)."""

from __future__ import annotations

from dataclasses import replace

from support.decider_cases import POLICY, known_capacity, rates
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, PendingReading, Replicas

NOW = 1000.0
# the cost line known, a cold start of 60 s (horizon 75 s), and three minutes of a flat 600 rps
BASE = replace(known_capacity(now=NOW - 30.0), rates=rates(*((NOW - 15.0 * k, 600.0) for k in range(12, 0, -1))),
               cold_start_s=60.0)


def _obs(rps: float, pending: float) -> Observation:
    return Observation(status="ok", p95_ms=50.0, rps=rps, recent_rps=rps, pending=pending, pending_at=NOW)


def test_a_queue_drained_right_after_replicas_joined_holds_the_count_and_remembers_the_demand() -> None:
    """One replica joined at the last tick (2 ready then, 3 now) and the queue fell from 400 to 100: the
    arrival reading (1000 out - 20/s of drain = 980 rps) mixes the drain's stretches, so decide() holds 3
    (QueueDraining) for a tick instead of asking for a fourth replica the traffic may not need. The history
    still remembers the 4 the demand asked for (and the bare need of 4 at 980 rps), so a drop at the next
    tick is held by the scale-down window."""
    st = replace(BASE, last_pending=PendingReading(NOW - 15.0, 400.0, 2.0, 0.0, 0.0, 2.0))
    d = D.decide(_obs(1000.0, 100.0), Replicas(3, 3), POLICY, st, NOW)
    assert (d.replicas, d.reason) == (3, "QueueDraining")
    assert d.message == ("980.0 rps now, planning 980.0 rps + 100 queued at ~287.6 rps per replica (batch cost); "
                         "replicas joined within the last two ticks and the queue drained from 400 to 100: waiting "
                         "a tick for a reading without the drain -> 3 replicas")
    assert d.state.recommendations == ((NOW, 4, 4),)


def test_the_history_remembers_the_bare_need_of_the_rate_now() -> None:
    """At a steady 600 rps on 6 replicas the bare need is ceil(600 / 287.6) = 3: that, not the 6 running,
    is what the burst memory may hold later. Remembering the current count as the need would make every
    later burst hold keep the whole fleet."""
    st = replace(BASE, last_pending=PendingReading(NOW - 15.0, 0.0, 6.0, 0.0, 0.0, 6.0))
    d = D.decide(_obs(600.0, 0.0), Replicas(6, 6), POLICY, st, NOW)
    assert (d.replicas, d.reason) == (6, "StabilizingScaleDown")  # a new memory: the seed holds a window
    assert d.state.recommendations == ((NOW - 0.001, 6, 6), (NOW, 3, 3))


def test_the_burst_memory_holds_the_peak_bare_need_not_the_fleet() -> None:
    """Two unforeseen jumps 100 s apart (hold 600 s) after a peak whose bare need was 5: at 600 rps
    (bare need 3) on 6 replicas, the burst memory holds 5 -- the peak need -- and lets the sixth go. The
    peak entry (recommended 3, bare 5) stays in the memory though a later entry recommended more (4):
    it is the bare need's maximum the burst memory keeps."""
    st = replace(BASE, last_pending=PendingReading(NOW - 15.0, 0.0, 6.0, 0.0, 0.0, 6.0),
                 surprises=(NOW - 300.0, NOW - 200.0), recommendations=((NOW - 200.0, 3, 5), (NOW - 15.0, 4, 3)))
    d = D.decide(_obs(600.0, 0.0), Replicas(6, 6), POLICY, st, NOW)
    assert (d.replicas, d.reason) == (5, "BurstMemory")
    assert d.message == ("600.0 rps now, planning 600.0 rps at ~287.6 rps per replica (batch cost); holding the "
                         "peak need of 5 for 600s after the rate's last unforeseen jump 200s ago (a set "
                         "scaleDown.stabilizationSeconds holds that window instead) -> 5 replicas")
    assert d.state.recommendations == ((NOW - 200.0, 3, 5), (NOW - 15.0, 4, 3), (NOW, 3, 3))
