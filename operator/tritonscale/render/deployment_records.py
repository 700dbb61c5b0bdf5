"""What a Deployment records of how it was made (pure): the spec it was rendered from
(``spec_annotation``, read back by ``recorded_spec``) and a digest of what its pods serve
(``serving_digest``), which the autoscaler reads each tick to tell a new model from the old."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from tritonscale.api.spec import (
    GPU_RESOURCE,
    SPEC_ANNOTATION,
    SPEC_ANNOTATION_MAX_BYTES,
    InferenceServiceSpec,
    url_without_credentials,
)


def spec_annotation(owner: dict[str, Any]) -> dict[str, str]:
    """The Deployment's record of the spec it was made from (``SPEC_ANNOTATION``): the owner's spec
    as stored, compact JSON. Empty when it is larger than ``SPEC_ANNOTATION_MAX_BYTES``: emptied, not
    left out, so an earlier record cannot outlive the spec it was. Credentials in
    ``scaling.prometheus.url`` are not recorded (``url_without_credentials``): whoever may read
    Deployments (the built-in ``view`` role) could read them there."""
    spec = owner.get("spec") or {}
    url = _prometheus_url(spec)
    shown = None if url is None else url_without_credentials(url)
    if shown != url:
        spec = copy.deepcopy(spec)
        spec["scaling"]["prometheus"]["url"] = shown
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {SPEC_ANNOTATION: text if len(text.encode()) <= SPEC_ANNOTATION_MAX_BYTES else ""}


def _prometheus_url(spec: Any) -> str | None:
    node = spec
    for key in ("scaling", "prometheus", "url"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def recorded_spec(deployment: dict[str, Any], live_spec: Any = None) -> dict[str, Any] | None:
    """The spec a Deployment records it was made from, or None (none recorded, or not a JSON object).
    A Prometheus URL recorded without its credentials takes them from ``live_spec`` (the object's
    spec now) when its URL is that one with credentials."""
    text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
    try:
        raw = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):  # json recurses per level: a deep nesting is no ValueError
        return None
    if not isinstance(raw, dict):
        return None
    recorded, live = _prometheus_url(raw), _prometheus_url(live_spec)
    if recorded is not None and live is not None and live != recorded and url_without_credentials(live) == recorded:
        raw["scaling"]["prometheus"]["url"] = live
    return raw


# The Deployment's record of what its pods serve (``serving_digest``): small, so kept when a large spec
# is not recorded (``spec_annotation``); the autoscaler reads it each tick (``decider.forget_model``).
SERVING_ANNOTATION = "tritonscale.io/serving"
# Runtime fields with no bearing on how fast a pod serves (scheduling and identity only).
_NOT_SPEED = ("tolerations", "imagePullSecrets", "serviceAccountName", "securityContext", "topologySpreadConstraints",
              "priorityClassName", "startupTimeoutSeconds", "terminationGracePeriodSeconds", "progressDeadlineSeconds",
              "shmSize")
# Speed fields added to the runtime after the digest was first recorded, and their defaults (``serving_digest``).
_ADDED_LATER = {"gpuResource": GPU_RESOURCE}
# Fields with no bearing on speed that were in the digest before that was seen, pinned at their defaults: out of
# it, a digest recorded with them would change at the upgrade and every service forget its learned speed. The
# model-fetch image puts the same files in place. (Pod labels and annotations stay in: a mutating webhook can
# read them and inject a sidecar on the request path, e.g. sidecar.istio.io/inject.)
_NOT_SPEED_SINCE = {"fetchImage": None}


def serving_digest(spec: InferenceServiceSpec) -> str:
    """What the pods serve, for the autoscaler's memory (``decider.forget_model``): a digest of the
    model and of the runtime fields that can change its speed (image, GPUs, resources, node
    selector, env, flags). The batcher's settings are left out: the tuner changes them, and a
    batch's cost does not depend on them."""
    runtime = {k: v for k, v in spec.runtime.model_dump(mode="json", by_alias=True).items() if k not in _NOT_SPEED}
    runtime.update(_NOT_SPEED_SINCE)
    # Node affinity can choose another GPU, as the node selector can; pod (anti-)affinity only places
    # replicas. Kept out while unset, so the field's arrival changed no service's digest.
    node_affinity = runtime.pop("affinity").get("nodeAffinity")
    if node_affinity:
        runtime["nodeAffinity"] = node_affinity
    # Fields added after the digest was first recorded are left out at their defaults, so an operator upgrade
    # does not make every service forget its learned speed (tests/unit/test_tick_model_change.py pins it).
    for key, default in _ADDED_LATER.items():
        if runtime.get(key) == default:
            del runtime[key]
    text = json.dumps({"model": spec.model.model_dump(mode="json", by_alias=True), "runtime": runtime},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
