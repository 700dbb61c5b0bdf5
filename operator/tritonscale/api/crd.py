"""Generate the InferenceService CRD from the Pydantic models.

Pydantic emits JSON Schema 2020-12 with ``$defs``/``$ref`` and ``anyOf`` for
optionals; a Kubernetes *structural* schema must be OpenAPI v3.0, fully
inlined, with a ``type`` on every node and boolean ``exclusiveMinimum``.
``structural()`` performs exactly that translation and nothing else, so the
models stay the single source of truth. ``crds/`` is this module's output (as YAML
by ``render/crd_manifest.py``) and ``tests/unit/test_crd.py`` fails when the two drift apart.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from tritonscale.api import spec as S
from tritonscale.api.status import InferenceServiceStatus
from tritonscale.api.validation import NAME_MAX, NAME_PATTERN

_DROP = {"title", "examples"}


def structural(node: Any, defs: dict[str, Any]) -> Any:
    """Translate one pydantic JSON-Schema node to a structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in node:  # Optional[X] -> X (absent means unset; null is never needed)
        non_null = [n for n in node["anyOf"] if n.get("type") != "null"]
        if len(non_null) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            merged = {**structural(non_null[0], defs), **rest}
            if merged.get("default", 0) is None:
                del merged["default"]
            return structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {k: structural(v, defs) for k, v in value.items()}
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural(value, defs)
        elif key == "additionalProperties" and isinstance(value, bool):
            if value:  # extra="allow": the structural spelling of "keep unknown keys"
                out["x-kubernetes-preserve-unknown-fields"] = True
            continue  # extra="forbid": the API server prunes unknown fields anyway
        elif key == "default" and isinstance(value, (dict, list)) and value:
            continue  # non-empty object defaults would duplicate the nested scalar defaults
        else:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields") and out.get("type") == "object":
        out.pop("additionalProperties", None)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _defaults_satisfy_rules(structural(raw, defs))
    return schema


def _materialised(node: dict[str, Any]) -> dict[str, Any]:
    """What the API server makes of ``{}`` at ``node``: every property's default, recursively."""
    out = {}
    for key, sub in (node.get("properties") or {}).items():
        if "default" in sub:
            out[key] = _materialised(sub) if sub["default"] == {} and "properties" in sub else sub["default"]
    return out


def _defaults_satisfy_rules(node: Any) -> Any:
    """A ``default: {}`` on a node with ``x-kubernetes-validations`` becomes the materialised
    default. kube-apiserver checks each default against the node's CEL rules as written,
    before nested defaults apply, so `self.minReplicas <= self.maxReplicas` on ``{}`` fails
    with "no such key: minReplicas" and the whole CRD is refused."""
    if isinstance(node, dict):
        node = {k: _defaults_satisfy_rules(v) for k, v in node.items()}
        if node.get("default") == {} and node.get("x-kubernetes-validations"):
            node["default"] = _materialised(node)
    elif isinstance(node, list):
        node = [_defaults_satisfy_rules(v) for v in node]
    return node


def with_defaults_described(node: Any) -> Any:
    """Each field's default at the end of its description ("Default: 15."), for ``kubectl explain``,
    which prints descriptions but not defaults (an exploratory review: `minReplicas: 20` was refused as
    above maxReplicas, which the user never wrote and nothing said defaulted to 10). Scalar defaults
    only, and not where the description already speaks of its default. The README's reference table
    has a column of its own for them."""
    if isinstance(node, list):
        return [with_defaults_described(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: with_defaults_described(v) if k in ("items", "additionalProperties") else v for k, v in node.items()}
    if isinstance(node.get("properties"), dict):
        out["properties"] = {k: with_defaults_described(v) for k, v in node["properties"].items()}
    default, description = out.get("default"), out.get("description")
    if ("default" in out and not isinstance(default, (dict, list)) and default != "" and isinstance(description, str)
            and "default" not in description.lower()):
        shown = (json.dumps(default) if isinstance(default, bool) or default is None
                 else f"{default:g}" if isinstance(default, float) else default)
        out["description"] = f"{description.rstrip()} Default: {shown}."
    return out


def _spec_defaults_described(schema: dict[str, Any]) -> dict[str, Any]:
    """``with_defaults_described`` for what users write: the spec (status is the operator's)."""
    properties = schema["properties"]
    return {**schema, "properties": {**properties, "spec": with_defaults_described(properties["spec"])}}


def openapi_schema() -> dict[str, Any]:
    spec_schema = _schema_of(S.InferenceServiceSpec)
    status_schema = _schema_of(InferenceServiceStatus)
    # Kopf keeps handler progress under status.kopf; let unknown status keys survive pruning.
    status_schema["x-kubernetes-preserve-unknown-fields"] = True
    spec_schema["description"] = "What to serve and how to scale it."
    status_schema["description"] = "What the operator observed and decided; written by the operator only."
    return {
        "type": "object",
        "description": "A Triton Inference Server model served on GPUs: tritonscale renders its config.pbtxt and "
                       "runs it as a Deployment, with a warm floor of replicas, scaled on p95 latency from Prometheus.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "tritonscale.io/v1alpha1."},
            "kind": {"type": "string", "description": "InferenceService."},
            # A CRD may constrain metadata.name (and generateName) only. The rule sits on the
            # field itself, so the API server's error names it ("metadata.name: Invalid value").
            # (metadata itself may carry nothing else, not even a description: the API server refuses the CRD)
            "metadata": {"type": "object", "properties": {"name": {
                "type": "string",
                "description": "Names the Deployment, Service and PodDisruptionBudget (and NAME-config-HASH, "
                               "the ConfigMaps): a DNS-1035 label of at most 56 characters.",
                "x-kubernetes-validations": [{
                    "rule": f"size(self) <= {NAME_MAX}",
                    "message": f"metadata.name must be at most {NAME_MAX} characters: it names the children, "
                               "with suffixes (NAME-config-HASH, the pods' NAME-HASH-ID)",
                }, {
                    # The Service's name must be a DNS-1035 label; the API server admits any DNS
                    # subdomain for an InferenceService ("linear.v2", "1model"), which then sat with
                    # blank columns and only a condition saying why (the operator's own check,
                    # validation.validate_name, stays for objects admitted by an earlier CRD).
                    "rule": f"self.matches('{NAME_PATTERN.pattern}')",
                    "message": "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
                               "starting with a letter and ending with a letter or digit): it names the Service",
                }],
            }}},
            "spec": spec_schema,
            "status": status_schema,
        },
    }


PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".status.model"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    # the Ready condition's reason, as a pod's STATUS: InvalidSpec, RollingOut, ReplicasReady... (an invalid
    # spec showed nowhere in `kubectl get tis`: Scaling is empty before the autoscaler's first tick)
    {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
    {"name": "P95(ms)", "type": "number", "jsonPath": ".status.p95Milliseconds"},
    {"name": "Target(ms)", "type": "number", "jsonPath": ".spec.scaling.targetP95Milliseconds"},
    {"name": "Scaling", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Scaling")].reason'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "QueueDelay(us)", "type": "integer", "priority": 1,
     "jsonPath": ".status.batching.maxQueueDelayMicroseconds"},
    # an old time: no operator serves the object (its namespace is not watched, or the operator is gone)
    {"name": "Ticked", "type": "date", "priority": 1, "jsonPath": ".status.lastTickTime"},
    {"name": "Message", "type": "string", "priority": 1,
     "jsonPath": '.status.conditions[?(@.type=="Scaling")].message'},
]


# The digest of the CRD's spec, on the CRD itself: the operator compares the cluster's with its own at
# start (``crd_drift``). Helm applies crds/ only at install, so after a `helm upgrade` an older schema
# stays, and the API server drops the fields it lacks -- kubectl says "unknown field", the operator
# nothing (an exploration, session 55).
SCHEMA_DIGEST_ANNOTATION = f"{S.GROUP}/schema-digest"
CRD_NAME = f"{S.PLURAL}.{S.GROUP}"


def spec_digest(spec: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``spec`` as canonical JSON."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def crd_drift(live: dict[str, Any] | None) -> str | None:
    """What is wrong with the InferenceService CRD in the cluster (``live``, None: none there) for this
    operator, or None: it is this operator's own -- its digest annotation is this version's."""
    ours = spec_digest(crd()["spec"])
    fix = ("apply this version's: kubectl apply --server-side --force-conflicts -f "
           "charts/tritonscale/crds/inferenceservices.tritonscale.io.yaml")
    if live is None:
        return f"no CustomResourceDefinition {CRD_NAME} in the cluster: nothing to serve until it is installed; {fix}"
    theirs = ((live.get("metadata") or {}).get("annotations") or {}).get(SCHEMA_DIGEST_ANNOTATION)
    if theirs == ours:
        return None
    which = f"schema digest {theirs}" if theirs else f"no {SCHEMA_DIGEST_ANNOTATION} annotation: an older version's"
    return (f"the CustomResourceDefinition {CRD_NAME} in the cluster is not this operator's ({which}; this "
            f"operator's {ours}): the API server drops the fields its schema lacks from every InferenceService "
            f"written (kubectl warns \"unknown field\"), and helm upgrade never updates a CRD; {fix}")


def crd() -> dict[str, Any]:
    spec = _crd_spec()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "annotations": {SCHEMA_DIGEST_ANNOTATION: spec_digest(spec)}},
        "spec": spec,
    }


def _crd_spec() -> dict[str, Any]:
    return {
        "group": S.GROUP,
        "scope": "Namespaced",
        "names": {
            "kind": S.KIND,
            "listKind": f"{S.KIND}List",
            "plural": S.PLURAL,
            "singular": S.SINGULAR,
            "shortNames": list(S.SHORT_NAMES),
            "categories": ["all", "tritonscale"],
        },
        "versions": [{
            "name": S.VERSION,
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": PRINTER_COLUMNS,
            "schema": {"openAPIV3Schema": _spec_defaults_described(openapi_schema())},
        }],
    }
