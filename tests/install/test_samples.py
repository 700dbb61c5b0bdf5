"""The samples in manifests/samples validate against the generated CRD's
openAPIV3Schema, read with jsonschema the way the API server reads it.

The schema is OpenAPI v3.0, whose `exclusiveMinimum: true` is the draft-4
boolean form, so Draft4Validator applies it as written. The x-kubernetes-*
keys are left out (the CEL rules are the API's own tests' business); unknown
fields are rejected, as `kubectl apply` (strict field validation) does, where
the server would otherwise silently prune them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "inferenceservices.tritonscale.io.yaml"
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def to_draft4(schema: Any) -> Any:
    """A structural CRD schema as a draft-4 JSON schema: x-kubernetes-* dropped; objects
    with properties close over them unless they preserve unknown fields."""
    if isinstance(schema, list):
        return [to_draft4(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_draft4(sub) for name, sub in value.items()}
        elif key in ("enum", "default", "required", "example"):
            out[key] = copy.deepcopy(value)
        else:
            out[key] = to_draft4(value)
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft4Validator:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema = to_draft4(version["schema"]["openAPIV3Schema"])
    # The API server validates metadata as ObjectMeta; the CRD only adds a rule on metadata.name.
    schema["properties"]["metadata"].pop("additionalProperties", None)
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _errors(validator: jsonschema.Draft4Validator, doc: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_there_are_samples():
    assert len(SAMPLES) >= 3, SAMPLES


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_matches_crd_schema(validator, path: Path):
    docs = _documents(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert doc["apiVersion"] == "tritonscale.io/v1alpha1" and doc["kind"] == "InferenceService", path
        assert not _errors(validator, doc), "\n".join(_errors(validator, doc))


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["spec"]["model"].update(maxBatchSize="lots"), "spec.model.maxBatchSize"),
    # exclusiveMinimum: true on targetP95Milliseconds (draft-4 boolean form): 0 is out.
    (lambda d: d["spec"]["scaling"].update(targetP95Milliseconds=0), "spec.scaling.targetP95Milliseconds"),
    (lambda d: d["spec"]["scaling"].update(minReplica=2), "spec.scaling"),  # typo: unknown field
    (lambda d: d["spec"]["model"].pop("storageUri"), "spec.model"),
], ids=["wrong-type", "exclusive-minimum", "unknown-field", "missing-required"])
def test_schema_rejects_broken_samples(validator, mutate, where):
    """The conversion keeps the schema's teeth: each broken copy fails where expected."""
    doc = _documents(REPO / "manifests" / "samples" / "python-cpu.yaml")[0]
    mutate(doc)
    errors = _errors(validator, doc)
    assert any(e.startswith(where + ":") for e in errors), errors


def test_the_model_store_sample_passes_kubernetes_schemas_and_serves_the_sample():
    """manifests/samples/model-store/models-pvc.yaml (the README's walkthrough): a claim of the name and
    namespace python-cpu.yaml's storageUri reads, and a pod that mounts it, each valid for Kubernetes."""
    import kubernetes_validate

    docs = list(yaml.safe_load_all((REPO / "manifests" / "samples" / "model-store" / "models-pvc.yaml").read_text()))
    for doc in docs:
        for version in ("1.28.0", "1.35.0"):
            kubernetes_validate.validate(doc, version, strict=True)
    claim, pod = docs
    sample = yaml.safe_load((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text())
    uri = sample["spec"]["model"]["storageUri"]  # pvc://CLAIM/PATH
    assert uri == f"pvc://{claim['metadata']['name']}/{sample['spec']['model']['name']}"
    assert claim["metadata"]["namespace"] == sample["metadata"]["namespace"] == pod["metadata"]["namespace"]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
