"""scaling/pod_census.py: unschedulable pods and cold starts, from pod dicts."""

from __future__ import annotations

from typing import Any

import pytest

from tritonscale.scaling.pod_census import first_census_since, parse_time, take_census

T0 = parse_time("2026-01-01T00:00:00Z")


def pod(uid: str, *, created: int = 0, ready_at: int | None = None, unschedulable: bool = False,
        deleting: bool = False, restarts: int = 0) -> dict[str, Any]:
    conditions = []
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."})
    if ready_at is not None:
        conditions.append({"type": "Ready", "status": "True",
                           "lastTransitionTime": f"2026-01-01T00:{ready_at // 60:02d}:{ready_at % 60:02d}Z"})
    meta: dict[str, Any] = {"uid": uid, "creationTimestamp": f"2026-01-01T00:{created // 60:02d}:{created % 60:02d}Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T01:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running" if ready_at is not None else "Pending",
                                         "conditions": conditions,
                                         "containerStatuses": [{"name": "triton", "restartCount": restarts}]}}


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
