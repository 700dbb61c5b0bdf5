"""api/validation.py: one table of spec mutations -> the field paths the user is told about.

Every case starts from the python-cpu sample (python backend, gpus 0,
maxBatchSize 16, warmup [1, 16], preferred [4, 8, 16], replicas 1..4) and
changes a few dotted paths. ``RULE_CASES`` pass Pydantic and exercise the
cross-field rules of ``rules.py``; ``test_rules_cel.py`` evaluates the CRD's
CEL twins against the very same table.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonscale.api.rules import ALL_RULES, SCALING_RULES, SPEC_RULES, Rule
from tritonscale.api.spec import DEFAULT_TRITON_IMAGE, InferenceServiceSpec
from tritonscale.api.validation import NAME_MAX, Problem, validate_body, validate_name, validate_spec

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))
BASE_SAMPLE = REPO / "manifests" / "samples" / "python-cpu.yaml"

DELETE = object()  # sentinel: remove the key instead of setting it


@functools.lru_cache(maxsize=None)
def _parsed_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_sample(path: Path = BASE_SAMPLE) -> dict[str, Any]:
    return copy.deepcopy(_parsed_yaml(path))


def mutate(spec: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``spec`` with each dotted path set to its value (or removed for DELETE)."""
    out = copy.deepcopy(spec)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(value)
    return out


def base_spec() -> dict[str, Any]:
    return load_sample()["spec"]


@dataclass(frozen=True)
class Case:
    id: str
    changes: dict[str, Any]
    problems: tuple[str, ...] = ()  # expected Problem.field values, in reporting order
    messages: tuple[str, ...] = field(default=())  # substrings expected in the joined messages

    def spec(self) -> dict[str, Any]:
        return mutate(base_spec(), self.changes)


