"""Which spec the autoscaler scales a fleet by: the spec as edited, when the operator accepts it and the
API server took what it renders; else the last valid one -- seen since the operator started, or after a
restart the one the Deployment records it was made from -- so an edit the operator or the API server
refuses leaves the fleet scaled as it runs (the load does not wait for the fix)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonscale.api import status as st
from tritonscale.api.spec import InferenceServiceSpec, ScalingSpec
from tritonscale.api.validation import scaling_spec, validate_body, validate_spec
from tritonscale.kube.client import Kube
from tritonscale.render.deployment_records import recorded_spec
from tritonscale.render.kubernetes_objects import (
    build_pdb,
    config_hash,
    rendered_config,
    template_hash,
)

# By object uid: the last spec that was valid. An edit the operator refuses (SpecValid=False) leaves the
# running fleet as it was, and the autoscaler keeps scaling it by this spec: the load does not wait for
# the fix. After a restart it is the spec the Deployment records it was made from (SPEC_ANNOTATION).
_valid_specs: dict[str, InferenceServiceSpec] = {}


def forget(uid: str) -> None:
    """A deleted object's last valid spec goes."""
    _valid_specs.pop(uid, None)


def _refused_as_rendered(body: dict[str, Any]) -> bool:
    """The API server refused this generation's children as rendered (SpecValid=False, ChildRejected,
    reported by the reconciler): the spec passes the operator's checks, but nothing of it was applied,
    so the fleet is not scaled by it either (its maxReplicas, say)."""
    gen = body["metadata"].get("generation")
    for c in (body.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == st.SPEC_VALID:
            return c.get("status") == "False" and c.get("reason") == st.CHILD_REJECTED \
                and c.get("observedGeneration") == gen
    return False


def _made_from(kube: Kube, body: dict[str, Any], deployment: dict[str, Any]) -> InferenceServiceSpec | None:
    """The valid spec the Deployment records it was made from (``SPEC_ANNOTATION``): after an operator
    restart, the last valid spec of an object edited into one the operator refuses. None when it
    records none, when this operator's version refuses it too, or when it no longer describes the
    children: the config it renders is not the one the pod template carries, or its minReplicas not the
    PodDisruptionBudget's (an older operator version, which keeps no record, applied later edits and
    left this one behind; scaling by it cut a fleet from 6 to 4)."""
    raw = recorded_spec(deployment, (body.get("spec") or {}))
    if raw is None:
        return None
    meta = body.get("metadata") or {}
    spec, _ = validate_body({"metadata": meta, "spec": raw})
    if spec is None:
        return None
    owner = {**body, "spec": raw}
    if config_hash(rendered_config(spec, owner)) != template_hash(deployment):
        return None
    pdb = kube.get("PodDisruptionBudget", str(meta.get("namespace")), str(meta.get("name")))
    floor = build_pdb(spec, owner)["spec"]["minAvailable"]
    if pdb is not None and (pdb.get("spec") or {}).get("minAvailable") != floor:
        return None
    return spec


def scaling_in_force(uid: str, body: Mapping[str, Any]) -> ScalingSpec:
    """The ``scaling`` block the autoscaler loop paces its ticks and queries Prometheus by: the spec's,
    when the whole spec is valid and its children were not refused as rendered; else the one the last tick
    scaled by (the last valid spec, or the one the fleet was made from: ``spec_to_scale_by``), so an edit the
    operator or the API server refuses changes neither the Prometheus URL, the rate window nor the interval
    of a fleet that goes on being scaled by its old spec; else, before any tick, the block parsed on its own
    (``scaling_spec``: defaults where it does not parse)."""
    spec = body.get("spec")
    try:
        edited, _ = validate_spec(spec)
    except TypeError:  # Kopf's ``spec`` is a view, a Mapping whatever the spec is: "hello" raises when read
        edited = None
    known = _valid_specs.get(uid)
    if edited is not None and (known is None or not _refused_as_rendered(dict(body))):
        return edited.scaling
    return known.scaling if known is not None else scaling_spec(spec)


def spec_to_scale_by(kube: Kube, body: dict[str, Any], deployment: dict[str, Any]
                  ) -> tuple[InferenceServiceSpec, bool] | None:
    """The spec to scale by, and whether it is stale (the spec as edited is invalid, or the API server
    refused what it renders): then what the fleet runs -- the spec its Deployment was made from, else
    the last valid one seen. None: invalid, and no valid spec known."""
    uid = body["metadata"]["uid"]
    edited, _ = validate_body(body)
    stale = edited is None or _refused_as_rendered(body)
    found = (_made_from(kube, body, deployment) or _valid_specs.get(uid)) if stale else edited
    if found is None:
        return None
    _valid_specs[uid] = found
    return found, stale
