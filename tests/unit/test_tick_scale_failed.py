"""A refused replica patch reaches the user where they look: the Scaling condition (ScaleFailed,
naming the refusal), a Warning event and one log line -- not only the operator's log -- and the
next tick tries again."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiException

from tritonscale.scaling import prometheus_events as pe
from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot


@pytest.fixture(autouse=True)
def _a_new_process() -> None:
    """Each test's object starts with nothing the tick keeps in memory (its decider memory, the Prometheus
    Events said): the tests share one uid with other files' (run after test_tick_invalid_edit alone, one
    failed on the memory that file left)."""
    tick.forget(UID)
    with pe._prometheus_said_lock:
        pe._prometheus_said.clear()

SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "python-cpu.yaml"
UID = "0b8d3f2e-1111-4222-8333-444455556666"


class Kube:
    """The InferenceService and its Deployment at 0 replicas (below the warm floor of 1); the
    Deployment's patch is refused until ``refuse`` is cleared."""

    def __init__(self) -> None:
        body = yaml.safe_load(SAMPLE.read_text())
        body["metadata"].update(uid=UID, generation=1)
        self.body = body
        self.deployment = {"metadata": {"name": "linear", "namespace": "default",
                                        "ownerReferences": [{"uid": UID, "kind": "InferenceService",
                                                             "name": "linear", "controller": True}]},
                           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "linear"}}},
                           "status": {}}
        self.refuse = True
        self.status_patches: list[dict[str, Any]] = []

    def get_inference_service(self, namespace: str, name: str) -> dict[str, Any]:
        return self.body

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self.deployment

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def patch_inference_service_status(self, namespace: str, name: str, patch: dict[str, Any], uid: str,
                                       current: Any) -> None:
        assert uid == self.body["metadata"]["uid"]  # every status write is of the object the tick read
        self.status_patches.append(patch)
        self.body["status"] = {**(self.body.get("status") or {}), **patch}  # st.status_patch: status's fields

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        if self.refuse:
            exc = ApiException(status=403, reason="Forbidden")
            exc.body = json.dumps({"kind": "Status", "message": 'deployments.apps "linear" is forbidden: '
                                                               'exceeded quota: pods'})
            raise exc
        self.deployment["spec"].update(patch["spec"])


def _scaling(kube: Kube) -> dict[str, Any]:
    conds = (kube.body.get("status") or {}).get("conditions") or []
    return next(c for c in conds if c["type"] == "Scaling")


