"""The CRD's structural schema and CEL rules, enforced by the real kube-apiserver.

The validation table of tests/support/spec_cases.py (cross-field rules and
type/range errors, each with the fields the operator names) is sent to the API
server as server-side dry-run creates: what the operator would report, the API
server refuses at admission, naming the same fields. tests/unit/test_crd_agrees_with_operator.py
checks the same table against a model of the API server; this is the API server.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from support import spec_cases as table
from support.cluster import sample
from tritonscale.api.rules import OPERATOR_ONLY_FIELDS
from tritonscale.api.spec import GROUP, PLURAL, VERSION

# The API server drops (or, with strict field validation, refuses) unknown fields
# before the schema runs: a 400 strict-decoding error, not a 422 with causes.
UNKNOWN_FIELD_CASES = {"unknown-scaling-field", "unknown-top-level-field", "unknown-tensor-field"}
# "some validation rules were not checked because the object was invalid" has no field.
NO_FIELD = "<nil>"


def _dry_run_create(api: kubernetes.client.ApiClient, namespace: str, spec: dict[str, Any],
                    name: str = "case") -> kubernetes.client.ApiException | None:
    body = sample(namespace)
    body["metadata"]["name"] = name
    body["spec"] = spec
    try:
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict")
    except kubernetes.client.ApiException as exc:
        return exc
    return None


def _fields(exc: kubernetes.client.ApiException) -> list[str]:
    causes = (json.loads(exc.body).get("details") or {}).get("causes") or []
    return sorted(c.get("field", "") for c in causes if c.get("field") != NO_FIELD)


@pytest.mark.parametrize("case", table.RULE_CASES, ids=[c.id for c in table.RULE_CASES])
def test_cel_rules_refuse_what_the_operator_refuses_naming_the_same_fields(api_client, module_namespace, case):
    refused = _dry_run_create(api_client, module_namespace, case.spec())
    # The operator alone refuses what its OPERATOR_ONLY rules name (the API server would not ratchet them).
    problems = [p for p in case.problems if p not in OPERATOR_ONLY_FIELDS]
    if not problems:
        assert refused is None, f"the API server refused a spec the operator accepts: {refused and refused.body}"
        return
    assert refused is not None, "the API server admitted a spec the operator refuses"
    assert refused.status == 422, refused.body
    assert _fields(refused) == sorted(problems), refused.body
    message = json.loads(refused.body)["message"]
    for expected in case.messages:
        assert expected in message, (expected, message)


@pytest.mark.parametrize("case", [c for c in table.TYPE_CASES if c.id not in UNKNOWN_FIELD_CASES],
                         ids=[c.id for c in table.TYPE_CASES if c.id not in UNKNOWN_FIELD_CASES])
def test_structural_schema_refuses_type_and_range_errors(api_client, module_namespace, case):
    refused = _dry_run_create(api_client, module_namespace, case.spec())
    assert refused is not None and refused.status == 422, refused and refused.body
    fields = _fields(refused)
    # A missing required field is reported on its parent object.
    for problem in case.problems:
        assert any(problem == f or problem.startswith(f + ".") or problem.startswith(f + "[") or f.startswith(problem)
                   for f in fields), (problem, fields)


@pytest.mark.parametrize("case", [c for c in table.TYPE_CASES if c.id in UNKNOWN_FIELD_CASES],
                         ids=sorted(UNKNOWN_FIELD_CASES))
def test_strict_field_validation_refuses_unknown_fields(api_client, module_namespace, case):
    refused = _dry_run_create(api_client, module_namespace, case.spec())
    assert refused is not None and refused.status == 400, refused and refused.body
    (problem,) = case.problems
    assert f'unknown field "{problem}"' in json.loads(refused.body)["message"]


@pytest.mark.parametrize("url", table.PROMETHEUS_URLS)
def test_the_api_server_takes_the_prometheus_urls_the_operator_takes(api_client, module_namespace, url):
    """`kubectl apply` took port 0 or 99999 and a URL ending in /api/v1, which the operator then refused in
    status (SpecValid=False): now the API server refuses exactly what the operator refuses, in its words."""
    from tritonscale.api.spec import prometheus_base_url

    try:
        prometheus_base_url(url)
        operator_problem = None
    except ValueError as exc:
        operator_problem = str(exc)
    refused = _dry_run_create(api_client, module_namespace,
                              table.mutate(table.base_spec(), {"scaling.prometheus": {"url": url}}))
    if operator_problem is None:
        assert refused is None, refused.body
        return
    assert refused is not None and refused.status == 422 and _fields(refused) == ["spec.scaling.prometheus.url"]
    # the same words, but for the base URL to give, which only the operator names
    words = operator_problem.split(": ")[0].split(", without")[0]
    assert words in json.loads(refused.body)["message"], (operator_problem, refused.body)


@pytest.mark.parametrize("path", table.SAMPLES, ids=[s.stem for s in table.SAMPLES])
def test_samples_are_admitted(api_client, module_namespace, path):
    body = table.load_sample(path)
    assert _dry_run_create(api_client, module_namespace, body["spec"], body["metadata"]["name"]) is None


def test_name_length_rule_names_metadata_name(api_client, module_namespace):
    ok = _dry_run_create(api_client, module_namespace, table.base_spec(), name="a" * 56)
    assert ok is None, ok and ok.body
    refused = _dry_run_create(api_client, module_namespace, table.base_spec(), name="a" * 57)
    assert refused is not None and refused.status == 422
    assert "metadata.name must be at most 56 characters" in json.loads(refused.body)["message"]
    assert _fields(refused) == ["metadata.name"], refused.body  # the error names the field


@pytest.mark.parametrize("name", ["linear.v2", "1model", "model-", "Model"])
def test_a_name_that_cannot_name_the_service_is_refused_naming_metadata_name(api_client, module_namespace, name):
    """The Service is named after the InferenceService, so the name must be a DNS-1035 label; the API
    server's own check on a custom object's name is only a DNS subdomain."""
    refused = _dry_run_create(api_client, module_namespace, table.base_spec(), name=name)
    assert refused is not None and refused.status == 422, name
    assert "must be a DNS-1035 label" in json.loads(refused.body)["message"]
    # ("model-" and "Model" are no DNS subdomain either: the API server's own cause comes first, same field)
    assert set(_fields(refused)) == {"metadata.name"}, refused.body


@pytest.mark.parametrize(("path", "value", "field", "message"), [
    ("model.storageUri", "http://x", "spec.model.storageUri", "must be s3://BUCKET/PATH, gs://BUCKET/PATH or pvc://"),
    ("model.storageUri", "pvc://models/../x", "spec.model.storageUri", "PATH may not contain '..' segments"),
    ("model.storageUri", "pvc://models/x\x00y", "spec.model.storageUri", "may not contain control characters"),
    ("model.name", "..", "spec.model.name", "must be letters, digits, '_', '-' and '.', and not dots alone"),
    ("scaling.prometheus", {"url": "prom:9090"}, "spec.scaling.prometheus.url", "must be an http:// or https:// URL"),
])
def test_a_malformed_string_is_refused_in_words_not_as_a_regex(api_client, module_namespace, path, value, field,
                                                              message):
    """The formats are CEL rules with the operator's own message: the API server's message for an
    OpenAPI pattern is the regex itself."""
    refused = _dry_run_create(api_client, module_namespace, table.mutate(table.base_spec(), {path: value}))
    assert refused is not None and refused.status == 422
    body = json.loads(refused.body)
    assert message in body["message"] and "should match" not in body["message"], body["message"]
    assert _fields(refused) == [field], refused.body
