"""What the tick reads from the cluster and hands the decider and the tuner: the ready count, pods on
cordoned nodes, the node cordon cache's age, and status.batching's lifecycle."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_tick_scale_failed import UID, Kube

from tritonscale.scaling import batching_status as bs
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot

DOWN = Snapshot(taken_at=1000.0, ok=False, error="connection refused")  # the decider holds the count
INVALID = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}  # runtime.resources the operator refuses


class Nodes(Kube):
    """The Kube fake, with pods on nodes and nodes that can be cordoned."""

    def __init__(self, pods: list[dict[str, Any]] | None = None, cordoned: set[str] | None = None) -> None:
        super().__init__()
        self.refuse = False
        self.pods = pods or []
        self.cordoned = cordoned if cordoned is not None else set()
        self.node_reads: list[str] = []

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.pods

    def node_unschedulable(self, name: str) -> bool:
        self.node_reads.append(name)
        return name in self.cordoned


def _run(kube: Any, now: float) -> None:
    """One tick of the sample object (``kube``: a fake of the cluster client)."""
    tick.run_tick(kube, "default", "linear", DOWN, now, lambda body, *e: None)


def _replicas(kube: Nodes) -> int:
    """The Deployment's spec.replicas now."""
    dep: dict[str, Any] = kube.deployment
    return int(dep["spec"]["replicas"])


def _deployment(kube: Nodes, replicas: int, ready: int) -> None:
    dep: dict[str, Any] = kube.deployment
    dep["spec"]["replicas"] = replicas
    dep["status"] = {"replicas": replicas, "readyReplicas": ready}