def test_a_refused_replica_patch_is_a_scale_failed_condition_and_a_warning_and_is_retried(caplog):
    kube, said = Kube(), []
    down = Snapshot(taken_at=1000.0, ok=False, error="Prometheus at http://p:9090: connection refused")
    with caplog.at_level(logging.WARNING, logger="tritonscale.autoscaler"):
        tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: said.append(e))
    # Prometheus down: said once, as a Warning of its own (test_prometheus_going_away_and_back_is_an_event)
    assert [e[1] for e in said] == ["PrometheusUnavailable", "ScaleFailed"]
    events = said[1:]
    caplog.records[:] = [r for r in caplog.records if "PrometheusUnavailable" not in r.getMessage()]
    message = ('asked for 1 replicas (from 0; MetricsUnavailable), but the Deployment\'s patch failed: '
               '403 Forbidden: deployments.apps "linear" is forbidden: exceeded quota: pods; '
               'the next tick tries again')
    assert events == [("Warning", "ScaleFailed", message)]
    assert [r.getMessage() for r in caplog.records] == [f"default/linear: {message}"]
    cond = _scaling(kube)
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "ScaleFailed", message)
    assert kube.deployment["spec"]["replicas"] == 0
    # Refused again, the same way: said once, not at every tick.
    with caplog.at_level(logging.WARNING, logger="tritonscale.autoscaler"):
        tick.run_tick(kube, "default", "linear", down, 1007.0, lambda body, *e: events.append(e))
    assert len(events) == 1 and len(caplog.records) == 1
    assert kube.deployment["spec"]["replicas"] == 0
    assert _scaling(kube)["reason"] == "ScaleFailed"  # it read the tick's own reason every other tick
    # A new process (restarted, or elected) says it again in its log, once; no second event.
    tick.forget(UID)
    with caplog.at_level(logging.WARNING, logger="tritonscale.autoscaler"):
        tick.run_tick(kube, "default", "linear", down, 1008.0, lambda body, *e: events.append(e))
        tick.run_tick(kube, "default", "linear", down, 1009.0, lambda body, *e: events.append(e))
    assert len(events) == 1 and len(caplog.records) == 2
    # The operator's gauges follow the tick while the patch is refused (they froze at the last scale).
    from tritonscale.scaling import operator_metrics as om

    om.forget("default", "linear")
    tick.run_tick(kube, "default", "linear", down, 1010.0, lambda body, *e: events.append(e))
    assert om.DESIRED.labels("default", "linear")._value.get() == 1
    assert om.READY.labels("default", "linear")._value.get() == 0
    # Nothing scaled: no lastScaleTime, in status or in the memory (it moved at every refused tick).
    assert kube.body["status"].get("lastScaleTime") is None
    assert kube.body["status"]["scalingState"]["lastScaleTime"] is None
    # The refusal is lifted: the next tick scales, and the condition says what it did.
    kube.refuse = False
    tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    assert kube.deployment["spec"]["replicas"] == 1
    assert events[-1][:2] == ("Normal", "Scaled")
    assert _scaling(kube)["reason"] == "MetricsUnavailable"
    assert kube.body["status"]["lastScaleTime"] == "1970-01-01T00:16:55Z"  # 1015 s: this tick's
    tick.forget(UID)


