"""The reconciler's status fields (``st.FIELD_OWNERS``): what Ready and SpecValid say for a valid spec
(following the Deployment), a refused one, a name conflict and a failed write, and the one write of
them with a Warning event. The conditions are pure functions of the object and its Deployment."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import (
    ApiException,
)

from tritonscale.api import status as st
from tritonscale.api.spec import InferenceServiceSpec, model_name
from tritonscale.api.validation import Problem
from tritonscale.kube.client import (
    API_ERRORS,
    Kube,
    describe_api_error,
    namespace_terminating,
)
from tritonscale.reconcile.child_refusals import without_echo
from tritonscale.render.kubernetes_objects import endpoints, owned_by

EventFn = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)
log = logging.getLogger("tritonscale")


def ready_condition(min_replicas: int, deployment: dict[str, Any] | None, generation: int | None = None,
                    template_written: bool = False,
                    stale_ok: bool = True) -> tuple[bool | st.ConditionStatus, str, str] | None:
    """Ready follows the Deployment: True once ``minReplicas`` (at least one replica) are warm and every
    pod runs the current pod template. While a new template rolls out beside pods of the last one it is
    Unknown (``RollingOut``: the old pods serve, the edit has not taken yet), and False once the
    Deployment says the rollout exceeded its progress deadline (``RolloutStuck``: a model path, image or
    config whose pods never become ready), so ``kubectl wait --for=condition=Ready`` and GitOps health
    checks do not take a running old generation for the new one. ``template_written``: this pass just
    wrote a new template, so every pod the Deployment reports is of the earlier one. None (with
    ``stale_ok`` False) while the Deployment's controller has not reported on its latest spec
    (a replica patch bumps the generation too): the caller keeps what Ready said."""
    if deployment is None:
        return False, "DeploymentMissing", "the Deployment does not exist yet"
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas") or 0
    need = max(1, min_replicas)
    rollout = st.deployment_rollout(deployment)
    updated, old = rollout.updated, rollout.old
    if template_written:
        updated, old = 0, int(status.get("replicas") or 0)
    elif rollout.behind and not stale_ok:
        return None
    template = ("the new pod template (the spec of generation "
                f"{generation if generation is not None else 'now'}, the tuner's status.batching, or a "
                f"`kubectl rollout restart`)")
    stalled = rollout.stalled
    if stalled is not None and (old or ready < need) and not template_written:
        serving = f"; {old} replica(s) of the earlier one keep serving" if old else ""
        return False, "RolloutStuck", (f"{ready} replica(s) ready (minReplicas {min_replicas}); the pods of {template} "
                                       f"did not become ready within the Deployment's progressDeadlineSeconds "
                                       f"({stalled.get('message') or 'ProgressDeadlineExceeded'}){serving}: "
                                       f"see the new pods' events and logs")
    if (deployment.get("spec") or {}).get("paused") and (old or template_written):
        # `kubectl rollout pause`: the controller makes no pod of the new template, and a paused
        # Deployment never reaches its progress deadline, so RollingOut would stand for good.
        name = (deployment.get("metadata") or {}).get("name", "")
        return "Unknown", "RolloutPaused", (f"{ready} replica(s) ready (minReplicas {min_replicas}); the Deployment "
                                            f"is paused, so {template} is not rolling out ({updated} pod(s) of it, "
                                            f"{old} of the earlier one): `kubectl rollout resume deployment/{name}`")
    if ready >= need and old:
        # A quota (nvidia.com/gpu) that refuses the new pods holds the rollout until its progress deadline; say so
        # now, not ten minutes on
        refused = (f"; the Deployment's pods cannot be created ({rollout.refused})"
                   if rollout.refused is not None and not template_written else "")
        return "Unknown", "RollingOut", (f"{ready} replica(s) ready (minReplicas {min_replicas}); rolling out "
                                         f"{template}: {updated} pod(s) of it, {old} of the earlier one{refused}")
    if ready >= need:
        return True, "ReplicasReady", f"{ready} replica(s) ready and warm (minReplicas {min_replicas})"
    # The ReplicaSet could not create pods (a PodSecurity level the pod template does not meet, a
    # ServiceAccount or quota that refuses them): no model is loading, so "warming up" would be wrong.
    if rollout.refused is not None:
        return False, "PodsNotCreated", (f"{ready}/{need} replica(s) ready (minReplicas {min_replicas}); the "
                                         f"Deployment's pods cannot be created: {rollout.refused}")
    if rollout.completed and not template_written and not rollout.behind:
        # The template's pods were all ready once (``DeploymentRollout.completed``). A pod that stopped
        # passing its readiness probe reads the same as a replacement or a raised floor's new pods, so the
        # message names both, where "models load" misled in an incident. Not while a new template is
        # written and the controller has not reported on it: that rollout's pods are starting.
        return False, "ReplicasNotReady", (f"{ready}/{need} replica(s) ready (minReplicas {min_replicas}), below "
                                           f"it after the pods had been ready: pods are starting (a replacement, "
                                           f"a raised floor), or a pod stopped passing its readiness probe (a hung "
                                           f"server): see the pods' events")
    # The pods may also wait for a node (a GPU): the Schedulable condition says so, from the pods themselves.
    return False, "ReplicasStarting", (f"{ready}/{need} replica(s) ready (minReplicas {min_replicas}); the pods "
                                       f"start: each waits for a node (the Schedulable condition says whether one "
                                       f"fits), then loads and warms its model before serving")


def _spec_valid(body: dict[str, Any], now: float, gen: int | None) -> list[st.Condition]:
    """The object's conditions with SpecValid=True at generation ``gen``, its message noting a field set
    that nothing reads (``ignored_fields``)."""
    return st.set_condition(st.conditions_of(body.get("status")), st.SPEC_VALID, True, "Valid",
                            "spec is valid" + ignored_fields(body.get("spec")), now, gen)


def ignored_fields(spec: Any) -> str:
    """"; ..." naming a deprecated field the spec sets, or "": ``spec.scaling.panicThreshold`` is kept so
    that existing objects stay valid, and nothing reads it. The API server defaults it to 2, so only
    another value is known to be a user's, who should hear that it does nothing."""
    scaling = spec.get("scaling") if isinstance(spec, Mapping) else None  # Kopf's views are Mappings
    value = scaling.get("panicThreshold") if isinstance(scaling, Mapping) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 2:
        return (f"; spec.scaling.panicThreshold ({value:g}) is deprecated and ignored: a p95 breach with a queue "
                "behind it adds one replica, whatever the ratio")
    return ""


