"""What every part of the InferenceService spec shares: the API's names (group, kind, the label and
annotations every layer agrees on), the bounds and Triton defaults its fields use, and the models'
base class. ``tritonscale.api.spec`` re-exports the public names; import them from there.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tritonscale.api.rules import Rule, cel_block

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

# The GPU resource: ``runtime.gpus`` renders it as the container's limit.
GPU_RESOURCE = "nvidia.com/gpu"
# The startup probe checks the model's ready endpoint every 5 s; the default budget, 10 min (120 checks), is
# for download-free load and warmup, which for large TensorRT engines takes minutes.
STARTUP_PROBE_PERIOD_S = 5
DEFAULT_STARTUP_TIMEOUT_S = 600


def _cel(rules: tuple[Rule, ...]) -> dict[str, Any]:
    return {"x-kubernetes-validations": cel_block(rules)}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True,
        allow_inf_nan=False,  # NaN failed "le" with the wrong reason, and JSON cannot carry it to the API server
    )


def _free_form(description: str, *, array: bool = False) -> Any:
    """A Kubernetes-native sub-object (resources, tolerations...) kept verbatim."""
    extra: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if array:
        return Field(default_factory=list, description=description,
                     json_schema_extra={"items": {"type": "object", **extra}})
    return Field(default_factory=dict, description=description, json_schema_extra=extra)


def _object_default() -> dict[str, Any]:
    # `default: {}` lets the API server fill the nested scalar defaults when the block is omitted.
    return {"default": {}}
