"""api/status.py: status is built from the model, each writer sets only the fields it owns,
and a write carries only what changed (nothing at all when nothing did)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from support.spec_cases import load_sample
from tritonscale.api import status as st
from tritonscale.api.merge_patch import merge_patch
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.api.validation import Problem
from tritonscale.reconcile.reconciler_status import counts_from, status_for_invalid, status_from_children
from tritonscale.scaling.decider import Decision, Observation, State
from tritonscale.scaling.pod_census import PodCensus
from tritonscale.scaling.tick_status import autoscaler_status

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def _cond(type_: str, status: str = "True", reason: str = "R", when: str = "2023-01-01T00:00:00Z",
          **extra: Any) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "m", "lastTransitionTime": when, **extra}


def _dump(conds: list[st.Condition]) -> list[dict[str, Any]]:
    return [c.model_dump(by_alias=True, exclude_unset=True) for c in conds]


# ---- conditions -------------------------------------------------------------------------


def test_rfc3339_is_utc_to_the_second() -> None:
    assert st.rfc3339(T0) == "2023-11-14T22:13:20Z"
    assert st.rfc3339(T0 + 0.9) == "2023-11-14T22:13:20Z"


def test_a_new_condition_gets_a_transition_time_and_the_generation() -> None:
    out = st.set_condition([], st.READY, True, "ReplicasReady", "1 ready", T0, 3)
    assert _dump(out) == [{"type": "Ready", "status": "True", "reason": "ReplicasReady", "message": "1 ready",
                           "lastTransitionTime": "2023-11-14T22:13:20Z", "observedGeneration": 3}]
    assert "observedGeneration" not in _dump(st.set_condition([], st.READY, "Unknown", "X", "", T0))[0]


def test_transition_time_moves_only_when_the_status_flips() -> None:
    live = st.conditions_of({"conditions": [_cond("Ready", "True")]})
    same = st.set_condition(live, st.READY, True, "Other", "new message", T0, 4)
    assert _dump(same)[0] == {**_cond("Ready", "True", "Other"), "message": "new message", "observedGeneration": 4}
    flipped = st.set_condition(live, st.READY, False, "ReplicasStarting", "0/1", T0)
    assert _dump(flipped)[0]["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    assert _dump(live) == [_cond("Ready", "True")], "the input list is not changed"


def test_other_conditions_pass_through_untouched_and_in_order() -> None:
    live = [_cond("Scaling", reason="StabilizingScaleDown", observedGeneration=2, somethingNew="kept"),
            _cond("Ready"), _cond("MetricsAvailable", "False", "NoData")]
    out = st.set_condition(st.conditions_of({"conditions": live}), st.READY, False, "ReplicasStarting", "m", T0)
    dumped = _dump(out)
    assert [c["type"] for c in dumped] == ["Scaling", "Ready", "MetricsAvailable"]
    assert dumped[0] == live[0] and dumped[2] == live[2]


# ---- the write ----------------------------------------------------------------------------


def test_status_patch_carries_only_what_changed() -> None:
    live = {"model": "linear", "replicas": 2, "readyReplicas": 1, "desiredReplicas": 3}
    new = st.InferenceServiceStatus(model="linear", replicas=2, ready_replicas=2)
    assert st.status_patch(live, new) == {"readyReplicas": 2}, "desiredReplicas is not ours: left alone"
    assert st.status_patch({**live, "readyReplicas": 2}, new) is None
    assert st.status_patch(None, st.InferenceServiceStatus()) is None


def test_a_field_set_to_none_is_removed_and_an_unset_one_left_alone() -> None:
    live = {"p95Milliseconds": 41.2, "requestsPerSecond": 3.0}
    new = st.InferenceServiceStatus(p95_milliseconds=None)
    assert st.status_patch(live, new) == {"p95Milliseconds": None}
    assert st.status_patch({}, new) is None, "already absent"


# ---- who owns what ------------------------------------------------------------------------


def test_every_status_field_has_exactly_one_owner() -> None:
    aliases = {f.alias or name for name, f in st.InferenceServiceStatus.model_fields.items()}
    assert set(st.FIELD_OWNERS) | {"conditions"} == aliases
    assert set(st.CONDITION_OWNERS) == {st.READY, st.SPEC_VALID, st.SCALING, st.METRICS_AVAILABLE, st.SCHEDULABLE,
                                       st.UPGRADE_PENDING}


def _owned_only(owner: str, before: dict[str, Any], new: st.InferenceServiceStatus) -> None:
    """``new`` sets only ``owner``'s fields, and changes only ``owner``'s conditions."""
    fields = set(new.model_dump(by_alias=True, exclude_unset=True)) - {"conditions"}
    assert {f: st.FIELD_OWNERS[f] for f in fields} == {f: owner for f in fields}
    old = {c["type"]: c for c in before.get("conditions") or []}
    for cond in _dump(new.conditions):
        if st.CONDITION_OWNERS[cond["type"]] != owner:
            assert cond == old[cond["type"]], f"{owner} changed {cond['type']}"


def _body(status: dict[str, Any]) -> dict[str, Any]:
    doc = load_sample()
    doc["metadata"].update(namespace="ns", uid="u-1", generation=2)
    doc["status"] = status
    return doc


LIVE = {
    "observedGeneration": 1, "desiredReplicas": 3, "p95Milliseconds": 80.0, "scalingState": {"failures": 0},
    "conditions": [_cond("Ready"), _cond("SpecValid"), _cond("Scaling", reason="WithinTolerance"),
                   _cond("MetricsAvailable"), _cond("Schedulable")],
}
DEPLOYMENT = {"spec": {"replicas": 3}, "status": {"readyReplicas": 2}}


def test_the_reconciler_writes_only_its_own_fields() -> None:
    body = _body(copy.deepcopy(LIVE))
    spec = InferenceServiceSpec.model_validate(body["spec"])
    valid = status_from_children(body, DEPLOYMENT, spec, T0)
    _owned_only(st.RECONCILER, LIVE, valid)
    assert (valid.replicas, valid.ready_replicas, valid.desired_replicas) == (3, 2, None)
    _owned_only(st.RECONCILER, LIVE, status_for_invalid(body, [Problem("spec.x", "bad")], T0))
    counts = counts_from({**DEPLOYMENT, "metadata": {"ownerReferences": [{"uid": "u"}]}}, "u")
    assert counts is not None
    _owned_only(st.RECONCILER, LIVE, counts)


@pytest.mark.parametrize(("threshold", "noted"), [(None, False), (2.0, False), (3.0, True)])
def test_spec_valid_says_when_the_deprecated_panic_threshold_is_set(threshold: float | None, noted: bool) -> None:
    """panicThreshold is kept so old objects stay valid, and nothing reads it: a value other than the API
    server's default of 2 was a user's, and SpecValid's message tells them it does nothing."""
    body = _body(copy.deepcopy(LIVE))
    if threshold is not None:
        body["spec"]["scaling"]["panicThreshold"] = threshold
    spec = InferenceServiceSpec.model_validate(body["spec"])
    (valid,) = [c for c in status_from_children(body, DEPLOYMENT, spec, T0).conditions if c.type == st.SPEC_VALID]
    assert valid.status == "True"
    if noted:
        assert valid.message == ("spec is valid; spec.scaling.panicThreshold (3) is deprecated and ignored: a p95 "
                                 "breach with a queue behind it adds one replica, whatever the ratio")
    else:
        assert valid.message == "spec is valid"


