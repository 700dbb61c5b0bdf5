"""One autoscaler tick for one InferenceService: read, decide, write.

The imperative shell around ``decider.decide``: it reads the object and its
Deployment, turns the shared Prometheus snapshot into an Observation, calls
the pure decider, and writes only what changed -- ``spec.replicas`` of the
Deployment (which the autoscaler alone owns), status, and an Event per scale.

It also lists the Deployment's pods: the scheduler's verdict (pods Pending as
Unschedulable, e.g. for lack of nvidia.com/gpu) and the cold starts of pods that
just became ready reach the decider, and the first one reaches the user as the
``Schedulable`` condition.

Beside it: which spec a fleet is scaled by (``spec_in_force``), another writer of
spec.replicas (``replicas_elsewhere``), the status a decision makes (``tick_status``)
and the Events of Prometheus' answers stopping and coming back (``prometheus_events``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiException

from tritonscale.api import status as st
from tritonscale.api.merge_patch import merge_patch
from tritonscale.api.spec import InferenceServiceSpec, model_name
from tritonscale.api.validation import validate_body
from tritonscale.kube.client import API_ERRORS, Kube, describe_api_error, writes_together
from tritonscale.kube.object_lock import object_lock
from tritonscale.render.deployment_records import SERVING_ANNOTATION, recorded_spec, serving_digest
from tritonscale.render.kubernetes_objects import owned_by
from tritonscale.scaling import batching_status as bs
from tritonscale.scaling import batching_tuner as bt
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling import prometheus_events, replicas_elsewhere, spec_in_force
from tritonscale.scaling.decider import Decision, Observation, Policy, Replicas, State, decide, replicas_text
from tritonscale.scaling.pod_census import (
    PodCensus,
    first_census_since,
    node_names,
    not_created,
    parse_time,
    take_census,
)
from tritonscale.scaling.prometheus_events import prometheus_event, transition_level
from tritonscale.scaling.prometheus_source import Snapshot
from tritonscale.scaling.replicas_elsewhere import (
    OVERRIDE_REPEAT_S,
    EventFn,
    replicas_overridden,
)
from tritonscale.scaling.spec_in_force import spec_to_scale_by
from tritonscale.scaling.tick_status import autoscaler_status

log = logging.getLogger("tritonscale.autoscaler")

# In-memory decider state by object uid; seeded from status.scalingState after a restart.
_memory: dict[str, State] = {}
# By object uid: when the last tick ran and which pods were ready then, so each
# pod's cold start reaches the decider once.
_pods_seen: dict[str, tuple[float, frozenset[str]]] = {}
# Object uids this process has logged a decision of at INFO: its first tick of each object is, so an
# operator started (or elected) while a problem goes on says so -- the change-of-reason rule compares
# with the Scaling condition the previous process wrote, and would stay silent.
_logged: set[str] = set()
# Who this operator is, in status.operator: its leader Lease (namespace/name: every replica of a release
# shares it, so a failover is no other operator), or its host without leader election (operator_main sets it).
OPERATOR_ID = f"host {socket.gethostname()}"
# status.lastTickTime is written with every status write, and at least this often (s) when nothing else changed.
TICK_STAMP_S = 60.0
# Object uids whose status.operator this process has written: another operator's there since is a conflict.
_stamped: set[str] = set()
# By (object uid, other operator): when OperatorConflict last named it (again after OVERRIDE_REPEAT_S).
_conflicts: dict[tuple[str, str], float] = {}


# Nodes' cordon state by name: (read at, unschedulable). Shared by every InferenceService's tick:
# a node hosts the pods of many, and the drain it is in lasts minutes, so a read this young is
# as good as a fresh one (at 1,000 services ticking every 15 s, a few GETs a second at most).
_nodes: dict[str, tuple[float, bool]] = {}
NODE_TTL_S = 5.0


def _cordoned(kube: Kube, names: frozenset[str], now: float) -> frozenset[str]:
    """Which of ``names`` are cordoned. A node that cannot be read (gone, or no RBAC ``get`` on
    nodes with an older chart) counts as not cordoned: without it, no surge, as before."""
    out = set()
    for name in names:
        seen = _nodes.get(name)
        if seen is None or now - seen[0] > NODE_TTL_S:
            try:
                seen = (now, bool(kube.node_unschedulable(name)))
            except API_ERRORS as exc:
                log.debug("cannot read node %s: %s", name, exc)
                seen = (now, False)
            _nodes[name] = seen
        if seen[1]:
            out.add(name)
    # list() copies the items in one step: other services' ticks (threads) add and drop nodes meanwhile,
    # and a comprehension over the dict itself failed with "dictionary changed size during iteration"
    for name in [n for n, (t, _) in list(_nodes.items()) if now - t > 60 * NODE_TTL_S]:
        _nodes.pop(name, None)  # nodes no pod of ours is on any more
    return frozenset(out)


def forget(uid: str) -> None:
    _stamped.discard(uid)
    for key in [k for k in list(_conflicts) if k[0] == uid]:  # ticks (threads) write it meanwhile
        _conflicts.pop(key, None)
    _memory.pop(uid, None)
    _pods_seen.pop(uid, None)
    prometheus_events.forget(uid)
    spec_in_force.forget(uid)
    replicas_elsewhere.forget(uid)
    _logged.discard(uid)


# Holds where the count suits the load: which of them a tick reports follows the rate's noise (a
# recommendation one replica lower that the tolerance or the scale-down window keeps, or the floor),
# and moving between them says nothing new. Seen alternating tick to tick in the sandbox, each at INFO.
ROUTINE_HOLDS = frozenset({"Steady", "WithinTolerance", "StabilizingScaleDown", "AtWarmFloor"})


def log_level(scaled: bool, reason: str, last: str | None, first: bool) -> int:
    """The operator log keeps what Events lose when they expire: at INFO each scale, each change of
    reason (against the Scaling condition of the last tick) other than between ROUTINE_HOLDS, and this
    process's first decision of the object, so a steady hold is not repeated every tick; every tick at
    DEBUG (``tritonscale run --verbose``)."""
    routine = reason in ROUTINE_HOLDS and last in ROUTINE_HOLDS
    return logging.INFO if scaled or first or (reason != last and not routine) else logging.DEBUG


def _serving(body: dict[str, Any], deployment: dict[str, Any]) -> tuple[str | None, bool]:
    """What the Deployment's pods serve (``Replicas.serving``: its ``SERVING_ANNOTATION``, or for a
    Deployment an earlier operator wrote, the digest of the spec it records; None when it has neither)
    and whether a new template is rolling out (the controller has not seen the latest spec, or old pods
    remain)."""
    digest = ((deployment.get("metadata") or {}).get("annotations") or {}).get(SERVING_ANNOTATION)
    if not isinstance(digest, str) or not digest:
        raw = recorded_spec(deployment, (body.get("spec") or {}))
        spec = None if raw is None else validate_body({"metadata": body.get("metadata") or {}, "spec": raw})[0]
        digest = None if spec is None else serving_digest(spec)
    return digest, bs.template_updating(deployment)


def _census(kube: Kube, namespace: str, deployment: dict[str, Any], uid: str, now: float,
            interval_s: float, cold_start_known: bool,
            last_tick: float | None = None) -> tuple[PodCensus | None, int, str]:
    """The Deployment's pods, counted; (None, 0, why) when they cannot be listed. ``last_tick``: the
    latest tick the restored memory knows of (``first_census_since``)."""
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    try:
        pods = kube.list_pods(namespace, selector) if selector else []
    except ApiException as exc:  # e.g. 403 with an older chart: scale without it, and say so
        return None, 0, f"cannot list the Deployment's pods: {exc.status} {exc.reason}"
    since = first_census_since(now, interval_s, cold_start_known, last_tick)
    last_tick, reported = _pods_seen.get(uid, (since, frozenset()))
    census = take_census(pods, reported, last_tick, _cordoned(kube, node_names(pods), now))
    _pods_seen[uid] = (now, census.ready_uids)
    live = sum(1 for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp"))
    uncreated, why = not_created(deployment, live)
    if uncreated:
        census = dataclasses.replace(census, uncreated=uncreated, uncreated_message=why)
    return census, live, ""


def _last_tick_known(status: Mapping[str, Any], state: State, now: float) -> float | None:
    """The latest tick the memory read from status knows of: its newest rate reading (a tick with
    metrics) or status.lastTickTime (written at least every TICK_STAMP_S), whichever is later; None
    for neither, or a time not before now (a clock that ran ahead)."""
    stamp = status.get("lastTickTime")
    known = [t for t in (parse_time(stamp) if isinstance(stamp, str) else None,
                         state.rates[-1][0] if state.rates else None) if t is not None and t < now]
    return max(known) if known else None


def _scale_failed(kube: Kube, body: dict[str, Any], last: st.Condition | None, written: Mapping[str, Any],
                  new_status: st.InferenceServiceStatus, decision: Decision, current: int, exc: BaseException,
                  now: float, event: EventFn) -> None:
    """The Deployment's replica patch failed (RBAC, an admission webhook, the API server down): the
    user sees it where they look -- the Scaling condition (reason ScaleFailed), a Warning event and
    one log line -- not only in the operator's log. The next tick decides and tries again; the event
    and the warning are said again only when the failure says something new (a quota refusing every
    tick's patch posted one event and one warning per tick). ``last``: the Scaling condition as the tick
    found it (the last tick's); ``written``: status as the tick has written it since."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    message = (f"asked for {decision.replicas} replicas (from {current}; {decision.reason}), but the Deployment's "
               f"patch failed: {describe_api_error(exc)}; the next tick tries again")[:1000]
    new = last is None or last.reason != "ScaleFailed" or last.message != message
    if new:
        event(body, "Warning", "ScaleFailed", message)
    uid = str(meta.get("uid"))
    # logged when new, and by a process's first tick of the object (a refusal that outlives a restart)
    log.log(logging.WARNING if new or uid not in _logged else logging.DEBUG, "%s/%s: %s", namespace, name, message)
    _logged.add(uid)
    om.count_decision(namespace, name, "failed", decision.reason)
    conds = st.set_condition(new_status.conditions, st.SCALING, False, "ScaleFailed", message, now,
                             meta.get("generation"))
    # against what this tick wrote: against what it found, a refusal said the same way again left
    # the tick's own condition (MetricsUnavailable, say) in place of ScaleFailed every other tick
    patch = st.status_patch(written, new_status.model_copy(update={"conditions": conds}))
    if patch is not None:
        kube.patch_inference_service_status(namespace, name, patch, uid=meta["uid"], current=written)


def _decide_or_afresh(obs: Observation, replicas: Replicas, policy: Policy, state: State, now: float,
                      who: str) -> tuple[Decision, State]:
    """``decide`` and the memory it decided from; where it raises on the memory, ``decide`` from none: a
    memory it cannot take (a hand edit of status.scalingState in bounds that still breaks its arithmetic)
    held the count on every tick after, for good. A fresh memory starts as a new object's does (the
    scale-down window seeded with the count now). Readings it cannot take raise again, for
    ``_decision_failed``."""
    try:
        return decide(obs, replicas, policy, state, now), state
    except Exception as exc:
        if state == State():
            raise
        decision = decide(obs, replicas, policy, State(), now)
        log.warning("%s: the autoscaler's memory could not be used (%s: %s): started afresh", who,
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return dataclasses.replace(decision, message=decision.message + "; the remembered state "
                                   "(status.scalingState) could not be used: started afresh"), State()


def _decision_failed(kube: Kube, body: dict[str, Any], status: Mapping[str, Any], current: int,
                     exc: BaseException, now: float) -> None:
    """``decide`` raised (readings it cannot take: a p95 of 5e-324 ms once divided by zero): the count is
    held, and the Scaling condition says so (reason DecisionFailed) -- the loop's log line alone left
    status saying the last decision's reason while no tick decided anything."""
    meta = body["metadata"]
    first = str(exc).splitlines()[0] if str(exc) else ""
    message = (f"holding {replicas_text(current)}: the autoscaler could not decide on this tick's readings "
               f"({type(exc).__name__}{': ' + first if first else ''}); the next tick tries again")[:1000]
    conds = st.set_condition(st.conditions_of(status), st.SCALING, False, "DecisionFailed", message, now,
                             meta.get("generation"))
    patch = st.status_patch(status, st.InferenceServiceStatus(conditions=conds))
    if patch is not None:
        kube.patch_inference_service_status(meta["namespace"], meta["name"], patch, uid=meta["uid"],
                                            current=status)


def _tune(spec: InferenceServiceSpec, status: Mapping[str, Any], obs: Observation, decision: Decision,
          policy: Policy, ready: int, deployment: dict[str, Any], now: float, who: str) -> bt.Tuning | None:
    """``batching_status.tune_tick``; None, and one log line, if it fails: the tuner is an optimisation,
    and a failure of it must not stop the tick's scaling and status (a fast model's cost of 0.04 +
    0.004n ms once divided by zero in it at every tick, and the fleet never moved)."""
    try:
        return bs.tune_tick(spec, status, obs, decision, policy, ready, deployment, now)
    except Exception as exc:  # noqa: BLE001 (a bug's boundary: scaling goes on without the tuner)
        log.error("%s: the batching tuner failed, scaling goes on without it: %s: %s", who, type(exc).__name__, exc)
        log.debug("%s: the batching tuner's failure", who, exc_info=True)
        return None


def _decide_again(obs: Observation, replicas: Replicas, policy: Policy, state: State, now: float, first: Decision,
                  who: str) -> Decision:
    """This tick's decision with the batcher settings the tuner has just put in force (``policy``), from the same
    memory and readings: the decider plans with the settings in force, and from this tick they are these. The
    first decision, with the settings replaced, could ask for a fleet only they need: from a 150 ms delay it went
    to maxReplicas, and the change's new pods waited for those GPUs. ``first`` stands if this one fails."""
    try:
        return decide(obs, replicas, policy, state, now)
    except Exception as exc:  # noqa: BLE001 (the first decision, made with the same readings, stands)
        log.error("%s: deciding again with the tuned batcher settings failed, the first decision stands: %s: %s",
                  who, type(exc).__name__, exc)
        return first


def other_operator(status: Mapping[str, Any], uid: str) -> str | None:
    """Another operator, if one wrote this object's autoscaler status since this process did (its own
    write says OPERATOR_ID): two operators act on it (two releases whose namespaces overlap, a second
    install of install.yaml, a local `tritonscale run`) and scale it against each other. None before
    this process wrote it at all: the stamp may be a predecessor's (an operator replaced by another of
    another Lease). No times are compared: two writers' clocks need not agree, and a whole-second
    lastTickTime could not tell apart two writes within one second."""
    other = status.get("operator")
    if uid not in _stamped or not isinstance(other, str) or not other or other == OPERATOR_ID:
        return None
    return other


def _operator_conflict(body: dict[str, Any], other: str, now: float, event: EventFn) -> None:
    """A Warning event and a log line naming the other operator, once an hour per object and operator."""
    meta = body["metadata"]
    key = (str(meta.get("uid")), other)
    if now - _conflicts.get(key, -OVERRIDE_REPEAT_S) < OVERRIDE_REPEAT_S:
        return
    _conflicts[key] = now
    message = (f"another operator ({other}) also acts on this InferenceService: it wrote the autoscaler's status "
               f"after this one ({OPERATOR_ID}) did, and two operators scale it against each other. Keep one: "
               "give each Helm release its own watchNamespaces, and remove the other install")
    event(body, "Warning", "OperatorConflict", message)
    log.warning("%s/%s: %s", meta["namespace"], meta["name"], message)


def _stamp_due(status: Mapping[str, Any], changed: bool, now: float) -> bool:
    """Whether this tick writes status.operator and lastTickTime: with every status write it makes anyway
    (``changed``), and at least every TICK_STAMP_S (or at once, when the stamp is another's), so an object
    no operator serves shows it."""
    last = parse_time(status.get("lastTickTime")) if isinstance(status.get("lastTickTime"), str) else None
    return changed or status.get("operator") != OPERATOR_ID or last is None or now - last >= TICK_STAMP_S


def _write_status(kube: Kube, body: dict[str, Any], status: dict[str, Any], new_status: st.InferenceServiceStatus,
                  tuning: bt.Tuning | None, event: EventFn, now: float) -> dict[str, Any]:
    """Patch the tick's status (only what changed, and the stamp when due), with an event for a change of
    Prometheus' state and for a batcher change; returns status as the API server has it now (a merge
    patch of fields)."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    patch = st.status_patch(status, new_status)
    if _stamp_due(status, patch is not None, now):
        patch = {**(patch or {}), "operator": OPERATOR_ID, "lastTickTime": st.rfc3339(now)}
        kube.patch_inference_service_status(namespace, name, patch, uid=body["metadata"]["uid"], current=status)
        _stamped.add(str(body["metadata"].get("uid")))
    said = prometheus_event(str(body["metadata"].get("uid")), status, new_status, now)
    if said is not None:
        event(body, *said)
        log.log(transition_level(said, now), "%s/%s: %s: %s", namespace, name, said[1], said[2])
    if tuning is not None and tuning.changed:
        event(body, "Normal", "BatchingTuned", f"{tuning.reason}: {tuning.message}"[:1000])
        log.info("%s/%s: batching tuned: %s: %s", namespace, name, tuning.reason, tuning.message)
    written: dict[str, Any] = merge_patch(status, patch or {})
    return written


def run_tick(kube: Kube, namespace: str, name: str, snapshot: Snapshot, now: float, event: EventFn,
             uid: str | None = None) -> bool:
    """One tick: nothing for an object being deleted, without its Deployment yet, or with an invalid
    spec and none valid seen since the operator started (the reconciler reports it; with one, the
    fleet is scaled by it). False when the object is gone, or (``uid``
    given) replaced by another of its name: the caller's loop for it is over."""
    with object_lock(namespace, name):
        body = kube.get_inference_service(namespace, name)
        if body is None or (uid is not None and body["metadata"].get("uid") != uid):
            return False
        if body["metadata"].get("deletionTimestamp"):
            return True
        uid = body["metadata"]["uid"]
        om.claim(namespace, name, uid)  # its series are this object's now (not a deleted one's of its name)
        deployment = kube.get("Deployment", namespace, name)
        if deployment is None or not owned_by(deployment, uid):
            return True  # not made yet, or someone else's of that name (the reconciler reports NameConflict)
        scaled_by = spec_to_scale_by(kube, body, deployment)
        if scaled_by is None:
            return True  # invalid, and no valid spec known to scale it by
        spec, stale = scaled_by
        status = body.get("status") or {}
        other = other_operator(status, uid)
        if other is not None:
            _operator_conflict(body, other, now, event)
        state = _memory.get(uid) or State.from_dict(status.get("scalingState"))
        current = int((deployment.get("spec") or {}).get("replicas") or 0)
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        # The Scaling condition of the last tick: ScaleFailed stops the override check, a change of
        # reason is logged at INFO.
        scaling = next((c for c in st.conditions_of(status) if c.type == st.SCALING), None)
        last = scaling.reason if scaling is not None else None
        override = replicas_overridden(body, status, deployment, current, last, now, event)
        model = model_name(spec, name)
        obs = snapshot.observation(namespace, name, model)

        census, live_pods, census_error = _census(kube, namespace, deployment, uid, now,
                                                  float(spec.scaling.interval_seconds), state.cold_start_s is not None,
                                                  _last_tick_known(status, state, now))
        serving, rolling_out = _serving(body, deployment)
        replicas = Replicas(current=current, ready=ready,
                            unschedulable=census.unschedulable + census.uncreated if census else 0,
                            draining=census.draining if census else 0,
                            startup_s=census.startup_s if census else (), serving=serving, rolling_out=rolling_out)
        # The decider plans with the batcher settings in force; the tuner may change them after it
        # (spec.batching.autoTune), from what the decider learned this tick.
        settings, _ = bs.in_force(spec, status)
        policy = bs.with_settings(Policy.from_spec(spec.scaling, spec.model.max_batch_size), settings)
        try:
            decision, state = _decide_or_afresh(obs, replicas, policy, state, now, f"{namespace}/{name}")
        except Exception as exc:  # a reading the decider cannot take: hold, and say so where users look
            _decision_failed(kube, body, status, current, exc, now)
            raise  # the loop logs it and ticks again
        # No tuning by a remembered spec: the reconciler applies nothing while the spec is invalid, so a
        # change would be in status and not in the pods.
        tuning = None if stale else _tune(spec, status, obs, decision, policy, min(ready, current), deployment,
                                          now, f"{namespace}/{name}")
        if tuning is not None and tuning.changed:
            decision = _decide_again(obs, replicas, bs.with_settings(policy, tuning.settings), state, now, decision,
                                     f"{namespace}/{name}")
        if stale:
            decision = dataclasses.replace(decision, message=decision.message + "; the spec as edited is invalid "
                                           "(condition SpecValid): scaling by the last valid one")
        _memory[uid] = decision.state

        # The decider's memory goes to status before the replica count changes: an operator killed
        # between the two writes then loses nothing (the next tick, or a new leader, re-applies the
        # count from the same memory).
        new_status = autoscaler_status(status, decision, obs, census, census_error, live_pods, now,
                                       body["metadata"].get("generation"))
        # The settings in force; not where the tuner failed this tick (``_tune``): removed, status.batching
        # would send the pods back to the spec's values and the tuner's memory with it.
        if not stale and (tuning is not None or not st.auto_tune_enabled(spec)):
            new_status.batching = bs.batching_status(spec, status, tuning, now)
        if override.fight is not None:
            new_status.conditions = st.set_condition(
                new_status.conditions, st.SCALING, False, "ReplicasSetElsewhere",
                f"{override.fight}; the autoscaler's decision: {decision.reason}: {decision.message}"[:1000], now,
                body["metadata"].get("generation"))
        scaled = decision.replicas != current
        # A scale's status and count go together (kube.client.writes_together): a stop between them left
        # status saying the fleet was scaled when the count was never written.
        with writes_together() if scaled else contextlib.nullcontext():
            written = _write_status(kube, body, status, new_status, tuning, event, now)

            verb = ("up" if decision.replicas > current else "down") if scaled else "none"
            what = (f"scaled {verb} from {current} to {decision.replicas}" if scaled
                    else f"holding {replicas_text(current)} ({ready} ready)")
            if scaled and override.writers:  # a count set by hand put back: not a change of load
                what += (f" (spec.replicas had been set to {current} elsewhere; the last tick asked for "
                         f"{override.asked})")
            # The gauges follow every tick, a scale the API refuses included (status says the same).
            om.publish(namespace, name, decision.replicas, ready, (spec.scaling.floor, spec.scaling.max_replicas),
                       spec.scaling.target_p95_milliseconds, obs.p95_ms, spec.scaling.tolerance)
            if scaled:
                try:
                    kube.patch("Deployment", namespace, name, {"spec": {"replicas": decision.replicas}})
                except API_ERRORS as exc:
                    # Nothing changed: lastScaleTime stays the last change's (the decider stamped this tick's,
                    # and a refusal at every tick moved it every tick while nothing scaled).
                    kept = decision.state.scale_time_from(state, now, policy.interval_s)
                    _memory[uid] = kept
                    new_status = new_status.model_copy(update={
                        "scaling_state": kept.to_dict(), "last_scale_time": status.get("lastScaleTime")})
                    _scale_failed(kube, body, scaling, written, new_status, decision, current, exc, now, event)
                    return True
                event(body, "Normal", "Scaled", f"{what}: {decision.reason}: {decision.message}"[:1000])
        om.count_decision(namespace, name, verb, decision.reason)
        level = log_level(scaled, decision.reason, last, uid not in _logged)
        _logged.add(uid)
        log.log(level, "%s/%s: %s: %s: %s", namespace, name, what, decision.reason, decision.message)
        return True
