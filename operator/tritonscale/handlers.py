"""Kopf handlers: thin adapters from Kopf's kwargs to the reconciler and autoscaler.

Nothing here decides anything; see ``reconcile/`` and ``scaling/``.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.kube.client import Kube
from tritonscale.reconcile.inference_service import reconcile
from tritonscale.render.kubernetes_objects import LABEL

log = logging.getLogger("tritonscale")

# Set by the CLI before Kopf starts (see tritonscale.operator_main).
KUBE: Kube | None = None


def _kube() -> Kube:
    global KUBE
    if KUBE is None:
        KUBE = Kube()
    return KUBE


def _events_for(body: Any):
    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)
    return emit


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile_inference_service(body: kopf.Body, **_: Any) -> None:
    reconcile(_kube(), dict(body), _events_for(body))


def _reconcile_owner(namespace: str, name: str) -> None:
    kube = _kube()
    owner = kube.get_inference_service(namespace, name)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return  # the owner is gone; garbage collection removes the children
    reconcile(kube, owner, _events_for(owner))


_CHILD_FILTER = {"labels": {LABEL: kopf.PRESENT}}


@kopf.on.event("apps", "v1", "deployments", **_CHILD_FILTER)
@kopf.on.event("", "v1", "services", **_CHILD_FILTER)
@kopf.on.event("", "v1", "configmaps", **_CHILD_FILTER)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", **_CHILD_FILTER)
def child_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
    """A child changed or vanished: correct drift and refresh Ready from the Deployment."""
    owner = (body.get("metadata", {}).get("labels") or {}).get(LABEL)
    if owner:
        _reconcile_owner(namespace, owner)


def configure(options: Any) -> None:
    """Called once by `tritonscale run` before Kopf starts."""
    global KUBE
    KUBE = Kube()
