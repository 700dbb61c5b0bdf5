"""InferenceService status: the model every status write is built from, Kubernetes-style
conditions, and which writer owns which field (``FIELD_OWNERS``, ``CONDITION_OWNERS``).

A writer builds an :class:`InferenceServiceStatus` with only the fields it owns and sends
``status_patch(live status, that model)``: the fields whose value changed, or nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tritonscale.api.merge_patch import merge_patch
from tritonscale.api.rules import timeout_outlasts
from tritonscale.api.spec import MAX_QUEUE_DELAY_US, InferenceServiceSpec

# Condition types.
READY = "Ready"
SPEC_VALID = "SpecValid"  # False carries spec errors; the operator then creates nothing
# SpecValid=False's reason when the API server refused the children as rendered (a dry run of each write)
CHILD_REJECTED = "ChildRejected"
SCALING = "Scaling"  # reason/message explain the last autoscaler decision
METRICS_AVAILABLE = "MetricsAvailable"
# False while the scheduler cannot place pods (reason Unschedulable) or the ReplicaSet may not create them
# (PodsNotCreated: the Deployment's ReplicaFailure, e.g. a quota on nvidia.com/gpu)
SCHEDULABLE = "Schedulable"
# True while an operator upgrade's new pod template waits for other fleets' rollouts
# (reconcile.upgrade_rollouts); set only once a pass has waited
UPGRADE_PENDING = "UpgradePending"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


ConditionStatus = Literal["True", "False", "Unknown"]


MESSAGE_MAX_CHARS = 32768  # a condition's message: the CRD's maxLength (Kubernetes' own conditions' limit)


def fitted_message(message: str) -> str:
    """``message`` within MESSAGE_MAX_CHARS, cut with a note of how much was: a longer one made the API
    server refuse the whole status write, so no condition said anything."""
    if len(message) <= MESSAGE_MAX_CHARS:
        return message
    note = f" ... ({len(message) - MESSAGE_MAX_CHARS + 64} more characters cut)"
    return message[:MESSAGE_MAX_CHARS - 64] + note[:64]


class Condition(_Model):
    type: str = Field(description="SpecValid, Ready, Scaling, MetricsAvailable, Schedulable or UpgradePending.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024,
                        description="Why, in one CamelCase word (e.g. LoadIncreased, InvalidSpec).")
    message: str = Field(default="", max_length=MESSAGE_MAX_CHARS,
                         description="Why, in words, with the figures behind it.")
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.")
    observed_generation: int | None = Field(default=None,
                                            description="The metadata.generation this condition was set for.")


class Endpoints(_Model):
    http: str | None = Field(default=None, description="In-cluster HTTP/REST (KServe v2) endpoint.")
    grpc: str | None = Field(default=None, description="In-cluster gRPC endpoint.")


class BatchingStatus(_Model):
    """The dynamic-batching settings in force: what config.pbtxt carries. While ``spec.batching.autoTune``
    is enabled and the tuner has changed them (``source: tuner``) the reconciler renders these two values
    instead of the spec's; otherwise they are the spec's, shown (``source: spec``)."""

    max_queue_delay_microseconds: int = Field(description="Queue delay in force (config.pbtxt).")
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, description="Preferred batch sizes in force (config.pbtxt); empty: none.",
    )
    source: Literal["spec", "tuner"] = Field(
        description="spec: the spec's own values (the tuner has not changed them); tuner: chosen by the tuner.",
    )
    last_change_time: str | None = Field(default=None, description="When the settings in force last changed.")
    reason: str = Field(default="", description="Why these settings (CamelCase), e.g. MoreCapacity.")
    message: str = Field(default="", description="The numbers behind the reason.")
    tuner_state: dict[str, Any] | None = Field(
        default=None, description="Tuner memory (candidate and since when), so a restart loses nothing.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


def auto_tune_enabled(spec: InferenceServiceSpec) -> bool:
    """The batching tuner owns the queue delay and preferred sizes (``batching.autoTune.enabled``)."""
    b = spec.batching
    return b is not None and b.enabled and b.auto_tune is not None and b.auto_tune.enabled


def batching_field(name: str) -> str:
    """The path of a BatchingStatus field in the object, as Kopf's field handlers take it:
    ``status.batching.maxQueueDelayMicroseconds`` for ``max_queue_delay_microseconds``."""
    return f"status.{InferenceServiceStatus.model_fields['batching'].alias}.{BatchingStatus.model_fields[name].alias}"


@dataclass(frozen=True)
class BatcherInForce:
    """The tuner's queue delay and preferred sizes (``status.batching``), in force instead of the spec's."""

    max_queue_delay_microseconds: int
    preferred_batch_sizes: tuple[int, ...]


def tuned_batcher(spec: InferenceServiceSpec, status: Mapping[str, Any] | None) -> BatcherInForce | None:
    """The queue delay and preferred sizes the tuner chose, from ``status.batching``, while
    ``batching.autoTune`` is enabled and the tuner has chosen them (``source: tuner``), brought within
    a spec edited since (``within_spec``); else None: the spec's own values are in force. The one
    reading of status.batching: the reconciler renders config.pbtxt from it and the autoscaler tick
    plans capacity from it, so the two cannot disagree."""
    live = (status or {}).get("batching")
    if not auto_tune_enabled(spec) or not isinstance(live, Mapping) or live.get("source") != "tuner":
        return None
    try:
        tuned = BatcherInForce(int(live["maxQueueDelayMicroseconds"]),
                               tuple(int(p) for p in live.get("preferredBatchSizes") or ()))
    except (KeyError, TypeError, ValueError):
        return None  # hand-edited or corrupt: the spec's values, and the tuner starts again from them
    return within_spec(spec, tuned)


# status.batching.tunerState's flag that the rollout of the tuner's settings in force starts every new pod at
# once (the batching tuner's ``TunerState.at_once``, written under ``batching_tuner.AT_ONCE_KEY``).
ROLLOUT_AT_ONCE_KEY = "rolloutAtOnce"


def rollout_at_once_field() -> str:
    """The path of that flag in the object, as Kopf's field handlers take it:
    ``status.batching.tunerState.rolloutAtOnce``."""
    return f"{batching_field('tuner_state')}.{ROLLOUT_AT_ONCE_KEY}"


def rollout_at_once(spec: InferenceServiceSpec, status: Mapping[str, Any] | None) -> bool:
    """Whether the tuner's settings in force (``tuned_batcher``) roll out to every replica at once: the
    tuner changed them (each of its changes sets the flag; until session 101 only one away from settings
    predicted to miss the target did), and their rollout has not ended (the tuner clears the flag then).
    Anything but a literal true, or settings not the tuner's, is the gradual default."""
    if tuned_batcher(spec, status) is None:
        return False
    state = ((status or {}).get("batching") or {}).get("tunerState")
    return isinstance(state, Mapping) and state.get(ROLLOUT_AT_ONCE_KEY) is True


