"""api/validation.py: one table of spec mutations -> the field paths the user is told about.

The table is ``support/spec_cases.py``: ``RULE_CASES`` pass Pydantic and exercise the
cross-field rules of ``rules.py``; ``test_rules_cel.py`` evaluates the CRD's CEL twins
against the very same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.spec_cases import RULE_CASES, SAMPLES, TYPE_CASES, Case, base_spec, load_sample, mutate
from tritonscale.api.rules import ALL_RULES, SCALING_RULES, SPEC_RULES, Rule
from tritonscale.api.spec import DEFAULT_TRITON_IMAGE, InferenceServiceSpec
from tritonscale.api.validation import (
    NAME_MAX,
    Problem,
    unknown_field_message,
    validate_body,
    validate_name,
    validate_spec,
)


def _ids(cases: tuple[Case, ...]) -> list[str]:
    return [c.id for c in cases]


def test_case_ids_are_unique() -> None:
    ids = _ids(RULE_CASES) + _ids(TYPE_CASES)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", RULE_CASES + TYPE_CASES, ids=_ids(RULE_CASES + TYPE_CASES))
def test_validate_spec_reports_fields(case: Case) -> None:
    parsed, problems = validate_spec(case.spec())
    assert [p.field for p in problems] == list(case.problems), [str(p) for p in problems]
    if case.problems:
        assert parsed is None, "an invalid spec must not come back parsed"
    else:
        assert isinstance(parsed, InferenceServiceSpec)
    text = "\n".join(str(p) for p in problems)
    for fragment in case.messages:
        assert fragment in text, text
    for p in problems:
        assert str(p) == f"{p.field}: {p.message}"
        assert p.message and "Value error" not in p.message and "\n" not in p.message


@pytest.mark.parametrize("case", RULE_CASES, ids=_ids(RULE_CASES))
def test_rule_cases_pass_pydantic(case: Case) -> None:
    """The cross-field table must reach rules.py: Pydantic alone accepts every spec in it."""
    InferenceServiceSpec.model_validate(case.spec())


def _rule_verdicts(spec: InferenceServiceSpec) -> dict[Rule, bool]:
    return {**{r: r.holds(spec) for r in SPEC_RULES}, **{r: r.holds(spec.scaling) for r in SCALING_RULES}}


def test_table_breaks_and_satisfies_every_rule() -> None:
    """Each rule is violated by some case and holds in some other (so no rule goes untested)."""
    broken: set[Rule] = set()
    kept: set[Rule] = set()
    for case in RULE_CASES:
        for rule, ok in _rule_verdicts(InferenceServiceSpec.model_validate(case.spec())).items():
            (kept if ok else broken).add(rule)
    assert broken == set(ALL_RULES), [r.cel for r in ALL_RULES if r not in broken]
    assert kept == set(ALL_RULES)


FAILING_RULE_CASES = tuple(c for c in RULE_CASES if c.problems)


@pytest.mark.parametrize("case", FAILING_RULE_CASES, ids=_ids(FAILING_RULE_CASES))
def test_problem_messages_are_the_rule_messages(case: Case) -> None:
    parsed = InferenceServiceSpec.model_validate(case.spec())
    failing = [r for r, ok in _rule_verdicts(parsed).items() if not ok]
    _, problems = validate_spec(case.spec())
    assert problems == [Problem(f"spec.{r.field}", r.message_with_values(parsed if not r.scope else parsed.scaling))
                        for r in failing]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_samples_are_valid(sample: Path) -> None:
    doc = load_sample(sample)
    parsed, problems = validate_body(doc)
    assert problems == []
    assert isinstance(parsed, InferenceServiceSpec)
    assert parsed.model.storage_uri == doc["spec"]["model"]["storageUri"]
    assert parsed.scaling.max_replicas == doc["spec"]["scaling"]["maxReplicas"]


def test_sample_table_is_not_empty() -> None:
    assert {s.stem for s in SAMPLES} >= {"python-cpu", "onnx-image-classifier", "pytorch-warmup"}


MINIMAL = {"model": {"storageUri": "s3://bucket/model", "backend": "onnxruntime"}}


@pytest.mark.parametrize(("attr_path", "expected"), [
    ("scaling.min_replicas", 1),
    ("scaling.max_replicas", 10),
    ("scaling.interval_seconds", 15),
    ("scaling.window_seconds", 60),
    ("scaling.tolerance", 0.1),
    ("scaling.scale_down.stabilization_seconds", None),
    ("scaling.scale_down.max_step", 1),
    ("scaling.scale_up.stabilization_seconds", 0),
    ("scaling.scale_up.max_step", 4),
    ("scaling.warm_buffer", 0),
    ("scaling.failure_threshold", 3),
    ("scaling.fallback_replicas", None),
    ("scaling.target_p95_milliseconds", None),
    ("scaling.panic_threshold", 2.0),
    ("scaling.floor", 1),
    ("runtime.gpus", 1),
    ("runtime.image", DEFAULT_TRITON_IMAGE),
    ("runtime.response_cache_bytes", 256 * 1024 * 1024),
    ("model.max_batch_size", 0),
    ("model.instance_count", 1),
    ("model.precision", "fp32"),
    ("model.response_cache", False),
    ("model.name", None),
    ("model.warmup", None),
    ("batching", None),
])
def test_defaults(attr_path: str, expected: Any) -> None:
    parsed, problems = validate_spec(MINIMAL)
    assert problems == []
    value: Any = parsed
    for part in attr_path.split("."):
        value = getattr(value, part)
    assert value == expected


def test_empty_batching_block_defaults_to_enabled() -> None:
    parsed, problems = validate_spec(mutate(MINIMAL, {"model.maxBatchSize": 8, "batching": {}}))
    assert problems == []
    b = parsed.batching
    assert (b.enabled, b.max_queue_delay_microseconds, b.preferred_batch_sizes, b.timeout_action) == (
        True, 0, [], "REJECT")


@pytest.mark.parametrize(("spec", "problem"), [
    (None, "spec"),
    ("not-a-mapping", "spec"),
    ([{"model": {}}], "spec"),
])
def test_spec_must_be_an_object(spec: Any, problem: str) -> None:
    parsed, problems = validate_spec(spec)
    assert parsed is None
    assert [p.field for p in problems] == [problem]


@pytest.mark.parametrize(("name", "ok"), [
    ("linear", True),
    ("a", True),
    ("a" * NAME_MAX, True),
    ("a" * (NAME_MAX + 1), False),
    ("a" * 63, False),
    ("Linear", False),
    ("LINEAR", False),
    ("1linear", False),
    ("linear-", False),
    ("-linear", False),
    ("lin.ear", False),
    ("lin_ear", False),
    ("bert-classifier-2", True),
    ("", False),
    (None, False),
    (42, False),
])
def test_metadata_name_rules(name: Any, ok: bool) -> None:
    problems = validate_name(name)
    assert (problems == []) is ok, problems
    assert all(p.field == "metadata.name" for p in problems)
    assert len(problems) <= 1


@pytest.mark.parametrize(("name", "spec_changes", "fields"), [
    ("a" * (NAME_MAX + 1), {}, ["metadata.name"]),
    ("Linear", {}, ["metadata.name"]),
    ("Linear", {"scaling.minReplicas": 2, "scaling.maxReplicas": 1},
     ["metadata.name", "spec.scaling.minReplicas"]),
    ("linear", {"model.backend": "jax"}, ["spec.model.backend"]),
    ("linear", {}, []),
])
def test_validate_body_reports_name_and_spec(name: str, spec_changes: dict[str, Any], fields: list[str]) -> None:
    doc = load_sample()
    doc["metadata"]["name"] = name
    doc["spec"] = mutate(doc["spec"], spec_changes)
    parsed, problems = validate_body(doc)
    assert [p.field for p in problems] == fields
    assert (parsed is None) == bool(fields), "a body with any problem must not come back parsed"


@pytest.mark.parametrize(("namespace", "ok"), [
    (None, True), ("default", True), ("team-a", True), ("a" * 63, True),
    ("a" * 64, False), ("Bad Namespace!", False), ("", False), (5, False), ("-a", False), ("a.b", False),
])
def test_metadata_namespace_rules(namespace: Any, ok: bool) -> None:
    doc = load_sample()
    doc["metadata"]["namespace"] = namespace
    _, problems = validate_body(doc)
    assert [p.field for p in problems] == ([] if ok else ["metadata.namespace"])


def test_a_name_that_is_no_string_says_so() -> None:
    assert [str(p) for p in validate_name(5)] == ["metadata.name: must be a string, not int"]


def test_validate_body_without_metadata_or_spec() -> None:
    parsed, problems = validate_body({})
    assert parsed is None
    assert [p.field for p in problems] == ["metadata.name", "spec"]



def test_validate_body_with_metadata_not_a_mapping() -> None:
    """A caller's body with ``metadata: "x"`` is a problem named metadata, not an AttributeError."""
    parsed, problems = validate_body({"metadata": "linear", "spec": load_sample()["spec"]})
    assert parsed is None
    assert [(p.field, p.message) for p in problems] == [("metadata", "must be a mapping, not str")]


