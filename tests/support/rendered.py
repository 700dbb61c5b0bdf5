"""An InferenceService's children as the operator renders them (``build_children``), keyed by kind, for
tests that read what the operator would apply."""

from __future__ import annotations

import copy
from typing import Any

from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.render.kubernetes_objects import build_children

KINDS = ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
UID = "6f1c9a2e-3b7d-4f55-9e0a-1c2d3e4f5a6b"


def owner_from(doc: dict[str, Any], uid: str = UID) -> dict[str, Any]:
    """``doc`` as the API server returns it: with a uid (the children's ownerReferences name it)."""
    out = copy.deepcopy(doc)
    out["metadata"]["uid"] = uid
    return out


def children(doc: dict[str, Any], uid: str = UID) -> dict[str, dict[str, Any]]:
    """The children of the InferenceService ``doc``, by kind; their creation order is checked."""
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    objs = build_children(spec, owner_from(doc, uid))
    assert [o["kind"] for o in objs] == KINDS, "creation order: the ConfigMap exists before pods mount it"
    return {o["kind"]: o for o in objs}


def triton(dep: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's one container, tritonserver."""
    containers = dep["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["triton"]
    return containers[0]


def fetch(dep: dict[str, Any]) -> dict[str, Any]:
    inits = dep["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["model-fetch"]
    return inits[0]
