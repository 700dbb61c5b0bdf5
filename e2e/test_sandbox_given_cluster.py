"""`tritonscale sandbox --kubeconfig`: the sandbox in a cluster it did not start leaves nothing behind.

Found by an exploratory review: a run against `tritonscale cluster up`'s cluster left its
InferenceService (and pods still shown Running), its Node, and the model store's claim and
hostPath volume (into the run's deleted work folder); a second run then failed on a 409 after
its whole set-up. Here, on the real control plane: two short runs in a row both complete, and
after each the cluster holds none of them; a killed run's volume (a hostPath into a folder that
is gone) is made anew; an InferenceService of the sandbox's name that the sandbox did not make
is refused up front, and kept, as is a volume of the sandbox's name without its label. ~2 min.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.kube.client import client_for
from tritonscale.sandbox.cluster_setup import SANDBOX_LABEL, model_store_volume
from tritonscale.sandbox.live_view import LiveView
from tritonscale.sandbox.orchestrator import run_sandbox
from tritonscale.sandbox.scenario import SandboxError, Scenario, load_service

NS, CLAIM = "default", "models"


def _run(kubeconfig: Path, workdir: Path) -> Any:
    scenario = Scenario(duration_s=8.0, load="step", step_phases=[("base", 8.0, 10.0)], seed=0,
                        kubeconfig=kubeconfig, workdir=workdir)
    return asyncio.run(run_sandbox(scenario, view=LiveView(200.0, stream=sys.stdout)))


def _left(api: Any, name: str) -> dict[str, list[str]]:
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    return {
        "InferenceService": [o["metadata"]["name"] for o in
                             custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]],
        "Pod": [p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=f"{LABEL}={name}").items],
        "Node": [n.metadata.name for n in core.list_node().items],
        "PersistentVolumeClaim": [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NS).items],
        "PersistentVolume": [v.metadata.name for v in core.list_persistent_volume().items],
    }


NOTHING = {"InferenceService": [], "Pod": [], "Node": [], "PersistentVolumeClaim": [], "PersistentVolume": []}


def test_two_runs_in_a_given_cluster_each_leave_nothing_behind(plane, tmp_path: Path) -> None:
    kubeconfig = plane.kubeconfig
    api = client_for(kubeconfig)
    name = load_service(Scenario())["metadata"]["name"]
    for i in (1, 2):
        result = _run(kubeconfig, tmp_path / f"run{i}")
        assert result.summary["requests"] > 0 and not result.leftover_pids, result.summary
        assert _left(api, name) == NOTHING, f"run {i}"

    # A killed run's volume: the sandbox's label, a hostPath into a folder that is gone
    core = kubernetes.client.CoreV1Api(api)
    pv = model_store_volume(NS, CLAIM)
    core.create_persistent_volume({
        "metadata": {"name": pv, "labels": {SANDBOX_LABEL: "model-store"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(tmp_path / "gone")},
                 "claimRef": {"namespace": NS, "name": CLAIM}}})
    result = _run(kubeconfig, tmp_path / "run3")
    assert result.summary["requests"] > 0
    assert _left(api, name) == NOTHING

    # An InferenceService of that name the sandbox did not make: refused before anything is made, and kept
    body = load_service(Scenario())
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    with pytest.raises(SandboxError, match=f"InferenceService {NS}/{name} already exists in the cluster of"):
        _run(kubeconfig, tmp_path / "run4")
    left = _left(api, name)
    assert left["InferenceService"] == [name] and left["Node"] == [] and left["PersistentVolume"] == [], \
        json.dumps(left)

    # A volume of the sandbox's name that the sandbox did not make (no label): refused, and kept
    kubernetes.client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    core.create_persistent_volume({
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(tmp_path / "theirs")}}})
    with pytest.raises(SandboxError, match=f"PersistentVolume {pv} exists and is not a sandbox's model store"):
        _run(kubeconfig, tmp_path / "run5")
    assert _left(api, name)["PersistentVolume"] == [pv]
