"""api/crd.py: the CRD's schema is structural, as a real API server requires of a v1 CRD, and each CEL
rule of api/rules.py sits at its scope, well formed and within the API server's cost budget.

The structural checks mirror the apiextensions validation of a v1 CRD schema
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from support import cel_eval as cel
from tritonscale.api.crd import crd
from tritonscale.api.rules import CEL_RULES, Rule

ROOT = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- structural schema --------------------------------------------------------------------------------

def walk(node: Any, path: str = "openAPIV3Schema") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node (not every dict: `default` values and validation rules are data)."""
    if not isinstance(node, dict):
        return
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            yield from walk(node[key], f"{path}.{key}")
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(node.get(key) or []):
            yield from walk(sub, f"{path}.{key}[{i}]")


NODES = list(walk(ROOT))
FORBIDDEN = ("$ref", "$defs", "$schema", "definitions", "anyOf", "allOf", "oneOf", "not", "const",
             "patternProperties", "dependencies", "additionalItems", "prefixItems", "title", "examples")


def test_walk_sees_the_whole_schema() -> None:
    paths = {p for p, _ in NODES}
    assert "openAPIV3Schema.properties[spec].properties[model].properties[inputs].items.properties[dims].items" in paths
    assert "openAPIV3Schema.properties[spec].properties[model].properties[parameters].additionalProperties" in paths
    assert len(NODES) > 80


def _violations(check: str) -> list[str]:
    bad = []
    for path, node in NODES:
        if check == "type-or-preserve":
            if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                bad.append(path)
        elif check == "no-forbidden-keywords":
            bad += [f"{path}.{k}" for k in FORBIDDEN if k in node]
        elif check == "exclusive-bounds-boolean":
            bad += [f"{path}.{k}" for k in ("exclusiveMinimum", "exclusiveMaximum")
                    if k in node and not isinstance(node[k], bool)]
            bad += [f"{path}.{k} without {k[9].lower()}{k[10:]}" for k in ("exclusiveMinimum", "exclusiveMaximum")
                    if k in node and k[9].lower() + k[10:] not in node]
        elif check == "additionalProperties-xor-properties":
            if "additionalProperties" in node and "properties" in node:
                bad.append(path)
        elif check == "additionalProperties-is-a-schema":
            if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
                bad.append(f"{path}: additionalProperties={node['additionalProperties']!r}")
        elif check == "known-types":
            if node.get("type") not in (None, "object", "array", "string", "integer", "number", "boolean"):
                bad.append(f"{path}: {node['type']!r}")
        elif check == "arrays-have-items":
            if node.get("type") == "array" and not isinstance(node.get("items"), dict):
                bad.append(path)
        elif check == "defaults-not-null":
            if "default" in node and node["default"] is None:
                bad.append(path)
        elif check == "required-are-properties":
            missing = set(node.get("required") or []) - set(node.get("properties") or {})
            bad += [f"{path}.required[{m}]" for m in sorted(missing)]
        else:
            raise AssertionError(check)
    return bad


@pytest.mark.parametrize("check", [
    "type-or-preserve",
    "no-forbidden-keywords",
    "exclusive-bounds-boolean",
    "additionalProperties-xor-properties",
    "additionalProperties-is-a-schema",
    "known-types",
    "arrays-have-items",
    "defaults-not-null",
    "required-are-properties",
])
def test_schema_is_structural(check: str) -> None:
    assert _violations(check) == []


def test_optional_number_bound_is_openapi_v3_style() -> None:
    target = ROOT["properties"]["spec"]["properties"]["scaling"]["properties"]["targetP95Milliseconds"]
    assert (target["type"], target["minimum"], target["exclusiveMinimum"], target["maximum"]) == (
        "number", 0, True, 600_000)


def test_optionals_have_no_null_default() -> None:
    scaling = ROOT["properties"]["spec"]["properties"]["scaling"]["properties"]
    assert "default" not in scaling["fallbackReplicas"]
    assert "default" not in scaling["targetP95Milliseconds"]


