"""reconcile/child_refusals.py: the API server's refusal of a child, or its warning, is named by the spec
field it came from (spec.runtime.env[0].name, not only the Deployment's path), said once, without the
object it echoes, and whatever the body the API server (or a proxy) sends."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException

from tritonscale.kube.client import describe_api_error


def _refusal(body: str) -> ApiException:
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = body
    return exc


def test_a_refusal_names_the_fields_it_gives_and_survives_any_body() -> None:
    """``api_problems`` (the reconciler's ChildRejected) reads the Status the API server sends; a
    body that is no Status (a proxy's page, JSON that is no object) is the reason line, not a crash."""
    from tritonscale.reconcile.child_refusals import api_problems

    status = json.dumps({"kind": "Status", "message": "Deployment.apps \"x\" is invalid", "details": {"causes": [
        {"field": "spec.template.spec.containers[0].env[0].name", "message": "Required value"}]}})
    assert [(p.field, p.message) for p in api_problems("Deployment x", _refusal(status))] == [
        ("spec.runtime.env[0].name (Deployment x spec.template.spec.containers[0].env[0].name)", "Required value")]
    for body in ("[1, 2]", "<html>bad gateway</html>", "", json.dumps({"details": "none"})):
        assert [(p.field, p.message) for p in api_problems("Deployment x", _refusal(body))] == [
            ("Deployment x", "Unprocessable Entity")], body
        assert describe_api_error(_refusal(body)) == "422 Unprocessable Entity"


def test_a_refusal_does_not_echo_the_object() -> None:
    """A patch the API server cannot decode is refused with the object quoted whole (the real API
    server's words, seen by tests/integration/test_operator_spec_checks.py before the operator checked a
    patch's child itself): the condition was the Deployment's JSON (15 KB for a small spec, past the
    CRD's 32 KiB limit for a larger one), with the cause at its end."""
    from tritonscale.reconcile.child_refusals import api_problems

    echo = json.dumps({"spec": {"template": {"spec": {"env": [{"name": f"V{i}", "value": 4} for i in range(500)]}}}})
    cause = (f"Invalid value: {json.dumps(echo)}: json: cannot unmarshal number into Go struct field "
             f"EnvVar.spec.template.spec.containers.env.value of type string")
    for status in ({"kind": "Status", "message": f"Deployment.apps \"x\" is invalid: patch: {cause}",
                    "details": {"causes": [{"field": "patch", "message": cause}]}},
                   {"kind": "Status", "message": f"Deployment.apps \"x\" is invalid: patch: {cause}"}):
        (problem,) = api_problems("Deployment/x", _refusal(json.dumps(status)))
        assert problem.message.endswith('Invalid value: "{...}": json: cannot unmarshal number into Go struct '
                                        'field EnvVar.spec.template.spec.containers.env.value of type string')
        assert len(problem.message) < 300, problem.message


@pytest.mark.parametrize(("path", "field"), [
    ("spec.template.spec.containers[0].env[0].name", "spec.runtime.env[0].name (Deployment/x "
                                                     "spec.template.spec.containers[0].env[0].name)"),
    ("spec.template.spec.initContainers[0].env[2].valueFrom", "spec.runtime.env[2].valueFrom (Deployment/x "
                                                              "spec.template.spec.initContainers[0].env[2].valueFrom)"),
    ("spec.template.spec.containers[0].resources.limits[cpu]",
     "spec.runtime.resources.limits[cpu] (Deployment/x spec.template.spec.containers[0].resources.limits[cpu])"),
    ("spec.template.spec.tolerations[1].operator",
     "spec.runtime.tolerations[1].operator (Deployment/x spec.template.spec.tolerations[1].operator)"),
    ("spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
     "spec.runtime.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms "
     "(Deployment/x spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     "nodeSelectorTerms)"),
    ("spec.template.spec.topologySpreadConstraints[0].maxSkew", "spec.runtime.topologySpreadConstraints[0].maxSkew "
                                                               "(Deployment/x spec.template.spec."
                                                               "topologySpreadConstraints[0].maxSkew)"),
    # the pod template's labels and annotations, as the API server names them (no "metadata")
    ("spec.template.labels", "spec.runtime.podLabels (Deployment/x spec.template.labels)"),
    ("spec.template.annotations", "spec.runtime.podAnnotations (Deployment/x spec.template.annotations)"),
    ("spec.template.metadata.labels", "spec.runtime.podLabels (Deployment/x spec.template.metadata.labels)"),
    # a field the spec does not copy as it is stays the child's
    ("spec.template.spec.containers[0].args[3]", "Deployment/x spec.template.spec.containers[0].args[3]"),
    ("metadata.annotations", "Deployment/x metadata.annotations"),
])
def test_a_refused_child_field_is_named_by_the_spec_field_it_came_from(path: str, field: str) -> None:
    from tritonscale.reconcile.child_refusals import child_problem

    assert child_problem("Deployment/x", path, "invalid").field == field


def test_the_same_refusal_in_two_containers_is_said_once() -> None:
    from tritonscale.api.validation import Problem
    from tritonscale.reconcile.child_refusals import _once, child_problem

    a = child_problem("Deployment/x", "spec.template.spec.containers[0].env[0].name", "Required value")
    b = child_problem("Deployment/x", "spec.template.spec.initContainers[0].env[0].name", "Required value")
    c = child_problem("Deployment/x", "spec.template.spec.initContainers[0].env[0].name", "another message")
    assert _once([a, b, c, Problem("ConfigMap/y data", "too long")]) == [a, c, Problem("ConfigMap/y data", "too long")]


@pytest.mark.parametrize(("header", "texts"), [
    (None, []),
    ('299 - "spec.template.spec.containers[0].env[1]: hides previous definition of \\"A\\""',
     ['spec.template.spec.containers[0].env[1]: hides previous definition of "A"']),
    # several Warning headers, joined by urllib3
    ('299 - "a, b: c", 299 - "d \\\\ e"', ["a, b: c", "d \\ e"]),
    ("not a warning", []),
])
def test_the_api_servers_warnings_are_read_from_their_headers(header: str | None, texts: list[str]) -> None:
    from tritonscale.kube.client import warnings_of

    assert warnings_of({} if header is None else {"Warning": header}) == texts


@pytest.mark.parametrize(("text", "field", "message"), [
    ('spec.template.spec.containers[0].env[1]: hides previous definition of "A"',
     "spec.runtime.env[1] (Deployment/x spec.template.spec.containers[0].env[1])", 'hides previous definition of "A"'),
    ("spec.template.spec.containers[0].resources.requests[memory]: fractional byte value \"500m\" is invalid",
     "spec.runtime.resources.requests[memory] (Deployment/x spec.template.spec.containers[0].resources.requests"
     "[memory])", 'fractional byte value "500m" is invalid'),
    # a warning that names no field is the child's, whole
    ("metadata.name: this is long: really", "Deployment/x metadata.name", "this is long: really"),
    ("deprecated: use something else", "Deployment/x", "deprecated: use something else"),
])
def test_a_warning_is_named_by_the_spec_field_it_came_from(text: str, field: str, message: str) -> None:
    from tritonscale.reconcile.child_refusals import child_warning

    warning = child_warning("Deployment/x", text)
    assert (warning.field, warning.message) == (field, message)


def test_a_body_the_api_server_cannot_decode_is_named_by_the_field_go_names() -> None:
    """A runAsUser past int64 (runtime.securityContext is free-form) is refused with no cause, only Go's
    decoder's message; the field in it is the user's."""
    import json

    from kubernetes.client import ApiException

    from tritonscale.reconcile.child_refusals import api_problems

    exc = ApiException(status=400, reason="Bad Request")
    exc.body = json.dumps({"kind": "Status", "message": 'Deployment in version "v1" cannot be handled as a Deployment: '
                           "json: cannot unmarshal number 1e20 into Go struct field PodSecurityContext.spec.template."
                           "spec.securityContext.runAsUser of type int64"})
    [problem] = api_problems("Deployment/x", exc)
    assert problem.field == ("spec.runtime.securityContext.runAsUser (Deployment/x "
                             "spec.template.spec.securityContext.runAsUser)"), problem.field
    assert "cannot unmarshal number 1e20" in problem.message
