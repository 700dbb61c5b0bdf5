"""InferenceService spec: the user-facing contract, as Pydantic models.

These models are the single source of truth: the CRD schema in ``crds/`` is
generated from them (``tritonscale crd``), the operator parses every object
through them, and ``tritonscale render`` validates files with them.
Field names are camelCase on the wire (``maxBatchSize``) and snake_case in Python.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from kubernetes.utils import parse_quantity
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict

from tritonscale.api.names import DNS1123_SUBDOMAIN, LABEL_VALUE, is_label_key, label_key_cel
from tritonscale.api.rules import SCALING_RULES, SPEC_RULES, Rule, cel_block
from tritonscale.api.shutdown import (
    ENDPOINTS_LAG_S,
    KILL_MARGIN_S,
    MAX_DRAINED_AGE_S,
    TRITON_EXIT_TIMEOUT_S,
)

# A resource quantity as the API server parses it (its own error message gives this expression);
# parse_quantity, which gives the value, is more lenient (it accepts "1.5 Gi").
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")

# The largest integer a field without a tighter bound takes: above it Triton's int64/uint64 fields, the
# API server's int64 and the float64 a JSON number passes through part ways (2**63 as a schema maximum
# reached the API server as -9223372036854775808). 2**53 - 1 microseconds is 285 years.
JSON_INT_MAX = 2**53 - 1

# The longest queue delay a spec (or the tuner) may set: 10 s, far beyond any latency target.
MAX_QUEUE_DELAY_US = 10_000_000

GROUP = "tritonscale.io"
VERSION = "v1alpha1"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
SHORT_NAMES = ["tis"]

# Names every layer agrees on. The label marks every child and pod of an InferenceService
# (the children's selectors, the operator's watch filter on them, the sandbox kubelet's
# view); the annotation on the pod template carries the config.pbtxt hash, so a config
# change rolls the pods.
LABEL = "tritonscale.io/inferenceservice"
HASH_ANNOTATION = "tritonscale.io/config-hash"
# On the Deployment: the InferenceService's spec it was made from (JSON, as stored). When the
# object is later edited into a spec the operator refuses, the autoscaler keeps scaling the
# fleet by this one, across an operator restart too (scaling.tick).
SPEC_ANNOTATION = "tritonscale.io/spec"
# Larger specs (a long env list) are not copied: after a restart with an invalid edit, such a
# fleet is held at its size until the spec is fixed. A quarter of the API server's 256 KiB
# limit on all of an object's annotations together.
SPEC_ANNOTATION_MAX_BYTES = 64 * 1024
# On the Deployment: the operator version that rendered it. A new version's pod template for an
# unchanged spec rolls the fleets a few at a time (reconcile.upgrade_rollouts).
RENDERED_BY_ANNOTATION = "tritonscale.io/rendered-by"

# Triton 25.08 (Aug 2025) is the newest release whose tag we could check; it
# ships --metrics-config=summary_latencies and histogram_latencies.
TRITON_IMAGE_REPOSITORY = "nvcr.io/nvidia/tritonserver"
DEFAULT_TRITON_IMAGE = f"{TRITON_IMAGE_REPOSITORY}:25.08-py3"
# gRPC connections are closed at this age (runtime.grpcMaxConnectionAgeSeconds). A Service balances
# connections, not requests: a gRPC client's channel stays on the replica it reached, so a replica
# the autoscaler adds gets a client's traffic only once that client reconnects, and a pod that a lucky
# draw gave more connections than its share stays overloaded until they close. The age bounds both.
# The suite's scenarios (seed 0, both targets, 42) with 1000 clients routed per connection
# (e2e/bench_connection_routing.py): windows met 43.8% with no age (the replicas added get almost
# nothing), 83.7% at 120 s, 85.6% at 60 s, 87.8% at 30 s, 88.7% at 15 s, 89.8% at 10 s, 89.3% at 5 s
# and 90.2% at 2 s (96.0% routed per request). Below 10 s what is left is the luck of the draw, not
# the age. A reconnection costs nothing we could measure (e2e/bench_grpc_connection_age.py: the same
# throughput and p95 at a 1 s age as with none); at 10 s, 1000 clients open 100 connections a second
# across the fleet. Triton has the flag (--grpc-max-connection-age, milliseconds) from release 24.01
# (server v2.42.0, PR #6639).
DEFAULT_GRPC_MAX_CONNECTION_AGE_S = 10

# runtime.progressDeadlineSeconds' default: the startup probe's budget (load and warmup) plus this for the
# image pull and the init container's download (Kubernetes' own default deadline, which covers a pull).
PULL_AND_FETCH_S = 600
GRPC_MAX_CONNECTION_AGE_SINCE = (24, 1)  # the first NGC tag (YY.MM) with the flag


DataType = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "STRING",
]
Backend = Literal["onnxruntime", "tensorrt", "pytorch", "tensorflow", "python"]
Precision = Literal["fp32", "fp16", "int8"]

# The GPU resource: ``runtime.gpus`` renders it as the container's limit.
GPU_RESOURCE = "nvidia.com/gpu"
# The startup probe checks the model's ready endpoint every 5 s; the default budget, 10 min (120 checks), is
# for download-free load and warmup, which for large TensorRT engines takes minutes.
STARTUP_PROBE_PERIOD_S = 5
DEFAULT_STARTUP_TIMEOUT_S = 600


@dataclass(frozen=True)
class _Format:
    """A string field's format, one object for both checks: the CRD's (a CEL rule with our message,
    not an OpenAPI ``pattern``, whose message from the API server is the regex itself: "should match
    '^(s3://[^/\\s]+...'") and the operator's (the field validator, the same message)."""

    pattern: re.Pattern[str]
    message: str
    # ... and what the value may not contain (searched, unanchored: CEL's ``matches`` too), each said apart
    forbidden: tuple[tuple[re.Pattern[str], str], ...] = ()

    def schema(self) -> dict[str, Any]:
        rules = [{"rule": f"self.matches(r'{self.pattern.pattern}')", "message": self.message}]
        rules += [{"rule": f"!self.matches(r'{p.pattern}')", "message": m} for p, m in self.forbidden]
        return {"x-kubernetes-validations": rules}

    def check(self, value: str | None) -> str | None:
        if value is not None and not self.pattern.fullmatch(value):  # not match: "$" also matches before a final "\n"
            raise ValueError(self.message)
        for pattern, message in self.forbidden:
            if value is not None and pattern.search(value):
                raise ValueError(message)
        return value


# A size above 0 as a Kubernetes quantity (1Gi, 512Mi, 2G, 1e9): Kubernetes' grammar, without a sign.
_SUFFIX = r"(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$"
_SIZE = _Format(re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)" + _SUFFIX),
                "must be a Kubernetes quantity above 0, e.g. 1Gi or 8Gi",
                ((re.compile(r"^([0]+(\.0*)?|\.0+)" + _SUFFIX), "must be above 0, e.g. 1Gi or 8Gi"),))
