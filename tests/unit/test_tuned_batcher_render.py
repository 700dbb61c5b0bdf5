"""render/: with batching.autoTune on, config.pbtxt carries status.batching's settings in force;
without it, status.batching changes nothing (the goldens in tests/unit/golden hold the rest)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from support.rendered import children
from tritonscale.api.spec import HASH_ANNOTATION, InferenceServiceSpec
from tritonscale.api.status import BatcherInForce
from tritonscale.api.validation import validate_spec
from tritonscale.render.kubernetes_objects import batcher_in_force, config_hash
from tritonscale.render.triton_config import render_config_pbtxt

SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "python-cpu.yaml"
IN_FORCE = {"maxQueueDelayMicroseconds": 500, "preferredBatchSizes": [16], "source": "tuner",
            "reason": "MoreCapacity"}


def owner(auto_tune: dict[str, Any] | None, status_batching: dict[str, Any] | None) -> dict[str, Any]:
    doc = yaml.safe_load(SAMPLE.read_text())
    if auto_tune is not None:
        doc["spec"]["batching"]["autoTune"] = auto_tune
    if status_batching is not None:
        doc["status"] = {"batching": status_batching}
    return doc


def batching_block(config: str) -> str:
    return config.split("dynamic_batching {\n", 1)[1].split("\n  default_queue_policy", 1)[0]


def test_without_auto_tune_status_batching_changes_nothing() -> None:
    plain = children(owner(None, None))
    with_status = children(owner(None, IN_FORCE))
    disabled = children(owner({"enabled": False}, IN_FORCE))
    # The Deployment's record of its spec differs (``autoTune: {enabled: false}`` is in it); nothing else.
    disabled["Deployment"]["metadata"]["annotations"] = plain["Deployment"]["metadata"]["annotations"]
    assert plain == with_status == disabled
    assert batching_block(plain["ConfigMap"]["data"]["config.pbtxt"]) == (
        "  preferred_batch_size: [ 4, 8, 16 ]\n  max_queue_delay_microseconds: 2000")


def test_auto_tune_renders_the_settings_in_force_and_rolls_the_hash() -> None:
    spec_values = children(owner({"enabled": True}, None))  # the tuner has written nothing yet
    tuned = children(owner({"enabled": True}, IN_FORCE))
    config = tuned["ConfigMap"]["data"]["config.pbtxt"]
    assert batching_block(config) == "  preferred_batch_size: [ 16 ]\n  max_queue_delay_microseconds: 500"
    # Only the two tuned lines differ from the spec's rendering.
    before = spec_values["ConfigMap"]["data"]["config.pbtxt"]
    diff = {line for line in set(config.splitlines()) ^ set(before.splitlines())}
    assert diff == {"  preferred_batch_size: [ 16 ]", "  max_queue_delay_microseconds: 500",
                    "  preferred_batch_size: [ 4, 8, 16 ]", "  max_queue_delay_microseconds: 2000"}
    annotations = tuned["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations[HASH_ANNOTATION] == config_hash(config) != config_hash(before)


def test_no_preferred_sizes_in_force_renders_none() -> None:
    doc = owner({"enabled": True}, {**IN_FORCE, "preferredBatchSizes": [], "maxQueueDelayMicroseconds": 0})
    config = children(doc)["ConfigMap"]["data"]["config.pbtxt"]
    assert batching_block(config) == "  max_queue_delay_microseconds: 0"


def test_batcher_in_force_reads_status_only_with_auto_tune() -> None:
    doc = owner({"enabled": True}, IN_FORCE)
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert batcher_in_force(spec, doc) == BatcherInForce(500, (16,))
    # Until the tuner changes them (source: spec) and when status.batching is unreadable, the
    # spec's values are rendered, as the tuner itself reads them (scaling.batching_status.in_force).
    for status in ({**IN_FORCE, "source": "spec"}, {**IN_FORCE, "maxQueueDelayMicroseconds": "soon"},
                   {"source": "tuner"}):
        other = copy.deepcopy(doc)
        other["status"]["batching"] = status
        assert batcher_in_force(spec, other) is None
    assert render_config_pbtxt(spec, "linear") == render_config_pbtxt(spec, "linear", None)


def test_renderer_and_autoscaler_read_status_batching_alike() -> None:
    """config.pbtxt and the decider's capacity plan follow the same settings in force, whatever
    status.batching holds: both read it through api.status.tuned_batcher."""
    from tritonscale.scaling.batching_status import in_force, spec_settings

    statuses: list[dict[str, Any] | None] = [
        None, IN_FORCE, {**IN_FORCE, "source": "spec"}, {**IN_FORCE, "preferredBatchSizes": None},
        {**IN_FORCE, "maxQueueDelayMicroseconds": "soon"}, {"source": "tuner"}, {**IN_FORCE, "source": None}]
    for auto_tune in ({"enabled": True}, {"enabled": False}, None):
        for status in statuses:
            doc = owner(auto_tune, status)
            spec = InferenceServiceSpec.model_validate(doc["spec"])
            rendered_settings = batcher_in_force(spec, doc)
            settings, source = in_force(spec, doc.get("status"))
            if rendered_settings is None:
                assert (settings, source) == (spec_settings(spec), "spec")
            else:
                assert source == "tuner"
                assert (settings.delay_us, settings.preferred) == (
                    rendered_settings.max_queue_delay_microseconds, rendered_settings.preferred_batch_sizes)
    assert batcher_in_force(InferenceServiceSpec.model_validate(owner({"enabled": True}, IN_FORCE)["spec"]),
                            owner({"enabled": True}, IN_FORCE)) == BatcherInForce(500, (16,))


def test_tuned_settings_outside_the_edited_spec_are_brought_within_it() -> None:
    """A spec edited after the tuner chose its settings (a smaller maxBatchSize, tighter autoTune bounds):
    Triton refuses a preferred size above max_batch_size, and a new pod with that config would never load
    the model. The settings are brought within the new bounds, as close to the tuner's choice as they
    allow; the spec's own values came back instead, a poor start the tuner could not leave for up to ten
    minutes (an exploratory review, session 82)."""
    cases: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any], BatcherInForce, str]] = [
        # preferred 16 > maxBatchSize 8: dropped, the delay kept
        ({"enabled": True}, {"model": {"maxBatchSize": 8, "warmup": {"batchSizes": [1, 8]}}}, IN_FORCE,
         BatcherInForce(500, ()),
         "  max_queue_delay_microseconds: 500"),
        # delay 500 > the tuner's bound: capped at it
        ({"enabled": True, "maxQueueDelayMicroseconds": 400}, {}, IN_FORCE, BatcherInForce(400, (16,)),
         "  preferred_batch_size: [ 16 ]\n  max_queue_delay_microseconds: 400"),
        # 16 no longer among the allowed sizes; 8 still is
        ({"enabled": True, "preferredBatchSizes": [4, 8]}, {}, {**IN_FORCE, "preferredBatchSizes": [8, 16]},
         BatcherInForce(500, (8,)), "  preferred_batch_size: [ 8 ]\n  max_queue_delay_microseconds: 500"),
    ]
    for auto_tune, edit, tuned, within, block in cases:
        doc = owner(auto_tune, tuned)
        for key, value in edit.items():
            doc["spec"][key].update(value)
        doc["spec"]["batching"].update(preferredBatchSizes=[4, 8], maxQueueDelayMicroseconds=300)
        spec, problems = validate_spec(doc["spec"])
        assert spec is not None and not problems, (auto_tune, edit, problems)  # an edit admission lets through
        assert batcher_in_force(spec, doc) == within, (auto_tune, edit)
        assert batching_block(children(doc)["ConfigMap"]["data"]["config.pbtxt"]) == block, (auto_tune, edit)
    # Within the bounds, the tuner's settings stay in force as they are.
    doc = owner({"enabled": True, "maxQueueDelayMicroseconds": 500, "preferredBatchSizes": [8, 16]}, IN_FORCE)
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert batcher_in_force(spec, doc) == BatcherInForce(500, (16,))


def test_a_queue_timeout_lowered_below_the_tuned_delay_puts_the_specs_values_back() -> None:
    """Admission refuses a REJECT timeout the spec's delay outlasts; the tuned delay was not held to it: a
    timeout lowered to 10 ms under a tuned 20 ms rendered both, and Triton rejected every request the
    batcher held for the whole delay (all of them at light load), with nothing to end it."""
    doc = owner({"enabled": True}, {**IN_FORCE, "maxQueueDelayMicroseconds": 20000})
    doc["spec"]["batching"]["queueTimeoutMicroseconds"] = 100000
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert batcher_in_force(spec, doc) == BatcherInForce(20000, (16,))
    doc["spec"]["batching"]["queueTimeoutMicroseconds"] = 10000
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert batcher_in_force(spec, doc) is None  # the spec's 2 ms, which the timeout outlasts
    config = children(doc)["ConfigMap"]["data"]["config.pbtxt"]
    assert "max_queue_delay_microseconds: 2000" in config and "default_timeout_microseconds: 10000" in config
    # With timeoutAction DELAY nothing is rejected: the tuned delay stays.
    doc["spec"]["batching"]["timeoutAction"] = "DELAY"
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert batcher_in_force(spec, doc) == BatcherInForce(20000, (16,))
