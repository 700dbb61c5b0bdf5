"""Triton python-backend cost model: a CPU stand-in for a GPU model.

One ``execute()`` call receives the batch of requests Triton's scheduler formed.  It
sleeps ONCE per batch for ``cost_base_ms + cost_per_item_ms * n`` milliseconds, where
``n`` is the total batch size (sum of the first dim of each request's ``x``), and then
returns ``y = 2 * x`` for every request.  So a batch of n costs ``a + b*n`` like a GPU
kernel launch with per-item work, and dynamic batching pays off the same way.

config.pbtxt ``parameters`` (string values): ``cost_base_ms`` (default 20) and
``cost_per_item_ms`` (default 2).  Input ``x`` / output ``y``: FP32 dims [4]
(``[batch, 4]`` with ``max_batch_size > 0``).
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(params, key, default):
    entry = params.get(key)
    if not entry:
        return float(default)
    value = entry.get("string_value", "") if isinstance(entry, dict) else entry
    try:
        return float(value)
    except (TypeError, ValueError):
        return float(default)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {}) or {}
        self.cost_base_ms = _param(params, "cost_base_ms", 20.0)
        self.cost_per_item_ms = _param(params, "cost_per_item_ms", 2.0)
        self.batching = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        inputs = []
        n = 0
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            inputs.append(x)
            n += int(x.shape[0]) if (self.batching and x.ndim > 1) else 1
        time.sleep(max(0.0, self.cost_base_ms + self.cost_per_item_ms * n) / 1000.0)
        responses = []
        for x in inputs:
            y = pb_utils.Tensor("y", (x * 2).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