def within_spec(spec: InferenceServiceSpec, tuned: BatcherInForce) -> BatcherInForce | None:
    """The tuner's settings within a spec edited since they were chosen: the delay capped at a lowered
    autoTune.maxQueueDelayMicroseconds, preferred sizes above a smaller model.maxBatchSize or outside
    autoTune.preferredBatchSizes dropped -- the bounds the tuner may not cross, kept as close to its
    choice as they allow (the tuner's own ``Bounds.within``). Rendering them as they were would give
    Triton a config it refuses ("preferred batch size must be <= max batch size"): new pods would never
    load the model. None where no cap fits: a delay out of range, or one a REJECT queue timeout lowered
    since no longer outlasts with no autoTune delay bound to cap it at -- the spec's own values then."""
    b = spec.batching
    tune = b.auto_tune if b is not None else None
    limit = tune.max_queue_delay_microseconds if tune is not None else None
    delay = tuned.max_queue_delay_microseconds
    if limit is not None:
        delay = min(delay, limit)
    if delay < 0 or delay > MAX_QUEUE_DELAY_US:
        return None
    # A REJECT queue timeout lowered since: one the tuned delay outlasts would reject every request the
    # batcher holds -- all of them at light load. (Admission holds autoTune's delay bound within it.)
    if not timeout_outlasts(b, delay):
        return None
    allowed = set(tune.preferred_batch_sizes) if tune is not None and tune.preferred_batch_sizes else None
    return BatcherInForce(delay, tuple(p for p in tuned.preferred_batch_sizes
                                       if 1 <= p <= spec.model.max_batch_size and (allowed is None or p in allowed)))


