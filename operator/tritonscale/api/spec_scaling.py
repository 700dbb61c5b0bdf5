"""The spec's scaling block (ScalingSpec): the warm floor, the ceiling, the latency target and the
autoscaler's policy (its step and stabilization policies, its metric source).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator

from tritonscale.api.rules import SCALING_RULES
from tritonscale.api.spec_base import _cel, _Model, _object_default
from tritonscale.api.spec_formats import _HTTP_URL, prometheus_base_url


class ScaleUpPolicy(_Model):
    stabilization_seconds: int = Field(
        default=0, ge=0, le=3600,
        description="Scale up to the lowest recommendation of this look-back window (0 = act at once).",
    )
    # 4, the Kubernetes HPA's 4 pods per 15 s. The suite (session 88, the simulator README's fresher-rate
    # entry): unlimited 99 -> 97/126 (a burst's first readings overshoot, and this damps them); the HPA's
    # whole default, max(4 pods, 100%), 99 -> 99, no scenario moved.
    max_step: int = Field(default=4, ge=1, le=1000, description="Most replicas added per tick.")


class ScaleDownPolicy(_Model):
    stabilization_seconds: int | None = Field(
        default=None, ge=0, le=3600,
        description="Scale down only to the highest recommendation of this look-back window. Set, it is the "
        "whole hold, as the HPA's is, and the burst memory is off. Unset: learned -- one cold start (pods' "
        "creation-to-ready time; 60 s until a pod has told it) and one tick, at least two ticks; and after "
        "jumps of the request rate its recent readings did not foresee (two, or one where a cold start and a "
        "tick exceed 90 s), the burst memory keeps the highest need it saw for ten cold starts after the last "
        "jump, or twice the longest gap between jumps, at most 30 minutes -- and the whole 30 once the jumps "
        "remembered have cost a tenth of that in missed time (a cold start and a tick each).",
    )
    # 1: the suite (session 88) with 2 or unlimited: 99 -> 99/126 either way, -0.2% replica-hours in the
    # scenarios that moved, two windows lost (the simulator README's fresher-rate entry).
    max_step: int = Field(default=1, ge=1, le=1000, description="Most replicas removed per tick.")


class PrometheusSpec(_Model):
    url: str | None = Field(
        # a bound for the API server's estimate of its rules' cost (a URL's length is otherwise the request's)
        default=None, max_length=2048, json_schema_extra=_HTTP_URL.schema(),
        description="Per-object Prometheus URL, overriding the operator's --prometheus-url. An operator run "
        "with --allowed-prometheus-url asks only those: another is never queried, and each tick counts as a "
        "metric failure (MetricsAvailable=False, PrometheusNotAllowed).",
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
    max_replicas: int = Field(
        default=10, ge=1, le=1000,
        description="Ceiling on the replicas the autoscaler asks for (and GPUs x runtime.gpus). A rollout's surge "
        "pods come on top: a quarter more, or the whole fleet again for a batching tuner's change.")
    target_p95_milliseconds: float | None = Field(
        default=None, gt=0, le=600_000,
        description="p95 latency objective. Without it the service is brought to minReplicas + warmBuffer at "
                    "the scale-down pace (scaleDown's window and step) and held there, and fallbackReplicas and "
                    "the batching tuner do nothing. "
                    "With batching enabled and no batching.queueTimeoutMicroseconds, Triton's queue timeout "
                    "follows it (twice the target, and at least the queue delay plus the target, in config.pbtxt), "
                    "so changing it rolls the pods, each a "
                    "cold start.",
    )
    interval_seconds: int = Field(
        default=15, ge=1, le=600,
        description="Seconds between autoscaler ticks; an edit of spec.scaling is acted on at once, not at the "
                    "next tick.")
    # 60: the suite (session 88, for tritonscale alone) with 30 s 99 -> 95/126, with 120 s 99 -> 97 (the
    # simulator README's fresher-rate entry).
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
        description="Replicas to run after failureThreshold consecutive metric failures, while a "
        "targetP95Milliseconds is set; unset = hold. A recommendation like any other: the scale-up and "
        "scale-down windows and steps apply, so a source that fails off and on does not swing the fleet.",
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
