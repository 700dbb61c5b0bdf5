"""Fast tests of the sandbox's pure reporting parts: Scaled-event parsing, the live
line, the recorder's windows, the summary and the plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tritonscale.sandbox.live_view import Recorder, Sample, format_line, parse_scaled_event
from tritonscale.sandbox.loadgen import RequestRecord
from tritonscale.sandbox.summary import Phase, build_summary, write_plot, write_summary


def test_scaled_event_messages_parse_like_the_operator_writes_them():
    msg = ("scaled up from 1 to 4: AtMaxReplicas: p95 869 ms vs target 200 ms, queue 262 ms, "
           "27.0 rps on 1 warm replica(s); at maxReplicas=4 -> 4 replicas")
    assert parse_scaled_event(msg) == (1, 4, "AtMaxReplicas")
    assert parse_scaled_event("scaled down from 3 to 2: LatencySlack: ...") == (3, 2, "LatencySlack")
    assert parse_scaled_event("Handler 'reconcile' succeeded.") is None


def test_live_line_has_time_rate_p95_vs_target_replicas_and_notes():
    s = Sample(t=42.2, offered_rps=70.06, completed_rps=69.0, p95_ms=180.4, operator_p95_ms=240.0,
               ready=2, desired=3, errors=0)
    line = format_line(s, 200, ["scaled up 2->3: Panic"])
    assert line == ("t=  42s  offered  70.1 rps  p95  180/200 ms (prom 240)  ready 2/3 desired 3"
                    "  | scaled up 2->3: Panic")
    idle = Sample(1.0, 0.0, 0.0, None, None, 1, 1, 3)
    assert "p95    -/200 ms (prom -)" in format_line(idle, 200) and "errors 3" in format_line(idle, 200)


def test_recorder_windows_offered_rate_and_p95():
    rec = Recorder(arrivals=np.arange(0, 10, 0.1))  # 10 rps
    for i in range(100):
        rec.on_result(RequestRecord(i * 0.1, latency_ms=float(i % 10) * 10 + 10, ok=True), now_t=i * 0.1 + 0.05)
    s = rec.take_sample(10.0, ready=1, desired=2, operator_p95_ms=None)
    assert s.offered_rps == pytest.approx(10.0)
    assert s.completed_rps == pytest.approx(10.0)
    assert s.p95_ms == pytest.approx(100.0, abs=5)
    assert rec.add_scale_event("u1", 3.0, "scaled up from 1 to 2: Panic: x") is not None
    assert rec.add_scale_event("u1", 4.0, "scaled up from 1 to 2: Panic: x") is None  # once per Event


def test_summary_has_the_issue_keys_and_per_phase_p95(tmp_path: Path):
    records = [RequestRecord(t, 50.0 if t < 10 else 500.0, True) for t in np.arange(0, 20, 0.1)]
    records.append(RequestRecord(15.0, math.nan, False, error="ClientConnectorError: refused"))
    samples = [Sample(float(t), 10.0, 10.0, 50.0, 60.0, min(t // 5 + 1, 3), min(t // 5 + 1, 3), 0)
               for t in range(1, 21)]
    summary = build_summary(records=records, samples=samples, scale_events=[], marks=[],
                            phases=[Phase("low", 0, 10, 10), Phase("high", 10, 20, 10)], restarts=1,
                            cold_starts_s=[2.0], config={"target_p95_ms": 200, "min_replicas": 1},
                            scenario={}, interrupted=False, wall_s=21)
    assert summary["p95_ms_by_phase"] == {"low": 50.0, "high": 500.0}
    assert (summary["peak_replicas"], summary["final_replicas"], summary["restarts"]) == (3, 3, 1)
    assert (summary["requests"], summary["errors"]) == (201, 1)
    assert summary["error_kinds"] == {"ClientConnectorError": 1}
    write_summary(summary, tmp_path / "s.json")
    write_plot(summary, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_an_interrupted_run_counts_its_phases_as_far_as_the_load_got():
    """Stopped 4 s into the second phase: the first phase whole, the second over its 4 s (its rate was
    divided by the whole 10 s), the third never begun -- no rate, not 0."""
    records = [RequestRecord(t, 50.0, True) for t in np.arange(0, 14, 0.1)]  # 10 rps until t = 14
    samples = [Sample(float(t), 10.0, 10.0, 50.0, 60.0, 1, 1, 0) for t in range(1, 15)]
    summary = build_summary(records=records, samples=samples, scale_events=[], marks=[],
                            phases=[Phase("base", 0, 10, 10), Phase("high", 10, 20, 10), Phase("low", 20, 30, 10)],
                            restarts=0, cold_starts_s=[], config={"target_p95_ms": 200, "min_replicas": 1},
                            scenario={}, interrupted=True, wall_s=15)
    base, high, low = summary["phases"]
    assert base["offered_rps"] == pytest.approx(10.0) and base["end_s"] == 10.0
    assert high["offered_rps"] == pytest.approx(10.0, rel=0.05) and high["end_s"] == 14.0
    assert (low["offered_rps"], low["requests"], low["end_s"]) == (None, 0, 20.0)
    # ... and with no sample after the last request, that request still counts in its phase
    cut = build_summary(records=records, samples=samples[:5], scale_events=[], marks=[],
                        phases=[Phase("base", 0, 10, 10), Phase("high", 10, 20, 10)], restarts=0, cold_starts_s=[],
                        config={"target_p95_ms": 200, "min_replicas": 1}, scenario={}, interrupted=True, wall_s=15)
    assert sum(ph["requests"] for ph in cut["phases"]) == len(records)
