"""One autoscaler tick for one InferenceService: read, decide, write.

The imperative shell around ``decider.decide``: it reads the object and its
Deployment, turns the shared Prometheus snapshot into an Observation, calls
the pure decider, and writes only what changed -- ``spec.replicas`` of the
Deployment (which the autoscaler alone owns), status, and an Event per scale.

It also lists the Deployment's pods: the scheduler's verdict (pods Pending as
Unschedulable, e.g. for lack of nvidia.com/gpu) and the cold starts of pods that
just became ready reach the decider, and the first one reaches the user as the
``Schedulable`` condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kubernetes.client import ApiException

from tritonscale.api import status as st
from tritonscale.api.validation import validate_body
from tritonscale.kube.client import Kube
from tritonscale.reconcile.conditions import rfc3339, set_condition
from tritonscale.reconcile.inference_service import object_lock
from tritonscale.render.triton_config import model_name
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling.decider import Decision, Policy, Replicas, State, decide
from tritonscale.scaling.pod_census import PodCensus, take_census
from tritonscale.scaling.prometheus_source import Snapshot

EventFn = Callable[[dict[str, Any], str, str, str], None]  # (body, type, reason, message)

# In-memory decider state by object uid; seeded from status.scalingState after a restart.
_memory: dict[str, State] = {}
# By object uid: when the last tick ran and which pods were ready then, so each
# pod's cold start reaches the decider once.
_pods_seen: dict[str, tuple[float, frozenset[str]]] = {}


@dataclass
class TickResult:
    decision: Decision | None
    scaled_from: int | None = None
    skipped: str = ""


def forget(uid: str) -> None:
    _memory.pop(uid, None)
    _pods_seen.pop(uid, None)


def _census(kube: Kube, namespace: str, deployment: dict[str, Any], uid: str, now: float,
            interval_s: float) -> tuple[PodCensus | None, int, str]:
    """The Deployment's pods, counted; (None, 0, why) when they cannot be listed."""
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    try:
        pods = kube.list_pods(namespace, selector) if selector else []
    except ApiException as exc:  # e.g. 403 with an older chart: scale without it, and say so
        return None, 0, f"cannot list the Deployment's pods: {exc.status} {exc.reason}"
    # After a restart: only pods that turned ready within the last interval are new.
    last_tick, reported = _pods_seen.get(uid, (now - interval_s, frozenset()))
    census = take_census(pods, reported, last_tick)
    _pods_seen[uid] = (now, census.ready_uids)
    live = sum(1 for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp"))
    return census, live, ""


def _round(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


def run_tick(kube: Kube, namespace: str, name: str, snapshot: Snapshot, now: float, event: EventFn) -> TickResult:
    with object_lock(namespace, name):
        body = kube.get_inference_service(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return TickResult(None, skipped="deleted")
        spec, _ = validate_body(body)
        if spec is None:
            return TickResult(None, skipped="invalid spec (reported by the reconciler)")
        deployment = kube.get("Deployment", namespace, name)
        if deployment is None:
            return TickResult(None, skipped="no Deployment yet")
        uid = body["metadata"]["uid"]
        status = body.get("status") or {}
        state = _memory.get(uid) or State.from_dict(status.get("scalingState"))
        current = int((deployment.get("spec") or {}).get("replicas") or 0)
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        model = model_name(spec, name)
        obs = snapshot.observation(namespace, name, model)

        census, live_pods, census_error = _census(kube, namespace, deployment, uid, now,
                                                  float(spec.scaling.interval_seconds))
        replicas = Replicas(current=current, ready=ready,
                            unschedulable=census.unschedulable if census else 0,
                            startup_s=census.startup_s if census else ())
        decision = decide(obs, replicas, Policy.from_spec(spec.scaling, spec.model.max_batch_size), state, now)
        _memory[uid] = decision.state

        result = TickResult(decision)
        if decision.replicas != current:
            kube.patch("Deployment", namespace, name, {"spec": {"replicas": decision.replicas}})
            result.scaled_from = current
            verb = "up" if decision.replicas > current else "down"
            event(body, "Normal", "Scaled",
                  f"scaled {verb} from {current} to {decision.replicas}: {decision.reason}: {decision.message}"[:1000])
            om.DECISIONS.labels(namespace, name, verb, decision.reason).inc()
        else:
            om.DECISIONS.labels(namespace, name, "none", decision.reason).inc()

        gen = body["metadata"].get("generation")
        conds = set_condition(status.get("conditions"), st.SCALING, decision.metrics_ok, decision.reason,
                              decision.message, now, gen)
        if obs.status == "failed":
            conds = set_condition(conds, st.METRICS_AVAILABLE, False, "PrometheusUnavailable", obs.message, now, gen)
        elif obs.status == "no_data":
            conds = set_condition(conds, st.METRICS_AVAILABLE, False, "NoData", obs.message, now, gen)
        else:
            idle = obs.p95_ms is None
            conds = set_condition(conds, st.METRICS_AVAILABLE, True, "Idle" if idle else "Available",
                                  "no requests in Triton's 60 s latency window" if idle else
                                  f"p95 {obs.p95_ms:.1f} ms at {obs.rps:.2f} rps", now, gen)
        if census is None:
            conds = set_condition(conds, st.SCHEDULABLE, "Unknown", "PodsUnreadable", census_error, now, gen)
        elif census.unschedulable:
            conds = set_condition(conds, st.SCHEDULABLE, False, "Unschedulable",
                                  f"{census.unschedulable} of {live_pods} pods cannot be scheduled: "
                                  f"{census.unschedulable_message}"[:1000], now, gen)
        else:
            conds = set_condition(conds, st.SCHEDULABLE, True, "NoUnschedulablePods",
                                  f"none of the {live_pods} pods is unschedulable", now, gen)
        new_status: dict[str, Any] = {
            "p95Milliseconds": _round(obs.p95_ms),
            "requestsPerSecond": _round(obs.rps, 2),
            "desiredReplicas": decision.replicas,
            "replicas": decision.replicas,
            "readyReplicas": ready,
            "conditions": conds,
            "scalingState": decision.state.to_dict(),
        }
        if decision.state.last_scale_time is not None:
            new_status["lastScaleTime"] = rfc3339(decision.state.last_scale_time)
        if any(status.get(k) != v for k, v in new_status.items()):
            kube.patch_inference_service_status(namespace, name, new_status)

        om.DESIRED.labels(namespace, name).set(decision.replicas)
        om.READY.labels(namespace, name).set(ready)
        om.set_or_remove(om.TARGET_P95, namespace, name, spec.scaling.target_p95_milliseconds)
        om.set_or_remove(om.OBSERVED_P95, namespace, name, obs.p95_ms)  # idle/unknown: no stale value
        return result
