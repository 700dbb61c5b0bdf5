"""render/: the default_queue_policy block of config.pbtxt carries a timeout only when there is one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.rendered import children

SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "python-cpu.yaml"


def test_a_queue_size_without_a_timeout_renders_no_zero_timeout() -> None:
    """maxQueueSize set, no target and no queueTimeout: the queue policy carries the size alone. A rendered
    `default_timeout_microseconds: 0` means the same to Triton, but it changes the config hash, and so rolls
    every pod, for nothing."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    del doc["spec"]["scaling"]["targetP95Milliseconds"]
    doc["spec"]["batching"]["maxQueueSize"] = 100
    config: str = children(doc)["ConfigMap"]["data"]["config.pbtxt"]
    assert config[config.index("dynamic_batching {"):config.index("model_warmup")] == (
        "dynamic_batching {\n"
        "  preferred_batch_size: [ 4, 8, 16 ]\n"
        "  max_queue_delay_microseconds: 2000\n"
        "  default_queue_policy {\n"
        "    timeout_action: REJECT\n"
        "    max_queue_size: 100\n"
        "  }\n"
        "}\n")


def test_a_model_without_declared_tensors_renders_no_empty_input_or_output_block() -> None:
    """A model whose backend declares its own inputs and outputs (none in the spec) gets no empty
    `input [ ]` or `output [ ]` block: config.pbtxt says what the spec sets and nothing more, as the goldens
    do for every other optional block."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["spec"]["model"]["inputs"] = []
    doc["spec"]["model"].pop("outputs")
    config: str = children(doc)["ConfigMap"]["data"]["config.pbtxt"]
    assert "input [" not in config and "output [" not in config
    assert config.index("max_batch_size: 16") < config.index("dynamic_batching {")
