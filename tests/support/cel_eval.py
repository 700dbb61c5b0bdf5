"""What kube-apiserver does with the CRD before and while it checks an object:
structural defaulting (``default`` values, recursively) and the CEL rules of
``x-kubernetes-validations``, evaluated with ``cel-python``. Shared by
tests/unit/test_rules_cel.py, tests/unit/test_crd_schema.py and
tests/unit/test_crd_agrees_with_operator.py.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
from celpy import celtypes

from tritonscale.api.crd import openapi_schema
from tritonscale.api.spec import GO_SPACE

SPEC_SCHEMA = openapi_schema()["properties"]["spec"]
ENV = celpy.Environment()
# The functions of the API server's CEL libraries the CRD's rules call that cel-python lacks: trim() of
# cel-go's strings extension (Go's strings.TrimSpace), sum() of Kubernetes' list library and format() of
# the strings library (%d only).
FUNCTIONS: dict[str, Any] = {
    "trim": lambda s: celtypes.StringType(str(s).strip(GO_SPACE)),
    "sum": lambda items: celtypes.IntType(sum(int(x) for x in items)),
    # the strings library's format(), for the %d and %% the messageExpressions use
    "format": lambda text, args: celtypes.StringType(str(text) % tuple(int(a) for a in args)),
}


def apply_crd_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: absent properties with a ``default`` get it,
    then defaulting recurses (so ``default: {}`` objects receive their nested scalar defaults)."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_crd_defaults(sub, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_crd_defaults(schema["items"], v) for v in value]
    return value


def crd_defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    return apply_crd_defaults(SPEC_SCHEMA, spec)


_PROGRAMS: dict[str, Any] = {}


def _evaluate(expr: str, self_value: Any) -> Any:
    """``expr`` (compiled once) with ``self`` bound to ``self_value`` (plain JSON data or already CEL-typed)."""
    if expr not in _PROGRAMS:
        _PROGRAMS[expr] = ENV.program(ENV.compile(expr), functions=FUNCTIONS)
    if not isinstance(self_value, celtypes.MapType):
        self_value = celpy.json_to_cel(self_value)
    return _PROGRAMS[expr].evaluate({"self": self_value})


def cel_verdict(expr: str, self_value: Any) -> bool:
    """A rule's verdict with ``self`` bound to ``self_value``."""
    result = _evaluate(expr, self_value)
    assert isinstance(result, celtypes.BoolType), f"CEL {expr!r} did not yield a bool: {result!r}"
    return bool(result)


def cel_message(expr: str, self_value: Any) -> str:
    """A ``messageExpression``'s string with ``self`` bound to ``self_value``."""
    result = _evaluate(expr, self_value)
    assert isinstance(result, str), f"CEL {expr!r} did not yield a string: {result!r}"
    return str(result)