@pytest.mark.parametrize(("resources", "message"), [
    ({"limits": {"cpu": "lots"}}, "limits.cpu: 'lots' is not a Kubernetes quantity"),
    ({"requests": {"memory": "1.5 Gi"}}, "requests.memory: '1.5 Gi' is not a Kubernetes quantity"),
    ({"requests": ["cpu"]}, "requests must be a map of resource name to quantity"),
    # `render` passed these, and the API server then refused the Deployment
    ({"requests": {"cpu": "-1"}}, "requests.cpu: '-1' must be at least 0"),
    ({"limits": {"memory": -5}}, "limits.memory: -5 must be at least 0"),
    ({"limits": {"cpu": "-0.5m"}}, "limits.cpu: '-0.5m' must be at least 0"),
    ({"limits": {"cpu": "2\n"}}, "limits.cpu: '2\\n' is not a Kubernetes quantity"),  # `$` matched before it
])
def test_resource_quantities_are_checked_by_the_operator(resources: dict[str, Any], message: str) -> None:
    """runtime.resources is free-form in the CRD (Kubernetes' own ResourceRequirements): the operator
    names a quantity the API server would refuse in the Deployment, before writing anything."""
    spec = mutate(load_sample()["spec"], {"runtime.resources": resources})
    parsed, problems = validate_spec(spec)
    assert parsed is None and [p.field for p in problems] == ["spec.runtime.resources"]
    assert message in problems[0].message, problems


