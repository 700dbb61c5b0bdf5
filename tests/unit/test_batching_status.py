"""status.batching and the tick's inputs to the batching tuner (scaling/batching_status.py): what is in
force, what status says, the rate and cost the tuner scores with, and the rollout it waits for. Tables
with a fake clock; the tuner itself is test_batching_tuner.py's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from support.rendered import children
from support.tuner_cases import B16, COST, GREEDY, OVERSIZED, SLOW, TIGHT
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.scaling import batching_status as bs
from tritonscale.scaling import batching_tuner as bt
from tritonscale.scaling.batching_tuner import (
    Bounds,
    Settings,
    TunerState,
    candidates,
    tune,
)
from tritonscale.scaling.decider import (
    Decision,
    Observation,
    Policy,
    State,
    batch_cost,
    capacity_known,
    guessed_cost,
    learned_cost,
    slope_known,
)

# ---- status.batching and the tick's inputs ----------------------------------------------------

def _spec(auto: dict[str, Any] | None, **batching: Any) -> InferenceServiceSpec:
    b: dict[str, Any] = {"maxQueueDelayMicroseconds": 100_000, **batching}
    if auto is not None:
        b["autoTune"] = auto
    return InferenceServiceSpec.model_validate({
        "model": {"storageUri": "s3://b/m", "backend": "python", "maxBatchSize": 16}, "batching": b,
        "scaling": {"targetP95Milliseconds": TIGHT}})


def test_an_explicit_queue_timeout_bounds_the_delay_too() -> None:
    """A 60 ms REJECT timeout leaves 8 ms after a full 52 ms batch: a longer delay gets requests rejected."""
    bounded = Bounds(16, timeout_us=60_000)
    assert max(c.delay_us for c in candidates(GREEDY, bounded, COST, TIGHT)) == 8_000
    assert max(c.delay_us for c in candidates(GREEDY, Bounds(16, timeout_us=500_000), COST, TIGHT)) == 52_000
    spec = _spec({"enabled": True}, queueTimeoutMicroseconds=60_000)
    assert bs.bounds(spec).timeout_us == 60_000
    assert bs.bounds(_spec({"enabled": True}, queueTimeoutMicroseconds=60_000, timeoutAction="DELAY")).timeout_us \
        is None


@pytest.mark.parametrize(("ready", "decided", "per_replica"), [
    (2, 1, 14.0),  # a scale-down: the one left takes the rate (auditB: it scored at 7 rps per replica)
    (2, 2, 7.0),
    (2, 4, 7.0),  # a scale-up: its replicas serve only after a cold start
    (1, 3, 14.0),
])
def test_the_tuner_scores_at_the_rate_each_replica_serves_after_the_decision(ready, decided, per_replica) -> None:
    decision = Decision(decided, "LoadDecreased", "m", State(), True, {"rate": 14.0})
    tobs = bs.tuner_observation(Observation(status="ok", p95_ms=50.0), decision, Policy(target_p95_ms=TIGHT), ready,
                                rollout=False)
    assert tobs.rate_per_replica == per_replica


def test_while_only_a_scale_up_starts_the_tuner_scores_at_the_rate_of_the_fleet_decided() -> None:
    """A change made while a scale-up's pods start is ready when they are: scored at the rate each replica
    sees then, not at the shortage of the ready ones (a breach the replicas cause read as the settings')."""
    decision = Decision(4, "LoadIncreased", "m", State(), True, {"rate": 14.0})
    obs, policy = Observation(status="ok", p95_ms=50.0), Policy(target_p95_ms=TIGHT)
    starting = bs.tuner_observation(obs, decision, policy, 2, rollout=True, starting=True)
    assert (starting.rate_per_replica, starting.starting) == (3.5, True)
    updating = bs.tuner_observation(obs, decision, policy, 2, rollout=True, updating=True)
    assert (updating.rate_per_replica, updating.starting) == (7.0, False)
    # the flag qualifies a rollout only
    assert bs.tuner_observation(obs, decision, policy, 2, rollout=False, starting=True).starting is False


def _decision(rate: float) -> Decision:
    samples = ((1.0, 22.0, 0.0), (16.0, 52.0, 0.0))
    return Decision(2, "Steady", "m", State(batch_samples=samples), True, {"rate": rate})


DEPLOY_DONE = {"metadata": {"generation": 2}, "spec": {"replicas": 2},
               "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}}


@pytest.mark.parametrize(("status", "rolling"), [
    ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, False),
    ({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, True),
    ({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2}, True),  # old pods left
    ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}, True),  # one starting
])
def test_rollout_in_progress(status: dict[str, Any], rolling: bool) -> None:
    assert bs.rollout_in_progress({**DEPLOY_DONE, "status": status}) is rolling


