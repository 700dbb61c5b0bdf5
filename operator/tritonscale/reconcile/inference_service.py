"""Reconcile one InferenceService: validate, render, converge children, write status.

The decisions (what to create or patch, what status to report) are pure
functions of the object and the live children; ``reconcile`` only performs
the I/O they call for, through :class:`tritonscale.kube.client.Kube`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import (
    ApiException,
)

from tritonscale import __version__
from tritonscale.api import status as st
from tritonscale.api.spec import LABEL, RENDERED_BY_ANNOTATION, InferenceServiceSpec, model_name
from tritonscale.api.validation import Problem, validate_body
from tritonscale.kube.client import (
    API_ERRORS,
    OWN_MANAGERS,
    Kube,
    describe_api_error,
    namespace_terminating,
)
from tritonscale.kube.object_lock import object_lock
from tritonscale.reconcile import upgrade_rollouts
from tritonscale.reconcile.child_refusals import Write, dry_run_refusals, holds_other_content, without_echo
from tritonscale.reconcile.diff import LAST_APPLIED, plan_patch, with_last_applied
from tritonscale.render.kubernetes_objects import (
    MANAGED_BY,
    build_children,
    endpoints,
    labels,
    mounted_configmap,
    owned_by,
    owner_reference,
)

EventFn = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)
# The operator's one gate for upgrade rollouts; ``configure`` sets its limit and namespaces at start.
UPGRADES = upgrade_rollouts.UpgradeGate()
log = logging.getLogger("tritonscale")
# By uid: the last failure of the ConfigMap clean-up, said once at WARNING (by uid, so an object made
# again under the name says it again); forgotten with the object (``forget_deleted``).
_cleanup_failed: dict[str, str] = {}


def forget_deleted(uid: str) -> None:
    """Forget what the reconciler keeps for a deleted object."""
    _cleanup_failed.pop(uid, None)


@dataclass
class Outcome:
    valid: bool
    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # children whose names something else holds
    adopted: list[str] = field(default_factory=list)  # orphans of this object's taken back (``adoptable``)
    # immutable ConfigMaps found with other content, deleted and created again (``holds_other_content``)
    replaced: list[str] = field(default_factory=list)
    # Children patched back (in ``patched``) with the other writers their fields had: kubectl edit, a GitOps
    # tool's server-side apply (``writers``)
    changed_by: dict[str, list[str]] = field(default_factory=dict)
    # After a whole pass: each child ("Kind/name") at the resourceVersion the pass read or wrote it, so
    # a watch event of that very version (Kopf's listing at a restart, the echo of the pass's own write)
    # has nothing new to reconcile. Empty when the pass stopped short (a conflict, a refusal).
    seen: dict[str, str] = field(default_factory=dict)
    # An operator upgrade's rollout that waits: the Deployments rolling out meanwhile (upgrade_rollouts).
    # Nothing was written; the end of another rollout or the resync tries again (handlers).
    upgrade_waits_for: list[str] = field(default_factory=list)


def what_it_does(child: dict[str, Any] | None) -> Any:
    """A child as its users see it: everything but its status, its version bookkeeping and the
    operator's last-applied record. A patch that changed only that record (an upgrade writes it in a
    new format) was reported as "updated ... to match the spec" for every child of every service. The
    operator version that rendered a Deployment is bookkeeping too: a new version writes it everywhere."""
    if child is None:
        return None
    meta = child.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k not in (LAST_APPLIED, RENDERED_BY_ANNOTATION)}
    return ({k: v for k, v in child.items() if k not in ("metadata", "status")},
            meta.get("labels") or {}, annotations, meta.get("ownerReferences"))


def template_of(deployment: dict[str, Any]) -> Any:
    """A Deployment's pod template (a change is a rollout: a new ReplicaSet, every pod replaced)."""
    return (deployment.get("spec") or {}).get("template")


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
        return "Unknown", "RollingOut", (f"{ready} replica(s) ready (minReplicas {min_replicas}); rolling out "
                                         f"{template}: {updated} pod(s) of it, {old} of the earlier one")
    if ready >= need:
        return True, "ReplicasReady", f"{ready} replica(s) ready and warm (minReplicas {min_replicas})"
    # The ReplicaSet could not create pods (a PodSecurity level the pod template does not meet, a
    # ServiceAccount or quota that refuses them): no model is loading, so "warming up" would be wrong.
    failure = st.object_condition(deployment, "ReplicaFailure")
    if failure.get("status") == "True":
        return False, "PodsNotCreated", (f"{ready}/{need} replica(s) ready (minReplicas {min_replicas}); the "
                                         f"Deployment's pods cannot be created: "
                                         f"{failure.get('message') or failure.get('reason')}")
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
    """The object's conditions with SpecValid=True at generation ``gen``."""
    return st.set_condition(st.conditions_of(body.get("status")), st.SPEC_VALID, True, "Valid", "spec is valid", now,
                            gen)


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


