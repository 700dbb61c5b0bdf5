"""Reconcile one InferenceService: validate, render, converge children, write status.

The decisions (what to create or patch, what status to report) are pure
functions of the object and the live children; ``reconcile`` only performs
the I/O they call for, through :class:`tritonscale.kube.client.Kube`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritonscale.api import status as st
from tritonscale.api.spec import InferenceServiceSpec, model_name
from tritonscale.api.validation import Problem, validate_body
from tritonscale.kube.client import Kube
from tritonscale.kube.object_lock import object_lock
from tritonscale.reconcile.diff import plan_patch, with_last_applied
from tritonscale.render.kubernetes_objects import build_children, endpoints

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


def status_from_children(body: dict[str, Any], deployment: dict[str, Any] | None, spec: InferenceServiceSpec,
                         now: float) -> st.InferenceServiceStatus:
    """The reconciler's fields (``st.FIELD_OWNERS``) for a valid spec: they follow the Deployment."""
    gen = body["metadata"].get("generation")
    ok, reason, message = ready_condition(spec.scaling.min_replicas, deployment)
    conds = st.set_condition(st.conditions_of(body.get("status")), st.SPEC_VALID, True, "Valid", "spec is valid",
                             now, gen)
    conds = st.set_condition(conds, st.READY, ok, reason, message, now, gen)
    dstatus = (deployment or {}).get("status") or {}
    return st.InferenceServiceStatus(
        observed_generation=gen,
        model=model_name(spec, body["metadata"]["name"]),
        replicas=((deployment or {}).get("spec") or {}).get("replicas"),
        ready_replicas=dstatus.get("readyReplicas") or 0,
        endpoints=st.Endpoints(**endpoints(body)),
        conditions=conds,
    )


def status_for_invalid(body: dict[str, Any], problems: list[Problem], now: float) -> st.InferenceServiceStatus:
    """The reconciler's fields for a spec it refuses: SpecValid=False names every problem."""
    gen = body["metadata"].get("generation")
    message = "; ".join(str(p) for p in problems)
    conds = st.set_condition(st.conditions_of(body.get("status")), st.SPEC_VALID, False, "InvalidSpec", message,
                             now, gen)
    # Children from an earlier valid generation keep serving; Ready reflects that the
    # new generation was not rolled out.
    conds = st.set_condition(conds, st.READY, False, "InvalidSpec",
                             "spec rejected; nothing was created or changed: " + message, now, gen)
    return st.InferenceServiceStatus(observed_generation=gen, conditions=conds)


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
            patch = st.status_patch(body.get("status"), status_for_invalid(body, problems, now()))
            if patch is not None:
                kube.patch_inference_service_status(ns, name, patch)
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

        patch = st.status_patch(body.get("status"), status_from_children(body, deployment, spec, now()))
        if patch is not None:
            kube.patch_inference_service_status(ns, name, patch)
        return outcome
