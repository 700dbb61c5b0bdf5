"""What the sandbox puts into its cluster before the operator gets an InferenceService.

- the InferenceService CRD, generated from the API models (``tritonscale crd``), and
  wait until the API server reports it Established;
- the model store: a hostPath PersistentVolume, pre-bound to the claim the model's
  ``storageUri`` names (``pvc://models/linear`` in the sample), holding the cost
  model as version 1 under that path. The pod's init container links it into the
  model repository as it would any claim's contents; the real PV controller binds
  the claim and the real scheduler checks it before placing a pod.

In a cluster the sandbox did not start (``--kubeconfig``), what it made there goes when it
stops (``remove_service``, ``remove_sandbox_objects``), and an InferenceService of the same
name already there is refused up front (``check_free``): a second run failed on a 409 after
its set-up, and the first had left its Nodes, claim, volume (a hostPath into its deleted work
folder) and InferenceService behind.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from tritonscale.sandbox.scenario import SandboxError
from tritonscale.sandbox.tritonserver import MODEL_SOURCE

CRD_ESTABLISHED_TIMEOUT_S = 30.0
CLAIM_BOUND_TIMEOUT_S = 30.0
SANDBOX_LABEL = "tritonscale.io/sandbox"
PODS_GONE_TIMEOUT_S = 20.0  # the kubelets stop the deleted pods' tritonservers; past this, force-deleted
VOLUME_GONE_TIMEOUT_S = 20.0  # a deleted volume's protection finalizer waits for its claim to go


def _create_or_keep(create: Any, *args: Any) -> None:
    import kubernetes

    try:
        create(*args)
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:  # already there (a --kubeconfig cluster used before)
            raise


def apply_crd(api_client: Any) -> str:
    """Create the InferenceService CRD (or keep the one there) and wait until it is Established."""
    import kubernetes

    from tritonscale.api.crd import crd

    body = crd()
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    _create_or_keep(ext.create_custom_resource_definition, body)
    name = body["metadata"]["name"]

    def established() -> bool:
        got = json.loads(ext.read_custom_resource_definition(name, _preload_content=False).data)
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (got.get("status") or {}).get("conditions") or [])
    _wait_for(established, CRD_ESTABLISHED_TIMEOUT_S, f"the CRD {name} to be Established")
    return name


def provision_model_store(api_client: Any, store: Path, namespace: str, claim: str, path: str) -> str:
    """Put the cost model at ``store/<path>/1/model.py`` and serve ``store`` as claim
    ``namespace/claim``; wait until the PV controller bound it. Returns the PV's name."""
    import kubernetes

    version_dir = store / path / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MODEL_SOURCE, version_dir / "model.py")
    core = kubernetes.client.CoreV1Api(api_client)
    pv_name = model_store_volume(namespace, claim)
    volume = {
        "metadata": {"name": pv_name, "labels": {SANDBOX_LABEL: "model-store"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                 "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(store), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": claim}}}
    _create_or_keep(core.create_persistent_volume, volume)
    kept = json.loads(core.read_persistent_volume(pv_name, _preload_content=False).data)
    folder = ((kept.get("spec") or {}).get("hostPath") or {}).get("path")
    if folder != str(store):  # a killed run's: its folder is gone, and a PV's hostPath cannot change
        if ((kept.get("metadata") or {}).get("labels") or {}).get(SANDBOX_LABEL) != "model-store":
            raise SandboxError(f"PersistentVolume {pv_name} exists and is not a sandbox's model store: delete "
                               f"it, or run the sandbox in another namespace")
        _remove_volume(core, namespace, claim, pv_name)  # the sandbox's own, left behind: made anew
        core.create_persistent_volume(volume)
    # Create the claim only once the PV controller has seen the volume (it marks it
    # Available): a claim it syncs first finds no volume in its cache and waits for the
    # controller's 15 s resync. Measured: 14.7 s to Bound that way, under 1 s this way.
    _wait_for(lambda: (json.loads(core.read_persistent_volume(pv_name, _preload_content=False).data).get("status")
                       or {}).get("phase") in ("Available", "Bound"),
              CLAIM_BOUND_TIMEOUT_S, f"persistent volume {pv_name} to become Available")
    _create_or_keep(core.create_namespaced_persistent_volume_claim, namespace, {
        "metadata": {"name": claim, "namespace": namespace, "labels": {SANDBOX_LABEL: "model-store"}},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    def bound() -> bool:
        got = json.loads(core.read_namespaced_persistent_volume_claim(claim, namespace, _preload_content=False).data)
        if (got.get("status") or {}).get("phase") != "Bound":
            return False
        if (got.get("spec") or {}).get("volumeName") != pv_name:
            raise SandboxError(f"claim {namespace}/{claim} is bound to {got['spec'].get('volumeName')}, "
                               f"not to the sandbox's model store {pv_name}")
        return True
    _wait_for(bound, CLAIM_BOUND_TIMEOUT_S, f"claim {namespace}/{claim} to be Bound to {pv_name} "
              "(is the persistent-volume-binder controller running?)")
    return pv_name


def model_store_volume(namespace: str, claim: str) -> str:
    """The name of the PersistentVolume the sandbox serves its model store as."""
    return f"tritonscale-sandbox-{namespace}-{claim}"


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SandboxError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _absent(call: Any, *args: Any, **kwargs: Any) -> None:
    """``call`` (a delete), where 404 (already gone) is success."""
    import kubernetes

    try:
        call(*args, **kwargs)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


def check_free(api_client: Any, namespace: str, name: str, kubeconfig: Path) -> None:
    """Refuse a cluster that already holds InferenceService ``namespace/name``: the sandbox makes its own
    and removes it at the end, and must not take over (or delete) one it did not make."""
    from tritonscale.kube.client import Kube

    if Kube(api_client).get_inference_service(namespace, name) is None:  # no such object, or no CRD yet
        return
    raise SandboxError(f"InferenceService {namespace}/{name} already exists in the cluster of {kubeconfig} (an "
                       f"earlier sandbox run that was killed, or your own): delete it (kubectl --kubeconfig "
                       f"{kubeconfig} delete tis -n {namespace} {name}) or give --service a spec of another name")


def remove_service(api_client: Any, namespace: str, name: str) -> None:
    """Delete the sandbox's InferenceService (the garbage collector takes its Deployment, ReplicaSets and
    pods) and wait, up to PODS_GONE_TIMEOUT_S, for its pods to go while the kubelets still run."""
    from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
    from tritonscale.kube.client import Kube

    kube = Kube(api_client)
    # Foreground: the InferenceService goes only after its Deployment, ReplicaSets and pods, so no
    # ReplicaSet is left to replace a pod once the kubelets stop
    _absent(kube.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
            body={"propagationPolicy": "Foreground"})

    def gone() -> bool:  # a consistent list of pods (Kube.list_pods reads the watch cache, which may lag)
        return kube.get_inference_service(namespace, name) is None \
            and not kube.core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={name}").items

    deadline = time.monotonic() + PODS_GONE_TIMEOUT_S
    while not gone():
        if time.monotonic() > deadline:
            return  # remove_sandbox_objects removes what is left
        time.sleep(0.5)


def remove_sandbox_objects(api_client: Any, namespace: str, name: str | None, claim: str, pv_name: str,
                           nodes: list[str]) -> None:
    """After the kubelets stopped: the pods of the sandbox's InferenceService ``name`` still listed
    (force-deleted: no kubelet is left to confirm; None: it made none), the sandbox's Nodes, and the
    model store's claim and volume."""
    import kubernetes

    from tritonscale.api.spec import LABEL

    core = kubernetes.client.CoreV1Api(api_client)
    if name:  # what the garbage collector has not yet removed: nothing may make a pod again, then no pod
        apps = kubernetes.client.AppsV1Api(api_client)
        _absent(apps.delete_namespaced_deployment, name, namespace, propagation_policy="Orphan")
        for rs in apps.list_namespaced_replica_set(namespace, label_selector=f"{LABEL}={name}").items:
            _absent(apps.delete_namespaced_replica_set, rs.metadata.name, namespace, propagation_policy="Orphan")
        for pod in core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={name}").items:
            _absent(core.delete_namespaced_pod, pod.metadata.name, namespace, grace_period_seconds=0)
    for node in nodes:
        _absent(core.delete_node, node)
    _remove_volume(core, namespace, claim, pv_name)


def _sandbox_made(read: Any, *args: Any) -> bool:
    """The object exists and carries the sandbox's label (the sandbox made it); a 404 is False."""
    import kubernetes

    try:
        labels = read(*args).metadata.labels or {}
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return labels.get(SANDBOX_LABEL) == "model-store"


def _remove_volume(core: Any, namespace: str, claim: str, pv_name: str) -> None:
    """Delete the model store's claim and volume, each only if it carries the sandbox's label (a claim
    or volume of that name that the user made stays), and wait until the volume is gone: its protection
    finalizer holds it until the claim is, and a run that found it Terminating would keep it."""
    if _sandbox_made(core.read_namespaced_persistent_volume_claim, claim, namespace):
        _absent(core.delete_namespaced_persistent_volume_claim, claim, namespace)
    if not _sandbox_made(core.read_persistent_volume, pv_name):
        return
    _absent(core.delete_persistent_volume, pv_name)
    _wait_for(lambda: not any(v.metadata.name == pv_name for v in core.list_persistent_volume().items),
              VOLUME_GONE_TIMEOUT_S, f"persistent volume {pv_name} to go")
