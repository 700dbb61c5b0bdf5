"""rules.py: each rule's CEL expression and its Python twin agree on every case.

The API server enforces the CEL rules (``x-kubernetes-validations``) on the
object *after* structural defaulting; the operator enforces ``Rule.holds`` on
the parsed Pydantic model. Both verdicts are computed here for the whole
cross-field table of ``support/spec_cases.py`` plus the samples, in two
renderings of the object the API server could hand to CEL:

* ``model_dump``: the Pydantic model dumped camelCase with ``None`` removed
  (so ``has()`` is false for unset optionals);
* ``crd-defaulted``: the raw manifest with the generated CRD's ``default``
  values applied the way the API server does, which is what CEL really sees
  (fields without a default stay absent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celpy
import pytest

from support import spec_cases as table
from support.cel_eval import cel_message, cel_verdict, crd_defaulted
from tritonscale.api.crd import openapi_schema
from tritonscale.api.rules import CEL_RULES, Rule
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.api.validation import NAME_MAX, validate_name

SCHEMA = openapi_schema()


def dumped(spec: dict[str, Any]) -> dict[str, Any]:
    return InferenceServiceSpec.model_validate(spec).model_dump(by_alias=True, exclude_none=True)


RENDERINGS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "model_dump": dumped,
    "crd-defaulted": crd_defaulted,
}


def at_scope(obj: dict[str, Any], scope: str) -> Any:
    for key in filter(None, scope.split(".")):
        obj = obj[key]
    return obj


def python_scope(model: InferenceServiceSpec, scope: str) -> Any:
    for key in filter(None, scope.split(".")):
        model = getattr(model, key)
    return model


SAMPLE_CASES = [table.Case(f"sample-{p.stem}", {}) for p in table.SAMPLES]
ALL_CASES = list(table.RULE_CASES) + SAMPLE_CASES


def _spec_of(case: Any) -> dict[str, Any]:
    if case.id.startswith("sample-"):
        stem = case.id.removeprefix("sample-")
        return table.load_sample(next(p for p in table.SAMPLES if p.stem == stem))["spec"]
    return case.spec()


class Prepared:
    """One case, parsed once: the Pydantic model and each rendering as CEL values."""

    def __init__(self, case: Any) -> None:
        self.case = case
        self.spec = _spec_of(case)
        self.model = InferenceServiceSpec.model_validate(self.spec)
        self.plain = {name: render(self.spec) for name, render in RENDERINGS.items()}
        self.cel = {name: celpy.json_to_cel(obj) for name, obj in self.plain.items()}


PREPARED = [Prepared(c) for c in ALL_CASES]


def test_every_rule_has_a_scope_the_renderings_have() -> None:
    for rule in CEL_RULES:
        for p in PREPARED:
            for name in RENDERINGS:
                assert isinstance(at_scope(p.plain[name], rule.scope), dict), (rule.scope, name, p.case.id)


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize("rule", CEL_RULES, ids=[f"{i}-{r.field}" for i, r in enumerate(CEL_RULES)])
def test_cel_agrees_with_python(rule: Rule, rendering: str) -> None:
    disagreements = []
    for p in PREPARED:
        expected = rule.holds(python_scope(p.model, rule.scope))
        got = cel_verdict(rule.cel, at_scope(p.cel[rendering], rule.scope))
        if got is not expected:
            shown = at_scope(p.plain[rendering], rule.scope)
            disagreements.append(f"{p.case.id}: CEL={got} Python={expected} on {shown!r}")
    assert not disagreements, f"{rule.cel!r}:\n" + "\n".join(disagreements)


SHOWING = [r for r in CEL_RULES if r.shown]


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize("rule", SHOWING, ids=[r.field for r in SHOWING])
def test_the_message_expression_says_what_the_operator_says(rule: Rule, rendering: str) -> None:
    """Where a rule fails, the API server's message (its messageExpression, under CEL) is the operator's
    and the CLI's (``message_with_values``), values included."""
    failing = [p for p in PREPARED if not rule.holds(python_scope(p.model, rule.scope))]
    assert failing, rule.cel
    for p in failing:
        said = cel_message(rule.message_expression(), at_scope(p.cel[rendering], rule.scope))
        assert said == rule.message_with_values(python_scope(p.model, rule.scope)), p.case.id
        assert said.startswith(rule.message + " (") and all(f"{f} " in said for f in rule.shown), said


