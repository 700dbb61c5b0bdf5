"""Kopf's diff-base annotation, read tolerantly: a corrupt one is none, not a traceback at every event."""

from __future__ import annotations

import json

import kopf
import pytest

from tritonscale.kopf_settings import TolerantDiffBaseStorage

KEY = "tritonscale.io/last-handled-configuration"


def _body(annotation: str | None, status: dict | None = None) -> kopf.Body:
    meta = {"name": "svc", "namespace": "ns"}
    if annotation is not None:
        meta["annotations"] = {KEY: annotation}
    body = {"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService", "metadata": meta, "spec": {}}
    if status is not None:
        body["status"] = status
    return kopf.Body(body)


HANDLED = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}


def test_a_corrupt_diff_base_reads_as_none_and_a_good_one_as_itself() -> None:
    storage = TolerantDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    essence = {"spec": {"model": {"backend": "python"}}}
    assert storage.fetch(body=_body(json.dumps(essence), HANDLED)) == essence
    assert storage.fetch(body=_body("garbage{", HANDLED)) is None
    assert storage.fetch(body=_body("[" * 100_000 + "]" * 100_000, HANDLED)) is None  # RecursionError, no ValueError
    assert storage.fetch(body=_body(None, HANDLED)) is None
    plain = kopf.AnnotationsDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    with pytest.raises(ValueError):  # what Kopf's own storage does with it: the reason for the class
        plain.fetch(body=_body("garbage{"))


def _big_body(parameters: dict[str, str], delay: int = 2000) -> kopf.Body:
    return kopf.Body({"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService",
                      "metadata": {"name": "svc", "namespace": "ns", "labels": {"team": "a"}},
                      "spec": {"model": {"backend": "python", "parameters": parameters},
                               "scaling": {"minReplicas": 1}},
                      "status": {"batching": {"maxQueueDelayMicroseconds": delay}}})


def test_a_large_spec_is_stored_as_digests_that_still_show_every_change() -> None:
    """A spec of ~140 KiB: Kopf's diff-base stays far below the 256 KiB all annotations may take (it
    made every write of Kopf's fail, 422 "Too long", with tracebacks), and stays deterministic and
    part by part, so a change of any part -- elided or not -- is still a change."""
    storage = TolerantDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    fields = ["status.batching.maxQueueDelayMicroseconds"]
    params = {f"p{i}": "v" * 1000 for i in range(140)}
    essence = storage.build(body=_big_body(params), extra_fields=fields)
    stored = json.dumps(essence, separators=(",", ":"))
    assert len(stored) <= 16 * 1024
    assert storage.build(body=_big_body(dict(params)), extra_fields=fields) == essence  # deterministic
    # what Kopf's field handlers follow stays readable; small parts too
    assert essence["status"]["batching"]["maxQueueDelayMicroseconds"] == 2000
    assert essence["spec"]["scaling"] == {"minReplicas": 1} and essence["metadata"]["labels"] == {"team": "a"}
    assert str(essence["spec"]["model"]).count("sha256:") >= 1
    changed = storage.build(body=_big_body({**params, "p7": "w" * 1000}), extra_fields=fields)
    assert changed != essence and changed["spec"]["scaling"] == essence["spec"]["scaling"]
    moved = storage.build(body=_big_body(params, delay=4000), extra_fields=fields)
    assert moved["status"]["batching"]["maxQueueDelayMicroseconds"] == 4000 and moved["spec"] == essence["spec"]
    # status (the field handlers' fields) is never elided, however large
    big_status = _big_body(params, delay=4000)
    big_status["status"]["batching"]["tunerState"] = {"note": "x" * 5000}
    wide = storage.build(body=big_status, extra_fields=[*fields, "status.batching"])
    assert wide["status"]["batching"]["tunerState"]["note"] == "x" * 5000
    # ... and a small spec is stored as it is
    small = storage.build(body=_big_body({"a": "b"}), extra_fields=fields)
    assert small["spec"]["model"]["parameters"] == {"a": "b"}


def test_an_object_restored_from_its_own_yaml_is_handled_as_new() -> None:
    """``kubectl get -o yaml`` then ``apply`` (or ``replace --force``) after a delete: the new object
    carries the old one's diff-base, equal to its spec, but no status (the API server drops it on
    create). Read as it is, Kopf saw no change, and the object got no children, status or autoscaler;
    read as none, it is reconciled."""
    storage = TolerantDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    essence = {"spec": {}}
    assert storage.fetch(body=_body(json.dumps(essence))) is None
    assert storage.fetch(body=_body(json.dumps(essence), {})) is None
    assert storage.fetch(body=_body(json.dumps(essence), HANDLED)) == essence
    plain = kopf.AnnotationsDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    assert plain.fetch(body=_body(json.dumps(essence))) == essence  # Kopf's own: "nothing changed"