def status_from_children(body: dict[str, Any], deployment: dict[str, Any] | None, spec: InferenceServiceSpec,
                         now: float, template_written: bool = False) -> st.InferenceServiceStatus:
    """The reconciler's fields (``st.FIELD_OWNERS``) for a valid spec: they follow the Deployment."""
    gen = body["metadata"].get("generation")
    had = any(c.type == st.READY for c in st.conditions_of(body.get("status")))
    found = ready_condition(spec.scaling.min_replicas, deployment, gen, template_written, stale_ok=not had)
    conds = _spec_valid(body, now, gen)
    if found is not None:  # None: the Deployment's controller has not reported yet; Ready stays as it was
        ok, reason, message = found
        conds = st.set_condition(conds, st.READY, ok, reason, message, now, gen)
    dstatus = (deployment or {}).get("status") or {}
    return st.InferenceServiceStatus(
        observed_generation=gen,
        model=model_name(spec, body["metadata"]["name"]),
        replicas=((deployment or {}).get("spec") or {}).get("replicas"),
        ready_replicas=dstatus.get("readyReplicas") or 0,
        endpoints=st.Endpoints(**endpoints(body)),
        conditions=conds,
    )


def status_for_invalid(body: dict[str, Any], problems: list[Problem], now: float,
                       reason: str = "InvalidSpec", spec: InferenceServiceSpec | None = None
                       ) -> st.InferenceServiceStatus:
    """The reconciler's fields for a spec it refuses (or the API server refused as rendered:
    ``ChildRejected``): SpecValid=False names every problem. ``spec``, when it parsed (the API server
    refused its children), names the model, as the MODEL column shows it for a NameConflict too."""
    gen = body["metadata"].get("generation")
    message = "; ".join(str(p) for p in problems)
    conds = st.set_condition(st.conditions_of(body.get("status")), st.SPEC_VALID, False, reason, message,
                             now, gen)
    # Children from an earlier valid generation keep serving; Ready reflects that the
    # new generation was not rolled out.
    conds = st.set_condition(conds, st.READY, False, reason,
                             "spec rejected; nothing was created or changed: " + message, now, gen)
    return st.InferenceServiceStatus(observed_generation=gen, conditions=conds, **_named_model(body, spec))