class InferenceServiceStatus(_Model):
    observed_generation: int | None = Field(
        default=None, description="The metadata.generation the operator last reconciled.")
    model: str | None = Field(default=None, description="Resolved Triton model name.")
    replicas: int | None = Field(default=None, description="Deployment replicas (including starting ones).")
    ready_replicas: int | None = Field(default=None, description="Replicas whose model is loaded and warm.")
    desired_replicas: int | None = Field(default=None, description="Replicas the autoscaler last asked for.")
    p95_milliseconds: float | None = Field(default=None, description="Observed p95 latency.")
    requests_per_second: float | None = Field(default=None, description="Observed request rate.")
    last_scale_time: str | None = Field(default=None, description="When the autoscaler last changed replicas.")
    endpoints: Endpoints | None = Field(default=None, description="Where clients reach the model in the cluster.")
    conditions: list[Condition] = Field(
        default_factory=list, description="SpecValid, Ready and UpgradePending (the reconciler); Scaling, "
        "MetricsAvailable and Schedulable (the autoscaler).")
    batching: BatchingStatus | None = Field(
        default=None, description="Batcher settings in force (what config.pbtxt carries): the tuner's while "
        "spec.batching.autoTune is enabled, else the spec's. Absent without dynamic batching.",
    )
    scaling_state: dict[str, Any] | None = Field(
        default=None,
        description="Autoscaler memory (recommendation history, failure count) so a restart loses nothing.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    operator: str | None = Field(
        default=None, description="The operator whose autoscaler acts on this object: its leader Lease "
        "(namespace/name), or its host without leader election. Another operator's, written after this "
        "one's, is a Warning event OperatorConflict.")
    last_tick_time: str | None = Field(
        default=None, description="When that autoscaler last ticked (written with its status, at least once "
        "a minute, or each tick where intervalSeconds is longer): an old time means no operator serves this "
        "object (its namespace is not watched).")


# --- who writes what ----------------------------------------------------------------------------
# Two writers share status; each owns its fields and condition types and writes only those
# (tests/unit/test_status.py holds each writer to this table). Kopf writes nothing here: its
# progress lives in annotations (operator_main.configure).
RECONCILER = "reconciler"  # reconcile/inference_service.py: follows the spec and the Deployment
AUTOSCALER = "autoscaler"  # scaling/tick.py: one decision per tick
FIELD_OWNERS: dict[str, str] = {
    "observedGeneration": RECONCILER,
    "model": RECONCILER,
    "replicas": RECONCILER,
    "readyReplicas": RECONCILER,
    "endpoints": RECONCILER,
    "desiredReplicas": AUTOSCALER,
    "p95Milliseconds": AUTOSCALER,
    "requestsPerSecond": AUTOSCALER,
    "lastScaleTime": AUTOSCALER,
    "scalingState": AUTOSCALER,
    "operator": AUTOSCALER,
    "lastTickTime": AUTOSCALER,
    "batching": AUTOSCALER,  # the tuner runs in the autoscaler's tick; the reconciler only reads it
}
# `conditions` is one list that both write: each merges its own types into the freshest list
# under kube.object_lock, because a merge patch replaces a list whole.
CONDITION_OWNERS: dict[str, str] = {
    SPEC_VALID: RECONCILER,
    READY: RECONCILER,
    SCALING: AUTOSCALER,
    METRICS_AVAILABLE: AUTOSCALER,
    SCHEDULABLE: AUTOSCALER,
    UPGRADE_PENDING: RECONCILER,
}


