"""Markdown field reference for the README, generated from the same models as the CRD."""

from __future__ import annotations

from typing import Any

from tritonscale.api.crd import openapi_schema

BEGIN = "<!-- BEGIN GENERATED CRD REFERENCE (tritonscale.api.reference) -->"
END = "<!-- END GENERATED CRD REFERENCE -->"


def _type(node: dict[str, Any]) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    t: str = node.get("type", "object")
    if t == "array":
        return f"list of {_type(node.get('items', {}))}"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (Kubernetes)"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return t


def _rows(node: dict[str, Any], path: str) -> list[str]:
    rows = []
    for name, child in (node.get("properties") or {}).items():
        p = f"{path}.{name}"
        default = child.get("default")
        # An object's default is its fields' defaults, listed on their own rows.
        default_s = "" if default is None or isinstance(default, dict) else f"`{default}`"
        desc = (child.get("description") or "").replace("|", "\\|").replace("\n", " ")
        if "items" in child and child["items"].get("properties"):
            rows.append(f"| `{p}` | {_type(child)} | {default_s} | {desc} |")
            rows += _rows(child["items"], p + "[]")
            continue
        rows.append(f"| `{p}` | {_type(child)} | {default_s} | {desc} |")
        if child.get("properties"):
            rows += _rows(child, p)
    return rows


def markdown() -> str:
    schema = openapi_schema()
    lines = [BEGIN, "", "| Field | Type | Default | Meaning |", "|---|---|---|---|"]
    lines += _rows(schema["properties"]["spec"], "spec")
    lines += ["", "Status fields:", "", "| Field | Type | Default | Meaning |", "|---|---|---|---|"]
    lines += _rows(schema["properties"]["status"], "status")
    lines += ["", END]
    return "\n".join(lines)


def update_readme(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + markdown() + tail
