"""spec -> Triton ``config.pbtxt`` (protobuf text format of ``inference.ModelConfig``).

Pure: a spec in, a string out. The output is deterministic (stable field
order) because its hash rolls the pods when it changes.
"""

from __future__ import annotations

import json

from tritonscale.api.spec import InferenceServiceSpec, TensorSpec, effective_queue_timeout_us, model_name
from tritonscale.api.status import BatcherInForce

# backend -> (config key, value). Triton selects the PyTorch/TensorFlow/TensorRT
# runtimes through `platform`; ONNX Runtime and Python through `backend`.
_BACKEND_LINE = {
    "onnxruntime": ("backend", "onnxruntime"),
    "python": ("backend", "python"),
    "pytorch": ("platform", "pytorch_libtorch"),
    "tensorflow": ("platform", "tensorflow_savedmodel"),
    "tensorrt": ("platform", "tensorrt_plan"),
}

# TensorRT accelerator precision_mode values (ORT TensorRT EP and TF-TRT both use them).
_PRECISION_MODE = {"fp16": "FP16", "int8": "INT8"}
# 1 GiB of TensorRT builder workspace: the ORT-TRT default, stated explicitly so it is visible.
_TRT_WORKSPACE_BYTES = 1 << 30


def _q(s: str) -> str:
    """Quote a string as a protobuf text-format literal (JSON escaping is a valid subset). Not ASCII-only:
    JSON writes a character beyond the BMP as a surrogate pair (an emoji as "\\ud83d\\ude00"), which
    protobuf's text parsers read as two lone surrogates, not one character (Python's refuses them);
    written as UTF-8, it is the character. Control characters stay escaped (\\n, \\u0007)."""
    return json.dumps(s, ensure_ascii=False)


def _dims(dims: list[int]) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def _tensors(kind: str, tensors: list[TensorSpec]) -> list[str]:
    if not tensors:
        return []
    body = ",\n".join(
        f"  {{\n    name: {_q(t.name)}\n    data_type: TYPE_{t.data_type}\n    dims: {_dims(t.dims)}\n  }}"
        for t in tensors
    )
    return [f"{kind} [\n{body}\n]"]


def _accelerator(spec: InferenceServiceSpec) -> list[str]:
    m = spec.model
    if m.precision == "fp32" or m.backend == "tensorrt":
        return []  # a TensorRT plan's precision is fixed when the engine is built
    params = [("precision_mode", _PRECISION_MODE[m.precision])]
    if m.backend == "onnxruntime":
        params.append(("max_workspace_size_bytes", str(_TRT_WORKSPACE_BYTES)))
    rendered = "\n".join(f"        parameters {{ key: {_q(k)} value: {_q(v)} }}" for k, v in params)
    return [
        "optimization {\n"
        "  execution_accelerators {\n"
        "    gpu_execution_accelerator: [\n"
        "      {\n"
        '        name: "tensorrt"\n'
        f"{rendered}\n"
        "      }\n"
        "    ]\n"
        "  }\n"
        "}"
    ]


def _dynamic_batching(spec: InferenceServiceSpec, tuned: BatcherInForce | None) -> list[str]:
    b = spec.batching
    if b is None or not b.enabled:
        return []
    delay = tuned.max_queue_delay_microseconds if tuned else b.max_queue_delay_microseconds
    preferred = list(tuned.preferred_batch_sizes) if tuned else b.preferred_batch_sizes
    lines = []
    if preferred:
        lines.append(f"  preferred_batch_size: {_dims(preferred)}")
    lines.append(f"  max_queue_delay_microseconds: {delay}")
    if b.preserve_ordering:
        lines.append("  preserve_ordering: true")
    timeout_us = effective_queue_timeout_us(spec, delay)
    if b.max_queue_size or timeout_us:
        policy = [f"    timeout_action: {b.timeout_action}"]
        if timeout_us:
            policy.append(f"    default_timeout_microseconds: {timeout_us}")
        if b.max_queue_size:
            policy.append(f"    max_queue_size: {b.max_queue_size}")
        lines.append("  default_queue_policy {\n" + "\n".join(policy) + "\n  }")
    return ["dynamic_batching {\n" + "\n".join(lines) + "\n}"]


def _warmup(spec: InferenceServiceSpec) -> list[str]:
    m = spec.model
    if m.warmup is None:
        return []
    entries = []
    for size in m.warmup.batch_sizes:
        inputs = "\n".join(
            f"    inputs {{\n      key: {_q(t.name)}\n      value: {{\n        data_type: TYPE_{t.data_type}\n"
            f"        dims: {_dims([abs(d) for d in t.dims])}\n        zero_data: true\n      }}\n    }}"
            for t in m.inputs
        )
        entries.append(f"  {{\n    name: {_q(f'warmup_batch_{size}')}\n    batch_size: {size}\n{inputs}\n  }}")
    return ["model_warmup [\n" + ",\n".join(entries) + "\n]"]


def _parameters(spec: InferenceServiceSpec) -> list[str]:
    return [
        f"parameters {{\n  key: {_q(k)}\n  value: {{ string_value: {_q(v)} }}\n}}"
        for k, v in sorted(spec.model.parameters.items())
    ]


def render_config_pbtxt(spec: InferenceServiceSpec, object_name: str, tuned: BatcherInForce | None = None) -> str:
    """The complete config.pbtxt for the InferenceService named ``object_name``; ``tuned``: the
    batcher settings in force while ``batching.autoTune`` is on (None: the spec's)."""
    m = spec.model
    key, value = _BACKEND_LINE[m.backend]
    kind = "KIND_GPU" if spec.runtime.gpus > 0 else "KIND_CPU"
    blocks = [
        f"name: {_q(model_name(spec, object_name))}\n{key}: {_q(value)}\nmax_batch_size: {m.max_batch_size}",
        *_tensors("input", m.inputs),
        *_tensors("output", m.outputs),
        f"instance_group [\n  {{\n    count: {m.instance_count}\n    kind: {kind}\n  }}\n]",
    ]
    if m.version_policy_latest:
        blocks.append(f"version_policy: {{ latest: {{ num_versions: {m.version_policy_latest} }} }}")
    blocks += _dynamic_batching(spec, tuned)
    if m.response_cache:
        blocks.append("response_cache {\n  enable: true\n}")
    blocks += _accelerator(spec)
    blocks += _warmup(spec)
    blocks += _parameters(spec)
    return "# Generated by tritonscale from the InferenceService spec; edits are overwritten.\n" + "\n".join(
        blocks
    ) + "\n"
