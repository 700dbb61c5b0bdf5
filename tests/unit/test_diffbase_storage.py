"""Kopf's diff-base annotation, read tolerantly: a corrupt one is none, not a traceback at every event."""

from __future__ import annotations

import json

import kopf
import pytest

from tritonscale.operator_main import TolerantDiffBaseStorage

KEY = "tritonscale.io/last-handled-configuration"


def _body(annotation: str | None) -> kopf.Body:
    meta = {"name": "svc", "namespace": "ns"}
    if annotation is not None:
        meta["annotations"] = {KEY: annotation}
    return kopf.Body({"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService", "metadata": meta,
                      "spec": {}})


def test_a_corrupt_diff_base_reads_as_none_and_a_good_one_as_itself() -> None:
    storage = TolerantDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    essence = {"spec": {"model": {"backend": "python"}}}
    assert storage.fetch(body=_body(json.dumps(essence))) == essence
    assert storage.fetch(body=_body("garbage{")) is None
    assert storage.fetch(body=_body(None)) is None
    plain = kopf.AnnotationsDiffBaseStorage(prefix="tritonscale.io", key="last-handled-configuration")
    with pytest.raises(ValueError):  # what Kopf's own storage does with it: the reason for the class
        plain.fetch(body=_body("garbage{"))
