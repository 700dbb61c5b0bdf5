"""The spec's model and batching blocks: ``spec.model`` (ModelSpec, its tensors and warmup) and
``spec.batching`` (BatchingSpec, its autoTune).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from tritonscale.api.spec_base import JSON_INT_MAX, MAX_QUEUE_DELAY_US, _Model
from tritonscale.api.spec_formats import _MODEL_NAME, _STORAGE_URI

DataType = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "STRING",
]
Backend = Literal["onnxruntime", "tensorrt", "pytorch", "tensorflow", "python"]
Precision = Literal["fp32", "fp16", "int8"]

# Where each ModelSpec field's format is checked (``ModelSpec._formats``).
_MODEL_FORMATS = {"name": _MODEL_NAME, "storage_uri": _STORAGE_URI}

# Triton reads a tensor name as a C string: one with a NUL character names another tensor (or none), and
# tritonserver 2.51 refused such an input ("non-existing object member") and aborted on such an output.
_TENSOR_NUL_MESSAGE = "must not contain a NUL character (Triton reads tensor names as C strings)"


class TensorSpec(_Model):
    name: str = Field(min_length=1, max_length=128, description="Tensor name as the model declares it.",
                      json_schema_extra={"x-kubernetes-validations": [
                          {"rule": r"!self.matches(r'\x00')", "message": _TENSOR_NUL_MESSAGE}]})
    data_type: DataType = Field(description="Triton data type without the TYPE_ prefix, e.g. FP32.")
    dims: list[int] = Field(
        min_length=1, max_length=16,
        json_schema_extra={"items": {"type": "integer", "minimum": -1, "maximum": JSON_INT_MAX},
                           "x-kubernetes-validations": [
            {"rule": "self.all(d, d != 0)", "message": "dims entries must be positive or -1 (variable)"}]},
        description="Shape without the batch dimension; -1 marks a variable dimension. Triton needs at least one "
        "entry ([1] for a scalar per request).",
    )

    @field_validator("name")
    @classmethod
    def _no_nul(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError(_TENSOR_NUL_MESSAGE)
        return v

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if any(d == 0 or d < -1 for d in v):
            raise ValueError("dims entries must be positive or -1 (variable)")
        if any(d > JSON_INT_MAX for d in v):
            raise ValueError(f"dims entries must be at most {JSON_INT_MAX}")
        return v


class WarmupSpec(_Model):
    batch_sizes: list[int] = Field(
        min_length=1, max_length=16, json_schema_extra={"items": {"type": "integer", "minimum": 1}},
        description="One warmup request per size, sent with zero data before the replica reports ready.",
    )

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(s < 1 for s in v):
            raise ValueError("batch sizes must be >= 1")
        return v


# Tensors are keyed by name (Triton refuses a model with two inputs, or two outputs, of one name): the
# API server refuses a duplicate name in a list of this type, as the operator does (ModelSpec).
_NAMED_LIST: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


class ModelSpec(_Model):
    name: str | None = Field(
        default=None, min_length=1, max_length=128, json_schema_extra=_MODEL_NAME.schema(),
        description="Triton model name; defaults to metadata.name. Letters, digits, '_', '-' and '.', "
        "not dots alone ('.' and '..' name directories, not models).",
    )
    storage_uri: str = Field(
        max_length=2048,
        description="Where the model repository entry lives: s3://BUCKET/PATH, gs://BUCKET/PATH or pvc://CLAIM/PATH. "
        "The directory holds version subdirectories (1/, 2/...); tritonscale writes config.pbtxt beside them.",
        json_schema_extra=_STORAGE_URI.schema(),
    )
    backend: Backend = Field(description="Triton backend that runs the model.")
    max_batch_size: int = Field(
        default=0, ge=0, le=4096,
        description="Largest batch Triton forms; 0 means the model has no batch dimension.",
    )
    inputs: list[TensorSpec] = Field(
        default_factory=list, max_length=64, json_schema_extra=_NAMED_LIST,
        description="Model inputs; optional where Triton can autocomplete them "
        "(ONNX, TensorRT, TensorFlow SavedModel).",
    )
    outputs: list[TensorSpec] = Field(
        default_factory=list, max_length=64, json_schema_extra=_NAMED_LIST,
        description="Model outputs; optional like inputs.",
    )
    instance_count: int = Field(
        default=1, ge=1, le=64, description="Model instances (Triton instance_group count): per GPU, or in all with "
        "runtime.gpus 0.",
    )
    warmup: WarmupSpec | None = Field(
        default=None, description="Warmup requests run before the replica reports ready.",
    )
    precision: Precision = Field(
        default="fp32",
        description="fp16/int8 enable Triton's TensorRT accelerator "
        "(onnxruntime: TensorRT EP; tensorflow: TF-TRT, fp16 only). For the tensorrt backend the plan's "
        "precision is fixed when the engine is built, so nothing is rendered.",
    )
    response_cache: bool = Field(default=False, description=(
        "Enable Triton's response cache for this model. Triton then exports no end-to-end latency summary "
        "for it: unless it exports its latency histogram (--metrics-config=histogram_latencies=true in "
        "runtime.extraArgs, newer Triton releases), the autoscaler has no p95 (MetricsAvailable NoLatency) "
        "and scales on the request rate and the queue alone."))
    parameters: dict[str, str] = Field(
        default_factory=dict, description="Extra model parameters, rendered into config.pbtxt `parameters`.",
    )
    version_policy_latest: int | None = Field(
        default=None, ge=1, le=16, description="Serve only the N latest versions (Triton version_policy.latest).",
    )

    @field_validator(*_MODEL_FORMATS)
    @classmethod
    def _formats(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _MODEL_FORMATS[str(info.field_name)].check(v)

    @field_validator("inputs", "outputs")
    @classmethod
    def _unique_names(cls, v: list[TensorSpec]) -> list[TensorSpec]:
        names = [t.name for t in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tensor names must be unique: {', '.join(repr(n) for n in twice)} more than once")
        return v


def _positive_batch_sizes(v: list[int]) -> list[int]:
    if any(s < 1 for s in v):
        raise ValueError("preferred batch sizes must be >= 1")
    return v


class AutoTuneSpec(_Model):
    enabled: bool = Field(
        default=False,
        description="Let the autoscaler tune maxQueueDelayMicroseconds and preferredBatchSizes while traffic "
        "runs (from the learned batch cost and the arrival rate per replica, against "
        "scaling.targetP95Milliseconds; without one it holds the settings in force, status.batching.reason "
        "NoTarget). "
        "The settings in force are in status.batching; the spec's own values are where tuning starts. A "
        "change rolls every replica at once (maxSurge 100%: room for a second fleet for one cold start). "
        "Changes for capacity come at least 10 minutes apart, one away from settings that miss the target at "
        "once; a rollout reported stuck is undone, and the tuner then waits an hour.",
    )
    max_queue_delay_microseconds: int | None = Field(
        default=None, ge=0, le=MAX_QUEUE_DELAY_US,
        description="The largest queue delay the tuner may use. Unset: what the p95 target leaves after "
        "the model's full-batch time, and no more than a set queueTimeoutMicroseconds (REJECT) leaves after "
        "it.",
    )
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, max_length=16, json_schema_extra={"items": {"type": "integer", "minimum": 1}},
        description="The preferred batch sizes the tuner may choose from; each <= model.maxBatchSize. "
        "Empty: any size up to model.maxBatchSize; the tuner tries the powers of two and "
        "model.maxBatchSize.",
    )

    _positive = field_validator("preferred_batch_sizes")(_positive_batch_sizes)


class BatchingSpec(_Model):
    enabled: bool = Field(default=True, description="Render a dynamic_batching block.")
    max_queue_delay_microseconds: int = Field(
        default=0, ge=0, le=MAX_QUEUE_DELAY_US,
        description="How long Triton may hold a request to grow a batch. Trades a little queueing for throughput.",
    )
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, max_length=16, json_schema_extra={"items": {"type": "integer", "minimum": 1}},
        description="Batch sizes the batcher aims for; each <= model.maxBatchSize.",
    )
    preserve_ordering: bool = Field(default=False, description="Return responses in request order.")
    max_queue_size: int = Field(default=0, ge=0, le=2**32 - 1,  # Triton's ModelQueuePolicy.max_queue_size: uint32
                                description="Reject beyond this many queued requests; 0 = unbounded.")
    queue_timeout_microseconds: int | None = Field(
        default=None, ge=0, le=JSON_INT_MAX,
        description="Reject (or delay, see timeoutAction) requests queued longer than this; 0 = no timeout. "
        "Unset: twice scaling.targetP95Milliseconds when a target is set -- a request queued that long has "
        "missed the target already, and rejecting it keeps a burst's backlog from outliving the burst -- and "
        "at least the queue delay plus the target; otherwise no timeout. With timeoutAction REJECT it must be "
        "more than the queue delay.",
    )
    timeout_action: Literal["REJECT", "DELAY"] = Field(
        default="REJECT", description="What happens to a request whose queue timeout expires. DELAY cannot "
        "go with preserveOrdering while a queue timeout is in force (Triton refuses the model).",
    )
    auto_tune: AutoTuneSpec | None = Field(
        default=None, description="Online tuning of the queue delay and preferred batch sizes; omit to keep "
        "the values above.",
    )

    _positive = field_validator("preferred_batch_sizes")(_positive_batch_sizes)
