"""The batching tuner's part of an autoscaler tick: the settings in force, and ``status.batching``.

While ``spec.batching.autoTune.enabled`` the settings in force are ``status.batching``'s (the
reconciler renders config.pbtxt from them); until the tuner first changes them they follow the
spec (``source: spec``). Without autoTune the spec's are in force, and ``status.batching`` shows
them (``source: spec``, no tuner memory); with dynamic batching off it is removed. The decider
plans with the settings in force (``decider.Policy.queue_delay_ms``), the tuner
(``batching_tuner.tune``, pure) may change them, and this module turns its answer into the status
the tick writes -- only the fields that changed reach the API (``status_patch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tritonscale.api import status as st
from tritonscale.api.spec import BatchingSpec, InferenceServiceSpec
from tritonscale.api.spec_base import JSON_INT_MAX, MAX_QUEUE_DELAY_US
from tritonscale.api.status import auto_tune_enabled, tuned_batcher
from tritonscale.scaling import batching_tuner as bt
from tritonscale.scaling.decider import Decision, Observation, Policy, guessed_cost, learned_cost

# tunerState keys: the reason and message of the last change of the settings in force
CHANGE_REASON, CHANGE_MESSAGE = "changeReason", "changeMessage"


def spec_settings(spec: InferenceServiceSpec) -> bt.Settings:
    b = spec.batching
    if b is None or not b.enabled:
        return bt.Settings()
    return bt.Settings(b.max_queue_delay_microseconds, tuple(b.preferred_batch_sizes))


def in_force(spec: InferenceServiceSpec, status: Mapping[str, Any] | None) -> tuple[bt.Settings, str]:
    """(settings in force, source): the tuner's from status.batching while it tunes, else the spec's
    (read as the reconciler renders config.pbtxt: ``api.status.tuned_batcher``)."""
    tuned = tuned_batcher(spec, status)
    if tuned is not None:
        return bt.Settings(tuned.max_queue_delay_microseconds, tuned.preferred_batch_sizes), "tuner"
    return spec_settings(spec), "spec"


def with_settings(policy: Policy, settings: bt.Settings) -> Policy:
    """The decider's policy planning with these batcher settings (its capacity follows them)."""
    return replace(policy, queue_delay_ms=settings.delay_ms, preferred_batch_sizes=settings.preferred)


def bounds(spec: InferenceServiceSpec) -> bt.Bounds:
    return batching_bounds(spec.model.max_batch_size, spec.batching)


def batching_bounds(max_batch_size: int, b: BatchingSpec | None) -> bt.Bounds:
    """The tuner's bounds from ``model.maxBatchSize`` and ``spec.batching`` (the simulator's service has
    no whole spec): autoTune's, and the queue timeout when its action is REJECT."""
    tune = b.auto_tune if b is not None else None
    timeout = b.queue_timeout_microseconds if b is not None and b.timeout_action == "REJECT" else None
    return bt.Bounds(max(1, max_batch_size), tune.max_queue_delay_microseconds if tune else None,
                     tuple(tune.preferred_batch_sizes) if tune else (), timeout or None)


def rollout_in_progress(deployment: Mapping[str, Any]) -> bool:
    """Pods not all updated and ready: a new template rolling out, or replicas still starting."""
    want = int((deployment.get("spec") or {}).get("replicas") or 0)
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    rollout = st.deployment_rollout(deployment)
    return rollout.updating or rollout.updated < want or ready < want


def template_updating(deployment: Mapping[str, Any]) -> bool:
    """A new pod template rolling out: the controller has not seen the latest spec, or pods of an earlier
    template remain (``api.status.deployment_rollout``)."""
    return st.deployment_rollout(deployment).updating


