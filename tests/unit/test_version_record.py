"""The operator's version names its rendering: an upgrade's rollouts go through the gate
(``upgrade_rollouts``, --max-upgrade-rollouts) only when the Deployment was rendered by another
version. A change of the pod template under the same version would roll every fleet it touches at
once on an upgrade, as a spec edit does. So each sample's pod template is recorded here with the
version that renders it: a change fails this test until the version is raised and the new digests
recorded (session 80 changed the model-fetch container's resources under 0.2.0, and raised it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from support.rendered import children
from tritonscale import __version__

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"

# version -> sample -> sha256 of its pod template (the version itself masked)
RENDERINGS: dict[str, dict[str, str]] = {
    "0.3.0": {
        "onnx-image-classifier": "b3b66cf00bff037032aae54e4a480332bd4f162a7bfecde65f8bb774ff718c22",
        "python-cpu": "cbc28685b4efc88652d223110cf51dd251a863a1fbc8db4ba08e46772b5db70f",
        "pytorch-warmup": "aa70ec8932f33230da4820a9eb2bf4767fec2f44a82aa3f4b26e7910c104baa6",
    },
    "0.4.0": {  # session 86: a preStop wait, the grace and Triton's exit timeout, safe-to-evict-local-volumes,
        # NVIDIA_VISIBLE_DEVICES=void for gpus 0, and pytorch-warmup's sample got cpu and memory requests
        "onnx-image-classifier": "b7ba772a516a6e3bd95db7c5690689069752b3079ba737e9fb0af0da0f3076a3",
        "python-cpu": "660b7b87fdbd2ae155ddb98eda68eb3c39ffec8e47406e71e7030960c293c864",
        "pytorch-warmup": "7e9122e3e2bc912684bb11488d5e51a3a60d9677acbade4f30dff14816611614",
    },
    "0.5.0": {  # session 104: the CRD's descriptions only; the pod templates are 0.4.0's
        "onnx-image-classifier": "b7ba772a516a6e3bd95db7c5690689069752b3079ba737e9fb0af0da0f3076a3",
        "python-cpu": "660b7b87fdbd2ae155ddb98eda68eb3c39ffec8e47406e71e7030960c293c864",
        "pytorch-warmup": "7e9122e3e2bc912684bb11488d5e51a3a60d9677acbade4f30dff14816611614",
    },
}

# version -> sha256 of the CRD it ships (crds/). The chart installs CRDs only at install: an upgrade
# applies the new one by hand (README, "Upgrade the CRD yourself"), and a user knows to only when the version says the
# CRD changed. Under 0.3.0 the CRD changed and the version did not (session 85's upgrade audit, D3).
CRDS: dict[str, str] = {
    "0.4.0": "dfefe18b5c706ba39fda4a1188e3131b08fb0104525e44a718ed64ec40ffcd38",
    # session 104: descriptions brought up to the code (a set scaleDown.stabilizationSeconds turns the burst
    # memory off; status.batching carries the spec's settings too; what the tuner tries and how it rolls), and a
    # storageUri with control characters is refused
    "0.5.0": "103b6584b386394b9f4fe100e7b12be6e61e820d9b693a5a1e1af0cb4469a782",
}
CRD = Path(__file__).resolve().parents[2] / "crds" / "inferenceservices.tritonscale.io.yaml"


def template_digest(stem: str) -> str:
    doc = yaml.safe_load((SAMPLES / f"{stem}.yaml").read_text())
    template = children(doc)["Deployment"]["spec"]["template"]
    text = json.dumps(template, sort_keys=True).replace(__version__, "VERSION")
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("stem", sorted(p.stem for p in SAMPLES.glob("*.yaml")))
def test_the_pod_template_changes_only_with_the_version(stem: str) -> None:
    recorded = RENDERINGS.get(__version__)
    assert recorded is not None, f"version {__version__} has no record: add its digests to RENDERINGS"
    assert template_digest(stem) == recorded.get(stem), (
        f"{stem}'s pod template is not the one version {__version__} recorded: raise the version "
        f"(operator/tritonscale/__init__.py, pyproject.toml, the chart) so that an upgrade's rollouts go "
        f"through the gate, and record the new digest ({template_digest(stem)})")


def test_the_crd_changes_only_with_the_version() -> None:
    digest = hashlib.sha256(CRD.read_bytes()).hexdigest()
    assert CRDS.get(__version__) == digest, (
        f"the CRD is not the one version {__version__} recorded: raise the version (operator/tritonscale/"
        f"__init__.py, pyproject.toml, the chart) and record the new digest ({digest}) in CRDS")
