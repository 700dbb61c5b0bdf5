"""reconcile/diff.py: patch only what we own, nothing when the live object already says it.

``api_server_view`` plays the API server: it stores what we sent and adds what
a real one adds (defaulted container fields, probe timeouts, clusterIP, status,
bookkeeping metadata). ``merge_patch`` (api/merge_patch.py, the operator's own) applies a JSON merge
patch (RFC 7386) so tests can check that applying the planned patch converges.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.rendered import KINDS, children
from tritonscale.api.merge_patch import merge_patch
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.reconcile.diff import (
    LAST_APPLIED,
    contains,
    key_structure,
    plan_patch,
    removals,
    strip_owned_by_others,
    with_last_applied,
)
from tritonscale.render.kubernetes_objects import build_children

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def desired_children(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {kind: with_last_applied(c) for kind, c in children(doc).items()}


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("imagePullPolicy", "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in c:
            c[probe].setdefault("timeoutSeconds", 1)
            c[probe].setdefault("successThreshold", 1)
            c[probe]["httpGet"].setdefault("scheme", "HTTP")


def api_server_view(obj: dict[str, Any], replicas: int | None = 7) -> dict[str, Any]:
    """``obj`` as a GET returns it after create: defaulted, with status and server metadata."""
    live = copy.deepcopy(obj)
    meta = live["metadata"]
    meta.update(uid="live-uid", resourceVersion="4242", generation=3, creationTimestamp="2025-01-01T00:00:00Z",
                managedFields=[{"manager": "kopf", "operation": "Update"}])
    meta.setdefault("annotations", {})
    kind = live["kind"]
    if kind == "Deployment":
        meta["annotations"]["deployment.kubernetes.io/revision"] = "2"
        spec = live["spec"]
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("revisionHistoryLimit", 10)
        if replicas is not None:
            spec["replicas"] = replicas  # the autoscaler moved it
        pod = spec["template"]["spec"]
        for key, value in {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                           "schedulerName": "default-scheduler", "securityContext": {}}.items():
            pod.setdefault(key, value)
        for c in pod.get("initContainers", []) + pod["containers"]:
            _default_container(c)
        for v in pod["volumes"]:
            if "configMap" in v:
                v["configMap"].setdefault("defaultMode", 420)
        spec["template"]["metadata"].setdefault("creationTimestamp", None)
        live["status"] = {"replicas": 7, "readyReplicas": 7, "observedGeneration": 3}
    elif kind == "Service":
        live["spec"].update(clusterIP="10.96.0.17", clusterIPs=["10.96.0.17"], type="ClusterIP",
                            sessionAffinity="None", ipFamilies=["IPv4"], ipFamilyPolicy="SingleStack",
                            internalTrafficPolicy="Cluster")
        live["status"] = {"loadBalancer": {}}
    elif kind == "PodDisruptionBudget":
        live["status"] = {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}
    return live


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_defaulted_live_object_needs_no_patch(sample: Path, kind: str) -> None:
    desired = desired_children(yaml.safe_load(sample.read_text()))[kind]
    live = api_server_view(desired)
    assert plan_patch(desired, live) is None


def test_empty_env_the_api_server_omits_needs_no_patch() -> None:
    """The sandbox sample has no runtime.env: its containers render env: [], which the API server
    drops; the Deployment was patched (and an Updated Event posted) on every reconcile."""
    desired = desired_children(yaml.safe_load((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text()))
    deployment = desired["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["env"] == []  # the triton container's has NVIDIA_VISIBLE_DEVICES (gpus 0)
    live = api_server_view(deployment)
    del live["spec"]["template"]["spec"]["initContainers"][0]["env"]
    assert plan_patch(deployment, live) is None


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_replicas_never_patched_even_when_they_differ(sample: Path) -> None:
    desired = desired_children(yaml.safe_load(sample.read_text()))["Deployment"]
    for live_replicas in (0, desired["spec"]["replicas"] + 5, None):
        live = api_server_view(desired, replicas=live_replicas)
        assert plan_patch(desired, live) is None
        # Something else changed: the patch fixes it and still leaves replicas alone.
        live["spec"]["template"]["spec"]["containers"][0]["image"] = "other:tag"
        patch = plan_patch(desired, live)
        assert patch is not None and "replicas" not in patch["spec"]
        assert patch["spec"]["template"]["spec"]["containers"][0]["image"] == desired["spec"]["template"]["spec"][
            "containers"][0]["image"]
        patched = merge_patch(live, patch)
        assert patched["spec"].get("replicas") == live["spec"].get("replicas")
        assert plan_patch(desired, patched) is None, "applying the patch converges"


def test_gpu_limit_as_the_api_server_returns_it_needs_no_patch() -> None:
    doc = yaml.safe_load((REPO / "manifests" / "samples" / "pytorch-warmup.yaml").read_text())
    desired = desired_children(doc)["Deployment"]
    live = api_server_view(desired)
    limits = live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits.update({k: str(v) for k, v in limits.items()})  # resource.Quantity marshals as a JSON string
    assert plan_patch(desired, live) is None


def test_replicas_in_stale_last_applied_is_not_nulled() -> None:
    desired = desired_children(yaml.safe_load(SAMPLES[0].read_text()))["Deployment"]
    live = api_server_view(desired)
    note = json.loads(live["metadata"]["annotations"][LAST_APPLIED])
    note["spec"]["replicas"] = 2
    live["metadata"]["annotations"][LAST_APPLIED] = json.dumps(note)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "other:tag"
    patch = plan_patch(desired, live)
    assert patch is not None and "replicas" not in patch["spec"]


# --- contains() ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("live", "desired", "expected"), [
    ({"a": 1, "extra": 2}, {"a": 1}, True),
    ({"a": {"b": 1, "defaulted": "x"}}, {"a": {"b": 1}}, True),
    ({"a": [{"n": 1, "defaulted": True}, {"n": 2}]}, {"a": [{"n": 1}, {"n": 2}]}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": 1.0}, {"a": 1}, True),
    ({}, {"a": 1}, False),
    ({"a": None}, {"a": 1}, False),
    ({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, False),
    ({"a": [1, 2, 3]}, {"a": [1, 2]}, False),
    ({"a": [1]}, {"a": [1, 2]}, False),
    ({"a": [2, 1]}, {"a": [1, 2]}, False),
    ({"a": []}, {"a": []}, True),
    ({"a": {}}, {"a": {}}, True),
    ({"a": "x"}, {"a": {}}, False),
    ({"a": {"k": "v"}}, {"a": []}, False),
    ({"a": [1]}, {"a": {}}, False),
    ({"a": "x"}, {"a": "x"}, True),
    ({"a": False}, {"a": False}, True),
    ({"a": True}, {"a": False}, False),
    ({"a": None}, {"a": None}, True),
    ("whole", "whole", True),
    # The API server omits empty lists and maps (omitempty): env: [] comes back as no env.
    ({}, {"a": []}, True),
    ({}, {"a": {}}, True),
    ({"a": [1]}, {"a": []}, False),
    ({}, {"a": [1]}, False),
    # Quantities come back in canonical form and compare by value, only under limits/requests and sizeLimit.
    ({"resources": {"requests": {"cpu": "500m", "memory": "1536Mi"}}},
     {"resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"}}}, True),
    ({"resources": {"limits": {"cpu": "2"}}}, {"resources": {"limits": {"cpu": "2000m"}}}, True),
    ({"resources": {"limits": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "2"}}}, False),
    ({"resources": {"limits": {"cpu": "lots"}}}, {"resources": {"limits": {"cpu": "many"}}}, False),
    ({"env": {"value": "1"}}, {"env": {"value": "1.0"}}, False),
])
def test_contains_table(live: Any, desired: Any, expected: bool) -> None:
    assert contains(live, desired) is expected


# --- plan_patch on changes ----------------------------------------------------------------------------

def _base() -> dict[str, Any]:
    return yaml.safe_load((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text())


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(("kind", "drift", "check"), [
    ("Deployment", lambda o: _container(o).update(image="drifted:1"),
     lambda p, d: _container(p)["image"] == _container(d)["image"]),
    ("Deployment", lambda o: _container(o)["args"].append("--log-verbose=1"),
     lambda p, d: _container(p)["args"] == _container(d)["args"]),
    ("Deployment", lambda o: _container(o)["args"].pop(),
     lambda p, d: _container(p)["args"] == _container(d)["args"]),
    ("Deployment", lambda o: o["spec"]["template"]["metadata"]["annotations"].update(
        {"tritonscale.io/config-hash": "0" * 16}),
     lambda p, d: p["spec"]["template"]["metadata"]["annotations"] == d["spec"]["template"]["metadata"][
         "annotations"]),
    ("Deployment", lambda o: o["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1),
     lambda p, d: p["spec"]["strategy"] == d["spec"]["strategy"]),
    ("ConfigMap", lambda o: o["data"].update({"config.pbtxt": "edited"}),
     lambda p, d: p["data"] == d["data"]),
    ("Service", lambda o: o["spec"]["ports"].pop(),
     lambda p, d: p["spec"]["ports"] == d["spec"]["ports"]),
    ("Service", lambda o: o["spec"]["ports"][0].update(port=80),
     lambda p, d: p["spec"]["ports"] == d["spec"]["ports"]),
    ("PodDisruptionBudget", lambda o: o["spec"].update(minAvailable=0),
     lambda p, d: p["spec"]["minAvailable"] == d["spec"]["minAvailable"]),
    ("ConfigMap", lambda o: o["metadata"]["labels"].pop("tritonscale.io/inferenceservice"),
     lambda p, d: p["metadata"]["labels"] == d["metadata"]["labels"]),
    ("ConfigMap", lambda o: o["metadata"].pop("ownerReferences"),
     lambda p, d: p["metadata"]["ownerReferences"] == d["metadata"]["ownerReferences"]),
    # Keys added where the child's value is held whole (diff.WHOLE_MAPS, WHOLE_CONTAINER_KEYS).
    ("Service", lambda o: o["spec"]["selector"].update(typo="x"),
     lambda p, d: p["spec"]["selector"] == {**d["spec"]["selector"], "typo": None}),
    ("PodDisruptionBudget", lambda o: o["spec"]["selector"]["matchLabels"].update(typo="x"),
     lambda p, d: p["spec"]["selector"]["matchLabels"] == {**d["spec"]["selector"]["matchLabels"], "typo": None}),
    # keys the API server refuses beside ours (EXCLUDING_KEYS): nulled with ours put back
    ("PodDisruptionBudget", lambda o: (o["spec"].pop("minAvailable"), o["spec"].update(maxUnavailable=1)),
     lambda p, d: p["spec"]["maxUnavailable"] is None and p["spec"]["minAvailable"] == d["spec"]["minAvailable"]),
    ("Service", lambda o: o["spec"].update(type="ExternalName", externalName="example.com"),
     lambda p, d: p["spec"]["type"] == "ClusterIP" and p["spec"]["externalName"] is None),
    ("Deployment", lambda o: _container(o).update(command=["sleep", "infinity"]),
     lambda p, d: "command" not in _container(p) and _container(p)["args"] == _container(d)["args"]),
], ids=["image", "extra-arg", "missing-arg", "config-hash", "max-unavailable", "configmap-data",
        "service-port-removed", "service-port-changed", "pdb", "label-removed", "owner-ref-removed",
        "service-selector-key-added", "pdb-selector-key-added", "pdb-max-unavailable", "service-external-name",
        "container-command-added"])
def test_drift_is_patched_and_converges(kind: str, drift: Any, check: Any) -> None:
    desired = desired_children(_base())[kind]
    live = api_server_view(desired)
    drift(live)
    patch = plan_patch(desired, live)
    assert patch is not None
    assert check(patch, desired)
    assert "apiVersion" not in patch and "kind" not in patch
    assert set(patch["metadata"]) <= {"labels", "annotations", "ownerReferences"}
    assert "status" not in patch
    assert plan_patch(desired, merge_patch(live, patch)) is None


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_a_service_exposed_by_hand_keeps_its_type(kind: str) -> None:
    """The spec says no type: a NodePort or LoadBalancer made by hand keeps its load balancer (an upgrade that
    stated ClusterIP would have torn it down); only an ExternalName, which sends the clients elsewhere, goes."""
    desired = desired_children(_base())["Service"]
    live = api_server_view(desired)
    live["spec"].update(type=kind, externalTrafficPolicy="Cluster")
    assert plan_patch(desired, live) is None


@pytest.mark.parametrize(("field", "value"), [
    ("nodeSelector", {"pool": "gpu"}),
    ("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists"}]),
    ("imagePullSecrets", ["ngc"]),
    ("serviceAccountName", "triton"),
])
def test_key_removed_since_last_applied_is_nulled(field: str, value: Any) -> None:
    before = _base()
    before["spec"]["runtime"][field] = value
    old = desired_children(before)["Deployment"]
    assert field in old["spec"]["template"]["spec"]
    live = api_server_view(old)
    new = desired_children(_base())["Deployment"]
    patch = plan_patch(new, live)
    assert patch is not None
    assert patch["spec"]["template"]["spec"][field] is None
    assert patch["metadata"]["annotations"][LAST_APPLIED] == new["metadata"]["annotations"][LAST_APPLIED]
    after = merge_patch(live, patch)
    assert field not in after["spec"]["template"]["spec"]
    assert plan_patch(new, after) is None


def test_removed_service_account_name_nulls_its_deprecated_alias_too() -> None:
    """The API server keeps a pod spec's deprecated ``serviceAccount`` equal to ``serviceAccountName``
    and fills the name back from it: nulling the name alone left both in place (seen on the real API
    server by an exploratory review; tests/integration/test_operator_spec_checks.py checks it there)."""
    before = _base()
    before["spec"]["runtime"]["serviceAccountName"] = "triton-reader"
    live = api_server_view(desired_children(before)["Deployment"])
    live["spec"]["template"]["spec"]["serviceAccount"] = "triton-reader"
    new = desired_children(_base())["Deployment"]
    patch = plan_patch(new, live)
    assert patch is not None
    pod = patch["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] is None and pod["serviceAccount"] is None
    after = merge_patch(live, patch)
    assert not {"serviceAccountName", "serviceAccount"} & set(after["spec"]["template"]["spec"])
    assert plan_patch(new, after) is None


def test_defaulted_key_we_never_set_is_not_nulled() -> None:
    """Only keys in last-applied are ours to remove: API-server defaults stay."""
    desired = desired_children(_base())["Deployment"]
    live = api_server_view(desired)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "drifted"
    patch = plan_patch(desired, live)
    assert "dnsPolicy" not in patch["spec"]["template"]["spec"]
    assert "revisionHistoryLimit" not in patch["spec"]


def test_object_without_last_applied_gets_one() -> None:
    desired = desired_children(_base())["Service"]
    live = api_server_view(desired)
    del live["metadata"]["annotations"][LAST_APPLIED]
    patch = plan_patch(desired, live)
    assert patch == {**{k: v for k, v in desired.items() if k not in ("apiVersion", "kind", "metadata")},
                     "metadata": {k: desired["metadata"][k] for k in ("labels", "annotations", "ownerReferences")}}


# a deep nesting raised json's RecursionError, no ValueError, and stopped every pass (session 104's fuzzing)
@pytest.mark.parametrize("raw", ["{not json", "", "null", "[" * 100_000 + "]" * 100_000])
def test_unreadable_last_applied_is_ignored(raw: str) -> None:
    desired = desired_children(_base())["ConfigMap"]
    live = api_server_view(desired)
    live["metadata"]["annotations"][LAST_APPLIED] = raw
    patch = plan_patch(desired, live)
    assert patch is not None
    assert patch["metadata"]["annotations"][LAST_APPLIED] == desired["metadata"]["annotations"][LAST_APPLIED]
    assert plan_patch(desired, merge_patch(live, patch)) is None


# --- with_last_applied / removals / strip_owned_by_others ---------------------------------------------

def test_with_last_applied_records_body_without_replicas() -> None:
    spec = InferenceServiceSpec.model_validate(_base()["spec"])
    owner = {**_base(), "metadata": {**_base()["metadata"], "uid": "u"}}
    raw = {c["kind"]: c for c in build_children(spec, owner)}
    before = copy.deepcopy(raw["Deployment"])
    annotated = with_last_applied(raw["Deployment"])
    assert raw["Deployment"] == before, "with_last_applied must not mutate its argument"
    assert annotated["spec"]["replicas"] == spec.scaling.floor, "replicas stay on the object for create"
    note = annotated["metadata"]["annotations"][LAST_APPLIED]
    recorded = json.loads(note)
    assert set(recorded) == {"spec"}
    assert "replicas" not in recorded["spec"]
    assert recorded["spec"] == key_structure({k: v for k, v in before["spec"].items() if k != "replicas"})
    assert recorded["spec"]["template"]["spec"]["containers"] is None  # a list: replaced whole, never nulled in
    assert note == json.dumps(recorded, sort_keys=True, separators=(",", ":")), "compact and canonical"
    cm = with_last_applied(raw["ConfigMap"])
    keys = {k: None for k in raw["ConfigMap"]["data"]}
    assert json.loads(cm["metadata"]["annotations"][LAST_APPLIED]) == {"data": keys, "immutable": None}


def test_the_note_records_keys_not_values_so_a_large_env_fits() -> None:
    """A note of the whole object doubled a large env in the annotations; 160 KB of env made the
    Deployment's annotations longer than the API server's 256 KiB (found by an exploratory review)."""
    doc = _base()
    doc["spec"]["runtime"]["env"] = [{"name": f"V{i}", "value": "x" * 1000} for i in range(160)]
    dep = desired_children(doc)["Deployment"]
    assert len(dep["metadata"]["annotations"][LAST_APPLIED]) < 4096
    assert sum(len(v) for v in dep["metadata"]["annotations"].values()) < 256 * 1024


def test_with_last_applied_keeps_existing_annotations() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "annotations": {"keep": "me"}},
           "data": {"a": "b"}}
    out = with_last_applied(obj)
    assert out["metadata"]["annotations"] == {"keep": "me", LAST_APPLIED: '{"data":{"a":null}}'}
    assert obj["metadata"]["annotations"] == {"keep": "me"}


@pytest.mark.parametrize(("last", "desired", "expected"), [
    ({"a": 1}, {"a": 2}, None),
    ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}, {"a": {"c": None}}),
    ({"a": {"b": {"c": 1}}}, {"a": {"b": {}}}, {"a": {"b": {"c": None}}}),
    ({"a": [1, 2]}, {"a": [1]}, None),  # lists are replaced whole by a merge patch
    ({}, {"a": 1}, None),
    (None, {"a": 1}, None),
    ({"a": 1}, None, None),
    ({"a": {"b": 1}}, {"a": "scalar"}, None),
])
def test_removals_table(last: Any, desired: Any, expected: Any) -> None:
    assert removals(last, desired) == expected


@pytest.mark.parametrize(("kind", "expected_spec"), [
    ("Deployment", {"selector": {}}),
    ("StatefulSet", {"replicas": 3, "selector": {}}),
    ("Service", {"replicas": 3, "selector": {}}),
])
def test_strip_owned_by_others(kind: str, expected_spec: dict[str, Any]) -> None:
    obj = {"kind": kind, "spec": {"replicas": 3, "selector": {}}}
    assert strip_owned_by_others(kind, obj)["spec"] == expected_spec
    assert obj["spec"]["replicas"] == 3, "the input is not mutated"


# RFC 7386, Appendix A: every example, target + patch -> result.
@pytest.mark.parametrize(("target", "patch", "result"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_follows_rfc_7386(target: Any, patch: Any, result: Any) -> None:
    before = copy.deepcopy((target, patch))
    assert merge_patch(target, patch) == result
    assert (target, patch) == before, "neither argument is changed"


def test_keys_others_add_elsewhere_are_left_alone() -> None:
    """Only the maps held whole are exact: a label or annotation another controller adds to a child,
    or a default the API server fills in, is no drift (as with ``kubectl apply``)."""
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "ConfigMap"):
        desired = desired_children(_base())[kind]
        live = api_server_view(desired)
        live["metadata"].setdefault("labels", {})["team"] = "serving"
        live["metadata"].setdefault("annotations", {})["example.com/owner"] = "me"
        assert plan_patch(desired, live) is None, kind


def test_an_older_operators_prometheus_annotations_are_removed_from_the_pod_template() -> None:
    """Operators before this one annotated the Triton pods prometheus.io/scrape and /port (they opted the
    pods into an annotation-based scrape job, and each pod then counted twice); the first pass of this one
    nulls both, so the fleet rolls once, as the README's upgrade note says."""
    doc = yaml.safe_load(SAMPLES[0].read_text())
    desired = desired_children(doc)["Deployment"]
    old = copy.deepcopy(desired)
    old["metadata"]["annotations"].pop(LAST_APPLIED)
    old["spec"]["template"]["metadata"]["annotations"].update({"prometheus.io/scrape": "true",
                                                               "prometheus.io/port": "8002"})
    live = api_server_view(with_last_applied(old))
    patch = plan_patch(desired, live)
    assert patch is not None
    assert patch["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] is None
    assert patch["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] is None