def rfc3339(ts: float) -> str:
    """A Kubernetes timestamp (seconds precision) for the wall-clock time ``ts``."""
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """The condition ``type_`` of any Kubernetes object as the API returns it (a Pod's, a Deployment's),
    as a plain dict; {} when it has none."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == type_), {})


@dataclass(frozen=True)
class DeploymentRollout:
    """Where a Deployment's rollout stands, from its status."""

    updated: int  # pods of the current template (``updatedReplicas``)
    old: int  # pods of earlier templates still there (``replicas`` counts every ReplicaSet's)
    behind: bool  # the controller has not reported on the latest generation (a replica patch bumps it too)
    # The Progressing condition when it says the rollout passed progressDeadlineSeconds, else None
    stalled: dict[str, Any] | None
    # Progressing's reason is NewReplicaSetAvailable: every pod of the current template was available once
    # (the controller keeps the reason while that ReplicaSet stays current, whatever its pods do since)
    completed: bool = False
    # While the ReplicaFailure condition is True, its message (else its reason): the ReplicaSet's pod creations
    # are refused -- a quota on nvidia.com/gpu, a PodSecurity level, a missing ServiceAccount; else None
    refused: str | None = None

    @property
    def updating(self) -> bool:
        """A new template rolling out (a scale-up alone creates only pods of the current one)."""
        return self.behind or self.old > 0


def deployment_rollout(deployment: Mapping[str, Any]) -> DeploymentRollout:
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    updated = int(status.get("updatedReplicas") or 0)
    progressing = object_condition(deployment, "Progressing")
    stalled = progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded"
    failure = object_condition(deployment, "ReplicaFailure")
    return DeploymentRollout(updated, max(0, int(status.get("replicas") or 0) - updated),
                             int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0),
                             progressing if stalled else None,
                             progressing.get("reason") == "NewReplicaSetAvailable",
                             str(failure.get("message") or failure.get("reason") or "")
                             if failure.get("status") == "True" else None)


def conditions_of(status: Mapping[str, Any] | None) -> list[Condition]:
    """The conditions of a live status (as the API returns it), as models."""
    return [Condition.model_validate(c) for c in (status or {}).get("conditions") or []]


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    """Whether the condition ``type_`` is among ``conditions`` with status True."""
    return any(c.type == type_ and c.status == "True" for c in conditions)


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> list[Condition]:
    """A new list with ``type_`` set; lastTransitionTime moves only when the status flips."""
    status_s: ConditionStatus = status if isinstance(status, str) else ("True" if status else "False")
    message = fitted_message(message)
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        update: dict[str, Any] = {"status": status_s, "reason": reason, "message": message}
        if cond.status != status_s or "last_transition_time" not in cond.model_fields_set:
            update["last_transition_time"] = rfc3339(now)
        if generation is not None:
            update["observed_generation"] = generation
        out.append(cond.model_copy(update=update))
    if not found:
        new = Condition(type=type_, status=status_s, reason=reason, message=message,
                        last_transition_time=rfc3339(now))
        if generation is not None:
            new.observed_generation = generation
        out.append(new)
    return out


def status_patch(current: Mapping[str, Any] | None, new: InferenceServiceStatus) -> dict[str, Any] | None:
    """The merge patch of ``status`` that writes the fields ``new`` sets, only those the write
    would change in the live ``current``; None when it would change nothing (so nothing is
    written). A field ``new`` sets to None is removed; a field it leaves unset is left alone.

    "Would change" is judged on what the API server stores, not on the patch: it drops the
    nulls inside a merge patch (``scalingState`` has some for unknown values), so comparing
    the patch itself would find a difference on every tick."""
    cur = current or {}
    wanted = new.model_dump(by_alias=True, exclude_unset=True)
    changed = {key: value for key, value in wanted.items() if merge_patch(cur.get(key), value) != cur.get(key)}
    return changed or None
