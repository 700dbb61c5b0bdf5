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
import math
from typing import Any

from tritonscale import __version__
from tritonscale.api import shutdown
from tritonscale.api.spec import (
    GROUP,
    HASH_ANNOTATION,
    KIND,
    LABEL,
    RENDERED_BY_ANNOTATION,
    STARTUP_PROBE_PERIOD_S,
    VERSION,
    InferenceServiceSpec,
    model_name,
)
from tritonscale.api.status import BatcherInForce, rollout_at_once, tuned_batcher
from tritonscale.render.deployment_records import SERVING_ANNOTATION, serving_digest, spec_annotation
from tritonscale.render.triton_config import render_config_pbtxt
from tritonscale.render.triton_containers import (
    CONFIG_VOLUME,
    CONTAINER_SECURITY,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    MODEL_REPOSITORY,
    fetch_container,
    triton_env,
    triton_resources,
    tritonserver_args,
)

# A rollout (a changed config.pbtxt, image or pod template) starts up to this share of
# spec.replicas as extra pods at once -- the Deployment default, rounded up as Kubernetes rounds
# it -- and, with maxUnavailable 0, removes an old pod only once a new one is ready. The extra
# replica-time is one cold start per replaced pod whatever the share; a larger share only
# finishes sooner (maxSurge 1 takes one cold start per replica, minutes on GPUs, while old pods
# keep the settings being replaced). On a cluster without a free GPU the extra pods wait Pending
# and, with maxUnavailable 0, the rollout does not move until one is free (README, Upgrading).
MAX_SURGE = "25%"
# ... except a batching tuner's change (status.batching.tunerState.rolloutAtOnce,
# ``api.status.rollout_at_once``): every new pod starts at once -- the same extra replica-time, and the
# rollout's disturbance (old settings still served, mixed batches, readings dipping as pods are
# replaced) over in one cold start instead of replicas / maxSurge of them. A full GPU pool places the
# extra pods one by one as old ones leave, which is the gradual rollout again.
AT_ONCE_SURGE = "100%"


def rollout_surge(at_once: bool) -> str:
    """The Deployment's maxSurge: AT_ONCE_SURGE for a rollout that replaces every pod at once, else MAX_SURGE."""
    return AT_ONCE_SURGE if at_once else MAX_SURGE


def max_surge(replicas: int, surge: str = MAX_SURGE) -> int:
    """Extra pods a rollout starts at once for ``replicas`` at maxSurge ``surge`` (a percentage, rounded up
    as Kubernetes rounds it; at least 1)."""
    return max(1, math.ceil(int(surge.rstrip("%")) * max(replicas, 0) / 100))


def child_names(name: str) -> dict[str, str]:
    """The children's names but the ConfigMap's (``configmap_name``: it follows the config)."""
    return {"Deployment": name, "Service": name, "PodDisruptionBudget": name}


def configmap_name(name: str, config_pbtxt: str) -> str:
    """``NAME-config-HASH``: one immutable ConfigMap per config.pbtxt, so a config change writes a new
    one and never changes what an existing ReplicaSet's pods mount. A pod the old ReplicaSet starts
    mid-rollout (a replacement, a scale-up) loads the old config, and a failed rollout leaves the old
    pods on it."""
    return f"{name}-config-{config_hash(config_pbtxt)}"


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


def config_hash(config_pbtxt: str) -> str:
    return hashlib.sha256(config_pbtxt.encode()).hexdigest()[:16]


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


# The pods' emptyDirs hold nothing a new pod cannot make again (the model is fetched again). Without this
# annotation cluster-autoscaler (--skip-nodes-with-local-storage, its default) never removed a node that
# held a replica, and an idle GPU node stayed for it.
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
LOCAL_VOLUMES = ("model-repository", "dshm")


def build_deployment(spec: InferenceServiceSpec, owner: dict[str, Any]) -> dict[str, Any]:
    """The Deployment. ``spec.replicas`` is the warm floor and is only used on create:
    afterwards the autoscaler owns that field and the reconciler never patches it."""
    name = owner["metadata"]["name"]
    model = model_name(spec, name)
    config = rendered_config(spec, owner)
    fetch, source_volumes, source_mounts = fetch_container(spec, model)
    ready_probe = {"httpGet": {"path": f"/v2/models/{model}/ready", "port": "http"}}
    pod_labels = {**spec.runtime.pod_labels, **labels(name)}  # the operator's win (the spec refuses them anyway)
    container: dict[str, Any] = {
        "name": "triton",
        "image": spec.runtime.image,
        "args": tritonserver_args(spec),
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
        "resources": triton_resources(spec),
        "env": triton_env(spec),
        # Serving on while the endpoints update and gRPC clients reconnect elsewhere; then SIGTERM, and
        # tritonserver refuses new requests at once (api/shutdown.py). An exec, not the sleep action:
        # the chart supports Kubernetes 1.28, and the sleep action is on by default from 1.30.
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(shutdown.drain_wait(spec.runtime))]}}},
        "volumeMounts": [
            {"name": "model-repository", "mountPath": MODEL_REPOSITORY},
            {"name": "dshm", "mountPath": "/dev/shm"},  # Triton's python backend and pinned memory use shm
            *source_mounts,
        ],
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
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
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxUnavailable": 0, "maxSurge": rollout_surge(rollout_at_once(spec, owner.get("status")))}},
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
