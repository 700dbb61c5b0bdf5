"""The table of spec mutations and what the user must be told about each, shared by the
validation tests (tests/unit/test_api_validation.py), the CEL twins of the rules
(tests/unit/test_rules_cel.py, tests/unit/test_crd_agrees_with_operator.py) and the real API server
(tests/integration/test_crd_admission.py).

Every case starts from the python-cpu sample (python backend, gpus 0,
maxBatchSize 16, warmup [1, 16], preferred [4, 8, 16], replicas 1..4) and
changes a few dotted paths. ``RULE_CASES`` pass Pydantic and exercise the
cross-field rules of ``rules.py``; ``TYPE_CASES`` fail Pydantic first.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tritonscale.api.spec import MAX_POD_ANNOTATIONS_BYTES

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))
BASE_SAMPLE = REPO / "manifests" / "samples" / "python-cpu.yaml"

DELETE = object()  # sentinel: remove the key instead of setting it


@functools.cache
def _parsed_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_sample(path: Path = BASE_SAMPLE) -> dict[str, Any]:
    return copy.deepcopy(_parsed_yaml(path))


def mutate(spec: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``spec`` with each dotted path set to its value (or removed for DELETE)."""
    out = copy.deepcopy(spec)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(value)
    return out


def base_spec() -> dict[str, Any]:
    return load_sample()["spec"]


@dataclass(frozen=True)
class Case:
    id: str
    changes: dict[str, Any]
    problems: tuple[str, ...] = ()  # expected Problem.field values, in reporting order
    messages: tuple[str, ...] = field(default=())  # substrings expected in the joined messages

    def spec(self) -> dict[str, Any]:
        return mutate(base_spec(), self.changes)


# Prometheus base URLs, some good and some not: the CRD's rules (tests/unit/test_crd_agrees_with_operator.py,
# the real API server in tests/integration/test_crd_admission.py) and the chart
# (tests/install/test_chart_prometheus.py) must each take exactly the ones `prometheus_base_url` takes (a URL one
# of them passes and the operator refuses is found only later: an object refused in status, a crash loop after a
# clean install).
PROMETHEUS_URLS = (
    "http://prometheus.monitoring:9090", "https://prom.example.com/prefix/", "http://10.0.0.7:9090",
    "http://[fd00::7]:9090/p", "http://prom:65535", "http://prom:65536", "http://prom:00080", "http://prom.:9090",
    "http://-prom:9090", "https://prom:9090/a%20b", "ftp://prom:9090", "http://prom:9090/api/v1",
    "http://prom:0", "http://prom:00000", "http://prom:99999", "http://[::1]:0/", "http://u:0@prom:9090",
    "http://u:p@prom:0", "http://prom:9090/a:0", "http://prom:9090/api/v1/query/", "http://prom/api/v1/query_range",
    "http://prom:9090/api/v1x", "http://prom:9090/api/v1/series",
    # hosts in brackets: IPv6 only (auditE, session 84: the chart took an IPv4 one and ":::")
    "http://[1.2.3.4]:9090", "http://[:::]:1", "http://[1::2::3]:1", "http://[2001:db8::ffff:1.2.3.4]:9090",
    "http://[::]:9090", "http://[1:2:3:4:5:6:7:8:9]:1",
)


