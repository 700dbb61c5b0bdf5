"""spec -> the Kubernetes children of an InferenceService (pure builders).

Children: ConfigMap (config.pbtxt), Deployment (tritonserver), Service
(http/grpc/metrics) and PodDisruptionBudget (keeps minReplicas available through node drains).

Config changes reach Triton through a *pod-template hash*: the Deployment's
pod template carries ``tritonscale.io/config-hash`` (sha256 of config.pbtxt).
A changed config changes the template, so Kubernetes rolls the pods with
maxUnavailable=0: every new pod loads and warms the model before an old one
goes, and the warm floor holds during the rollout. We chose this over
Triton's model-control reload because reload needs ``--model-control-mode=
explicit`` plus a per-pod API call, and gives no readiness-gated rollback.

The batching tuner's changes (``status.batching``, while ``batching.autoTune`` is on)
go the same way: they are rendered into config.pbtxt, so they change the hash. Measured
against a model-control reload under a steady load (``e2e/bench_batching_apply.py``), the
rollout kept p95 at 84 ms during the change where the reload stalled each pod's requests
for ~1.3 s (p95 1.3 s).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import shlex
from typing import Any

from tritonscale import __version__
from tritonscale.api import shutdown
from tritonscale.api.spec import (
    GPU_RESOURCE,
    GROUP,
    GRPC_MAX_CONNECTION_AGE_SINCE,
    HASH_ANNOTATION,
    KIND,
    LABEL,
    OPERATOR_PORTS,
    RENDERED_BY_ANNOTATION,
    SPEC_ANNOTATION,
    SPEC_ANNOTATION_MAX_BYTES,
    STARTUP_PROBE_PERIOD_S,
    TRITON_IMAGE_REPOSITORY,
    VERSION,
    InferenceServiceSpec,
    model_name,
    url_without_credentials,
)
from tritonscale.api.status import BatcherInForce, tuned_batcher
from tritonscale.render.triton_config import render_config_pbtxt

MODEL_REPOSITORY = "/models"
# A rollout (a changed config.pbtxt, image or pod template) starts up to this share of
# spec.replicas as extra pods at once -- the Deployment default, rounded up as Kubernetes rounds
# it -- and, with maxUnavailable 0, removes an old pod only once a new one is ready. The extra
# replica-time is one cold start per replaced pod whatever the share; a larger share only
# finishes sooner (maxSurge 1 takes one cold start per replica, minutes on GPUs, while old pods
# keep the settings being replaced). On a cluster without a free GPU the extra pods wait Pending
# and, with maxUnavailable 0, the rollout does not move until one is free (README, Upgrading).
MAX_SURGE = "25%"


def max_surge(replicas: int) -> int:
    """Extra pods a rollout starts at once for ``replicas`` (MAX_SURGE, rounded up; at least 1)."""
    return max(1, math.ceil(int(MAX_SURGE.rstrip("%")) * max(replicas, 0) / 100))


HTTP_PORT, GRPC_PORT, METRICS_PORT = (OPERATOR_PORTS[f] for f in ("--http-port", "--grpc-port", "--metrics-port"))

# Images for the init container that assembles the model directory, unless runtime.fetchImage names one.
FETCH_IMAGES = {
    "s3": "amazon/aws-cli:2.17.0",
    "gs": "gcr.io/google.com/cloudsdktool/google-cloud-cli:stable",
    "pvc": "busybox:1.36",
}

# Baseline pod security for every container we run: no privilege escalation, no
# Linux capabilities. (runAsNonRoot is left to runtime.securityContext: NGC Triton
# images start as root by default.)
_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def child_names(name: str) -> dict[str, str]:
    """The children's names but the ConfigMap's (``configmap_name``: it follows the config)."""
    return {"Deployment": name, "Service": name, "PodDisruptionBudget": name}


def configmap_name(name: str, config_pbtxt: str) -> str:
    """``NAME-config-HASH``: one immutable ConfigMap per config.pbtxt, so a config change writes a new
    one and never changes what an existing ReplicaSet's pods mount. A pod the old ReplicaSet starts
    mid-rollout (a replacement, a scale-up) loads the old config, and a failed rollout leaves the old
    pods on it."""
    return f"{name}-config-{config_hash(config_pbtxt)}"


CONFIG_VOLUME = "model-config"


def template_hash(workload: dict[str, Any]) -> str | None:
    """The config hash (``HASH_ANNOTATION``) a Deployment's or ReplicaSet's pod template carries, or None."""
    template = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return (template.get("annotations") or {}).get(HASH_ANNOTATION)


def mounted_configmap(workload: dict[str, Any]) -> str | None:
    """The config.pbtxt ConfigMap a Deployment's or ReplicaSet's pod template mounts, or None."""
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    for volume in template.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") == CONFIG_VOLUME:
            return ((volume.get("configMap") or {}).get("name")) or None
    return None


MANAGED_BY, MANAGER = "app.kubernetes.io/managed-by", "tritonscale"


def labels(name: str) -> dict[str, str]:
    return {
        LABEL: name,
        "app.kubernetes.io/name": "triton",
        "app.kubernetes.io/instance": name,
        MANAGED_BY: MANAGER,
    }


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """``obj`` is a child of the object with ``uid``: one of its ownerReferences carries that uid.
    An object of a child's name without one is someone else's (a user's own Service, another
    controller's Deployment): neither the reconciler nor the autoscaler may touch it."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == uid for r in refs)


def _meta(name: str, owner: dict[str, Any], owner_name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner["metadata"].get("namespace"),
        "labels": labels(owner_name),
        "ownerReferences": [owner_reference(owner)],
    }


def spec_annotation(owner: dict[str, Any]) -> dict[str, str]:
    """The Deployment's record of the spec it was made from (``SPEC_ANNOTATION``): the owner's spec
    as stored, compact JSON. Empty when it is larger than ``SPEC_ANNOTATION_MAX_BYTES``: emptied, not
    left out, so an earlier record cannot outlive the spec it was. Credentials in
    ``scaling.prometheus.url`` are not recorded (``url_without_credentials``): whoever may read
    Deployments (the built-in ``view`` role) could read them there."""
    spec = owner.get("spec") or {}
    url = _prometheus_url(spec)
    shown = None if url is None else url_without_credentials(url)
    if shown != url:
        spec = copy.deepcopy(spec)
        spec["scaling"]["prometheus"]["url"] = shown
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {SPEC_ANNOTATION: text if len(text.encode()) <= SPEC_ANNOTATION_MAX_BYTES else ""}


def _prometheus_url(spec: Any) -> str | None:
    node = spec
    for key in ("scaling", "prometheus", "url"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def recorded_spec(deployment: dict[str, Any], live_spec: Any = None) -> dict[str, Any] | None:
    """The spec a Deployment records it was made from, or None (none recorded, or not a JSON object).
    A Prometheus URL recorded without its credentials takes them from ``live_spec`` (the object's
    spec now) when its URL is that one with credentials."""
    text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
    try:
        raw = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    recorded, live = _prometheus_url(raw), _prometheus_url(live_spec)
    if recorded is not None and live is not None and live != recorded and url_without_credentials(live) == recorded:
        raw["scaling"]["prometheus"]["url"] = live
    return raw


def config_hash(config_pbtxt: str) -> str:
    return hashlib.sha256(config_pbtxt.encode()).hexdigest()[:16]


# The Deployment's record of what its pods serve (``serving_digest``): small, so kept when a large spec
# is not recorded (``spec_annotation``); the autoscaler reads it each tick (``decider.forget_model``).
SERVING_ANNOTATION = "tritonscale.io/serving"
# Runtime fields with no bearing on how fast a pod serves (scheduling and identity only).
_NOT_SPEED = ("tolerations", "imagePullSecrets", "serviceAccountName", "securityContext", "topologySpreadConstraints",
              "priorityClassName", "startupTimeoutSeconds", "terminationGracePeriodSeconds", "progressDeadlineSeconds",
              "shmSize")
# Speed fields added to the runtime after the digest was first recorded, and their defaults (``serving_digest``).
_ADDED_LATER = {"gpuResource": GPU_RESOURCE}


def serving_digest(spec: InferenceServiceSpec) -> str:
    """What the pods serve, for the autoscaler's memory (``decider.forget_model``): a digest of the
    model and of the runtime fields that can change its speed (image, GPUs, resources, node
    selector, env, flags). The batcher's settings are left out: the tuner changes them, and a
    batch's cost does not depend on them."""
    runtime = {k: v for k, v in spec.runtime.model_dump(mode="json", by_alias=True).items() if k not in _NOT_SPEED}
    # Node affinity can choose another GPU, as the node selector can; pod (anti-)affinity only places
    # replicas. Kept out while unset, so the field's arrival changed no service's digest.
    node_affinity = runtime.pop("affinity").get("nodeAffinity")
    if node_affinity:
        runtime["nodeAffinity"] = node_affinity
    # Fields added after the digest was first recorded are left out at their defaults, so an operator upgrade
    # does not make every service forget its learned speed (tests/unit/test_tick_model_change.py pins it).
    for key, default in _ADDED_LATER.items():
        if runtime.get(key) == default:
            del runtime[key]
    text = json.dumps({"model": spec.model.model_dump(mode="json", by_alias=True), "runtime": runtime},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def batcher_in_force(spec: InferenceServiceSpec, owner: dict[str, Any]) -> BatcherInForce | None:
    """The tuner's settings from ``status.batching`` (``api.status.tuned_batcher``), else None: the
    spec's own values are rendered, so without autoTune nothing changes."""
    return tuned_batcher(spec, owner.get("status"))


def rendered_config(spec: InferenceServiceSpec, owner: dict[str, Any]) -> str:
    """config.pbtxt with the batcher settings in force."""
    return render_config_pbtxt(spec, owner["metadata"]["name"], batcher_in_force(spec, owner))


def build_configmap(spec: InferenceServiceSpec, owner: dict[str, Any]) -> dict[str, Any]:
    name = owner["metadata"]["name"]
    config = rendered_config(spec, owner)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(configmap_name(name, config), owner, name),
        "data": {"config.pbtxt": config},
        "immutable": True,  # its name is its content's hash; the kubelet need not watch it either
    }


def _fetch_container(
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
        "securityContext": copy.deepcopy(_CONTAINER_SECURITY),
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
           for kind, block in _resources(spec).items() if kind in ("requests", "limits") and isinstance(block, dict)}
    return {kind: block for kind, block in out.items() if block}


def _tritonserver_args(spec: InferenceServiceSpec) -> list[str]:
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


# The pods' emptyDirs hold nothing a new pod cannot make again (the model is fetched again). Without this
# annotation cluster-autoscaler (--skip-nodes-with-local-storage, its default) never removed a node that
# held a replica, and an idle GPU node stayed for it.
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
LOCAL_VOLUMES = ("model-repository", "dshm")


def _env(spec: InferenceServiceSpec) -> list[dict[str, Any]]:
    """runtime.env, and for a replica of no GPU ``NVIDIA_VISIBLE_DEVICES=void`` (unless env sets it): NGC images
    say ``all``, so under a node's default NVIDIA runtime (the GPU Operator's) a pod that asks for no GPU sees
    every GPU of the node, and Triton takes memory on GPUs other pods were given; ``void`` gives it none."""
    env = list(spec.runtime.env)
    if spec.runtime.gpus == 0 and not any(isinstance(e, dict) and e.get("name") == "NVIDIA_VISIBLE_DEVICES"
                                          for e in env):
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})  # last: runtime.env[i] stays env[i]
    return env


