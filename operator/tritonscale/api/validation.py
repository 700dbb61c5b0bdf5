"""Parse an InferenceService body into a spec, or a list of problems naming fields.

Pydantic checks types and ranges; the shared rules in ``rules.py`` check
cross-field constraints. Both report as :class:`Problem` so the operator
(one condition message) and the CLI (one line per problem) say the same thing.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from tritonscale.api.names import DNS1123_LABEL
from tritonscale.api.rules import SCALING_RULES, SPEC_RULES
from tritonscale.api.spec import InferenceServiceSpec, ScalingSpec

# Children are named NAME and NAME-config-HASH; Services need a DNS-1035 label (<= 63).
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 56


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def field_path(loc: Sequence[Any], root: str = "spec") -> str:
    """A pydantic error's location as a field path under ``root``: ``spec.model.inputs[0].name``
    (``root`` empty: ``model.inputs[0].name``)."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path.lstrip(".")


# NVIDIA's device plugin's GPU resources: whole or MIG-single GPUs, renamed time-sliced ones, MIG profiles.
_NVIDIA_GPU = re.compile(r"^nvidia\.com/(gpu(\..+)?|mig-.+)$")


def _gpu_resource_problems(spec: InferenceServiceSpec) -> list[Problem]:
    """A positive ``runtime.gpus`` renders the container's ``runtime.gpuResource`` limit; the same
    resource in the free-form ``runtime.resources`` must then agree with it, and another of NVIDIA's
    GPU resources beside it (a MIG profile under ``nvidia.com/gpu``) is a second device, which is
    what a user who meant the MIG slice is told to put in ``gpuResource``. Otherwise the rendered
    limit silently replaced the user's, and a request left different was refused by the API server
    (extended resources need request == limit) with a message about a limit the user never wrote.
    With ``gpus: 0`` nothing is rendered and the user's resources stand as written (the sandbox asks
    a GPU per replica for its CPU model, to be scheduled as a GPU service is). Checked here, not in
    the CRD: CEL cannot see inside a free-form block."""
    out: list[Problem] = []
    if spec.runtime.gpus == 0:
        return out
    gpu = spec.runtime.gpu_resource
    for kind in ("limits", "requests"):
        block = spec.runtime.resources.get(kind)
        if not isinstance(block, Mapping):
            continue
        for other in sorted(k for k in block if isinstance(k, str) and k != gpu and _NVIDIA_GPU.match(k)):
            out.append(Problem(f"spec.runtime.resources.{kind}.{other}",
                               f"a second GPU resource beside runtime.gpuResource ({gpu}), which runtime.gpus "
                               f"({spec.runtime.gpus}) sets: for {other} alone set runtime.gpuResource: {other}"))
        if gpu not in block:
            continue
        value = str(block[gpu])
        if value != str(spec.runtime.gpus):
            out.append(Problem(f"spec.runtime.resources.{kind}.{gpu}",
                               f"{value} disagrees with runtime.gpus ({spec.runtime.gpus}), which sets the "
                               f"{gpu} limit: set the count in runtime.gpus only"))
    return out


