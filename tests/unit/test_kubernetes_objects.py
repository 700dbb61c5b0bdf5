"""render/kubernetes_objects.py: the four children of an InferenceService, built purely from the spec."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.rendered import UID, children, owner_from, triton
from support.spec_cases import mutate
from tritonscale.api.spec import (
    HASH_ANNOTATION,
    LABEL,
    SPEC_ANNOTATION,
    SPEC_ANNOTATION_MAX_BYTES,
    InferenceServiceSpec,
)
from tritonscale.render.kubernetes_objects import (
    FETCH_IMAGES,
    SAFE_TO_EVICT,
    build_children,
    config_hash,
    labels,
    max_surge,
    mounted_configmap,
    recorded_spec,
)
from tritonscale.render.triton_config import render_config_pbtxt

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def fetch(dep: dict[str, Any]) -> dict[str, Any]:
    inits = dep["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["model-fetch"]
    return inits[0]


SAMPLE_IDS = [s.stem for s in SAMPLES]
BASE = load(REPO / "manifests" / "samples" / "python-cpu.yaml")


@pytest.fixture(params=SAMPLES, ids=SAMPLE_IDS)
def sample(request: pytest.FixtureRequest) -> tuple[dict[str, Any], InferenceServiceSpec, dict[str, dict[str, Any]]]:
    doc = load(request.param)
    return doc, InferenceServiceSpec.model_validate(doc["spec"]), children(doc)


# --- every child --------------------------------------------------------------------------------------

def test_children_metadata(sample: Any) -> None:
    doc, _, objs = sample
    name, ns = doc["metadata"]["name"], doc["metadata"]["namespace"]
    config = objs["ConfigMap"]["data"]["config.pbtxt"]
    expected_names = {"ConfigMap": f"{name}-config-{config_hash(config)}", "Deployment": name, "Service": name,
                      "PodDisruptionBudget": name}
    for kind, obj in objs.items():
        meta = obj["metadata"]
        assert meta["name"] == expected_names[kind]
        assert meta["namespace"] == ns
        assert meta["labels"][LABEL] == name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "tritonscale"
        assert meta["ownerReferences"] == [{
            "apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService", "name": name, "uid": UID,
            "controller": True, "blockOwnerDeletion": True,
        }]
        assert (obj["apiVersion"], kind) in {("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service"),
                                             ("policy/v1", "PodDisruptionBudget")}


def test_children_are_pure(sample: Any) -> None:
    doc, spec, objs = sample
    owner = owner_from(doc)
    before = copy.deepcopy(owner)
    again = build_children(spec, owner)
    assert owner == before, "builders must not mutate their inputs"
    assert {o["kind"]: o for o in again} == objs
    # Independent objects: mutating one result must not leak into the next build.
    again[1]["spec"]["template"]["spec"]["containers"][0]["args"].append("--x")
    assert build_children(spec, owner)[1] == objs["Deployment"]


def test_configmap_holds_the_rendered_config(sample: Any) -> None:
    doc, spec, objs = sample
    assert objs["ConfigMap"]["data"] == {"config.pbtxt": render_config_pbtxt(spec, doc["metadata"]["name"])}


# --- Deployment ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("replicas", "surge"), [(0, 1), (1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3), (20, 5)])
def test_max_surge_rounds_a_quarter_up_as_kubernetes_does(replicas: int, surge: int) -> None:
    assert max_surge(replicas) == surge


def test_the_deployment_records_the_spec_it_was_made_from(sample: Any) -> None:
    doc, _, objs = sample
    dep = objs["Deployment"]
    assert recorded_spec(dep) == doc["spec"]
    assert SPEC_ANNOTATION not in dep["spec"]["template"]["metadata"]["annotations"], \
        "on the Deployment, not its pods: a scaling edit must not roll them"


def test_the_record_keeps_no_prometheus_credentials_and_takes_them_back_from_the_spec() -> None:
    """Whoever may read Deployments (the built-in view role) read the password in the record, where
    conditions, events and logs show ``***``. After a restart the record stands in for a refused
    spec, so the credentials come from the object's spec when its URL is the recorded one."""
    doc = load(SAMPLES[0])
    doc["spec"].setdefault("scaling", {})["prometheus"] = {"url": "http://admin:s3cr3t@prom.monitoring:9090/p"}
    dep = children(doc)["Deployment"]
    assert "s3cr3t" not in dep["metadata"]["annotations"][SPEC_ANNOTATION]
    assert recorded_spec(dep)["scaling"]["prometheus"]["url"] == "http://***@prom.monitoring:9090/p"
    assert recorded_spec(dep, doc["spec"]) == doc["spec"]
    moved = {**doc["spec"], "scaling": {"prometheus": {"url": "http://admin:s3cr3t@elsewhere:9090/p"}}}
    assert recorded_spec(dep, moved)["scaling"]["prometheus"]["url"] == "http://***@prom.monitoring:9090/p"
    assert doc["spec"]["scaling"]["prometheus"]["url"] == "http://admin:s3cr3t@prom.monitoring:9090/p"  # not changed


