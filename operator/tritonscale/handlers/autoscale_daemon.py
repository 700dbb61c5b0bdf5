"""The autoscaler's handlers: one loop per InferenceService (a Kopf daemon) that runs its ticks and its
resync, the deletions the watch sees, and the operator's stop; the metric source each tick counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client import ApiException

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.handlers import settings
from tritonscale.handlers.events import _post_event
from tritonscale.handlers.reconciler import _forget_passes, _gone, _reconcile_owner
from tritonscale.handlers.settings import _kube, _snapshots, not_allowed
from tritonscale.kube.client import API_ERRORS, describe_api_error
from tritonscale.reconcile.inference_service import forget_deleted
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling import spec_in_force
from tritonscale.scaling import tick as autoscaler
from tritonscale.scaling.prometheus_http import shown_url
from tritonscale.scaling.prometheus_source import Snapshot

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

# Set when the operator stops (``_operator_stopping``), one per event loop (an Event is bound to
# one): a daemon Kopf spawns while it stops (an event handled after its daemon killer ran, e.g. the
# status the last tick wrote) is one the killer never stops, and Kopf waited 5 s for it before
# cancelling it -- the Lease went back that much later. Such a daemon ends at its next check or
# within its wait between ticks.
_STOP_EVENTS: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}


def _stop_event() -> asyncio.Event:
    """The running loop's event that ``_operator_stopping`` sets."""
    return _STOP_EVENTS.setdefault(asyncio.get_running_loop(), asyncio.Event())


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
            scaling = spec_in_force.scaling_in_force(uid, body)
            interval = float(scaling.interval_seconds)
            window = scaling.window_seconds
            url = scaling.prometheus.url or settings.PROMETHEUS_URL  # configure's, read now
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
