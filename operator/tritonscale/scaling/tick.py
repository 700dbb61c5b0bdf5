"""One autoscaler tick for one InferenceService: read, decide, write.

The imperative shell around ``decider.decide``: it reads the object and its
Deployment, turns the shared Prometheus snapshot into an Observation, calls
the pure decider, and writes only what changed -- ``spec.replicas`` of the
Deployment (which the autoscaler alone owns), status, and an Event per scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tritonscale.api import status as st
from tritonscale.api.validation import validate_body
from tritonscale.kube.client import Kube
from tritonscale.reconcile.conditions import rfc3339, set_condition
from tritonscale.reconcile.inference_service import object_lock
from tritonscale.render.triton_config import model_name
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling.decider import Decision, Policy, Replicas, State, decide
from tritonscale.scaling.prometheus_source import Snapshot

EventFn = Callable[[dict[str, Any], str, str, str], None]  # (body, type, reason, message)

# In-memory decider state by object uid; seeded from status.scalingState after a restart.
_memory: dict[str, State] = {}


@dataclass
class TickResult:
    decision: Decision | None
    scaled_from: int | None = None
    skipped: str = ""


def forget(uid: str) -> None:
    _memory.pop(uid, None)


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

        decision = decide(obs, Replicas(current=current, ready=ready), Policy.from_spec(spec.scaling, spec.model.max_batch_size), state, now)
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
