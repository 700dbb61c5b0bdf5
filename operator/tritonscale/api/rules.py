"""Cross-field rules, declared once and enforced twice (most of them; see OPERATOR_ONLY).

Each rule carries the CEL expression that goes into the CRD's
``x-kubernetes-validations`` (so a real API server rejects the object at
``kubectl apply`` time) *and* the Python predicate the operator evaluates (so
an object that reached the cluster some other way, e.g. an older CRD, still
gets a ``SpecValid=False`` condition instead of a half-made rollout).

``tests/unit/test_rules_cel.py`` evaluates every CEL expression with
``cel-python`` against the same table the Python predicates are tested with,
so the two cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritonscale.api.shutdown import ENDPOINTS_LAG_S, KILL_MARGIN_S, MAX_DRAINED_AGE_S, min_grace_cel, min_grace_seconds

# A rule added once objects may exist that break it is the operator's alone (``cel=None``): the API server
# does not ratchet a CEL rule on ``spec`` for an object whose spec did not change (auditO, session 85, on a
# real kube-apiserver 1.35: after the new CRD was applied, every write to such an object -- its status, an
# annotation, the removal of a finalizer -- was refused with 422, so the operator could not say SpecValid=False
# and a deletion waiting on an old finalizer never finished). Transition rules (optionalOldSelf) would ratchet
# them, but need Kubernetes 1.30, and the chart supports 1.28. The operator refuses such a spec in status,
# and `tritonscale render` and the CLI's checks before any write, as they do every rule.

if TYPE_CHECKING:  # spec.py, spec_base.py and spec_scaling.py import this module to put the CEL rules in the schema
    from tritonscale.api.spec import BatchingSpec, InferenceServiceSpec, ScalingSpec


@dataclass(frozen=True)
class Rule:
    """One cross-field rule on the object at ``scope`` (a dotted path under ``spec``)."""

    scope: str  # "" for spec itself, else e.g. "scaling"
    # evaluated with `self` bound to the object at scope; None: the operator's alone (OPERATOR_ONLY)
    cel: str | None
    message: str
    field: str  # field path reported to the user, relative to spec
    holds: Callable[[Any], bool]  # Python twin of `cel`, on the pydantic model at scope
    # Integer fields at scope, dotted for a nested one (always set where the rule fails: required,
    # defaulted, or tested with has() by the rule)
    # whose values the message ends with, "(minReplicas 12, maxReplicas 10)": a value the user did not
    # write (maxReplicas' default) is otherwise nowhere in the refusal.
    shown: tuple[str, ...] = ()

    def message_with_values(self, model: Any) -> str:
        """``message`` and the ``shown`` values, from the pydantic model at scope (as ``message_expression``
        says it from the object the API server validates)."""
        if not self.shown:
            return self.message
        values = model.model_dump(by_alias=True)

        def value(path: str) -> Any:  # a field of a nested object: "model.maxBatchSize"
            out: Any = values
            for part in path.split("."):
                out = out[part]
            return out

        return f"{self.message} ({', '.join(f'{f} {value(f)}' for f in self.shown)})"

    def message_expression(self) -> str | None:
        """The CEL ``messageExpression`` twin of ``message_with_values`` (None without ``shown``); where it
        fails to evaluate, the API server says ``message``. With the strings library's format(): the API
        server refuses a CRD whose message concatenates string(int) ("estimated messageExpression cost
        exceeds budget by factor of more than 100x": the estimate takes the string as unbounded)."""
        if not self.shown:
            return None
        text = f"{self.message.replace('%', '%%')} ({', '.join(f'{f} %d' for f in self.shown)})"
        return f"'{text}'.format([{', '.join(f'self.{f}' for f in self.shown)}])"


def _preferred_within_max(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    if b is None or not b.preferred_batch_sizes:
        return True
    return all(s <= spec.model.max_batch_size for s in b.preferred_batch_sizes)


def _tuner_preferred_within_max(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    if b is None or b.auto_tune is None:
        return True
    return all(s <= spec.model.max_batch_size for s in b.auto_tune.preferred_batch_sizes)


def _tuner_needs_batching(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    return b is None or b.auto_tune is None or not b.auto_tune.enabled or b.enabled


def _tuning_starts_within_bounds_delay(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    if b is None or b.auto_tune is None or not b.auto_tune.enabled or b.auto_tune.max_queue_delay_microseconds is None:
        return True
    return b.max_queue_delay_microseconds <= b.auto_tune.max_queue_delay_microseconds


def _tuning_starts_within_bounds_sizes(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    if b is None or b.auto_tune is None or not b.auto_tune.enabled or not b.auto_tune.preferred_batch_sizes:
        return True
    return all(s in b.auto_tune.preferred_batch_sizes for s in b.preferred_batch_sizes)


def timeout_outlasts(b: BatchingSpec | None, delay_us: int) -> bool:
    """No REJECT queue timeout, or one longer than the queue delay ``delay_us``: Triton holds a lone
    request for the whole delay, so a timeout within it rejects every request the batcher holds. The
    spec's own delay is held to it at admission (below), a tuned one where it is read
    (``status.tuned_batcher``)."""
    return b is None or not b.enabled or not b.queue_timeout_microseconds or b.timeout_action != "REJECT" \
        or b.queue_timeout_microseconds > delay_us


def _timeout_outlasts_delay(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    if b is None:
        return True
    delays = [b.max_queue_delay_microseconds]
    if b.auto_tune is not None and b.auto_tune.enabled and b.auto_tune.max_queue_delay_microseconds is not None:
        delays.append(b.auto_tune.max_queue_delay_microseconds)
    return timeout_outlasts(b, max(delays))


def _batching_needs_batch_dim(spec: InferenceServiceSpec) -> bool:
    b = spec.batching
    return b is None or not b.enabled or spec.model.max_batch_size > 0


def _warmup_needs_inputs(spec: InferenceServiceSpec) -> bool:
    return spec.model.warmup is None or bool(spec.model.inputs)


def _warmup_within_max(spec: InferenceServiceSpec) -> bool:
    w = spec.model.warmup
    if w is None:
        return True
    limit = max(spec.model.max_batch_size, 1)
    return all(s <= limit for s in w.batch_sizes)


def _precision_supported(spec: InferenceServiceSpec) -> bool:
    m = spec.model
    if m.precision == "fp32":
        return True
    if m.backend in ("onnxruntime", "tensorrt"):
        return True
    if m.backend == "tensorflow":
        return m.precision == "fp16"
    return False


def _tensorrt_precision_needs_gpu(spec: InferenceServiceSpec) -> bool:
    # TensorRT accelerators only exist on GPU instances: fp16/int8 on a CPU-only
    # service would render an optimization block Triton refuses to load.
    return spec.model.precision == "fp32" or spec.runtime.gpus > 0


def _ordered_queue_rejects(spec: InferenceServiceSpec) -> bool:
    # Triton refuses a dynamic batcher with preserve_ordering and a DELAY queue policy that has a timeout
    # ("Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true"), and the pod,
    # run with --exit-on-error, crash-loops (auditL D1, on a real tritonserver 2.51). The timeout is the
    # spec's, or the one the operator derives from targetP95Milliseconds.
    from tritonscale.api.spec import effective_queue_timeout_us

    b = spec.batching
    return b is None or not b.enabled or not b.preserve_ordering or b.timeout_action != "DELAY" \
        or effective_queue_timeout_us(spec) == 0


def _tensorrt_needs_gpu(spec: InferenceServiceSpec) -> bool:
    # The TensorRT backend loads only on GPU instances ("TensorRT backend supports only GPU device"): a
    # CPU-only service renders KIND_CPU, and its pods crash-loop (auditL D2).
    return spec.model.backend != "tensorrt" or spec.runtime.gpus > 0


def _grace_after_drain(spec: InferenceServiceSpec) -> bool:
    r = spec.runtime
    return (r.termination_grace_period_seconds is None
            or r.termination_grace_period_seconds >= min_grace_seconds(r.grpc_max_connection_age_seconds))


def _deadline_past_startup(spec: InferenceServiceSpec) -> bool:
    r = spec.runtime
    return r.progress_deadline_seconds is None or r.progress_deadline_seconds > r.startup_timeout_seconds


def _min_le_max(scaling: ScalingSpec) -> bool:
    return scaling.min_replicas <= scaling.max_replicas


def _fallback_within_bounds(scaling: ScalingSpec) -> bool:
    f = scaling.fallback_replicas
    return f is None or (scaling.min_replicas <= f <= scaling.max_replicas)


def _floor_within_max(scaling: ScalingSpec) -> bool:
    # Said once: with minReplicas above maxReplicas already, the minReplicas rule names the fault.
    return (scaling.min_replicas > scaling.max_replicas
            or scaling.min_replicas + scaling.warm_buffer <= scaling.max_replicas)


SPEC_RULES: tuple[Rule, ...] = (
    Rule(
        scope="",
        cel="!has(self.batching) || !has(self.batching.preferredBatchSizes) || "
        "self.batching.preferredBatchSizes.all(s, s <= self.model.maxBatchSize)",
        message="every batching.preferredBatchSizes entry must be <= model.maxBatchSize",
        field="batching.preferredBatchSizes",
        holds=_preferred_within_max,
        shown=("model.maxBatchSize",),
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !has(self.batching.autoTune) || "
        "!has(self.batching.autoTune.preferredBatchSizes) || "
        "self.batching.autoTune.preferredBatchSizes.all(s, s <= self.model.maxBatchSize)",
        message="every batching.autoTune.preferredBatchSizes entry must be <= model.maxBatchSize",
        field="batching.autoTune.preferredBatchSizes",
        holds=_tuner_preferred_within_max,
        shown=("model.maxBatchSize",),
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !has(self.batching.autoTune) || !has(self.batching.autoTune.enabled) || "
        "!self.batching.autoTune.enabled || !has(self.batching.enabled) || self.batching.enabled",
        message="batching.autoTune.enabled needs batching.enabled: there is no batcher to tune",
        field="batching.autoTune.enabled",
        holds=_tuner_needs_batching,
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !has(self.batching.autoTune) || !self.batching.autoTune.enabled || "
        "!has(self.batching.autoTune.maxQueueDelayMicroseconds) || "
        "self.batching.maxQueueDelayMicroseconds <= self.batching.autoTune.maxQueueDelayMicroseconds",
        message="batching.maxQueueDelayMicroseconds must be <= batching.autoTune.maxQueueDelayMicroseconds: "
        "tuning starts from the spec's values, which must lie within its bounds",
        field="batching.maxQueueDelayMicroseconds",
        holds=_tuning_starts_within_bounds_delay,
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !has(self.batching.autoTune) || !self.batching.autoTune.enabled || "
        "!has(self.batching.autoTune.preferredBatchSizes) || size(self.batching.autoTune.preferredBatchSizes) == 0 || "
        "!has(self.batching.preferredBatchSizes) || "
        "self.batching.preferredBatchSizes.all(s, s in self.batching.autoTune.preferredBatchSizes)",
        message="every batching.preferredBatchSizes entry must be one of batching.autoTune.preferredBatchSizes: "
        "tuning starts from the spec's values, which must lie within its bounds",
        field="batching.preferredBatchSizes",
        holds=_tuning_starts_within_bounds_sizes,
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !self.batching.enabled || !has(self.batching.queueTimeoutMicroseconds) || "
        "self.batching.queueTimeoutMicroseconds == 0 || self.batching.timeoutAction != 'REJECT' || "
        "(self.batching.queueTimeoutMicroseconds > self.batching.maxQueueDelayMicroseconds && "
        "(!has(self.batching.autoTune) || !self.batching.autoTune.enabled || "
        "!has(self.batching.autoTune.maxQueueDelayMicroseconds) || "
        "self.batching.queueTimeoutMicroseconds > self.batching.autoTune.maxQueueDelayMicroseconds))",
        message="batching.queueTimeoutMicroseconds must be more than the queue delay "
        "(batching.maxQueueDelayMicroseconds, and batching.autoTune.maxQueueDelayMicroseconds when tuning) "
        "with timeoutAction REJECT: Triton would reject every request the batcher holds for the whole delay, "
        "all of them at light load",
        field="batching.queueTimeoutMicroseconds",
        holds=_timeout_outlasts_delay,
    ),
    Rule(
        scope="",
        cel="!has(self.batching) || !self.batching.enabled || self.model.maxBatchSize > 0",
        message="dynamic batching needs model.maxBatchSize > 0 (Triton only batches models with a batch dimension)",
        field="batching.enabled",
        holds=_batching_needs_batch_dim,
    ),
    Rule(
        scope="",
        cel="!has(self.model.warmup) || (has(self.model.inputs) && size(self.model.inputs) > 0)",
        message="model.warmup needs model.inputs: Triton synthesises warmup requests from the declared inputs",
        field="model.warmup",
        holds=_warmup_needs_inputs,
    ),
    Rule(
        scope="",
        cel="!has(self.model.warmup) || self.model.warmup.batchSizes.all(s, "
        "s <= (self.model.maxBatchSize > 0 ? self.model.maxBatchSize : 1))",
        message="every model.warmup.batchSizes entry must be <= model.maxBatchSize (or 1 without batching)",
        field="model.warmup.batchSizes",
        holds=_warmup_within_max,
        shown=("model.maxBatchSize",),
    ),
    Rule(
        scope="",
        cel="self.model.precision == 'fp32' || self.model.backend in ['onnxruntime', 'tensorrt'] || "
        "(self.model.backend == 'tensorflow' && self.model.precision == 'fp16')",
        message="model.precision other than fp32 needs backend onnxruntime or tensorrt "
        "(tensorflow supports fp16 only; pytorch and python have no TensorRT accelerator in Triton)",
        field="model.precision",
        holds=_precision_supported,
    ),
    Rule(
        scope="",
        cel="self.model.precision == 'fp32' || !has(self.runtime) || self.runtime.gpus > 0",
        message="model.precision fp16/int8 uses TensorRT, which needs runtime.gpus >= 1",
        field="model.precision",
        holds=_tensorrt_precision_needs_gpu,
    ),
    Rule(
        scope="",
        cel=None,  # added in session 85: OPERATOR_ONLY
        message="model.backend tensorrt runs only on GPUs: it needs runtime.gpus >= 1 (Triton's TensorRT backend "
        "refuses a CPU instance, and the pods would crash-loop)",
        field="model.backend",
        holds=_tensorrt_needs_gpu,
    ),
    Rule(
        scope="",
        cel=None,  # added in session 85: OPERATOR_ONLY
        message="batching.timeoutAction DELAY cannot go with batching.preserveOrdering while a queue timeout is in "
        "force (batching.queueTimeoutMicroseconds, or the one derived from scaling.targetP95Milliseconds): Triton "
        "refuses the model and the pods would crash-loop; use timeoutAction REJECT, or queueTimeoutMicroseconds 0",
        field="batching.timeoutAction",
        holds=_ordered_queue_rejects,
    ),
    # Both on fields new in 0.4.0, unset in every older object: the rules hold on those (see OPERATOR_ONLY).
    Rule(
        scope="",
        cel="!has(self.runtime) || !has(self.runtime.terminationGracePeriodSeconds) || "
        "self.runtime.terminationGracePeriodSeconds >= "
        + min_grace_cel("self.runtime.grpcMaxConnectionAgeSeconds"),
        message="runtime.terminationGracePeriodSeconds must cover the preStop wait of the replica "
        f"({ENDPOINTS_LAG_S} s, plus runtime.grpcMaxConnectionAgeSeconds + 10% up to {MAX_DRAINED_AGE_S} s), "
        f"{KILL_MARGIN_S} s before the kill, and at least 1 s for tritonserver to finish its requests",
        shown=("runtime.terminationGracePeriodSeconds", "runtime.grpcMaxConnectionAgeSeconds"),
        field="runtime.terminationGracePeriodSeconds",
        holds=_grace_after_drain,
    ),
    Rule(
        scope="",
        cel="!has(self.runtime) || !has(self.runtime.progressDeadlineSeconds) || "
        "self.runtime.progressDeadlineSeconds > self.runtime.startupTimeoutSeconds",
        message="runtime.progressDeadlineSeconds must be longer than runtime.startupTimeoutSeconds: it counts the "
        "image pull and the download of the model as well as the load",
        shown=("runtime.progressDeadlineSeconds", "runtime.startupTimeoutSeconds"),
        field="runtime.progressDeadlineSeconds",
        holds=_deadline_past_startup,
    ),
)

SCALING_RULES: tuple[Rule, ...] = (
    Rule(
        scope="scaling",
        cel="self.minReplicas <= self.maxReplicas",
        message="scaling.minReplicas must be <= scaling.maxReplicas",
        shown=("minReplicas", "maxReplicas"),
        field="scaling.minReplicas",
        holds=_min_le_max,
    ),
    Rule(
        scope="scaling",
        cel="self.minReplicas > self.maxReplicas || self.minReplicas + self.warmBuffer <= self.maxReplicas",
        message="scaling.minReplicas + scaling.warmBuffer must be <= scaling.maxReplicas",
        shown=("minReplicas", "warmBuffer", "maxReplicas"),
        field="scaling.warmBuffer",
        holds=_floor_within_max,
    ),
    Rule(
        scope="scaling",
        cel="!has(self.fallbackReplicas) || "
        "(self.fallbackReplicas >= self.minReplicas && self.fallbackReplicas <= self.maxReplicas)",
        message="scaling.fallbackReplicas must lie between minReplicas and maxReplicas",
        shown=("fallbackReplicas", "minReplicas", "maxReplicas"),
        field="scaling.fallbackReplicas",
        holds=_fallback_within_bounds,
    ),
)

ALL_RULES: tuple[Rule, ...] = SPEC_RULES + SCALING_RULES
# The rules the API server enforces too (in the CRD), and the fields the operator's alone name.
CEL_RULES: tuple[Rule, ...] = tuple(r for r in ALL_RULES if r.cel is not None)
OPERATOR_ONLY_FIELDS: frozenset[str] = frozenset("spec." + r.field for r in ALL_RULES if r.cel is None)


def cel_block(rules: tuple[Rule, ...]) -> list[dict[str, str]]:
    """The ``x-kubernetes-validations`` list for a schema node."""
    out = []
    for r in rules:
        if r.cel is None:
            continue
        v = {"rule": r.cel, "message": r.message,
             "fieldPath": "." + r.field.split(".", 1)[1] if r.scope else "." + r.field}
        if (expression := r.message_expression()) is not None:
            v["messageExpression"] = expression
        out.append(v)
    return out
