"""Kopf handlers: thin adapters from Kopf's kwargs to the reconciler and autoscaler.

Nothing here decides anything; see ``reconcile/`` and ``scaling/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any

import kopf
import urllib3
from kubernetes.client import ApiException

from tritonscale.api import status as st
from tritonscale.api.spec import GROUP, KIND, LABEL, PLURAL, VERSION
from tritonscale.kube.client import API_ERRORS, Kube, describe_api_error, namespace_terminating
from tritonscale.reconcile.inference_service import UPGRADES, forget_deleted, reconcile, still_there
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling import tick as autoscaler
from tritonscale.scaling.prometheus_http import allowed_by, shown_url
from tritonscale.scaling.prometheus_source import PrometheusSource, SeriesSelector, Snapshot
from tritonscale.scaling.snapshot_cache import SnapshotCache

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
# Every InferenceService is reconciled again this often (s), events or not: Kopf never retries an
# event handler, so a child's correction that failed (an API server restarting, a 5xx, a timeout)
# would otherwise wait for the next event of the owner or a child -- perhaps never. The periodic
# resync of controller-runtime and client-go informers, for the same reason; each pass is a few
# reads and dry runs, and writes nothing where nothing drifted. It runs in the object's autoscaler
# daemon, not as a Kopf timer: Kopf logs every timer run at INFO, and the operator posts INFO
# records as Events -- one per object every pass.
RESYNC_S = 300.0
# How often (s) an autoscaler loop between ticks looks in its live body for a generation the reconciler
# has handled since the last tick began (``_until_next_tick``): an edit waits at most this long for its tick.
EDIT_POLL_S = 1.0

# Set by the CLI before Kopf starts (see tritonscale.operator_main).
KUBE: Kube | None = None
PROMETHEUS_URL: str | None = None
ALLOWED_PROMETHEUS_URLS: tuple[str, ...] = ()  # tritonscale run --allowed-prometheus-url; empty: any
SNAPSHOTS: SnapshotCache | None = None
# Set when the operator stops (``_operator_stopping``), one per event loop (an Event is bound to
# one): a daemon Kopf spawns while it stops (an event handled after its daemon killer ran, e.g. the
# status the last tick wrote) is one the killer never stops, and Kopf waited 5 s for it before
# cancelling it -- the Lease went back that much later. Such a daemon ends at its next check or
# within its wait between ticks.
_STOP_EVENTS: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}


def _stop_event() -> asyncio.Event:
    """The running loop's event that ``_operator_stopping`` sets."""
    return _STOP_EVENTS.setdefault(asyncio.get_running_loop(), asyncio.Event())


def _kube() -> Kube:
    global KUBE
    if KUBE is None:
        KUBE = Kube()
    return KUBE


# The API server's limit on an Event's message, in bytes of UTF-8 (core/v1 validation counts Go string
# bytes); Kopf cuts at 1,024 characters, so a message of multi-byte text under that was refused (422),
# and Kopf dropped the Event with a log line.
EVENT_MESSAGE_BYTES = 1024


def event_message(message: str) -> str:
    """``message`` within EVENT_MESSAGE_BYTES, cut on a character boundary and ended with "..." if cut."""
    raw = message.encode("utf-8", "surrogatepass")  # a lone surrogate reaches the server as 3 bytes (U+FFFD)
    if len(raw) <= EVENT_MESSAGE_BYTES:
        return message
    return raw[:EVENT_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "..."


def _post_event(body: Any, type_: str, reason: str, message: str) -> None:
    kopf.event(body, type=type_, reason=reason, message=event_message(message))


def _events_for(body: Any) -> Any:
    """The reconciler's event callback for one object."""
    return functools.partial(_post_event, body)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
# The batching tuner (in the autoscaler's tick) writes the settings in force to status.batching;
# the reconciler renders them into config.pbtxt, which rolls the pods. Only these three fields:
# status.batching.tunerState changes every tick and must not reconcile every tick.
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("max_queue_delay_microseconds"))
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("preferred_batch_sizes"))
@kopf.on.field(GROUP, VERSION, PLURAL, field=st.batching_field("source"))
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


def _snapshots() -> SnapshotCache:
    global SNAPSHOTS
    if SNAPSHOTS is None:
        SNAPSHOTS = SnapshotCache(lambda url: PrometheusSource(url), on_forget=_forget_url)
    return SNAPSHOTS


