"""Parse an InferenceService body into a spec, or a list of problems naming fields.

Pydantic checks types and ranges; the shared rules in ``rules.py`` check
cross-field constraints. Both report as :class:`Problem` so the operator
(one condition message) and the CLI (one line per problem) say the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tritonscale.api.rules import SCALING_RULES, SPEC_RULES
from tritonscale.api.spec import InferenceServiceSpec, ScalingSpec

# Children are named NAME and NAME-config; Services need a DNS-1035 label (<= 63).
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 56


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _pydantic_problems(err: ValidationError) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        out.append(Problem(_loc_to_path(e["loc"]), msg.removeprefix("Value error, ")))
    return out


def validate_spec(spec: Mapping[str, Any] | None) -> tuple[InferenceServiceSpec | None, list[Problem]]:
    if not isinstance(spec, Mapping):
        return None, [Problem("spec", "required object is missing")]
    try:
        parsed = InferenceServiceSpec.model_validate(dict(spec))
    except ValidationError as err:
        return None, _pydantic_problems(err)
    problems = [Problem(f"spec.{r.field}", r.message) for r in SPEC_RULES if not r.holds(parsed)]
    problems += [Problem(f"spec.{r.field}", r.message) for r in SCALING_RULES if not r.holds(parsed.scaling)]
    return (None, problems) if problems else (parsed, [])


def scaling_spec(spec: Mapping[str, Any] | None) -> ScalingSpec:
    """The ``scaling`` block of a raw spec, parsed on its own (unset fields take the model's
    defaults), or the defaults alone when it does not parse: the autoscaler paces its ticks
    with it even while another part of the spec is invalid (its ticks then change nothing)."""
    raw = spec.get("scaling") if isinstance(spec, Mapping) else None
    try:
        return ScalingSpec.model_validate(dict(raw) if isinstance(raw, Mapping) else {})
    except ValidationError:
        return ScalingSpec()


def validate_name(name: Any) -> list[Problem]:
    if not isinstance(name, str) or not name:
        return [Problem("metadata.name", "required")]
    if len(name) > NAME_MAX or not NAME_PATTERN.match(name):
        return [Problem("metadata.name", f"must be a DNS-1035 label of at most {NAME_MAX} characters "
                        "(lowercase letters, digits, '-'; starts with a letter), since it names the Service")]
    return []


def validate_body(body: Mapping[str, Any]) -> tuple[InferenceServiceSpec | None, list[Problem]]:
    """Validate a whole object: metadata.name plus spec."""
    name_problems = validate_name((body.get("metadata") or {}).get("name"))
    spec, problems = validate_spec(body.get("spec"))
    problems = name_problems + problems
    return (spec if not problems else None), problems
