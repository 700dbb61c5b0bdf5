"""The sandbox kubelet on the real control plane, with the real controllers and no operator.

The objects are the operator's own (``build_children`` of the sandbox's sized
sample, without the owner); the kubelet runs as ``system:node:sandbox-node-0``, so
the Node authorizer and NodeRestriction check every call it makes. What a cluster
with this kubelet does:

- the Node registers with ``nvidia.com/gpu`` capacity and Ready, its Lease is renewed;
- the Deployment controller's pods run as real tritonservers, from the ConfigMap's
  config.pbtxt and the claim's model; their status has phase, the five conditions,
  pod IP, host IP, start time and container statuses;
- the EndpointSlice controller lists the ready pod IPs on port 8000, and the
  Service router reaches a tritonserver through each;
- a SIGKILLed tritonserver is restarted: restartCount 1, lastState exit code 137;
- a config change is rolled by the real Deployment controller (surge 1, never
  below 2 ready) and the old pods are deleted gracefully;
- more replicas than GPUs: the extra pod stays Pending, Unschedulable;
- scale-down deletes pods through the kubelet: SIGTERM, process gone, object gone.
~100 s.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import until
from tritonscale.api.spec import HASH_ANNOTATION, LABEL
from tritonscale.api.validation import validate_body
from tritonscale.kube.client import client_for
from tritonscale.render.kubernetes_objects import build_children, config_hash, configmap_name
from tritonscale.render.triton_containers import CONFIG_VOLUME
from tritonscale.sandbox.cluster_setup import provision_model_store
from tritonscale.sandbox.kubelet import Kubelet
from tritonscale.sandbox.node_registration import GPU, machine_resources
from tritonscale.sandbox.orchestrator import group_alive
from tritonscale.sandbox.pod_network import PodNetwork
from tritonscale.sandbox.scenario import Scenario, load_service
from tritonscale.sandbox.service_routing import ServiceRouter

NS, NAME, NODE = "default", "linear", "sandbox-node-0"
GPUS = 3


def _children(body: dict[str, Any]) -> list[dict[str, Any]]:
    owner = copy.deepcopy(body)
    owner["metadata"]["uid"] = "not-a-real-owner"
    spec, _ = validate_body(body)
    children = build_children(spec, owner)
    for child in children:
        child["metadata"].pop("ownerReferences")  # no InferenceService here: the GC would collect them
    return children


def _ready(pod: dict[str, Any]) -> bool:
    return {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}.get("Ready") == "True"


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_kubelet_runs_the_controllers_pods_as_tritonservers(plane, tmp_path: Path) -> None:
    import kubernetes

    admin = client_for(plane.kubeconfig)
    core, apps = kubernetes.client.CoreV1Api(admin), kubernetes.client.AppsV1Api(admin)
    node_identity = client_for(plane.kubeconfig_for(f"system:node:{NODE}", ["system:nodes"]))
    body = load_service(Scenario())
    configmap, deployment, service, pdb = _children(body)
    provision_model_store(admin, tmp_path / "store", NS, "models", "linear")
    core.create_namespaced_config_map(NS, configmap)
    core.create_namespaced_service(NS, service)
    kubernetes.client.PolicyV1Api(admin).create_namespaced_pod_disruption_budget(NS, pdb)
    deployment["spec"]["replicas"] = 2
    apps.create_namespaced_deployment(NS, deployment)

    def pods(include_deleting: bool = True) -> list[dict[str, Any]]:
        items = json.loads(core.list_namespaced_pod(NS, label_selector=f"{LABEL}={NAME}",
                                                    _preload_content=False).data)["items"]
        return [p for p in items if include_deleting or not p["metadata"].get("deletionTimestamp")]

    def pod_phases() -> str:
        return f"pods: {[(p['metadata']['name'], (p.get('status') or {}).get('phase')) for p in pods()]}"

    wait = functools.partial(until, detail=pod_phases)

    async def scenario() -> None:
        network = PodNetwork()
        kubelet = Kubelet(node_identity, tmp_path / "kubelet", node_name=NODE,
                          resources=machine_resources(gpus=GPUS), network=network)
        await kubelet.start()
        router = ServiceRouter(admin, NS, NAME, network).start()
        try:
            # The Node and its Lease.
            node = json.loads(core.read_node(NODE, _preload_content=False).data)
            assert node["status"]["capacity"][GPU] == str(GPUS) == node["status"]["allocatable"][GPU]
            assert _ready(node)
            lease = kubernetes.client.CoordinationV1Api(admin).read_namespaced_lease(NODE, "kube-node-lease")
            assert lease.spec.holder_identity == NODE
            first_renewal = lease.spec.renew_time

            # Two pods, Running and Ready, with a full status.
            await wait(lambda: len([p for p in pods() if _ready(p)]) == 2, 90, "2 ready pods")
            for pod in pods():
                status = pod["status"]
                assert status["phase"] == "Running" and pod["spec"]["nodeName"] == NODE
                assert {c["type"]: c["status"] for c in status["conditions"]} == {
                    "PodScheduled": "True", "PodReadyToStartContainers": "True", "Initialized": "True",
                    "ContainersReady": "True", "Ready": "True"}
                assert status["podIP"].startswith("10.244.0.") and status["hostIP"] == "127.0.0.1"
                assert status["startTime"]
                cs = status["containerStatuses"][0]
                assert (cs["name"], cs["ready"], cs["started"], cs["restartCount"]) == ("triton", True, True, 0)
                assert "running" in cs["state"]
                init = status["initContainerStatuses"][0]
                assert init["name"] == "model-fetch" and init["state"]["terminated"]["reason"] == "Completed"
            # The model repository is what the init container assembled: the operator's
            # config.pbtxt byte for byte, and version 1 linked from the claim.
            worker = next(iter(kubelet.workers.values()))
            model_dir = worker.dir / "volumes" / "model-repository" / "linear"
            assert (model_dir / "config.pbtxt").read_text() == configmap["data"]["config.pbtxt"]
            assert (model_dir / "1").is_symlink() and (model_dir / "1").resolve() == (tmp_path / "store/linear/1")

            # EndpointSlices list both pod IPs on 8000; each resolves to a tritonserver that answers.
            ips = {p["status"]["podIP"] for p in pods()}
            await wait(lambda: {ip for ip, _ in router.endpoints()} == ips, 30, "both pods in the EndpointSlice")
            assert {port for _, port in router.endpoints()} == {8000}
            backends = router.backends()
            assert len(backends) == 2
            request = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                for backend in backends:
                    resp = await client.post(f"http://{backend}/v2/models/linear/infer", json=request)
                    assert resp.status_code == 200 and resp.json()["outputs"][0]["data"] == [2, 4, 6, 8]

            # A crash: the kubelet restarts the container; the API shows it.
            victim = kubelet.kill(NS, NAME)
            unready_seen = await wait(lambda: any(p["metadata"]["name"] == victim and not _ready(p) for p in pods()),
                                       10, "the killed pod turns unready")
            assert unready_seen
            restarted = await wait(lambda: next((p for p in pods() if p["metadata"]["name"] == victim
                                                  and _ready(p)), None), 40, "the killed pod Ready again")
            cs = restarted["status"]["containerStatuses"][0]
            assert cs["restartCount"] == 1
            assert cs["lastState"]["terminated"]["exitCode"] == 137
            assert cs["lastState"]["terminated"]["reason"] == "Error"

            # A config change: the real Deployment controller rolls the pods, surge 1, never below 2 ready.
            new_config = configmap["data"]["config.pbtxt"].replace('string_value: "15"', 'string_value: "14"')
            assert new_config != configmap["data"]["config.pbtxt"]
            old_pids = [w.process.pid for w in kubelet.workers.values() if w.process is not None]
            # As the operator writes it: a new ConfigMap (one per config) and a template that mounts it.
            new_name = configmap_name(NAME, new_config)
            core.create_namespaced_config_map(NS, {**configmap, "metadata": {**configmap["metadata"], "name": new_name},
                                                   "data": {"config.pbtxt": new_config}})
            apps.patch_namespaced_deployment(NAME, NS, {"spec": {"template": {
                "metadata": {"annotations": {HASH_ANNOTATION: config_hash(new_config)}},
                "spec": {"volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": new_name}}]}}}})
            ready_counts, live_counts = [], []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                current = await asyncio.to_thread(pods)
                live = [p for p in current if not p["metadata"].get("deletionTimestamp")]
                ready_counts.append(sum(_ready(p) for p in live))
                live_counts.append(len(live))
                hashes = {p["metadata"]["annotations"][HASH_ANNOTATION] for p in current}
                if len(current) == 2 and hashes == {config_hash(new_config)} and all(_ready(p) for p in current):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"the rollout did not finish: ready {ready_counts[-20:]}")
            assert min(ready_counts) >= 2, ready_counts  # maxUnavailable 0
            assert max(live_counts) <= 3, live_counts  # maxSurge 25% of 2 replicas: 1
            for w in kubelet.workers.values():
                if w.running:
                    repo = w.dir / "volumes" / "model-repository" / "linear" / "config.pbtxt"
                    assert repo.read_text() == new_config
            await wait(lambda: not [p for p in old_pids if group_alive(p)], 30, "the old tritonservers exited")

            # More replicas than the Node has GPUs: the extra one stays Pending, Unschedulable.
            apps.patch_namespaced_deployment(NAME, NS, {"spec": {"replicas": GPUS + 1}})
            pending = await wait(lambda: next((p for p in pods() if next(
                (c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"
                 and c.get("reason") == "Unschedulable"), None)), None), 60, "an unschedulable pod")
            scheduled = next(c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
            assert "nvidia.com/gpu" in scheduled["message"], scheduled
            await wait(lambda: len([p for p in pods() if _ready(p)]) == GPUS, 60, f"{GPUS} ready pods")
            assert pending["status"]["phase"] == "Pending" and not pending["spec"].get("nodeName")

            # Scale down: the kubelet stops the pods it is told to delete and removes them.
            running_pids = {w.name: w.process.pid for w in kubelet.workers.values() if w.running}
            apps.patch_namespaced_deployment(NAME, NS, {"spec": {"replicas": 1}})
            await wait(lambda: len(pods()) == 1, 60, "one pod left")
            survivor = pods()[0]["metadata"]["name"]
            gone = [pid for name, pid in running_pids.items() if name != survivor]
            assert gone and not [p for p in gone if group_alive(p)]
            assert [e for e in kubelet.events if e.kind == "stopped"]

            renewed = kubernetes.client.CoordinationV1Api(admin).read_namespaced_lease(NODE, "kube-node-lease")
            assert renewed.spec.renew_time > first_renewal  # renewed every 10 s
        finally:
            router.stop()
            await kubelet.stop()
        assert not [p for p in kubelet.started_pids if group_alive(p)]

    asyncio.run(scenario())
