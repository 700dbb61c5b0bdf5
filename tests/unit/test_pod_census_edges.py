"""take_census's edges: a Ready time before creation (clock skew) and PodScheduled=False for a reason
other than Unschedulable."""

from __future__ import annotations

from typing import Any

import pytest
from test_pod_census import at, pod

from tritonscale.scaling.pod_census import is_unschedulable, take_census

SINCE = float("-inf")  # every Ready time counts


def test_a_ready_time_before_creation_is_a_cold_start_of_zero() -> None:
    """Clock skew between the kubelet and the API server can stamp Ready 5 s before creationTimestamp: the
    cold start learned from it is 0 s, never -5 s (a negative cold start would shorten the plan horizon and
    the scale-down window below nothing)."""
    c = take_census([pod("p", created=100, ready_at=95)], frozenset(), SINCE)
    assert c.startup_s == (0.0,)


def test_only_reason_unschedulable_counts_as_unschedulable() -> None:
    """A pod held by a scheduling gate (PodScheduled=False, reason SchedulingGated) is not one the scheduler
    found no node for: counting it would stop every scale-up (the decider asks for no more while pods are
    unschedulable)."""
    gated: dict[str, Any] = pod("g")
    gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                      "message": "Scheduling is blocked due to non-empty scheduling gates"}]
    assert is_unschedulable(gated) is False
    assert take_census([gated], frozenset(), SINCE).unschedulable == 0
    assert take_census([pod("u", unschedulable=True)], frozenset(), SINCE).unschedulable == 1


PROBE = {"periodSeconds": 10, "failureThreshold": 4}  # with readiness every 5 s: Ready within 45 s of start


def _two_containers(first_started: int, second_started: int, second_probe: dict[str, Any] | None) -> dict[str, Any]:
    """A pod ready at 100 s whose two containers started at the given times; the first has PROBE."""
    p = pod("m", created=0, ready_at=100, started=first_started, startup_probe=PROBE)
    p["status"]["containerStatuses"].append({"name": "sidecar", "restartCount": 0,
                                            "state": {"running": {"startedAt": at(second_started)}}})
    sidecar: dict[str, Any] = {"name": "sidecar"}
    if second_probe is not None:
        sidecar.update(startupProbe=second_probe, readinessProbe={"periodSeconds": 5})
    p["spec"]["containers"].append(sidecar)
    return p


@pytest.mark.parametrize(("p", "startup_s"), [
    # Ready 46 s after the start: within the 45 s budget and the 2 s slack of timestamps -- a cold start
    (pod("m", created=0, ready_at=100, started=54, startup_probe=PROBE), (100.0,)),
    # 48 s: later than a first start can turn Ready -- a readiness flap, not counted
    (pod("m", created=0, ready_at=100, started=52, startup_probe=PROBE), ()),
    # two containers started at 10 s and 60 s: the pod started when its last container did (40 s before Ready)
    (_two_containers(10, 60, None), (100.0,)),
    # the sidecar's startup probe allows 105 s: the pod's budget is the larger of the two (50 s is within it)
    (_two_containers(50, 50, {"periodSeconds": 10, "failureThreshold": 10}), (100.0,)),
])
def test_a_cold_start_is_told_from_a_readiness_flap_by_the_pods_startup_budget(p: dict[str, Any],
                                                                              startup_s: tuple[float, ...]) -> None:
    """After an operator restart a pod's Ready time is a cold start only if it came within the startup
    probe's budget of the pod's start (with 2 s of slack for timestamps whole to the second); later, it is a
    readiness flap, whose "cold start" is the pod's age. The pod started when its last container did, and
    may take the longest of its containers' budgets: else real cold starts would be dropped and the
    learned cold start (the plan's horizon) would be left to the few pods that fit the stricter reading."""
    assert take_census([p], frozenset(), SINCE).startup_s == startup_s


def test_listed_counts_terminating_pods_and_the_first_unschedulable_message_is_kept() -> None:
    """``listed`` counts a terminating pod too: Prometheus scrapes it until it exits, so the series-per-pod
    note compares against it. The message shown for unschedulable pods is the first pod's, steady from tick
    to tick in list order."""
    first = pod("u1", unschedulable=True)
    second = pod("u2", unschedulable=True)
    second["status"]["conditions"][0]["message"] = "0/3 nodes are available: 3 node(s) had untolerated taint."
    c = take_census([pod("a", ready_at=5), pod("b", ready_at=5, deleting=True), first, second], frozenset(), SINCE)
    assert (c.listed, c.unschedulable) == (4, 2)
    assert c.unschedulable_message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
