"""render/triton_containers.py, in the pod template render/kubernetes_objects.py builds: the Deployment's
triton container -- its GPU limit and resources, the flags tritonserver starts with, its environment, how a
replica drains, and the startup probe."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.rendered import children, triton
from support.spec_cases import mutate

REPO = Path(__file__).resolve().parents[2]


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


BASE = load(REPO / "manifests" / "samples" / "python-cpu.yaml")


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