def rollout_stuck(deployment: Mapping[str, Any]) -> bool:
    """The Deployment says its rollout passed progressDeadlineSeconds, while pods of an earlier template
    remain (a scale-up short of GPUs times out too, with every pod of the current template). Or, before the
    deadline, that no pod of the new template exists and its ReplicaSet may not create one (ReplicaFailure:
    a GPU quota the running pods fill): the old pods leave only as new ones become ready, so none ever will
    until the quota changes. A rollout with some of its pods created goes on as old pods leave and free
    their share of the quota, as a full node's does: not stuck."""
    rollout = st.deployment_rollout(deployment)
    return rollout.old > 0 and (rollout.stalled is not None or (rollout.refused is not None and rollout.updated == 0))


def tuner_observation(obs: Observation, decision: Decision, policy: Policy, ready: int,
                      rollout: bool, updating: bool = False, stuck: bool = False,
                      starting: bool = False) -> bt.TunerObservation:
    """What the decider learned this tick, per replica: the cost fit and the arrival rate, over the ready
    replicas that serve it once this tick's decision is made (a scale-down's leave now: a tick that went
    2 -> 1 scored the settings at 7 rps per replica, and the one left took 14; a scale-up's start later).
    While only a scale-up's pods start (``starting``), over the fleet decided: a change made now is ready
    when they are, a cold start on, and scored at the shortage of the ready ones it read a breach the
    replicas cause as the settings' (a fixed-cost model, 40 + 1n ms, went from no delay to 20 ms in the middle
    of a random walk's climb, at +2.9% replica-hours and no window more)."""
    rate = decision.details.get("rate")
    starting = rollout and starting
    serving = decision.replicas if starting else min(ready, decision.replicas)
    per = float(rate) / serving if isinstance(rate, (int, float)) and serving > 0 else None
    cost = learned_cost(decision.state.batch_samples, policy.max_batch_size)  # as the decider's capacity reads it
    # ... or, until it is known, the guess from one batch size the decider plans with (``guessed_cost``)
    guess = None if cost is not None else guessed_cost(decision.state.batch_samples, policy.max_batch_size, obs)
    return bt.TunerObservation(cost if guess is None else guess, per, policy.target_p95_ms, obs.p95_ms, rollout,
                               updating, stuck, policy.tolerance, starting=starting, cost_guessed=guess is not None)