def _forget_url(url: str) -> None:
    """A Prometheus URL no InferenceService uses any more (SnapshotCache forgot it): its failure series
    goes, unless another URL in use shows as the same label (they differ only in credentials)."""
    label = shown_url(url)
    if SNAPSHOTS is None or not any(shown_url(u) == label for u in SNAPSHOTS.urls()):
        om.forget_url(label)


@kopf.on.cleanup()
async def _operator_stopping(**_: Any) -> None:
    _stop_event().set()


# InferenceServices (by uid) whose autoscaler loop runs, and those of them the watch said were deleted. With
# no finalizer, Kopf stops no daemon at a deletion (it stops them while a deletion is ongoing, which a
# finalizer would make last): the loop ends at the API server's 404 for its object. But deleting a namespace
# the operator watches through a Role (the chart's watchNamespaces) takes the Role with it, and every read
# there is a 403: the loop ran on, failing, and exported the gone service's metrics (TritonscaleBelowWarmFloor
# fired) until the operator restarted. note_deletion is async: no thread for each event.
_looping: set[str] = set()
_deleted: set[str] = set()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def note_deletion(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    uid = (body.get("metadata") or {}).get("uid")
    if event.get("type") == "DELETED" and uid in _looping:
        _deleted.add(uid)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def autoscale(stopped: kopf.DaemonStopped, namespace: str | None, name: str, uid: str, body: kopf.Body,
                    logger: kopf.Logger, **_: Any) -> None:
    """One autoscaler loop per InferenceService; every intervalSeconds it runs one tick."""
    assert namespace is not None  # InferenceServices are namespaced
    # The first resync at a random point of the second half of RESYNC_S: objects made together all
    # resynced in one tick (200 reconciles within 15 s; an exploration at scale, session 55).
    resynced = time.monotonic() - RESYNC_S * random.uniform(0.0, 0.5)
    gone = False
    failed: str | None = None  # the failure of the last tick, if it failed: said once, not at every tick
    tick: asyncio.Task[Any] | None = None  # the last tick's thread, as a task
    _looping.add(uid)
    try:
        while not stopped and not _stop_event().is_set():
            if uid in _deleted:  # the watch saw it go (note_deletion)
                gone = True
                return
            scaling = autoscaler.scaling_in_force(uid, body)
            interval = float(scaling.interval_seconds)
            window = scaling.window_seconds
            url = scaling.prometheus.url or PROMETHEUS_URL
            started = time.monotonic()
            handled = _handled_generation(body)
            try:
                snapshot = await _snapshot(scaling.prometheus.url, url, window, interval)
                _source_checked(uid, shown_url(url) if url else "", snapshot.ok)
                # Shielded: Kopf cancels this daemon at a foreground deletion, and cancelling the await
                # does not stop the thread -- the ``finally`` below must know whether it still runs.
                tick = asyncio.ensure_future(asyncio.to_thread(autoscaler.run_tick, _kube(), namespace, name,
                                                               snapshot, time.time(), _post_event, uid))
                alive = await asyncio.shield(tick)
                if not alive:  # deleted (no finalizer holds it for us: _without_finalizer) or replaced
                    gone = True
                    return
                if failed is not None:
                    logger.info(f"autoscaler ticks again (the last failure: {failed})")
                    failed = None
            except Exception as exc:  # a failed tick must never end the loop: hold and retry next tick
                if isinstance(exc, ApiException) and exc.status == 404 and await asyncio.to_thread(
                        _gone, {"metadata": {"namespace": namespace, "name": name, "uid": uid}}):
                    gone = True  # deleted during the tick (its status write found nothing): no failure
                    return
                text = describe_api_error(exc)
                say = logger.warning if text != failed else logger.debug
                say(f"autoscaler tick failed (replicas unchanged; the next tick tries again): {text}")
                if not isinstance(exc, API_ERRORS):  # a bug, not the API server: where, with --verbose
                    logger.debug("the autoscaler tick's failure", exc_info=True)
                failed = text
            finally:
                om.TICK_SECONDS.observe(time.monotonic() - started)
            if time.monotonic() - resynced >= RESYNC_S:
                resynced = time.monotonic()
                try:  # reconcile again from a fresh read: whatever a failed correction left
                    await asyncio.to_thread(_reconcile_owner, namespace, name)
                except Exception as exc:  # _reconcile_owner says API failures itself; anything else here
                    logger.warning(f"resync failed (the next one tries again): {describe_api_error(exc)}")
            # Not `await stopped.wait(t)`: Kopf stops an async daemon by setting `stopped` and then
            # cancelling it (cancellation_backoff is unset), which ends this wait at once.
            # `stopped.wait(t)` spawns a helper task that ends with TimeoutError each time t passes;
            # one still pending when the operator exits is re-raised by Kopf's shutdown, and the
            # process exits 1 on a plain SIGTERM. wait_for cancels and awaits its own inner task.
            # The operator's own stop event ends the wait of a daemon Kopf's killer never stops.
            await _until_next_tick(body, started + max(0.5, interval), handled, uid)
    finally:
        _looping.discard(uid)
        _deleted.discard(uid)
        deleted = gone or (stopped.reason is not None and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason)
        if tick is not None and not tick.done():
            if deleted:
                # The tick's thread runs on, and would publish the gone object's metrics again after they
                # were forgotten -- for good (TritonscaleBelowWarmFloor for a service that no longer
                # exists; session 83's audit): forget them once it is done.
                tick.add_done_callback(lambda t: _forget_object(t, uid, namespace, name))
            else:
                tick.cancel()  # the operator stops: as an unshielded await would have
        elif deleted:
            _forget_object(None, uid, namespace, name)


def _forget_object(tick: asyncio.Task[Any] | None, uid: str, namespace: str, name: str) -> None:
    """Forget a deleted object's autoscaler memory and metrics (after its last tick, if one still ran)."""
    if tick is not None and not tick.cancelled():
        tick.exception()  # its outcome no longer matters, but is taken (no "exception never retrieved")
    autoscaler.forget(uid)
    om.forget(namespace, name, uid)
    _source_gone(uid)
    _forget_passes(namespace, name, uid)
    forget_deleted(uid)


def _handled_generation(body: Any) -> Any:
    """status.observedGeneration: the generation the reconciler last handled (wrote its children for,
    or refused)."""
    status = body.get("status")
    return status.get("observedGeneration") if isinstance(status, Mapping) else None


async def _until_next_tick(body: kopf.Body, deadline: float, handled: Any, uid: str) -> None:
    """Wait for the next tick: until ``deadline``, the operator stopping, or the reconciler handling
    another generation than ``handled`` (read before the tick: Kopf updates a daemon's ``body`` with each
    event of its object). So an edit is acted on once its children are written, not a tick later: a
    raised minReplicas is a warm floor asked for now (at intervalSeconds 90 it moved the
    PodDisruptionBudget at once and the Deployment 70 s later), a lowered maxReplicas a ceiling on GPUs.
    And a new object's first tick, which may run before the reconciler has made its Deployment and
    then do nothing, is followed by one as soon as it has (at intervalSeconds 300 the object went five
    minutes without a tick). A generation the reconciler has not handled (it is retrying) waits for the
    tick it would have had: the fleet is scaled by a spec once its children are."""
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            await asyncio.wait_for(_stop_event().wait(), min(EDIT_POLL_S, remaining))
            return
        except asyncio.TimeoutError:  # the builtin TimeoutError from 3.11
            pass
        if _handled_generation(body) != handled or uid in _deleted:  # an edit, or its object gone
            return


async def _snapshot(spec_url: str | None, url: str | None, window: int, interval: float) -> Snapshot:
    """The tick's snapshot from ``url`` (the spec's, else the operator's), or why there is none to ask
    for: no URL at all (NoPrometheusURL), or the spec's refused by --allowed-prometheus-url
    (PrometheusNotAllowed) -- settings to fix, not a Prometheus that is down."""
    refused = not_allowed(spec_url)
    if refused:
        return Snapshot(taken_at=time.time(), ok=False, error=refused, failure="PrometheusNotAllowed")
    if url:
        return await _snapshots().get(url, window, max_age_s=interval * 0.9)
    return Snapshot(taken_at=time.time(), ok=False, failure="NoPrometheusURL",
                    error="no Prometheus URL: set --prometheus-url, TRITONSCALE_PROMETHEUS_URL or "
                          "spec.scaling.prometheus.url")


def _without_finalizer(fn: Any) -> None:
    """Serve ``fn``'s daemon without a finalizer on the objects. Kopf puts its finalizer on every
    object a daemon serves, only to stop the daemon before the object goes; the daemon here ends
    by itself at its next tick once its object is gone (``run_tick`` says so). A finalizer would
    hold every InferenceService, and so its namespace and the CRD, whenever the operator is not
    running to remove it: ``helm uninstall`` and then deleting the CRD or a namespace hung for
    good, and even with the operator running, deleting the CRD did (Kopf stops serving a resource
    whose CRD is terminating, and never removes the finalizers). Objects that still carry it from
    an earlier version lose it at their next event: Kopf removes a finalizer no handler needs.
    Kopf has no option for it (``requires_finalizer`` is fixed for daemons), so the handler is
    replaced in the registry; ``tests/unit/test_autoscale_daemon.py`` checks it took."""
    spawning = kopf.get_default_registry()._spawning
    spawning._handlers[:] = [dataclasses.replace(h, requires_finalizer=False) if h.fn is fn else h
                             for h in spawning._handlers]


_without_finalizer(autoscale)


# By object uid: the URL label its last tick's source was counted under (tritonscale_metric_source_up). A
# label no object reports any more goes: the cache forgets only the URLs it queried, and the "" of no URL
# or a URL not allowed stayed 0 for good after the last object using it changed or went (an alert on it
# then fired until a restart).
_source_label: dict[str, str] = {}
# By URL label: the objects whose last round under it failed. The gauge is 1 only while none did: set by each
# object's tick alone, two objects on URLs shown alike (a tenant's own credentials, ***) flipped it 1, 0, 1 at
# every tick, and an alert waiting 10 minutes for 0 never fired for the one failing for good (auditM D4).
_source_failing: dict[str, set[str]] = {}


def _source_checked(uid: str, label: str, ok: bool) -> None:
    old = _source_label.get(uid)
    _source_label[uid] = label
    if old is not None and old != label:
        _source_failing.get(old, set()).discard(uid)
    failing = _source_failing.setdefault(label, set())
    if ok:
        failing.discard(uid)
    else:
        failing.add(uid)
    om.source_checked(label, ok, up=not failing)
    if old is not None and old != label:
        _source_unused(old)


def _source_gone(uid: str) -> None:
    old = _source_label.pop(uid, None)
    if old is not None:
        _source_failing.get(old, set()).discard(uid)
        _source_unused(old)


def _source_unused(label: str) -> None:
    if label not in _source_label.values():
        _source_failing.pop(label, None)
        om.forget_url(label)
    elif not _source_failing.get(label):
        om.source_up(label, True)  # the object that failed under it went: the others answer


def not_allowed(url: str | None) -> str | None:
    """Why a spec's Prometheus URL is not queried (``--allowed-prometheus-url`` given, and it is none of
    them nor under one), else None. The operator's pod sends the queries: a URL in a spec could make it
    reach any address it can (README, "Who may create InferenceServices")."""
    if not url or not ALLOWED_PROMETHEUS_URLS or allowed_by(url, ALLOWED_PROMETHEUS_URLS):
        return None
    return (f"spec.scaling.prometheus.url {shown_url(url)} is not a Prometheus this operator may query "
            f"(its --allowed-prometheus-url: {', '.join(shown_url(u) for u in ALLOWED_PROMETHEUS_URLS)}); "
            f"name one of them, or a path under one")


def configure(options: Any) -> None:
    """Called once by `tritonscale run` before Kopf starts."""
    global KUBE, PROMETHEUS_URL, SNAPSHOTS, ALLOWED_PROMETHEUS_URLS
    KUBE = Kube()
    PROMETHEUS_URL = options.prometheus_url
    UPGRADES.max_rollouts = options.max_upgrade_rollouts
    UPGRADES.namespaces = tuple(options.namespaces)
    ALLOWED_PROMETHEUS_URLS = tuple(getattr(options, "allowed_prometheus_urls", ()) or ())
    verify = options.prometheus_tls_verify
    selector = SeriesSelector(namespaces=tuple(options.namespaces), extra=tuple(options.selector_labels.items()))
    SNAPSHOTS = SnapshotCache(lambda url: PrometheusSource(url, selector, verify=verify), on_forget=_forget_url)
    if not PROMETHEUS_URL:  # said once at start, not only in each service's first tick
        log.warning("no Prometheus URL (--prometheus-url, TRITONSCALE_PROMETHEUS_URL): an InferenceService "
                    "without spec.scaling.prometheus.url is held within its bounds (MetricsUnavailable; "
                    "fallbackReplicas after failureThreshold, if set)")
    if verify is False:  # asked for: said once here, not urllib3's warning on every query
        log.warning("Prometheus's TLS certificates are not checked (--prometheus-insecure-skip-tls-verify)")
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if options.metrics_port:
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import MetricsHandler

        from tritonscale import http_listener

        http_listener.serve(options.metrics_port, MetricsHandler.factory(REGISTRY), "metrics")