def _pod(uid: str, node: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "creationTimestamp": "1970-01-01T00:15:00Z"}, "spec": {"nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "1970-01-01T00:16:00Z"}]}}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(tick, "_nodes", {})
    tick.forget(UID)
    om.forget("default", "linear")
    yield
    tick.forget(UID)
    om.forget("default", "linear")


def test_the_ready_count_is_read_from_ready_replicas_not_the_pod_count() -> None:
    """3 pods of which 1 is ready: the tick must hand the decider (and the ready gauge) 1 ready replica.
    Read from status.replicas, replicas still loading their model would count as serving, and the decider
    would neither wait for them nor see that the fleet is short."""
    kube = Nodes()
    _deployment(kube, 3, 1)
    _run(kube, 1000.0)
    assert _replicas(kube) == 3
    assert om.READY.labels("default", "linear")._value.get() == 1
    assert om.DESIRED.labels("default", "linear")._value.get() == 3


def test_pods_on_a_cordoned_node_surge_the_fleet_even_while_metrics_fail() -> None:
    """Two replicas, both on a node being drained: the tick passes the 2 draining pods to the decider,
    which asks for 2 more (DrainSurge, within maxReplicas 4) so the PodDisruptionBudget lets the drain
    through. Without them the node upgrade would wait for good at the warm floor."""
    kube = Nodes([_pod("p1", "node-a"), _pod("p2", "node-a")], cordoned={"node-a"})
    _deployment(kube, 2, 2)
    _run(kube, 1000.0)
    assert _replicas(kube) == 4
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    assert scaling["reason"] == "DrainSurge"
    # the same pods on a schedulable node: no surge
    tick.forget(UID)
    calm = Nodes([_pod("p1", "node-b"), _pod("p2", "node-b")])
    _deployment(calm, 2, 2)
    _run(calm, 1000.0)
    assert _replicas(calm) == 2


def test_a_node_cordoned_between_ticks_is_seen_once_its_cached_read_is_older_than_the_ttl() -> None:
    """The cordon cache keeps a node's read for NODE_TTL_S (5 s): a node cordoned after it was read is seen
    at the first tick after that, not when the cache's clean-up drops it 60 TTLs (300 s) later -- a drain
    would wait minutes for its surge."""
    kube = Nodes(cordoned=set())
    cordoned: Any = tick._cordoned  # the fake stands for the cluster client
    assert cordoned(kube, frozenset({"node-a"}), 1000.0) == frozenset()
    kube.cordoned.add("node-a")  # kubectl drain
    assert cordoned(kube, frozenset({"node-a"}), 1004.0) == frozenset()  # the read 4 s old still holds
    assert cordoned(kube, frozenset({"node-a"}), 1006.0) == frozenset({"node-a"})
    assert kube.node_reads == ["node-a", "node-a"]


TUNED = {"maxQueueDelayMicroseconds": 1000, "preferredBatchSizes": [8], "source": "tuner",
         "lastChangeTime": "2026-11-26T00:00:00Z", "reason": "MoreCapacity", "message": "m"}


def test_once_auto_tune_is_switched_off_status_batching_shows_the_specs_values() -> None:
    """status.batching holds tuned settings, then the user switches autoTune off: the tick writes the
    spec's values (what the pods go back to), when they came into force, and drops the tuner's memory.
    The status patch merges, so the memory goes only by an explicit null."""
    kube = Nodes()
    _deployment(kube, 1, 1)
    kube.body["status"] = {"batching": {**TUNED, "tunerState": {"lastChange": 900.0}}}  # autoTune is off
    _run(kube, 1000.0)
    live = kube.body["status"]["batching"]
    assert (live["maxQueueDelayMicroseconds"], live["preferredBatchSizes"], live["source"], live["reason"]) == \
        (2000, [4, 8, 16], "spec", "SpecValues")
    assert live["lastChangeTime"] == "1970-01-01T00:16:40Z" and live.get("tunerState") is None
    assert "in place of the tuner's (queue delay 1000 us, preferred sizes [8])" in live["message"]
    # the next tick changes nothing: the same values, the same time
    before = len(kube.status_patches)
    _run(kube, 1015.0)
    assert all("batching" not in p for p in kube.status_patches[before:])


def test_without_auto_tune_status_batching_shows_the_specs_delay_and_goes_with_batching() -> None:
    """Never tuned: the first tick writes the spec's delay (kubectl get tis -o wide's QUEUEDELAY), with no
    change time (not known); an edit of the delay gives the tick's time; batching switched off removes it."""
    kube = Nodes()
    _deployment(kube, 1, 1)
    _run(kube, 1000.0)
    live = kube.body["status"]["batching"]
    assert (live["maxQueueDelayMicroseconds"], live["source"], live.get("lastChangeTime")) == (2000, "spec", None)
    kube.body["spec"]["batching"]["maxQueueDelayMicroseconds"] = 500
    _run(kube, 1015.0)
    live = kube.body["status"]["batching"]
    assert (live["maxQueueDelayMicroseconds"], live["lastChangeTime"]) == (500, "1970-01-01T00:16:55Z")
    kube.body["spec"]["batching"]["enabled"] = False
    _run(kube, 1030.0)
    assert kube.body["status"]["batching"] is None


def test_a_tuner_failure_leaves_the_tuned_batcher_in_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuner raises (a bug; the tick logs it and scales on without it): status.batching keeps the
    settings in force and the tuner's memory. Removed, the reconciler would render the spec's values
    instead and roll every pod back to them, and the tuner would start again from nothing."""
    def broken(*_: Any, **__: Any) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(bs, "tune_tick", broken)
    kube = Nodes()
    _deployment(kube, 1, 1)
    kube.body["spec"]["batching"]["autoTune"] = {"enabled": True}
    tuned = {**TUNED, "tunerState": {"lastChange": 900.0}}
    kube.body["status"] = {"batching": copy.deepcopy(tuned)}
    _run(kube, 1000.0)
    assert kube.status_patches, "the tick wrote no status"
    assert kube.body["status"]["batching"] == tuned


def test_the_tuner_does_not_run_on_a_remembered_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the spec as edited is invalid, the fleet is scaled by the last valid one, but the tuner is not
    run on it: the reconciler applies nothing meanwhile, so a change it made would be in status and not in
    the pods."""
    calls: list[float] = []
    real = bs.tune_tick

    def spy(*args: Any, **kw: Any) -> Any:
        calls.append(args[-1])
        return real(*args, **kw)

    monkeypatch.setattr(bs, "tune_tick", spy)
    kube = Nodes()
    _deployment(kube, 1, 1)
    kube.body["spec"]["batching"]["autoTune"] = {"enabled": True}
    _run(kube, 1000.0)
    assert calls == [1000.0]  # valid: the tuner runs
    edited = copy.deepcopy(kube.body)
    edited["spec"]["runtime"]["resources"] = INVALID
    kube.body = edited
    _run(kube, 1015.0)
    assert calls == [1000.0]  # stale: not again


def test_a_spec_valid_false_for_another_reason_than_child_rejected_does_not_freeze_scaling() -> None:
    """Only ChildRejected (the API server refused this generation's children) makes the tick scale by the
    spec the fleet was made from. SpecValid=False for a name conflict is about another object's children:
    the spec as edited still scales the fleet -- here from 0 up to its warm floor of 1."""
    kube = Nodes()
    kube.body["status"] = {"conditions": [{"type": "SpecValid", "status": "False", "reason": "NameConflict",
                                           "observedGeneration": 1, "message": "a Deployment linear exists",
                                           "lastTransitionTime": "1970-01-01T00:00:00Z"}]}
    _run(kube, 1000.0)
    assert _replicas(kube) == 1
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    assert "scaling by the last valid one" not in scaling["message"]


class FailingStatus(Nodes):
    """A status write that fails once (the API server times out), then succeeds."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = False

    def patch_inference_service_status(self, namespace: str, name: str, patch: dict[str, Any], uid: str,
                                       current: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            raise TimeoutError("status write timed out")
        super().patch_inference_service_status(namespace, name, patch, uid, current)


def test_a_failed_status_write_loses_nothing_of_the_decider_memory() -> None:
    """The tick keeps the decider's memory in process as well as in status: a status write that fails leaves
    status one tick behind, and the next tick must go on from the memory, not from status. Here the count of
    failed metric reads goes 1, 2, 3 across a failed write (read from status it would restart at 1, and
    fallbackReplicas after failureThreshold failures would come a tick late)."""
    kube = FailingStatus()
    _deployment(kube, 1, 1)
    _run(kube, 1000.0)
    assert kube.body["status"]["scalingState"]["failures"] == 1
    kube.fail_next = True
    with pytest.raises(TimeoutError):
        _run(kube, 1015.0)
    assert kube.body["status"]["scalingState"]["failures"] == 1  # status is a tick behind
    _run(kube, 1030.0)
    assert kube.body["status"]["scalingState"]["failures"] == 3
