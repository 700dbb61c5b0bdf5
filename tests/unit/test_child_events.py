"""A child's watch event reconciles its owner unless the owner's last whole pass already read or wrote that
very version of it (Kopf's listing at a restart, the echo of the pass's own writes): a restart made five
passes per InferenceService (its resume, then one per child kind), 1,000 for 200 objects."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tritonscale.handlers import autoscale_daemon, reconciler
from tritonscale.reconcile.child_writes import Outcome

OWNER = {"metadata": {"name": "linear", "namespace": "prod", "uid": "u-1"}}
SEEN = {"Deployment/linear": "107", "Service/linear": "98", "ConfigMap/linear-config-0123456789abcdef": "97",
        "PodDisruptionBudget/linear": "99"}


def _child(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "prod", "resourceVersion": version,
                         "labels": {reconciler.LABEL: "linear"}}}


@pytest.fixture
def passes(monkeypatch) -> list[str]:
    """Each pass of the reconciler (the owner's name); every pass leaves the children at SEEN."""
    done: list[str] = []

    class Kube:
        def get_inference_service(self, namespace: str, name: str) -> dict[str, Any]:
            return OWNER

    def reconcile(_kube: Any, owner: dict[str, Any], _events: Any) -> Outcome:
        done.append(owner["metadata"]["name"])
        return Outcome(valid=True, seen=dict(SEEN))

    monkeypatch.setattr(reconciler, "_kube", Kube)
    monkeypatch.setattr(reconciler, "_events_for", lambda body: None)
    monkeypatch.setattr(reconciler, "reconcile", reconcile)
    reconciler._seen.clear()
    reconciler._passed_once.clear()
    yield done
    reconciler._seen.clear()
    reconciler._passed_once.clear()


def _event(kind: str, name: str, version: str, type_: str | None = None) -> None:
    reconciler.child_changed(body=_child(kind, name, version), namespace="prod",
                             resource=SimpleNamespace(kind=kind), type=type_)


def test_a_restarts_listing_of_the_children_the_resume_pass_read_reconciles_nothing(passes) -> None:
    reconciler.reconcile_inference_service(body=OWNER)  # the resume
    for key, version in SEEN.items():
        kind, name = key.split("/")
        _event(kind, name, version)  # Kopf's initial listing: type None
        _event(kind, name, version, "MODIFIED")  # the echo of the pass's own write
    assert passes == ["linear"]


def test_a_listing_before_the_owners_first_pass_waits_for_that_pass(passes) -> None:
    """At a start Kopf lists every child kind beside the InferenceServices: a child listed before its
    owner's resume pass is read by that pass."""
    _event("Deployment", "linear", "107")  # listed (type None) before the resume
    _event("Service", "linear", "98")
    assert passes == []
    reconciler.reconcile_inference_service(body=OWNER)  # the resume
    _event("ConfigMap", "linear-config-0123456789abcdef", "97")  # listed after it: the version it read
    assert passes == ["linear"]
    _event("PodDisruptionBudget", "linear", "100")  # a relisting (a watch started over) that finds a change
    assert passes == ["linear", "linear"]
    _event("Deployment", "other", "5", "MODIFIED")  # a change is never waited for
    assert passes == ["linear", "linear", "linear"]  # (the fake owner is read whatever the name)


def test_a_new_version_a_deletion_or_an_unknown_child_reconciles(passes) -> None:
    reconciler.reconcile_inference_service(body=OWNER)
    _event("Deployment", "linear", "108", "MODIFIED")  # its status moved (a pod became ready): Ready follows
    assert passes == ["linear", "linear"]
    _event("Service", "linear", "98", "DELETED")  # deleted by hand: put back
    _event("ConfigMap", "linear-config-fedcba9876543210", "97", "ADDED")  # not one the pass saw
    assert len(passes) == 4


def test_a_pass_that_stops_short_or_fails_leaves_nothing_known(passes, monkeypatch) -> None:
    reconciler.reconcile_inference_service(body=OWNER)
    monkeypatch.setattr(reconciler, "reconcile", lambda *a: passes.append("short") or Outcome(valid=False))
    reconciler.reconcile_inference_service(body=OWNER)  # e.g. the spec became invalid, or a name conflict
    _event("Deployment", "linear", "107", "MODIFIED")
    assert passes == ["linear", "short", "short"]

    def fails(*_: Any) -> Outcome:
        passes.append("failed")
        raise RuntimeError("half way")

    reconciler._seen[("prod", "linear")] = dict(SEEN)
    monkeypatch.setattr(reconciler, "reconcile", fails)
    with pytest.raises(RuntimeError):
        _event("Service", "linear", "99", "MODIFIED")
    assert ("prod", "linear") not in reconciler._seen  # what the failed pass read is not known to be done


def test_writers_of_a_child_are_the_other_managers_of_what_the_patch_puts_back() -> None:
    from tritonscale.reconcile.child_writes import writers

    image = {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"triton"}': {"f:image": {}}}}}}}
    restarted = {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {
        "f:kubectl.kubernetes.io/restartedAt": {}}}}}}
    child = {"metadata": {"managedFields": [
        {"manager": "tritonscale", "operation": "Update", "fieldsV1": image},
        {"manager": "OpenAPI-Generator", "operation": "Update", "fieldsV1": image},  # an older operator's
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
         "fieldsV1": {"f:status": {}}},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "scale",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}},  # an HPA: not here
        {"manager": "argocd", "operation": "Apply", "fieldsV1": image},
        {"manager": "kubectl-rollout", "operation": "Update", "fieldsV1": restarted},
        {"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
        "junk"]}}
    # the containers list is replaced whole: whoever owns a field in it
    put_back = {"spec": {"template": {"metadata": {"annotations": {"tritonscale.io/config-hash": "ab"}},
                                      "spec": {"containers": [{"name": "triton", "image": "nvcr.io/x"}]}}},
                "metadata": {"labels": {"tritonscale.io/inferenceservice": "linear"}}}
    assert writers(child, put_back) == ["argocd"]
    # a template annotation of ours: not the restart's, nor a label of another name
    assert writers(child, {"spec": {"template": {"metadata": {"annotations": {"tritonscale.io/config-hash": "cd"}}}}},
                   ) == []
    assert writers(child, {"metadata": {"labels": {"team": None}}}) == ["kubectl-label"]  # a key nulled
    assert writers({"metadata": {}}, put_back) == []