def test_a_refused_spec_names_its_model_only_when_it_parsed() -> None:
    """MODEL (``status.model``) for a spec the API server refused as rendered (ChildRejected) is the spec's
    model, as for a NameConflict; for a spec that did not parse the field is left as a valid generation
    wrote it (its children keep serving that model), never removed."""
    body = _body({**copy.deepcopy(LIVE), "model": "earlier"})
    spec = InferenceServiceSpec.model_validate(body["spec"])
    rejected = status_for_invalid(body, [Problem("spec.runtime.env[0].name", "Required")], T0,
                                  reason="ChildRejected", spec=spec)
    assert rejected.model == "linear"
    assert (st.status_patch(body["status"], rejected) or {}).get("model") == "linear"
    unparsed = status_for_invalid(body, [Problem("spec.x", "bad")], T0)
    assert "model" not in unparsed.model_dump(by_alias=True, exclude_unset=True)
    assert "model" not in (st.status_patch(body["status"], unparsed) or {})


def test_the_autoscaler_writes_only_its_own_fields() -> None:
    decision = Decision(4, "LoadIncreased", "more", State(failures=0, last_scale_time=T0), metrics_ok=True)
    obs = Observation(status="ok", p95_ms=123.456, rps=12.345)
    census = PodCensus(unschedulable=1, unschedulable_message="0/1 nodes", startup_s=(), ready_uids=frozenset())
    new = autoscaler_status(LIVE, decision, obs, census, "", 4, T0, 2)
    _owned_only(st.AUTOSCALER, LIVE, new)
    dumped = new.model_dump(by_alias=True, exclude_unset=True)
    assert (dumped["desiredReplicas"], dumped["p95Milliseconds"], dumped["requestsPerSecond"]) == (4, 123.5, 12.35)
    assert dumped["lastScaleTime"] == "2023-11-14T22:13:20Z"
    assert "replicas" not in dumped and "readyReplicas" not in dumped, "the reconciler's: it follows the Deployment"