def batching_status(spec: InferenceServiceSpec, status: Mapping[str, Any] | None, tuning: bt.Tuning | None,
                    now: float) -> st.BatchingStatus | None:
    """status.batching after this tick: the settings in force. Without autoTune, the spec's
    (``untuned_status``); with it, ``tuning`` is this tick's answer of the tuner (the caller writes
    nothing where the tuner failed: the settings in force and its memory stay as they are)."""
    live = (status or {}).get("batching") if isinstance((status or {}).get("batching"), Mapping) else None
    if not auto_tune_enabled(spec) or tuning is None:
        return untuned_status(spec, live, now)
    settings, source = in_force(spec, status)
    state = {**tuning.state.to_dict(), "verdict": tuning.reason, "verdictMessage": tuning.message[:1000]}
    if tuning.changed:
        return st.BatchingStatus(
            max_queue_delay_microseconds=tuning.settings.delay_us,
            preferred_batch_sizes=list(tuning.settings.preferred), source="tuner",
            last_change_time=st.rfc3339(now), reason=tuning.reason, message=tuning.message[:1000],
            tuner_state={**state, CHANGE_REASON: tuning.reason, CHANGE_MESSAGE: tuning.message[:1000]})
    # Why the settings in force changed last, kept in tunerState: reason and message may say something
    # else meanwhile (NoTarget), and come back to it.
    told = live.get("tunerState") if live is not None and isinstance(live.get("tunerState"), Mapping) else {}
    last = {k: str(told[k]) for k in (CHANGE_REASON, CHANGE_MESSAGE) if isinstance(told.get(k), str)}
    state.update(last)
    # A spec that cannot tune says so where one looks, not only in tunerState: the settings in force stay.
    no_target = ("NoTarget", "held: the tuner tunes against scaling.targetP95Milliseconds, which the spec does not set")
    if source == "tuner" and live is not None:
        reason, message = str(live.get("reason") or ""), str(live.get("message") or "")
        changed_at = live.get("lastChangeTime")
        was = _written(live)
        if was != (settings.delay_us, list(settings.preferred)):
            # A spec edited since brought them within its bounds (api.status.within_spec): the settings in
            # force, and the pods' config, changed now.
            reason, message = "SpecNarrowed", (
                f"the tuner's settings (queue delay {was[0]} us, preferred sizes {_sizes(was[1])}) no longer "
                f"fit the spec (model.maxBatchSize or batching.autoTune's bounds): brought within it, queue "
                f"delay {settings.delay_us} us, preferred sizes {_sizes(settings.preferred)}")
            changed_at = st.rfc3339(now)
            state.update({CHANGE_REASON: reason, CHANGE_MESSAGE: message})
        elif tuning.reason != "NoTarget" and reason == "NoTarget":
            # the target is back: why the settings in force are what they are
            reason, message = last.get(CHANGE_REASON) or "Tuned", last.get(CHANGE_MESSAGE) or (
                f"the tuner's settings, in force since {live.get('lastChangeTime') or 'an earlier change'}")
        if tuning.reason == "NoTarget":
            reason, message = no_target
        return st.BatchingStatus(
            max_queue_delay_microseconds=settings.delay_us, preferred_batch_sizes=list(settings.preferred),
            source="tuner", last_change_time=changed_at, reason=reason, message=message, tuner_state=state)
    reason, message = "SpecValues", "spec.batching's values; the tuner has not changed them"
    changed_at = None
    if live is not None and live.get("source") == "tuner":
        # Tuned settings that the spec no longer admits (api.status.tuned_batcher): say they went, and why.
        reason, message = "SpecNarrowed", (
            f"the tuner's settings (queue delay {live.get('maxQueueDelayMicroseconds')} us, preferred sizes "
            f"{_sizes(live.get('preferredBatchSizes'))}) no longer fit the spec (the REJECT queue timeout, "
            "or a delay out of range): spec.batching's values are in force, and the tuner starts again "
            "from them")
        changed_at = st.rfc3339(now)
        state.update({CHANGE_REASON: reason, CHANGE_MESSAGE: message})
    elif live is not None and last.get(CHANGE_REASON) == "SpecNarrowed":
        # Said until the tuner changes the settings again, not for one tick: the pods rolled back to them.
        reason, message = "SpecNarrowed", last.get(CHANGE_MESSAGE) or message
        changed_at = live.get("lastChangeTime")
    if tuning.reason == "NoTarget":
        reason, message = no_target
    return st.BatchingStatus(
        max_queue_delay_microseconds=settings.delay_us, preferred_batch_sizes=list(settings.preferred),
        source="spec", last_change_time=changed_at, reason=reason, message=message, tuner_state=state)


def untuned_status(spec: InferenceServiceSpec, live: Mapping[str, Any] | None, now: float) -> st.BatchingStatus | None:
    """status.batching without autoTune: the spec's queue delay and preferred sizes, which config.pbtxt
    carries, so that ``kubectl get tis -o wide`` shows the delay in force whether or not the tuner runs
    (an empty column had read as no delay). No tuner memory: switched on, the tuner starts from the spec.
    ``lastChangeTime`` is when the tick first saw other values in force than the ones written before (a
    spec edit, or autoTune switched off after it had changed them); unknown (absent) until then. None
    (removed) where dynamic batching is off: Triton has no queue delay then."""
    b = spec.batching
    if b is None or not b.enabled:
        return None
    settings = spec_settings(spec)
    values = (settings.delay_us, list(settings.preferred))
    message, changed_at = "spec.batching's values: batching.autoTune is off", None
    if live is not None:
        was = _written(live)
        if was == values:  # as written: the time, and the message said then (until the next change)
            changed_at = live.get("lastChangeTime") if isinstance(live.get("lastChangeTime"), str) else None
            if live.get("source") == "spec" and isinstance(live.get("message"), str) and live.get("message"):
                message = str(live["message"])
        else:
            changed_at = st.rfc3339(now)
            if live.get("source") == "tuner":
                message = (f"batching.autoTune is off: spec.batching's values are in force again, in place of "
                           f"the tuner's (queue delay {was[0]} us, preferred sizes {_sizes(was[1])})")
    shown = st.BatchingStatus(max_queue_delay_microseconds=settings.delay_us,
                              preferred_batch_sizes=list(settings.preferred), source="spec", reason="SpecValues",
                              message=message)
    # A field left unset is left as it is; a null removes it (the tuner's memory, a time no longer known),
    # set only where there is one to remove, so that a tick that changes nothing writes nothing.
    if changed_at is not None or (live is not None and live.get("lastChangeTime") is not None):
        shown.last_change_time = changed_at
    if live is not None and live.get("tunerState") is not None:
        shown.tuner_state = None
    return shown


