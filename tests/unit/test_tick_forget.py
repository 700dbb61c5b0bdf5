"""A deleted InferenceService leaves nothing in the autoscaler's per-object memory: ``tick.forget`` (called
once its daemon ends) clears tick's own tables and each module's that the tick writes to (each module's
``forget``), or a churn of objects grows the operator's memory for good (session 85's audit N)."""

from __future__ import annotations

from support.spec_cases import base_spec
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.scaling import prometheus_events, replicas_elsewhere, spec_in_force, tick
from tritonscale.scaling.decider import State


def test_forget_clears_every_table_the_tick_keeps_by_uid() -> None:
    uid, other = "u-gone", "u-kept"
    spec = InferenceServiceSpec.model_validate(base_spec())
    for u in (uid, other):
        tick._memory[u] = State()
        tick._pods_seen[u] = (0.0, frozenset())
        tick._logged.add(u)
        tick._stamped.add(u)
        tick._conflicts[(u, "host x")] = 0.0
        with prometheus_events._prometheus_said_lock:
            prometheus_events._prometheus_said[u] = ("PrometheusUnavailable", None)
        spec_in_force._valid_specs[u] = spec
        replicas_elsewhere._overridden[u] = ("kubectl", 0.0)
        replicas_elsewhere._overrides_seen[u] = [0.0]
    try:
        tick.forget(uid)
        tables = [tick._memory, tick._pods_seen, tick._logged, tick._stamped, prometheus_events._prometheus_said,
                  spec_in_force._valid_specs, replicas_elsewhere._overridden, replicas_elsewhere._overrides_seen]
        assert [uid in t for t in tables] == [False] * len(tables)
        assert not any(k[0] == uid for k in tick._conflicts)
        assert [other in t for t in tables] == [True] * len(tables)  # only the deleted object's
    finally:
        tick.forget(other)
