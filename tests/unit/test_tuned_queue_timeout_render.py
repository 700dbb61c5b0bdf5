"""render/: the default queue timeout config.pbtxt carries follows the queue delay in force -- the
tuner's, with batching.autoTune on -- not the spec's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from support.rendered import children

SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "python-cpu.yaml"  # target 150 ms


def _config(delay_us: int) -> str:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["spec"]["batching"]["autoTune"] = {"enabled": True}  # spec: delay 2000 us, no queueTimeout
    doc["status"] = {"batching": {"maxQueueDelayMicroseconds": delay_us, "preferredBatchSizes": [16],
                                  "source": "tuner", "reason": "MoreCapacity"}}
    config: str = children(doc)["ConfigMap"]["data"]["config.pbtxt"]
    return config[config.index("dynamic_batching {"):config.index("model_warmup")]


@pytest.mark.parametrize(("delay_us", "timeout_us"), [
    (500, 300000),  # two targets (2 x 150 ms) exceed the delay and a target
    (200000, 350000),  # the tuned 200 ms delay + one 150 ms target: past the delay
])
def test_the_default_queue_timeout_follows_the_tuned_delay(delay_us: int, timeout_us: int) -> None:
    """With autoTune on and no explicit queueTimeoutMicroseconds, the default timeout must clear the tuned
    delay by a target: computed from the spec's 2 ms delay instead (300 ms) it would sit within reach of a
    tuned 200 ms delay plus a batch, and Triton would reject requests held for the delay at light load."""
    assert _config(delay_us) == (
        "dynamic_batching {\n"
        "  preferred_batch_size: [ 16 ]\n"
        f"  max_queue_delay_microseconds: {delay_us}\n"
        "  default_queue_policy {\n"
        "    timeout_action: REJECT\n"
        f"    default_timeout_microseconds: {timeout_us}\n"
        "  }\n"
        "}\n")
