"""Batcher settings on a live tritonserver through Triton's model-control API: read them back,
and reload a model with new ones.

With ``--model-control-mode=explicit`` a tritonserver reloads a model on
``POST /v2/repository/models/<m>/load`` whose ``parameters.config`` is the whole model config as
JSON, with no pod restart. The config sent is the one the server reports (``GET
/v2/models/<m>/config``) with only the dynamic batcher's queue delay and preferred sizes replaced.

The operator does not apply tuner changes this way: ``e2e/bench_batching_apply.py`` measured it
against the config-hash rollout, and the reload stalls the model's requests for about 1.3 s on
each pod (p95 1.3 s during the change, against 84 ms for the rollout; README, "Applying a batcher
change"). It stays here for that benchmark and for reading the settings in force back from Triton
in tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

# A reload loads and warms the model before the swap: the cost model takes 1-2 s, a large
# TensorRT engine can take minutes; the request returns when it is done.
LOAD_TIMEOUT_S = 600.0
READ_TIMEOUT_S = 5.0
EXPLICIT_ARGS = ("--model-control-mode=explicit",)


@dataclass(frozen=True)
class BatcherSettings:
    max_queue_delay_microseconds: int
    preferred_batch_sizes: tuple[int, ...]


def explicit_args(model: str) -> list[str]:
    """tritonserver flags for explicit model control that still load ``model`` at start-up."""
    return [*EXPLICIT_ARGS, f"--load-model={model}"]


def settings_of(config: dict[str, Any]) -> BatcherSettings | None:
    """The batcher settings in a model config as Triton reports it (JSON); None without a batcher.

    Triton completes a batcher without preferred sizes with ``preferred_batch_size: [max_batch_size]``
    (2.51 reports that), which batches the same way: read back, that is "none"."""
    batching = config.get("dynamic_batching")
    if not isinstance(batching, dict):
        return None
    preferred = tuple(int(s) for s in batching.get("preferred_batch_size") or ())
    if preferred == (int(config.get("max_batch_size") or 0),):
        preferred = ()
    return BatcherSettings(int(batching.get("max_queue_delay_microseconds") or 0), preferred)


def with_settings(config: dict[str, Any], settings: BatcherSettings) -> dict[str, Any]:
    """``config`` with the batcher's delay and preferred sizes replaced (pure)."""
    batching = dict(config.get("dynamic_batching") or {})
    batching["max_queue_delay_microseconds"] = settings.max_queue_delay_microseconds
    batching["preferred_batch_size"] = list(settings.preferred_batch_sizes)
    return {**config, "dynamic_batching": batching}


class ModelControlError(Exception):
    """A tritonserver refused or failed a read or a reload."""


def read_config(base_url: str, model: str, client: httpx.Client | None = None) -> dict[str, Any]:
    c = client or httpx.Client(trust_env=False)
    try:
        resp = c.get(f"{base_url}/v2/models/{model}/config", timeout=READ_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ModelControlError(f"{base_url}: reading the config of {model} failed: {exc}") from exc
    finally:
        if client is None:
            c.close()
    if resp.status_code != 200:
        raise ModelControlError(f"{base_url}: reading the config of {model}: HTTP {resp.status_code} {resp.text[:200]}")
    config: dict[str, Any] = resp.json()
    return config


def apply_settings(base_url: str, model: str, settings: BatcherSettings,
                   client: httpx.Client | None = None) -> bool:
    """Reload ``model`` on the tritonserver at ``base_url`` with ``settings``; False if it already
    runs them (no reload). Raises ModelControlError when the server refuses."""
    c = client or httpx.Client(trust_env=False)
    try:
        config = read_config(base_url, model, c)
        if settings_of(config) == settings:
            return False
        body = {"parameters": {"config": json.dumps(with_settings(config, settings))}}
        try:
            resp = c.post(f"{base_url}/v2/repository/models/{model}/load", json=body, timeout=LOAD_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise ModelControlError(f"{base_url}: reloading {model} failed: {exc}") from exc
        if resp.status_code != 200:
            raise ModelControlError(f"{base_url}: reloading {model}: HTTP {resp.status_code} {resp.text[:300]}")
        return True
    finally:
        if client is None:
            c.close()
