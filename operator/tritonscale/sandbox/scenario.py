"""What the sandbox runs: the InferenceService, its model store, and the load shapes.

- :data:`SANDBOX_SIZING` sizes ``manifests/samples/python-cpu.yaml`` for a 2-core
  machine (``--service FILE`` runs another, python backend and ``gpus: 0``);
- :func:`build_load` turns ``--load step|burst|trace[:FILE]`` into arrival times
  and named phases;
- :func:`model_store` says which PersistentVolumeClaim and path the model's
  ``storageUri`` (``pvc://CLAIM/PATH``) names: the sandbox provisions that claim on
  a host directory holding the cost model, which the pod's init container links into
  the model repository as it would from any claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tritonscale
from tritonscale.api.merge_patch import merge_patch
from tritonscale.sandbox import loadgen
from tritonscale.sandbox.summary import Phase

PACKAGE_ROOT = Path(tritonscale.__file__).resolve().parent.parent  # operator/
REPO = PACKAGE_ROOT.parent
SAMPLE = REPO / "manifests" / "samples" / "python-cpu.yaml"
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"
NAMESPACE = "default"


class SandboxError(Exception):
    """A part failed to start or the input cannot run; the message says which and how to fix it."""


# The sample sized so one replica saturates well below what a Python load generator
# pushes on 2 cores. A batch of n costs 20 + 15n ms and batches hold at most 4, so one
# replica serves at most 4 / 80 ms = 50 rps, and a lone request takes 35 ms. Measured
# on one replica: p95 ~100 ms at 10-23 rps, 180 ms at 35 rps, 390 ms at 45 rps. So the
# step's 70 rps high phase needs 2-3 replicas against the 200 ms target, and the 15 and
# 10 rps phases fit one at half the target. (With a = 40, b = 10 the same 50 rps
# ceiling came with p95 130-220 ms at 17 rps per replica: too close to the target to
# tell a good scale-up from a bad one.) Scaling ticks every 2 s on a 10 s rate window, so a
# 150 s run shows both directions; the scale-down window is the CRD default (learned from
# the pods' cold start, a few seconds here).
SANDBOX_SIZING: dict[str, Any] = {
    "model": {
        "maxBatchSize": 4,
        "warmup": {"batchSizes": [1, 4]},
        "parameters": {"cost_base_ms": "20", "cost_per_item_ms": "15"},
    },
    "batching": {"maxQueueDelayMicroseconds": 2000, "preferredBatchSizes": [2, 4]},
    # Each tritonserver stands in for a one-GPU replica, so each asks for one of the
    # GPUs the sandbox's Node advertises (node_registration.py): the scheduler then
    # keeps replicas within what this machine runs, and more stay Pending, as on a
    # full GPU cluster. It is asked for here and not with runtime.gpus: 1 because
    # that renders KIND_GPU, which this GPU-less tritonserver cannot load.
    "runtime": {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
    "scaling": {
        "minReplicas": 1,
        "maxReplicas": 4,
        "targetP95Milliseconds": 200,
        "intervalSeconds": 2,
        "windowSeconds": 10,
    },
}

# Load shapes (rates are multiplied by --rate-scale).
STEP_PHASES = (("base", 0.12, 15.0), ("high", 0.40, 70.0), ("low", 0.48, 10.0))  # share of --duration, rps
BURST = {"base_rps": 15.0, "burst_rps": 80.0, "period_s": 50.0, "burst_s": 12.0}
# The Azure trace averages 5.4 rps; x10 gives ~50 rps, one replica's capacity, with
# 5 s peaks near 60 rps.
TRACE_RATE_SCALE = 10.0


@dataclass
class Scenario:
    duration_s: float = 150.0
    load: str = "step"  # step | burst | trace[:FILE]
    rate_scale: float | None = None  # None: 1 for step/burst, TRACE_RATE_SCALE for a trace
    seed: int = 0
    service_file: Path | None = None  # None: the python-cpu sample with SANDBOX_SIZING
    kill_at_s: float | None = None  # SIGKILL one ready tritonserver at this time
    step_phases: list[tuple[str, float, float]] | None = None  # (name, seconds, rps): overrides the step
    workdir: Path | None = None  # None: a temporary directory, removed after a clean run
    request_timeout_s: float = 30.0
    kubeconfig: Path | None = None  # None: start a control plane; else use that cluster
    nodes: int = 1  # sandbox kubelets (Nodes), sharing this machine
    gpus_per_node: int | None = None  # None: node_registration.GPUS_PER_CORE per core of each Node
    # Turn the batching tuner on (batching.autoTune) and start it from this queue delay with no
    # preferred sizes: a poor start shows a tuning change reaching the live tritonservers.
    tuner_from_delay_us: int | None = None


@dataclass
class LoadShape:
    arrivals: np.ndarray
    phases: list[Phase]
    description: str


# The most requests one run may send: each is a coroutine of the one load generator on this machine, and
# its record (a 1e6 --rate-scale asked numpy for 12.5 GiB of arrival times, or failed in numpy's words).
MAX_ARRIVALS = 10_000_000


def _check_arrivals(expected: float) -> None:
    if expected > MAX_ARRIVALS:
        raise ValueError(f"--rate-scale and --duration: about {expected:.3g} requests in the run; the sandbox's "
                         f"load generator sends at most {MAX_ARRIVALS:.0e} (lower --rate-scale or --duration)")


def trace_file(scenario: Scenario) -> Path | None:
    """The trace file a ``--load trace[:FILE]`` run reads (None for step and burst)."""
    kind, _, arg = scenario.load.partition(":")
    if kind != "trace":
        return None
    return Path(arg) if arg else DEFAULT_TRACE


def build_load(scenario: Scenario) -> LoadShape:
    kind, _, arg = scenario.load.partition(":")
    d = float(scenario.duration_s)
    if kind == "step":
        scale = scenario.rate_scale or 1.0
        spec = scenario.step_phases or [(n, share * d, rps) for n, share, rps in STEP_PHASES]
        phases, t = [], 0.0
        for name, seconds, rps in spec:
            phases.append(Phase(name, t, t + seconds, rps * scale))
            t += seconds
        _check_arrivals(sum((p.end_s - p.start_s) * (p.rps or 0.0) for p in phases))
        arrivals = loadgen.step_schedule([(p.end_s - p.start_s, p.rps or 0.0) for p in phases], seed=scenario.seed)
        desc = "step " + " -> ".join(f"{p.rps:g}" for p in phases) + " rps"
        return LoadShape(arrivals, phases, desc)
    if kind == "burst":
        scale = scenario.rate_scale or 1.0
        b = BURST
        _check_arrivals(b["burst_rps"] * scale * d)
        arrivals = loadgen.burst_schedule(b["base_rps"] * scale, b["burst_rps"] * scale, b["period_s"],
                                          b["burst_s"], d, seed=scenario.seed)
        phases, t = [], 0.0
        while t < d:
            for name, length, rps in (("base", b["period_s"] - b["burst_s"], b["base_rps"]),
                                      ("burst", b["burst_s"], b["burst_rps"])):
                end = min(d, t + length)
                if end > t:
                    phases.append(Phase(name, t, end, rps * scale))
                t = end
        desc = (f"burst {b['base_rps'] * scale:g} rps with {b['burst_s']:g} s at {b['burst_rps'] * scale:g} rps "
                f"every {b['period_s']:g} s")
        return LoadShape(arrivals, phases, desc)
    if kind == "trace":
        path = Path(arg) if arg else DEFAULT_TRACE
        scale = scenario.rate_scale or TRACE_RATE_SCALE
        whole = loadgen.trace_schedule(path, rate_scale=scale)
        span = float(whole[-1])
        if span < d:
            # The load would stop at span and the rest of the run idle: a --rate-scale of 1e9 replayed the
            # whole trace in under a second. Said now, not after the cluster has started.
            raise ValueError(
                f"--rate-scale {scale:g}: the trace {path.name} replays in {span:.3g} s at that scale, less than "
                f"--duration {d:g} s, and the rest of the run would have no load: give --duration {span:.3g} or "
                f"less, or a --rate-scale of {scale * span / d:.3g} or less")
        arrivals = whole[whole < d]
        thirds = [(0.0, d / 3), (d / 3, 2 * d / 3), (2 * d / 3, d)]
        phases = [Phase(f"{a:.0f}-{b:.0f}s", a, b) for a, b in thirds]
        return LoadShape(arrivals, phases, f"trace {path.name} x{scale:g} ({len(arrivals) / d:.1f} rps mean)")
    raise ValueError(f"--load must be step, burst or trace[:FILE], not {scenario.load!r}")


def load_service(scenario: Scenario) -> dict[str, Any]:
    """The InferenceService the sandbox creates, validated; SandboxError if unusable."""
    from tritonscale.api.manifests import read_documents
    from tritonscale.api.validation import validate_body

    path = scenario.service_file or SAMPLE
    docs, unreadable = read_documents(str(path), "--service")
    if unreadable:
        raise SandboxError("; ".join(unreadable))
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "InferenceService"]
    if not found:
        raise SandboxError(f"{path}: no InferenceService document")
    if len(found) > 1:
        raise SandboxError(f"{path}: {len(found)} InferenceService documents; the sandbox serves one")
    body = found[0]
    if scenario.service_file is None:
        body["spec"] = merge_patch(body["spec"], SANDBOX_SIZING)
    if scenario.tuner_from_delay_us is not None:
        body["spec"] = merge_patch(body["spec"], {"batching": {
            "maxQueueDelayMicroseconds": scenario.tuner_from_delay_us, "preferredBatchSizes": [],
            "autoTune": {"enabled": True}}})
    body.setdefault("metadata", {})["namespace"] = NAMESPACE
    spec, problems = validate_body(body)
    if spec is None or problems:
        # A problem with what --batching-tuner-from put in is the flag's, not the file's
        flag = scenario.tuner_from_delay_us is not None and any(
            "batching.maxQueueDelayMicroseconds" in str(p) for p in problems)
        source = f"--batching-tuner-from {scenario.tuner_from_delay_us}" if flag else f"{path}"
        raise SandboxError(f"{source}: invalid InferenceService: " + "; ".join(str(p) for p in problems))
    if spec.model.backend != "python" or spec.runtime.gpus != 0:
        raise SandboxError(f"{path}: the sandbox runs the python cost model on CPU: "
                           "spec.model.backend must be python and spec.runtime.gpus 0")
    # The load sends x, FP32 [4], and the cost model answers y like it: another shape ran the whole
    # run with every request failing, and reported it completed.
    for kind, tensors, name in (("input", spec.model.inputs, "x"), ("output", spec.model.outputs, "y")):
        got = [(t.name, t.data_type, list(t.dims)) for t in tensors]
        if tensors and got != [(name, "FP32", [4])]:
            shown = ", ".join(f"{n} {d} {dims}" for n, d, dims in got)
            raise SandboxError(f"{path}: spec.model.{kind}s: the cost model takes one FP32 {kind} {name!r} with "
                               f"dims [4]; got {shown}")
    for key in ("cost_base_ms", "cost_per_item_ms"):
        value = spec.model.parameters.get(key)
        try:
            ok = value is None or (math.isfinite(float(value)) and float(value) >= 0)
        except ValueError:
            ok = False
        if not ok:
            raise SandboxError(f"{path}: spec.model.parameters.{key}: {value!r} is not a number of ms >= 0")
    model_store(body)
    return body


def describe_config(body: dict[str, Any]) -> dict[str, Any]:
    from tritonscale.api.spec import model_name
    from tritonscale.api.validation import validate_body

    spec, _ = validate_body(body)
    assert spec is not None
    a = float(spec.model.parameters.get("cost_base_ms", 20))
    b = float(spec.model.parameters.get("cost_per_item_ms", 2))
    n = max(1, spec.model.max_batch_size)
    batching = spec.batching
    s = spec.scaling
    return {
        "inferenceservice": body["metadata"]["name"],
        "namespace": body["metadata"]["namespace"],
        "model": model_name(spec, body["metadata"]["name"]),
        "cost_base_ms": a,
        "cost_per_item_ms": b,
        "max_batch_size": spec.model.max_batch_size,
        "preferred_batch_sizes": list(batching.preferred_batch_sizes) if batching and batching.enabled else [],
        "max_queue_delay_us": batching.max_queue_delay_microseconds if batching and batching.enabled else None,
        "warmup_batch_sizes": list(spec.model.warmup.batch_sizes) if spec.model.warmup else [],
        # Full batches back to back: n requests every a + b*n ms.
        "replica_capacity_rps": round(n / (a + b * n) * 1000.0, 1),
        "target_p95_ms": s.target_p95_milliseconds,
        "min_replicas": s.min_replicas,
        "max_replicas": s.max_replicas,
        "floor": s.floor,
        "interval_s": s.interval_seconds,
        "window_s": s.window_seconds,
        "scale_down_stabilization_s": s.scale_down.stabilization_seconds,
        "scale_up_max_step": s.scale_up.max_step,
    }


def scrape_interval_s(config: dict[str, Any]) -> float:
    """How often the sandbox's Prometheus scrapes (``config``: :func:`describe_config`'s): as often
    as the autoscaler ticks, as the defaults do (15 s and 15 s), and at least four times per rate
    window. The decider's arrivals add the rate out of the queue between the last two scrapes
    (``irate``) to the queue's change between the scrapes the last two ticks read: the same
    interval only when scrapes and ticks are equally often. At 1 s scrapes and 2 s ticks the
    ``irate`` covered half the tick, and a burst of queue timeouts in the step's last second read
    as 97 rps of arrivals for 70 (session 34)."""
    return min(float(config["interval_s"]), float(config["window_s"]) / 4.0)


def model_store(body: dict[str, Any]) -> tuple[str, str]:
    """``(claim, path)`` of the model's ``storageUri``; SandboxError unless it is ``pvc://CLAIM/PATH``."""
    uri = ((body.get("spec") or {}).get("model") or {}).get("storageUri", "")
    scheme, _, rest = uri.partition("://")
    claim, _, path = rest.partition("/")
    if scheme != "pvc" or not claim or not path:
        raise SandboxError(f"spec.model.storageUri is {uri!r}: the sandbox serves the model from a "
                           "PersistentVolumeClaim it provisions on this machine, so it must be pvc://CLAIM/PATH "
                           "(s3:// and gs:// would need the cloud CLIs in the init container)")
    return claim, path.strip("/")