def test_resource_quantities_in_any_valid_form_pass() -> None:
    spec = mutate(load_sample()["spec"], {"runtime.gpus": 1, "runtime.resources": {
        "limits": {"cpu": "1500m", "memory": "1.5Gi", "nvidia.com/gpu": 1}, "requests": {"cpu": 0.5, "memory": "0"}}})
    parsed, problems = validate_spec(spec)
    assert problems == [] and parsed is not None


@pytest.mark.parametrize(("spec", "message"), [
    (None, "required object is missing"),
    ("hello", "must be an object, not a string"),
    ([1, 2], "must be an object, not an array"),
    (5, "must be an object, not a number"),
])
def test_a_spec_that_is_not_an_object_is_named_so(spec, message) -> None:
    """Reachable past the CRD's schema only (an older or looser CRD): the message says what it is."""
    from tritonscale.api.validation import validate_spec

    assert validate_spec(spec) == (None, [Problem("spec", message)])


@pytest.mark.parametrize("spec", ["hello", [1, 2], 5, None])
def test_the_autoscalers_pace_survives_any_spec_even_through_kopfs_view(spec) -> None:
    """The daemon reads ``scaling`` through Kopf's ``spec`` view, a Mapping whatever the spec is, whose
    ``get`` raised TypeError on a string: the daemon failed every 60 s with a traceback."""
    import kopf

    from tritonscale.api.validation import scaling_spec

    body = kopf.Body({} if spec is None else {"spec": spec})
    assert scaling_spec(body.spec).interval_seconds == 15


@pytest.mark.parametrize(("gpus", "resources", "fields"), [
    (1, {"limits": {"nvidia.com/gpu": 4}, "requests": {"nvidia.com/gpu": 4}},
     ["spec.runtime.resources.limits.nvidia.com/gpu", "spec.runtime.resources.requests.nvidia.com/gpu"]),
    (2, {"requests": {"nvidia.com/gpu": "1", "cpu": "2"}}, ["spec.runtime.resources.requests.nvidia.com/gpu"]),
    (0, {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}}, []),  # none rendered: theirs stands
    (2, {"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": "2"}}, []),  # agrees: harmless
    (1, {"limits": {"cpu": "4"}}, []),
    # another of NVIDIA's GPU resources beside the one runtime.gpus sets: a second device
    (1, {"limits": {"nvidia.com/mig-1g.10gb": 1}}, ["spec.runtime.resources.limits.nvidia.com/mig-1g.10gb"]),
    (1, {"requests": {"nvidia.com/gpu.shared": 1}}, ["spec.runtime.resources.requests.nvidia.com/gpu.shared"]),
    (1, {"limits": {"nvidia.com/hostdev": 1, "rdma/hca": 1}}, []),  # NICs for GPUDirect RDMA: not GPUs
    (0, {"limits": {"nvidia.com/mig-1g.10gb": 1}}, []),  # none rendered: theirs stands
    # runtime.gpuResource names the resource runtime.gpus counts
    ((1, "nvidia.com/mig-1g.10gb"), {"limits": {"nvidia.com/mig-1g.10gb": 2}},
     ["spec.runtime.resources.limits.nvidia.com/mig-1g.10gb"]),
    ((1, "nvidia.com/mig-1g.10gb"), {"limits": {"nvidia.com/mig-1g.10gb": 1}}, []),
    ((1, "nvidia.com/mig-1g.10gb"), {"limits": {"nvidia.com/gpu": 1}},
     ["spec.runtime.resources.limits.nvidia.com/gpu"]),
])
def test_a_gpu_count_in_resources_must_agree_with_runtime_gpus(gpus, resources, fields) -> None:
    """runtime.gpus renders the runtime.gpuResource limit: a different count in the free-form resources was
    silently replaced (limits) or refused by the API server for a limit the user never wrote (requests)."""
    doc = load_sample()
    gpus, gpu_resource = gpus if isinstance(gpus, tuple) else (gpus, "nvidia.com/gpu")
    doc["spec"]["runtime"] = {**doc["spec"].get("runtime", {}), "gpus": gpus, "resources": resources,
                              "gpuResource": gpu_resource}
    _, problems = validate_spec(doc["spec"])
    assert [p.field for p in problems] == fields
    assert all("runtime.gpus" in p.message for p in problems)


