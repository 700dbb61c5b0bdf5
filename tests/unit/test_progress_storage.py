"""Kopf's progress annotations, except that a spec edit ends a handler's retry delay
(``kopf_settings.EditsCutRetryDelays``; the real control plane's check is in test_operator_admission)."""

from __future__ import annotations

from typing import Any

import kopf

from tritonscale.kopf_settings import EditsCutRetryDelays

HANDLER = "reconcile_inference_service"
DELAYED = {"started": "2026-12-04T12:00:00.000000+00:00", "delayed": "2026-12-04T12:05:00.000000+00:00",
           "purpose": "update", "retries": 3, "success": False, "failure": False, "message": "quota"}


def _body(generation: int, annotations: dict[str, str] | None = None) -> kopf.Body:
    return kopf.Body({"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService",
                      "metadata": {"name": "svc", "namespace": "ns", "uid": "u1", "generation": generation,
                                   "annotations": annotations or {}}, "spec": {}})


def _stored(storage: EditsCutRetryDelays, record: dict[str, Any], generation: int) -> dict[str, str]:
    """The annotations a store at ``generation`` leaves (its patch applied)."""
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId(HANDLER), record=record, body=_body(generation), patch=patch)
    return dict(patch["metadata"]["annotations"])


def test_a_delay_stands_at_its_generation_and_ends_at_another() -> None:
    storage = EditsCutRetryDelays(prefix="tritonscale.io")
    annotations = _stored(storage, DELAYED, 2)
    same = storage.fetch(key=kopf.HandlerId(HANDLER), body=_body(2, annotations))
    assert same is not None and same["delayed"] == DELAYED["delayed"]  # a retry of the same spec waits
    edited = storage.fetch(key=kopf.HandlerId(HANDLER), body=_body(3, annotations))
    assert edited is not None and edited["delayed"] is None  # an edit is handled at once
    assert edited["retries"] == 3 and edited["started"] == DELAYED["started"]  # the rest of the record stands


def test_a_delay_this_process_did_not_set_stands() -> None:
    """After a restart (or another replica's record) the delay is Kopf's, as before: nothing known of when
    it was set."""
    writer, reader = EditsCutRetryDelays(prefix="tritonscale.io"), EditsCutRetryDelays(prefix="tritonscale.io")
    annotations = _stored(writer, DELAYED, 2)
    assert reader.fetch(key=kopf.HandlerId(HANDLER), body=_body(3, annotations))["delayed"] == DELAYED["delayed"]


def test_a_record_stored_without_a_delay_or_purged_forgets_it() -> None:
    storage = EditsCutRetryDelays(prefix="tritonscale.io")
    _stored(storage, DELAYED, 2)
    _stored(storage, {**DELAYED, "delayed": None}, 2)  # retried, and running again
    assert not storage._delayed_at
    _stored(storage, DELAYED, 4)
    storage.purge(key=kopf.HandlerId(HANDLER), body=_body(4), patch=kopf.Patch())  # done: Kopf purges it
    assert not storage._delayed_at
