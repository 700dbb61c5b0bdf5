"""The operator's own /metrics: an InferenceService's series go with it, its decision counts included."""

from __future__ import annotations

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
    om.DESIRED.labels("ns-m", "gone").set(3)
    om.set_or_remove(om.OBSERVED_P95, "ns-m", "gone", 80.0)
    assert any("tritonscale_decisions_total" in s for s in _series("ns-m", "gone"))
    om.forget("ns-m", "gone")
    assert _series("ns-m", "gone") == []
    assert [s.split("{")[0] for s in _series("ns-m", "kept")] == ["tritonscale_decisions_total",
                                                                 "tritonscale_decisions_created"]
    om.forget("ns-m", "kept")
    om.forget("ns-m", "never-seen")  # nothing to drop: no error
