"""A reconcile pass acts on the InferenceService as the API server has it when the pass holds the
object's lock, not on the body it was handed. A pass for a child's event read its owner, then waited
for the lock while Kopf's pass of an edit made meanwhile applied the newer generation; on the older
body it put the Deployment's template and the PodDisruptionBudget back to the spec before the edit and
wrote that generation as observedGeneration, and the next pass put them forward again. A kubectl edit
made in between was reverted as "updated to match the spec", not said as drift (the DriftReverted
check of test_operator_core failed so in clean-clone CI runs of sessions 61 and 83).

The passes here run in the test's process (``reconcile`` with a real Kube over HTTP), against the
real API server, so the order of the two bodies is the test's, not a race's."""

from __future__ import annotations

from typing import Any

from test_operator_core import Cluster

from support.cluster import sample
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
