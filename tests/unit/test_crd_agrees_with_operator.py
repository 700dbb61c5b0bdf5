"""api/crd.py: the API server and the operator agree -- a model of kube-apiserver (structural defaulting,
the OpenAPI schema, the CEL rules) refuses the specs of tests/support/spec_cases.py that validate_spec
refuses, naming the same fields, and takes the samples. tests/integration/test_crd_admission.py sends the
same table to the real API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from support import cel_eval as cel
from support import spec_cases as table
from tritonscale.api.crd import crd
from tritonscale.api.rules import OPERATOR_ONLY_FIELDS
from tritonscale.api.validation import validate_spec

ROOT = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- the API server and the operator agree ------------------------------------------------------------
#
# api_server_errors() plays the API server on a spec: structural defaulting, then the OpenAPI schema
# (jsonschema draft 4 = OpenAPI v3.0 bounds), then, if the schema passed, every x-kubernetes-validations
# rule on the path with `self` bound to that node. Each failure is reported as node path + fieldPath,
# the way `kubectl apply` prints it.

SPEC_SCHEMA = ROOT["properties"]["spec"]
SPEC_VALIDATOR = jsonschema.Draft4Validator(SPEC_SCHEMA)


def _cel_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    out = [path + v.get("fieldPath", "") for v in schema.get("x-kubernetes-validations") or []
           if not cel.cel_verdict(v["rule"], value)]
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                out += _cel_errors(sub, value[key], f"{path}.{key}")
        if isinstance(schema.get("additionalProperties"), dict):
            for key, item in value.items():
                out += _cel_errors(schema["additionalProperties"], item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _cel_errors(schema["items"], item, f"{path}[{i}]")
    return out


def _list_map_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    """``x-kubernetes-list-type: map``: the API server refuses an item whose keys repeat an earlier
    item's ("Duplicate value"), at that item's index."""
    out: list[str] = []
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                out += _list_map_errors(sub, value[key], f"{path}.{key}")
    elif isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(value):
                k = tuple(item.get(key) for key in keys)
                if k in seen:
                    out.append(f"{path}[{i}]")
                seen.add(k)
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                out += _list_map_errors(schema["items"], item, f"{path}[{i}]")
    return out


def api_server_errors(spec: dict[str, Any]) -> list[str]:
    defaulted = cel.crd_defaulted(spec)
    structural = ["spec" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in e.absolute_path)
                  for e in SPEC_VALIDATOR.iter_errors(defaulted)]
    structural += _list_map_errors(SPEC_SCHEMA, defaulted, "spec")
    return sorted(structural) or sorted(_cel_errors(SPEC_SCHEMA, defaulted, "spec"))


# The API server drops (or, with strict field validation, refuses) unknown fields before the schema runs.
UNKNOWN_FIELD_CASES = {"unknown-scaling-field", "unknown-top-level-field", "unknown-tensor-field"}
SCHEMA_GAPS: dict[str, str] = {}  # cases the CRD schema cannot check (none left)


def test_unknown_field_cases_exist_in_the_table() -> None:
    ids = {c.id for c in table.TYPE_CASES}
    assert UNKNOWN_FIELD_CASES <= ids and set(SCHEMA_GAPS) <= ids
    assert {"dims-zero", "warmup-size-zero", "preferred-zero"} <= ids
    for case in (c for c in table.TYPE_CASES if c.id in UNKNOWN_FIELD_CASES):
        assert [p.message.split(" (did you mean")[0] for p in validate_spec(case.spec())[1]] == ["unknown field"]


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=SCHEMA_GAPS[c.id])] if c.id in SCHEMA_GAPS
                 else []) for c in table.TYPE_CASES if c.id not in UNKNOWN_FIELD_CASES
])
def test_api_server_rejects_what_pydantic_rejects(case: Any) -> None:
    """kubectl apply fails for the same type and range errors the operator reports."""
    errors = api_server_errors(case.spec())
    assert errors != []
    # ... and points at the same field (a missing required field is reported on its parent object).
    for problem in case.problems:
        assert any(problem == e or problem.startswith(e + ".") or problem.startswith(e + "[")
                   or e.startswith(problem) for e in errors), (problem, errors)


@pytest.mark.parametrize("case", table.RULE_CASES, ids=[c.id for c in table.RULE_CASES])
def test_api_server_reports_the_operators_cross_field_problems(case: Any) -> None:
    """The structural schema admits every Pydantic-valid spec, and the CRD's CEL rules then name exactly
    the fields validate_spec names: the two enforcement paths give the user the same answer (but for the
    operator's own rules, OPERATOR_ONLY in rules.py)."""
    assert api_server_errors(case.spec()) == sorted(p for p in case.problems if p not in OPERATOR_ONLY_FIELDS)


@pytest.mark.parametrize("url", table.PROMETHEUS_URLS)
def test_the_crd_takes_the_prometheus_urls_the_operator_takes(url: str) -> None:
    """`kubectl apply` took port 0 or 99999 and a URL ending in /api/v1, which the operator then refused in
    status: the CRD's rules now refuse what `prometheus_base_url` refuses, and nothing else."""
    from tritonscale.api.spec import prometheus_base_url

    try:
        prometheus_base_url(url)
        operator_takes = True
    except ValueError:
        operator_takes = False
    errors = api_server_errors(table.mutate(table.base_spec(), {"scaling.prometheus": {"url": url}}))
    assert errors == ([] if operator_takes else ["spec.scaling.prometheus.url"])


@pytest.mark.parametrize("sample", table.SAMPLES, ids=[s.stem for s in table.SAMPLES])
def test_api_server_accepts_samples(sample: Path) -> None:
    spec = table.load_sample(sample)["spec"]
    assert [e.message for e in SPEC_VALIDATOR.iter_errors(spec)] == [], "valid even before defaulting"
    assert api_server_errors(spec) == []
