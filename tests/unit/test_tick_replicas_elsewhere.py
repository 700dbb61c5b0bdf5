"""Another scaler on the Deployment (an HPA, `kubectl scale`): the autoscaler owns spec.replicas and
overrules it, and says so -- a Warning event naming the other writer, once, not at every tick."""

from __future__ import annotations

from typing import Any

from test_tick_scale_failed import UID, Kube

from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot
from tritonscale.scaling.replicas_elsewhere import FIGHT_WINDOW_S, OVERRIDE_REPEAT_S, replicas_writers

HPA = {"manager": "kube-controller-manager", "operation": "Update", "subresource": "scale",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}}
OURS = {"manager": "tritonscale", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
TEMPLATE_ONLY = {"manager": "kubectl-edit", "operation": "Update",
                 "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {}}}}}


def test_replicas_writers_names_other_managers_of_spec_replicas() -> None:
    def dep(*entries: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"managedFields": list(entries)}}
    assert replicas_writers(dep(OURS, TEMPLATE_ONLY)) == []
    assert replicas_writers(dep(OURS, HPA)) == ["kube-controller-manager (through /scale)"]
    assert replicas_writers(dep({"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}})) == [
        "kubectl"]
    assert replicas_writers({"metadata": {}}) == []
    assert replicas_writers(dep("junk", {"manager": "x", "fieldsV1": "junk"})) == []  # type: ignore[arg-type]


def test_a_count_set_elsewhere_is_reported_once_and_overruled() -> None:
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    kube.body["spec"]["scaling"]["minReplicas"] = 2  # the count the autoscaler puts back: its floor
    kube.deployment["spec"]["replicas"] = 2
    kube.body["status"] = {"desiredReplicas": 2}
    kube.deployment["metadata"]["managedFields"] = [OURS]
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert not [e for e in events if e[1] == "ReplicasSetElsewhere"]  # what it asked for: nothing to say

    def cycle(t: float) -> None:
        """An HPA with maxReplicas 1 sets 1 every 15 s; the tick puts 2 back (as its field manager),
        and the tick after it finds its own count."""
        kube.deployment["spec"]["replicas"] = 1
        kube.deployment["metadata"]["managedFields"] = [HPA]
        tick.run_tick(kube, "default", "linear", down, t, lambda body, *e: events.append(e))
        assert kube.deployment["spec"]["replicas"] == 2
        kube.deployment["metadata"]["managedFields"] = [OURS]
        tick.run_tick(kube, "default", "linear", down, t + 2, lambda body, *e: events.append(e))

    cycle(1015.0)
    assert _scaling(kube)["reason"] != "ReplicasSetElsewhere"  # once (a `kubectl scale`): the event alone
    scaled = [e for e in events if e[1] == "Scaled"]
    assert scaled[-1][2].startswith("scaled up from 1 to 2 (spec.replicas had been set to 1 elsewhere; the last "
                                    "tick asked for 2): "), scaled[-1]
    for t in (1030.0, 1045.0, 1060.0):
        cycle(t)
        # recurring (an HPA): the Scaling condition says so at every tick, between overrides too
        cond = _scaling(kube)
        assert (cond["status"], cond["reason"]) == ("False", "ReplicasSetElsewhere"), cond
        assert "another writer keeps setting the Deployment's spec.replicas (kube-controller-manager (through " \
               "/scale): " in cond["message"] and "the autoscaler's decision: " in cond["message"]
    said = [e for e in events if e[1] == "ReplicasSetElsewhere"]
    assert len(said) == 1 and said[0][0] == "Warning", said
    assert "spec.replicas is 1, set by kube-controller-manager (through /scale), not the 2" in said[0][2]
    # No override for the window: the condition is the decision's again.
    tick.run_tick(kube, "default", "linear", down, 1062.0 + FIGHT_WINDOW_S, lambda body, *e: events.append(e))
    assert _scaling(kube)["reason"] != "ReplicasSetElsewhere"
    cycle(1015.0 + OVERRIDE_REPEAT_S)  # the first event has expired: said again
    assert len([e for e in events if e[1] == "ReplicasSetElsewhere"]) == 2

    # The previous operator version's writes (the client's default field manager) are this operator's.
    events.clear()
    tick.forget(UID)
    kube.deployment["spec"]["replicas"] = 1
    kube.deployment["metadata"]["managedFields"] = [{**OURS, "manager": "OpenAPI-Generator"}]
    tick.run_tick(kube, "default", "linear", down, 9000.0, lambda body, *e: events.append(e))
    assert not [e for e in events if e[1] == "ReplicasSetElsewhere"]

    # Our own write that did not land (a refused patch) is no other writer.
    tick.forget(UID)
    events.clear()
    kube.deployment["metadata"]["managedFields"] = [OURS]
    tick.run_tick(kube, "default", "linear", down, 1060.0, lambda body, *e: events.append(e))
    assert not [e for e in events if e[1] == "ReplicasSetElsewhere"]
    tick.forget(UID)


def _scaling(kube: Kube) -> dict[str, Any]:
    return next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")


def test_not_while_this_operator_s_own_patch_failed() -> None:
    """ScaleFailed: the count differs because the operator's own patch was refused, whoever wrote last."""
    kube, events = Kube(), []
    tick.forget(UID)
    kube.refuse = True  # every replica patch refused (a quota)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert kube.body["status"]["desiredReplicas"] == 1 and kube.deployment["spec"]["replicas"] == 0
    # Whoever owns the field (here an HPA's old write), 0 against 1 is the refusal's doing.
    kube.deployment["metadata"]["managedFields"] = [HPA]
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert [e[1] for e in events] == ["PrometheusUnavailable", "ScaleFailed"]  # no ReplicasSetElsewhere
    tick.forget(UID)