def test_a_process_says_at_info_what_it_finds_at_its_first_tick_of_an_object(caplog):
    """A restarted (or newly elected) operator logs its first decision of each object at INFO, though
    the reason equals the Scaling condition the previous process wrote (it stayed silent while metrics
    kept failing); later ticks of the same hold are DEBUG."""
    kube = Kube()
    kube.refuse, kube.deployment["spec"]["replicas"] = False, 1
    down = Snapshot(taken_at=1000.0, ok=False, error="Prometheus at http://p:9090: connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: None)  # the previous process
    reason = _scaling(kube)["reason"]
    tick.forget(UID)  # a new process: nothing in memory, the condition in status
    caplog.clear()  # what the previous process said (captured when another test left the logger at INFO)
    for now in (1015.0, 1030.0):
        with caplog.at_level(logging.DEBUG, logger="tritonscale.autoscaler"):
            tick.run_tick(kube, "default", "linear", down, now, lambda body, *e: None)
    levels = [(r.levelno, reason in r.getMessage()) for r in caplog.records if r.name == "tritonscale.autoscaler"]
    assert levels == [(logging.INFO, True), (logging.DEBUG, True)], caplog.records
    tick.forget(UID)


@pytest.mark.parametrize(("scaled", "reason", "last", "first", "level"), [
    (True, "LoadIncreased", "Steady", False, logging.INFO),  # every scale
    (False, "Steady", "Steady", True, logging.INFO),  # a process's first decision of the object
    (False, "Steady", "Steady", False, logging.DEBUG),  # the same hold again
    (False, "MetricsUnavailable", "Steady", False, logging.INFO),  # a new cause
    (False, "Steady", "MetricsUnavailable", False, logging.INFO),  # ... and its end
    (False, "AtMaxReplicas", "Steady", False, logging.INFO),
    # between holds that follow the rate's noise: the sandbox logged one at every 2 s tick
    (False, "WithinTolerance", "Steady", False, logging.DEBUG),
    (False, "StabilizingScaleDown", "WithinTolerance", False, logging.DEBUG),
    (False, "Steady", "AtWarmFloor", False, logging.DEBUG),
    (False, "Steady", None, False, logging.INFO),  # no Scaling condition yet
])
def test_a_hold_is_logged_at_info_when_its_cause_changes(scaled, reason, last, first, level):
    assert tick.log_level(scaled, reason, last, first) == level


def _metrics(status: str, reason: str) -> dict[str, Any]:
    return {"conditions": [{"type": "MetricsAvailable", "status": status, "reason": reason, "message": "m",
                            "lastTransitionTime": "2026-11-27T00:00:00Z"}]}


@pytest.mark.parametrize(("before", "after", "said"), [
    (_metrics("True", "Available"), ("False", "PrometheusUnavailable"), ("Warning", "PrometheusUnavailable")),
    (None, ("False", "PrometheusUnavailable"), ("Warning", "PrometheusUnavailable")),  # down from the start
    (_metrics("False", "PrometheusUnavailable"), ("False", "PrometheusUnavailable"), None),  # once, not each tick
    (_metrics("False", "PrometheusUnavailable"), ("True", "Available"), ("Normal", "PrometheusAvailable")),
    (_metrics("False", "PrometheusUnavailable"), ("True", "Idle"), ("Normal", "PrometheusAvailable")),
    (_metrics("True", "Available"), ("False", "NoData"), None),  # not the dependency: its condition says it
    (_metrics("False", "NoData"), ("True", "Available"), None),
    # back after its own restart: it answers, with fewer than two scrapes yet (the first answer is NoData,
    # and the Warning was never followed by its Normal event)
    (_metrics("False", "PrometheusUnavailable"), ("False", "NoData"), ("Normal", "PrometheusAvailable")),
    (_metrics("True", "Available"), ("True", "Available"), None),
    # nothing to ask: no URL at all, or one --allowed-prometheus-url refuses -- said as such, once
    (None, ("False", "NoPrometheusURL"), ("Warning", "NoPrometheusURL")),
    (_metrics("True", "Available"), ("False", "PrometheusNotAllowed"), ("Warning", "PrometheusNotAllowed")),
    (_metrics("False", "PrometheusNotAllowed"), ("False", "PrometheusNotAllowed"), None),
    (_metrics("False", "PrometheusUnavailable"), ("False", "PrometheusNotAllowed"),
     ("Warning", "PrometheusNotAllowed")),  # another cause: said again
    (_metrics("False", "PrometheusNotAllowed"), ("True", "Available"), ("Normal", "PrometheusAvailable")),
])
def test_prometheus_going_away_and_back_is_an_event(before, after, said):
    """A Prometheus outage changed MetricsAvailable only: no Event and one INFO log line, while bursts went
    unserved at the held count (an exploratory review, Prometheus killed under the sandbox's load)."""
    from tritonscale.api import status as st

    new = st.InferenceServiceStatus(conditions=st.set_condition([], st.METRICS_AVAILABLE, after[0] == "True",
                                                                after[1], "connection refused", 1000.0))
    got = pe.prometheus_transition(before, new)
    assert (got[:2] if got else None) == said
    if got and got[0] == "Warning":
        assert got[2].startswith("connection refused; the autoscaler holds the replica count"), got
        until = "Prometheus answers" if got[1] == "PrometheusUnavailable" else "it has a Prometheus URL it may query"
        assert got[2].endswith(f"failed ticks) until {until}"), got


def _ticks(states: list[tuple[float, str | None]], uid: str = "u-flap") -> list[tuple[float, str]]:
    """``prometheus_event`` over ticks of (time, source failure or None for answers), each tick's status
    the last one's: the events said, by time."""
    from tritonscale.api import status as st

    pe._prometheus_said.pop(uid, None)
    status: dict[str, Any] | None = None
    said = []
    for t, failure in states:
        new = st.InferenceServiceStatus(conditions=st.set_condition(
            st.conditions_of(status), st.METRICS_AVAILABLE, failure is None, failure or "Available", "m", t))
        got = pe.prometheus_event(uid, status, new, t)
        if got is not None:
            said.append((t, got[1]))
        status = {"conditions": [c.model_dump(by_alias=True, exclude_none=True) for c in new.conditions]}
    return said


def test_a_flapping_prometheus_is_one_warning_and_one_all_clear() -> None:
    """auditK D2: Prometheus up 6 s, down 5 s, three times, posted a Warning and a PrometheusAvailable at
    every flap (7 Events in 2 minutes for one object, 2N for N objects). The Warning is said once while it
    is outstanding, and the all-clear once Prometheus has answered for PROMETHEUS_BACK_S."""
    down, up = "PrometheusUnavailable", None
    flaps = [(0.0, up)] + [(t, down if (t // 2) % 5 in (3, 4) else up) for t in range(2, 60, 2)]
    steady = [(float(t), up) for t in range(60, 200, 2)]
    said = _ticks(flaps + steady)
    assert [r for _, r in said] == ["PrometheusUnavailable", "PrometheusAvailable"], said
    last_failure = max(t for t, f in flaps if f)
    assert said[1][0] >= last_failure + pe.PROMETHEUS_BACK_S


def test_an_outage_after_the_all_clear_is_warned_of_again_and_another_cause_at_once() -> None:
    d, n = "PrometheusUnavailable", "PrometheusNotAllowed"
    ticks = [(0.0, d), (15.0, None)] + [(15.0 + 15 * k, None) for k in range(1, 6)] + [(120.0, d), (135.0, n)]
    assert [r for _, r in _ticks(ticks)] == [d, "PrometheusAvailable", d, n]


def test_a_restarted_operator_takes_the_outage_status_shows_as_warned_of() -> None:
    from tritonscale.api import status as st

    pe._prometheus_said.pop("u-restart", None)
    before = {"conditions": [{"type": "MetricsAvailable", "status": "False", "reason": "PrometheusUnavailable",
                              "message": "m", "lastTransitionTime": "2026-11-27T00:00:00Z"}]}
    up = st.InferenceServiceStatus(conditions=st.set_condition([], st.METRICS_AVAILABLE, True, "Available", "m",
                                                               1000.0))
    assert pe.prometheus_event("u-restart", before, up, 1000.0) is None  # not yet: answering since now
    later = {"conditions": [c.model_dump(by_alias=True, exclude_none=True) for c in up.conditions]}
    got = pe.prometheus_event("u-restart", later, up, 1000.0 + pe.PROMETHEUS_BACK_S)
    assert got is not None and got[:2] == ("Normal", "PrometheusAvailable")


def test_one_outage_is_one_warning_line_for_every_service_it_reaches() -> None:
    """200 InferenceServices on one Prometheus logged 200 warnings for its one outage (an exploration at
    scale, session 55): the first says it at WARNING, the rest at INFO for SAME_OUTAGE_S; each keeps its Event."""
    pe._outages_said.clear()
    down = ("Warning", "PrometheusUnavailable", "Prometheus at http://p:9090: connection refused; ...")
    other = ("Warning", "PrometheusUnavailable", "Prometheus at http://q:9090: no answer within 5 s; ...")
    levels = [pe.transition_level(down, 1000.0 + i) for i in range(200)]
    assert levels == [logging.WARNING] + [logging.INFO] * 199
    assert pe.transition_level(other, 1001.0) == logging.WARNING  # another source: said at once
    assert pe.transition_level(("Normal", "PrometheusAvailable", "answers again"), 1002.0) == logging.INFO
    assert pe.transition_level(down, 1000.0 + pe.SAME_OUTAGE_S) == logging.WARNING  # the next outage
    pe._outages_said.clear()


def test_a_decision_that_fails_holds_the_count_and_says_so_in_the_scaling_condition(monkeypatch) -> None:
    """A reading the decider cannot take (a p95 of 5e-324 ms divided by zero in it) ended the tick with a
    log line, and the Scaling condition kept the last decision's reason while nothing was decided (an
    exploration, session 55)."""
    import pytest

    from tritonscale.scaling.prometheus_source import Snapshot

    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    before = kube.deployment["spec"]["replicas"]

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(tick, "decide", broken)
    with pytest.raises(ZeroDivisionError):
        tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    assert (scaling["status"], scaling["reason"]) == ("False", "DecisionFailed")
    assert scaling["message"] == (f"holding {before} replica{'s' if before != 1 else ''}: the autoscaler could not "
                                  "decide on this tick's readings (ZeroDivisionError: float division by zero); the "
                                  "next tick tries again")
    assert kube.deployment["spec"]["replicas"] == before
    tick.forget(UID)


def test_a_memory_the_decider_cannot_take_is_started_afresh(monkeypatch, caplog) -> None:
    """A memory within model.MAX_REMEMBERED that still broke the decider's arithmetic held the count with
    DecisionFailed on every tick after, for good, since nothing replaced it (session 104's fuzzing of
    status). The tick decides again from no memory, says so, and writes the new memory."""
    from tritonscale.scaling.decider import State

    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    down = Snapshot(taken_at=1000.0, ok=False, error="connection refused")
    tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: events.append(e))
    assert kube.body["status"]["scalingState"]  # a memory (the failure count) to be refused
    real = tick.decide

    def fails_on_memory(obs, replicas, policy, state, now):
        if state != State():
            raise OverflowError("(34, 'Numerical result out of range')")
        return real(obs, replicas, policy, state, now)

    monkeypatch.setattr(tick, "decide", fails_on_memory)
    with caplog.at_level(logging.WARNING, logger="tritonscale.autoscaler"):
        tick.run_tick(kube, "default", "linear", down, 1015.0, lambda body, *e: events.append(e))
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    assert scaling["reason"] != "DecisionFailed"
    assert scaling["message"].endswith("the remembered state (status.scalingState) could not be used: started afresh")
    assert "the autoscaler's memory could not be used (OverflowError" in caplog.text
    assert kube.body["status"]["scalingState"]["failures"] == 1  # the memory decided from none, written back
    tick.forget(UID)


class Guarded(Kube):
    """Writes through ``kube.client``'s write guard, as the real client's are; the guard starts refusing
    (SIGTERM: operator_main._refuse_writes) once ``stop_after`` writes were admitted."""

    def __init__(self, stop_after: int) -> None:
        super().__init__()
        self.refuse = False
        self.admitted = 0
        self.stop_after = stop_after

    def guard(self) -> None:
        from tritonscale.leader_election import NotLeader

        if self.admitted >= self.stop_after:
            raise NotLeader("the operator is stopping: no writes")
        self.admitted += 1

    def patch_inference_service_status(self, *args: Any, **kw: Any) -> None:
        from tritonscale.kube import client

        with client._writing():
            super().patch_inference_service_status(*args, **kw)

    def patch(self, *args: Any, **kw: Any) -> None:
        from tritonscale.kube import client

        with client._writing():
            super().patch(*args, **kw)


@pytest.mark.parametrize("stop_after", [0, 1])
def test_a_stop_during_a_scale_leaves_status_and_the_count_agreeing(stop_after: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """auditJ D4: a SIGTERM between the tick's status write and its replica patch left status saying the
    fleet had been scaled (desiredReplicas 1, "-> 1 replica") with the Deployment still at 0. A scale's
    two writes are admitted together: refused at the start, neither goes; admitted, both do."""
    from tritonscale.kube import client
    from tritonscale.leader_election import NotLeader

    kube = Guarded(stop_after)
    monkeypatch.setattr(client, "_write_guard", kube.guard)
    down = Snapshot(taken_at=1000.0, ok=False, error="Prometheus at http://p:9090: connection refused")
    if stop_after == 0:
        with pytest.raises(NotLeader):
            tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: None)
        assert kube.status_patches == [] and kube.deployment["spec"]["replicas"] == 0
    else:
        tick.run_tick(kube, "default", "linear", down, 1000.0, lambda body, *e: None)
        assert kube.body["status"]["desiredReplicas"] == kube.deployment["spec"]["replicas"] == 1