def test_a_request_above_its_limit_is_refused_as_the_api_server_would() -> None:
    """render said nothing and the operator learned it only from the Deployment's dry run."""
    spec = mutate(load_sample()["spec"], {"runtime.resources": {
        "requests": {"memory": "32Gi", "cpu": "500m"}, "limits": {"memory": "16Gi", "cpu": 1}}})
    parsed, problems = validate_spec(spec)
    assert parsed is None and [p.field for p in problems] == ["spec.runtime.resources"]
    assert "requests.memory: 32Gi is more than its limit 16Gi" in problems[0].message
    ok = mutate(load_sample()["spec"],
                {"runtime.resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}})
    assert validate_spec(ok)[1] == []


@pytest.mark.parametrize(("url", "problem"), [
    ("http://prometheus.monitoring.svc:9090", None),
    ("https://admin:s3cret@prom.example/prom/", None),
    ("http://[::1]:9090", None),
    ("http://127.0.0.1:99999", "the port must be 1-65535"),  # the CRD's rule cannot count: the operator says it
    ("http://prom:0", "the port must be 1-65535"),
    ("http://host:9090?x=1", "no query or fragment"),
    ("http://[::1", "must be an http:// or https:// URL"),
    # the client adds the API's path: given too, it was doubled (POST /api/v1/query/api/v1/query)
    ("http://prom:9090/api/v1/query", "give the server's base URL, without /api/v1/query: http://prom:9090"),
    ("https://u:pw@prom/prom/api/v1/", "without /api/v1: https://***@prom/prom"),
    ("http://prom:9090/api/v1/query_range", "without /api/v1/query_range"),
    ("http://prom:9090/api/v1x", None),  # a path of its own, only alike
])
def test_prometheus_url_is_a_base_url(url: str, problem: str | None) -> None:
    _, problems = validate_spec(mutate(load_sample()["spec"], {"scaling.prometheus": {"url": url}}))
    if problem is None:
        assert problems == []
    else:
        assert [p.field for p in problems] == ["spec.scaling.prometheus.url"] and problem in problems[0].message


@pytest.mark.parametrize(("change", "field", "message"), [
    # a typo of a field of that object: the field it most likely misspells
    ({"model.maxBatchSzie": 8}, "spec.model.maxBatchSzie", "unknown field (did you mean maxBatchSize?)"),
    ({"scaling.targetP95Ms": 50}, "spec.scaling.targetP95Ms", "unknown field (did you mean targetP95Milliseconds?)"),
    ({"scaling.MINREPLICAS": 2}, "spec.scaling.MINREPLICAS", "unknown field (did you mean minReplicas?)"),
    # inside a list's items and a nested block
    ({"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [4], "datatype": "FP32"}]},
     "spec.model.inputs[0].datatype", "unknown field (did you mean dataType?)"),
    ({"scaling.prometheus": {"uri": "http://p:9090"}}, "spec.scaling.prometheus.uri",
     "unknown field (did you mean url?)"),
    # nothing close: no guess (Triton's own config says platform where the spec says backend)
    ({"model.platform": "onnxruntime_onnx"}, "spec.model.platform", "unknown field"),
    ({"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [4], "shape": [4]}]},
     "spec.model.inputs[0].shape", "unknown field"),
])
def test_an_unknown_field_names_the_field_it_likely_misspells(change: dict[str, Any], field: str, message: str) -> None:
    spec = mutate(base_spec(), change)
    assert [(p.field, p.message) for p in validate_spec(spec)[1]] == [(field, message)]


def test_an_unknown_field_off_the_models_gets_no_guess() -> None:
    """A path the models do not reach (a free-form map, a missing parent) says only "unknown field"."""
    assert unknown_field_message(("runtime", "resources", "limitz")) == "unknown field"
    assert unknown_field_message(("nosuch", "minReplica")) == "unknown field"
    assert unknown_field_message(("scaling", "minReplica")) == "unknown field (did you mean minReplicas?)"