def _annotations_of_bytes(total: int) -> dict[str, str]:
    """Annotations whose keys and values add up to ``total`` bytes, each value within its bound."""
    out = {f"k{i}": "x" * 8000 for i in range(total // 8100)}
    used = sum(len(k) + len(v) for k, v in out.items())
    out["last"] = "x" * (total - used - len("last"))
    return out


# Cross-field cases: every spec here passes Pydantic, so only rules.py decides.
RULE_CASES: tuple[Case, ...] = (
    # --- scaling scope ---
    Case("min-gt-max", {"scaling.minReplicas": 5},  # the warmBuffer rule says nothing more then
         ("spec.scaling.minReplicas",), ("minReplicas must be <= scaling.maxReplicas",)),
    Case("min-eq-max", {"scaling.minReplicas": 4}),
    Case("min-plus-buffer-gt-max", {"scaling.minReplicas": 3, "scaling.warmBuffer": 2},
         ("spec.scaling.warmBuffer",), ("minReplicas + scaling.warmBuffer",)),
    Case("min-plus-buffer-eq-max", {"scaling.minReplicas": 3, "scaling.warmBuffer": 1}),
    Case("min-one-plus-buffer-gt-max", {"scaling.minReplicas": 1, "scaling.warmBuffer": 4},
         ("spec.scaling.warmBuffer",)),
    Case("fallback-above-max", {"scaling.fallbackReplicas": 5}, ("spec.scaling.fallbackReplicas",),
         ("fallbackReplicas must lie between",)),
    Case("fallback-below-min", {"scaling.minReplicas": 2, "scaling.fallbackReplicas": 1},
         ("spec.scaling.fallbackReplicas",)),
    Case("fallback-eq-min", {"scaling.minReplicas": 2, "scaling.fallbackReplicas": 2}),
    Case("fallback-eq-max", {"scaling.fallbackReplicas": 4}),
    Case("defaults-max-10-min-11", {"scaling.maxReplicas": DELETE, "scaling.minReplicas": 11},
         ("spec.scaling.minReplicas",)),
    # --- batching ---
    Case("preferred-gt-max-batch", {"batching.preferredBatchSizes": [4, 32]},
         ("spec.batching.preferredBatchSizes",), ("preferredBatchSizes entry must be <= model.maxBatchSize",)),
    Case("preferred-eq-max-batch", {"batching.preferredBatchSizes": [16]}),
    Case("preferred-empty", {"batching.preferredBatchSizes": []}),
    Case("preferred-checked-even-if-disabled", {"batching.enabled": False, "batching.preferredBatchSizes": [32]},
         ("spec.batching.preferredBatchSizes",)),
    Case("batching-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching.preferredBatchSizes": DELETE, "model.warmup.batchSizes": [1]},
         ("spec.batching.enabled",), ("dynamic batching needs model.maxBatchSize > 0",)),
    Case("empty-batching-block-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": {}, "model.warmup.batchSizes": [1]}, ("spec.batching.enabled",)),
    Case("batching-disabled-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": {"enabled": False}, "model.warmup.batchSizes": [1]}),
    Case("no-batching-block-with-max-batch-0",
         {"model.maxBatchSize": 0, "batching": DELETE, "model.warmup.batchSizes": [1]}),
    Case("autotune-enabled", {"batching.preferredBatchSizes": [8, 16],
                              "batching.autoTune": {"enabled": True, "maxQueueDelayMicroseconds": 20000,
                                                    "preferredBatchSizes": [8, 16]}}),
    Case("autotune-starts-above-its-delay-bound",
         {"batching.maxQueueDelayMicroseconds": 50000,
          "batching.autoTune": {"enabled": True, "maxQueueDelayMicroseconds": 1000}},
         ("spec.batching.maxQueueDelayMicroseconds",), ("must be <= batching.autoTune.maxQueueDelayMicroseconds",)),
    Case("autotune-off-may-start-above-its-delay-bound",
         {"batching.maxQueueDelayMicroseconds": 50000,
          "batching.autoTune": {"enabled": False, "maxQueueDelayMicroseconds": 1000}}),
    Case("autotune-starts-outside-its-sizes", {"batching.autoTune": {"enabled": True, "preferredBatchSizes": [8, 16]}},
         ("spec.batching.preferredBatchSizes",), ("must be one of batching.autoTune.preferredBatchSizes",)),
    Case("kubernetes-names-valid", {"runtime.serviceAccountName": "triton.reader",
                                    "runtime.priorityClassName": "serving-high",
                                    "runtime.gpuResource": "nvidia.com/mig-1g.10gb",
                                    "runtime.startupTimeoutSeconds": 3600,
                                    "runtime.imagePullSecrets": ["regcred", "ngc.io-key"],
                                    "runtime.nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                                             "pool": "", "kubernetes.io/arch": "amd64"},
                                    "runtime.podLabels": {"team": "search", "cost.example.com/center": "ml-42"},
                                    "runtime.podAnnotations": {"sidecar.istio.io/inject": "false",
                                                               "example.com/note": "any text: spaces, UPPER"}}),
    # at the bounds of Kubernetes' formats: a 253-character key prefix, 255 KiB of annotations, an image
    # with spaces only inside it (none is valid, but Kubernetes checks no more than the ends)
    Case("kubernetes-formats-at-their-bounds", {
        "runtime.podLabels": {"a" * 253 + "/x": "v"}, "runtime.nodeSelector": {"b" * 253 + "/y": ""},
        "runtime.podAnnotations": _annotations_of_bytes(MAX_POD_ANNOTATIONS_BYTES),
        "runtime.image": "registry.example.com/triton:25.08-py3"}),
    Case("storage-pvc-claim-253", {"model.storageUri": "pvc://" + "a" * 253 + "/m"}),
    Case("extra-args-of-other-flags", {"runtime.extraArgs": [
        "--log-verbose=1", "--http-port-like=1", "--model-repository=/extra", "--grpc-infer-allocation-pool-size=8",
        "--allow-metrics=true", "--http-port=8000", "--metrics-port 8002"]}),
    Case("tensor-names-with-other-control-characters",
         {"model.outputs": [{"name": "o\tp", "dataType": "FP32", "dims": [4]}]}),
    Case("autotune-no-sizes-permits-any", {"batching.preferredBatchSizes": [6, 12],
                                           "batching.autoTune": {"enabled": True}}),
    Case("timeout-within-delay", {"batching.queueTimeoutMicroseconds": 1000},
         ("spec.batching.queueTimeoutMicroseconds",), ("must be more than the queue delay",)),
    Case("timeout-equals-delay", {"batching.queueTimeoutMicroseconds": 2000},
         ("spec.batching.queueTimeoutMicroseconds",)),
    Case("timeout-just-outlasts-delay", {"batching.queueTimeoutMicroseconds": 2001}),
    Case("timeout-zero-is-none", {"batching.queueTimeoutMicroseconds": 0}),
    Case("timeout-within-delay-delay-action", {"batching.queueTimeoutMicroseconds": 1000,
                                               "batching.timeoutAction": "DELAY"}),
    Case("timeout-within-delay-batching-off", {"batching.queueTimeoutMicroseconds": 1000, "batching.enabled": False}),
    Case("timeout-within-tuner-delay-bound",
         {"batching.queueTimeoutMicroseconds": 10000,
          "batching.autoTune": {"enabled": True, "maxQueueDelayMicroseconds": 20000}},
         ("spec.batching.queueTimeoutMicroseconds",)),
    Case("timeout-within-tuner-delay-bound-tuner-off",
         {"batching.queueTimeoutMicroseconds": 10000,
          "batching.autoTune": {"enabled": False, "maxQueueDelayMicroseconds": 20000}}),
    Case("autotune-preferred-gt-max-batch", {"batching.preferredBatchSizes": [8],
                                             "batching.autoTune": {"enabled": True, "preferredBatchSizes": [8, 32]}},
         ("spec.batching.autoTune.preferredBatchSizes",),
         ("autoTune.preferredBatchSizes entry must be <= model.maxBatchSize",)),
    Case("autotune-without-batching", {"batching.enabled": False, "batching.autoTune": {"enabled": True}},
         ("spec.batching.autoTune.enabled",), ("autoTune.enabled needs batching.enabled",)),
    Case("autotune-off-without-batching", {"batching.enabled": False, "batching.autoTune": {"enabled": False}}),
    Case("max-batch-0-everything-wrong", {"model.maxBatchSize": 0},
         ("spec.batching.preferredBatchSizes", "spec.batching.enabled", "spec.model.warmup.batchSizes")),
    # --- warmup ---
    Case("warmup-without-inputs", {"model.inputs": DELETE}, ("spec.model.warmup",),
         ("model.warmup needs model.inputs",)),
    Case("warmup-with-empty-inputs", {"model.inputs": []}, ("spec.model.warmup",)),
    Case("no-warmup-no-inputs", {"model.inputs": DELETE, "model.warmup": DELETE}),
    Case("warmup-size-gt-max-batch", {"model.warmup.batchSizes": [1, 32]}, ("spec.model.warmup.batchSizes",),
         ("warmup.batchSizes entry must be <= model.maxBatchSize",)),
    Case("warmup-size-eq-max-batch", {"model.warmup.batchSizes": [16]}),
    Case("warmup-size-2-without-batching",
         {"model.maxBatchSize": 0, "batching": DELETE, "model.warmup.batchSizes": [2]},
         ("spec.model.warmup.batchSizes",)),
    # --- precision ---
    Case("fp16-pytorch", {"model.backend": "pytorch", "model.precision": "fp16", "runtime.gpus": 1},
         ("spec.model.precision",), ("pytorch and python have no TensorRT accelerator",)),
    Case("int8-python-gpu", {"model.precision": "int8", "runtime.gpus": 1}, ("spec.model.precision",)),
    Case("int8-tensorflow", {"model.backend": "tensorflow", "model.precision": "int8", "runtime.gpus": 1},
         ("spec.model.precision",), ("tensorflow supports fp16 only",)),
    Case("fp16-tensorflow", {"model.backend": "tensorflow", "model.precision": "fp16", "runtime.gpus": 1}),
    Case("int8-onnx", {"model.backend": "onnxruntime", "model.precision": "int8", "runtime.gpus": 1}),
    Case("fp16-tensorrt", {"model.backend": "tensorrt", "model.precision": "fp16", "runtime.gpus": 2}),
    Case("fp16-onnx-gpus-0", {"model.backend": "onnxruntime", "model.precision": "fp16", "runtime.gpus": 0},
         ("spec.model.precision",), ("needs runtime.gpus >= 1",)),
    Case("fp16-onnx-default-gpus", {"model.backend": "onnxruntime", "model.precision": "fp16", "runtime": DELETE}),
    Case("fp16-python-gpus-0", {"model.precision": "fp16"}, ("spec.model.precision", "spec.model.precision")),
    Case("fp32-pytorch-cpu", {"model.backend": "pytorch"}),
    # --- what Triton refuses to load (auditL, a real tritonserver 2.51): the pods would crash-loop ---
    Case("tensorrt-gpus-0", {"model.backend": "tensorrt"}, ("spec.model.backend",), ("runs only on GPUs",)),
    Case("tensorrt-gpus-1", {"model.backend": "tensorrt", "runtime.gpus": 1}),
    # --- shutdown: the preStop wait (5 s + the gRPC age + 10%, at most 60 s), 5 s of margin, 1 s for Triton ---
    Case("grace-at-its-least", {"runtime.terminationGracePeriodSeconds": 22}),  # age 10: 5 + 11 + 5 + 1
    Case("grace-short-of-the-wait", {"runtime.terminationGracePeriodSeconds": 21},
         ("spec.runtime.terminationGracePeriodSeconds",), ("must cover the preStop wait of the replica",)),
    Case("grace-with-no-age", {"runtime.terminationGracePeriodSeconds": 11, "runtime.grpcMaxConnectionAgeSeconds": 0}),
    Case("grace-short-with-no-age", {"runtime.terminationGracePeriodSeconds": 10,
                                     "runtime.grpcMaxConnectionAgeSeconds": 0},
         ("spec.runtime.terminationGracePeriodSeconds",)),
    Case("grace-with-a-long-age", {"runtime.terminationGracePeriodSeconds": 71,
                                   "runtime.grpcMaxConnectionAgeSeconds": 3600}),  # the wait stops at 60 s
    Case("grace-short-with-a-long-age", {"runtime.terminationGracePeriodSeconds": 70,
                                         "runtime.grpcMaxConnectionAgeSeconds": 55},
         ("spec.runtime.terminationGracePeriodSeconds",)),
    Case("grace-with-age-54", {"runtime.terminationGracePeriodSeconds": 71, "runtime.grpcMaxConnectionAgeSeconds": 54}),
    Case("grace-short-with-age-54", {"runtime.terminationGracePeriodSeconds": 70,
                                     "runtime.grpcMaxConnectionAgeSeconds": 54},
         ("spec.runtime.terminationGracePeriodSeconds",)),
    Case("deadline-past-startup", {"runtime.progressDeadlineSeconds": 601}),
    Case("deadline-at-startup", {"runtime.progressDeadlineSeconds": 600},
         ("spec.runtime.progressDeadlineSeconds",), ("must be longer than runtime.startupTimeoutSeconds",)),
    Case("deadline-with-a-long-startup", {"runtime.progressDeadlineSeconds": 3600,
                                          "runtime.startupTimeoutSeconds": 3600},
         ("spec.runtime.progressDeadlineSeconds",)),
    Case("ordered-delay-with-derived-timeout", {"batching.preserveOrdering": True, "batching.timeoutAction": "DELAY"},
         ("spec.batching.timeoutAction",), ("cannot go with batching.preserveOrdering",)),
    Case("ordered-delay-with-timeout", {"batching.preserveOrdering": True, "batching.timeoutAction": "DELAY",
                                        "batching.queueTimeoutMicroseconds": 5000, "scaling.targetP95Milliseconds":
                                        DELETE}, ("spec.batching.timeoutAction",)),
    Case("ordered-delay-timeout-0", {"batching.preserveOrdering": True, "batching.timeoutAction": "DELAY",
                                     "batching.queueTimeoutMicroseconds": 0}),
    Case("ordered-delay-no-target", {"batching.preserveOrdering": True, "batching.timeoutAction": "DELAY",
                                     "scaling.targetP95Milliseconds": DELETE}),
    Case("ordered-reject", {"batching.preserveOrdering": True}),
    Case("unordered-delay", {"batching.timeoutAction": "DELAY"}),
    Case("ordered-delay-batching-off", {"batching.preserveOrdering": True, "batching.timeoutAction": "DELAY",
                                        "batching.enabled": False}),
    # --- several at once: problems come in rules.py order, spec rules before scaling rules ---
    Case("everything-at-once",
         {"model.precision": "int8", "model.warmup.batchSizes": [64], "scaling.minReplicas": 9,
          "scaling.fallbackReplicas": 0},
         ("spec.model.warmup.batchSizes", "spec.model.precision", "spec.model.precision",
          "spec.scaling.minReplicas", "spec.scaling.fallbackReplicas")),
)

