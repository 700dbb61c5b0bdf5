"""The sandbox kubelet's Node objects and their heartbeats.

A kubelet registers its Node with the status filled in (capacity, allocatable,
conditions, addresses), then proves it is alive by renewing a Lease in
``kube-node-lease`` every 10 s (a quarter of the 40 s lease). The node lifecycle
controller reads those renewals: without them for 50 s it marks the Node
``Ready=Unknown`` and taints it unreachable, and the pods would be evicted. The full
Node status is posted again when it changes or every 5 minutes, as the kubelet's
``nodeStatusReportFrequency`` does.

**Capacity.** ``cpu`` and ``memory`` are the machine's (``os.cpu_count()``,
``/proc/meminfo``); ``pods`` is the kubelet's default 110. ``nvidia.com/gpu`` is how
many tritonservers this machine runs side by side, each standing in for a one-GPU
replica: ``GPUS_PER_CORE`` (2) per core, 4 on a 2-core machine, unless
``tritonscale sandbox --gpus N`` says otherwise. Why 2 per core: a replica of the
sandbox's model asks for 500m CPU (``manifests/samples/python-cpu.yaml``), so the
node's CPU and its GPUs run out at the same replica count and the scheduler's answer
does not depend on which one it checks. The replica's own CPU use is far below its
request (a tritonserver serving the cost model at 45 rps used under 0.04 core and 77
MB RSS over 30 s, measured with ``ps``): the rest of the machine's CPU goes to the
control plane, Prometheus, the operator and the load generator. Allocatable equals
capacity (no system or kube reservations).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

from tritonscale.api.spec import GPU_RESOURCE as GPU
from tritonscale.api.status import rfc3339
from tritonscale.kube.client import describe_api_error
from tritonscale.sandbox.pod_network import HOST_IP, node_pod_cidr

log = logging.getLogger(__name__)

GPUS_PER_CORE = 2
MAX_PODS = 110  # the kubelet's default --max-pods
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40  # the kubelet's default nodeLeaseDurationSeconds
LEASE_RENEW_S = LEASE_DURATION_S / 4  # renewInterval = 0.25 x duration: 10 s
STATUS_REPORT_S = 300.0  # nodeStatusReportFrequency
KUBELET_VERSION = "v1.35.8-tritonscale-sandbox"


@dataclass(frozen=True)
class NodeResources:
    cpu: int
    memory_bytes: int
    gpus: int
    pods: int = MAX_PODS

    def as_quantities(self) -> dict[str, str]:
        return {"cpu": str(self.cpu), "memory": f"{self.memory_bytes // 1024}Ki", "pods": str(self.pods),
                GPU: str(self.gpus)}


def _memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def machine_resources(gpus: int | None = None, nodes: int = 1) -> NodeResources:
    """What one of ``nodes`` Nodes offers: an equal share of this machine's cores and memory,
    and ``gpus`` GPUs (default ``GPUS_PER_CORE`` per core of that share)."""
    cores = max(1, (os.cpu_count() or 1) // max(1, nodes))
    return NodeResources(cpu=cores, memory_bytes=_memory_bytes() // max(1, nodes),
                         gpus=GPUS_PER_CORE * cores if gpus is None else gpus)


def node_object(name: str, index: int, resources: NodeResources, now: float) -> dict[str, Any]:
    """The Node as the kubelet registers it: spec and a full status."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": arch,
                                              "tritonscale.io/sandbox-node": "true"}},
        "spec": {"podCIDR": node_pod_cidr(index), "podCIDRs": [node_pod_cidr(index)]},
        "status": node_status(name, resources, now),
    }


def node_status(name: str, resources: NodeResources, now: float) -> dict[str, Any]:
    stamp = rfc3339(now)

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}

    quantities = resources.as_quantities()
    return {
        "capacity": quantities,
        "allocatable": dict(quantities),
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "tritonscale sandbox kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                     "osImage": "tritonscale sandbox", "containerRuntimeVersion": "sandbox://processes",
                     "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": platform.machine()},
    }


def _micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeHeartbeat:
    """Registers the Node, then renews its Lease (and re-posts its status) until stopped."""

    def __init__(self, api_client: Any, name: str, index: int, resources: NodeResources) -> None:
        import kubernetes

        self._core = kubernetes.client.CoreV1Api(api_client)
        self._leases = kubernetes.client.CoordinationV1Api(api_client)
        self._exc = kubernetes.client.ApiException
        self.name, self.index = name, index
        self.resources = resources
        self.uid = ""
        self.errors = 0

    def register(self) -> None:
        """Create the Node (or, when one of that name is left from an earlier run, post its status)."""
        body = node_object(self.name, self.index, self.resources, time.time())
        try:
            created = self._core.create_node(body, _preload_content=False)
        except self._exc as exc:
            if exc.status != 409:
                raise
            created = self._core.patch_node_status(self.name, {"status": body["status"]}, _preload_content=False,
                                                   _content_type="application/merge-patch+json")
        self.uid = json.loads(created.data)["metadata"]["uid"]
        self._renew()

    def _renew(self) -> None:
        name = self.name
        now = time.time()
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": _micro_time(now)}
        try:
            self._leases.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": spec},
                                                _content_type="application/merge-patch+json")
        except self._exc as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.uid}
            self._leases.create_namespaced_lease(LEASE_NAMESPACE, {
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec})

    def _report(self) -> None:
        self._core.patch_node_status(self.name, {"status": node_status(self.name, self.resources, time.time())},
                                     _content_type="application/merge-patch+json")

    async def run(self, stop: asyncio.Event) -> None:
        last_report = time.monotonic()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), LEASE_RENEW_S)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await asyncio.to_thread(self._renew)
                if time.monotonic() - last_report >= STATUS_REPORT_S:
                    await asyncio.to_thread(self._report)
                    last_report = time.monotonic()
            except Exception as exc:  # the apiserver may be briefly away; the lease has 40 s
                self.errors += 1
                log.warning("kubelet: renewing node %s failed: %s", self.name, describe_api_error(exc))
