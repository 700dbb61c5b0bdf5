"""Reconcile one InferenceService: validate, render, converge children, write status.

The decisions (what to create or patch, what status to report) are pure
functions of the object and the live children; ``reconcile`` only performs
the I/O they call for, through :class:`tritonscale.kube.client.Kube`.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from tritonscale.api import status as st
from tritonscale.api.validation import Problem, validate_body
from tritonscale.kube.client import Kube
from tritonscale.reconcile.conditions import set_condition
from tritonscale.reconcile.diff import plan_patch, with_last_applied
from tritonscale.render.kubernetes_objects import build_children, endpoints
from tritonscale.render.triton_config import model_name

# One lock per object: the reconciler and the autoscaler both write status,
# and a merge patch replaces the whole conditions list.
_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def object_lock(namespace: str, name: str) -> threading.Lock:
    return _locks[(namespace, name)]


EventFn = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)


@dataclass
class Outcome:
    valid: bool
    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def ready_condition(min_replicas: int, deployment: dict[str, Any] | None) -> tuple[bool, str, str]:
    """Ready follows the Deployment: True once the warm floor (at least one replica) is warm."""
    if deployment is None:
        return False, "DeploymentMissing", "the Deployment does not exist yet"
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas") or 0
    need = max(1, min_replicas)
    if ready >= need:
        return True, "ReplicasReady", f"{ready} replica(s) ready and warm (floor {min_replicas})"
    return False, "ReplicasStarting", f"{ready}/{need} replica(s) ready; models load and warm up before serving"


def status_from_children(body: dict[str, Any], deployment: dict[str, Any] | None, spec: Any,
                         now: float) -> dict[str, Any]:
    cur = body.get("status") or {}
    gen = body["metadata"].get("generation")
    ok, reason, message = ready_condition(spec.scaling.min_replicas, deployment)
    conds = set_condition(cur.get("conditions"), st.SPEC_VALID, True, "Valid", "spec is valid", now, gen)
    conds = set_condition(conds, st.READY, ok, reason, message, now, gen)
    dstatus = (deployment or {}).get("status") or {}
    out = {
        "observedGeneration": gen,
        "model": model_name(spec, body["metadata"]["name"]),
        "replicas": ((deployment or {}).get("spec") or {}).get("replicas"),
        "readyReplicas": dstatus.get("readyReplicas") or 0,
        "endpoints": endpoints(body),
        "conditions": conds,
    }
    if cur.get("desiredReplicas") is None and out["replicas"] is not None:
        out["desiredReplicas"] = out["replicas"]
    return out


def status_for_invalid(body: dict[str, Any], problems: list[Problem], now: float) -> dict[str, Any]:
    cur = body.get("status") or {}
    gen = body["metadata"].get("generation")
    message = "; ".join(str(p) for p in problems)
    conds = set_condition(cur.get("conditions"), st.SPEC_VALID, False, "InvalidSpec", message, now, gen)
    # Children from an earlier valid generation keep serving; Ready reflects that the
    # new generation was not rolled out.
    conds = set_condition(conds, st.READY, False, "InvalidSpec",
                          "spec rejected; nothing was created or changed: " + message, now, gen)
    return {"observedGeneration": gen, "conditions": conds}


def _status_changed(cur: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(cur.get(k) != v for k, v in new.items())


def reconcile(kube: Kube, body: dict[str, Any], event: EventFn, now: Callable[[], float] = time.time) -> Outcome:
    """Converge the children of ``body`` and its status. Idempotent: a second call with
    nothing changed makes no write."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    spec, problems = validate_body(body)
    with object_lock(ns, name):
        # Merge conditions into the freshest status: Kopf's body may predate the
        # autoscaler's last write, and a merge patch replaces the whole list.
        fresh = kube.get_inference_service(ns, name)
        if fresh is None:
            return Outcome(valid=spec is not None, problems=problems)  # deleted meanwhile
        body = {**body, "status": fresh.get("status") or {}}
        if spec is None:
            new = status_for_invalid(body, problems, now())
            if _status_changed(body.get("status") or {}, new):
                kube.patch_inference_service_status(ns, name, new)
                event("Warning", "InvalidSpec", "; ".join(str(p) for p in problems)[:1000])
            return Outcome(valid=False, problems=problems)

        outcome = Outcome(valid=True)
        deployment = None
        # Render everything before the first write: a rendering problem can never
        # leave half the children behind.
        desired = [with_last_applied(c) for c in build_children(spec, body)]
        for child in desired:
            kind, cname = child["kind"], child["metadata"]["name"]
            live = kube.get(kind, ns, cname)
            if live is None:
                live = kube.create(child)
                outcome.created.append(f"{kind}/{cname}")
            else:
                patch = plan_patch(child, live)
                if patch is not None:
                    live = kube.patch(kind, ns, cname, patch)
                    outcome.patched.append(f"{kind}/{cname}")
            if kind == "Deployment":
                deployment = live
        for ref in outcome.created:
            event("Normal", "Created", f"created {ref}")
        for ref in outcome.patched:
            event("Normal", "Updated", f"updated {ref} to match the spec")

        new = status_from_children(body, deployment, spec, now())
        if _status_changed(body.get("status") or {}, new):
            kube.patch_inference_service_status(ns, name, new)
        return outcome