_SUBDOMAIN = _Format(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.'; "
                                        "starts and ends with a letter or digit)")
# An extended resource a device plugin advertises: DOMAIN/NAME, the domain outside Kubernetes' own.
_EXTENDED_RESOURCE = _Format(
    re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}"
               r"[A-Za-z0-9])?$"),
    "must be an extended resource name, DOMAIN/NAME (e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb, "
    "nvidia.com/gpu.shared)",
    ((re.compile(r"^([-a-z0-9.]*\.)?kubernetes\.io/"), "must not be in the kubernetes.io domain, which names "
      "Kubernetes' own resources"),))
_NODE_SELECTOR_MESSAGE = ("keys must be label keys ([PREFIX/]NAME, NAME of letters, digits, '-', '_' and '.', at "
                          "most 63, PREFIX a DNS subdomain of at most 253) and values label values (the NAME's "
                          "format, or empty)")
# The CRD bounds the lists and maps its rules iterate: the API server estimates a rule's cost from them.
MAX_PULL_SECRETS = 64
MAX_NODE_SELECTOR = 64
MAX_POD_METADATA = 64
# The pods' labels and annotations the operator sets itself (render.kubernetes_objects.labels, the
# config hash): a user's may not replace them -- the Deployment's selector and the Service select the
# pods by them, and the config hash rolls them.
OPERATOR_PREFIX = "tritonscale.io/"
OPERATOR_POD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")
_RESERVED_MESSAGE = (f"keys may not be the operator's own ({OPERATOR_PREFIX}..., "
                     f"{', '.join(OPERATOR_POD_LABELS)}): it sets them on every pod")
# A map of Kubernetes labels (a nodeSelector, the pods' labels): keys label keys, values label values.
_LABEL_MAP_RULE: Any = {"rule": f"self.all(k, {label_key_cel('k')} && self[k].matches(r'{LABEL_VALUE.pattern}'))",
                   "message": _NODE_SELECTOR_MESSAGE}
_POD_LABELS_RULES: list[Any] = [
    _LABEL_MAP_RULE,
    {"rule": f"self.all(k, !k.startsWith('{OPERATOR_PREFIX}') && !(k in {list(OPERATOR_POD_LABELS)!r}))",
     "message": _RESERVED_MESSAGE},
]
_ANNOTATION_KEY_MESSAGE = ("keys must be annotation keys ([PREFIX/]NAME, NAME of letters, digits, '-', '_' and '.', "
                           "at most 63, PREFIX a DNS subdomain of at most 253)")
