"""InferenceService spec: the user-facing contract, as Pydantic models.

These models are the single source of truth: the CRD schema in ``crds/`` is
generated from them (``tritonscale crd``), the operator parses every object
through them, and ``tritonscale render`` validates files with them.
Field names are camelCase on the wire (``maxBatchSize``) and snake_case in Python.

The top-level model is here, its blocks beside it: ``spec_model`` (model, batching), ``spec_runtime``
(runtime) and ``spec_scaling`` (scaling), on ``spec_base`` (the API's names, bounds, Triton defaults and
the models' base class) and ``spec_formats`` (string formats, checked alike by the CRD and the operator).
This module re-exports their public names (``__all__``): import them from here.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tritonscale.api.rules import SPEC_RULES
from tritonscale.api.spec_base import (
    DEFAULT_GRPC_MAX_CONNECTION_AGE_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_TRITON_IMAGE,
    GPU_RESOURCE,
    GROUP,
    GRPC_MAX_CONNECTION_AGE_SINCE,
    HASH_ANNOTATION,
    JSON_INT_MAX,
    KIND,
    LABEL,
    MAX_QUEUE_DELAY_US,
    PLURAL,
    PULL_AND_FETCH_S,
    RENDERED_BY_ANNOTATION,
    SHORT_NAMES,
    SINGULAR,
    SPEC_ANNOTATION,
    SPEC_ANNOTATION_MAX_BYTES,
    STARTUP_PROBE_PERIOD_S,
    TRITON_IMAGE_REPOSITORY,
    VERSION,
    _cel,
    _Model,
    _object_default,
)
from tritonscale.api.spec_formats import (
    MAX_ANNOTATION_VALUE,
    MAX_NODE_SELECTOR,
    MAX_POD_ANNOTATIONS_BYTES,
    MAX_POD_METADATA,
    MAX_PULL_SECRETS,
    OPERATOR_POD_LABELS,
    OPERATOR_PREFIX,
    prometheus_base_url,
    url_without_credentials,
)
from tritonscale.api.spec_model import (
    AutoTuneSpec,
    Backend,
    BatchingSpec,
    DataType,
    ModelSpec,
    Precision,
    TensorSpec,
    WarmupSpec,
)
from tritonscale.api.spec_runtime import GO_SPACE, MAX_EXTRA_ARG, MAX_EXTRA_ARGS, OPERATOR_PORTS, RuntimeSpec
from tritonscale.api.spec_scaling import PrometheusSpec, ScaleDownPolicy, ScaleUpPolicy, ScalingSpec

__all__ = [
    "AutoTuneSpec", "Backend", "BatchingSpec", "DEFAULT_GRPC_MAX_CONNECTION_AGE_S", "DEFAULT_STARTUP_TIMEOUT_S",
    "DEFAULT_TRITON_IMAGE", "DataType", "GO_SPACE", "GPU_RESOURCE", "GROUP", "GRPC_MAX_CONNECTION_AGE_SINCE",
    "HASH_ANNOTATION", "InferenceServiceSpec", "JSON_INT_MAX", "KIND", "LABEL", "MAX_ANNOTATION_VALUE",
    "MAX_EXTRA_ARG", "MAX_EXTRA_ARGS", "MAX_NODE_SELECTOR", "MAX_POD_ANNOTATIONS_BYTES", "MAX_POD_METADATA",
    "MAX_PULL_SECRETS", "MAX_QUEUE_DELAY_US", "ModelSpec", "OPERATOR_POD_LABELS", "OPERATOR_PORTS",
    "OPERATOR_PREFIX", "PLURAL", "PULL_AND_FETCH_S", "Precision", "PrometheusSpec", "QUEUE_TIMEOUT_TARGETS",
    "RENDERED_BY_ANNOTATION", "RuntimeSpec", "SHORT_NAMES", "SINGULAR", "SPEC_ANNOTATION",
    "SPEC_ANNOTATION_MAX_BYTES", "STARTUP_PROBE_PERIOD_S", "ScaleDownPolicy", "ScaleUpPolicy", "ScalingSpec",
    "TRITON_IMAGE_REPOSITORY", "TensorSpec", "VERSION", "WarmupSpec", "default_queue_timeout_us",
    "effective_queue_timeout_us", "field_bounds", "model_name", "prometheus_base_url",
    "url_without_credentials",
]


class InferenceServiceSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_cel(SPEC_RULES))

    model: ModelSpec = Field(description="The Triton model: where it is stored, its backend, tensors and batch size.")
    batching: BatchingSpec | None = Field(default=None, description="Triton dynamic batching; omit to disable.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, json_schema_extra=_object_default(),
                                 description="How Triton runs: image, GPUs, pod placement.")
    scaling: ScalingSpec = Field(default_factory=ScalingSpec, json_schema_extra=_object_default(),
                                 description="Warm floor, ceiling, latency target and autoscaler policy.")


def model_name(spec: InferenceServiceSpec, object_name: str) -> str:
    """The Triton model name: ``spec.model.name``, else the InferenceService's own name."""
    return spec.model.name or object_name


# A request still queued after this many p95 targets is rejected unless the spec says
# otherwise (batching.queueTimeoutMicroseconds). Measured with the scenario suite: without a
# timeout a burst's backlog stays on the replicas that were serving (round-robin gives new
# replicas only new requests) and windows keep missing for minutes after the capacity came.
QUEUE_TIMEOUT_TARGETS = 2.0


def default_queue_timeout_us(target_ms: float, delay_us: float, targets: float = QUEUE_TIMEOUT_TARGETS) -> int:
    """The queue timeout without a spec value: ``targets`` (QUEUE_TIMEOUT_TARGETS) targets, and at least
    the queue delay and one target more. Triton holds a lone request for the whole delay, so a timeout within
    it would reject every request at light load (a 500 ms delay against a 100 ms target did: every
    request 503 "Request timeout expired" on a real tritonserver); such a delay misses the target
    anyway, but slowly is better than never. Always past the delay: a target under half a microsecond rounded
    away, and the timeout equalled the delay (auditG, session 84)."""
    return max(round(targets * target_ms * 1000), round(delay_us + target_ms * 1000), math.floor(delay_us) + 1)


def effective_queue_timeout_us(spec: InferenceServiceSpec, delay_us: int | None = None) -> int:
    """The queue timeout config.pbtxt carries, in microseconds; 0 = none. ``delay_us``: the queue
    delay in force, if not the spec's (the tuner's)."""
    b = spec.batching
    if b is None or not b.enabled:
        return 0
    if b.queue_timeout_microseconds is not None:
        return b.queue_timeout_microseconds
    target = spec.scaling.target_p95_milliseconds
    delay = b.max_queue_delay_microseconds if delay_us is None else delay_us
    return default_queue_timeout_us(target, delay) if target else 0


def field_bounds(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """(ge, le) of a model's field as its Field declares them (None where it sets none): for messages and
    clamps outside the model that must not drift from it (the simulator's flags)."""
    metadata = model.model_fields[name].metadata
    ge = next((m.ge for m in metadata if getattr(m, "ge", None) is not None), None)
    le = next((m.le for m in metadata if getattr(m, "le", None) is not None), None)
    return ge, le