def _resources(spec: InferenceServiceSpec) -> dict[str, Any]:
    # Quantities as strings, as the API server returns them: a number here would never
    # compare equal to the live object and the Deployment would be patched on every reconcile.
    # Other keys (claims, a list) go as they are, for Kubernetes to take or refuse by field: they
    # were dropped without a word.
    res = {k: {q: str(n) for q, n in v.items()} if isinstance(v, dict) else v
           for k, v in spec.runtime.resources.items()}
    if spec.runtime.gpus > 0:
        res.setdefault("limits", {})[spec.runtime.gpu_resource] = str(spec.runtime.gpus)
    return res


def build_deployment(spec: InferenceServiceSpec, owner: dict[str, Any]) -> dict[str, Any]:
    """The Deployment. ``spec.replicas`` is the warm floor and is only used on create:
    afterwards the autoscaler owns that field and the reconciler never patches it."""
    name = owner["metadata"]["name"]
    model = model_name(spec, name)
    config = rendered_config(spec, owner)
    fetch, source_volumes, source_mounts = _fetch_container(spec, model)
    ready_probe = {"httpGet": {"path": f"/v2/models/{model}/ready", "port": "http"}}
    pod_labels = {**spec.runtime.pod_labels, **labels(name)}  # the operator's win (the spec refuses them anyway)
    container: dict[str, Any] = {
        "name": "triton",
        "image": spec.runtime.image,
        "args": _tritonserver_args(spec),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        # The model's ready endpoint turns 200 only after load *and* model_warmup,
        # so a replica counts as ready only once it is warm.
        # Cold start = download (the init container's) + load + warmup: the probe's budget is load and warmup
        "startupProbe": {**ready_probe, "periodSeconds": STARTUP_PROBE_PERIOD_S,
                         "failureThreshold": math.ceil(spec.runtime.startup_timeout_seconds / STARTUP_PROBE_PERIOD_S)},
        "readinessProbe": {**ready_probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"},
                          "periodSeconds": 10, "failureThreshold": 6},
        "resources": _resources(spec),
        "env": _env(spec),
        # Serving on while the endpoints update and gRPC clients reconnect elsewhere; then SIGTERM, and
        # tritonserver refuses new requests at once (api/shutdown.py). An exec, not the sleep action:
        # the chart supports Kubernetes 1.28, and the sleep action is on by default from 1.30.
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(shutdown.drain_wait(spec.runtime))]}}},
        "volumeMounts": [
            {"name": "model-repository", "mountPath": MODEL_REPOSITORY},
            {"name": "dshm", "mountPath": "/dev/shm"},  # Triton's python backend and pinned memory use shm
            *source_mounts,
        ],
        "securityContext": copy.deepcopy(_CONTAINER_SECURITY),
    }
    pod_spec: dict[str, Any] = {
        "initContainers": [fetch],
        "containers": [container],
        "volumes": [
            {"name": "model-repository", "emptyDir": {}},
            {"name": CONFIG_VOLUME, "configMap": {"name": configmap_name(name, config)}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.runtime.shm_size}},
            *source_volumes,
        ],
        "terminationGracePeriodSeconds": shutdown.grace(spec.runtime),
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, **spec.runtime.security_context},
    }
    if spec.runtime.node_selector:
        pod_spec["nodeSelector"] = dict(spec.runtime.node_selector)
    if spec.runtime.tolerations:
        pod_spec["tolerations"] = list(spec.runtime.tolerations)
    if spec.runtime.affinity:
        pod_spec["affinity"] = copy.deepcopy(spec.runtime.affinity)
    if spec.runtime.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = spread_constraints(spec, name)
    if spec.runtime.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.runtime.image_pull_secrets]
    if spec.runtime.service_account_name:
        pod_spec["serviceAccountName"] = spec.runtime.service_account_name
    if spec.runtime.priority_class_name:
        pod_spec["priorityClassName"] = spec.runtime.priority_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_meta(child_names(name)["Deployment"], owner, name),
                     "annotations": {**spec_annotation(owner), SERVING_ANNOTATION: serving_digest(spec),
                                     RENDERED_BY_ANNOTATION: __version__}},
        "spec": {
            "replicas": spec.scaling.floor,
            # A rollout is reported stuck (ProgressDeadlineExceeded; Ready=False RolloutStuck) no sooner than its
            # pods could be pulled, fetch the model and load it: a budget raised for a slow engine raises it too.
            "progressDeadlineSeconds": spec.runtime.progress_deadline,
            "selector": {"matchLabels": {LABEL: name}},
            # New pods are warm before an old one goes: rollouts never dip below the floor.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": MAX_SURGE}},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    # No prometheus.io/scrape annotations: they opt the pods into an annotation-based
                    # kubernetes-pods job beside the scrape job the queries need (its labels), and a pod
                    # scraped twice counts twice in every rate (README, Prerequisites)
                    "annotations": {SAFE_TO_EVICT: ",".join(LOCAL_VOLUMES), **spec.runtime.pod_annotations,
                                    HASH_ANNOTATION: config_hash(config)},
                },
                "spec": pod_spec,
            },
        },
    }