# Cross-field cases: every spec here passes Pydantic, so only rules.py decides.
RULE_CASES: tuple[Case, ...] = (
    # --- scaling scope ---
    Case("min-gt-max", {"scaling.minReplicas": 5},
         ("spec.scaling.minReplicas", "spec.scaling.warmBuffer"), ("minReplicas must be <= scaling.maxReplicas",)),
    Case("min-eq-max", {"scaling.minReplicas": 4}),
    Case("min-plus-buffer-gt-max", {"scaling.minReplicas": 3, "scaling.warmBuffer": 2},
         ("spec.scaling.warmBuffer",), ("minReplicas + scaling.warmBuffer",)),
    Case("min-plus-buffer-eq-max", {"scaling.minReplicas": 3, "scaling.warmBuffer": 1}),
    Case("buffer-alone-gt-max", {"scaling.minReplicas": 0, "scaling.warmBuffer": 5}, ("spec.scaling.warmBuffer",)),
    Case("fallback-above-max", {"scaling.fallbackReplicas": 5}, ("spec.scaling.fallbackReplicas",),
         ("fallbackReplicas must lie between",)),
    Case("fallback-below-min", {"scaling.minReplicas": 2, "scaling.fallbackReplicas": 1},
         ("spec.scaling.fallbackReplicas",)),
    Case("fallback-eq-min", {"scaling.minReplicas": 2, "scaling.fallbackReplicas": 2}),
    Case("fallback-eq-max", {"scaling.fallbackReplicas": 4}),
    Case("fallback-zero-min-zero", {"scaling.minReplicas": 0, "scaling.fallbackReplicas": 0}),
    Case("defaults-max-10-min-11", {"scaling.maxReplicas": DELETE, "scaling.minReplicas": 11},
         ("spec.scaling.minReplicas", "spec.scaling.warmBuffer")),
    # --- batching ---
    Case("preferred-gt-max-batch", {"batching.preferredBatchSizes": [4, 32]},
         ("spec.batching.preferredBatchSizes",), ("preferredBatchSizes entry must be <= model.maxBatchSize",)),
    Case("preferred-eq-max-batch", {"batching.preferredBatchSizes": [16]}),
    Case("preferred-empty", {"batching.preferredBatchSizes": []}),
    Case("preferred-checked-even-if-disabled", {"batching.enabled": False, "batching.preferredBatchSizes": [32]},
         ("spec.batching.preferredBatchSizes",)),
    Case("batching-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching.preferredBatchSizes": DELETE, "model.warmup.batchSizes": [1]},
         ("spec.batching.enabled",), ("dynamic batching needs model.maxBatchSize > 0",)),
    Case("empty-batching-block-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": {}, "model.warmup.batchSizes": [1]}, ("spec.batching.enabled",)),
    Case("batching-disabled-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": {"enabled": False}, "model.warmup.batchSizes": [1]}),
    Case("no-batching-block-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": DELETE, "model.warmup.batchSizes": [1]}),
    Case("max-batch-0-everything-wrong", {"model.maxBatchSize": 0},
         ("spec.batching.preferredBatchSizes", "spec.batching.enabled", "spec.model.warmup.batchSizes")),
    # --- warmup ---
    Case("warmup-without-inputs", {"model.inputs": DELETE}, ("spec.model.warmup",),
         ("model.warmup needs model.inputs",)),
    Case("warmup-with-empty-inputs", {"model.inputs": []}, ("spec.model.warmup",)),
    Case("no-warmup-no-inputs", {"model.inputs": DELETE, "model.warmup": DELETE}),
    Case("warmup-size-gt-max-batch", {"model.warmup.batchSizes": [1, 32]}, ("spec.model.warmup.batchSizes",),
         ("warmup.batchSizes entry must be <= model.maxBatchSize",)),
    Case("warmup-size-eq-max-batch", {"model.warmup.batchSizes": [16]}),
    Case("warmup-size-2-without-batching",
         {"model.maxBatchSize": 0, "batching": DELETE, "model.warmup.batchSizes": [2]},
         ("spec.model.warmup.batchSizes",)),
    # --- precision ---
    Case("fp16-pytorch", {"model.backend": "pytorch", "model.precision": "fp16", "runtime.gpus": 1},
         ("spec.model.precision",), ("pytorch and python have no TensorRT accelerator",)),
    Case("int8-python-gpu", {"model.precision": "int8", "runtime.gpus": 1}, ("spec.model.precision",)),
    Case("int8-tensorflow", {"model.backend": "tensorflow", "model.precision": "int8", "runtime.gpus": 1},
         ("spec.model.precision",), ("tensorflow supports fp16 only",)),
    Case("fp16-tensorflow", {"model.backend": "tensorflow", "model.precision": "fp16", "runtime.gpus": 1}),
    Case("int8-onnx", {"model.backend": "onnxruntime", "model.precision": "int8", "runtime.gpus": 1}),
    Case("fp16-tensorrt", {"model.backend": "tensorrt", "model.precision": "fp16", "runtime.gpus": 2}),
    Case("fp16-onnx-gpus-0", {"model.backend": "onnxruntime", "model.precision": "fp16", "runtime.gpus": 0},
         ("spec.model.precision",), ("needs runtime.gpus >= 1",)),
    Case("fp16-onnx-default-gpus", {"model.backend": "onnxruntime", "model.precision": "fp16", "runtime": DELETE}),
    Case("fp16-python-gpus-0", {"model.precision": "fp16"}, ("spec.model.precision", "spec.model.precision")),
    Case("fp32-pytorch-cpu", {"model.backend": "pytorch"}),
    # --- several at once: problems come in rules.py order, spec rules before scaling rules ---
    Case("everything-at-once",
         {"model.precision": "int8", "model.warmup.batchSizes": [64], "scaling.minReplicas": 9,
          "scaling.fallbackReplicas": 0},
         ("spec.model.warmup.batchSizes", "spec.model.precision", "spec.model.precision",
          "spec.scaling.minReplicas", "spec.scaling.warmBuffer", "spec.scaling.fallbackReplicas")),
)