_PDE = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
_REFUSED = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": 'pods "linear-9f8" is forbidden: exceeded quota: gpus'}


@pytest.mark.parametrize(("status", "updating", "stuck"), [
    ({"replicas": 3, "updatedReplicas": 3}, False, False),
    ({"replicas": 3, "updatedReplicas": 3, "conditions": [_PDE]}, False, False),  # a scale-up short of GPUs
    ({"replicas": 4, "updatedReplicas": 1, "conditions": [{**_PDE, "status": "True", "reason": "ReplicaSetUpdated"}]},
     True, False),
    ({"replicas": 4, "updatedReplicas": 1, "conditions": [_PDE]}, True, True),
    ({"replicas": 3, "updatedReplicas": 3, "observedGeneration": 1}, True, False),  # not seen the new spec yet
    # a GPU quota the old pods fill refuses every pod of the new template: stuck before the deadline
    ({"replicas": 3, "updatedReplicas": 0, "conditions": [_REFUSED]}, True, True),
    # some of its pods were created: the rest come as old pods leave and free the quota
    ({"replicas": 4, "updatedReplicas": 1, "conditions": [_REFUSED]}, True, False),
    ({"replicas": 3, "updatedReplicas": 3, "conditions": [_REFUSED]}, False, False),  # a scale-up the quota refuses
    ({"replicas": 3, "updatedReplicas": 0, "conditions": [{**_REFUSED, "status": "False"}]}, True, False),
])
def test_rollout_stuck_is_the_deployments_progress_deadline_while_old_pods_remain(status, updating, stuck) -> None:
    dep = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, **status}}
    assert (bs.template_updating(dep), bs.rollout_stuck(dep)) == (updating, stuck)


def test_without_autotune_the_spec_is_in_force_and_status_batching_shows_it() -> None:
    spec = _spec(None)
    assert bs.in_force(spec, {"batching": {"source": "tuner", "maxQueueDelayMicroseconds": 0}}) == \
        (Settings(100_000, ()), "spec")
    assert bs.tune_tick(spec, {}, Observation("ok"), _decision(100.0), Policy(), 2, DEPLOY_DONE, 0.0) is None
    shown = bs.batching_status(spec, {"batching": {}}, None, 0.0)
    assert shown is not None and (shown.max_queue_delay_microseconds, shown.source, shown.tuner_state) == \
        (100_000, "spec", None)
    off = InferenceServiceSpec.model_validate({**spec.model_dump(by_alias=True), "batching": {"enabled": False}})
    assert bs.batching_status(off, {"batching": {}}, None, 0.0) is None  # no dynamic batching: no delay to show


def test_tick_writes_the_spec_values_first_then_the_tuners_change() -> None:
    spec = _spec({"enabled": True})
    policy = bs.with_settings(Policy(target_p95_ms=TIGHT, max_batch_size=16), Settings(100_000, ()))
    assert policy.queue_delay_ms == 100.0
    obs = Observation("ok", p95_ms=140.0, rps=200.0)
    tuning = bs.tune_tick(spec, {}, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1000.0)
    assert tuning is not None and tuning.changed and tuning.reason == "BreachRelief"
    new = bs.batching_status(spec, {}, tuning, 1000.0)
    assert new is not None
    dumped = new.model_dump(by_alias=True, exclude_none=True)
    assert {k: dumped[k] for k in ("maxQueueDelayMicroseconds", "preferredBatchSizes", "source", "reason")} == \
        {"maxQueueDelayMicroseconds": 0, "preferredBatchSizes": [], "source": "tuner", "reason": "BreachRelief"}
    assert dumped["lastChangeTime"] == "1970-01-01T00:16:40Z"
    # the next tick reads the tuner's settings back from status, and keeps when and why they changed
    live = {"batching": dumped}
    assert bs.in_force(spec, live) == (Settings(0, ()), "tuner")
    again = bs.tune_tick(spec, live, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1015.0)
    kept = bs.batching_status(spec, live, again, 1015.0)
    assert kept is not None and (kept.reason, kept.last_change_time, kept.source) == \
        ("BreachRelief", "1970-01-01T00:16:40Z", "tuner")


