"""A model change (another model, precision, image or resources) makes the autoscaler learn the new
model's speed: the batch cost and capacities measured on the old one are forgotten
(``decider.forget_model``), and again once the new template has rolled out, since old and new pods
served side by side until then. Edits that leave the pods' speed alone (batching, scaling,
scheduling) keep them."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from test_tick_invalid_edit import Made
from test_tick_scale_failed import UID

from tritonscale.api.validation import validate_body
from tritonscale.render.deployment_records import SERVING_ANNOTATION, recorded_spec, serving_digest
from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot

DOWN = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
SAMPLES_DIR = Path(__file__).resolve().parents[2] / "manifests" / "samples"
SAMPLES = [[8.0, 36.0, 990.0], [16.0, 52.0, 995.0]]


def _edited(path: tuple[str, ...], value: object) -> dict:
    body = copy.deepcopy(Made().body)
    node = body["spec"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return body


def _digest(body: dict) -> str:
    return serving_digest(validate_body(body)[0])


@pytest.mark.parametrize(("path", "value", "same"), [
    (("model", "instanceCount"), 2, False),
    (("model", "parameters"), {"cost_base_ms": "40", "cost_per_item_ms": "2"}, False),
    (("runtime", "image"), "nvcr.io/nvidia/tritonserver:24.08-py3", False),
    (("runtime", "resources"), {"requests": {"cpu": "2"}}, False),
    (("batching", "maxQueueDelayMicroseconds"), 5000, True),  # the tuner's knob: a batch costs the same
    (("scaling", "maxReplicas"), 8, True),
    (("runtime", "tolerations"), [{"key": "gpu", "operator": "Exists"}], True),
    # node affinity can choose another GPU, as nodeSelector can; pod (anti-)affinity and spreading only place pods
    (("runtime", "affinity"), {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]}]}}}, False),
    (("runtime", "affinity"), {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}, True),
    (("runtime", "topologySpreadConstraints"),
     [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}], True),
    (("runtime", "priorityClassName"), "serving-high", True),
    (("runtime", "affinity"), {}, True),  # unset: the field's arrival changed no service's digest
    (("runtime", "gpuResource"), "nvidia.com/mig-1g.10gb", False),  # another slice of a GPU
    (("runtime", "gpuResource"), "nvidia.com/gpu", True),  # the default, said
    (("runtime", "startupTimeoutSeconds"), 3600, True),  # how long the kubelet waits, not how fast it serves
    (("runtime", "fetchImage"), "registry.local/mirror/aws-cli:2.17.0", True),  # the same files, put in place
    (("runtime", "podLabels"), {"team": "search"}, False),  # a webhook may inject a sidecar for a label
    (("runtime", "env"), [{"name": "OMP_NUM_THREADS", "value": "4"}], False),
])
def test_the_digest_follows_what_can_change_a_pods_speed(path, value, same) -> None:
    assert (_digest(_edited(path, value)) == _digest(Made().body)) is same


# The samples' digests as the operators of sessions 72-74 recorded them on their Deployments. A new spec field
# must leave them as they are at its default (render.deployment_records.serving_digest): a digest that
# changes makes every service forget its learned model speed at the operator's upgrade. (Session 72's
# grpcMaxConnectionAgeSeconds changed them once, from c7620eb2d8a91c5c for python-cpu; its rollout
# replaced the pods anyway.)
# pytorch-warmup's sample itself changed in session 86 (cpu and memory requests: its pods were BestEffort),
# from 668295a320ef9aa9.
PINNED = {"python-cpu": "950dd3a83a2a6079", "onnx-image-classifier": "73c4e85d55ad4ea5",
          "pytorch-warmup": "5792e084f7fa0a52"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_new_field_at_its_default_leaves_the_digest_as_it_was(name: str) -> None:
    body = yaml.safe_load((SAMPLES_DIR / f"{name}.yaml").read_text())
    body["spec"]["runtime"].pop("topologySpreadConstraints", None)  # added to a sample with the field
    assert _digest(body) == PINNED[name]


def _state(kube: Made) -> dict:
    return kube.body["status"]["scalingState"]


def test_a_new_model_is_learned_anew_and_again_once_it_has_rolled_out() -> None:
    old = Made()
    old.refuse = False
    old.deployment["metadata"]["generation"] = 1
    old.deployment["status"] = {"observedGeneration": 1, "replicas": 0, "updatedReplicas": 0}
    tick.forget(UID)
    old.body["status"] = {"scalingState": {"batchSamples": SAMPLES, "capacityRps": 280.0, "coldStartSeconds": 90.0}}
    tick.run_tick(old, "default", "linear", DOWN, 1000.0, lambda body, *e: None)
    assert _state(old)["serving"] == _digest(old.body)  # adopted: learned on the model in force
    assert _state(old)["batchSamples"] == SAMPLES

    # The reconciler applies a slower model: the Deployment records it, its controller has not seen it yet.
    slower = _edited(("model", "parameters"), {"cost_base_ms": "40", "cost_per_item_ms": "4"})
    new = Made(slower)
    new.refuse = False
    new.body["status"] = old.body["status"]
    new.deployment["metadata"]["generation"] = 2
    new.deployment["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}
    tick.run_tick(new, "default", "linear", DOWN, 1015.0, lambda body, *e: None)
    assert _state(new)["serving"] == _digest(slower) + "~"
    assert (_state(new)["batchSamples"], _state(new)["capacityRps"]) == ([], None)
    assert _state(new)["coldStartSeconds"] == 90.0  # the traffic's and the pods' start: kept

    # Old and new pods serve side by side; what is learned meanwhile is kept until the old pods are gone.
    new.body["status"]["scalingState"]["batchSamples"] = SAMPLES
    new.deployment["status"] = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1}
    tick.forget(UID)  # an operator restart mid-rollout reads the same from status
    tick.run_tick(new, "default", "linear", DOWN, 1030.0, lambda body, *e: None)
    assert _state(new)["batchSamples"] == SAMPLES
    new.deployment["status"] = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1}
    tick.run_tick(new, "default", "linear", DOWN, 1045.0, lambda body, *e: None)  # done: the rate window runs
    assert (_state(new)["serving"], _state(new)["batchSamples"], _state(new)["rolledOutAt"]) == \
        (_digest(slower) + "~", SAMPLES, 1045.0)
    tick.run_tick(new, "default", "linear", DOWN, 1105.0, lambda body, *e: None)  # windowSeconds 60 later
    assert (_state(new)["serving"], _state(new)["batchSamples"]) == (_digest(slower), [])
    tick.forget(UID)


def test_a_spec_too_large_to_record_still_says_what_its_pods_serve() -> None:
    """A spec over SPEC_ANNOTATION_MAX_BYTES (a long env) is not recorded, and forget_model then never fired
    (found by a review): the Deployment carries the digest on its own."""
    big = _edited(("runtime", "env"), [{"name": f"V{i}", "value": "x" * 1000} for i in range(80)])
    kube = Made(big)
    assert recorded_spec(kube.deployment) is None
    assert tick._serving(kube.body, kube.deployment) == (_digest(big), False)
    older = copy.deepcopy(Made().deployment)  # written by an operator without the annotation: the record's
    del older["metadata"]["annotations"][SERVING_ANNOTATION]
    assert tick._serving(Made().body, older)[0] == _digest(Made().body)
