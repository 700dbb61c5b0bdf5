"""The batching tuner's settings in force reach the live tritonservers.

The real operator (the chart's ServiceAccount) on the real control plane, and the sandbox's
kubelet running the pods as real tritonservers (nvidia-pytriton) on one Node of their own.
The InferenceService is the sandbox's sized sample with ``batching.autoTune.enabled``. Acting as
the tuner (which writes ``status.batching`` in the autoscaler's tick), the test writes new
settings in force; the reconciler then renders them into the ConfigMap and applies them, and
Triton's own ``GET v2/models/<m>/config`` on the serving pod reads them back. ``kubectl get tis
-o wide`` shows the delay in force. ~40 s.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest

from support.cluster import delete_if_present, run_tool, until
from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.cluster import ControlPlane
from tritonscale.kube.client import client_for
from tritonscale.render.kubernetes_objects import mounted_configmap
from tritonscale.sandbox.cluster_setup import provision_model_store
from tritonscale.sandbox.kubelet import Kubelet
from tritonscale.sandbox.node_registration import machine_resources
from tritonscale.sandbox.pod_network import PodNetwork
from tritonscale.sandbox.preflight import preflight
from tritonscale.sandbox.scenario import Scenario, load_service

NAME = "linear"
TUNED = {"maxQueueDelayMicroseconds": 500, "preferredBatchSizes": [4], "source": "tuner",
         "reason": "MoreCapacity", "message": "set by the test, acting as the tuner"}


def service(namespace: str, node: str) -> dict[str, Any]:
    body = copy.deepcopy(load_service(Scenario()))
    body["metadata"] = {"name": NAME, "namespace": namespace}
    body["spec"]["batching"]["autoTune"] = {"enabled": True}
    body["spec"]["runtime"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # this test's kubelet
    body["spec"]["scaling"].update({"minReplicas": 1, "maxReplicas": 2, "intervalSeconds": 2})
    return body


def batcher_of(address: str) -> tuple[int, list[int]] | None:
    """The dynamic batcher's delay and preferred sizes as the tritonserver reports them."""
    try:
        resp = httpx.get(f"http://{address}/v2/models/{NAME}/config", timeout=5, trust_env=False)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    batching = resp.json().get("dynamic_batching") or {}
    return int(batching.get("max_queue_delay_microseconds", 0)), list(batching.get("preferred_batch_size") or [])


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_status_batching_change_reaches_the_live_tritonserver(
        control_plane: ControlPlane, api_client: kubernetes.client.ApiClient, namespace: str,
        start_operator: Callable[..., Any], tmp_path: Path) -> None:
    missing = preflight("step")
    if missing:
        pytest.skip("; ".join(m.what for m in missing))
    custom = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    node = f"tuner-node-{uuid.uuid4().hex[:6]}"
    pv = provision_model_store(api_client, tmp_path / "store", namespace, "models", "linear")
    network = PodNetwork()
    node_client = client_for(control_plane.kubeconfig_for(f"system:node:{node}", ["system:nodes"]))
    kubelet = Kubelet(node_client, tmp_path / "kubelet", node_name=node, resources=machine_resources(gpus=2),
                      network=network)
    start_operator()
    await kubelet.start()

    def serving() -> list[str]:
        return [a for w in kubelet.workers.values() if w.ready and not w.deleting.is_set()
                and (a := w.host_address("http")) is not None]

    def status_batching() -> dict[str, Any] | None:
        got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
        return (got.get("status") or {}).get("batching")

    try:
        await asyncio.to_thread(custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                service(namespace, node))
        first = (await until(serving, 90, "a ready tritonserver"))[0]
        assert batcher_of(first) == (2000, [2, 4])  # the spec's values, as config.pbtxt gave them
        # The autoscaler's first tick writes the spec's values as those in force.
        spec_values = await until(status_batching, 30, "status.batching from the first tick")
        assert (spec_values["source"], spec_values["maxQueueDelayMicroseconds"]) == ("spec", 2000)

        in_force = {**TUNED, "lastChangeTime": "2026-11-22T12:00:00Z"}

        def tuned_serving() -> list[str]:
            # Once status.batching says source: tuner, the ticks keep its settings (no metrics here,
            # so the tuner holds); a tick that read status just before this write and wrote just
            # after would put the spec's back, so the write is repeated until it holds.
            if (status_batching() or {}).get("source") != "tuner":
                custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, NAME,
                                                             {"status": {"batching": in_force}})
            return [a for a in serving() if batcher_of(a) == (500, [4])]

        await until(tuned_serving, 90, "a ready tritonserver serving the tuned settings")
        deployment = await asyncio.to_thread(kubernetes.client.AppsV1Api(api_client).read_namespaced_deployment,
                                             NAME, namespace)
        mounted = mounted_configmap(api_client.sanitize_for_serialization(deployment))
        configmap = await asyncio.to_thread(core.read_namespaced_config_map, mounted, namespace)
        text = configmap.data["config.pbtxt"]
        assert "  preferred_batch_size: [ 4 ]\n  max_queue_delay_microseconds: 500\n" in text
        now = status_batching() or {}
        assert {k: now.get(k) for k in in_force} == in_force

        wide = await asyncio.to_thread(run_tool, "kubectl", "--kubeconfig", str(control_plane.kubeconfig), "get",
                                       "tis", "-n", namespace, "-o", "wide")
        header, row = wide.stdout.splitlines()[:2]
        at = header.index("QUEUEDELAY(US)")  # kubectl aligns columns; an empty P95 leaves no token
        assert row[at:].split()[0] == "500", wide.stdout
    finally:
        await kubelet.stop()
        # Remove the Node and its Lease, as the test stand-in kubelet does: a later test's pods
        # must not be scheduled onto a Node nothing runs.
        await asyncio.to_thread(delete_if_present, core.delete_node, node)
        leases = kubernetes.client.CoordinationV1Api(api_client)
        await asyncio.to_thread(delete_if_present, leases.delete_namespaced_lease, node, "kube-node-lease")
        await asyncio.to_thread(core.delete_persistent_volume, pv)
