"""A reconcile pass acts on the InferenceService as the API server has it when the pass holds the
object's lock, not on the body it was handed. A pass for a child's event read its owner, then waited
for the lock while Kopf's pass of an edit made meanwhile applied the newer generation; on the older
body it put the Deployment's template and the PodDisruptionBudget back to the spec before the edit and
wrote that generation as observedGeneration, and the next pass put them forward again. A kubectl edit
made in between was reverted as "updated to match the spec", not said as drift (the DriftReverted
check of test_operator_core, now test_operator_lifecycle, failed so in clean-clone CI runs of sessions 61 and 83).

Its status writes are made only while the object of the name is the one the pass read (its uid): one
deleted and created again under a pass used to take the old one's status.

The passes here run in the test's process (``reconcile`` with a real Kube over HTTP), against the
real API server, so the order of the two bodies is the test's, not a race's."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiException

from support.cluster import sample, wait_for
from support.operator_cluster import Cluster
from tritonscale.kube.client import Kube
from tritonscale.reconcile.inference_service import reconcile


def test_a_pass_handed_an_older_body_applies_the_spec_in_force(api_client, namespace):
    k = Cluster(api_client, namespace)
    kube = Kube(api_client)
    said: list[tuple[str, str, str]] = []

    def event(type_: str, reason: str, message: str) -> None:
        said.append((type_, reason, message))

    k.create(sample(namespace))
    older = k.get("linear")  # the body of an event from before the edit
    reconcile(kube, older, event)
    k.patch("linear", {"spec": {"scaling": {"minReplicas": 2}, "batching": {"maxQueueDelayMicroseconds": 500}}})
    newer = k.get("linear")
    reconcile(kube, newer, event)
    applied: dict[str, Any] = k.children("linear")
    assert applied["PodDisruptionBudget"]["spec"]["minAvailable"] == 2
    assert k.get("linear")["status"]["observedGeneration"] == newer["metadata"]["generation"]

    said.clear()
    outcome = reconcile(kube, older, event)
    now = k.children("linear")
    assert (outcome.created, outcome.patched, said) == ([], [], []), (outcome, said)
    assert now["PodDisruptionBudget"]["spec"]["minAvailable"] == 2
    assert now["Deployment"]["spec"]["template"] == applied["Deployment"]["spec"]["template"]
    assert "max_queue_delay_microseconds: 500" in now["ConfigMap"]["data"]["config.pbtxt"]
    assert k.get("linear")["status"]["observedGeneration"] == newer["metadata"]["generation"]


class RecreatedBeforeTheStatusWrite(Kube):
    """The API server's view changes under a pass: just before the pass's status write, the object is
    deleted and created again (``kubectl replace --force``, a GitOps tool's re-create)."""

    def __init__(self, api_client: Any, cluster: Cluster) -> None:
        super().__init__(api_client)
        self.cluster, self.recreated = cluster, None

    def patch_inference_service_status(self, namespace: str, name: str, status: dict[str, Any], uid: str,
                                       current: Any) -> None:
        if self.recreated is None:
            self.cluster.delete(name)
            self.recreated = wait_for(lambda: _create_again(self.cluster), 10, what="the object created again")
        super().patch_inference_service_status(namespace, name, status, uid=uid, current=current)


def _create_again(k: Cluster) -> dict[str, Any] | None:
    try:
        return k.create(sample(k.ns))
    except ApiException as exc:
        if exc.status == 409:  # the old one not gone yet
            return None
        raise


def test_a_status_write_never_lands_on_another_object_of_the_name(api_client, namespace):
    """Session 83's audit: status writes went by name, so one made for an object deleted and created again
    meanwhile landed on the new object: its desiredReplicas, observedGeneration and conditions (and in a
    tick, the old fleet's autoscaler memory) -- and its Deployment was then made at the old fleet's size."""
    k = Cluster(api_client, namespace)
    k.create(sample(namespace))
    kube = RecreatedBeforeTheStatusWrite(api_client, k)
    with pytest.raises(ApiException) as refused:
        reconcile(kube, k.get("linear"), lambda *_: None)
    assert refused.value.status == 404 and "another of its name" in str(refused.value.reason)
    assert kube.recreated is not None and k.get("linear")["metadata"]["uid"] == kube.recreated["metadata"]["uid"]
    assert not k.get("linear").get("status"), k.get("linear").get("status")

    # Of the object's own uid, the write is made, as the merge patch of the fields would make it.
    plain = Kube(api_client)
    uid = kube.recreated["metadata"]["uid"]
    plain.patch_inference_service_status(namespace, "linear", {"desiredReplicas": 3, "scalingState": {"a": {"b": 1}}},
                                         uid=uid, current=None)
    now = k.get("linear")["status"]
    plain.patch_inference_service_status(namespace, "linear",
                                         {"desiredReplicas": None, "scalingState": {"a": {"c": 2}}},
                                         uid=uid, current=now)
    assert k.get("linear")["status"] == {"scalingState": {"a": {"b": 1, "c": 2}}}
