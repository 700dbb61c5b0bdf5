"""An edit the operator refuses leaves the running fleet as it was (the reconciler reports SpecValid=False),
and the autoscaler keeps scaling that fleet by the last valid spec: the load does not wait for the fix."""

from __future__ import annotations

import copy
import json

from test_tick_scale_failed import UID, Kube

from tritonscale.api.spec import SPEC_ANNOTATION
from tritonscale.api.validation import validate_body
from tritonscale.render.kubernetes_objects import build_deployment, build_pdb
from tritonscale.scaling import spec_in_force, tick
from tritonscale.scaling.prometheus_source import Snapshot


class Made(Kube):
    """The Deployment (its template and record) and PodDisruptionBudget made from ``applied``."""

    def __init__(self, applied: dict | None = None) -> None:
        super().__init__()
        applied = applied or copy.deepcopy(self.body)
        spec = validate_body(applied)[0]
        built = build_deployment(spec, applied)
        self.deployment["metadata"]["annotations"] = built["metadata"]["annotations"]
        self.deployment["spec"]["template"] = built["spec"]["template"]
        self.pdb = build_pdb(spec, applied)

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return self.pdb if kind == "PodDisruptionBudget" else self.deployment


def _scaling(kube: Kube) -> dict:
    return next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")


def test_an_invalid_edit_keeps_the_fleet_scaled_by_the_last_valid_spec() -> None:
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 1  # the warm floor
    edited = copy.deepcopy(kube.body)
    edited["spec"]["scaling"]["minReplicas"] = 3  # valid on its own ...
    edited["spec"]["runtime"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}  # ... not this
    kube.body = edited
    kube.deployment["spec"]["replicas"] = 0  # and the fleet drops below its floor (scaled by hand, say)
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 1  # scaled by the last valid spec (floor 1), not held off
    assert "the spec as edited is invalid (condition SpecValid): scaling by the last valid one" \
        in _scaling(kube)["message"]
    tick.forget(UID)  # an operator restart, and a Deployment that records no spec: nothing to scale it by
    kube.deployment["spec"]["replicas"] = 0
    tick.run_tick(kube, "default", "linear", down, 1030.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 0  # held


def test_after_a_restart_an_invalid_edit_is_scaled_by_the_spec_the_deployment_was_made_from() -> None:
    """The Deployment records the spec it was made from (SPEC_ANNOTATION): the operator's memory of the
    last valid spec survives its restart."""
    valid = copy.deepcopy(Kube().body)
    valid["spec"]["scaling"]["minReplicas"] = 2
    kube, events = Made(valid), []
    kube.refuse = False
    kube.body["spec"]["runtime"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}  # invalid
    tick.forget(UID)  # a fresh operator: nothing in memory
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 2  # the recorded spec's floor
    assert "scaling by the last valid one" in _scaling(kube)["message"]
    # A record this operator refuses too (an older version's, say) is no spec to scale by: held.
    tick.forget(UID)
    kube.deployment["spec"]["replicas"] = 0
    kube.deployment["metadata"]["annotations"][SPEC_ANNOTATION] = json.dumps({"scaling": {"minReplicas": -1}})
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 0
    for junk in ("not json", "[1, 2]"):
        tick.forget(UID)
        kube.deployment["metadata"]["annotations"][SPEC_ANNOTATION] = junk
        tick.run_tick(kube, "default", "linear", down, 1030.0, lambda body, *e: events.append(e))
        assert kube.deployment["spec"]["replicas"] == 0
    tick.forget(UID)


def test_an_invalid_edit_leaves_the_tuned_batcher_in_status_alone() -> None:
    """The tuner does not run on a remembered spec (the reconciler applies nothing meanwhile), and the
    settings it had put in force stay in status for when the spec is fixed."""
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    kube.body["spec"]["batching"]["autoTune"] = {"enabled": True}
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    tuned = {"maxQueueDelayMicroseconds": 1000, "preferredBatchSizes": [8], "source": "tuner",
             "lastChangeTime": "2026-11-26T00:00:00Z", "reason": "MoreCapacity", "message": "m"}
    kube.body["status"]["batching"] = dict(tuned)
    edited = copy.deepcopy(kube.body)
    edited["spec"]["runtime"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    kube.body = edited
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert kube.body["status"]["batching"] == tuned
    tick.forget(UID)


def test_an_edit_the_api_server_refused_as_rendered_is_not_scaled_by() -> None:
    """ChildRejected: the spec passes the operator's checks, but the API server refused its children
    (the reconciler's dry run), so nothing of it was applied; the fleet keeps the spec it was made from.
    Before, its minReplicas 3 scaled the fleet up while the PodDisruptionBudget still said 1."""
    kube, events = Made(), []
    kube.refuse = False
    tick.forget(UID)
    kube.body["metadata"]["generation"] = 2
    kube.body["spec"]["scaling"]["minReplicas"] = 3
    kube.body["spec"]["runtime"]["env"] = [{"value": "x"}]  # free-form: only the API server refuses it
    assert validate_body(kube.body)[0] is not None
    rejected = {"type": "SpecValid", "status": "False", "reason": "ChildRejected", "message": "env[0].name: Required",
                "lastTransitionTime": "2026-11-26T00:00:00Z", "observedGeneration": 2}
    kube.body["status"] = {"conditions": [rejected]}
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 1  # the applied spec's floor, not the refused one's 3
    assert "scaling by the last valid one" in _scaling(kube)["message"]
    # A condition about an earlier generation says nothing of a later one (not reported on yet).
    tick.forget(UID)
    kube.body["metadata"]["generation"] = 3
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 3
    tick.forget(UID)


def test_a_record_the_children_no_longer_match_is_not_scaled_by() -> None:
    """An older operator version (it keeps no record) applied later edits after this one wrote its
    record: minReplicas 2 -> 3 (the PodDisruptionBudget says 3), or a config change (the template's
    hash). The stale record is no spec to scale by: held, not cut to its bounds."""
    valid = copy.deepcopy(Kube().body)
    valid["spec"]["scaling"]["minReplicas"] = 2
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    for drift in ("pdb", "config"):
        kube, events = Made(valid), []
        post = events.append
        kube.refuse = False
        if drift == "pdb":
            kube.pdb["spec"]["minAvailable"] = 3
        else:
            kube.deployment["spec"]["template"]["metadata"]["annotations"]["tritonscale.io/config-hash"] = "0" * 16
        kube.body["spec"]["runtime"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}  # invalid
        tick.forget(UID)
        tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e, post=post: post(e))
        assert kube.deployment["spec"]["replicas"] == 0, drift  # held: not raised to the stale record's floor 2
    tick.forget(UID)


def test_an_invalid_scaling_edit_keeps_the_loops_prometheus_window_and_interval() -> None:
    """The autoscaler loop paces its ticks and queries Prometheus by the scaling block in force: an edit
    the operator refuses does not swap a tenant's own Prometheus for the operator-wide one (or none) while
    the fleet is still scaled by its old spec."""
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    kube.body["spec"]["scaling"].update(prometheus={"url": "http://tenant-prom:9090"}, windowSeconds=120,
                                        intervalSeconds=30)
    assert spec_in_force.scaling_in_force(UID, kube.body).prometheus.url == "http://tenant-prom:9090"
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    edited = copy.deepcopy(kube.body)
    edited["spec"]["scaling"]["windowSeconds"] = 2  # below the field's minimum: the whole block fails to parse
    kube.body = edited
    before = spec_in_force.scaling_in_force(UID, edited)  # before the next tick
    tick.run_tick(kube, "default", "linear", down, 1030.0, lambda body, *e: events.append(e))
    after = spec_in_force.scaling_in_force(UID, edited)
    for scaling in (before, after):
        assert (scaling.prometheus.url, scaling.window_seconds, scaling.interval_seconds) == \
            ("http://tenant-prom:9090", 120, 30)
    assert "scaling by the last valid one" in _scaling(kube)["message"]
    tick.forget(UID)  # nothing known (a restart, no Deployment record yet): the block's defaults
    assert spec_in_force.scaling_in_force(UID, edited).prometheus.url is None
    fixed = copy.deepcopy(edited["spec"])
    fixed["scaling"]["windowSeconds"] = 30  # valid again: the edit is in force at once
    assert spec_in_force.scaling_in_force(UID, {**edited, "spec": fixed}).window_seconds == 30
    # Valid, but its children refused as rendered (SpecValid=False ChildRejected for this generation): the
    # fleet is scaled by the last valid spec, and the loop queries by it too.
    kube.body = copy.deepcopy(edited)
    kube.body["spec"]["scaling"]["windowSeconds"] = 120
    tick.run_tick(kube, "default", "linear", down, 1060.0, lambda body, *e: events.append(e))  # scaled by it
    refused = {**kube.body, "spec": fixed, "metadata": {**kube.body["metadata"], "generation": 7},
               "status": {"conditions": [{"type": "SpecValid", "status": "False", "reason": "ChildRejected",
                                          "observedGeneration": 7}]}}
    assert spec_in_force.scaling_in_force(UID, refused).window_seconds == 120
