"""The reconciler's handlers: an InferenceService's resume, create and update (and the batching settings in
force, which the tuner writes to its status), and its children's events; the passes they make, the
retries Kopf makes of them, and the upgrade rollouts that wait for a place at the gate.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

import kopf
from kubernetes.client import ApiException

from tritonscale.api import status as st
from tritonscale.api.spec import GROUP, KIND, LABEL, PLURAL, VERSION
from tritonscale.handlers.events import _post_event
from tritonscale.handlers.settings import _kube
from tritonscale.kube.client import API_ERRORS, describe_api_error, namespace_terminating
from tritonscale.reconcile.inference_service import UPGRADES, reconcile, still_there
from tritonscale.scaling import operator_metrics as om

log = logging.getLogger("tritonscale")

# How soon a reconcile blocked by a name another object holds is tried again (s): the holder's
# removal is not an event the operator watches. Doubling at each retry up to CONFLICT_RETRY_MAX_S:
# Kopf logs and posts every retry, and a conflict nobody resolves said so every 30 s forever.
CONFLICT_RETRY_S = 30.0
CONFLICT_RETRY_MAX_S = 300.0
# How soon a reconcile whose request the API failed or refused (a 5xx, a timeout, an admission
# webhook or quota that refused a write its dry run passed) is tried again (s), doubling up to
# CONFLICT_RETRY_MAX_S: most such failures are gone in seconds, and Kopf's own default, a flat 60 s,
# left a spec change unapplied for a minute after the API server was fine again.
API_RETRY_S = 5.0


def _events_for(body: Any) -> Any:
    """The reconciler's event callback for one object."""
    return functools.partial(_post_event, body)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
# The batching tuner (in the autoscaler's tick) writes the settings in force to status.batching;
# the reconciler renders them into config.pbtxt, which rolls the pods. Only these fields:
# status.batching.tunerState changes every tick and must not reconcile every tick.
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("max_queue_delay_microseconds"))
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("preferred_batch_sizes"))
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("source"))
# tunerState.rolloutAtOnce (the Deployment's maxSurge) changes twice per tuner change, never per tick: set in the
# same write as the settings, and cleared by the tuner once their rollout is done. Rendered at once, maxSurge is
# back to 25% when the rollout ends -- not at the autoscaler daemon's next resync, up to RESYNC_S (5 min) later.
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.rollout_at_once_field())
def reconcile_inference_service(body: kopf.Body, retry: int = 0, **_: Any) -> None:
    meta = body.get("metadata", {})
    key = (str(meta.get("namespace")), str(meta.get("name")))
    _pass_starts(*key, meta.get("uid"))
    try:
        outcome = reconcile(_kube(), dict(body), _events_for(body))
        _passed(*key, outcome)
    except API_ERRORS as exc:
        if isinstance(exc, ApiException) and exc.status == 404 and _gone(body):
            # Deleted (or deleted and created again) while this pass ran: its children, if written, go
            # with it (their owner reference names its uid), and the new object has its own pass.
            meta = body.get("metadata", {})
            log.debug(f"{meta.get('namespace')}/{meta.get('name')}: deleted while reconciling: "
                      f"{describe_api_error(exc)}")
            return
        if isinstance(exc, ApiException) and namespace_terminating(exc):
            # The namespace is being deleted with the object in it: the API server refuses to create
            # children there (403, NamespaceTerminating), and retrying would only warn until it is gone.
            log.debug(f"{body.get('metadata', {}).get('namespace')}/{body.get('metadata', {}).get('name')}: "
                      f"not reconciling: {describe_api_error(exc)}")
            return
        # Forbidden (RBAC, a ResourceQuota), a conflict, an API server down or slow: Kopf tries
        # again with its backoff, and logs and posts this one line instead of a traceback.
        raise kopf.TemporaryError(f"the Kubernetes API refused or failed a request: {describe_api_error(exc)}",
                                  delay=retry_delay(retry, API_RETRY_S)) from None
    if outcome.conflicts:
        # Another object holds a child's name (status says which). Its removal sends us no event
        # (it is not ours to watch), so Kopf tries again until the name is free.
        raise kopf.TemporaryError(f"another object holds the name of {', '.join(outcome.conflicts)} (see the Ready "
                                  "condition)", delay=retry_delay(retry, CONFLICT_RETRY_S))


