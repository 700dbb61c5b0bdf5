"""render/triton_config.py: config.pbtxt is exact (goldens), and Triton's own schema parses it.

Every rendering is parsed with protobuf's text-format parser into
``inference.ModelConfig`` (the message Triton loads config.pbtxt into), so an
unknown field, a bad enum or a broken escape fails here, not in a pod.

Regenerate the goldens after an intended change with:
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_triton_config.py
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as pb

from tritonscale.api.spec import InferenceServiceSpec, model_name
from tritonscale.render.triton_config import render_config_pbtxt

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))
GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

ABSENT = object()  # expected value: the (message or repeated) field is not set

KIND_GPU, KIND_CPU = pb.ModelInstanceGroup.KIND_GPU, pb.ModelInstanceGroup.KIND_CPU
REJECT, DELAY = pb.ModelQueuePolicy.REJECT, pb.ModelQueuePolicy.DELAY
TYPE = pb.DataType.Value


def parse(text: str) -> pb.ModelConfig:
    return text_format.Parse(text, pb.ModelConfig())


_TOKEN = re.compile(r"(\w+)(?:\[([^\]]+)\])?")


def get(msg: Message, path: str) -> Any:
    """Field at a path like ``instance_group[0].kind`` or ``parameters[precision_mode].string_value``.
    Returns ABSENT for an unset message field, an empty repeated field or a missing map key."""
    value: Any = msg
    for token in path.split("."):
        name, key = _TOKEN.fullmatch(token).groups()
        field = value.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None and not field.is_repeated and not value.HasField(name):
            return ABSENT
        value = getattr(value, name)
        if field.is_repeated and (key is None or field.message_type is None):
            value = list(value) if not hasattr(value, "keys") else dict(value)
            if not value:
                return ABSENT
        if key is not None:
            if hasattr(value, "keys"):  # map field
                if key not in value:
                    return ABSENT
                value = value[key]
            else:
                idx = int(key)
                if idx >= len(value):
                    return ABSENT
                value = value[idx]
    return value


def spec_of(doc: dict[str, Any]) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate(doc)


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


# --- goldens ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_sample_matches_golden(sample: Path) -> None:
    doc = load(sample)
    text = render_config_pbtxt(spec_of(doc["spec"]), doc["metadata"]["name"])
    golden = GOLDEN / f"{sample.stem}.pbtxt"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; create it with UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"{sample.name} renders differently from {golden.name}; if intended, regenerate with "
        "UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_triton_config.py")


def test_every_golden_has_a_sample() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.pbtxt")) == [s.stem for s in SAMPLES]


SAMPLE_EXPECTATIONS = {
    "onnx-image-classifier": {
        "name": "resnet50_onnx", "backend": "onnxruntime", "platform": "", "max_batch_size": 32,
        "input[0].name": "input", "input[0].data_type": TYPE("TYPE_FP32"), "input[0].dims": [3, 224, 224],
        "output[0].dims": [1000],
        "instance_group[0].kind": KIND_GPU, "instance_group[0].count": 2,
        "dynamic_batching.max_queue_delay_microseconds": 2000,
        "dynamic_batching.preferred_batch_size": [8, 16, 32],
        "dynamic_batching.default_queue_policy.max_queue_size": 256,
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 100000,
        "dynamic_batching.default_queue_policy.timeout_action": REJECT,
        "optimization.execution_accelerators.gpu_execution_accelerator[0].name": "tensorrt",
        "optimization.execution_accelerators.gpu_execution_accelerator[0].parameters[precision_mode]": "FP16",
        "model_warmup[0].batch_size": 1, "model_warmup[1].batch_size": 8, "model_warmup[2].batch_size": 32,
        "model_warmup[2].inputs[input].zero_data": True, "model_warmup[2].inputs[input].dims": [3, 224, 224],
        "response_cache": ABSENT, "parameters": ABSENT,
    },
    "python-cpu": {
        "name": "linear", "backend": "python", "max_batch_size": 16,
        "instance_group[0].kind": KIND_CPU, "instance_group[0].count": 1,
        "dynamic_batching.preferred_batch_size": [4, 8, 16],
        # targetP95Milliseconds 150 and no queueTimeoutMicroseconds: the default, 2 x the target
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 300000,
        "dynamic_batching.default_queue_policy.timeout_action": REJECT,
        "model_warmup[1].batch_size": 16, "model_warmup[1].inputs[x].data_type": TYPE("TYPE_FP32"),
        "parameters[cost_base_ms].string_value": "20", "parameters[cost_per_item_ms].string_value": "2",
        "optimization": ABSENT,
    },
    "pytorch-warmup": {
        "name": "bert-classifier", "platform": "pytorch_libtorch", "backend": "", "max_batch_size": 16,
        "input[1].name": "INPUT__1", "input[1].data_type": TYPE("TYPE_INT64"),
        "instance_group[0].kind": KIND_GPU,
        "response_cache.enable": True,
        "model_warmup[0].inputs[INPUT__0].zero_data": True, "model_warmup[0].inputs[INPUT__1].dims": [128],
        "dynamic_batching.max_queue_delay_microseconds": 5000,
        "optimization": ABSENT,
    },
}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_sample_parses_as_model_config(sample: Path) -> None:
    doc = load(sample)
    cfg = parse(render_config_pbtxt(spec_of(doc["spec"]), doc["metadata"]["name"]))
    expectations = SAMPLE_EXPECTATIONS[sample.stem]
    assert {p: get(cfg, p) for p in expectations} == expectations


# --- variants -----------------------------------------------------------------------------------------

BASE = {
    "model": {
        "storageUri": "s3://bucket/m", "backend": "onnxruntime", "maxBatchSize": 8,
        "inputs": [{"name": "input", "dataType": "FP32", "dims": [3, -1]}],
        "outputs": [{"name": "scores", "dataType": "FP32", "dims": [10]}],
    },
}


def variant(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes; keys use '__' for '.' (model__precision='fp16')."""
    out = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