# Type and range errors: Pydantic rejects these before any rule runs.
TYPE_CASES: tuple[Case, ...] = (
    Case("max-batch-not-int", {"model.maxBatchSize": "lots"}, ("spec.model.maxBatchSize",), ("valid integer",)),
    Case("max-batch-too-big", {"model.maxBatchSize": 4097}, ("spec.model.maxBatchSize",)),
    Case("max-batch-negative", {"model.maxBatchSize": -1}, ("spec.model.maxBatchSize",)),
    Case("target-negative", {"scaling.targetP95Milliseconds": -3}, ("spec.scaling.targetP95Milliseconds",),
         ("greater than 0",)),
    Case("min-zero", {"scaling.minReplicas": 0}, ("spec.scaling.minReplicas",), ("greater than or equal to 1",)),
    Case("target-zero", {"scaling.targetP95Milliseconds": 0}, ("spec.scaling.targetP95Milliseconds",)),
    Case("unknown-scaling-field", {"scaling.minReplica": 2}, ("spec.scaling.minReplica",), ("unknown field",)),
    Case("unknown-top-level-field", {"autoscaling": {}}, ("spec.autoscaling",), ("unknown field",)),
    Case("unknown-tensor-field", {"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [4], "shape": [4]}]},
         ("spec.model.inputs[0].shape",)),
    Case("storage-http", {"model.storageUri": "http://x"}, ("spec.model.storageUri",), ("s3://BUCKET/PATH",)),
    Case("storage-pvc-without-path", {"model.storageUri": "pvc://models"}, ("spec.model.storageUri",)),
    Case("storage-pvc-uppercase-claim", {"model.storageUri": "pvc://Models/linear"}, ("spec.model.storageUri",)),
    Case("storage-pvc-claim-dot-edge", {"model.storageUri": "pvc://models./linear"}, ("spec.model.storageUri",)),
    Case("storage-s3-no-bucket", {"model.storageUri": "s3:///path"}, ("spec.model.storageUri",)),
    Case("storage-pvc-dotdot", {"model.storageUri": "pvc://models/../../etc"}, ("spec.model.storageUri",),
         ("'..' segments",)),
    Case("storage-s3-dotdot-last", {"model.storageUri": "s3://bucket/linear/.."}, ("spec.model.storageUri",),
         ("'..' segments",)),
    # \S takes control characters; the fetch container's script got them (session 104's CLI fuzzing)
    Case("storage-control-character", {"model.storageUri": "pvc://models/lin\x01ear"}, ("spec.model.storageUri",),
         ("control characters",)),
    Case("storage-s3-delete-character", {"model.storageUri": "s3://bucket/linear\x7f"}, ("spec.model.storageUri",),
         ("control characters",)),
    Case("model-missing", {"model": DELETE}, ("spec.model",), ("required field is missing",)),
    Case("backend-missing", {"model.backend": DELETE}, ("spec.model.backend",), ("required field is missing",)),
    Case("backend-unknown", {"model.backend": "jax"}, ("spec.model.backend",)),
    Case("precision-unknown", {"model.precision": "fp8"}, ("spec.model.precision",)),
    Case("dims-zero", {"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [0]}]},
         ("spec.model.inputs[0].dims",), ("positive or -1",)),
    Case("dims-empty", {"model.outputs": [{"name": "y", "dataType": "FP32", "dims": []}]},
         ("spec.model.outputs[0].dims",), ("at least 1 item",)),
    Case("input-names-twice", {"model.inputs": [{"name": "x", "dataType": "FP32", "dims": [4]},
                                                {"name": "x", "dataType": "FP32", "dims": [2]}]},
         ("spec.model.inputs",), ("tensor names must be unique: 'x' more than once",)),
    Case("max-queue-size-over-uint32", {"batching.maxQueueSize": 2**32}, ("spec.batching.maxQueueSize",)),
    Case("model-name-dot", {"model.name": "."}, ("spec.model.name",)),
    Case("model-name-dotdot", {"model.name": ".."}, ("spec.model.name",)),
    Case("model-name-slash", {"model.name": "a/b"}, ("spec.model.name",)),
    Case("data-type-with-prefix", {"model.outputs": [{"name": "y", "dataType": "TYPE_FP32", "dims": [4]}]},
         ("spec.model.outputs[0].dataType",)),
    Case("warmup-size-zero", {"model.warmup.batchSizes": [0]}, ("spec.model.warmup.batchSizes",)),
    Case("warmup-empty", {"model.warmup.batchSizes": []}, ("spec.model.warmup.batchSizes",)),
    Case("preferred-zero", {"batching.preferredBatchSizes": [0, 4]}, ("spec.batching.preferredBatchSizes",)),
    Case("autotune-preferred-zero", {"batching.autoTune": {"preferredBatchSizes": [0]}},
         ("spec.batching.autoTune.preferredBatchSizes",)),
    Case("autotune-delay-negative", {"batching.autoTune": {"maxQueueDelayMicroseconds": -1}},
         ("spec.batching.autoTune.maxQueueDelayMicroseconds",)),
    Case("autotune-enabled-not-bool", {"batching.autoTune": {"enabled": "sometimes"}},
         ("spec.batching.autoTune.enabled",)),
    Case("timeout-action-unknown", {"batching.timeoutAction": "DROP"}, ("spec.batching.timeoutAction",)),
    # 2**63 overflows the API server's int64; the bound, 2**53 - 1, is the largest a JSON number carries exactly
    Case("timeout-past-int64", {"batching.queueTimeoutMicroseconds": 2**63},
         ("spec.batching.queueTimeoutMicroseconds",)),
    Case("timeout-past-json-int", {"batching.queueTimeoutMicroseconds": 2**53},
         ("spec.batching.queueTimeoutMicroseconds",)),
    Case("gpus-too-many", {"runtime.gpus": 17}, ("spec.runtime.gpus",)),
    Case("grpc-connection-age-negative", {"runtime.grpcMaxConnectionAgeSeconds": -1},
         ("spec.runtime.grpcMaxConnectionAgeSeconds",)),
    Case("grpc-connection-age-past-a-day", {"runtime.grpcMaxConnectionAgeSeconds": 86401},
         ("spec.runtime.grpcMaxConnectionAgeSeconds",)),
    # Kubernetes' name formats, refused at apply time rather than as a Deployment the API server refuses
    Case("service-account-uppercase", {"runtime.serviceAccountName": "Bad_Name"},
         ("spec.runtime.serviceAccountName",)),
    Case("gpu-resource-without-domain", {"runtime.gpuResource": "gpu"}, ("spec.runtime.gpuResource",),
         ("extended resource name",)),
    Case("gpu-resource-kubernetes-domain", {"runtime.gpuResource": "requests.kubernetes.io/gpu"},
         ("spec.runtime.gpuResource",), ("kubernetes.io domain",)),
    Case("shm-size-zero", {"runtime.shmSize": "0Gi"}, ("spec.runtime.shmSize",), ("must be above 0",)),
    Case("shm-size-negative", {"runtime.shmSize": "-1Gi"}, ("spec.runtime.shmSize",)),
    Case("shm-size-spaced", {"runtime.shmSize": "1.5 Gi"}, ("spec.runtime.shmSize",), ("Kubernetes quantity",)),
    Case("shm-size-two-points", {"runtime.shmSize": "1.2.3Gi"}, ("spec.runtime.shmSize",)),
    Case("grace-zero", {"runtime.terminationGracePeriodSeconds": 0}, ("spec.runtime.terminationGracePeriodSeconds",)),
    Case("deadline-zero", {"runtime.progressDeadlineSeconds": 0}, ("spec.runtime.progressDeadlineSeconds",)),
    Case("startup-timeout-below-one-check", {"runtime.startupTimeoutSeconds": 4},
         ("spec.runtime.startupTimeoutSeconds",)),
    Case("startup-timeout-above-a-day", {"runtime.startupTimeoutSeconds": 86401},
         ("spec.runtime.startupTimeoutSeconds",)),
    Case("priority-class-uppercase", {"runtime.priorityClassName": "Serving_High"},
         ("spec.runtime.priorityClassName",)),
    Case("pull-secret-bad", {"runtime.imagePullSecrets": ["regcred", "Reg Cred"]}, ("spec.runtime.imagePullSecrets",)),
    Case("node-selector-key-bad", {"runtime.nodeSelector": {"bad key!": "x"}}, ("spec.runtime.nodeSelector",)),
    Case("node-selector-value-bad", {"runtime.nodeSelector": {"nvidia.com/gpu.product": "A100 80GB"}},
         ("spec.runtime.nodeSelector",)),
    # the pods' own labels and annotations: Kubernetes' formats, and none the operator sets itself
    Case("pod-label-value-bad", {"runtime.podLabels": {"team": "search team"}}, ("spec.runtime.podLabels",)),
    Case("pod-label-selector-key", {"runtime.podLabels": {"tritonscale.io/inferenceservice": "other"}},
         ("spec.runtime.podLabels",), ("the operator's own",)),
    Case("pod-label-instance-key", {"runtime.podLabels": {"app.kubernetes.io/instance": "other"}},
         ("spec.runtime.podLabels",), ("the operator's own",)),
    Case("pod-annotation-key-bad", {"runtime.podAnnotations": {"bad key!": "x"}}, ("spec.runtime.podAnnotations",)),
    Case("pod-annotation-config-hash", {"runtime.podAnnotations": {"tritonscale.io/config-hash": "0"}},
         ("spec.runtime.podAnnotations",), ("the operator's own",)),
    # a key's prefix is a subdomain of at most 253 characters (the whole key's bound said nothing of it)
    Case("pod-label-key-prefix-254", {"runtime.podLabels": {"a" * 254 + "/x": "v"}}, ("spec.runtime.podLabels",),
         ("at most 253",)),
    Case("node-selector-key-prefix-254", {"runtime.nodeSelector": {"a" * 254 + "/x": "v"}},
         ("spec.runtime.nodeSelector",)),
    Case("pod-annotation-key-prefix-254", {"runtime.podAnnotations": {"a" * 254 + "/x": "v"}},
         ("spec.runtime.podAnnotations",)),
    # 256 KiB of annotations in all on a pod (each value within its own bound)
    Case("pod-annotations-too-large", {"runtime.podAnnotations": {f"k{i}": "x" * 8000 for i in range(40)}},
         ("spec.runtime.podAnnotations",), ("add up to at most",)),
    # the API server refuses these only when it makes the pods: the rollout would stop half made
    Case("image-final-newline", {"runtime.image": "nvcr.io/nvidia/tritonserver:25.08-py3\n"},
         ("spec.runtime.image",), ("whitespace",)),
    Case("image-leading-space", {"runtime.image": " nvcr.io/nvidia/tritonserver:25.08-py3"}, ("spec.runtime.image",)),
    Case("image-trailing-nbsp", {"runtime.image": "nvcr.io/nvidia/tritonserver:25.08-py3\u00a0"},
         ("spec.runtime.image",)),
    Case("fetch-image-final-newline", {"runtime.fetchImage": "registry.corp/aws-cli:2.17.0\n"},
         ("spec.runtime.fetchImage",), ("whitespace",)),
    Case("fetch-image-empty", {"runtime.fetchImage": ""}, ("spec.runtime.fetchImage",)),
    # urllib reads the host after the @, urllib3 (the client) before the backslash: refused outright
    Case("prometheus-url-backslash", {"scaling.prometheus.url": "http://127.0.0.1:8999\\@prom.monitoring:9090"},
         ("spec.scaling.prometheus.url",)),
    Case("storage-pvc-claim-254", {"model.storageUri": "pvc://" + "a" * 254 + "/m"}, ("spec.model.storageUri",),
         ("at most 253",)),
    # flags the operator sets itself (a later one wins in tritonserver: probes on the old port never pass)
    Case("extra-args-http-port", {"runtime.extraArgs": ["--log-verbose=1", "--http-port=9000"]},
         ("spec.runtime.extraArgs",), ("other ports than the operator",)),
    Case("extra-args-metrics-port-two-words", {"runtime.extraArgs": ["--metrics-port 9002"]},
         ("spec.runtime.extraArgs",)),
    Case("extra-args-grpc-port-two-arguments", {"runtime.extraArgs": ["--grpc-port", "8001"]},
         ("spec.runtime.extraArgs",)),
    Case("extra-args-too-many", {"runtime.extraArgs": ["--log-verbose=1"] * 257}, ("spec.runtime.extraArgs",)),
    # Triton reads tensor names as C strings
    Case("output-name-nul", {"model.outputs": [{"name": "o\x00", "dataType": "FP32", "dims": [4]}]},
         ("spec.model.outputs[0].name",), ("NUL",)),
    Case("input-name-nul", {"model.inputs": [{"name": "a\x00b", "dataType": "FP32", "dims": [4]}]},
         ("spec.model.inputs[0].name",)),
    Case("prometheus-url-unclosed-ipv6", {"scaling.prometheus": {"url": "http://[::1"}},
         ("spec.scaling.prometheus.url",)),
    Case("prometheus-url-percent-host", {"scaling.prometheus": {"url": "http://%zz"}},
         ("spec.scaling.prometheus.url",)),
    Case("prometheus-url-query", {"scaling.prometheus": {"url": "http://prom:9090?x=1"}},
         ("spec.scaling.prometheus.url",)),
    Case("prometheus-url-too-long", {"scaling.prometheus": {"url": "http://prom:9090/" + "a" * 2048}},
         ("spec.scaling.prometheus.url",)),
    Case("storage-uri-final-newline", {"model.storageUri": "s3://bucket/m\n"}, ("spec.model.storageUri",)),
    Case("max-replicas-zero", {"scaling.maxReplicas": 0}, ("spec.scaling.maxReplicas",)),
    Case("tolerance-above-one", {"scaling.tolerance": 1.5}, ("spec.scaling.tolerance",)),
    Case("prometheus-url-not-http", {"scaling.prometheus": {"url": "prom:9090"}}, ("spec.scaling.prometheus.url",)),
    Case("scale-down-step-zero", {"scaling.scaleDown.maxStep": 0}, ("spec.scaling.scaleDown.maxStep",)),
    Case("two-type-errors", {"model.maxBatchSize": "lots", "scaling.minReplicas": -1},
         ("spec.model.maxBatchSize", "spec.scaling.minReplicas")),
)
