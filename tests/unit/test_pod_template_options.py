"""render/kubernetes_objects.py: the pod template's options from spec.runtime -- scheduling (node selector,
tolerations, affinity, spread), security context, pod labels and annotations, extra args, /dev/shm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.rendered import children, fetch, triton
from support.spec_cases import mutate
from tritonscale.api.spec import HASH_ANNOTATION, LABEL
from tritonscale.render.kubernetes_objects import SAFE_TO_EVICT, labels

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


BASE = load(REPO / "manifests" / "samples" / "python-cpu.yaml")


def test_extra_args_come_last_and_pod_options_apply() -> None:
    doc = mutate(BASE, {
        "spec.runtime.extraArgs": ["--log-verbose=1", "--model-control-mode=none"],
        "spec.runtime.nodeSelector": {"pool": "gpu"},
        "spec.runtime.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "spec.runtime.imagePullSecrets": ["ngc"],
        "spec.runtime.serviceAccountName": "triton",
        "spec.runtime.priorityClassName": "serving-high",
        "spec.runtime.env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
    })
    dep = children(doc)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    c = triton(dep)
    assert c["args"][0] == "tritonserver"
    assert c["args"][-2:] == ["--log-verbose=1", "--model-control-mode=none"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "ngc"}]
    assert pod["serviceAccountName"] == "triton"
    assert pod["priorityClassName"] == "serving-high"
    assert fetch(dep)["env"] == [{"name": "AWS_REGION", "value": "eu-west-1"}]
    assert c["env"] == [{"name": "AWS_REGION", "value": "eu-west-1"},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


def test_pod_options_absent_when_unset() -> None:
    pod = children(BASE)["Deployment"]["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "imagePullSecrets", "serviceAccountName", "affinity",
                "topologySpreadConstraints", "priorityClassName"} & set(pod)


ZONES = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
HOSTS = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"team": "search"}}, "matchLabelKeys": ["pod-template-hash"]}
ANTI = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                        "labelSelector": {"matchLabels": {LABEL: "linear"}}}}]}}


def test_affinity_and_spread_constraints_reach_the_pods() -> None:
    """A constraint without labelSelector spreads this fleet's pods (the scheduler counts only the pods a
    constraint selects, and none without one); a constraint with its own selector is kept as written."""
    doc = mutate(BASE, {"spec.runtime.affinity": ANTI, "spec.runtime.topologySpreadConstraints": [ZONES, HOSTS]})
    dep = children(doc)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["affinity"] == ANTI
    assert pod["topologySpreadConstraints"] == [{**ZONES, "labelSelector": dep["spec"]["selector"]}, HOSTS]
    assert dep["spec"]["selector"] == {"matchLabels": {LABEL: "linear"}}
    # the spec is not edited by rendering (the status and the recorded spec keep what the user wrote)
    assert "labelSelector" not in doc["spec"]["runtime"]["topologySpreadConstraints"][0]


def test_runtime_security_context_goes_over_the_default_one() -> None:
    """A namespace at the restricted Pod Security level refuses pods without runAsNonRoot, and the
    spec had no way to give it (tests/integration/test_operator_admission.py checks it on the real API
    server)."""
    doc = load(SAMPLES[0])
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    doc["spec"].setdefault("runtime", {})["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000}
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True,
                                      "runAsUser": 1000}


def test_resource_keys_other_than_quantity_maps_are_passed_on() -> None:
    """``claims`` (dynamic resource allocation) was dropped without a word, and the spec reported valid."""
    doc = load(SAMPLES[0])
    doc["spec"].setdefault("runtime", {})["resources"] = {"limits": {"memory": "2Gi"}, "claims": [{"name": "gpu"}]}
    container = children(doc)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert container["resources"]["limits"]["memory"] == "2Gi"


def test_pod_labels_and_annotations_reach_the_pods_beside_the_operators() -> None:
    """spec.runtime.podLabels / podAnnotations (cost labels, a sidecar injector's annotation) go on the pod
    template beside the operator's own, which select the pods and roll them; the selector and the Service
    are the operator's alone. The InferenceService's own labels are not copied."""
    doc = mutate(BASE, {"spec.runtime.podLabels": {"team": "search"},
                        "spec.runtime.podAnnotations": {"sidecar.istio.io/inject": "false"},
                        "metadata.labels": {"owner": "me"}})
    objs = children(doc)
    template = objs["Deployment"]["spec"]["template"]["metadata"]
    assert template["labels"] == {**labels("linear"), "team": "search"}
    assert template["annotations"]["sidecar.istio.io/inject"] == "false"
    assert HASH_ANNOTATION in template["annotations"]
    assert objs["Deployment"]["spec"]["selector"]["matchLabels"] == {LABEL: "linear"}
    assert objs["Service"]["spec"]["selector"] == {LABEL: "linear"}
    plain = children(BASE)["Deployment"]["spec"]["template"]["metadata"]
    assert plain["labels"] == labels("linear") and set(plain["annotations"]) == {HASH_ANNOTATION, SAFE_TO_EVICT}
    # auditQ 10 (session 86): cluster-autoscaler keeps a node whose pods have emptyDirs unless told they may go;
    # both hold nothing a new pod cannot make again. A spec's own value wins.
    assert plain["annotations"][SAFE_TO_EVICT] == "model-repository,dshm"
    volumes = {v["name"]: v for v in children(BASE)["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert {n for n, v in volumes.items() if "emptyDir" in v} == {"model-repository", "dshm"}
    mine = children(mutate(BASE, {"spec.runtime.podAnnotations": {SAFE_TO_EVICT: ""}}))["Deployment"]
    assert mine["spec"]["template"]["metadata"]["annotations"][SAFE_TO_EVICT] == ""


def test_the_shared_memory_size_is_the_specs() -> None:
    """auditQ 9 (session 86): /dev/shm was fixed at 1Gi; a python backend passing large tensors, or NCCL across
    GPUs, needs more."""
    def shm(doc: dict[str, Any]) -> dict[str, Any]:
        volumes = children(doc)["Deployment"]["spec"]["template"]["spec"]["volumes"]
        return next(v for v in volumes if v["name"] == "dshm")["emptyDir"]

    assert shm(BASE) == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert shm(mutate(BASE, {"spec.runtime.shmSize": "8Gi"})) == {"medium": "Memory", "sizeLimit": "8Gi"}
