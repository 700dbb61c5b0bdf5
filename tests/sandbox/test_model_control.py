"""sandbox/model_control.py: the batcher settings in a model config as Triton reports it, and the
config override a model-control reload would send (pure parts)."""

from __future__ import annotations

from tritonscale.sandbox.model_control import BatcherSettings, explicit_args, settings_of, with_settings


def test_model_control_override_replaces_only_the_batcher_fields() -> None:
    live = {"name": "linear", "max_batch_size": 16,
            "dynamic_batching": {"preferred_batch_size": [4, 8, 16], "max_queue_delay_microseconds": 2000,
                                 "default_queue_policy": {"timeout_action": "REJECT",
                                                          "default_timeout_microseconds": 300000}},
            "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}
    assert settings_of(live) == BatcherSettings(2000, (4, 8, 16))
    new = with_settings(live, BatcherSettings(500, (8,)))
    assert settings_of(new) == BatcherSettings(500, (8,))
    assert new["dynamic_batching"]["default_queue_policy"] == live["dynamic_batching"]["default_queue_policy"]
    assert {k: v for k, v in new.items() if k != "dynamic_batching"} == {
        k: v for k, v in live.items() if k != "dynamic_batching"}
    assert live["dynamic_batching"]["max_queue_delay_microseconds"] == 2000  # the input is not changed
    assert settings_of({"name": "linear"}) is None
    # Triton completes "no preferred sizes" as [max_batch_size]: read back as none.
    completed = {**live, "dynamic_batching": {"preferred_batch_size": [16], "max_queue_delay_microseconds": 0}}
    assert settings_of(completed) == BatcherSettings(0, ())


def test_explicit_args_still_load_the_model_at_start() -> None:
    assert explicit_args("linear") == ["--model-control-mode=explicit", "--load-model=linear"]