def _gone(body: Any) -> bool:
    """This object (its uid) is no longer in the API; False when that cannot be read either."""
    meta = body.get("metadata", {})
    try:
        return still_there(_kube(), str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")) is None
    except API_ERRORS:
        return False


def retry_delay(retry: int, first_s: float) -> float:
    """``first_s``, doubled at each of Kopf's retries (``retry``: 0 the first time), at most
    CONFLICT_RETRY_MAX_S."""
    return min(first_s * 2.0 ** min(retry, 16), CONFLICT_RETRY_MAX_S)


# By (namespace, InferenceService): its children as its last whole pass left them (``Outcome.seen``).
_seen: dict[tuple[str, str], dict[str, str]] = {}
# InferenceServices this process has started a pass of. Until then its own handler's first pass (the resume
# at a start, the create) is still to come, and reads every child itself; a listing during a pass may show
# a change the pass read too early, and is not skipped.
_passed_once: set[tuple[str, str]] = set()
# By (namespace, name): the uid of the object the last pass was of, so a deleted object's clean-up leaves a
# new one of its name alone.
_pass_uids: dict[tuple[str, str], str] = {}


def _pass_starts(namespace: str, name: str, uid: str | None = None) -> None:
    """Before a pass: it may fail half way, so nothing is known until it ends; and a listing from now on may
    show what it did not read."""
    _seen.pop((namespace, name), None)
    _passed_once.add((namespace, name))
    if uid:
        _pass_uids[(namespace, name)] = uid


def _passed(namespace: str, name: str, outcome: Any) -> None:
    """What a pass saw of the children, for ``child_changed``; nothing known after a pass that stopped short.
    A pass whose upgrade rollout waits joins the waiters (``_wake_upgrade_waiters``), or leaves them."""
    seen = getattr(outcome, "seen", None)
    if seen:
        _seen[(namespace, name)] = dict(seen)
    else:
        _seen.pop((namespace, name), None)
    with _upgrade_lock:
        if getattr(outcome, "upgrade_waits_for", None):
            _upgrade_waiters.setdefault((namespace, name))
        else:
            _upgrade_waiters.pop((namespace, name), None)
        om.UPGRADE_WAITING.set(len(_upgrade_waiters))


def _forget_passes(namespace: str, name: str, uid: str | None = None) -> None:
    """Forget what passes of the object left (a deleted one's: its upgrade waiter kept
    tritonscale_upgrade_waiting_fleets above 0 for a fleet that no longer exists, auditN F1). With ``uid``:
    only while the last pass was of that object, not of a new one of its name."""
    last = _pass_uids.get((namespace, name))
    if uid is not None and last is not None and last != uid:
        return
    _pass_uids.pop((namespace, name), None)
    _seen.pop((namespace, name), None)
    _passed_once.discard((namespace, name))
    with _upgrade_lock:
        _upgrade_waiters.pop((namespace, name), None)
        om.UPGRADE_WAITING.set(len(_upgrade_waiters))


# Operator upgrades (reconcile.upgrade_rollouts): the InferenceServices whose upgrade rollout waits, oldest
# first. When one of the operator's Deployments gives up its place at the gate (``UPGRADES.observe``), the
# oldest waiters get a pass -- not Kopf's retries of a handler, which log an ERROR line at each.
_upgrade_waiters: dict[tuple[str, str], None] = {}
_upgrade_lock = threading.Lock()


def _wake_upgrade_waiters() -> None:
    """A pass for the oldest waiting upgrades while the gate has a place free: each admitted one takes a
    place, and one that no longer waits for another reason (its spec was edited) leaves the next its
    turn. The rest wait for the next place to be given up, or the resync."""
    with _upgrade_lock:
        waiters = list(_upgrade_waiters)
    for namespace, name in waiters:
        if not UPGRADES.has_room():
            return
        _reconcile_owner(namespace, name)


def _reconcile_owner(namespace: str, name: str) -> None:
    kube = _kube()
    try:
        owner = kube.get_inference_service(namespace, name)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            _forget_passes(namespace, name)
            return  # the owner is gone; garbage collection removes the children
        _pass_starts(namespace, name, owner["metadata"].get("uid"))
        _passed(namespace, name, reconcile(kube, owner, _events_for(owner)))
    except API_ERRORS as exc:
        # A 404: the owner or a child vanished between our read and our write: the garbage
        # collector removes a just-deleted owner's children within milliseconds. That
        # deletion's own watch event reconciles again if the owner is still there.
        if isinstance(exc, ApiException) and (exc.status == 404 or namespace_terminating(exc)):
            # The namespace is being deleted: its children go with it, and the API server refuses to
            # recreate them (403, NamespaceTerminating). Nothing to correct, nothing to warn about.
            log.debug(f"{namespace}/{name}: not correcting a child: {describe_api_error(exc)}")
        else:
            # Kopf never retries an event handler: one line, not a traceback; the next event of the
            # owner or its children, the resync (RESYNC_S) or the resume at a restart reconciles again.
            log.warning(f"{namespace}/{name}: correcting a child failed: {describe_api_error(exc)}")


def owner_name(body: Any) -> str | None:
    """The InferenceService a child belongs to: its label, or its owner reference when the label is gone
    -- an edit that took the label off a Service and changed its selector was not seen (the watch went
    by the label), and the Service had no endpoints until the resync, 5 minutes later."""
    meta = body.get("metadata") or {}
    name = (meta.get("labels") or {}).get(LABEL)
    if name:
        return str(name)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == KIND and str(ref.get("apiVersion")).startswith(f"{GROUP}/"):
            return str(ref["name"]) if ref.get("name") else None
    return None


def _is_child(body: kopf.Body, **_: Any) -> bool:
    return owner_name(body) is not None


@kopf.on.event("apps", "v1", "deployments", when=_is_child)
@kopf.on.event("", "v1", "services", when=_is_child)
@kopf.on.event("", "v1", "configmaps", when=_is_child)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", when=_is_child)
def child_changed(body: kopf.Body, namespace: str | None, resource: Any = None, type: str | None = None,
                  **_: Any) -> None:
    """A child changed or vanished: correct drift and refresh Ready from the Deployment. (Kopf watches
    each kind whole and filters here, so the owner reference costs no more than the label did.) Not for
    a version of the child the owner's last whole pass already read or wrote (``Outcome.seen``): a
    restart's listing reconciled each InferenceService once per child kind after its resume (5 passes,
    1,000 for 200 objects in the first minute), and each pass's own writes came back as events. Nor for
    Kopf's first listing (``type`` None) of a child whose owner this process has made no pass of yet: its
    resume (or create) handler's pass is still to come, and reads the child then."""
    owner = owner_name(body)
    if not owner or not namespace:  # every child is namespaced
        return
    kind = getattr(resource, "kind", None) or body.get("kind")
    if kind == "Deployment" and UPGRADES.observe(body, deleted=type == "DELETED") and _upgrade_waiters:
        _wake_upgrade_waiters()
    if type is None and (namespace, owner) not in _passed_once:
        return
    meta = body.get("metadata") or {}
    version = meta.get("resourceVersion")
    if type != "DELETED" and version and _seen.get((namespace, owner), {}).get(f"{kind}/{meta.get('name')}") == str(
            version):
        return
    _reconcile_owner(namespace, owner)