@pytest.mark.parametrize(("census", "status", "reason", "message"), [
    (PodCensus(0, "", (), frozenset()), "True", "NoUnschedulablePods", "none of the 4 pods is unschedulable"),
    (PodCensus(1, "0/1 nodes are available", (), frozenset()), "False", "Unschedulable",
     "1 of 4 pods cannot be scheduled: 0/1 nodes are available"),
    # a quota refuses pods: none exists to be Pending, and the Deployment's ReplicaFailure says why
    (PodCensus(0, "", (), frozenset(), uncreated=2, uncreated_message="exceeded quota: gpus"), "False",
     "PodsNotCreated", "the Deployment's ReplicaSet cannot create 2 pod(s) it asks for (exceeded quota: gpus)"),
    (PodCensus(1, "0/1 nodes are available", (), frozenset(), uncreated=2, uncreated_message="exceeded quota: gpus"),
     "False", "PodsNotCreated",
     "the Deployment's ReplicaSet cannot create 2 pod(s) it asks for (exceeded quota: gpus); "
     "1 pod(s) cannot be scheduled: 0/1 nodes are available"),
])
def test_the_schedulable_condition_names_pods_unplaced_and_pods_not_created(census, status, reason, message) -> None:
    decision = Decision(4, "Unschedulable", "held", State(), metrics_ok=True)
    new = autoscaler_status(LIVE, decision, Observation(status="ok", p95_ms=80.0, rps=5.0), census, "", 4, T0, 2)
    (cond,) = [c for c in new.conditions if c.type == st.SCHEDULABLE]
    assert (cond.status, cond.reason, cond.message) == (status, reason, message)


@pytest.mark.parametrize(("obs", "reason", "message"), [
    (Observation(status="ok", p95_ms=80.0, rps=5.0), "Available", "p95 80.0 ms at 5.00 rps"),
    (Observation(status="ok", p95_ms=None, rps=0.0), "Idle", "no requests in the rate window"),
    # requests flowing and a NaN p95 (Triton's summary, its own 60 s): it said Idle beside 200 rps
    (Observation(status="ok", p95_ms=None, rps=200.0), "NoLatency", "200.00 rps, but no p95"),
    # the reading says why (Snapshot.observation): here, no summary series (the response cache)
    (Observation(status="ok", p95_ms=None, rps=200.0, message="Triton exports no latency summary"), "NoLatency",
     "200.00 rps, but no p95 (Triton exports no latency summary); scaling on the rate and the queue"),
])
def test_metrics_available_tells_idle_from_a_missing_latency(obs, reason, message) -> None:
    decision = Decision(3, "WithinTolerance", "ok", State(), metrics_ok=True)
    new = autoscaler_status(LIVE, decision, obs, None, "cannot list pods", 0, T0, 2)
    (cond,) = [c for c in new.conditions if c.type == st.METRICS_AVAILABLE]
    assert (cond.status, cond.reason) == ("True", reason) and cond.message.startswith(message)