def _written(live: Mapping[str, Any]) -> tuple[Any, Any]:
    """(queue delay, preferred sizes) as status.batching has them, to compare with the settings in force."""
    return live.get("maxQueueDelayMicroseconds"), live.get("preferredBatchSizes") or []


def _sizes(prefs: Any) -> str:
    """Preferred sizes as the tuner's messages write them: [4,8], or none."""
    if isinstance(prefs, (list, tuple)) and prefs:
        return "[" + ",".join(str(p) for p in prefs) + "]"
    return str(prefs or "none")


def _possible(s: bt.Settings | None) -> bt.Settings | None:
    """Stored settings the spec could hold, else None: a hand-edited delay of 10**30 us was put in force by a
    stuck rollout's undo and written to status, which the API server refuses past int64 (session 104)."""
    ok = s is None or (0 <= s.delay_us <= MAX_QUEUE_DELAY_US and all(1 <= p <= JSON_INT_MAX for p in s.preferred))
    return s if ok else None


def stored_state(raw: Any, now: float) -> bt.TunerState:
    """status.batching.tunerState as the tuner may take it (``TunerState.from_dict``): settings no spec could
    hold dropped, and times ahead of the clock -- a hand edit, or a clock that ran ahead -- brought to it. A
    last change or a proposal stamped 10**9 s ahead froze the tuner for good, saying TooSoon or Confirming."""
    state = bt.TunerState.from_dict(raw)
    since, last = (None if t is None else min(t, now) for t in (state.candidate_since, state.last_change))
    held = None if state.held_until is None else min(state.held_until, now + bt.STUCK_HOLD_S)
    candidate = _possible(state.candidate)
    return replace(state, candidate=candidate, candidate_since=since if candidate else None, last_change=last,
                   previous=_possible(state.previous), held_until=held)


def tune_tick(spec: InferenceServiceSpec, status: Mapping[str, Any] | None, obs: Observation, decision: Decision,
              policy: Policy, ready: int, deployment: Mapping[str, Any], now: float) -> bt.Tuning | None:
    """One tuner call for this tick (None without autoTune)."""
    if not auto_tune_enabled(spec):
        return None
    settings, _ = in_force(spec, status)
    live = (status or {}).get("batching")
    state = stored_state(live.get("tunerState") if isinstance(live, Mapping) else None, now)
    # An operator upgrade's pod template waiting to roll out (UpgradePending, reconcile.upgrade_rollouts) is held
    # as a rollout: a change now would wait with it, while status.batching said the pods serve it.
    upgrade = st.is_true(st.conditions_of(status), st.UPGRADE_PENDING)
    updating = template_updating(deployment)
    rollout = rollout_in_progress(deployment) or upgrade
    # only replicas of the template in force still starting (a scale-up): TunerObservation.starting
    tobs = tuner_observation(obs, decision, policy, ready, rollout, updating, rollout_stuck(deployment),
                             starting=not (updating or upgrade))
    return bt.tune(tobs, settings, bounds(spec), state, now)