def test_a_spec_too_large_to_record_is_not_recorded() -> None:
    doc = load(SAMPLES[0])
    doc["spec"].setdefault("runtime", {})["env"] = [{"name": f"V{i}", "value": "x" * 100}
                                                    for i in range(SPEC_ANNOTATION_MAX_BYTES // 100)]
    dep = children(doc)["Deployment"]
    assert dep["metadata"]["annotations"][SPEC_ANNOTATION] == ""  # emptied: no older record outlives it
    assert recorded_spec(dep) is None


def test_deployment_shape(sample: Any) -> None:
    doc, spec, objs = sample
    dep = objs["Deployment"]
    name = doc["metadata"]["name"]
    model = spec.model.name or name
    s = doc["spec"]["scaling"]
    assert dep["spec"]["replicas"] == s["minReplicas"] + s.get("warmBuffer", 0)
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"  # the Deployment default, rounded up
    assert dep["spec"]["selector"] == {"matchLabels": {LABEL: name}}
    template = dep["spec"]["template"]
    assert template["metadata"]["labels"][LABEL] == name, "the selector must match the pod labels"

    c = triton(dep)
    assert c["image"] == spec.runtime.image
    assert "--model-repository=/models" in c["args"]
    assert "--metrics-config=summary_latencies=true" in c["args"]
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("http", 8000), ("grpc", 8001),
                                                                     ("metrics", 8002)]
    ready = {"path": f"/v2/models/{model}/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"] == ready
    assert c["readinessProbe"]["httpGet"] == ready
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, "large models need minutes to load"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert {"name": "model-repository", "mountPath": "/models"} in c["volumeMounts"]

    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["model-config"]["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"]
    assert mounted_configmap(dep) == objs["ConfigMap"]["metadata"]["name"]
    assert objs["ConfigMap"]["immutable"] is True
    assert volumes["model-repository"] == {"name": "model-repository", "emptyDir": {}}
    assert template["metadata"]["annotations"][HASH_ANNOTATION] == config_hash(
        objs["ConfigMap"]["data"]["config.pbtxt"])
    # no prometheus.io/scrape: it opted the pods into an annotation-based job beside the labelled one the
    # queries need, and each pod then counted twice in every rate (found by an exploratory review)
    assert not [k for k in template["metadata"]["annotations"] if k.startswith("prometheus.io/")]


def test_gpu_limit_equals_runtime_gpus(sample: Any) -> None:
    doc, spec, objs = sample
    limits = triton(objs["Deployment"]).get("resources", {}).get("limits", {})
    gpus = doc["spec"].get("runtime", {}).get("gpus", 1)
    if gpus == 0:
        assert "nvidia.com/gpu" not in limits
    else:
        assert int(limits["nvidia.com/gpu"]) == gpus == spec.runtime.gpus


@pytest.mark.parametrize(("gpus", "limit"), [(0, None), (1, 1), (4, 4)])
def test_gpu_limit_table(gpus: int, limit: int | None) -> None:
    dep = children(mutate(BASE, {"spec.runtime.gpus": gpus}))["Deployment"]
    limits = triton(dep)["resources"].get("limits", {})
    assert (int(limits["nvidia.com/gpu"]) if "nvidia.com/gpu" in limits else None) == limit
    assert ("--allow-gpu-metrics=false" in triton(dep)["args"]) is (gpus == 0)


@pytest.mark.parametrize(("resources", "gpus", "expected"), [
    ({}, 1, {"limits": {"nvidia.com/gpu": 1}}),
    ({}, 0, {}),
    ({"requests": {"cpu": "2"}}, 0, {"requests": {"cpu": "2"}}),
    ({"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}}, 2,
     {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi", "nvidia.com/gpu": 2}}),
    # runtime.gpus is the single source of the GPU count: it overrides a hand-written limit
    ({"limits": {"nvidia.com/gpu": 8, "cpu": "4"}}, 1, {"limits": {"nvidia.com/gpu": 1, "cpu": "4"}}),
])
def test_resources_merge_gpu_limit_keeping_user_values(resources: dict[str, Any], gpus: int,
                                                       expected: dict[str, Any]) -> None:
    doc = mutate(BASE, {"spec.runtime.gpus": gpus, "spec.runtime.resources": resources})
    before = copy.deepcopy(resources)
    got = triton(children(doc)["Deployment"])["resources"]
    normalise = lambda r: {k: {q: str(v) for q, v in d.items()} for k, d in r.items()}  # noqa: E731
    assert normalise(got) == normalise(expected)
    assert resources == before


@pytest.mark.parametrize(("warm_buffer", "min_replicas", "max_replicas", "replicas"), [
    (0, 1, 4, 1), (1, 1, 4, 2), (2, 2, 4, 4), (3, 1, 10, 4),
])
def test_initial_replicas_are_the_warm_floor(warm_buffer: int, min_replicas: int, max_replicas: int,
                                             replicas: int) -> None:
    doc = mutate(BASE, {"spec.scaling.warmBuffer": warm_buffer, "spec.scaling.minReplicas": min_replicas,
                              "spec.scaling.maxReplicas": max_replicas})
    objs = children(doc)
    assert objs["Deployment"]["spec"]["replicas"] == replicas
    assert objs["PodDisruptionBudget"]["spec"]["minAvailable"] == min_replicas


@pytest.mark.parametrize(("uri", "image", "script_has", "claim"), [
    ("pvc://models/linear", FETCH_IMAGES["pvc"], "/mnt/pvc/linear", "models"),
    ("pvc://model-store/a/b/c", FETCH_IMAGES["pvc"], "/mnt/pvc/a/b/c", "model-store"),
    ("s3://bucket/path/to/model", "amazon/aws-cli:2.17.0", "aws s3 cp --recursive", None),
    ("gs://bucket/m", FETCH_IMAGES["gs"], "gcloud storage cp --recursive", None),
])
def test_model_fetch_init_container(uri: str, image: str, script_has: str, claim: str | None) -> None:
    dep = children(mutate(BASE, {"spec.model.storageUri": uri}))["Deployment"]
    init = fetch(dep)
    script = init["command"][-1]
    assert init["command"][:2] == ["/bin/sh", "-c"]
    assert init["image"] == image
    assert script_has in script
    if uri.startswith("s3://"):
        assert uri in script
    assert "mkdir -p /models/linear" in script
    assert "cp /config/config.pbtxt /models/linear/config.pbtxt" in script
    assert script.startswith("set -eu\n")
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert mounts["model-repository"] == "/models" and mounts["model-config"] == "/config"
    pvcs = [v for v in dep["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    serving_mounts = {m["name"]: m for m in triton(dep)["volumeMounts"]}
    if claim is None:
        assert pvcs == []
        assert "model-source" not in mounts and "model-source" not in serving_mounts
    else:
        assert [v["persistentVolumeClaim"] for v in pvcs] == [{"claimName": claim, "readOnly": True}]
        assert mounts["model-source"] == "/mnt/pvc"
        # The init container symlinks the versions into /models: the targets live under /mnt/pvc,
        # so tritonserver must see the claim at the same path, read-only.
        assert serving_mounts["model-source"]["mountPath"] == "/mnt/pvc"
        assert serving_mounts["model-source"]["readOnly"] is True
        assert "ln -s" in script


@pytest.mark.parametrize("uri", ["pvc://models/linear", "s3://bucket/m", "gs://bucket/m"])
def test_the_fetch_image_may_be_a_mirror(uri: str) -> None:
    """An air-gapped or allow-listed registry: runtime.fetchImage replaces the public image, the script stays."""
    mirror = "registry.corp.example/mirror/fetch@sha256:" + "a" * 64
    dep = children(mutate(BASE, {"spec.model.storageUri": uri, "spec.runtime.fetchImage": mirror}))["Deployment"]
    default = children(mutate(BASE, {"spec.model.storageUri": uri}))["Deployment"]
    assert fetch(dep)["image"] == mirror
    assert fetch(dep)["command"] == fetch(default)["command"]


@pytest.mark.parametrize(("resources", "gpus", "expected"), [
    ({}, 1, None),  # nothing set: nothing for the fetch either (not the GPU)
    ({"requests": {"cpu": "500m", "memory": "512Mi"}}, 0, {"requests": {"cpu": "500m", "memory": "512Mi"}}),
    ({"requests": {"cpu": 2, "memory": "8Gi", "ephemeral-storage": "20Gi"},
      "limits": {"memory": "16Gi", "nvidia.com/gpu": 1, "example.com/fpga": 1, "hugepages-2Mi": "1Gi"}}, 1,
     {"requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "20Gi"},
      "limits": {"memory": "16Gi", "hugepages-2Mi": "1Gi"}}),
    ({"limits": {"nvidia.com/gpu": 1}}, 1, None),  # a GPU alone: the download needs none
    ({"claims": [{"name": "gpu"}]}, 1, None),
])
def test_the_fetch_takes_the_triton_container_s_cpu_and_memory(resources: dict[str, Any], gpus: int,
                                                               expected: dict[str, Any] | None) -> None:
    """A namespace's ResourceQuota on requests.cpu refused every pod: "must specify requests.cpu for:
    model-fetch", and no spec field reached that container (an audit, session 80). Its resources are the
    triton container's cpu, memory and storage, which adds nothing to what the pod is scheduled with."""
    dep = children(mutate(BASE, {"spec.runtime.gpus": gpus, "spec.runtime.resources": resources}))["Deployment"]
    assert fetch(dep).get("resources") == expected
    if expected:
        for kind, block in expected.items():
            assert triton(dep)["resources"][kind].items() >= block.items()


def test_fetch_script_quotes_the_uri() -> None:
    dep = children(mutate(BASE, {"spec.model.storageUri": "s3://bucket/a;rm-rf"}))["Deployment"]
    assert "'s3://bucket/a;rm-rf'" in fetch(dep)["command"][-1]


@pytest.mark.parametrize(("changes", "config_changes"), [
    ({"spec.batching.maxQueueDelayMicroseconds": 9999}, True),
    ({"spec.batching.preferredBatchSizes": [16]}, True),
    ({"spec.batching": None}, True),
    ({"spec.model.instanceCount": 2}, True),
    ({"spec.model.parameters.cost_base_ms": "30"}, True),
    ({"spec.model.responseCache": True}, True),
    ({"spec.runtime.gpus": 1}, True),  # KIND_CPU -> KIND_GPU
    ({"spec.scaling.maxReplicas": 9}, False),
    ({"spec.scaling.minReplicas": 2}, False),
    ({"spec.scaling.targetP95Milliseconds": 99}, True),  # the default queue timeout is 2x the target
    ({"spec.runtime.image": "example/tritonserver:custom"}, False),
    ({"spec.runtime.resources": {"requests": {"cpu": "1"}}}, False),
    ({"spec.model.storageUri": "s3://bucket/linear"}, False),
])
def test_config_hash_changes_iff_config_changes(changes: dict[str, Any], config_changes: bool) -> None:
    a = children(BASE)
    b_doc = mutate(BASE, {k: v for k, v in changes.items() if v is not None})
    for k, v in changes.items():
        if v is None:
            *parents, leaf = k.split(".")
            node = b_doc
            for p in parents:
                node = node[p]
            node.pop(leaf)
    b = children(b_doc)
    cfg_a, cfg_b = (o["ConfigMap"]["data"]["config.pbtxt"] for o in (a, b))
    hash_a, hash_b = (o["Deployment"]["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION] for o in (a, b))
    assert (cfg_a != cfg_b) is config_changes
    assert (hash_a != hash_b) is config_changes
    assert hash_b == config_hash(cfg_b)


def test_config_hash_is_short_hex_and_stable() -> None:
    h = config_hash("name: \"x\"\n")
    assert len(h) == 16 and int(h, 16) >= 0
    assert h == config_hash("name: \"x\"\n") != config_hash("name: \"y\"\n")


@pytest.mark.parametrize(("cache", "cache_bytes", "flag"), [
    (False, None, None),
    (True, None, f"--cache-config=local,size={256 * 1024 * 1024}"),
    (True, 2 * 1024 * 1024, f"--cache-config=local,size={2 * 1024 * 1024}"),
])
def test_response_cache_flag(cache: bool, cache_bytes: int | None, flag: str | None) -> None:
    changes: dict[str, Any] = {"spec.model.responseCache": cache}
    if cache_bytes:
        changes["spec.runtime.responseCacheBytes"] = cache_bytes
    args = triton(children(mutate(BASE, changes))["Deployment"])["args"]
    cache_args = [a for a in args if a.startswith("--cache-config")]
    assert cache_args == ([flag] if flag else [])


@pytest.mark.parametrize(("changes", "flag"), [
    ({}, "--grpc-max-connection-age=10000"),  # the default: 10 s, in Triton's milliseconds
    ({"spec.runtime.grpcMaxConnectionAgeSeconds": 5}, "--grpc-max-connection-age=5000"),
    ({"spec.runtime.grpcMaxConnectionAgeSeconds": 0}, None),  # 0: connections stay open
    # NGC tags: the flag came with 24.01 (server v2.42.0); 23.12's tritonserver would refuse it and not start
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver:23.12-py3"}, None),
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver:22.04-py3"}, None),
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver:24.01-py3"}, "--grpc-max-connection-age=10000"),
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"}, "--grpc-max-connection-age=10000"),
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver:24.05"}, "--grpc-max-connection-age=10000"),
    # an image the operator cannot date (a mirror, a custom build, a digest) is taken as recent
    ({"spec.runtime.image": "registry.local/triton:23.12-py3"}, "--grpc-max-connection-age=10000"),
    ({"spec.runtime.image": "nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64}, "--grpc-max-connection-age=10000"),
])
def test_grpc_max_connection_age_flag(changes: dict[str, Any], flag: str | None) -> None:
    args = triton(children(mutate(BASE, changes))["Deployment"])["args"]
    assert [a for a in args if a.startswith("--grpc-max-connection-age")] == ([flag] if flag else [])


def test_extra_args_override_the_connection_age() -> None:
    """extraArgs come after the operator's flags, and tritonserver takes the last of a repeated flag."""
    args = triton(children(mutate(BASE, {"spec.runtime.extraArgs": ["--grpc-max-connection-age=600000"]}))[
        "Deployment"])["args"]
    ages = [a for a in args if a.startswith("--grpc-max-connection-age")]
    assert ages == ["--grpc-max-connection-age=10000", "--grpc-max-connection-age=600000"]
    assert args[-1] == "--grpc-max-connection-age=600000"


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


def test_a_replica_of_no_gpu_sees_none_unless_env_says_otherwise() -> None:
    """auditQ 11 (session 86): NGC images set NVIDIA_VISIBLE_DEVICES=all, so under a node's default NVIDIA
    runtime a gpus-0 pod saw every GPU of the node."""
    assert triton(children(BASE)["Deployment"])["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    mine = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert triton(children(mutate(BASE, {"spec.runtime.env": mine}))["Deployment"])["env"] == mine
    assert triton(children(mutate(BASE, {"spec.runtime.gpus": 1}))["Deployment"])["env"] == []


@pytest.mark.parametrize(("changes", "wait", "grace", "exit_after"), [
    ({}, 16, 51, 30),  # the default age, 10 s: 5 + 11 s of wait, Triton's own 30 s, 5 s before the kill
    ({"spec.runtime.grpcMaxConnectionAgeSeconds": 0}, 5, 40, 30),
    ({"spec.runtime.grpcMaxConnectionAgeSeconds": 3600}, 65, 100, 30),  # the wait stops at 60 s of age
    ({"spec.runtime.terminationGracePeriodSeconds": 300}, 16, 300, 279),  # long requests
    ({"spec.runtime.terminationGracePeriodSeconds": 22}, 16, 22, 1),  # the least the spec's rule allows
])
def test_a_replica_serves_on_while_clients_move_away_then_drains(changes, wait, grace, exit_after) -> None:
    """auditQ 1-2 (session 86): with no preStop, tritonserver refused new requests at SIGTERM while the
    endpoints still sent it some (HTTP disconnected, gRPC NOT_FOUND on every call of a pinned connection),
    and the grace of 30 s equalled Triton's own exit timeout: a 45 s request was cut at 31 s."""
    dep = children(mutate(BASE, changes))["Deployment"]
    c = triton(dep)
    assert c["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", str(wait)]}}}
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    assert f"--exit-timeout-secs={exit_after}" in c["args"]
    assert wait + exit_after + 5 <= grace  # Triton is done before the kubelet's SIGKILL


def test_a_disruption_budget_lets_a_replica_that_is_not_ready_go() -> None:
    """auditQ 3 (session 86): a drain of the node whose replica is broken (not ready) was refused with 429
    while the fleet was below minAvailable."""
    assert children(BASE)["PodDisruptionBudget"]["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_gpus_count_the_gpu_resource_named() -> None:
    """A MIG profile under the device plugin's mixed strategy: its limit, not nvidia.com/gpu, and Triton runs
    the model on the GPU it sees (KIND_GPU)."""
    doc = mutate(BASE, {"spec.runtime.gpus": 2, "spec.runtime.gpuResource": "nvidia.com/mig-1g.10gb"})
    made = children(doc)
    limits = triton(made["Deployment"])["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "2" and "nvidia.com/gpu" not in limits
    assert "KIND_GPU" in made["ConfigMap"]["data"]["config.pbtxt"]
    assert triton(children(mutate(BASE, {"spec.runtime.gpus": 1}))["Deployment"])["resources"]["limits"][
        "nvidia.com/gpu"] == "1"


@pytest.mark.parametrize(("timeout", "checks"), [(None, 120), (1800, 360), (5, 1), (7, 2)])
def test_the_startup_probe_allows_the_startup_timeout(timeout, checks) -> None:
    """A model whose load takes longer than the default 10 min is restarted by the kubelet unless the budget is
    raised; a budget between two checks rounds up (never fewer seconds than asked)."""
    doc = BASE if timeout is None else mutate(BASE, {"spec.runtime.startupTimeoutSeconds": timeout})
    dep = children(doc)["Deployment"]
    probe = triton(dep)["startupProbe"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (5, checks)
    # the rollout is not called stuck before its pods could be pulled, fetch the model (600 s) and load it
    assert dep["spec"]["progressDeadlineSeconds"] == (timeout or 600) + 600


def test_a_progress_deadline_given_is_the_deployments() -> None:
    """auditQ 4 (session 86): a large image or model may take longer to pull and download than the 600 s the
    deadline used to leave, and the rollout read RolloutStuck (the tuner put its settings back)."""
    dep = children(mutate(BASE, {"spec.runtime.progressDeadlineSeconds": 7200}))["Deployment"]
    assert dep["spec"]["progressDeadlineSeconds"] == 7200


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


# --- Service and PDB ----------------------------------------------------------------------------------

def test_service(sample: Any) -> None:
    doc, _, objs = sample
    svc = objs["Service"]["spec"]
    assert svc["selector"] == {LABEL: doc["metadata"]["name"]}
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["ports"]] == [
        ("http", 8000, "http"), ("grpc", 8001, "grpc"), ("metrics", 8002, "metrics")]
    container_ports = {p["name"] for p in triton(objs["Deployment"])["ports"]}
    assert {p["targetPort"] for p in svc["ports"]} <= container_ports


def test_pdb(sample: Any) -> None:
    doc, spec, objs = sample
    pdb = objs["PodDisruptionBudget"]["spec"]
    assert pdb["minAvailable"] == spec.scaling.min_replicas == doc["spec"]["scaling"]["minReplicas"]
    assert pdb["selector"] == {"matchLabels": {LABEL: doc["metadata"]["name"]}}


def test_runtime_security_context_goes_over_the_default_one() -> None:
    """A namespace at the restricted Pod Security level refuses pods without runAsNonRoot, and the
    spec had no way to give it (tests/integration/test_operator_core.py checks it on the real API
    server)."""
    doc = load(SAMPLES[0])
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    doc["spec"].setdefault("runtime", {})["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000}
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True,
                                      "runAsUser": 1000}


def test_a_claim_name_with_dots_is_a_claim_name() -> None:
    """PersistentVolumeClaim names are DNS-1123 subdomains: pvc://models.v2/resnet was refused."""
    doc = load(SAMPLES[0])
    doc["spec"]["model"]["storageUri"] = "pvc://models.v2/linear"
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    (source,) = [v for v in pod["volumes"] if v["name"] == "model-source"]
    assert source["persistentVolumeClaim"]["claimName"] == "models.v2"


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
