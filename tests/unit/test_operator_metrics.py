"""The operator's own /metrics: an InferenceService's series go with it, its decision counts included."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from tritonscale.scaling import operator_metrics as om


def _series(namespace: str, name: str) -> list[str]:
    text = generate_latest().decode()
    return [line for line in text.splitlines()  # labels come sorted by name
            if not line.startswith("#") and f'inferenceservice="{name}"' in line and f'namespace="{namespace}"' in line]


def test_a_deleted_inferenceservice_leaves_no_series() -> None:
    om.count_decision("ns-m", "gone", "up", "LoadIncreased")
    om.count_decision("ns-m", "gone", "none", "Steady")
    om.count_decision("ns-m", "kept", "none", "Steady")
    om.publish("ns-m", "gone", 3, 2, (2, 8), 100.0, 80.0, 0.1)
    assert om.BREACH_P95.labels("ns-m", "gone")._value.get() == pytest.approx(110.0)
    names = {s.split("{")[0] for s in _series("ns-m", "gone")}
    assert {"tritonscale_decisions_total", "tritonscale_desired_replicas", "tritonscale_ready_replicas",
            "tritonscale_warm_floor_replicas", "tritonscale_max_replicas", "tritonscale_target_p95_milliseconds",
            "tritonscale_breach_p95_milliseconds", "tritonscale_observed_p95_milliseconds"} <= names
    om.forget("ns-m", "gone")
    assert _series("ns-m", "gone") == []
    assert [s.split("{")[0] for s in _series("ns-m", "kept")] == ["tritonscale_decisions_total",
                                                                 "tritonscale_decisions_created"]
    om.forget("ns-m", "kept")
    om.forget("ns-m", "never-seen")  # nothing to drop: no error


def test_a_tick_publishes_the_bounds_the_alerts_compare_with() -> None:
    om.publish("ns-b", "svc", 4, 3, (2, 4), None, None)
    values = {s.split("{")[0]: float(s.rsplit(" ", 1)[1]) for s in _series("ns-b", "svc")}
    assert values == {"tritonscale_desired_replicas": 4.0, "tritonscale_ready_replicas": 3.0,
                      "tritonscale_warm_floor_replicas": 2.0, "tritonscale_max_replicas": 4.0}  # no p95: no series
    om.forget("ns-b", "svc")


def test_a_deleted_objects_clean_up_leaves_a_new_one_of_its_name_alone() -> None:
    """auditN F4: deleted and created again under its name, the old object's clean-up (after its last tick)
    removed the new one's series; they came back at its next tick, up to an interval later."""
    om.claim("ns-r", "svc", "uid-old")
    om.publish("ns-r", "svc", 3, 3, (1, 8), 100.0, 80.0)
    om.claim("ns-r", "svc", "uid-new")  # the new object ticked
    om.publish("ns-r", "svc", 2, 2, (1, 8), 100.0, 70.0)
    om.count_decision("ns-r", "svc", "down", "LoadDecreased")
    before = _series("ns-r", "svc")
    om.forget("ns-r", "svc", "uid-old")
    assert _series("ns-r", "svc") == before and before
    om.forget("ns-r", "svc", "uid-new")
    assert _series("ns-r", "svc") == []