# Type and range errors: Pydantic rejects these before any rule runs.
TYPE_CASES: tuple[Case, ...] = (
    Case("max-batch-not-int", {"model.maxBatchSize": "lots"}, ("spec.model.maxBatchSize",), ("valid integer",)),
    Case("max-batch-too-big", {"model.maxBatchSize": 4097}, ("spec.model.maxBatchSize",)),
    Case("max-batch-negative", {"model.maxBatchSize": -1}, ("spec.model.maxBatchSize",)),
    Case("target-negative", {"scaling.targetP95Milliseconds": -3}, ("spec.scaling.targetP95Milliseconds",),
         ("greater than 0",)),
    Case("target-zero", {"scaling.targetP95Milliseconds": 0}, ("spec.scaling.targetP95Milliseconds",)),
    Case("unknown-scaling-field", {"scaling.minReplica": 2}, ("spec.scaling.minReplica",), ("unknown field",)),
    Case("unknown-top-level-field", {"autoscaling": {}}, ("spec.autoscaling",), ("unknown field",)),
    Case("unknown-tensor-field", {"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [4], "shape": [4]}]},
         ("spec.model.inputs[0].shape",)),
    Case("storage-http", {"model.storageUri": "http://x"}, ("spec.model.storageUri",), ("s3://BUCKET/PATH",)),
    Case("storage-pvc-without-path", {"model.storageUri": "pvc://models"}, ("spec.model.storageUri",)),
    Case("storage-pvc-uppercase-claim", {"model.storageUri": "pvc://Models/linear"}, ("spec.model.storageUri",)),
    Case("storage-s3-no-bucket", {"model.storageUri": "s3:///path"}, ("spec.model.storageUri",)),
    Case("model-missing", {"model": DELETE}, ("spec.model",), ("required field is missing",)),
    Case("backend-missing", {"model.backend": DELETE}, ("spec.model.backend",), ("required field is missing",)),
    Case("backend-unknown", {"model.backend": "jax"}, ("spec.model.backend",)),
    Case("precision-unknown", {"model.precision": "fp8"}, ("spec.model.precision",)),
    Case("dims-zero", {"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [0]}]},
         ("spec.model.inputs[0].dims",), ("positive or -1",)),
    Case("data-type-with-prefix", {"model.outputs": [{"name": "y", "dataType": "TYPE_FP32", "dims": [4]}]},
         ("spec.model.outputs[0].dataType",)),
    Case("warmup-size-zero", {"model.warmup.batchSizes": [0]}, ("spec.model.warmup.batchSizes",)),
    Case("warmup-empty", {"model.warmup.batchSizes": []}, ("spec.model.warmup.batchSizes",)),
    Case("preferred-zero", {"batching.preferredBatchSizes": [0, 4]}, ("spec.batching.preferredBatchSizes",)),
    Case("timeout-action-unknown", {"batching.timeoutAction": "DROP"}, ("spec.batching.timeoutAction",)),
    Case("gpus-too-many", {"runtime.gpus": 17}, ("spec.runtime.gpus",)),
    Case("max-replicas-zero", {"scaling.maxReplicas": 0}, ("spec.scaling.maxReplicas",)),
    Case("tolerance-above-one", {"scaling.tolerance": 1.5}, ("spec.scaling.tolerance",)),
    Case("prometheus-url-not-http", {"scaling.prometheus": {"url": "prom:9090"}}, ("spec.scaling.prometheus.url",)),
    Case("scale-down-step-zero", {"scaling.scaleDown.maxStep": 0}, ("spec.scaling.scaleDown.maxStep",)),
    Case("two-type-errors", {"model.maxBatchSize": "lots", "scaling.minReplicas": -1},
         ("spec.model.maxBatchSize", "spec.scaling.minReplicas")),
)


def _ids(cases: tuple[Case, ...]) -> list[str]:
    return [c.id for c in cases]


def test_case_ids_are_unique() -> None:
    ids = _ids(RULE_CASES) + _ids(TYPE_CASES)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", RULE_CASES + TYPE_CASES, ids=_ids(RULE_CASES + TYPE_CASES))
def test_validate_spec_reports_fields(case: Case) -> None:
    parsed, problems = validate_spec(case.spec())
    assert [p.field for p in problems] == list(case.problems), [str(p) for p in problems]
    if case.problems:
        assert parsed is None, "an invalid spec must not come back parsed"
    else:
        assert isinstance(parsed, InferenceServiceSpec)
    text = "\n".join(str(p) for p in problems)
    for fragment in case.messages:
        assert fragment in text, text
    for p in problems:
        assert str(p) == f"{p.field}: {p.message}"
        assert p.message and "Value error" not in p.message and "\n" not in p.message


@pytest.mark.parametrize("case", RULE_CASES, ids=_ids(RULE_CASES))
def test_rule_cases_pass_pydantic(case: Case) -> None:
    """The cross-field table must reach rules.py: Pydantic alone accepts every spec in it."""
    InferenceServiceSpec.model_validate(case.spec())


def _rule_verdicts(spec: InferenceServiceSpec) -> dict[Rule, bool]:
    return {**{r: r.holds(spec) for r in SPEC_RULES}, **{r: r.holds(spec.scaling) for r in SCALING_RULES}}


def test_table_breaks_and_satisfies_every_rule() -> None:
    """Each rule is violated by some case and holds in some other (so no rule goes untested)."""
    broken: set[Rule] = set()
    kept: set[Rule] = set()
    for case in RULE_CASES:
        for rule, ok in _rule_verdicts(InferenceServiceSpec.model_validate(case.spec())).items():
            (kept if ok else broken).add(rule)
    assert broken == set(ALL_RULES), [r.cel for r in ALL_RULES if r not in broken]
    assert kept == set(ALL_RULES)


FAILING_RULE_CASES = tuple(c for c in RULE_CASES if c.problems)


@pytest.mark.parametrize("case", FAILING_RULE_CASES, ids=_ids(FAILING_RULE_CASES))
def test_problem_messages_are_the_rule_messages(case: Case) -> None:
    parsed = InferenceServiceSpec.model_validate(case.spec())
    failing = [r for r, ok in _rule_verdicts(parsed).items() if not ok]
    _, problems = validate_spec(case.spec())
    assert problems == [Problem(f"spec.{r.field}", r.message) for r in failing]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_samples_are_valid(sample: Path) -> None:
    doc = load_sample(sample)
    parsed, problems = validate_body(doc)
    assert problems == []
    assert isinstance(parsed, InferenceServiceSpec)
    assert parsed.model.storage_uri == doc["spec"]["model"]["storageUri"]
    assert parsed.scaling.max_replicas == doc["spec"]["scaling"]["maxReplicas"]


def test_sample_table_is_not_empty() -> None:
    assert {s.stem for s in SAMPLES} >= {"python-cpu", "onnx-image-classifier", "pytorch-warmup"}


MINIMAL = {"model": {"storageUri": "s3://bucket/model", "backend": "onnxruntime"}}


@pytest.mark.parametrize(("attr_path", "expected"), [
    ("scaling.min_replicas", 1),
    ("scaling.max_replicas", 10),
    ("scaling.interval_seconds", 15),
    ("scaling.window_seconds", 60),
    ("scaling.tolerance", 0.1),
    ("scaling.scale_down.stabilization_seconds", None),
    ("scaling.scale_down.max_step", 1),
    ("scaling.scale_up.stabilization_seconds", 0),
    ("scaling.scale_up.max_step", 4),
    ("scaling.warm_buffer", 0),
    ("scaling.failure_threshold", 3),
    ("scaling.fallback_replicas", None),
    ("scaling.target_p95_milliseconds", None),
    ("scaling.panic_threshold", 2.0),
    ("scaling.floor", 1),
    ("runtime.gpus", 1),
    ("runtime.image", DEFAULT_TRITON_IMAGE),
    ("runtime.response_cache_bytes", 256 * 1024 * 1024),
    ("model.max_batch_size", 0),
    ("model.instance_count", 1),
    ("model.precision", "fp32"),
    ("model.response_cache", False),
    ("model.name", None),
    ("model.warmup", None),
    ("batching", None),
])
def test_defaults(attr_path: str, expected: Any) -> None:
    parsed, problems = validate_spec(MINIMAL)
    assert problems == []
    value: Any = parsed
    for part in attr_path.split("."):
        value = getattr(value, part)
    assert value == expected


def test_empty_batching_block_defaults_to_enabled() -> None:
    parsed, problems = validate_spec(mutate(MINIMAL, {"model.maxBatchSize": 8, "batching": {}}))
    assert problems == []
    b = parsed.batching
    assert (b.enabled, b.max_queue_delay_microseconds, b.preferred_batch_sizes, b.timeout_action) == (
        True, 0, [], "REJECT")


@pytest.mark.parametrize(("spec", "problem"), [
    (None, "spec"),
    ("not-a-mapping", "spec"),
    ([{"model": {}}], "spec"),
])
def test_spec_must_be_an_object(spec: Any, problem: str) -> None:
    parsed, problems = validate_spec(spec)
    assert parsed is None
    assert [p.field for p in problems] == [problem]


@pytest.mark.parametrize(("name", "ok"), [
    ("linear", True),
    ("a", True),
    ("a" * NAME_MAX, True),
    ("a" * (NAME_MAX + 1), False),
    ("a" * 63, False),
    ("Linear", False),
    ("LINEAR", False),
    ("1linear", False),
    ("linear-", False),
    ("-linear", False),
    ("lin.ear", False),
    ("lin_ear", False),
    ("bert-classifier-2", True),
    ("", False),
    (None, False),
    (42, False),
])
def test_metadata_name_rules(name: Any, ok: bool) -> None:
    problems = validate_name(name)
    assert (problems == []) is ok, problems
    assert all(p.field == "metadata.name" for p in problems)
    assert len(problems) <= 1


@pytest.mark.parametrize(("name", "spec_changes", "fields"), [
    ("a" * (NAME_MAX + 1), {}, ["metadata.name"]),
    ("Linear", {}, ["metadata.name"]),
    ("Linear", {"scaling.minReplicas": 2, "scaling.maxReplicas": 1},
     ["metadata.name", "spec.scaling.minReplicas", "spec.scaling.warmBuffer"]),
    ("linear", {"model.backend": "jax"}, ["spec.model.backend"]),
    ("linear", {}, []),
])
def test_validate_body_reports_name_and_spec(name: str, spec_changes: dict[str, Any], fields: list[str]) -> None:
    doc = load_sample()
    doc["metadata"]["name"] = name
    doc["spec"] = mutate(doc["spec"], spec_changes)
    parsed, problems = validate_body(doc)
    assert [p.field for p in problems] == fields
    assert (parsed is None) == bool(fields), "a body with any problem must not come back parsed"


def test_validate_body_without_metadata_or_spec() -> None:
    parsed, problems = validate_body({})
    assert parsed is None
    assert [p.field for p in problems] == ["metadata.name", "spec"]