ACCEL = "optimization.execution_accelerators.gpu_execution_accelerator"

VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("base-no-batching", variant(), {
        "name": "svc", "backend": "onnxruntime", "platform": "", "max_batch_size": 8,
        "input[0].dims": [3, -1], "output[0].name": "scores",
        "instance_group[0].kind": KIND_GPU, "instance_group[0].count": 1, "instance_group[1].count": ABSENT,
        "dynamic_batching": ABSENT, "optimization": ABSENT, "model_warmup": ABSENT, "response_cache": ABSENT,
        "version_policy": ABSENT, "parameters": ABSENT,
    }),
    ("batching-defaults", variant(batching={}), {
        "dynamic_batching.max_queue_delay_microseconds": 0, "dynamic_batching.preferred_batch_size": ABSENT,
        "dynamic_batching.preserve_ordering": False, "dynamic_batching.default_queue_policy": ABSENT,
    }),
    ("batching-disabled", variant(batching={"enabled": False, "maxQueueDelayMicroseconds": 100}),
     {"dynamic_batching": ABSENT}),
    ("batching-with-queue-policy", variant(batching={
        "maxQueueDelayMicroseconds": 500, "preferredBatchSizes": [2, 4, 8], "preserveOrdering": True,
        "maxQueueSize": 64, "queueTimeoutMicroseconds": 1000, "timeoutAction": "DELAY"}), {
        "dynamic_batching.max_queue_delay_microseconds": 500,
        "dynamic_batching.preferred_batch_size": [2, 4, 8],
        "dynamic_batching.preserve_ordering": True,
        "dynamic_batching.default_queue_policy.timeout_action": DELAY,
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 1000,
        "dynamic_batching.default_queue_policy.max_queue_size": 64,
    }),
    ("queue-timeout-only", variant(batching={"queueTimeoutMicroseconds": 250}), {
        "dynamic_batching.default_queue_policy.timeout_action": REJECT,
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 250,
        "dynamic_batching.default_queue_policy.max_queue_size": 0,
    }),
    # A delay longer than twice the target: the default timeout outlasts it by one target, or Triton
    # would reject every request the batcher holds for the whole delay (all of them at light load).
    ("default-timeout-outlasts-a-long-delay", variant(batching={"maxQueueDelayMicroseconds": 500_000},
                                                       scaling={"targetP95Milliseconds": 100}), {
        "dynamic_batching.max_queue_delay_microseconds": 500_000,
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 600_000,
        "dynamic_batching.default_queue_policy.timeout_action": REJECT,
    }),
    ("default-timeout-twice-the-target", variant(batching={"maxQueueDelayMicroseconds": 50_000},
                                                  scaling={"targetP95Milliseconds": 100}), {
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 200_000,
    }),
    ("queue-size-only", variant(batching={"maxQueueSize": 5}), {
        "dynamic_batching.default_queue_policy.max_queue_size": 5,
        "dynamic_batching.default_queue_policy.default_timeout_microseconds": 0,
    }),
    ("fp16-onnx", variant(model__precision="fp16"), {
        f"{ACCEL}[0].name": "tensorrt",
        f"{ACCEL}[0].parameters[precision_mode]": "FP16",
        f"{ACCEL}[0].parameters[max_workspace_size_bytes]": str(1 << 30),
        f"{ACCEL}[1].name": ABSENT,
        "optimization.execution_accelerators.cpu_execution_accelerator": ABSENT,
    }),
    ("int8-onnx", variant(model__precision="int8"), {
        f"{ACCEL}[0].name": "tensorrt", f"{ACCEL}[0].parameters[precision_mode]": "INT8",
    }),
    ("fp16-tensorflow", variant(model__backend="tensorflow", model__precision="fp16"), {
        "platform": "tensorflow_savedmodel", "backend": "",
        f"{ACCEL}[0].name": "tensorrt", f"{ACCEL}[0].parameters[precision_mode]": "FP16",
        f"{ACCEL}[0].parameters[max_workspace_size_bytes]": ABSENT,
    }),
    ("tensorrt-fp16-has-no-accelerator", variant(model__backend="tensorrt", model__precision="fp16"), {
        "platform": "tensorrt_plan", "backend": "", "optimization": ABSENT,
    }),
    ("tensorrt-int8-has-no-accelerator", variant(model__backend="tensorrt", model__precision="int8"),
     {"optimization": ABSENT}),
    ("pytorch", variant(model__backend="pytorch"), {"platform": "pytorch_libtorch", "backend": ""}),
    ("python", variant(model__backend="python"), {"backend": "python", "platform": ""}),
    ("response-cache", variant(model__responseCache=True), {"response_cache.enable": True}),
    ("gpus-0-cpu-instances", variant(runtime={"gpus": 0}), {
        "instance_group[0].kind": KIND_CPU, "instance_group[0].count": 1}),
    ("gpus-2", variant(runtime={"gpus": 2}), {"instance_group[0].kind": KIND_GPU}),
    ("instance-count-3", variant(model__instanceCount=3), {
        "instance_group[0].count": 3, "instance_group[0].kind": KIND_GPU}),
    ("parameters", variant(model__parameters={"zeta": "last", "alpha": "x y", "empty": ""}), {
        "parameters[alpha].string_value": "x y", "parameters[zeta].string_value": "last",
        "parameters[empty].string_value": "",
    }),
    ("version-policy-latest", variant(model__versionPolicyLatest=2), {
        "version_policy.latest.num_versions": 2, "version_policy.all": ABSENT,
    }),
    ("warmup", variant(model__warmup={"batchSizes": [1, 4, 8]}), {
        "model_warmup[0].name": "warmup_batch_1", "model_warmup[0].batch_size": 1,
        "model_warmup[1].batch_size": 4, "model_warmup[2].batch_size": 8, "model_warmup[3].batch_size": ABSENT,
        "model_warmup[2].inputs[input].zero_data": True,
        "model_warmup[2].inputs[input].data_type": TYPE("TYPE_FP32"),
        # a variable (-1) dimension is warmed with size 1: Triton needs a concrete shape
        "model_warmup[2].inputs[input].dims": [3, 1],
        "model_warmup[2].inputs[scores]": ABSENT,
    }),
    ("warmup-two-inputs-string", variant(
        model__inputs=[{"name": "ids", "dataType": "INT64", "dims": [-1]},
                       {"name": "text", "dataType": "STRING", "dims": [1]}],
        model__warmup={"batchSizes": [2]}), {
        "input[1].data_type": TYPE("TYPE_STRING"),
        "model_warmup[0].inputs[ids].dims": [1], "model_warmup[0].inputs[ids].data_type": TYPE("TYPE_INT64"),
        "model_warmup[0].inputs[text].data_type": TYPE("TYPE_STRING"),
        "model_warmup[0].inputs[text].zero_data": True,
    }),
    ("no-batch-dim-warmup", variant(model__maxBatchSize=0, model__warmup={"batchSizes": [1]}), {
        "max_batch_size": 0, "model_warmup[0].batch_size": 1, "dynamic_batching": ABSENT,
    }),
    ("explicit-model-name", variant(model__name="my.model-v2_x"), {"name": "my.model-v2_x"}),
    ("no-tensors-autocomplete", {"model": {"storageUri": "s3://b/m", "backend": "onnxruntime"}}, {
        "input": ABSENT, "output": ABSENT, "max_batch_size": 0,
    }),
    ("everything", variant(
        model__precision="fp16", model__instanceCount=2, model__responseCache=True, model__versionPolicyLatest=1,
        model__warmup={"batchSizes": [8]}, model__parameters={"k": "v"},
        batching={"preferredBatchSizes": [8], "maxQueueSize": 1}), {
        f"{ACCEL}[0].parameters[precision_mode]": "FP16", "instance_group[0].count": 2,
        "response_cache.enable": True, "version_policy.latest.num_versions": 1,
        "model_warmup[0].batch_size": 8, "parameters[k].string_value": "v",
        "dynamic_batching.default_queue_policy.max_queue_size": 1,
    }),
]