@pytest.mark.parametrize("writer", ["reconciler", "autoscaler"])
def test_writing_the_same_status_again_writes_nothing(writer: str) -> None:
    body = _body(copy.deepcopy(LIVE))
    if writer == "reconciler":
        def build(status: dict[str, Any]) -> st.InferenceServiceStatus:
            spec = InferenceServiceSpec.model_validate(body["spec"])
            return status_from_children({**body, "status": status}, DEPLOYMENT, spec, T0)
    else:
        def build(status: dict[str, Any]) -> st.InferenceServiceStatus:
            decision = Decision(3, "WithinTolerance", "ok", State(), metrics_ok=True)
            return autoscaler_status(status, decision, Observation(status="ok", p95_ms=80.0, rps=5.0), None,
                                     "cannot list pods", 0, T0, 2)
    first = st.status_patch(LIVE, build(LIVE))
    assert first is not None
    after = merge_patch(LIVE, first)
    assert st.status_patch(after, build(after)) is None
    assert st.status_patch(after, build(after)) is None, "a later tick at another time: still nothing"


def test_a_condition_message_is_cut_to_what_the_crd_takes() -> None:
    """A longer one made the API server refuse the whole status write (maxLength 32768), so the
    InferenceService kept saying what it said before."""
    long = "spec.runtime.env[0].value: " + "x" * 40_000
    (cond,) = st.set_condition([], st.SPEC_VALID, False, "ChildRejected", long, 0.0, 2)
    assert len(cond.message) <= st.MESSAGE_MAX_CHARS and cond.message.startswith("spec.runtime.env[0].value: ")
    assert cond.message.endswith("more characters cut)")
    st.Condition.model_validate(cond.model_dump())  # the model's own limit holds
    (short,) = st.set_condition([], st.SPEC_VALID, True, "Valid", "spec is valid", 0.0)
    assert short.message == "spec is valid"


