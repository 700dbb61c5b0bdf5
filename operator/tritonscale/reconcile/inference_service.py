"""Reconcile one InferenceService: validate, render, converge children, write status.

The decisions (what to create or patch, what status to report) are pure
functions of the object and the live children; ``reconcile`` only performs
the I/O they call for, through :class:`tritonscale.kube.client.Kube`. The
status it reports is reconcile/reconciler_status.py's, the writes of the
children and what they say are reconcile/child_writes.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tritonscale import __version__
from tritonscale.api import status as st
from tritonscale.api.spec import LABEL, InferenceServiceSpec
from tritonscale.api.validation import validate_body
from tritonscale.kube.client import (
    API_ERRORS,
    Kube,
    describe_api_error,
)
from tritonscale.kube.object_lock import object_lock
from tritonscale.reconcile import upgrade_rollouts
from tritonscale.reconcile.child_refusals import dry_run_refusals
from tritonscale.reconcile.child_writes import Outcome, announce_writes, warn_dry_run_warnings, write_children, writers
from tritonscale.reconcile.diff import LAST_APPLIED, plan_patch, with_last_applied
from tritonscale.reconcile.reconciler_status import (
    EventFn,
    conflict_message,
    counts_from,
    patch_status,
    status_for_conflict,
    status_for_invalid,
    status_from_children,
    write_failed,
)
from tritonscale.render.kubernetes_objects import (
    MANAGED_BY,
    build_children,
    labels,
    mounted_configmap,
    owned_by,
    owner_reference,
)

# The operator's one gate for upgrade rollouts; ``configure`` sets its limit and namespaces at start.
UPGRADES = upgrade_rollouts.UpgradeGate()
log = logging.getLogger("tritonscale")
# By uid: the last failure of the ConfigMap clean-up, said once at WARNING (by uid, so an object made
# again under the name says it again); forgotten with the object (``forget_deleted``).
_cleanup_failed: dict[str, str] = {}


def forget_deleted(uid: str) -> None:
    """Forget what the reconciler keeps for a deleted object."""
    _cleanup_failed.pop(uid, None)


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
        # lock: a pass for a child's event (handlers.reconciler._reconcile_owner) read its owner, then waited
        # while Kopf's pass of an edit made meanwhile held the lock and applied the newer generation.
        # On the older body it put the children back to the spec before the edit and wrote that
        # generation as observedGeneration; the next pass put them forward again -- two rollouts, and
        # a kubectl edit between them reverted as "updated to match the spec", not said as drift (a
        # clean-clone CI failure, sessions 61 and 83; tests/integration/test_reconcile_freshest_spec.py).
        # Kopf's own body is an event's snapshot too.
        body, meta = fresh, fresh["metadata"]
        spec, problems = validate_body(body)
        if spec is None:
            patch_status(kube, body, status_for_invalid(body, problems, now()), event, "InvalidSpec",
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
            patch_status(kube, body, status_for_conflict(body, message, now(), spec), event, "NameConflict", message)
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
                                           lambda child, exc: write_failed(kube, body, child, exc, event, now()),
                                           spec=body.get("spec"))
        if warned:
            warn_dry_run_warnings(warned, event, ns, name)
        if refused:
            outcome.valid, outcome.problems = False, refused
            patch_status(kube, body, status_for_invalid(body, refused, now(), reason=st.CHILD_REJECTED, spec=spec),
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
        deployment, template_written = write_children(kube, body, writes, outcome, event, now)
        # The Deployment as written and as it was before (two edits in a row: see configmaps_to_delete).
        _delete_unmounted_configmaps(kube, body, [dep_desired, *([dep_live] if dep_live else [])], outcome)
        announce_writes(outcome, template_written, event, ns, name, spec_unchanged=spec_unchanged)
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
