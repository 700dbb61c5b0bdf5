"""InferenceService status and Kubernetes-style conditions."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Condition types.
READY = "Ready"
SPEC_VALID = "SpecValid"  # False carries spec errors; the operator then creates nothing
SCALING = "Scaling"  # reason/message explain the last autoscaler decision
METRICS_AVAILABLE = "MetricsAvailable"
SCHEDULABLE = "Schedulable"  # False (reason Unschedulable) while the scheduler cannot place pods


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.")
    observed_generation: Optional[int] = None


class Endpoints(_Model):
    http: Optional[str] = Field(default=None, description="In-cluster HTTP/REST (KServe v2) endpoint.")
    grpc: Optional[str] = Field(default=None, description="In-cluster gRPC endpoint.")


class InferenceServiceStatus(_Model):
    observed_generation: Optional[int] = None
    model: Optional[str] = Field(default=None, description="Resolved Triton model name.")
    replicas: Optional[int] = Field(default=None, description="Deployment replicas (including starting ones).")
    ready_replicas: Optional[int] = Field(default=None, description="Replicas whose model is loaded and warm.")
    desired_replicas: Optional[int] = Field(default=None, description="Replicas the autoscaler last asked for.")
    p95_milliseconds: Optional[float] = Field(default=None, description="Observed p95 latency.")
    requests_per_second: Optional[float] = Field(default=None, description="Observed request rate.")
    last_scale_time: Optional[str] = Field(default=None, description="When the autoscaler last changed replicas.")
    endpoints: Optional[Endpoints] = None
    conditions: list[Condition] = Field(default_factory=list)
    scaling_state: Optional[dict] = Field(
        default=None,
        description="Autoscaler memory (recommendation history, failure count) so a restart loses nothing.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