def _named_model(body: dict[str, Any], spec: InferenceServiceSpec | None) -> dict[str, str]:
    """``status.model`` for a spec that parsed; nothing (the field left as it is) for one that did not:
    None would remove the model a valid generation wrote (``st.status_patch``), whose children keep
    serving it."""
    return {} if spec is None else {"model": model_name(spec, body["metadata"]["name"])}


def counts_from(deployment: dict[str, Any] | None, uid: str) -> st.InferenceServiceStatus | None:
    """``replicas`` and ``readyReplicas`` as the owner's Deployment has them, for a pass that writes no
    child (the spec invalid, or refused as rendered): the children of the last valid generation keep
    serving, and status keeps counting them. None when the name is another object's (not ours to report)."""
    if deployment is not None and not owned_by(deployment, uid):
        return None
    dstatus = (deployment or {}).get("status") or {}
    return st.InferenceServiceStatus(replicas=((deployment or {}).get("spec") or {}).get("replicas"),
                                     ready_replicas=dstatus.get("readyReplicas") or 0)


def status_for_conflict(body: dict[str, Any], message: str, now: float,
                        spec: InferenceServiceSpec) -> st.InferenceServiceStatus:
    """The reconciler's fields while a child's name is taken: the spec is valid (its model is named, as the
    MODEL column shows it), nothing is ready."""
    gen = body["metadata"].get("generation")
    conds = _spec_valid(body, now, gen)
    conds = st.set_condition(conds, st.READY, False, "NameConflict", message, now, gen)
    return st.InferenceServiceStatus(observed_generation=gen, conditions=conds, **_named_model(body, spec))


def conflict_message(taken: list[str]) -> str:
    """What NameConflict says: which names something else holds, and the two ways out."""
    one = len(taken) == 1
    that, it = ("that object", "it") if one else ("them", "them")
    return (f"{', '.join(taken)} {'is' if one else 'are'} not this InferenceService's: another "
            f"object holds the name. Rename the InferenceService, or delete {that} if nothing "
            f"uses {it}; nothing was created or changed")


def patch_status(kube: Kube, body: dict[str, Any], status: st.InferenceServiceStatus, event: EventFn,
                  reason: str, message: str, counts: st.InferenceServiceStatus | None = None) -> None:
    """Write the reconciler's status fields and a Warning event, and log it, once: nothing when they
    already say so (events expire after an hour; the log keeps it). ``counts`` (``counts_from``) go in
    the same write, but a count changing is no news: no event for it."""
    meta = body["metadata"]
    patch = st.status_patch(body.get("status"), status)
    counted = st.status_patch(body.get("status"), counts) if counts is not None else None
    if patch is not None or counted is not None:
        kube.patch_inference_service_status(meta["namespace"], meta["name"], {**(counted or {}), **(patch or {})},
                                            uid=meta["uid"], current=body.get("status"))
    if patch is not None:
        event("Warning", reason, message[:1000])
        log.warning("%s/%s: %s: %s", meta["namespace"], meta["name"], reason, message[:1000])


def write_failed(kube: Kube, body: dict[str, Any], child: str, exc: BaseException, event: EventFn,
                  now: float) -> None:
    """A write failed after the dry run passed (a transient error, an admission policy that lets dry
    runs through), or its dry run failed other than as invalid (a ResourceQuota's or RBAC's 403, which
    the handler's retries had said only in the operator's log): the Ready condition and a Warning event
    say so. The children written before it in the pass stay as written (putting a ConfigMap back made a
    loop: its own change event started the next pass, which wrote it again). Best effort: the API
    server may be what failed. Nothing while the namespace is being deleted (NamespaceTerminating): the
    handler then stops quietly, and a condition and event saying "the operator tries again" were wrong, and
    the event's own create was refused there too."""
    if isinstance(exc, ApiException) and namespace_terminating(exc):
        return
    message = f"{child} could not be written: {without_echo(describe_api_error(exc))}; the operator tries again"
    gen = body["metadata"].get("generation")
    # its checks passed (the refusal is not the spec's): SpecValid of this generation too, as Ready is -- it
    # stayed at the previous generation beside a Ready of this one
    conds = _spec_valid(body, now, gen)
    conds = st.set_condition(conds, st.READY, False, "ChildWriteFailed", message, now, gen)
    try:
        patch_status(kube, body, st.InferenceServiceStatus(conditions=conds), event, "ChildWriteFailed", message)
    except API_ERRORS:  # the API server may be what failed: the handler's retry says it again
        pass