def test_a_listing_during_the_owners_first_pass_is_not_skipped(passes, monkeypatch) -> None:
    """The pass read the child at one version; Kopf's listing, while the pass runs, shows a later one (and
    the watch then goes on from the listing: no event for that change follows)."""
    listed: list[str] = []
    monkeypatch.setattr(reconciler, "_reconcile_owner", lambda namespace, name: listed.append(name))

    def slow_pass(_kube: Any, owner: dict[str, Any], _events: Any) -> Outcome:
        passes.append("first")
        _event("Deployment", "linear", "108")  # listed while this pass runs, after it read version 107
        return Outcome(valid=True, seen=dict(SEEN))

    monkeypatch.setattr(reconciler, "reconcile", slow_pass)
    reconciler.reconcile_inference_service(body=OWNER)
    assert passes == ["first"] and listed == ["linear"]  # the listing reconciles the owner again


def test_a_deleted_objects_upgrade_wait_goes_with_it_and_a_new_one_of_its_name_keeps_its_own() -> None:
    """auditN F1: a deleted object's place among the upgrade waiters stayed (the owner read as 404 was the only
    way out), and tritonscale_upgrade_waiting_fleets stayed above 0 for a fleet that no longer exists: the
    UpgradeStalled alert fired for it. Its clean-up forgets it, unless a new object of its name passed since."""
    from tritonscale.scaling import operator_metrics as om

    waiting = SimpleNamespace(seen={"Deployment": "1"}, upgrade_waits_for=("other",))
    reconciler._pass_starts("prod", "old", "uid-1")
    reconciler._passed("prod", "old", waiting)
    assert ("prod", "old") in reconciler._upgrade_waiters and om.UPGRADE_WAITING._value.get() >= 1
    autoscale_daemon._forget_object(None, "uid-1", "prod", "old")
    assert ("prod", "old") not in reconciler._upgrade_waiters and ("prod", "old") not in reconciler._passed_once
    reconciler._pass_starts("prod", "again", "uid-2")
    reconciler._passed("prod", "again", waiting)
    reconciler._pass_starts("prod", "again", "uid-3")  # deleted and created again: the new one's pass
    reconciler._passed("prod", "again", waiting)
    autoscale_daemon._forget_object(None, "uid-2", "prod", "again")  # the old one's clean-up, after
    assert ("prod", "again") in reconciler._upgrade_waiters
    autoscale_daemon._forget_object(None, "uid-3", "prod", "again")
    assert ("prod", "again") not in reconciler._upgrade_waiters


def test_a_deleted_objects_clean_up_failure_goes_with_it() -> None:
    """auditN F5: the reconciler's per-object memory of a refused ConfigMap clean-up outlived the object."""
    from tritonscale.reconcile import inference_service as isvc

    isvc._cleanup_failed["uid-9"] = "403 Forbidden"
    autoscale_daemon._forget_object(None, "uid-9", "prod", "gone")
    assert "uid-9" not in isvc._cleanup_failed