def test_object_blocks_default_so_nested_defaults_apply() -> None:
    spec = ROOT["properties"]["spec"]["properties"]
    assert spec["runtime"]["default"] == {}
    # scaling carries CEL rules, and kube-apiserver checks a default against them as
    # written (nested defaults not applied): `{}` would fail "no such key: minReplicas"
    # and the API server would refuse the CRD. Its default is the materialised one.
    scaling = spec["scaling"]
    assert scaling["default"]["minReplicas"] == scaling["properties"]["minReplicas"]["default"] == 1
    assert scaling["default"]["maxReplicas"] == scaling["properties"]["maxReplicas"]["default"]
    assert scaling["default"]["scaleUp"] == {"stabilizationSeconds": 0, "maxStep": 4}


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for key, sub in (schema.get("properties") or {}).items():
        out += _nodes(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        out += _nodes(schema["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("path", [p for p, n in _nodes(ROOT) if "default" in n and n.get("x-kubernetes-validations")])
def test_defaults_satisfy_their_own_cel_rules(path: str) -> None:
    """The API server evaluates a node's rules on its default when the CRD is written."""
    node = dict(_nodes(ROOT))[path]
    for v in node["x-kubernetes-validations"]:
        assert cel.cel_verdict(v["rule"], node["default"]), (path, v["rule"], node["default"])


# --- CEL rules at the right nodes ---------------------------------------------------------------------

def _node_at_scope(scope: str) -> dict[str, Any]:
    node = ROOT["properties"]["spec"]
    for key in filter(None, scope.split(".")):
        node = node["properties"][key]
    return node


def _all_validations() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(path, node, v) for path, node in NODES for v in node.get("x-kubernetes-validations") or []]


@pytest.mark.parametrize("rule", CEL_RULES, ids=[f"{i}-{r.field}" for i, r in enumerate(CEL_RULES)])
def test_rule_is_in_x_kubernetes_validations_at_its_scope(rule: Rule) -> None:
    node = _node_at_scope(rule.scope)
    entries = [v for v in node.get("x-kubernetes-validations") or [] if v["rule"] == rule.cel]
    assert len(entries) == 1, f"rule {rule.cel!r} missing at scope {rule.scope!r}"
    entry = entries[0]
    assert entry["message"] == rule.message
    # fieldPath is relative to the node; rule.field is relative to spec, so scope + fieldPath == field.
    assert ".".join(filter(None, [rule.scope, entry["fieldPath"].lstrip(".")])) == rule.field


@pytest.mark.parametrize("scope", sorted({r.scope for r in CEL_RULES}))
def test_scope_nodes_hold_exactly_their_rules(scope: str) -> None:
    """No stale or duplicated CEL at a rule scope: the node carries the shared rules, in order."""
    node = _node_at_scope(scope)
    assert [v["rule"] for v in node["x-kubernetes-validations"]] == [r.cel for r in CEL_RULES if r.scope == scope]


def test_the_name_rule_sits_on_metadata_name_and_the_root_has_none() -> None:
    """A CRD may constrain only metadata.name and generateName; on the field, the API server's
    error names it (tests/integration/test_crd_admission.py checks that on kube-apiserver)."""
    assert "x-kubernetes-validations" not in ROOT
    metadata = ROOT["properties"]["metadata"]
    assert set(metadata["properties"]) == {"name"}
    assert [v["rule"] for v in metadata["properties"]["name"]["x-kubernetes-validations"]] == [
        "size(self) <= 56", "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"]


def _resolve_field_path(node: dict[str, Any], field_path: str) -> dict[str, Any] | None:
    for part in field_path.strip(".").split("."):
        node = (node.get("properties") or {}).get(part)
        if node is None:
            return None
    return node


@pytest.mark.parametrize("entry", _all_validations(), ids=lambda e: f"{e[0].rsplit('.', 1)[-1]}:{e[2]['rule'][:30]}")
def test_validation_entries_are_well_formed(entry: tuple[str, dict[str, Any], dict[str, Any]]) -> None:
    path, node, v = entry
    assert set(v) <= {"rule", "message", "fieldPath", "reason", "messageExpression", "optionalOldSelf"}
    assert v["rule"] and v["message"] and "\n" not in v["message"]
    if "fieldPath" in v:
        assert v["fieldPath"].startswith("."), v
        assert _resolve_field_path(node, v["fieldPath"]) is not None, (
            f"{path}: fieldPath {v['fieldPath']} does not name a property of this node")


_LIST_MACRO = re.compile(r"(self(?:\.\w+)+)\.(?:all|exists|exists_one|map|filter)\(")


@pytest.mark.parametrize("entry", _all_validations(), ids=lambda e: f"{e[0].rsplit('.', 1)[-1]}:{e[2]['rule'][:30]}")
def test_lists_iterated_by_cel_have_max_items(entry: tuple[str, dict[str, Any], dict[str, Any]]) -> None:
    """The API server estimates a rule's cost from maxItems; an unbounded list blows the budget."""
    _, node, v = entry
    for match in _LIST_MACRO.finditer(v["rule"]):
        target = _resolve_field_path(node, match.group(1).removeprefix("self"))
        assert target is not None, f"{match.group(1)} is not in the schema"
        assert target["type"] == "array"
        assert isinstance(target.get("maxItems"), int) and target["maxItems"] <= 1000, match.group(1)


def test_list_macro_pattern_finds_the_iterated_lists() -> None:
    iterated = sorted(m.group(1) for _, _, v in _all_validations() for m in _LIST_MACRO.finditer(v["rule"]))
    assert iterated == ["self.batching.autoTune.preferredBatchSizes", "self.batching.preferredBatchSizes",
                        "self.batching.preferredBatchSizes", "self.model.warmup.batchSizes"]