def replicas_to_create(spec: InferenceServiceSpec, status: dict[str, Any] | None) -> int:
    """``spec.replicas`` of a Deployment created (again): the warm floor, or more when the autoscaler
    had asked for more (``status.desiredReplicas``, within maxReplicas). A Deployment deleted by hand
    then comes back at the size the load needed, not at the floor: with Prometheus down the autoscaler
    only holds what it finds, and with it up a cold start or more would pass before it had them back."""
    asked = (status or {}).get("desiredReplicas")
    if isinstance(asked, bool) or not isinstance(asked, int):
        return spec.scaling.floor
    return max(spec.scaling.floor, min(asked, spec.scaling.max_replicas))


def configmaps_to_delete(configmaps: list[dict[str, Any]], workloads: list[dict[str, Any]],
                         uid: str) -> list[dict[str, Any]]:
    """The owner's config.pbtxt ConfigMaps (one per config, ``configmap_name``) that no pod template
    of ``workloads`` mounts: the Deployment as written and as it was before this pass (two edits in a
    row: the ReplicaSet of the one before may not exist yet), and its ReplicaSets -- the Deployment
    keeps old ones as its revision history, and their ConfigMaps go when they go."""
    mounted = {mounted_configmap(w) for w in workloads}
    return [cm for cm in configmaps if (owned_by(cm, uid) or adoptable(cm, (cm["metadata"].get("labels") or {})
                                                                       .get(LABEL, "")))
            and cm["metadata"]["name"] not in mounted]


