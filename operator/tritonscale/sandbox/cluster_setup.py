"""What the sandbox puts into its cluster before the operator gets an InferenceService.

- the InferenceService CRD, generated from the API models (``tritonscale crd``), and
  wait until the API server reports it Established;
- the model store: a hostPath PersistentVolume, pre-bound to the claim the model's
  ``storageUri`` names (``pvc://models/linear`` in the sample), holding the cost
  model as version 1 under that path. The pod's init container links it into the
  model repository as it would any claim's contents; the real PV controller binds
  the claim and the real scheduler checks it before placing a pod.
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
    pv_name = f"tritonscale-sandbox-{namespace}-{claim}"
    _create_or_keep(core.create_persistent_volume, {
        "metadata": {"name": pv_name, "labels": {"tritonscale.io/sandbox": "model-store"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                 "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(store), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": claim}}})
    # Create the claim only once the PV controller has seen the volume (it marks it
    # Available): a claim it syncs first finds no volume in its cache and waits for the
    # controller's 15 s resync. Measured: 14.7 s to Bound that way, under 1 s this way.
    _wait_for(lambda: (json.loads(core.read_persistent_volume(pv_name, _preload_content=False).data).get("status")
                       or {}).get("phase") in ("Available", "Bound"),
              CLAIM_BOUND_TIMEOUT_S, f"persistent volume {pv_name} to become Available")
    _create_or_keep(core.create_namespaced_persistent_volume_claim, namespace, {
        "metadata": {"name": claim, "namespace": namespace},
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


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SandboxError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
