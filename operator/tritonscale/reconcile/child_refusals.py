"""What the API server would refuse of a child the operator writes, said as problems of the spec: the
schema's and the client models' refusals, a server-side dry run's, the sizes it takes, each mapped back
to the spec field that made it (``child_problem``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pydantic
from kubernetes.client import (
    ApiException,
    V1ConfigMap,
    V1Deployment,
    V1PodDisruptionBudget,
    V1Service,
)

from tritonscale.api.validation import Problem, field_path
from tritonscale.kube.client import (
    Kube,
    api_status,
)

Write = tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]  # (desired, live, patch)


# Where a rendered child's field comes from in the InferenceService: the free-form runtime blocks are
# copied into the pod template, so a refusal of the child is the user's field, said in their terms.
_SPEC_FIELDS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(a), b) for a, b in (
    (r"^spec\.template\.spec\.(?:initContainers|containers)\[\d+\]\.env(.*)$", r"spec.runtime.env\1"),
    (r"^spec\.template\.spec\.containers\[0\]\.resources(.*)$", r"spec.runtime.resources\1"),
    (r"^spec\.template\.spec\.containers\[0\]\.image$", "spec.runtime.image"),
    (r"^spec\.template\.spec\.tolerations(.*)$", r"spec.runtime.tolerations\1"),
    (r"^spec\.template\.spec\.nodeSelector(.*)$", r"spec.runtime.nodeSelector\1"),
    (r"^spec\.template\.spec\.affinity(.*)$", r"spec.runtime.affinity\1"),
    (r"^spec\.template\.spec\.topologySpreadConstraints(.*)$", r"spec.runtime.topologySpreadConstraints\1"),
    (r"^spec\.template\.spec\.imagePullSecrets(.*)$", r"spec.runtime.imagePullSecrets\1"),
    (r"^spec\.template\.spec\.securityContext(.*)$", r"spec.runtime.securityContext\1"),
    # the API server names the template's labels and annotations without "metadata"
    (r"^spec\.template\.(?:metadata\.)?labels(.*)$", r"spec.runtime.podLabels\1"),
    (r"^spec\.template\.(?:metadata\.)?annotations(.*)$", r"spec.runtime.podAnnotations\1"),
))


def child_problem(ref: str, path: str, message: str) -> Problem:
    """A refusal of ``ref``'s field ``path``, named by the InferenceService's field it was rendered from
    when there is one (``spec.runtime.env[0].name (Deployment/x spec.template...)``)."""
    for pattern, spec_field in _SPEC_FIELDS:
        if pattern.match(path):
            return Problem(f"{pattern.sub(spec_field, path)} ({ref} {path})", message)
    return Problem(f"{ref} {path}", message)


def _once(problems: list[Problem]) -> list[Problem]:
    """One problem per user's field and message: runtime.env is in the init container too."""
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for p in problems:
        key = (p.field.split(" (", 1)[0], p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


# The kubernetes client's model of each child's kind: it checks a create's body against the API's
# schema before sending it (types, unknown keys), but sends a merge patch (an untyped body) as it is.
_MODELS: dict[str, type[pydantic.BaseModel]] = {
    "ConfigMap": V1ConfigMap, "Service": V1Service, "Deployment": V1Deployment,
    "PodDisruptionBudget": V1PodDisruptionBudget,
}


# The API server's limit on a ConfigMap's data, its keys and values together (apimachinery's
# RuntimeObjectSize): one over it was refused as `[]: Too long: may not be more than 1048576 bytes`.
CONFIGMAP_MAX_BYTES = 1024 * 1024
# What etcd stores in one request by default (--max-request-bytes, 1.5 MiB; managed clusters keep it): a
# Deployment over it passed every dry run (a dry run never reaches etcd), and its write failed with a 500,
# "etcdserver: request is too large", after the ConfigMap was written -- on every pass, while SpecValid said
# True (a runtime.env of 0.9 MB, which the Deployment holds twice: auditG, session 84). Measured as compact
# JSON, a little larger than the protobuf etcd keeps, so a child within a few percent of it is refused too.
OBJECT_MAX_BYTES = 1536 * 1024


def child_refusals(child: dict[str, Any], spec: Any = None) -> list[Problem]:
    """What would be refused of a rendered child before any request, named by spec field: the kubernetes
    client's model of its kind (types, unknown keys: an env value that is a number, an env entry without
    a name), a ConfigMap larger than the API server holds and any child larger than etcd stores, named by
    the part of ``spec`` (the InferenceService's spec as written) that holds most of it. The one check of
    `tritonscale render` and the operator's dry run: render had passed what the operator then refused."""
    kind, cname = child["kind"], child["metadata"]["name"]
    try:
        _MODELS[kind].model_validate(child)
    except pydantic.ValidationError as exc:
        return client_problems(f"{kind}/{cname}", exc)
    if kind == "ConfigMap":
        size = sum(len(str(k).encode()) + len(str(v).encode())
                   for key in ("data", "binaryData") for k, v in (child.get(key) or {}).items())
        if size > CONFIGMAP_MAX_BYTES:
            return [Problem(_bulk(spec, "spec"), f"the rendered config.pbtxt is {size} bytes, more than the "
                            f"{CONFIGMAP_MAX_BYTES} bytes a ConfigMap holds (ConfigMap/{cname})")]
    size = len(json.dumps(child, separators=(",", ":"), default=str).encode())
    if size > OBJECT_MAX_BYTES:
        return [Problem(_bulk(spec, "spec"), f"the rendered {kind}/{cname} is {size} bytes, more than the "
                        f"{OBJECT_MAX_BYTES} bytes etcd stores in one object by default (--max-request-bytes)")]
    return []


def children_refusals(children: list[dict[str, Any]], spec: Any = None) -> list[Problem]:
    """``child_refusals`` of every child, once per spec field and message (runtime.env is in the init
    container too)."""
    return _once([p for child in children for p in child_refusals(child, spec)])


def _bulk(value: Any, path: str) -> str:
    """The field of ``value`` (a spec as written) that holds most of its size: down each map's largest
    field while that holds more than half of its parent."""
    while isinstance(value, dict) and value:
        sizes = {k: len(json.dumps(v, default=str)) for k, v in value.items()}
        key = max(sizes, key=lambda k: sizes[k])
        if sizes[key] * 2 <= len(json.dumps(value, default=str)):
            break
        value, path = value[key], f"{path}.{key}"
    return path


def holds_other_content(child: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Whether ``live`` is an immutable ConfigMap whose content is not ``child``'s: put there by hand
    (``kubectl replace --force``, or deleted and created again, while the ownerReference stayed). Its name
    promises the config of its hash (``configmap_name``), and no patch can put the data back: the API
    server refuses any change to an immutable ConfigMap's data. It is deleted and created again."""
    return child["kind"] == "ConfigMap" and live is not None and live.get("immutable") is True and any(
        (live.get(key) or {}) != (child.get(key) or {}) for key in ("data", "binaryData"))


def dry_run_refusals(kube: Kube, namespace: str, writes: list[Write],
                     failed: Callable[[str, BaseException], None] | None = None,
                     spec: Any = None) -> tuple[list[Problem], list[Problem]]:
    """Each create or patch, tried as a server-side dry run: the problems of those the API
    server refuses as invalid (400, 422), one per field it names, and the warnings it gives with the
    others (``child_warning``). Other errors propagate, after ``failed`` is told which child's dry run
    met them (a ResourceQuota's or RBAC's 403 is no fault of the spec, and is said as a failed write).
    A patch's whole child is first checked as a create's body is: an edit that put a number in
    ``runtime.env[].value`` was refused by the API server with the Deployment echoed whole and no
    field named (a condition too long to write), and an unknown key (a typo in a toleration) was
    dropped without a word, where the same spec on a new InferenceService was refused, by field
    (``child_refusals``; ``spec``, the spec as written, names what makes a ConfigMap too large)."""
    problems: list[Problem] = []
    warned: list[Problem] = []
    for child, live, patch in writes:
        kind, cname = child["kind"], child["metadata"]["name"]
        if live is None or patch is not None:
            if refusals := child_refusals(child, spec):
                problems.extend(refusals)
                continue
        if holds_other_content(child, live):
            continue  # deleted and created again (``write_children``): a dry-run create would find the name taken
        try:
            if live is None:
                _, warnings = kube.create_warned(child, dry_run=True)
            elif patch is not None:
                _, warnings = kube.patch_warned(kind, namespace, cname, patch, dry_run=True)
            else:
                warnings = []
        except ApiException as exc:
            if exc.status not in (400, 422):
                if failed is not None:
                    failed(f"{kind}/{cname}", exc)
                raise
            problems.extend(api_problems(f"{kind}/{cname}", exc))
        else:
            warned.extend(child_warning(f"{kind}/{cname}", w) for w in warnings)
    return _once(problems), _once(warned)


def child_warning(ref: str, text: str) -> Problem:
    """A warning the API server gave of ``ref`` (``spec.template.spec.containers[0].env[1]: hides previous
    definition of "A"``), named by the spec field it came from where it names a field (``child_problem``)."""
    path, sep, message = text.partition(": ")
    if sep and "." in path and re.fullmatch(r"[A-Za-z][\w.\[\]/-]*", path):  # a field path, not a word
        return child_problem(ref, path, message)
    return Problem(ref, text)


def client_problems(ref: str, exc: pydantic.ValidationError) -> list[Problem]:
    """A body's refusal by the kubernetes client's model of its kind (the one its calls check a create's
    body with): one problem per error, its location as a field path of the object."""
    out = []
    for err in exc.errors():
        out.append(child_problem(ref, field_path(list(err.get("loc", ())), root=""), str(err.get("msg") or "invalid")))
    return out or [Problem(ref, str(exc))]


def api_problems(ref: str, exc: ApiException) -> list[Problem]:
    """The API server's refusal as problems: one per cause it gives (field and message), else its
    message."""
    body = api_status(exc)
    details = body.get("details")
    causes = [c for c in ((details if isinstance(details, dict) else {}).get("causes") or []) if isinstance(c, dict)]
    named = [child_problem(ref, str(c.get("field")), without_echo(str(c.get("message") or c.get("reason")
                                                                       or "invalid")))
             for c in causes if c.get("field") and c.get("field") != "<nil>"]
    message = without_echo(str(body.get("message") or exc.reason or f"HTTP {exc.status}"))
    # A body the API server cannot decode names no cause, but Go's JSON decoder names the field:
    # "... cannot unmarshal number 1e20 into Go struct field PodSecurityContext.spec.template.spec.
    # securityContext.runAsUser of type int64" (a runAsUser past int64, from runtime.securityContext).
    decoded = _GO_FIELD.search(message)
    if not named and decoded:
        return [child_problem(ref, decoded.group(1), message)]
    return named or [Problem(ref, message)]


_GO_FIELD = re.compile(r"into Go struct field \w+\.([A-Za-z][\w.\[\]]*) of type")


# A JSON object of at least this many characters inside an API server's message: the object echoed
# back (a patch the server cannot decode is refused as `patch: Invalid value: "<the whole object>":
# json: cannot unmarshal ...`), which buries the cause and, in a condition, can pass the CRD's length
# limit for its message.
_ECHO = re.compile(r"\{.{200,}\}", re.DOTALL)


def without_echo(message: str) -> str:
    return _ECHO.sub("{...}", message)
