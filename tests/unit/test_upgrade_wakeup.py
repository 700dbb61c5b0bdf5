"""handlers: an InferenceService whose upgrade rollout waits (reconcile.upgrade_rollouts) gets its next pass
when one of the operator's Deployments ends a rollout -- the oldest waiters first, no more than the gate
has places -- not through Kopf's retries (an ERROR line each)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tritonscale.handlers import reconciler
from tritonscale.reconcile.child_writes import Outcome
from tritonscale.reconcile.upgrade_rollouts import UpgradeGate


class NoList:
    def list_deployments(self, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        return []


def _deployment(name: str, rolling: bool) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "prod", "generation": 2, "resourceVersion": "1",
                         "labels": {reconciler.LABEL: name}},
            "status": {"observedGeneration": 2, "replicas": 3 if rolling else 2, "updatedReplicas": 2}}


@pytest.fixture
def fleet(monkeypatch):
    """Passes by name; ``state.waits`` is the set of names whose pass waits (the gate is full)."""
    state = SimpleNamespace(passes=[], waits=set(), upgrades=set())
    gate = UpgradeGate(max_rollouts=1)

    class Kube:
        def get_inference_service(self, namespace: str, name: str) -> dict[str, Any]:
            return {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}"}}

    def reconcile(_kube: Any, owner: dict[str, Any], _events: Any) -> Outcome:
        name = owner["metadata"]["name"]
        state.passes.append(name)
        if name in state.waits:
            return Outcome(valid=True, upgrade_waits_for=["prod/busy"])
        if name in state.upgrades:  # its upgrade admitted: it takes a place, as the reconciler's pass does
            assert gate.admit(NoList(), "prod", name, 1) == []
        return Outcome(valid=True)

    monkeypatch.setattr(reconciler, "_kube", Kube)
    monkeypatch.setattr(reconciler, "_events_for", lambda body: None)
    monkeypatch.setattr(reconciler, "reconcile", reconcile)
    monkeypatch.setattr(reconciler, "UPGRADES", gate)
    for store in (reconciler._seen, reconciler._passed_once, reconciler._upgrade_waiters):
        store.clear()
    yield state
    for store in (reconciler._seen, reconciler._passed_once, reconciler._upgrade_waiters):
        store.clear()


def _event(body: dict[str, Any], type_: str | None = "MODIFIED") -> None:
    reconciler.child_changed(body=body, namespace="prod", resource=SimpleNamespace(kind="Deployment"), type=type_)


def test_the_end_of_a_rollout_wakes_the_oldest_waiter_only(fleet) -> None:
    fleet.waits = {"a", "b", "c"}
    for name in ("b", "a", "c"):  # their resume passes, in this order: all wait
        reconciler.reconcile_inference_service(body={"metadata": {"name": name, "namespace": "prod", "uid": name}})
    assert list(reconciler._upgrade_waiters) == [("prod", "b"), ("prod", "a"), ("prod", "c")]
    # the operator's /metrics: the upgrade's progress
    assert REGISTRY.get_sample_value("tritonscale_upgrade_waiting_fleets") == 3
    _event(_deployment("busy", rolling=True), type_=None)  # listed rolling
    fleet.passes.clear()
    fleet.waits, fleet.upgrades = {"a", "c"}, {"b"}  # b's next pass is admitted
    _event(_deployment("busy", rolling=False))  # its rollout ends
    # busy's own owner gets its pass too (its child changed); of the waiters only b, which took the place
    assert fleet.passes == ["b", "busy"]
    assert list(reconciler._upgrade_waiters) == [("prod", "a"), ("prod", "c")]
    assert REGISTRY.get_sample_value("tritonscale_upgrade_waiting_fleets") == 2


def test_a_waiter_that_leaves_for_another_reason_gives_the_next_its_turn(fleet) -> None:
    """a's spec was edited meanwhile: its pass rolls it at once, not through the gate, so the place is
    still free and b, the next, takes it; c waits for the next place."""
    fleet.waits = {"a", "b", "c"}
    for name in ("a", "b", "c"):
        reconciler.reconcile_inference_service(body={"metadata": {"name": name, "namespace": "prod", "uid": name}})
    _event(_deployment("busy", rolling=True), type_=None)
    fleet.passes.clear()
    fleet.waits, fleet.upgrades = {"c"}, {"b"}
    _event(_deployment("busy", rolling=False))
    assert fleet.passes == ["a", "b", "busy"]
    assert list(reconciler._upgrade_waiters) == [("prod", "c")]


def test_no_wakeup_without_a_rollout_seen_to_end(fleet) -> None:
    fleet.waits = {"a"}
    reconciler.reconcile_inference_service(body={"metadata": {"name": "a", "namespace": "prod", "uid": "a"}})
    fleet.passes.clear()
    _event(_deployment("steady", rolling=False))  # never seen rolling: a replica change, a pod ready
    assert fleet.passes == ["steady"]


def test_a_deleted_deployment_ends_its_rollout(fleet) -> None:
    fleet.waits = {"a"}
    reconciler.reconcile_inference_service(body={"metadata": {"name": "a", "namespace": "prod", "uid": "a"}})
    _event(_deployment("busy", rolling=True), type_=None)
    fleet.passes.clear()
    fleet.waits = set()
    _event(_deployment("busy", rolling=True), type_="DELETED")  # its InferenceService deleted mid-rollout
    assert fleet.passes[0] == "a" and not reconciler._upgrade_waiters