def test_ready_says_when_the_deployments_pods_cannot_be_created() -> None:
    """A namespace's PodSecurity level or a missing ServiceAccount: the Deployment's ReplicaFailure
    condition, where Ready said the models were warming up."""
    from tritonscale.reconcile.reconciler_status import ready_condition

    failing = {"status": {"conditions": [
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": 'pods "linear-5d8" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'}]}}
    ok, reason, message = ready_condition(1, failing)
    assert (ok, reason) == (False, "PodsNotCreated")
    assert message.startswith("0/1 replica(s) ready (minReplicas 1); the Deployment's pods cannot be created: "
                              "pods") and \
        'violates PodSecurity "restricted:latest"' in message
    cleared = {"status": {"conditions": [{**failing["status"]["conditions"][1], "status": "False"}]}}
    assert ready_condition(1, cleared)[1] == "ReplicasStarting"
    assert ready_condition(1, {"status": {**failing["status"], "readyReplicas": 1}})[1] == "ReplicasReady"


def test_metrics_available_notes_two_series_per_pod() -> None:
    """Pods scraped under two jobs doubled every rate and the fleet with it, while the condition said
    only "p95 ... at ... rps" (an exploratory review, on a real Prometheus)."""
    decision = Decision(2, "Steady", "ok", State(), metrics_ok=True)

    def message(series: float, pods: int) -> str:
        obs = Observation(status="ok", p95_ms=80.0, rps=400.0, pods=series)
        new = autoscaler_status(LIVE, decision, obs, None, "", pods, T0, 2)
        return next(c.message for c in new.conditions if c.type == st.METRICS_AVAILABLE)

    assert message(4.0, 2) == ("p95 80.0 ms at 400.00 rps; 4 series of Triton's for 2 pod(s): if Prometheus "
                               "scrapes the pods under more than one job, every rate counts each pod more than "
                               "once (--series-label job=NAME keeps one)")
    assert message(3.0, 2) == "p95 80.0 ms at 400.00 rps"  # a pod going away is still scraped for a while
    assert message(2.0, 2) == "p95 80.0 ms at 400.00 rps"
    assert message(2.0, 0) == "p95 80.0 ms at 400.00 rps"
    # A rollout's or scale-down's terminating pods are scraped until they exit: counted (the note read "3
    # series for 1 pod" after every one, seen in the sandbox by an exploratory review)
    from tritonscale.scaling.pod_census import PodCensus
    obs = Observation(status="ok", p95_ms=80.0, rps=400.0, pods=3.0)
    census = PodCensus(0, "", (), frozenset(), listed=2)
    new = autoscaler_status(LIVE, decision, obs, census, "", 1, T0, 2)
    assert next(c.message for c in new.conditions if c.type == st.METRICS_AVAILABLE) == "p95 80.0 ms at 400.00 rps"


def _dep(ready: int, replicas: int, updated: int, progressing: tuple[str, str] | None = None) -> dict:
    conds = [{"type": "Progressing", "status": progressing[0], "reason": progressing[1],
              "message": f'ReplicaSet "linear-74c7" {progressing[1]}'}] if progressing else []
    return {"status": {"readyReplicas": ready, "replicas": replicas, "updatedReplicas": updated,
                       "conditions": conds}}


@pytest.mark.parametrize(("dep", "floor", "status", "reason"), [
    (_dep(2, 2, 2), 1, True, "ReplicasReady"),
    (_dep(2, 4, 4), 2, True, "ReplicasReady"),  # a scale-up: every pod of the current template, ready or not
    (_dep(2, 3, 1), 1, "Unknown", "RollingOut"),  # a new spec beside the earlier one's pods
    (_dep(1, 2, 1, ("True", "ReplicaSetUpdated")), 1, "Unknown", "RollingOut"),
    (_dep(1, 2, 1, ("False", "ProgressDeadlineExceeded")), 1, False, "RolloutStuck"),
    (_dep(0, 1, 1, ("False", "ProgressDeadlineExceeded")), 1, False, "RolloutStuck"),  # old pods already gone
    # A scale-up past the deadline (GPUs short), every pod of the current spec, the floor warm: Ready
    # (the autoscaler's Schedulable condition says why the new pods wait)
    (_dep(2, 4, 4, ("False", "ProgressDeadlineExceeded")), 2, True, "ReplicasReady"),
    (_dep(2, 2, 2, ("True", "NewReplicaSetAvailable")), 1, True, "ReplicasReady"),
    (_dep(0, 2, 1), 1, False, "ReplicasStarting"),
    (_dep(0, 1, 1, ("True", "NewReplicaSetCreated")), 1, False, "ReplicasStarting"),  # a new service
    # every pod was ready once: a hung server's readiness probe failing, or a replacement starting
    (_dep(0, 1, 1, ("True", "NewReplicaSetAvailable")), 1, False, "ReplicasNotReady"),
    (_dep(1, 3, 3, ("True", "NewReplicaSetAvailable")), 2, False, "ReplicasNotReady"),
    # `kubectl rollout pause`: no pod of the new template comes, and no deadline passes
    ({**_dep(2, 3, 1), "metadata": {"name": "linear"}, "spec": {"paused": True}}, 1, "Unknown", "RolloutPaused"),
    ({**_dep(2, 2, 2), "spec": {"paused": True}}, 1, True, "ReplicasReady"),  # paused with nothing to roll out
    # a new template the controller has not reported on yet (generation ahead of observedGeneration)
    ({**_dep(0, 1, 1, ("True", "NewReplicaSetAvailable")), "metadata": {"generation": 3}}, 1, False,
     "ReplicasStarting"),
])
def test_ready_is_about_the_spec_as_applied_not_an_earlier_one_still_serving(dep, floor, status, reason) -> None:
    """A stuck rollout (a model path whose pods never become ready) read Ready=True, from the earlier
    generation's pods (found on the real control plane by an exploratory review)."""
    from tritonscale.reconcile.reconciler_status import ready_condition

    ok, why, message = ready_condition(floor, dep, 7)
    assert (ok, why) == (status, reason), message
    if why == "ReplicasNotReady":  # this pass wrote a new template: its pods are starting, none hung
        assert ready_condition(floor, dep, 7, template_written=True)[1] == "ReplicasStarting"
    template = ("the new pod template (the spec of generation 7, the tuner's status.batching, or a "
                "`kubectl rollout restart`)")
    if why == "RollingOut":
        assert f"rolling out {template}" in message and "of the earlier one" in message
    if why == "RolloutPaused":
        assert message.endswith("is not rolling out (1 pod(s) of it, 2 of the earlier one): `kubectl rollout resume "
                                "deployment/linear`"), message
    if why == "RolloutStuck":
        assert f"the pods of {template} did not become ready within the Deployment's " \
               "progressDeadlineSeconds" in message and "ProgressDeadlineExceeded" in message


def test_a_rollout_whose_new_pods_a_quota_refuses_says_so_while_it_rolls_out() -> None:
    """A quota on nvidia.com/gpu already full refuses the rollout's surge pod: it holds until the progress
    deadline (ten minutes by default), and RollingOut said nothing of why meanwhile."""
    from tritonscale.reconcile.reconciler_status import ready_condition

    dep = _dep(2, 2, 0, ("True", "ReplicaSetUpdated"))
    dep["status"]["conditions"].append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                        "message": 'pods "linear-9f8" is forbidden: exceeded quota: gpus'})
    ok, why, message = ready_condition(1, dep, 7)
    assert (ok, why) == ("Unknown", "RollingOut")
    assert message.endswith("0 pod(s) of it, 2 of the earlier one; the Deployment's pods cannot be created "
                            '(pods "linear-9f8" is forbidden: exceeded quota: gpus)'), message
    # a template this pass wrote: the condition is about the one before it
    assert "cannot be created" not in ready_condition(1, dep, 7, template_written=True)[2]


def test_ready_waits_for_the_deployment_controller_and_knows_a_template_it_just_wrote() -> None:
    """The Deployment as patched still counts the old template's pods as updated (its controller has not
    seen the patch): Ready read True at the new generation before any new pod existed (found by a review).
    A replica patch bumps the generation too, so a Deployment the controller has not caught up with keeps
    what Ready said, rather than flap."""
    from tritonscale.reconcile.reconciler_status import ready_condition

    patched = {"metadata": {"generation": 5}, "status": {"observedGeneration": 4, "readyReplicas": 2, "replicas": 2,
                                                         "updatedReplicas": 2}}
    assert ready_condition(1, patched, 7, template_written=True)[:2] == ("Unknown", "RollingOut")
    assert ready_condition(1, patched, 7, stale_ok=False) is None
    assert ready_condition(1, patched, 7)[:2] == (True, "ReplicasReady")  # no earlier Ready: best known
    body = _body({"conditions": [_cond("Ready", reason="ReplicasReady", observedGeneration=1)]})
    spec = InferenceServiceSpec.model_validate(body["spec"])
    kept = next(c for c in status_from_children(body, patched, spec, T0).conditions if c.type == st.READY)
    assert (kept.status, kept.reason, kept.observed_generation) == ("True", "ReplicasReady", 1)  # not stamped 2
    written = status_from_children(body, patched, spec, T0, template_written=True)
    now = next(c for c in written.conditions if c.type == st.READY)
    assert (now.status, now.reason, now.observed_generation) == ("Unknown", "RollingOut", 2)


def test_metrics_available_says_when_the_rate_window_misses_pods() -> None:
    """A windowSeconds under twice the scrape interval read a share of the pods' traffic as all of it
    while the condition said only "p95 ... at ... rps" (an exploration on a real Prometheus, session 55)."""
    decision = Decision(6, "Steady", "ok", State(), metrics_ok=True)

    def message(**fields: float | None) -> str:
        obs = Observation(status="ok", rps=20.0, pods=4.0, **fields)  # type: ignore[arg-type]
        new = autoscaler_status(LIVE, decision, obs, None, "", 4, T0, 2)
        return next(c.message for c in new.conditions if c.type == st.METRICS_AVAILABLE)

    note = ("; only 2 of 4 pods have two scrapes in the rate window, so the rates miss the others' traffic (a pod "
            "scraped once so far; at every tick, windowSeconds is under twice the scrape interval); scale-downs "
            "keep a replica for each")
    assert message(p95_ms=80.0, rate_pods=2.0) == "p95 80.0 ms at 20.00 rps" + note
    assert message(p95_ms=None, rate_pods=2.0).endswith("scaling on the rate and the queue" + note)
    assert message(p95_ms=80.0, rate_pods=4.0) == "p95 80.0 ms at 20.00 rps"
    assert message(p95_ms=80.0, rate_pods=None) == "p95 80.0 ms at 20.00 rps"


def test_metrics_available_says_when_prometheus_scrapes_less_often_than_measured() -> None:
    """Every autoscaler figure was measured at a 15 s scrape; at 30 s tritonscale met fewer windows in 19
    of 42 scenarios (e2e/bench_scrape_interval.py, session 57), and nothing said so."""
    decision = Decision(6, "Steady", "ok", State(), metrics_ok=True)

    def message(**fields: float | None) -> str:
        obs = Observation(status="ok", rps=20.0, pods=4.0, rate_pods=4.0, **fields)  # type: ignore[arg-type]
        new = autoscaler_status(LIVE, decision, obs, None, "", 4, T0, 2)
        return next(c.message for c in new.conditions if c.type == st.METRICS_AVAILABLE)

    note = ("; Prometheus scrapes the pods every 30 s: the autoscaler was measured at 15 s (the chart's "
            "podMonitor.interval), and bursts shorter than a scrape go unseen until they queue")
    assert message(p95_ms=80.0, scrape_s=30.0) == "p95 80.0 ms at 20.00 rps" + note
    assert message(p95_ms=None, scrape_s=30.0).endswith("scaling on the rate and the queue" + note)
    assert message(p95_ms=80.0, scrape_s=60.0).endswith("every 60 s: the autoscaler was measured at 15 s (the "
                                                        "chart's podMonitor.interval), and bursts shorter than "
                                                        "a scrape go unseen until they queue")
    # the interval measured at, with the jitter of a real scrape; or not known
    for scrape_s in (15.0, 16.2, 22.0, None):
        assert message(p95_ms=80.0, scrape_s=scrape_s) == "p95 80.0 ms at 20.00 rps", scrape_s


def test_ready_names_minreplicas_as_what_it_counts_against() -> None:
    """bert-classifier (minReplicas 1, warmBuffer 1) read "0/1 replica(s) ready" while DESIRED and the
    Deployment said 2: Ready counts against minReplicas, and now says so (an exploration, session 55)."""
    from tritonscale.reconcile.reconciler_status import ready_condition

    starting = {"spec": {"replicas": 2}, "status": {"replicas": 2, "readyReplicas": 0}}
    assert ready_condition(1, starting)[1:] == ("ReplicasStarting", "0/1 replica(s) ready (minReplicas 1); the pods "
                                                "start: each waits for a node (the Schedulable condition says "
                                                "whether one fits), then loads and warms its model before serving")
    warm = {"spec": {"replicas": 2}, "status": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}}
    assert ready_condition(1, warm)[1:] == ("ReplicasReady", "2 replica(s) ready and warm (minReplicas 1)")