def spread_constraints(spec: InferenceServiceSpec, name: str) -> list[dict[str, Any]]:
    """``runtime.topologySpreadConstraints``, each without a ``labelSelector`` given the Deployment's own
    selector: the scheduler counts only the pods a constraint selects, and one without a selector
    selects none, so it would spread nothing."""
    out = []
    for constraint in spec.runtime.topology_spread_constraints:
        constraint = copy.deepcopy(constraint)
        if constraint.get("labelSelector") is None:
            constraint["labelSelector"] = {"matchLabels": {LABEL: name}}
        out.append(constraint)
    return out


def build_service(spec: InferenceServiceSpec, owner: dict[str, Any]) -> dict[str, Any]:
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(child_names(name)["Service"], owner, name),
        "spec": {
            "selector": {LABEL: name},
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def build_pdb(spec: InferenceServiceSpec, owner: dict[str, Any]) -> dict[str, Any]:
    """Voluntary disruptions (node drains) may not take the service below minReplicas."""
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(child_names(name)["PodDisruptionBudget"], owner, name),
        # AlwaysAllow: a replica that is not ready (a GPU with an Xid error, a hung server) may be evicted
        # whatever the budget -- it serves nothing. With the default (IfHealthyBudget) a fleet below
        # minAvailable refused the drain of that very node with 429 (session 86's audit, a real v1.35
        # disruption controller) until a replacement was warm elsewhere, or for good at maxReplicas.
        "spec": {"minAvailable": spec.scaling.min_replicas, "selector": {"matchLabels": {LABEL: name}},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def build_children(spec: InferenceServiceSpec, owner: dict[str, Any]) -> list[dict[str, Any]]:
    """Every child, in creation order: the ConfigMap exists before pods mount it."""
    return [build_configmap(spec, owner), build_deployment(spec, owner),
            build_service(spec, owner), build_pdb(spec, owner)]


def endpoints(owner: dict[str, Any]) -> dict[str, str]:
    name, ns = owner["metadata"]["name"], owner["metadata"].get("namespace", "default")
    host = f"{name}.{ns}.svc"
    return {"http": f"http://{host}:{HTTP_PORT}", "grpc": f"{host}:{GRPC_PORT}"}