def test_the_tuner_holds_while_an_operator_upgrade_waits_to_roll() -> None:
    """The fleet's next pod template waits for other fleets' rollouts (UpgradePending): a change now would
    wait with it, and status.batching would say the pods serve settings they do not."""
    spec = _spec({"enabled": True})
    policy = bs.with_settings(Policy(target_p95_ms=TIGHT, max_batch_size=16), Settings(100_000, ()))
    obs = Observation("ok", p95_ms=140.0, rps=200.0)
    pending = {"conditions": [{"type": "UpgradePending", "status": "True", "reason": "WaitingForRollouts",
                               "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}
    held = bs.tune_tick(spec, pending, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1000.0)
    assert held is not None and not held.changed and held.reason == "Rollout"
    done = {"conditions": [{**pending["conditions"][0], "status": "False", "reason": "RollingOut"}]}
    changed = bs.tune_tick(spec, done, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1000.0)
    assert changed is not None and changed.changed and changed.reason == "BreachRelief"


def test_a_scale_ups_starting_pod_does_not_hold_a_change_away_from_settings_that_miss_the_target() -> None:
    """A scale-up's pod still starting, no pod of an earlier template: the oversized delay, predicted to miss
    the target, is left at once. A template rolling out or an operator upgrade waiting to still holds it, and so
    does the scale-up under settings predicted within the target."""
    spec = _spec({"enabled": True})
    policy = bs.with_settings(Policy(target_p95_ms=TIGHT, max_batch_size=16), Settings(100_000, ()))
    obs = Observation("ok", p95_ms=140.0, rps=200.0)
    scaling_up = {"metadata": {"generation": 3}, "spec": {"replicas": 3},
                  "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2}}
    assert bs.rollout_in_progress(scaling_up) and not bs.template_updating(scaling_up)
    relief = bs.tune_tick(spec, {}, obs, _decision(200.0), policy, 2, scaling_up, 1000.0)
    assert relief is not None and (relief.reason, relief.changed, relief.state.at_once) == ("BreachRelief", True, True)
    updating = {**scaling_up, "status": {**scaling_up["status"], "replicas": 4, "updatedReplicas": 1}}
    pending = {"conditions": [{"type": "UpgradePending", "status": "True", "reason": "WaitingForRollouts",
                               "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}
    for status, dep in (({}, updating), (pending, scaling_up)):
        held = bs.tune_tick(spec, status, obs, _decision(200.0), policy, 2, dep, 1000.0)
        assert held is not None and (held.reason, held.changed) == ("Rollout", False)
    calm_spec = _spec({"enabled": True}, maxQueueDelayMicroseconds=20_000)
    calm = bs.tune_tick(calm_spec, {}, Observation("ok", p95_ms=60.0, rps=200.0), _decision(200.0),
                        bs.with_settings(policy, Settings(20_000, ())), 2, scaling_up, 1000.0)
    assert calm is not None and (calm.reason, calm.changed) == ("Rollout", False), calm.message


def test_before_any_change_status_shows_the_spec_values() -> None:
    spec = _spec({"enabled": True})
    obs = Observation("ok", p95_ms=None, rps=0.0)
    tuning = bs.tune_tick(spec, {}, obs, _decision(0.0), Policy(target_p95_ms=TIGHT), 2, DEPLOY_DONE, 0.0)
    new = bs.batching_status(spec, {}, tuning, 0.0)
    assert new is not None and (new.source, new.max_queue_delay_microseconds, new.reason) == \
        ("spec", 100_000, "SpecValues")
    assert new.tuner_state is not None and new.tuner_state["verdict"] == "Idle"


def test_without_a_target_status_says_the_tuner_cannot_tune() -> None:
    """autoTune on, no scaling.targetP95Milliseconds: the spec's values stay in force, and the reason
    where one looks (status.batching.reason, not only tunerState) says why."""
    spec = _spec({"enabled": True})
    obs = Observation("ok", p95_ms=80.0, rps=200.0)
    tuning = bs.tune_tick(spec, {}, obs, _decision(200.0), Policy(target_p95_ms=None), 2, DEPLOY_DONE, 0.0)
    new = bs.batching_status(spec, {}, tuning, 0.0)
    assert new is not None and (new.source, new.reason) == ("spec", "NoTarget")
    assert "scaling.targetP95Milliseconds" in new.message
    # tuned first, then the target removed: the tuner's settings stay in force, and the reason says why
    live = {"batching": {"maxQueueDelayMicroseconds": 0, "preferredBatchSizes": [], "source": "tuner",
                         "lastChangeTime": "1970-01-01T00:16:40Z", "reason": "BreachRelief", "message": "m"}}
    held = bs.tune_tick(spec, live, obs, _decision(200.0), Policy(target_p95_ms=None), 2, DEPLOY_DONE, 1015.0)
    kept = bs.batching_status(spec, live, held, 1015.0)
    assert kept is not None and (kept.source, kept.max_queue_delay_microseconds, kept.reason,
                                 kept.last_change_time) == ("tuner", 0, "NoTarget", "1970-01-01T00:16:40Z")
    # ... also while a pod is not ready (a scale-up, an unschedulable pod): it said Rollout, and
    # status.batching SpecValues, hiding the one thing the user has to fix.
    starting = {**DEPLOY_DONE, "status": {**DEPLOY_DONE["status"], "readyReplicas": 1}}
    waiting = bs.tune_tick(spec, {}, obs, _decision(200.0), Policy(target_p95_ms=None), 1, starting, 0.0)
    assert waiting is not None and waiting.reason == "NoTarget"
    new = bs.batching_status(spec, {}, waiting, 0.0)
    assert new is not None and (new.source, new.reason) == ("spec", "NoTarget")


def test_tuned_settings_a_narrowed_spec_no_longer_admits_are_brought_within_it_and_said_so() -> None:
    """maxBatchSize lowered below a tuned preferred size: the spec's values came back whole (a poor start the
    tuner could not leave for up to ten minutes, an exploratory review of session 82), and before that
    status said SpecValues, "the tuner has not changed them". Now the tuned settings are brought within the
    spec (``api.status.within_spec``), and status says so, with when, until the tuner changes them again."""
    spec = _spec({"enabled": True})
    live = {"batching": {"maxQueueDelayMicroseconds": 500, "preferredBatchSizes": [4, 8], "source": "tuner",
                         "lastChangeTime": "1970-01-01T00:16:40Z", "reason": "MoreCapacity", "message": "m",
                         "tunerState": {"changeReason": "MoreCapacity", "changeMessage": "m"}}}
    assert bs.in_force(spec, live) == (Settings(500, (4, 8)), "tuner")
    narrowed = _spec({"enabled": True}, preferredBatchSizes=[2, 4])
    narrowed = narrowed.model_copy(update={"model": narrowed.model.model_copy(update={"max_batch_size": 4})})
    assert bs.in_force(narrowed, live) == (Settings(500, (4,)), "tuner")
    obs = Observation("ok", p95_ms=None, rps=0.0)
    tuning = bs.tune_tick(narrowed, live, obs, _decision(0.0), Policy(target_p95_ms=TIGHT), 2, DEPLOY_DONE, 0.0)
    assert tuning is not None and not tuning.changed
    new = bs.batching_status(narrowed, live, tuning, 1015.0)
    assert new is not None and (new.source, new.max_queue_delay_microseconds, new.preferred_batch_sizes,
                                new.reason) == ("tuner", 500, [4], "SpecNarrowed")
    assert new.message == ("the tuner's settings (queue delay 500 us, preferred sizes [4,8]) no longer fit the "
                           "spec (model.maxBatchSize or batching.autoTune's bounds): brought within it, queue delay "
                           "500 us, preferred sizes [4]")
    assert new.last_change_time == "1970-01-01T00:16:55Z"  # the settings in force (and the pods) changed then
    assert new.tuner_state is not None and new.tuner_state["changeReason"] == "SpecNarrowed"
    # ... and it stays said, with when, until the tuner changes them again
    after = {"batching": new.model_dump(by_alias=True, exclude_none=True)}
    for t in (1030.0, 1045.0):
        tick = bs.tune_tick(narrowed, after, obs, _decision(0.0), Policy(target_p95_ms=TIGHT), 2, DEPLOY_DONE, t)
        kept = bs.batching_status(narrowed, after, tick, t)
        assert kept is not None and (kept.source, kept.preferred_batch_sizes, kept.reason, kept.last_change_time,
                                     kept.message) == ("tuner", [4], "SpecNarrowed", "1970-01-01T00:16:55Z",
                                                       new.message)
        after = {"batching": kept.model_dump(by_alias=True, exclude_none=True)}
    # autoTune's delay bound lowered below the tuned delay: capped at it
    capped = _spec({"enabled": True, "maxQueueDelayMicroseconds": 300}, maxQueueDelayMicroseconds=200)
    assert bs.in_force(capped, live) == (Settings(300, (4, 8)), "tuner")


def test_tuned_settings_no_cap_can_fit_give_way_to_the_specs_values() -> None:
    """A REJECT queue timeout lowered below the tuned delay, with no autoTune delay bound to cap it at: the
    spec's own values (which admission holds within the timeout) are in force, and status says why."""
    live = {"batching": {"maxQueueDelayMicroseconds": 200_000, "preferredBatchSizes": [4, 8], "source": "tuner",
                         "lastChangeTime": "1970-01-01T00:16:40Z", "reason": "MoreCapacity", "message": "m"}}
    spec = _spec({"enabled": True}, queueTimeoutMicroseconds=150_000, timeoutAction="REJECT")
    assert bs.in_force(spec, live) == (Settings(100_000, ()), "spec")
    obs = Observation("ok", p95_ms=None, rps=0.0)
    tuning = bs.tune_tick(spec, live, obs, _decision(0.0), Policy(target_p95_ms=TIGHT), 2, DEPLOY_DONE, 0.0)
    new = bs.batching_status(spec, live, tuning, 1015.0)
    assert new is not None and (new.source, new.max_queue_delay_microseconds, new.reason) == \
        ("spec", 100_000, "SpecNarrowed")
    # the sizes written as every other message writes them ([4, 8] was Python's repr)
    assert new.message.startswith("the tuner's settings (queue delay 200000 us, preferred sizes [4,8]) no longer fit")
    assert "the REJECT queue timeout" in new.message and "the tuner starts again from them" in new.message
    assert new.last_change_time == "1970-01-01T00:16:55Z"
    after = {"batching": new.model_dump(by_alias=True, exclude_none=True)}
    tick = bs.tune_tick(spec, after, obs, _decision(0.0), Policy(target_p95_ms=TIGHT), 2, DEPLOY_DONE, 1030.0)
    kept = bs.batching_status(spec, after, tick, 1030.0)
    assert kept is not None and (kept.reason, kept.last_change_time, kept.message) == \
        ("SpecNarrowed", "1970-01-01T00:16:55Z", new.message)


def test_the_reason_of_the_last_change_comes_back_with_the_target() -> None:
    """The target removed and set again: status.batching said NoTarget until the tuner's next change
    (found in the sandbox by an exploratory review)."""
    spec = _spec({"enabled": True})
    obs = Observation("ok", p95_ms=140.0, rps=200.0)
    policy = bs.with_settings(Policy(target_p95_ms=TIGHT, max_batch_size=16), Settings(100_000, ()))
    tuning = bs.tune_tick(spec, {}, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1000.0)
    live = {"batching": bs.batching_status(spec, {}, tuning, 1000.0).model_dump(by_alias=True, exclude_none=True)}
    assert live["batching"]["reason"] == "BreachRelief"
    untargeted = replace(policy, target_p95_ms=None)
    held = bs.tune_tick(spec, live, obs, _decision(200.0), untargeted, 2, DEPLOY_DONE, 1015.0)
    live = {"batching": bs.batching_status(spec, live, held, 1015.0).model_dump(by_alias=True, exclude_none=True)}
    assert live["batching"]["reason"] == "NoTarget"
    back = bs.tune_tick(spec, live, Observation("ok", p95_ms=60.0, rps=200.0), _decision(200.0),
                        bs.with_settings(policy, Settings(0, ())), 2, DEPLOY_DONE, 1030.0)
    again = bs.batching_status(spec, live, back, 1030.0)
    assert again is not None and (again.reason, again.last_change_time) == ("BreachRelief", "1970-01-01T00:16:40Z")
    assert again.message == tuning.message[:1000]


@pytest.mark.parametrize(("samples", "max_batch", "cost", "slope"), [
    ((), 16, None, False),
    (((3.0, 26.0, 0.0), (3.0, 27.0, 0.0)), 16, None, False),  # small batches of one size: any split fits them
    (((3.0, 26.0, 0.0), (4.0, 28.0, 0.0)), 16, (20.0, 2.0), True),  # sizes spread: the slope shows
    # a batch near the maximum tells the capacity (full batches serve the same whatever the split), and
    # is all an oversized delay shows: the tuner takes the even split (a true 5 + 10n read as 77.5 + 5.17n)
    (((15.0, 155.0, 0.0),), 16, (77.5, 77.5 / 15), False),
    (((1.0, 22.0, 0.0),), 1, (11.0, 11.0), True),  # a model that does not batch: nothing to split
])
def test_the_tuner_weighs_settings_only_by_a_cost_the_decider_plans_by(samples, max_batch, cost, slope) -> None:
    """The decider said 'only small batches seen so far' (no capacity) while the tuner judged settings by the
    even split batch_cost makes of one batch size (a=13.6, b=5.06 ms/item for batches of ~2.7 at 27 ms,
    seen in `simulate --batching-tuner --decisions`)."""
    assert slope_known(samples, max_batch) is slope
    assert capacity_known(samples, max_batch) is (cost is not None)
    got = learned_cost(samples, max_batch)
    assert got == (None if cost is None else pytest.approx(cost)), got
    if samples and cost is None:
        assert batch_cost(samples) is not None  # a fit exists: the tuner is kept from the guess, not from nothing
    policy = Policy(target_p95_ms=TIGHT, max_batch_size=max_batch)
    decision = Decision(2, "Steady", "m", State(batch_samples=samples), True, {"rate": 200.0})
    tobs = bs.tuner_observation(Observation(status="ok", p95_ms=50.0), decision, policy, 2, rollout=False)
    assert tobs.rate_per_replica == 100.0
    assert tobs.cost == (None if cost is None else pytest.approx(cost))
    if cost is None:
        out = tune(tobs, OVERSIZED, B16, TunerState(), 1000.0)
        assert (out.reason, out.changed) == ("LearningCost", False)
        assert "one size alone" in out.message


@pytest.mark.parametrize(("samples", "tick", "guess"), [
    ((), None, None),  # nothing seen
    (((3.0, 26.0, 0.0),), None, None),  # batches under a quarter of the maximum: too small to guess from
    (((5.0, 30.0, 0.0),), None, (15.0, 3.0)),  # one size, a good share of 16: split half fixed, half per item
    (((3.0, 26.0, 0.0),), (5.0, 30.0), (15.0, 3.0)),  # the load moves: this tick's larger batches
    (((5.0, 30.0, 0.0),), (6.0, 32.0), (15.0, 3.0)),  # ... only while no remembered one is large enough
    (((3.0, 26.0, 0.0), (4.0, 28.0, 0.0)), None, None),  # sizes spread: the cost is fitted, not guessed
    (((15.0, 155.0, 0.0),), None, None),  # a batch near the maximum tells the capacity: learned_cost's
])
def test_the_cost_guessed_from_one_batch_size(samples, tick, guess) -> None:
    obs = None if tick is None else Observation("ok", batch_size=tick[0], batch_ms=tick[1])
    got = guessed_cost(samples, 16, obs)
    assert got == (None if guess is None else pytest.approx(guess))


def test_a_cost_guessed_from_one_batch_size_leaves_only_settings_no_rate_meets_the_target_with() -> None:
    """The decider plans with a cost guessed from one batch size before the samples tell it (``guessed_cost``),
    and with a delay no rate meets the target with it asks for every replica it may. The tuner takes the same
    guess to leave such settings at once (the sandbox from a 150 ms delay, session 98), and nothing finer."""
    samples = ((5.0, 30.0, 0.0),)
    assert learned_cost(samples, 16) is None
    policy = Policy(target_p95_ms=TIGHT, max_batch_size=16)
    decision = Decision(2, "Steady", "m", State(batch_samples=samples), True, {"rate": 200.0})
    tobs = bs.tuner_observation(Observation(status="ok", p95_ms=110.0), decision, policy, 2, rollout=False)
    assert tobs.cost_guessed and tobs.cost == pytest.approx((15.0, 3.0))
    out = tune(tobs, OVERSIZED, B16, TunerState(), 1000.0)
    assert (out.reason, out.changed, out.settings.delay_us, out.state.at_once) == ("MoreCapacity", True, 0, True)
    assert "from a cost guessed from one batch size" in out.message
    assert out.state.cost is None  # the guess is not kept as the cost scored with: the fit is scored afresh
    held = tune(tobs, SLOW, B16, TunerState(), 1000.0)  # a gain on a guess: waits for the fit
    assert (held.reason, held.changed) == ("LearningCost", False)
    assert "only guessed from one batch size" in held.message


def test_a_change_from_settings_that_miss_the_target_renders_a_rollout_of_every_pod_at_once() -> None:
    """The tick's change away from a 100 ms delay (predicted over the 104 ms target) is written with
    tunerState.rolloutAtOnce, which the reconciler renders as the Deployment's maxSurge 100%; once its rollout
    is done the flag goes, and the next render is back at the default 25%. Settings not the tuner's never
    surge at once, whatever tunerState says."""
    spec = _spec({"enabled": True})
    doc = {"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "m", "namespace": "default"}, "spec": spec.model_dump(by_alias=True, exclude_none=True)}

    def surge(status: dict[str, Any]) -> str:
        return children({**doc, "status": status})["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"]

    policy = bs.with_settings(Policy(target_p95_ms=TIGHT, max_batch_size=16), Settings(100_000, ()))
    obs = Observation("ok", p95_ms=140.0, rps=200.0)
    tuning = bs.tune_tick(spec, {}, obs, _decision(200.0), policy, 2, DEPLOY_DONE, 1000.0)
    assert tuning is not None and tuning.reason == "BreachRelief"
    written = bs.batching_status(spec, {}, tuning, 1000.0)
    assert written is not None
    live = {"batching": written.model_dump(by_alias=True, exclude_none=True)}
    assert live["batching"]["tunerState"]["rolloutAtOnce"] is True
    assert surge(live) == "100%"
    # rolled out: the next ticks clear it, and a render then (a spec edit's) rolls gradually again
    greedy = bs.with_settings(policy, Settings(0, ()))
    calm = Observation("ok", p95_ms=60.0, rps=200.0)
    rolling = {"metadata": {"generation": 3}, "status": {"observedGeneration": 3, "replicas": 4, "updatedReplicas": 2}}
    for now, dep in ((1015.0, rolling), (1200.0, DEPLOY_DONE)):
        t = bs.tune_tick(spec, live, calm, _decision(200.0), greedy, 2, dep, now)
        kept = bs.batching_status(spec, live, t, now)
        assert kept is not None
        live = {"batching": kept.model_dump(by_alias=True, exclude_none=True)}
        assert surge(live) == ("100%" if dep is rolling else "25%")
    assert surge({}) == "25%"
    spec_values = {"batching": {**live["batching"], "source": "spec", "tunerState": {"rolloutAtOnce": True}}}
    assert surge(spec_values) == "25%"
    no_tuner = {**doc, "spec": {**doc["spec"], "batching": {"maxQueueDelayMicroseconds": 0}}}
    assert children({**no_tuner, "status": {"batching": {**live["batching"], "tunerState": {"rolloutAtOnce": True}}}})[
        "Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"


def test_a_stored_tuner_state_is_brought_within_what_the_spec_and_the_clock_allow() -> None:
    """Session 104's fuzzing of status: a hand-edited last change 10**9 s ahead froze the tuner for good (TooSoon),
    and a previous delay of 10**30 us was put in force by a stuck rollout's undo and written to status, past what
    the API server takes. Times ahead come to now (a clock that ran ahead is not a reason to forget them); settings
    no spec could hold are dropped; a hold after a stuck rollout lasts at most its hour from now."""
    now = 5000.0
    raw = bt.TunerState(candidate=bt.Settings(2000, (8,)), candidate_since=now + 1e9, last_change=now + 1e9,
                        previous=bt.Settings(10**30, ()), held_until=now + 1e9).to_dict()
    state = bs.stored_state(raw, now)
    assert (state.candidate, state.candidate_since, state.last_change) == (bt.Settings(2000, (8,)), now, now)
    assert (state.previous, state.held_until) == (None, now + bt.STUCK_HOLD_S)
    for bad in (bt.Settings(-5, ()), bt.Settings(1000, (0,)), bt.Settings(1000, (2**63,))):
        assert bs.stored_state(bt.TunerState(candidate=bad, candidate_since=now - 30).to_dict(), now) == bt.TunerState()
    kept = bt.TunerState(candidate=bt.Settings(1000, (4, 8)), candidate_since=now - 30, last_change=now - 900,
                         previous=bt.Settings(0, ()), held_until=now + 60, rolling_seen=True, at_once=True)
    assert bs.stored_state(kept.to_dict(), now) == kept  # an ordinary memory, as it was