_RESERVED_ANNOTATION_MESSAGE = f"keys may not be the operator's own ({OPERATOR_PREFIX}...): it sets them on every pod"
MAX_ANNOTATION_VALUE = 8192
# Kubernetes refuses an object whose annotations' keys and values add up to more than 256 KiB (bytes of
# UTF-8); the pod template also carries the operator's config hash and, after `kubectl rollout restart`,
# kubectl's restartedAt (under 100 bytes each), so the user's may take all but 1 KiB of it.
MAX_POD_ANNOTATIONS_BYTES = 256 * 1024 - 1024
_ANNOTATIONS_SIZE_MESSAGE = (f"keys and values may add up to at most {MAX_POD_ANNOTATIONS_BYTES} bytes: Kubernetes "
                             f"allows 256 KiB of annotations on a pod, the operator's own included")
_POD_ANNOTATIONS_RULES: list[Any] = [
    {"rule": f"self.all(k, {label_key_cel('k')})", "message": _ANNOTATION_KEY_MESSAGE},
    {"rule": f"self.map(k, size(bytes(k)) + size(bytes(self[k]))).sum() <= {MAX_POD_ANNOTATIONS_BYTES}",
     "message": _ANNOTATIONS_SIZE_MESSAGE},
    {"rule": f"self.all(k, !k.startsWith('{OPERATOR_PREFIX}'))", "message": _RESERVED_ANNOTATION_MESSAGE},
]

_STORAGE_URI = _Format(
    # CLAIM: a PersistentVolumeClaim's name, a DNS-1123 subdomain (pvc://models.v2/m was refused)
    re.compile(r"^(s3://[^/\s]+(/\S*)?|gs://[^/\s]+(/\S*)?"
               r"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/\S+)$"),
    "must be s3://BUCKET/PATH, gs://BUCKET/PATH or pvc://CLAIM/PATH",
    forbidden=(
        # pvc://models/../../etc linked the container's own /etc in place of the claim's model
        (re.compile(r"/\.\.(/|$)"), "PATH may not contain '..' segments"),
        # a claim's name is at most 253 characters: the Deployment took a longer one, whose pods then waited
        # for a claim no one can make
        (re.compile(r"^pvc://[^/]{254}"), "CLAIM is a PersistentVolumeClaim's name, at most 253 characters"),
    ))
_MODEL_NAME = _Format(re.compile(r"^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$"),
                      "must be letters, digits, '_', '-' and '.', and not dots alone")
# A Prometheus base URL: http(s), optional user:password@, a host name or [IPv6] address, an optional
# port and path; no query or fragment (the client appends /api/v1/query to it).
# No backslash anywhere: with one before the @ (http://evil<backslash>@prom:9090), urllib's urlsplit reads the
# host as prom and requests (urllib3) as evil -- a URL checked as one host and queried at another.
# A host in brackets is an IPv6 address (Python's urlsplit refuses an IPv4 one there, and ":::"): 2-7 groups
# and a colon, then a last group or an IPv4 address; "::" at most once (forbidden, below).
_HTTP_URL = _Format(re.compile(r"^https?://([^/?#@\s\\]+@)?([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|"
                               r"\[([0-9A-Fa-f]{0,4}:){2,7}([0-9A-Fa-f]{0,4}|[0-9]{1,3}(\.[0-9]{1,3}){3})\])"
                               r"(:[0-9]{1,5})?(/[^?#\s\\]*)?$"),
                    "must be an http:// or https:// URL: [USER:PASSWORD@]HOST[:PORT][/PATH], no query or fragment",
                    forbidden=(
                        # In the CRD too, not only in the operator: `kubectl apply` took port 0 or 99999, and the
                        # object was then refused in status. Five digits at most (above): 0s, or 65536-99999.
                        (re.compile(r"^https?://([^/?#@\s\\]+@)?([-A-Za-z0-9.]*|\[[0-9A-Fa-f:.]+\]):(0+|6553[6-9]|"
                                    r"655[4-9][0-9]|65[6-9][0-9]{2}|6[6-9][0-9]{3}|[7-9][0-9]{4})(/|$)"),
                         "the port must be 1-65535"),
                        # the client adds the API's path: this one doubled, the queries went to
                        # .../api/v1/query/api/v1/query
                        (re.compile(r"/api/v1(/query|/query_range)?/?$"),
                         "give the server's base URL, without /api/v1, /api/v1/query or /api/v1/query_range: the "
                         "client adds the API's path"),
                        (re.compile(r"^https?://([^/?#@\s\\]+@)?\[[^\]]*(:::|::.*::)"),
                         "an IPv6 address has \"::\" at most once"),
                    ))