def test_variant_ids_unique() -> None:
    ids = [v[0] for v in VARIANTS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("doc", "expected"), [v[1:] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_variant_parses_with_expected_fields(doc: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = spec_of(doc)
    text = render_config_pbtxt(spec, "svc")
    cfg = parse(text)
    assert {p: get(cfg, p) for p in expected} == expected, text
    assert cfg.name == model_name(spec, "svc")
    assert text.startswith("# Generated by tritonscale")
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert render_config_pbtxt(spec, "svc") == text, "rendering must be deterministic"


@pytest.mark.parametrize(("doc", "expected"), [v[1:] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_variant_round_trips_through_protobuf(doc: dict[str, Any], expected: dict[str, Any]) -> None:
    """Nothing rendered is ignored or duplicated: re-serialising the parse and parsing again is stable,
    and the input tensors come back in declaration order."""
    spec = spec_of(doc)
    cfg = parse(render_config_pbtxt(spec, "svc"))
    assert parse(text_format.MessageToString(cfg)) == cfg
    assert [t.name for t in cfg.input] == [t.name for t in spec.model.inputs]
    assert [list(t.dims) for t in cfg.output] == [t.dims for t in spec.model.outputs]


def test_parameters_render_sorted() -> None:
    text = render_config_pbtxt(spec_of(variant(model__parameters={"b": "1", "a": "2", "c": "3"})), "svc")
    assert [m.group(1) for m in re.finditer(r'key: "(\w)"', text)] == ["a", "b", "c"]


def test_config_ignores_fields_triton_never_sees() -> None:
    """Scaling and pod placement are not part of config.pbtxt (so changing them rolls no pods)."""
    a = render_config_pbtxt(spec_of(variant()), "svc")
    b = render_config_pbtxt(spec_of(variant(
        scaling={"minReplicas": 3, "maxReplicas": 9, "targetP95Milliseconds": 5},
        runtime={"image": "example/triton:1", "nodeSelector": {"a": "b"}, "extraArgs": ["--log-verbose=1"]})), "svc")
    assert a == b


@pytest.mark.parametrize("name", [
    'in"put', "back\\slash", 'both\\"mixed', "new\nline", "tab\there", "caf\u00e9", "bell\x07", "{brace} [x]",
    "colon: value", "'single'", "emoji \U0001F600",
])
def test_tensor_names_are_escaped(name: str) -> None:
    doc = variant(model__inputs=[{"name": name, "dataType": "FP32", "dims": [2]}],
                  model__outputs=[{"name": name + "_out", "dataType": "FP32", "dims": [2]}],
                  model__warmup={"batchSizes": [1]}, model__parameters={name: name})
    cfg = parse(render_config_pbtxt(spec_of(doc), "svc"))
    assert cfg.input[0].name == name
    assert cfg.output[0].name == name + "_out"
    assert list(cfg.model_warmup[0].inputs) == [name]
    assert dict(cfg.parameters) == {name: pb.ModelParameter(string_value=name)}


# --- the default queue timeout: twice the latency target -----------------------------------------
def _timeout_of(batching: dict | None, target: float | None) -> int:
    from tritonscale.api.spec import effective_queue_timeout_us
    from tritonscale.api.validation import validate_spec

    spec = {"model": {"name": "m", "storageUri": "pvc://c/m", "backend": "python", "maxBatchSize": 8},
            "scaling": {} if target is None else {"targetP95Milliseconds": target}}
    if batching is not None:
        spec["batching"] = batching
    parsed, problems = validate_spec(spec)
    assert problems == []
    return effective_queue_timeout_us(parsed)


@pytest.mark.parametrize(("batching", "target", "timeout_us"), [
    ({}, 100.0, 200_000),  # unset: 2 x target
    ({}, 37.5, 75_000),
    ({}, None, 0),  # no target: no timeout
    ({"queueTimeoutMicroseconds": 0}, 100.0, 0),  # explicitly off
    ({"queueTimeoutMicroseconds": 5_000}, 100.0, 5_000),  # explicit value wins
    (None, 100.0, 0),  # no dynamic batching block: no queue policy
    ({"enabled": False}, 100.0, 0),
    # always past the queue delay (2000 us here): a target under half a microsecond rounded away (auditG)
    ({"maxQueueDelayMicroseconds": 2000}, 0.0004, 2001),
])
def test_default_queue_timeout_is_twice_the_target(batching, target, timeout_us) -> None:
    assert _timeout_of(batching, target) == timeout_us