def _delete_unmounted_configmaps(kube: Kube, body: dict[str, Any], deployments: list[dict[str, Any]],
                                 outcome: Outcome) -> None:
    """Best effort, after a pass whose writes all went through: a failure leaves a ConfigMap for the
    next. The ReplicaSets are listed only when a ConfigMap besides the Deployment's own is there. An
    orphan still mounted (an earlier config's, by a ReplicaSet the adopted Deployment keeps as history) is
    adopted: with no owner it outlived the InferenceService's deletion (an exploratory audit)."""
    meta = body["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    selector = f"{LABEL}={name}"
    try:
        # the orphans too (an orphaned Deployment's earlier configs): once unmounted, they are nobody's
        owned = [cm for cm in kube.list_config_maps(ns, selector) if owned_by(cm, uid) or adoptable(cm, name)]
        deleted: set[str] = set()
        if configmaps_to_delete(owned, deployments, uid):
            for cm in configmaps_to_delete(owned, [*deployments, *kube.list_replica_sets(ns, selector)], uid):
                kube.delete_config_map(ns, cm["metadata"]["name"], cm["metadata"]["uid"])
                deleted.add(cm["metadata"]["name"])
        orphans = [cm for cm in owned if not owned_by(cm, uid) and cm["metadata"]["name"] not in deleted]
        if orphans and _may_adopt(kube, ns, name, uid):
            for cm in orphans:
                cmeta = cm["metadata"]
                refs = [*(cmeta.get("ownerReferences") or []), owner_reference(body)]  # others stay
                kube.patch("ConfigMap", ns, cmeta["name"], {"metadata": {
                    "ownerReferences": refs, "resourceVersion": cmeta.get("resourceVersion")}})
                outcome.adopted.append(f"ConfigMap/{cmeta['name']}")
    except API_ERRORS as exc:  # e.g. 403 with an older chart's RBAC
        # Once per service and failure, not at every pass (a pass runs at each child event).
        text = describe_api_error(exc)
        level = logging.DEBUG if _cleanup_failed.get(uid) == text else logging.WARNING
        _cleanup_failed[uid] = text
        log.log(level, "%s/%s: removing ConfigMaps no pod mounts failed (they stay): %s", ns, name, text)
        return
    _cleanup_failed.pop(uid, None)


def adoptable(live: dict[str, Any], owner_name: str) -> bool:
    """An orphan of the InferenceService ``owner_name``'s: no controller owns it, and it carries the labels
    the operator puts on that object's children -- left by `kubectl delete tis --cascade=orphan`, or an
    owner reference removed by hand. It is taken back, as a Deployment adopts the ReplicaSets its selector
    matches: refused as a name conflict, its serving pods stayed out of the operator's reach, and the
    advice (delete it) meant an outage. Only what the operator wrote: its last-applied record is on it
    (`tritonscale render`'s output, applied by hand or by a GitOps tool, has none: that stays a conflict).
    A child of another controller, or an object without these labels, stays someone else's."""
    meta = live.get("metadata") or {}
    if any(isinstance(r, dict) and r.get("controller") for r in meta.get("ownerReferences") or []):
        return False
    if LAST_APPLIED not in (meta.get("annotations") or {}):
        return False
    own = labels(owner_name)
    found = meta.get("labels") or {}
    return all(found.get(k) == own[k] for k in (LABEL, MANAGED_BY))


def still_there(kube: Kube, ns: str, name: str, uid: str) -> dict[str, Any] | None:
    """The InferenceService as the API server has it now, if it is still the object of ``uid``: None once
    it is deleted, or deleted and created again."""
    fresh = kube.get_inference_service(ns, name)
    return fresh if fresh is not None and fresh["metadata"].get("uid") == uid else None


def _may_adopt(kube: Kube, ns: str, name: str, uid: str) -> bool:
    """Whether the object may still adopt orphans, read afresh just before it does (as Kubernetes'
    controllers recheck an owner before adoption): not once it is being deleted. With
    --cascade=orphan the garbage collector takes the owner references off the children while a pass
    that read the object before the deletion may be under way, and it adopted them back -- for the
    collector to delete with the object, the opposite of orphan. The re-read narrows that window to the
    time between it and the patches; it does not close it (nor do Kubernetes' own controllers)."""
    fresh = still_there(kube, ns, name, uid)
    return fresh is not None and not fresh["metadata"].get("deletionTimestamp")


def foreign_children(desired: list[dict[str, Any]], lives: list[dict[str, Any] | None]) -> list[str]:
    """``Kind/name`` of each live object at a child's name that the owner does not own: none of
    its ownerReferences carries the owner's uid (a user's own Service, another controller's
    Deployment, or a former InferenceService's child the garbage collector has yet to remove),
    and it is no orphan of the owner's to adopt (``adoptable``)."""
    return [f"{child['kind']}/{child['metadata']['name']}" for child, live in zip(desired, lives, strict=True)
            if live is not None and not owned_by(live, child["metadata"]["ownerReferences"][0]["uid"])
            and not adoptable(live, child["metadata"]["labels"][LABEL])]


def status_for_conflict(body: dict[str, Any], message: str, now: float,
                        spec: InferenceServiceSpec) -> st.InferenceServiceStatus:
    """The reconciler's fields while a child's name is taken: the spec is valid (its model is named, as the
    MODEL column shows it), nothing is ready."""
    gen = body["metadata"].get("generation")
    conds = _spec_valid(body, now, gen)
    conds = st.set_condition(conds, st.READY, False, "NameConflict", message, now, gen)
    return st.InferenceServiceStatus(observed_generation=gen, conditions=conds, **_named_model(body, spec))


def _patch_status(kube: Kube, body: dict[str, Any], status: st.InferenceServiceStatus, event: EventFn,
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


def _write_failed(kube: Kube, body: dict[str, Any], child: str, exc: BaseException, event: EventFn,
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
        _patch_status(kube, body, st.InferenceServiceStatus(conditions=conds), event, "ChildWriteFailed", message)
    except API_ERRORS:  # the API server may be what failed: the handler's retry says it again
        pass


def conflict_message(taken: list[str]) -> str:
    """What NameConflict says: which names something else holds, and the two ways out."""
    one = len(taken) == 1
    that, it = ("that object", "it") if one else ("them", "them")
    return (f"{', '.join(taken)} {'is' if one else 'are'} not this InferenceService's: another "
            f"object holds the name. Rename the InferenceService, or delete {that} if nothing "
            f"uses {it}; nothing was created or changed")


def _write_children(kube: Kube, body: dict[str, Any], writes: list[Write], outcome: Outcome, event: EventFn,
                    now: Callable[[], float]) -> tuple[dict[str, Any] | None, bool]:
    """Create or patch each child (dry runs passed), recording what was done in ``outcome``. Returns the
    Deployment as written, and whether its pod template changed (every pod reported is then of the old
    one). A failed write records WriteFailed and raises: Kopf tries the handler again."""
    meta = body["metadata"]
    ns, uid = meta["namespace"], meta["uid"]
    deployment, template_written = None, False
    for child, live, patch in writes:
        kind, cname = child["kind"], child["metadata"]["name"]
        before = live
        try:
            if live is not None and holds_other_content(child, live):
                kube.delete_config_map(ns, cname, live["metadata"]["uid"])
                outcome.replaced.append(f"{kind}/{cname}")
                if others := writers(live, {"data": child.get("data"), "binaryData": None}):
                    outcome.changed_by[f"{kind}/{cname}"] = others
                live = kube.create(child)
            elif live is None:
                live = kube.create(child)
                outcome.created.append(f"{kind}/{cname}")
            elif patch is not None:
                if not owned_by(live, uid):  # adopted: its other (non-controller) owners stay
                    refs = [r for r in (live["metadata"].get("ownerReferences") or []) if isinstance(r, dict)]
                    patch = {**patch, "metadata": {**(patch.get("metadata") or {}),
                                                   "ownerReferences": refs + child["metadata"]["ownerReferences"]}}
                live = kube.patch(kind, ns, cname, patch)
                if before is not None and not owned_by(before, uid):
                    outcome.adopted.append(f"{kind}/{cname}")
                elif what_it_does(before) != what_it_does(live):
                    outcome.patched.append(f"{kind}/{cname}")
                    if before is not None and (others := writers(before, patch)):
                        outcome.changed_by[f"{kind}/{cname}"] = others
                else:  # the operator's own record alone (an upgrade's new last-applied format)
                    log.debug("%s/%s: refreshed the last-applied record of %s/%s", ns, meta["name"], kind, cname)
        except Exception as exc:
            _write_failed(kube, body, f"{kind}/{cname}", exc, event, now())
            raise
        version = ((live or {}).get("metadata") or {}).get("resourceVersion")
        if version:
            outcome.seen[f"{kind}/{cname}"] = str(version)
        if kind == "Deployment":
            deployment = live
            # The pod template as the API server has it, before and after: a patch always carries the
            # whole template, and an edit of spec.scaling alone (the spec annotation) said "the pods
            # roll" and set Ready to RollingOut for a pass while no pod rolled.
            template_written = patch is not None and before is not None and live is not None and (
                template_of(before) != template_of(live))
    return deployment, template_written


def _owns_any(patch: Any, fields: Any) -> bool:
    """Whether a managedFields ``fieldsV1`` tree owns a field the merge ``patch`` sets or removes: a field of
    it, or anything below a value the patch replaces whole (a scalar, a list, a null)."""
    if not isinstance(patch, dict) or not isinstance(fields, dict):
        return False
    for key, value in patch.items():
        sub = fields.get(f"f:{key}")
        if sub is None:
            continue
        deeper = isinstance(value, dict) and value and isinstance(sub, dict) and any(k.startswith("f:") for k in sub)
        if not deeper or _owns_any(value, sub):
            return True
    return False


def writers(child: dict[str, Any], patch: dict[str, Any]) -> list[str]:
    """The field managers other than this operator's that own a field of the child ``patch`` puts back (not
    through a status or scale subresource: its controller's, an HPA's), by name: ``kubectl-edit``,
    ``kubectl-patch``, a GitOps tool. Only those fields: a `kubectl rollout restart` owns its annotation of
    the pod template, which a later change of the spec does not touch."""
    out: list[str] = []
    for entry in (child.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict) or entry.get("subresource") or entry.get("manager") in OWN_MANAGERS:
            continue
        manager = str(entry.get("manager") or "an unnamed writer")
        if manager not in out and _owns_any(patch, entry.get("fieldsV1")):
            out.append(manager)
    return out


def _announce(outcome: Outcome, template_written: bool, event: EventFn, ns: str, name: str,
              spec_unchanged: bool = False) -> None:
    """An event and a log line for each child created, adopted or changed. A child changed back while the
    spec is the one the last pass applied (``spec_unchanged``) was changed by someone else: a Warning
    naming them (another tool applying it would fight the operator at every sync, a rollout each time
    for a pod template)."""
    for ref in outcome.created:
        event("Normal", "Created", f"created {ref}")
        log.info("%s/%s: created %s", ns, name, ref)
    for ref in outcome.adopted:
        message = (f"adopted {ref}: it carries this InferenceService's labels and no owner (left by a deletion "
                   f"with --cascade=orphan?), and now matches the spec")
        event("Normal", "Adopted", message)
        log.info("%s/%s: %s", ns, name, message)
    for ref in outcome.replaced:
        by = f" by {', '.join(outcome.changed_by[ref])}" if ref in outcome.changed_by else ""
        message = (f"replaced {ref}: its data had been changed{by}, not through this InferenceService, and an "
                   f"immutable ConfigMap cannot be patched back. Pods that started meanwhile load the changed "
                   f"config until they restart")
        event("Warning", "DriftReverted", message)
        log.warning("%s/%s: %s", ns, name, message)
    for ref in outcome.patched:
        # a new pod template replaces every pod, a cold start each: say so where the edit is seen
        rolls = "; a new pod template: the pods roll" if template_written and ref.startswith("Deployment/") else ""
        others = outcome.changed_by.get(ref)
        if spec_unchanged and others:
            message = (f"put {ref} back as the spec says{rolls}: it had been changed by {', '.join(others)}, not "
                       f"through this InferenceService. The operator owns its children: change the "
                       f"InferenceService, or a tool that applies the child too will be undone at every sync")
            event("Warning", "DriftReverted", message[:1000])
            log.warning("%s/%s: %s", ns, name, message)
            continue
        event("Normal", "Updated", f"updated {ref} to match the spec{rolls}")
        log.info("%s/%s: updated %s to match the spec%s", ns, name, ref, rolls)


def _warn(warned: list[Problem], event: EventFn, ns: str, name: str) -> None:
    """Warnings the API server gave on the dry runs, which the user would never see: kubectl prints the
    warnings of the objects it writes, and the operator writes these (an env var a later one of its name
    hides, a memory request of "0.5": half a byte)."""
    said = "; ".join(str(p) for p in warned)
    event("Warning", "ChildWarning", f"the API server warns: {said}"[:1000])
    log.warning("%s/%s: the API server warns: %s", ns, name, said)


def reconcile(kube: Kube, body: dict[str, Any], event: EventFn, now: Callable[[], float] = time.time) -> Outcome:
    """Converge the children of ``body`` and its status. Idempotent: a second call with
    nothing changed makes no write."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    with object_lock(ns, name):
        # Conditions merge into the freshest status (below): Kopf's body may predate the
        # autoscaler's last write, and a merge patch replaces the whole list.
        fresh = still_there(kube, ns, name, meta.get("uid"))
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            # Deleted meanwhile, or being deleted: nothing is written. With --cascade=orphan the garbage
            # collector takes the owner references off the children first, and a pass then would adopt
            # them back (``adoptable``) -- for the collector to delete with the object, the opposite of
            # orphan.
            spec, problems = validate_body(body)
            return Outcome(valid=spec is not None, problems=problems)
        # The object as it is now, not the body handed in, which was read before this pass had the
        # lock: a pass for a child's event (handlers._reconcile_owner) read its owner, then waited
        # while Kopf's pass of an edit made meanwhile held the lock and applied the newer generation.
        # On the older body it put the children back to the spec before the edit and wrote that
        # generation as observedGeneration; the next pass put them forward again -- two rollouts, and
        # a kubectl edit between them reverted as "updated to match the spec", not said as drift (a
        # clean-clone CI failure, sessions 61 and 83; tests/integration/test_reconcile_freshest_spec.py).
        # Kopf's own body is an event's snapshot too.
        body, meta = fresh, fresh["metadata"]
        spec, problems = validate_body(body)
        if spec is None:
            _patch_status(kube, body, status_for_invalid(body, problems, now()), event, "InvalidSpec",
                          "; ".join(str(p) for p in problems),
                          counts=counts_from(kube.get("Deployment", ns, name), meta["uid"]))
            return Outcome(valid=False, problems=problems)

        outcome = Outcome(valid=True)
        # Render everything before the first write: a rendering problem can never
        # leave half the children behind.
        desired = [with_last_applied(c) for c in build_children(spec, body)]
        lives = [kube.get(c["kind"], ns, c["metadata"]["name"]) for c in desired]
        # An object of a child's name that this InferenceService does not own is someone else's:
        # patching it would take it over (our selector, our ownerReference -- and the garbage
        # collector would delete it with us). Nothing is written while any name is taken.
        taken = foreign_children(desired, lives)
        if taken:
            message = conflict_message(taken)
            outcome.conflicts = taken
            _patch_status(kube, body, status_for_conflict(body, message, now(), spec), event, "NameConflict", message)
            return outcome
        dep_desired, dep_live = next((c, live) for c, live in zip(desired, lives, strict=True)
                                     if c["kind"] == "Deployment")
        if dep_live is None:
            dep_desired["spec"]["replicas"] = replicas_to_create(spec, body.get("status"))
        writes = [(c, live, None if live is None else plan_patch(c, live)) for c, live in zip(desired, lives,
                                                                                             strict=True)]
        # The API server validates what the CRD cannot (a Deployment's env entry without a name, a
        # resource quantity that does not parse): every write is tried as a dry run first, so a
        # refusal leaves every child as it was -- not a new ConfigMap beside the old Deployment.
        refused, warned = dry_run_refusals(kube, ns, writes,
                                           lambda child, exc: _write_failed(kube, body, child, exc, event, now()),
                                           spec=body.get("spec"))
        if warned:
            _warn(warned, event, ns, name)
        if refused:
            outcome.valid, outcome.problems = False, refused
            _patch_status(kube, body, status_for_invalid(body, refused, now(), reason=st.CHILD_REJECTED, spec=spec),
                          event, st.CHILD_REJECTED, "; ".join(str(p) for p in refused),
                          counts=counts_from(dep_live, meta["uid"]))
            return outcome
        if any(live is not None and not owned_by(live, meta["uid"]) for _, live, _ in writes) and not _may_adopt(
                kube, ns, name, meta["uid"]):
            return outcome
        applied = (body.get("status") or {}).get("observedGeneration")
        spec_unchanged = applied is not None and applied == meta.get("generation")
        dep_patch = next(p for c, _, p in writes if c["kind"] == "Deployment")
        upgrade = dep_live is not None and dep_patch is not None and upgrade_rollouts.is_upgrade(
            dep_live, dep_desired, __version__, spec_unchanged, writers(dep_live, dep_patch))
        # An operator upgrade's new pod template waits for other fleets' rollouts (upgrade_rollouts).
        waiting = UPGRADES.admit(kube, ns, name, int(dep_live["metadata"].get("generation") or 0)) \
            if upgrade and dep_live is not None else []
        if waiting:
            outcome.upgrade_waits_for = waiting
            _wait_for_upgrade(kube, body, spec, dep_live, waiting, event, now())
            return outcome
        deployment, template_written = _write_children(kube, body, writes, outcome, event, now)
        # The Deployment as written and as it was before (two edits in a row: see configmaps_to_delete).
        _delete_unmounted_configmaps(kube, body, [dep_desired, *([dep_live] if dep_live else [])], outcome)
        _announce(outcome, template_written, event, ns, name, spec_unchanged=spec_unchanged)
        new = status_from_children(body, deployment, spec, now(), template_written)
        if st.is_true(new.conditions or [], st.UPGRADE_PENDING):
            new.conditions = st.set_condition(new.conditions or [], st.UPGRADE_PENDING, False, "RollingOut" if upgrade
                                              else "SpecChanged", f"operator version {__version__}'s pod template "
                                              "is written; the Ready condition follows its rollout", now(),
                                              meta.get("generation"))
        patch = st.status_patch(body.get("status"), new)
        if patch is not None:
            kube.patch_inference_service_status(ns, name, patch, uid=meta["uid"], current=body.get("status"))
        return outcome


def _wait_for_upgrade(kube: Kube, body: dict[str, Any], spec: InferenceServiceSpec, deployment: dict[str, Any] | None,
                      waiting: list[str], event: EventFn, now: float) -> None:
    """Status (UpgradePending True, and Ready as the Deployment stands), an event and a log line the
    first time, for a pass that writes nothing until other fleets' rollouts finish."""
    meta = body["metadata"]
    message = upgrade_rollouts.waiting_message(waiting, UPGRADES.max_rollouts, __version__)
    was = st.is_true(st.conditions_of(body.get("status")), st.UPGRADE_PENDING)
    new = status_from_children(body, deployment, spec, now)
    new.conditions = st.set_condition(new.conditions or [], st.UPGRADE_PENDING, True, "WaitingForRollouts", message,
                                      now, meta.get("generation"))
    patch = st.status_patch(body.get("status"), new)
    if patch is not None:
        kube.patch_inference_service_status(meta["namespace"], meta["name"], patch, uid=meta["uid"],
                                            current=body.get("status"))
    if not was:
        event("Normal", "UpgradeWaiting", message[:1000])
        log.info("%s/%s: %s", meta["namespace"], meta["name"], message)