def _json_type(value: Any) -> str:
    """The JSON name of a parsed YAML/JSON value's type, as the API server's messages use them."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model whose fields sit at ``loc`` (aliases and list indices) under ``model``; None where
    ``loc`` leaves the models (a free-form map, a scalar)."""
    for part in loc:
        if isinstance(part, int):
            continue  # the list's item type was taken with the field
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        found = _nested_model(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model in a field's type: itself, or inside Optional[...], list[...] or tuple[...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def unknown_field_message(loc: Sequence[Any], root: type[BaseModel] = InferenceServiceSpec) -> str:
    """"unknown field", and the field of that object it most likely misspells, if one is close
    (``maxBatchSzie``: did you mean maxBatchSize?) -- with the rest of the path right, a typo is the
    usual cause. Pydantic lists what the model accepts; difflib picks the nearest by similarity."""
    model = _model_at(root, loc[:-1])
    if model is None or not isinstance(loc[-1], str):
        return "unknown field"
    names = [f.alias or n for n, f in model.model_fields.items()]
    close = difflib.get_close_matches(loc[-1], names, n=1, cutoff=0.6) or \
        [n for n in names if n.lower() == loc[-1].lower()]
    return f"unknown field (did you mean {close[0]}?)" if close else "unknown field"


def _pydantic_problems(err: ValidationError) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = unknown_field_message(e["loc"])
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "string_type" and isinstance(e.get("input"), bool):
            msg = (f"{msg}, not the boolean {str(e['input']).lower()}: YAML reads an unquoted y, n, yes, no, on or "
                   "off as a boolean, as kubectl does; quote it")
        out.append(Problem(field_path(e["loc"]), msg.removeprefix("Value error, ")))
    return out


def as_stored(value: Any) -> Any:
    """A spec as the API server stores it from a file: fields set to null dropped (it prunes them, and
    defaults fill them in) and whole-number floats as integers (kubectl's YAML-to-JSON writes 16.0 as
    16, which an integer field takes). ``tritonscale render`` then refuses what ``kubectl apply`` does,
    no more; the operator reads stored objects, which this leaves as they are."""
    if isinstance(value, Mapping):
        return {k: as_stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_stored(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def validate_spec(spec: Mapping[str, Any] | None) -> tuple[InferenceServiceSpec | None, list[Problem]]:
    if spec is None:
        return None, [Problem("spec", "required object is missing")]
    if not isinstance(spec, Mapping):
        return None, [Problem("spec", f"must be an object, not {_json_type(spec)}")]
    try:
        parsed = InferenceServiceSpec.model_validate(as_stored(spec))
    except ValidationError as err:
        return None, _pydantic_problems(err)
    problems = [Problem(f"spec.{r.field}", r.message_with_values(parsed)) for r in SPEC_RULES if not r.holds(parsed)]
    problems += _gpu_resource_problems(parsed)
    problems += [Problem(f"spec.{r.field}", r.message_with_values(parsed.scaling))
                 for r in SCALING_RULES if not r.holds(parsed.scaling)]
    return (None, problems) if problems else (parsed, [])


def scaling_spec(spec: Mapping[str, Any] | None) -> ScalingSpec:
    """The ``scaling`` block of a raw spec, parsed on its own (unset fields take the model's
    defaults), or the defaults alone when it does not parse: the autoscaler paces its ticks
    with it even while another part of the spec is invalid (its ticks then change nothing)."""
    try:
        raw = spec.get("scaling") if isinstance(spec, Mapping) else None
    except TypeError:  # Kopf's ``spec`` is a view, a Mapping whatever the spec is: "hello" raises here
        raw = None
    try:
        return ScalingSpec.model_validate(dict(raw) if isinstance(raw, Mapping) else {})
    except ValidationError:
        return ScalingSpec()


def validate_name(name: Any) -> list[Problem]:
    if name is None or name == "":
        return [Problem("metadata.name", "required")]
    if not isinstance(name, str):
        return [Problem("metadata.name", f"must be a string, not {type(name).__name__}")]
    if len(name) > NAME_MAX or not NAME_PATTERN.fullmatch(name):
        return [Problem("metadata.name", f"must be a DNS-1035 label of at most {NAME_MAX} characters "
                        "(lowercase letters, digits, '-'; starts with a letter), since it names the Service")]
    return []


# A namespace is a DNS-1123 label (Kubernetes' IsDNS1123Label).
NAMESPACE_PATTERN = DNS1123_LABEL


def validate_namespace(namespace: Any) -> list[Problem]:
    """metadata.namespace, where a file gives one (the API server fills it in otherwise)."""
    if namespace is None:
        return []
    if not isinstance(namespace, str) or len(namespace) > 63 or not NAMESPACE_PATTERN.fullmatch(namespace):
        return [Problem("metadata.namespace", "must be a DNS-1123 label of at most 63 characters (lowercase "
                        "letters, digits, '-'; starts and ends with a letter or digit)")]
    return []


def validate_body(body: Mapping[str, Any]) -> tuple[InferenceServiceSpec | None, list[Problem]]:
    """Validate a whole object: metadata.name and namespace, plus spec."""
    meta = body.get("metadata") or {}
    if isinstance(meta, Mapping):
        name_problems = validate_name(meta.get("name")) + validate_namespace(meta.get("namespace"))
    else:
        name_problems = [Problem("metadata", f"must be a mapping, not {type(meta).__name__}")]
    spec, problems = validate_spec(body.get("spec"))
    problems = name_problems + problems
    return (spec if not problems else None), problems
