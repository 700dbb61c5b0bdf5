"""render/triton_containers.py: the model-fetch init container that puts the model into /models (from a
PersistentVolumeClaim, S3 or GCS) -- its image, script, mounts and resources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from support.rendered import children, fetch, triton
from support.spec_cases import mutate
from tritonscale.render.triton_containers import FETCH_IMAGES

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


BASE = load(REPO / "manifests" / "samples" / "python-cpu.yaml")


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


def test_a_claim_name_with_dots_is_a_claim_name() -> None:
    """PersistentVolumeClaim names are DNS-1123 subdomains: pvc://models.v2/resnet was refused."""
    doc = load(SAMPLES[0])
    doc["spec"]["model"]["storageUri"] = "pvc://models.v2/linear"
    pod = children(doc)["Deployment"]["spec"]["template"]["spec"]
    (source,) = [v for v in pod["volumes"] if v["name"] == "model-source"]
    assert source["persistentVolumeClaim"]["claimName"] == "models.v2"
