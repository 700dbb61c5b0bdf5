"""The spec's runtime block (RuntimeSpec): how Triton runs -- image, GPUs, resources, pod placement
and metadata, extra flags, the startup, shutdown and rollout budgets.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes.utils import parse_quantity
from pydantic import Field, field_validator
from pydantic.json_schema import JsonDict

from tritonscale.api.names import DNS1123_SUBDOMAIN, is_label_key
from tritonscale.api.shutdown import (
    ENDPOINTS_LAG_S,
    KILL_MARGIN_S,
    MAX_DRAINED_AGE_S,
    TRITON_EXIT_TIMEOUT_S,
)
from tritonscale.api.spec_base import (
    DEFAULT_GRPC_MAX_CONNECTION_AGE_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_TRITON_IMAGE,
    GPU_RESOURCE,
    JSON_INT_MAX,
    LABEL,
    PULL_AND_FETCH_S,
    STARTUP_PROBE_PERIOD_S,
    TRITON_IMAGE_REPOSITORY,
    _free_form,
    _Model,
)
from tritonscale.api.spec_formats import (
    _ANNOTATION_KEY_MESSAGE,
    _ANNOTATIONS_SIZE_MESSAGE,
    _EXTENDED_RESOURCE,
    _LABEL_MAP_RULE,
    _POD_ANNOTATIONS_RULES,
    _POD_LABELS_RULES,
    _RESERVED_ANNOTATION_MESSAGE,
    _RESERVED_MESSAGE,
    _SIZE,
    _SUBDOMAIN,
    MAX_ANNOTATION_VALUE,
    MAX_NODE_SELECTOR,
    MAX_POD_ANNOTATIONS_BYTES,
    MAX_POD_METADATA,
    MAX_PULL_SECRETS,
    OPERATOR_POD_LABELS,
    OPERATOR_PREFIX,
    _label_map,
)

# A resource quantity as the API server parses it (its own error message gives this expression);
# parse_quantity, which gives the value, is more lenient (it accepts "1.5 Gi").
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


def _string_map(description: str, max_value: int, rules: list[Any]) -> Any:
    """A map of strings on the pods (labels, annotations): bounded, as the CRD's rules iterate it."""
    return Field(default_factory=dict, max_length=MAX_POD_METADATA, description=description,
                 json_schema_extra={"maxProperties": MAX_POD_METADATA,
                                    "additionalProperties": {"type": "string", "maxLength": max_value},
                                    "x-kubernetes-validations": rules})


# What Go's strings.TrimSpace trims (unicode.IsSpace), as CEL's trim() does. The API server checks a
# container's image for it only when it creates a pod, not in a Deployment's template: an image with a
# final newline (a YAML block scalar, `image: |`) was admitted and applied, and its ReplicaSet then
# made no pods.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# The ports the operator gives tritonserver (render.triton_containers: Triton's defaults) and relies on:
# the probes and the Service use the HTTP and gRPC ports, Prometheus scrapes the metrics port. A later
# flag wins in tritonserver (checked with the pytriton build: --http-port=18000 ... --http-port=19000
# served HTTP on 19000), so another port in extraArgs left the pods never ready. The same port again is
# harmless; as two arguments ("--http-port", "8000") the value is not seen, and the flag is refused.
# (--model-repository may be given again: it adds a repository.)
OPERATOR_PORTS = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": 8002}
_OPERATOR_PORTS_TEXT = ", ".join(f"{f}={v}" for f, v in OPERATOR_PORTS.items())
_OPERATOR_FLAGS_MESSAGE = (f"may not set other ports than the operator's ({_OPERATOR_PORTS_TEXT}): the probes, the "
                           f"Service and the metrics scrape use them")
# The CRD bounds the list and its items: its rule iterates them (the API server estimates the cost).
MAX_EXTRA_ARGS = 256
MAX_EXTRA_ARG = 4096
_IMAGE_SPACE_MESSAGE = "must not begin or end with whitespace (Kubernetes refuses such an image when it makes the pods)"
_TRIMMED_IMAGE: JsonDict = {"x-kubernetes-validations": [{"rule": "self == self.trim()",
                                                          "message": _IMAGE_SPACE_MESSAGE}]}


