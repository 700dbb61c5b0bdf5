"""What the Deployment's pods say that the Deployment's status does not: how many
the scheduler cannot place, how many sit on a node being drained, and how long the ones
that just became ready took. And the pods that are not there: those the Deployment asks
for and its ReplicaSet may not create (``not_created``).

Pure functions over pod dicts (as the API returns them); the tick lists the pods.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tritonscale.api.status import deployment_rollout, object_condition

# Slack on the "became ready since the last tick" window: API timestamps have
# one-second resolution, so a pod that turned Ready at 10.7 s reads 10 s; the
# set of pods already reported keeps the slack from counting one twice.
TIMESTAMP_SLACK_S = 2.0


@dataclass(frozen=True)
class PodCensus:
    unschedulable: int
    # The scheduler's explanation for one unschedulable pod, e.g.
    # "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. ..."; "" if none.
    unschedulable_message: str
    startup_s: tuple[float, ...]  # creation -> Ready of pods that became ready in the window
    # Pods seen Ready, now or at an earlier census, that still exist: next tick's `reported`. A pod
    # that goes unready and back (a readiness flap) stays in it, so its new Ready time -- its age,
    # not a cold start -- is never counted.
    ready_uids: frozenset[str]
    # Pods (not terminating) on a node cordoned for a drain: ``draining_pods``.
    draining: int = 0
    # Every pod listed, terminating ones too: Prometheus scrapes a terminating pod until it exits.
    listed: int = 0
    # Replicas the Deployment asks for whose pods its ReplicaSet may not create (``not_created``), and the
    # Deployment's reason, e.g. 'pods "x" is forbidden: exceeded quota: gpus, requested: ...'; "" if none.
    uncreated: int = 0
    uncreated_message: str = ""


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def is_unschedulable(pod: dict[str, Any]) -> bool:
    """Pending because the scheduler found no node (PodScheduled=False, reason Unschedulable)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    scheduled = object_condition(pod, "PodScheduled")
    return scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"


def start_budget_s(pod: dict[str, Any]) -> float | None:
    """How long after its container started a pod can first turn Ready: the startup probe's
    delay + period x failureThreshold (the kubelet restarts the container past it) plus one
    readiness period, Kubernetes' defaults where unset; None without a startup probe."""
    budgets = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        probe = c.get("startupProbe")
        if probe:
            ready = c.get("readinessProbe") or {}
            budgets.append(float(probe.get("initialDelaySeconds") or 0) + float(probe.get("periodSeconds") or 10)
                           * float(probe.get("failureThreshold") or 3) + float(ready.get("periodSeconds") or 10))
    return max(budgets) if budgets else None


def first_census_since(now: float, interval_s: float, cold_start_known: bool,
                       last_tick: float | None = None) -> float:
    """Where the first census of a service (a new one, or any after an operator restart) starts
    counting cold starts. While none is known, every ready pod's: its creation and Ready times
    are still in the API, and a fleet that is already running would otherwise teach nothing
    until one more pod starts (the decider plans with a default cold start meanwhile). Once one
    is known (restored from status after a restart), only pods that turned ready since the last
    tick known (``last_tick``: the memory's, None if it has none), or within the last interval if
    that is longer ago, are new: the others were counted before. Within the last interval alone, a
    pod the old leader scaled up that turned Ready during a failover's 16-32 s gap (a start slower
    than the one learned, say) was never learned (auditJ D5)."""
    if not cold_start_known:
        return -math.inf
    return now - interval_s if last_tick is None else min(now - interval_s, last_tick)


def node_names(pods: Iterable[dict[str, Any]]) -> frozenset[str]:
    """The nodes the pods are bound to."""
    return frozenset(n for p in pods if (n := (p.get("spec") or {}).get("nodeName")))


def draining_pods(pods: Iterable[dict[str, Any]], cordoned: frozenset[str]) -> int:
    """Pods on a cordoned node that are not terminating yet: a drain's evictions still to come."""
    return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName") in cordoned
               and not (p.get("metadata") or {}).get("deletionTimestamp"))


def take_census(pods: Iterable[dict[str, Any]], reported: frozenset[str], since: float,
                cordoned: frozenset[str] = frozenset()) -> PodCensus:
    """Count unschedulable pods, and the cold starts of pods that turned Ready after ``since``
    and are not in ``reported`` (pods already counted by an earlier tick).

    A pod that restarted a container is left out: its Ready time measures its
    restart, not a cold start from creation. So is a pod seen Ready before (in ``reported``,
    which keeps every pod seen Ready while it exists): the condition's last transition is then
    a readiness flap (the pod went unready and back), and creation to it is the pod's age. Where
    no earlier census saw it (the operator restarted), a Ready time later than the startup probe
    allows after the container started gives the flap away.
    """
    pods = list(pods)
    unschedulable, message, startups, ready, alive = 0, "", [], set(), set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            alive.add(meta.get("uid") or "")
        if is_unschedulable(pod):
            unschedulable += 1
            message = message or object_condition(pod, "PodScheduled").get("message") or ""
            continue
        ready_cond = object_condition(pod, "Ready")
        if meta.get("deletionTimestamp") or ready_cond.get("status") != "True":
            continue
        uid = meta.get("uid") or ""
        ready.add(uid)
        if uid in reported:
            continue
        created, ready_at = parse_time(meta.get("creationTimestamp")), parse_time(ready_cond.get("lastTransitionTime"))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        if created is None or ready_at is None or restarts or ready_at < since - TIMESTAMP_SLACK_S:
            continue
        started = [parse_time(((c.get("state") or {}).get("running") or {}).get("startedAt")) for c in statuses]
        started_at = max((t for t in started if t is not None), default=None)
        budget = start_budget_s(pod)
        if started_at is not None and budget is not None and ready_at - started_at > budget + TIMESTAMP_SLACK_S:
            continue  # Ready later than a first start can be: a readiness flap, not a cold start
        startups.append(max(0.0, ready_at - created))
    return PodCensus(unschedulable, message, tuple(sorted(startups)), frozenset(ready | (reported & alive)),
                     draining_pods(pods, cordoned), len(pods))


def not_created(deployment: dict[str, Any], live: int) -> tuple[int, str]:
    """(replicas the Deployment asks for with no pod, its reason) while its ReplicaFailure condition is
    True: the ReplicaSet's pod creations are refused -- a namespace's ResourceQuota on nvidia.com/gpu (a
    team's share of a shared cluster), a PodSecurity level, a ServiceAccount that does not exist. No pod
    exists for those replicas, so none is Pending and the scheduler says nothing; the Deployment's
    condition is the only word of it. At least one while it stands: a rollout's surge pod refused leaves
    every replica its pod, and the rollout cannot go on. ``live``: the Deployment's pods not terminating.
    (0, "") otherwise: pods missing without the condition are being created (the controllers clear it at
    their first creation that succeeds)."""
    refused = deployment_rollout(deployment).refused
    if refused is None:
        return 0, ""
    asked = int((deployment.get("spec") or {}).get("replicas") or 0)
    return max(1, asked - live), refused
