"""The pod's two containers (pure builders): the model-fetch init container that assembles
/models/<model>/ from ``model.storageUri`` and the Deployment's config.pbtxt, and the triton
container's tritonserver flags, env and resources, with the ports and paths they share.
render/kubernetes_objects.py puts them into the Deployment's pod template."""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

from tritonscale.api import shutdown
from tritonscale.api.spec import (
    GRPC_MAX_CONNECTION_AGE_SINCE,
    OPERATOR_PORTS,
    TRITON_IMAGE_REPOSITORY,
    InferenceServiceSpec,
)

MODEL_REPOSITORY = "/models"
HTTP_PORT, GRPC_PORT, METRICS_PORT = (OPERATOR_PORTS[f] for f in ("--http-port", "--grpc-port", "--metrics-port"))
CONFIG_VOLUME = "model-config"

# Images for the init container that assembles the model directory, unless runtime.fetchImage names one.
FETCH_IMAGES = {
    "s3": "amazon/aws-cli:2.17.0",
    "gs": "gcr.io/google.com/cloudsdktool/google-cloud-cli:stable",
    "pvc": "busybox:1.36",
}

# Baseline pod security for every container we run: no privilege escalation, no
# Linux capabilities. (runAsNonRoot is left to runtime.securityContext: NGC Triton
# images start as root by default.)
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def fetch_container(
    spec: InferenceServiceSpec, model: str
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Init container that assembles /models/<model>/ = versions from storageUri + our config.pbtxt.

    Returns (init container, extra pod volumes, extra mounts the triton container needs)."""
    uri = spec.model.storage_uri
    scheme, rest = uri.split("://", 1)
    dest = f"{MODEL_REPOSITORY}/{model}"
    volumes: list[dict[str, Any]] = []
    serving_mounts: list[dict[str, Any]] = []
    mounts = [{"name": "model-repository", "mountPath": MODEL_REPOSITORY},
              {"name": CONFIG_VOLUME, "mountPath": "/config", "readOnly": True}]
    if scheme == "pvc":
        claim, path = rest.split("/", 1)
        src = f"/mnt/pvc/{path}"
        volumes.append({"name": "model-source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "model-source", "mountPath": "/mnt/pvc", "readOnly": True})
        # Symlink the version directories instead of copying: no second copy of a multi-GB model.
        # The links point into /mnt/pvc, so the triton container mounts the claim there too.
        serving_mounts.append({"name": "model-source", "mountPath": "/mnt/pvc", "readOnly": True})
        fetch = (f'for e in {shlex.quote(src)}/*; do [ "$(basename "$e")" = config.pbtxt ] || '
                 f'ln -s "$e" {shlex.quote(dest)}/; done')
    elif scheme == "s3":
        fetch = f"aws s3 cp --recursive --only-show-errors {shlex.quote(uri)} {shlex.quote(dest)}"
    else:
        fetch = f"gcloud storage cp --recursive {shlex.quote(uri.rstrip('/') + '/*')} {shlex.quote(dest)}/"
    script = (f"set -eu\nmkdir -p {shlex.quote(dest)}\n{fetch}\n"
              f"cp /config/config.pbtxt {shlex.quote(dest)}/config.pbtxt\n")
    container = {
        "name": "model-fetch",
        "image": spec.runtime.fetch_image or FETCH_IMAGES[scheme],
        "command": ["/bin/sh", "-c", script],
        "env": list(spec.runtime.env),
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    if fetch_resources := _fetch_resources(spec):
        container["resources"] = fetch_resources
    return container, volumes, serving_mounts


# What the init container takes of the triton container's resources: not its GPU or other extended
# resources (a download needs none), nor its claims.
_FETCH_RESOURCES = re.compile(r"(cpu|memory|ephemeral-storage|hugepages-.+)$")


def _fetch_resources(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The model-fetch init container's requests and limits: the triton container's cpu, memory and
    ephemeral storage. A namespace's ResourceQuota on requests.cpu or limits.memory refuses a pod any of
    whose containers leaves them unset (found by an audit: "must specify requests.cpu for: model-fetch",
    with no spec field to set them). The pod's own request is the larger of its largest init container's
    and the sum of its containers', so this adds nothing to what it is scheduled with."""
    out = {kind: {r: q for r, q in block.items() if _FETCH_RESOURCES.match(r)}
           for kind, block in triton_resources(spec).items()
           if kind in ("requests", "limits") and isinstance(block, dict)}
    return {kind: block for kind, block in out.items() if block}


def tritonserver_args(spec: InferenceServiceSpec) -> list[str]:
    args = [
        "tritonserver",
        f"--model-repository={MODEL_REPOSITORY}",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--metrics-config=summary_latencies=true",
        "--exit-on-error=true",
        "--strict-readiness=true",
        # What the pod's grace leaves Triton after the preStop wait (api/shutdown.py)
        f"--exit-timeout-secs={shutdown.exit_timeout(spec.runtime)}",
    ]
    if spec.runtime.gpus == 0:
        args.append("--allow-gpu-metrics=false")
    if spec.model.response_cache:
        args.append(f"--cache-config=local,size={spec.runtime.response_cache_bytes}")
    age_s = spec.runtime.grpc_max_connection_age_seconds
    if age_s and has_grpc_connection_age(spec.runtime.image):
        args.append(f"--grpc-max-connection-age={age_s * 1000}")
    return args + list(spec.runtime.extra_args)


_NGC_TAG = re.compile(re.escape(TRITON_IMAGE_REPOSITORY) + r":(\d{2})\.(\d{2})(?:[-@]|$)")


def has_grpc_connection_age(image: str) -> bool:
    """Whether the image's tritonserver takes --grpc-max-connection-age: an NGC tag (YY.MM) from
    GRPC_MAX_CONNECTION_AGE_SINCE on, or any other image (a custom build, a digest: the operator cannot
    tell its release, and a release from 2024 on is assumed; spec.runtime.grpcMaxConnectionAgeSeconds
    0 leaves the flag out)."""
    m = _NGC_TAG.match(image)
    return m is None or (int(m.group(1)), int(m.group(2))) >= GRPC_MAX_CONNECTION_AGE_SINCE


def triton_env(spec: InferenceServiceSpec) -> list[dict[str, Any]]:
    """runtime.env, and for a replica of no GPU ``NVIDIA_VISIBLE_DEVICES=void`` (unless env sets it): NGC images
    say ``all``, so under a node's default NVIDIA runtime (the GPU Operator's) a pod that asks for no GPU sees
    every GPU of the node, and Triton takes memory on GPUs other pods were given; ``void`` gives it none."""
    env = list(spec.runtime.env)
    if spec.runtime.gpus == 0 and not any(isinstance(e, dict) and e.get("name") == "NVIDIA_VISIBLE_DEVICES"
                                          for e in env):
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})  # last: runtime.env[i] stays env[i]
    return env


def triton_resources(spec: InferenceServiceSpec) -> dict[str, Any]:
    # Quantities as strings, as the API server returns them: a number here would never
    # compare equal to the live object and the Deployment would be patched on every reconcile.
    # Other keys (claims, a list) go as they are, for Kubernetes to take or refuse by field: they
    # were dropped without a word.
    res = {k: {q: str(n) for q, n in v.items()} if isinstance(v, dict) else v
           for k, v in spec.runtime.resources.items()}
    if spec.runtime.gpus > 0:
        res.setdefault("limits", {})[spec.runtime.gpu_resource] = str(spec.runtime.gpus)
    return res