class RuntimeSpec(_Model):
    image: str = Field(default=DEFAULT_TRITON_IMAGE, min_length=1, description="Triton server image.",
                       json_schema_extra=_TRIMMED_IMAGE)
    gpus: int = Field(
        default=1, ge=0, le=16, description="GPUs per replica: the limit of runtime.gpuResource (nvidia.com/gpu); 0 "
        "runs CPU instances (KIND_CPU). model.backend tensorrt needs at least 1.",
    )
    gpu_resource: str = Field(
        default=GPU_RESOURCE, max_length=317, json_schema_extra=_EXTENDED_RESOURCE.schema(),
        description="The extended resource runtime.gpus counts: nvidia.com/gpu (whole GPUs, or MIG slices under the "
        "device plugin's single strategy), a MIG profile under its mixed strategy (nvidia.com/mig-1g.10gb), or "
        "time-sliced GPUs the plugin renamed (nvidia.com/gpu.shared). Triton sees each as a GPU: KIND_GPU. A "
        "change rolls the pods and forgets the learned model speed.",
    )
    fetch_image: str | None = Field(
        default=None, min_length=1, max_length=1024,
        description="Image of the init container that puts the model in place: for s3:// it runs `aws s3 cp`, for "
        "gs:// `gcloud storage cp`, for pvc:// /bin/sh and ln. Unset: amazon/aws-cli:2.17.0, "
        "gcr.io/google.com/cloudsdktool/google-cloud-cli:stable and busybox:1.36. Set it to a mirror (an "
        "air-gapped registry, an allow-listed one) or a digest. A change rolls the pods.",
        json_schema_extra=_TRIMMED_IMAGE)
    resources: dict[str, Any] = _free_form(
        "Container resources (requests/limits), merged with the GPU limit. The model-fetch init container gets "
        "the same cpu, memory and ephemeral-storage (a ResourceQuota may require them of every container).")
    node_selector: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR, description="Pod nodeSelector.",
        json_schema_extra={"maxProperties": MAX_NODE_SELECTOR,
                           "additionalProperties": {"type": "string", "maxLength": 63},
                           "x-kubernetes-validations": [_LABEL_MAP_RULE]})
    pod_labels: dict[str, str] = _string_map(
        "Labels added to the Triton pods (cost allocation, policy selectors). The InferenceService's own labels "
        "are not copied. A change rolls the pods.", 63, _POD_LABELS_RULES)
    pod_annotations: dict[str, str] = _string_map(
        "Annotations added to the Triton pods (e.g. sidecar.istio.io/inject). The InferenceService's own "
        "annotations are not copied. A change rolls the pods.", MAX_ANNOTATION_VALUE, _POD_ANNOTATIONS_RULES)
    tolerations: list[dict[str, Any]] = _free_form("Pod tolerations, e.g. for nvidia.com/gpu taints.", array=True)
    affinity: dict[str, Any] = _free_form(
        "Pod affinity (a Kubernetes Affinity: nodeAffinity, podAffinity, podAntiAffinity), e.g. node affinity "
        "for a GPU product label. A change rolls the pods; a change of nodeAffinity also forgets the learned "
        "model speed, as one of nodeSelector does.")
    topology_spread_constraints: list[dict[str, Any]] = _free_form(
        "Pod topologySpreadConstraints, e.g. {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, "
        "whenUnsatisfiable: ScheduleAnyway} so the warm floor does not sit in one zone or on one node. A "
        f"constraint without labelSelector is given the fleet's own ({LABEL}: NAME), so it counts this "
        "InferenceService's pods. A change rolls the pods.", array=True)
    env: list[dict[str, Any]] = _free_form(
        "Extra env (Kubernetes EnvVar objects) for the triton container and the model-fetch init container "
        "(e.g. storage credentials).", array=True)
    extra_args: list[str] = Field(
        default_factory=list, max_length=MAX_EXTRA_ARGS, description="Extra tritonserver flags, appended last. "
        f"Not other ports than the operator's: {_OPERATOR_PORTS_TEXT}.",
        json_schema_extra={"items": {"type": "string", "maxLength": MAX_EXTRA_ARG}, "x-kubernetes-validations": [
            # startsWith and ==, not matches: the API server's cost estimate of six regexes over 256 items of
            # 4096 characters went past its budget
            {"rule": "self.all(a, " + " && ".join(
                f"!((a == '{f}' || a.startsWith('{f}=') || a.startsWith('{f} ')) && a != '{f}={v}' && a != '{f} {v}')"
                for f, v in OPERATOR_PORTS.items()) + ")",
             "message": _OPERATOR_FLAGS_MESSAGE}]})
    image_pull_secrets: list[str] = Field(
        default_factory=list, max_length=MAX_PULL_SECRETS, description="Names of image pull Secrets.",
        json_schema_extra={"items": {"type": "string", "maxLength": 253}, "x-kubernetes-validations": [
            {"rule": f"self.all(s, s.matches(r'{DNS1123_SUBDOMAIN.pattern}'))",
             "message": f"each {_SUBDOMAIN.message}"}]})
    service_account_name: str | None = Field(
        default=None, max_length=253, json_schema_extra=_SUBDOMAIN.schema(),
        description="ServiceAccount for the pods (e.g. with workload identity for s3/gs).",
    )
    security_context: dict[str, Any] = _free_form(
        "Pod securityContext (a Kubernetes PodSecurityContext), over the default seccompProfile RuntimeDefault. "
        "A namespace at the restricted Pod Security level also wants runAsNonRoot: true, and NGC Triton images "
        "start as root: e.g. {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000} (their triton-server user).")
    startup_timeout_seconds: int = Field(
        default=DEFAULT_STARTUP_TIMEOUT_S, ge=STARTUP_PROBE_PERIOD_S, le=86400,
        description="How long tritonserver may take to load and warm up the model before the kubelet restarts it "
        f"(the startup probe's budget, checked every {STARTUP_PROBE_PERIOD_S} s). The init container's download "
        "is not counted. Raise it for a model whose load (a large TensorRT engine) takes longer. Unless "
        "runtime.progressDeadlineSeconds is set, the Deployment's progressDeadlineSeconds is this plus 600 s for "
        "the image pull and the download. A change rolls the pods.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, json_schema_extra=_SUBDOMAIN.schema(),
        description="PriorityClass of the pods. With one above the cluster's batch work, the scheduler preempts "
        "lower-priority pods for a replica that finds no free GPU, so a burst's scale-up and the warm floor are "
        "not left Pending behind training jobs. A PriorityClass that does not exist leaves the pods uncreated "
        "(Ready=False, PodsNotCreated). A change rolls the pods.",
    )
    response_cache_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024 * 1024, le=JSON_INT_MAX,
        description="Size of Triton's local response cache, used when model.responseCache is true.",
    )
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=1, le=86400,
        description="Seconds a replica has to stop (the pod's terminationGracePeriodSeconds). It first keeps "
        f"serving while clients move away: a preStop wait of {ENDPOINTS_LAG_S} s for the endpoints to update, "
        "plus one runtime.grpcMaxConnectionAgeSeconds (+10%, at most "
        f"{MAX_DRAINED_AGE_S} s) for gRPC clients to reconnect elsewhere. Then tritonserver finishes the "
        "requests it holds, and refuses new ones, until its exit timeout (--exit-timeout-secs, rendered as "
        f"the rest less {KILL_MARGIN_S} s before the kubelet's SIGKILL). Unset: the wait plus Triton's "
        f"exit timeout (--exit-timeout-secs in runtime.extraArgs, else {TRITON_EXIT_TIMEOUT_S} s) plus "
        f"{KILL_MARGIN_S} s (51 s at the defaults). "
        "Raise it for requests that run longer. A change rolls the pods.",
    )
    shm_size: str = Field(
        default="1Gi", min_length=1, max_length=64,
        description="Size of the pods' /dev/shm (a memory-backed emptyDir's sizeLimit), a Kubernetes quantity: "
        "Triton's python backend and its shared-memory requests live there. Raise it for a python backend that "
        "passes large tensors (an LLM in vLLM) or for NCCL across several GPUs; it counts against the "
        "container's memory limit. A change rolls the pods.",
        json_schema_extra=_SIZE.schema())
    progress_deadline_seconds: int | None = Field(
        default=None, ge=1, le=7 * 86400,
        description="Seconds a rollout's new pods may take to become ready before the rollout is reported "
        "stuck (the Deployment's progressDeadlineSeconds; Ready=False RolloutStuck, and the batching tuner "
        "puts back the settings it tried). It counts the image pull and the model's download as well as "
        "the load and warmup, so it must be longer than runtime.startupTimeoutSeconds. Unset: "
        "startupTimeoutSeconds plus Kubernetes' default 600 s for the pull and the download. Raise it for a "
        "large image or model.",
    )
    grpc_max_connection_age_seconds: int = Field(
        default=DEFAULT_GRPC_MAX_CONNECTION_AGE_S, ge=0, le=86400,
        description="Triton closes each gRPC connection at this age (--grpc-max-connection-age, with gRPC's "
        "+-10% jitter; requests in flight finish), and the client reconnects through the Service, where "
        "kube-proxy picks a replica. The Service balances connections, not requests, so without it a gRPC "
        "client stays on the replicas it first reached and new replicas get none of its traffic. 0 leaves "
        "connections open (a mesh that balances each request). Not rendered for "
        f"{TRITON_IMAGE_REPOSITORY} tags before 24.01, which lack the flag.",
    )

    @property
    def progress_deadline(self) -> int:
        """The Deployment's progressDeadlineSeconds."""
        if self.progress_deadline_seconds is not None:
            return self.progress_deadline_seconds
        return self.startup_timeout_seconds + PULL_AND_FETCH_S

    @field_validator("shm_size")
    @classmethod
    def _shm_size(cls, v: str) -> str:
        _SIZE.check(v)
        try:
            parse_quantity(v)
        except (ValueError, TypeError):
            raise ValueError(_SIZE.message) from None
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, v: list[str]) -> list[str]:
        for arg in v:
            if len(arg) > MAX_EXTRA_ARG:
                raise ValueError(f"each at most {MAX_EXTRA_ARG} characters")
            if any((arg == f or arg.startswith((f"{f}=", f"{f} "))) and arg not in (f"{f}={v}", f"{f} {v}")
                   for f, v in OPERATOR_PORTS.items()):
                raise ValueError(f"{arg[:60]!r}: {_OPERATOR_FLAGS_MESSAGE}")
        return v

    @field_validator("image", "fetch_image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and v != v.strip(GO_SPACE):
            raise ValueError(_IMAGE_SPACE_MESSAGE)
        return v

    @field_validator("gpu_resource")
    @classmethod
    def _gpu_resource(cls, v: str) -> str:
        return _EXTENDED_RESOURCE.check(v) or v

    @field_validator("service_account_name", "priority_class_name")
    @classmethod
    def _subdomain(cls, v: str | None) -> str | None:
        return _SUBDOMAIN.check(v)

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
                raise ValueError(f"each {_SUBDOMAIN.message} of at most 253 characters: not {name[:60]!r}")
        return v

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, v: dict[str, str]) -> dict[str, str]:
        return _label_map(v)

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in _label_map(v):
            if key.startswith(OPERATOR_PREFIX) or key in OPERATOR_POD_LABELS:
                raise ValueError(f"{key!r}: {_RESERVED_MESSAGE}")
        return v

    @field_validator("pod_annotations")
    @classmethod
    def _pod_annotations(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not is_label_key(key):
                raise ValueError(f"{key!r}: {_ANNOTATION_KEY_MESSAGE}")
            if key.startswith(OPERATOR_PREFIX):
                raise ValueError(f"{key!r}: {_RESERVED_ANNOTATION_MESSAGE}")
            if len(value) > MAX_ANNOTATION_VALUE:
                raise ValueError(f"{key!r}: values must be at most {MAX_ANNOTATION_VALUE} characters")
        if sum(len(k.encode()) + len(x.encode()) for k, x in v.items()) > MAX_POD_ANNOTATIONS_BYTES:
            raise ValueError(_ANNOTATIONS_SIZE_MESSAGE)
        return v

    @field_validator("resources")
    @classmethod
    def _quantities(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Each request and limit is a Kubernetes quantity: the CRD keeps the block free-form, and a
        value the API server cannot parse would otherwise surface only as a refused Deployment."""
        for kind in ("limits", "requests"):
            block = v.get(kind)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise ValueError(f"{kind} must be a map of resource name to quantity")
            for resource, quantity in block.items():
                try:
                    if isinstance(quantity, bool) or not _QUANTITY.fullmatch(str(quantity)):
                        raise ValueError(quantity)
                    parse_quantity(quantity)
                except (ValueError, TypeError):
                    raise ValueError(f"{kind}.{resource}: {quantity!r} is not a Kubernetes quantity "
                                     "(e.g. 500m, 2, 1536Mi)") from None
                if parse_quantity(quantity) < 0:  # the API server refuses the Deployment's pod template
                    raise ValueError(f"{kind}.{resource}: {quantity!r} must be at least 0")
        requests, limits = v.get("requests") or {}, v.get("limits") or {}
        for resource in sorted(set(requests) & set(limits)):  # as the API server checks a container
            if parse_quantity(requests[resource]) > parse_quantity(limits[resource]):
                raise ValueError(f"requests.{resource}: {requests[resource]} is more than its limit "
                                 f"{limits[resource]}")
        return v