# Where each ModelSpec field's format is checked (``ModelSpec._formats``).
_MODEL_FORMATS = {"name": _MODEL_NAME, "storage_uri": _STORAGE_URI}


def _cel(rules: tuple[Rule, ...]) -> dict[str, Any]:
    return {"x-kubernetes-validations": cel_block(rules)}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )


def _free_form(description: str, *, array: bool = False) -> Any:
    """A Kubernetes-native sub-object (resources, tolerations...) kept verbatim."""
    extra: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if array:
        return Field(default_factory=list, description=description,
                     json_schema_extra={"items": {"type": "object", **extra}})
    return Field(default_factory=dict, description=description, json_schema_extra=extra)


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
        default=1, ge=1, le=64, description="Model instances per GPU (Triton instance_group count).",
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
        "The settings in force are in status.batching; the spec's own values are where tuning starts.",
    )
    max_queue_delay_microseconds: int | None = Field(
        default=None, ge=0, le=MAX_QUEUE_DELAY_US,
        description="The largest queue delay the tuner may use. Unset: what the p95 target leaves after "
        "the model's full-batch time.",
    )
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, max_length=16, json_schema_extra={"items": {"type": "integer", "minimum": 1}},
        description="The preferred batch sizes the tuner may choose from; each <= model.maxBatchSize. "
        "Empty: any size up to model.maxBatchSize.",
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
        default="REJECT", description="What happens to a request whose queue timeout expires.",
    )
    auto_tune: AutoTuneSpec | None = Field(
        default=None, description="Online tuning of the queue delay and preferred batch sizes; omit to keep "
        "the values above.",
    )

    _positive = field_validator("preferred_batch_sizes")(_positive_batch_sizes)


def _string_map(description: str, max_value: int, rules: list[Any]) -> Any:
    """A map of strings on the pods (labels, annotations): bounded, as the CRD's rules iterate it."""
    return Field(default_factory=dict, max_length=MAX_POD_METADATA, description=description,
                 json_schema_extra={"maxProperties": MAX_POD_METADATA,
                                    "additionalProperties": {"type": "string", "maxLength": max_value},
                                    "x-kubernetes-validations": rules})


# What Go's strings.TrimSpace trims (unicode.IsSpace), as CEL's trim() does. The API server checks a
# container's image for it only when it creates a pod, not in a Deployment's template: an image with a
# final newline (a YAML block scalar, `image: |`) was admitted and applied, and its ReplicaSet then
# made no pods.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# The ports the operator gives tritonserver (render.triton_containers: Triton's defaults) and relies on:
# the probes and the Service use the HTTP and gRPC ports, Prometheus scrapes the metrics port. A later
# flag wins in tritonserver (checked with the pytriton build: --http-port=18000 ... --http-port=19000
# served HTTP on 19000), so another port in extraArgs left the pods never ready. The same port again is
# harmless; as two arguments ("--http-port", "8000") the value is not seen, and the flag is refused.
# (--model-repository may be given again: it adds a repository.)
OPERATOR_PORTS = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": 8002}
_OPERATOR_PORTS_TEXT = ", ".join(f"{f}={v}" for f, v in OPERATOR_PORTS.items())
_OPERATOR_FLAGS_MESSAGE = (f"may not set other ports than the operator's ({_OPERATOR_PORTS_TEXT}): the probes, the "
                           f"Service and the metrics scrape use them")
# The CRD bounds the list and its items: its rule iterates them (the API server estimates the cost).
MAX_EXTRA_ARGS = 256
MAX_EXTRA_ARG = 4096
_IMAGE_SPACE_MESSAGE = "must not begin or end with whitespace (Kubernetes refuses such an image when it makes the pods)"
_TRIMMED_IMAGE: JsonDict = {"x-kubernetes-validations": [{"rule": "self == self.trim()",
                                                          "message": _IMAGE_SPACE_MESSAGE}]}


def _label_map(v: dict[str, str]) -> dict[str, str]:
    """``_LABEL_MAP_RULE``'s Python twin."""
    for key, value in v.items():
        if not is_label_key(key) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"{key!r}: {value!r}: {_NODE_SELECTOR_MESSAGE}")
    return v