def test_the_scaling_rules_show_their_values() -> None:
    """maxReplicas' default (10) is in the refusal of a minReplicas of 12, where the user never wrote it."""
    spec = table.mutate(table.base_spec(), {"scaling": {"minReplicas": 12}})
    model = InferenceServiceSpec.model_validate(spec)
    rule = next(r for r in SHOWING if r.field == "scaling.minReplicas")
    assert rule.message_with_values(model.scaling) == \
        "scaling.minReplicas must be <= scaling.maxReplicas (minReplicas 12, maxReplicas 10)"
    assert cel_message(rule.message_expression(), crd_defaulted(spec)["scaling"]) == \
        "scaling.minReplicas must be <= scaling.maxReplicas (minReplicas 12, maxReplicas 10)"


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_each_rule_both_passes_and_fails_under_cel(rendering: str) -> None:
    """Guards the agreement test against a table where some CEL rule is constant."""
    seen: dict[str, set[bool]] = {r.cel: set() for r in CEL_RULES}
    for p in PREPARED:
        for rule in CEL_RULES:
            seen[rule.cel].add(cel_verdict(rule.cel, at_scope(p.cel[rendering], rule.scope)))
    assert all(v == {True, False} for v in seen.values()), {k: v for k, v in seen.items() if v != {True, False}}


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_crd_defaults_match_pydantic_defaults(case: Any) -> None:
    """What the API server stores after defaulting equals what the operator parses (ignoring empty
    containers, which Pydantic fills from default_factory and the CRD leaves absent)."""
    spec = _spec_of(case)

    def prune(v: Any) -> Any:
        if isinstance(v, dict):
            v = {k: prune(x) for k, x in v.items()}
            return {k: x for k, x in v.items() if x not in ({}, [])}
        if isinstance(v, list):
            return [prune(x) for x in v]
        return v

    assert prune(crd_defaulted(spec)) == prune(dumped(spec))


def test_crd_defaulting_fills_nested_blocks_from_empty_spec() -> None:
    got = crd_defaulted({"model": {"storageUri": "s3://b/m", "backend": "python"}})
    assert got["scaling"]["minReplicas"] == 1
    assert got["scaling"]["scaleDown"] == {"maxStep": 1}  # stabilizationSeconds unset: learned
    assert got["runtime"]["gpus"] == 1
    assert "fallbackReplicas" not in got["scaling"]
    assert "batching" not in got
    assert "warmup" not in got["model"]


NAME_RULE = SCHEMA["properties"]["metadata"]["properties"]["name"]["x-kubernetes-validations"][0]["rule"]


def test_name_length_rule_sits_on_metadata_name_alone() -> None:
    # On the field itself, so the API server's error names metadata.name; the root has no rule.
    assert NAME_RULE == f"size(self) <= {NAME_MAX}"
    assert "x-kubernetes-validations" not in SCHEMA


@pytest.mark.parametrize("name", ["a", "linear", "a" * (NAME_MAX - 1), "a" * NAME_MAX, "a" * (NAME_MAX + 1),
                                  "a" * 63, "bert-classifier"])
def test_name_rule_agrees_with_validate_name(name: str) -> None:
    # Every name here is a valid DNS-1035 label, so only the length decides in Python too.
    cel_ok = cel_verdict(NAME_RULE, name)
    assert cel_ok is (len(name) <= NAME_MAX)
    assert cel_ok is (validate_name(name) == [])
