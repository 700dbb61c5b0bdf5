"""Another scaler on the Deployment (an HPA, `kubectl scale`): the autoscaler owns spec.replicas and
overrules it, and says so -- a Warning event naming the other writer, once, not at every tick."""

from __future__ import annotations

from typing import Any

from test_tick_scale_failed import UID, Kube

from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot

HPA = {"manager": "kube-controller-manager", "operation": "Update", "subresource": "scale",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}}
OURS = {"manager": "tritonscale", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
TEMPLATE_ONLY = {"manager": "kubectl-edit", "operation": "Update",
                 "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {}}}}}


def test_replicas_writers_names_other_managers_of_spec_replicas() -> None:
    def dep(*entries: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"managedFields": list(entries)}}
    assert tick.replicas_writers(dep(OURS, TEMPLATE_ONLY)) == []
    assert tick.replicas_writers(dep(OURS, HPA)) == ["kube-controller-manager (through /scale)"]
    assert tick.replicas_writers(dep({"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}})) == [
        "kubectl"]
    assert tick.replicas_writers({"metadata": {}}) == []
    assert tick.replicas_writers(dep("junk", {"manager": "x", "fieldsV1": "junk"})) == []  # type: ignore[arg-type]


def test_a_count_set_elsewhere_is_reported_once_and_overruled() -> None:
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    kube.deployment["spec"]["replicas"] = 2
    kube.body["status"] = {"desiredReplicas": 2}
    kube.deployment["metadata"]["managedFields"] = [OURS]
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert not [e for e in events if e[1] == "ReplicasSetElsewhere"]  # what it asked for: nothing to say

    for t in (1015.0, 1030.0, 1045.0):  # an HPA with maxReplicas 1 sets 1 before every tick
        kube.deployment["spec"]["replicas"] = 1
        kube.deployment["metadata"]["managedFields"] = [HPA]
        kube.body["status"]["desiredReplicas"] = 2
        tick.run_tick(kube, "default", "linear", down, t, lambda body, *e: events.append(e))
    said = [e for e in events if e[1] == "ReplicasSetElsewhere"]
    assert len(said) == 1 and said[0][0] == "Warning", said
    assert "spec.replicas is 1, set by kube-controller-manager (through /scale), not the 2" in said[0][2]

    # Our own write that did not land (a refused patch) is no other writer.
    tick.forget(UID)
    events.clear()
    kube.deployment["metadata"]["managedFields"] = [OURS]
    tick.run_tick(kube, "default", "linear", down, 1060.0, lambda body, *e: events.append(e))
    assert not [e for e in events if e[1] == "ReplicasSetElsewhere"]
    tick.forget(UID)
