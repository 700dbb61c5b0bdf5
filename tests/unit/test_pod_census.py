"""scaling/pod_census.py: unschedulable pods and cold starts, from pod dicts."""

from __future__ import annotations

from typing import Any

import pytest

from tritonscale.scaling.pod_census import (
    first_census_since,
    node_names,
    not_created,
    parse_time,
    start_budget_s,
    take_census,
)

T0 = parse_time("2026-01-01T00:00:00Z")


def at(seconds: int) -> str:
    return f"2026-01-01T{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}Z"


def pod(uid: str, *, created: int = 0, ready_at: int | None = None, unschedulable: bool = False,
        deleting: bool = False, restarts: int = 0, started: int | None = None,
        startup_probe: dict[str, Any] | None = None) -> dict[str, Any]:
    conditions = []
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."})
    if ready_at is not None:
        conditions.append({"type": "Ready", "status": "True",
                           "lastTransitionTime": at(ready_at)})
    meta: dict[str, Any] = {"uid": uid, "creationTimestamp": at(created)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T01:00:00Z"
    status: dict[str, Any] = {"name": "triton", "restartCount": restarts}
    if started is not None:
        status["state"] = {"running": {"startedAt": at(started)}}
    container: dict[str, Any] = {"name": "triton"}
    if startup_probe is not None:
        container["startupProbe"] = startup_probe
        container["readinessProbe"] = {"periodSeconds": 5}
    return {"metadata": meta, "status": {"phase": "Running" if ready_at is not None else "Pending",
                                         "conditions": conditions,
                                         "containerStatuses": [status]},
            "spec": {"containers": [container]}}


def test_counts_unschedulable_pods_with_the_schedulers_message():
    c = take_census([pod("a", ready_at=5), pod("b", unschedulable=True), pod("c", unschedulable=True)],
                    frozenset(), T0)
    assert c.unschedulable == 2
    assert c.unschedulable_message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_terminating_pods_are_not_unschedulable_nor_ready():
    c = take_census([pod("a", unschedulable=True, deleting=True), pod("b", ready_at=5, deleting=True)],
                    frozenset(), T0)
    assert (c.unschedulable, c.startup_s, c.ready_uids) == (0, (), frozenset())


@pytest.mark.parametrize("created, ready_at, since, reported, restarts, expected", [
    (0, 42, 30, frozenset(), 0, (42.0,)),        # became ready since the last tick: its cold start
    (10, 52, 30, frozenset(), 0, (42.0,)),
    (0, 42, 30, frozenset({"p"}), 0, ()),        # already reported by an earlier tick
    (0, 20, 30, frozenset(), 0, ()),             # ready before the window (e.g. before a restart)
    (0, 29, 30, frozenset(), 0, (29.0,)),        # within the 2 s timestamp slack
    (0, 42, 30, frozenset(), 1, ()),             # a restarted container: not a cold start
])
def test_startup_seconds(created, ready_at, since, reported, restarts, expected):
    c = take_census([pod("p", created=created, ready_at=ready_at, restarts=restarts)], reported, T0 + since)
    assert c.startup_s == expected
    assert c.ready_uids == frozenset({"p"})  # reported next tick either way


def test_parse_time():
    assert parse_time("2026-01-01T00:00:10Z") - T0 == 10
    assert parse_time(None) is None and parse_time("yesterday") is None


@pytest.mark.parametrize("known, expected", [
    (False, (40.0,)),  # nothing learned yet: the running pod's cold start counts
    (True, ()),        # learned and restored after a restart: it was counted before
])
def test_first_census_counts_running_pods_until_a_cold_start_is_known(known, expected):
    now = T0 + 1000
    since = first_census_since(now, 15.0, known)
    c = take_census([pod("p", created=0, ready_at=40)], frozenset(), since)
    assert c.startup_s == expected


@pytest.mark.parametrize("last_tick, expected", [
    (None, ()),            # no tick known: the last interval only
    (T0 + 960, (970.0,)),  # a failover's 40 s gap: the pod that turned Ready in it counts
    (T0 + 995, ()),        # within the interval: it is the interval that bounds
])
def test_a_first_census_after_a_handover_counts_the_pods_that_turned_ready_since_the_last_tick(last_tick, expected):
    """auditJ D5: the new leader counted only pods Ready within the last interval, and one the old leader had
    scaled up that turned Ready in the 16-32 s handover (a 970 s start, slower than any learned) was never
    learned."""
    now = T0 + 1000
    since = first_census_since(now, 15.0, True, last_tick)
    c = take_census([pod("p", created=0, ready_at=970)], frozenset(), since)
    assert c.startup_s == expected


STARTUP = {"periodSeconds": 5, "failureThreshold": 120}  # what the operator renders: 600 s


@pytest.mark.parametrize("started, ready_at, probe, expected", [
    (30, 400, STARTUP, (400.0,)),   # a first start: Ready 370 s after the container started
    (30, 2000, STARTUP, ()),        # Ready 1970 s after the start, past the probe's 605 s: a readiness flap
    (30, 2000, None, (2000.0,)),    # no startup probe: nothing bounds a first start
    (None, 2000, STARTUP, (2000.0,)),  # no start time reported: counted, as before
])
def test_a_readiness_flap_is_not_a_cold_start(started, ready_at, probe, expected):
    p = pod("p", created=0, ready_at=ready_at, started=started, startup_probe=probe)
    assert take_census([p], frozenset(), float("-inf")).startup_s == expected


def test_start_budget_from_the_startup_probe_with_kubernetes_defaults():
    assert start_budget_s(pod("p", startup_probe=STARTUP)) == 5 * 120 + 5
    defaults = {"httpGet": {"path": "/ready", "port": "http"}}  # periodSeconds 10, failureThreshold 3
    assert start_budget_s(pod("p", startup_probe=defaults)) == 10 * 3 + 5
    assert start_budget_s(pod("p")) is None


def test_a_pod_seen_ready_stays_reported_through_a_flap():
    """Ready at 30 s (a 30 s cold start, counted once), unready at 290 s, Ready again at 305 s -- within
    the startup probe's budget, so only the census's memory tells the flap from a first start."""
    first = take_census([pod("p", ready_at=30, started=5, startup_probe=STARTUP)], frozenset(), T0 + 15)
    assert first.startup_s == (30.0,) and first.ready_uids == {"p"}
    unready = pod("p", started=5, startup_probe=STARTUP)  # no Ready condition: not ready now
    during = take_census([unready], first.ready_uids, T0 + 290)
    assert during.startup_s == () and during.ready_uids == {"p"}  # still remembered: it exists
    back = take_census([pod("p", ready_at=305, started=5, startup_probe=STARTUP)], during.ready_uids, T0 + 300)
    assert back.startup_s == ()  # its age (305 s) is no cold start
    gone = take_census([], back.ready_uids, T0 + 320)
    assert gone.ready_uids == frozenset()  # forgotten once the pod is gone


def _on(p: dict[str, Any], node: str) -> dict[str, Any]:
    p["spec"]["nodeName"] = node
    return p


def test_pods_on_a_cordoned_node_are_draining_until_they_terminate():
    pods = [_on(pod("a", ready_at=5), "gpu-0"), _on(pod("b", ready_at=5), "gpu-1"),
            _on(pod("c", ready_at=5, deleting=True), "gpu-0"), pod("d", unschedulable=True)]
    assert node_names(pods) == frozenset({"gpu-0", "gpu-1"})
    assert take_census(pods, frozenset(), T0, cordoned=frozenset({"gpu-0"})).draining == 1  # c is already going
    assert take_census(pods, frozenset(), T0, cordoned=frozenset({"gpu-0", "gpu-1"})).draining == 2
    assert take_census(pods, frozenset(), T0).draining == 0


def test_the_last_tick_known_is_the_later_of_the_memorys_readings_and_the_stamp():
    from tritonscale.scaling.decider import State
    from tritonscale.scaling.tick import _last_tick_known

    rates = State(rates=((T0 + 900.0, 10.0, 10.0), (T0 + 950.0, 10.0, 10.0)))
    now = T0 + 1000
    assert _last_tick_known({"lastTickTime": at(940)}, rates, now) == T0 + 950  # the reading is later
    assert _last_tick_known({"lastTickTime": at(970)}, rates, now) == T0 + 970  # the stamp is later
    assert _last_tick_known({}, State(), now) is None
    assert _last_tick_known({"lastTickTime": at(2000)}, State(), now) is None  # ahead of this clock: not known
    assert _last_tick_known({"lastTickTime": "yesterday"}, rates, now) == T0 + 950


QUOTA = ('pods "linear-7dfbf65756-9k7qw" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
         'used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2')


def deployment(replicas: int, failure: str | None) -> dict[str, Any]:
    conditions = [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
    if failure is not None:
        conditions.append({"type": "ReplicaFailure", "status": failure, "reason": "FailedCreate", "message": QUOTA})
    return {"spec": {"replicas": replicas}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(("replicas", "failure", "live", "expected"), [
    (3, "True", 2, (1, QUOTA)),  # a quota refuses the third pod: the Deployment's message says why
    (5, "True", 2, (3, QUOTA)),
    (3, "True", 3, (1, QUOTA)),  # every replica has its pod: a rollout's surge pod is what was refused
    (3, "True", 4, (1, QUOTA)),  # more pods than replicas (old and new side by side), and one more refused
    (3, "False", 2, (0, "")),  # the condition cleared: the missing pod is being created
    (3, None, 2, (0, "")),  # no condition: pods missing are being created, not refused
])
def test_replicas_whose_pods_the_replicaset_may_not_create(replicas, failure, live, expected):
    assert not_created(deployment(replicas, failure), live) == expected


def test_a_replica_failure_without_a_message_gives_its_reason():
    d = {"spec": {"replicas": 2}, "status": {"conditions": [{"type": "ReplicaFailure", "status": "True",
                                                             "reason": "FailedCreate"}]}}
    assert not_created(d, 0) == (2, "FailedCreate")
