"""Two operators acting on one InferenceService (two releases whose namespaces overlap once the install
check was passed by: a release scaled to 0 and back, `helm template`, a local `tritonscale run`) scaled it
against each other with no word anywhere (an exploration on a real API server, session 55). Each tick's
status says which operator wrote it (status.operator, lastTickTime); another's, written after this
process's own, is a Warning event OperatorConflict. lastTickTime also shows an object no operator serves."""

from __future__ import annotations

from test_tick_scale_failed import UID, Kube

from tritonscale.api import status as st
from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot

DOWN = Snapshot(taken_at=1000.0, ok=False, error="connection refused")


def _tick(kube: Kube, now: float, events: list) -> None:
    tick.run_tick(kube, "default", "linear", DOWN, now, lambda body, *e: events.append(e))


def _other_writes(kube: Kube, who: str, at: float) -> None:
    kube.body["status"] = {**kube.body["status"], "operator": who, "lastTickTime": st.rfc3339(at)}


def test_another_operators_write_after_ours_is_a_warning_once_an_hour(monkeypatch) -> None:
    monkeypatch.setattr(tick, "OPERATOR_ID", "lease ops/tritonscale")
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)
    _tick(kube, 1000.0, events)
    assert kube.body["status"]["operator"] == "lease ops/tritonscale"
    assert kube.body["status"]["lastTickTime"] == st.rfc3339(1000.0)
    _other_writes(kube, "lease team-b/tritonscale", 1007.0)
    _tick(kube, 1015.0, events)
    conflicts = [e for e in events if e[1] == "OperatorConflict"]
    assert conflicts == [("Warning", "OperatorConflict",
                          "another operator (lease team-b/tritonscale) also acts on this InferenceService: it "
                          "wrote the autoscaler's status after this one (lease ops/tritonscale) did, and two "
                          "operators scale it against each other. Keep one: give each Helm release its own "
                          "watchNamespaces, and remove the other install")]
    assert kube.body["status"]["operator"] == "lease ops/tritonscale"  # written back at once
    _other_writes(kube, "lease team-b/tritonscale", 1022.0)
    _tick(kube, 1030.0, events)
    assert len([e for e in events if e[1] == "OperatorConflict"]) == 1  # said once an hour
    _other_writes(kube, "lease team-b/tritonscale", 1030.0 + 3600.0)
    _tick(kube, 1040.0 + 3600.0, events)
    assert len([e for e in events if e[1] == "OperatorConflict"]) == 2
    tick.forget(UID)


def test_a_predecessors_stamp_and_our_own_failover_are_no_conflict(monkeypatch) -> None:
    monkeypatch.setattr(tick, "OPERATOR_ID", "lease ops/tritonscale")
    kube, events = Kube(), []
    kube.refuse = False
    tick.forget(UID)  # a new process: it has written nothing yet
    kube.body["status"] = {"operator": "lease old/tritonscale", "lastTickTime": st.rfc3339(995.0)}
    _tick(kube, 1000.0, events)  # the operator it replaced wrote last: no conflict
    assert kube.body["status"]["operator"] == "lease ops/tritonscale"
    tick.forget(UID)  # a failover: the standby, of the same Lease, takes over
    _other_writes(kube, "lease ops/tritonscale", 1010.0)
    _tick(kube, 1015.0, events)
    _tick(kube, 1030.0, events)
    assert not [e for e in events if e[1] == "OperatorConflict"]
    tick.forget(UID)


def test_the_tick_time_is_written_at_least_once_a_minute(monkeypatch) -> None:
    """With nothing else to write, a tick stamps lastTickTime only when a minute has passed: an object no
    operator serves shows an old time (`kubectl get tis -o wide`, TICKED), at no write per tick."""
    monkeypatch.setattr(tick, "OPERATOR_ID", "lease ops/tritonscale")
    tick.forget(UID)
    status = {"operator": "lease ops/tritonscale", "lastTickTime": st.rfc3339(1000.0)}
    assert not tick._stamp_due(status, False, 1030.0)  # nothing else written, and younger than a minute
    assert tick._stamp_due(status, False, 1060.0)
    assert tick._stamp_due({**status, "operator": "host laptop"}, False, 1001.0)  # another's: replaced at once
    assert tick._stamp_due(status, True, 1001.0)  # written anyway: stamped with it
    kube = Kube()
    kube.refuse = False
    kube.body["status"] = dict(status)
    tick._write_status(kube, kube.body, kube.body["status"], st.InferenceServiceStatus(), None,
                       lambda *e: None, 1060.0)
    assert kube.status_patches == [{"operator": "lease ops/tritonscale", "lastTickTime": st.rfc3339(1060.0)}]
    tick.forget(UID)