class RuntimeSpec(_Model):
    image: str = Field(default=DEFAULT_TRITON_IMAGE, min_length=1, description="Triton server image.",
                       json_schema_extra=_TRIMMED_IMAGE)
    gpus: int = Field(
        default=1, ge=0, le=16, description="GPUs per replica: the limit of runtime.gpuResource (nvidia.com/gpu); 0 "
        "runs CPU instances (KIND_CPU).",
    )
    gpu_resource: str = Field(
        default=GPU_RESOURCE, max_length=317, json_schema_extra=_EXTENDED_RESOURCE.schema(),
        description="The extended resource runtime.gpus counts: nvidia.com/gpu (whole GPUs, or MIG slices under the "
        "device plugin's single strategy), a MIG profile under its mixed strategy (nvidia.com/mig-1g.10gb), or "
        "time-sliced GPUs the plugin renamed (nvidia.com/gpu.shared). Triton sees each as a GPU: KIND_GPU. A "
        "change rolls the pods and forgets the learned model speed.",
    )
    fetch_image: str | None = Field(
        default=None, min_length=1, max_length=1024,
        description="Image of the init container that puts the model in place: for s3:// it runs `aws s3 cp`, for "
        "gs:// `gcloud storage cp`, for pvc:// /bin/sh and ln. Unset: amazon/aws-cli:2.17.0, "
        "gcr.io/google.com/cloudsdktool/google-cloud-cli:stable and busybox:1.36. Set it to a mirror (an "
        "air-gapped registry, an allow-listed one) or a digest. A change rolls the pods.",
        json_schema_extra=_TRIMMED_IMAGE)
    resources: dict[str, Any] = _free_form(
        "Container resources (requests/limits), merged with the GPU limit. The model-fetch init container gets "
        "the same cpu, memory and ephemeral-storage (a ResourceQuota may require them of every container).")
    node_selector: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR, description="Pod nodeSelector.",
        json_schema_extra={"maxProperties": MAX_NODE_SELECTOR,
                           "additionalProperties": {"type": "string", "maxLength": 63},
                           "x-kubernetes-validations": [_LABEL_MAP_RULE]})
    pod_labels: dict[str, str] = _string_map(
        "Labels added to the Triton pods (cost allocation, policy selectors). The InferenceService's own labels "
        "are not copied. A change rolls the pods.", 63, _POD_LABELS_RULES)
    pod_annotations: dict[str, str] = _string_map(
        "Annotations added to the Triton pods (e.g. sidecar.istio.io/inject). The InferenceService's own "
        "annotations are not copied. A change rolls the pods.", MAX_ANNOTATION_VALUE, _POD_ANNOTATIONS_RULES)
    tolerations: list[dict[str, Any]] = _free_form("Pod tolerations, e.g. for nvidia.com/gpu taints.", array=True)
    affinity: dict[str, Any] = _free_form(
        "Pod affinity (a Kubernetes Affinity: nodeAffinity, podAffinity, podAntiAffinity), e.g. node affinity "
        "for a GPU product label. A change rolls the pods; a change of nodeAffinity also forgets the learned "
        "model speed, as one of nodeSelector does.")
    topology_spread_constraints: list[dict[str, Any]] = _free_form(
        "Pod topologySpreadConstraints, e.g. {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
        "whenUnsatisfiable: ScheduleAnyway} so the warm floor does not sit in one zone or on one node. A "
        f"constraint without labelSelector is given the fleet's own ({LABEL}: NAME), so it counts this "
        "InferenceService's pods. A change rolls the pods.", array=True)
    env: list[dict[str, Any]] = _free_form("Extra container env (Kubernetes EnvVar objects).", array=True)
    extra_args: list[str] = Field(
        default_factory=list, max_length=MAX_EXTRA_ARGS, description="Extra tritonserver flags, appended last. "
        f"Not other ports than the operator's: {_OPERATOR_PORTS_TEXT}.",
        json_schema_extra={"items": {"type": "string", "maxLength": MAX_EXTRA_ARG}, "x-kubernetes-validations": [
            # startsWith and ==, not matches: the API server's cost estimate of six regexes over 256 items of
            # 4096 characters went past its budget
            {"rule": "self.all(a, " + " && ".join(
                f"!((a == '{f}' || a.startsWith('{f}=') || a.startsWith('{f} ')) && a != '{f}={v}' && a != '{f} {v}')"
                for f, v in OPERATOR_PORTS.items()) + ")",
             "message": _OPERATOR_FLAGS_MESSAGE}]})
    image_pull_secrets: list[str] = Field(
        default_factory=list, max_length=MAX_PULL_SECRETS, description="Names of image pull Secrets.",
        json_schema_extra={"items": {"type": "string", "maxLength": 253}, "x-kubernetes-validations": [
            {"rule": f"self.all(s, s.matches(r'{DNS1123_SUBDOMAIN.pattern}'))",
             "message": f"each {_SUBDOMAIN.message}"}]})
    service_account_name: str | None = Field(
        default=None, max_length=253, json_schema_extra=_SUBDOMAIN.schema(),
        description="ServiceAccount for the pods (e.g. with workload identity for s3/gs).",
    )
    security_context: dict[str, Any] = _free_form(
        "Pod securityContext (a Kubernetes PodSecurityContext), over the default seccompProfile RuntimeDefault. "
        "A namespace at the restricted Pod Security level also wants runAsNonRoot: true, and NGC Triton images "
        "start as root: e.g. {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000} (their triton-server user).")
    startup_timeout_seconds: int = Field(
        default=DEFAULT_STARTUP_TIMEOUT_S, ge=STARTUP_PROBE_PERIOD_S, le=86400,
        description="How long tritonserver may take to load and warm up the model before the kubelet restarts it "
        f"(the startup probe's budget, checked every {STARTUP_PROBE_PERIOD_S} s). The init container's download "
        "is not counted. Raise it for a model whose load (a large TensorRT engine) takes longer. Unless "
        "runtime.progressDeadlineSeconds is set, the Deployment's progressDeadlineSeconds is this plus 600 s for "
        "the image pull and the download. A change rolls the pods.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, json_schema_extra=_SUBDOMAIN.schema(),
        description="PriorityClass of the pods. With one above the cluster's batch work, the scheduler preempts "
        "lower-priority pods for a replica that finds no free GPU, so a burst's scale-up and the warm floor are "
        "not left Pending behind training jobs. A PriorityClass that does not exist leaves the pods uncreated "
        "(Ready=False, PodsNotCreated). A change rolls the pods.",
    )
    response_cache_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024 * 1024, le=JSON_INT_MAX,
        description="Size of Triton's local response cache, used when model.responseCache is true.",
    )
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=1, le=86400,
        description="Seconds a replica has to stop (the pod's terminationGracePeriodSeconds). It first keeps "
        f"serving while clients move away: a preStop wait of {ENDPOINTS_LAG_S} s for the endpoints to update, "
        "plus one runtime.grpcMaxConnectionAgeSeconds (+10%, at most "
        f"{MAX_DRAINED_AGE_S} s) for gRPC clients to reconnect elsewhere. Then tritonserver finishes the "
        "requests it holds, and refuses new ones, until its exit timeout (--exit-timeout-secs, rendered as "
        f"the rest less {KILL_MARGIN_S} s before the kubelet's SIGKILL). Unset: the wait plus Triton's "
        f"default {TRITON_EXIT_TIMEOUT_S} s plus {KILL_MARGIN_S} s (51 s at the default connection age). "
        "Raise it for requests that run longer. A change rolls the pods.",
    )
    shm_size: str = Field(
        default="1Gi", min_length=1, max_length=64,
        description="Size of the pods' /dev/shm (a memory-backed emptyDir's sizeLimit), a Kubernetes quantity: "
        "Triton's python backend and its shared-memory requests live there. Raise it for a python backend that "
        "passes large tensors (an LLM in vLLM) or for NCCL across several GPUs; it counts against the "
        "container's memory limit. A change rolls the pods.",
        json_schema_extra=_SIZE.schema())
    progress_deadline_seconds: int | None = Field(
        default=None, ge=1, le=7 * 86400,
        description="Seconds a rollout's new pods may take to become ready before the rollout is reported "
        "stuck (the Deployment's progressDeadlineSeconds; Ready=False RolloutStuck, and the batching tuner "
        "puts back the settings it tried). It counts the image pull and the model's download as well as "
        "the load and warmup, so it must be longer than runtime.startupTimeoutSeconds. Unset: "
        "startupTimeoutSeconds plus Kubernetes' default 600 s for the pull and the download. Raise it for a "
        "large image or model.",
    )
    grpc_max_connection_age_seconds: int = Field(
        default=DEFAULT_GRPC_MAX_CONNECTION_AGE_S, ge=0, le=86400,
        description="Triton closes each gRPC connection at this age (--grpc-max-connection-age, with gRPC's "
        "+-10% jitter; requests in flight finish), and the client reconnects through the Service, where "
        "kube-proxy picks a replica. The Service balances connections, not requests, so without it a gRPC "
        "client stays on the replicas it first reached and new replicas get none of its traffic. 0 leaves "
        "connections open (a mesh that balances each request). Not rendered for "
        f"{TRITON_IMAGE_REPOSITORY} tags before 24.01, which lack the flag.",
    )

    @property
    def progress_deadline(self) -> int:
        """The Deployment's progressDeadlineSeconds."""
        if self.progress_deadline_seconds is not None:
            return self.progress_deadline_seconds
        return self.startup_timeout_seconds + PULL_AND_FETCH_S

    @field_validator("shm_size")
    @classmethod
    def _shm_size(cls, v: str) -> str:
        _SIZE.check(v)
        try:
            parse_quantity(v)
        except (ValueError, TypeError):
            raise ValueError(_SIZE.message) from None
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, v: list[str]) -> list[str]:
        for arg in v:
            if len(arg) > MAX_EXTRA_ARG:
                raise ValueError(f"each at most {MAX_EXTRA_ARG} characters")
            if any((arg == f or arg.startswith((f"{f}=", f"{f} "))) and arg not in (f"{f}={v}", f"{f} {v}")
                   for f, v in OPERATOR_PORTS.items()):
                raise ValueError(f"{arg[:60]!r}: {_OPERATOR_FLAGS_MESSAGE}")
        return v

    @field_validator("image", "fetch_image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and v != v.strip(GO_SPACE):
            raise ValueError(_IMAGE_SPACE_MESSAGE)
        return v

    @field_validator("gpu_resource")
    @classmethod
    def _gpu_resource(cls, v: str) -> str:
        return _EXTENDED_RESOURCE.check(v) or v

    @field_validator("service_account_name", "priority_class_name")
    @classmethod
    def _subdomain(cls, v: str | None) -> str | None:
        return _SUBDOMAIN.check(v)

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
                raise ValueError(f"each {_SUBDOMAIN.message} of at most 253 characters: not {name[:60]!r}")
        return v

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, v: dict[str, str]) -> dict[str, str]:
        return _label_map(v)

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in _label_map(v):
            if key.startswith(OPERATOR_PREFIX) or key in OPERATOR_POD_LABELS:
                raise ValueError(f"{key!r}: {_RESERVED_MESSAGE}")
        return v

    @field_validator("pod_annotations")
    @classmethod
    def _pod_annotations(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not is_label_key(key):
                raise ValueError(f"{key!r}: {_ANNOTATION_KEY_MESSAGE}")
            if key.startswith(OPERATOR_PREFIX):
                raise ValueError(f"{key!r}: {_RESERVED_ANNOTATION_MESSAGE}")
            if len(value) > MAX_ANNOTATION_VALUE:
                raise ValueError(f"{key!r}: values must be at most {MAX_ANNOTATION_VALUE} characters")
        if sum(len(k.encode()) + len(x.encode()) for k, x in v.items()) > MAX_POD_ANNOTATIONS_BYTES:
            raise ValueError(_ANNOTATIONS_SIZE_MESSAGE)
        return v

    @field_validator("resources")
    @classmethod
    def _quantities(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Each request and limit is a Kubernetes quantity: the CRD keeps the block free-form, and a
        value the API server cannot parse would otherwise surface only as a refused Deployment."""
        for kind in ("limits", "requests"):
            block = v.get(kind)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise ValueError(f"{kind} must be a map of resource name to quantity")
            for resource, quantity in block.items():
                try:
                    if isinstance(quantity, bool) or not _QUANTITY.fullmatch(str(quantity)):
                        raise ValueError(quantity)
                    parse_quantity(quantity)
                except (ValueError, TypeError):
                    raise ValueError(f"{kind}.{resource}: {quantity!r} is not a Kubernetes quantity "
                                     "(e.g. 500m, 2, 1536Mi)") from None
                if parse_quantity(quantity) < 0:  # the API server refuses the Deployment's pod template
                    raise ValueError(f"{kind}.{resource}: {quantity!r} must be at least 0")
        requests, limits = v.get("requests") or {}, v.get("limits") or {}
        for resource in sorted(set(requests) & set(limits)):  # as the API server checks a container
            if parse_quantity(requests[resource]) > parse_quantity(limits[resource]):
                raise ValueError(f"requests.{resource}: {requests[resource]} is more than its limit "
                                 f"{limits[resource]}")
        return v


class ScaleUpPolicy(_Model):
    stabilization_seconds: int = Field(
        default=0, ge=0, le=3600,
        description="Scale up to the lowest recommendation of this look-back window (0 = act at once).",
    )
    max_step: int = Field(default=4, ge=1, le=1000, description="Most replicas added per tick.")


class ScaleDownPolicy(_Model):
    stabilization_seconds: int | None = Field(
        default=None, ge=0, le=3600,
        description="Scale down only to the highest recommendation of this look-back window. "
        "Unset: learned -- one cold start (pods' creation-to-ready time) and one tick, longer while the "
        "request rate keeps jumping (the longest gap between recent jumps).",
    )
    max_step: int = Field(default=1, ge=1, le=1000, description="Most replicas removed per tick.")


def _object_default() -> dict[str, Any]:
    # `default: {}` lets the API server fill the nested scalar defaults when the block is omitted.
    return {"default": {}}


def url_without_credentials(url: str) -> str:
    """``url`` with its credentials (``http://user:pass@host``) replaced by ``***``, as messages, logs,
    metric labels and the Deployment's record of the spec show it: they are readable by more people
    than the InferenceService (``view`` reads Deployments). Not a URL at all: ``***``."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    except ValueError:  # nothing in it is known to be safe to show
        return "***"


# The Prometheus API's own path at the end of a URL (the chart's Deployment template refuses the same)
_API_PATH = _HTTP_URL.forbidden[1][0]


def prometheus_base_url(url: str) -> str:
    """``url`` if it is a Prometheus base URL (``_HTTP_URL``: a port within 1-65535, no API path), else
    ValueError with the reason: the one check for ``spec.scaling.prometheus.url`` and ``tritonscale run
    --prometheus-url``. The CRD's rules say the same, but for the base URL to give, which only this
    names."""
    try:
        parts = urlsplit(url) if _HTTP_URL.pattern.fullmatch(url) else None  # (urlsplit raises on some others)
    except ValueError:
        _HTTP_URL.check(url)  # the CRD's words for it ("::" twice), where it has them
        raise
    if parts is not None and (api := _API_PATH.search(parts.path)):
        base = urlunsplit(parts._replace(path=parts.path[:api.start()]))
        raise ValueError(f"give the server's base URL, without {api.group().rstrip('/')}: "
                         f"{url_without_credentials(base)}")
    _HTTP_URL.check(url)
    return url


class PrometheusSpec(_Model):
    url: str | None = Field(
        # a bound for the API server's estimate of its rules' cost (a URL's length is otherwise the request's)
        default=None, max_length=2048, json_schema_extra=_HTTP_URL.schema(),
        description="Per-object Prometheus URL, overriding the operator's --prometheus-url.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else prometheus_base_url(v)


class ScalingSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_cel(SCALING_RULES))

    min_replicas: int = Field(
        default=1, ge=1, le=1000,
        description="Replicas never scaled below (the warm floor is this plus warmBuffer). At least 1: "
        "tritonscale does not scale to zero "
        "(with no pod there is no Triton metric to wake on, and requests would fail until someone scaled it by hand).",
    )
    max_replicas: int = Field(default=10, ge=1, le=1000, description="Ceiling on replicas (and GPUs x runtime.gpus).")
    target_p95_milliseconds: float | None = Field(
        default=None, gt=0, le=600_000,
        description="p95 latency objective. Without it the service is held at minReplicas + warmBuffer. "
                    "With batching enabled and no batching.queueTimeoutMicroseconds, Triton's queue timeout "
                    "follows it (twice the target, and at least the queue delay plus the target, in config.pbtxt), "
                    "so changing it rolls the pods, each a "
                    "cold start.",
    )
    interval_seconds: int = Field(
        default=15, ge=1, le=600,
        description="Seconds between autoscaler ticks; an edit of spec.scaling is acted on at once, not at the "
                    "next tick.")
    window_seconds: int = Field(
        default=60, ge=5, le=3600,
        description="Range of the rate() windows for request rate and queue time; the autoscaler plans from the "
                    "mean arrival rate over it (or the latest, if higher).",
    )
    tolerance: float = Field(
        default=0.1, ge=0, le=1,
        description="Hysteresis: no scale-down while the replicas run within this share of full (at least "
                    "1 - tolerance of what they are planned to serve), nor to a count that would run closer to "
                    "full; a p95 up to target x (1 + tolerance) is no breach. Rising load scales up at once.",
    )
    scale_up: ScaleUpPolicy = Field(default_factory=ScaleUpPolicy, json_schema_extra=_object_default(),
                                    description="Scale-up stabilization (default 0 s) and step (default 4).")
    scale_down: ScaleDownPolicy = Field(default_factory=ScaleDownPolicy, json_schema_extra=_object_default(),
                                        description="Scale-down stabilization (default: learned) and step (default 1).")
    panic_threshold: float = Field(
        default=2.0, ge=1, le=100,
        description="Deprecated and ignored: a p95 breach now adds one replica (with a queue behind it) "
        "instead of scaling by p95/target; kept so existing objects stay valid.",
    )
    warm_buffer: int = Field(default=0, ge=0, le=100, description="Extra warm replicas kept above minReplicas.")
    fallback_replicas: int | None = Field(
        default=None, ge=0, le=1000,
        description="Replicas to run after failureThreshold consecutive metric failures; unset = hold. A "
        "recommendation like any other: scaleDown's window and step apply, so a source that fails off and on "
        "does not swing the fleet.",
    )
    failure_threshold: int = Field(
        default=3, ge=1, le=1000, description="Consecutive failures before fallbackReplicas applies.",
    )
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec, json_schema_extra=_object_default(),
                                       description="Metric source overrides.")

    @property
    def floor(self) -> int:
        """Warm floor including the buffer: the autoscaler never goes below it."""
        return min(self.min_replicas + self.warm_buffer, self.max_replicas)


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
