"""The sandbox's pod network: pod IPs from each Node's podCIDR, and where pods really listen.

Every pod gets its own IP from its Node's ``spec.podCIDR`` (``10.244.<node>.0/24``), as
a CNI plugin would give it. That IP is what the pod's status, the Service's
EndpointSlices and ``kubectl get pods -o wide`` show, and the EndpointSlice port is the
container port (8000 for ``http``), exactly as in a cluster.

Nothing listens on those IPs: the sandbox creates no network namespaces (no root
needed). Instead each container port gets a free port on 127.0.0.1, and the kubelet
starts tritonserver on it (it rewrites ``--http-port=8000`` to that port). This table
maps ``(pod IP, container port) -> 127.0.0.1:<host port>``, like the routes a CNI
installs; the Service router (kube-proxy's stand-in) and Prometheus discovery
resolve endpoints through it.

Why not give each pod a 127.x.y.z address and skip the table: the apiserver rejects
loopback addresses in EndpointSlices ("may not be in the loopback range"), so the
real EndpointSlice controller could not publish them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from tritonscale.sandbox.tritonserver import free_port

# The pod CIDR kubeadm clusters with flannel use; node i gets 10.244.i.0/24.
CLUSTER_POD_CIDR = ipaddress.ip_network("10.244.0.0/16")
MAX_NODES = 2 ** (24 - CLUSTER_POD_CIDR.prefixlen)  # one /24 per Node
# What pods' hostIP says: the kubelet's processes do listen on the loopback interface.
HOST_IP = "127.0.0.1"


def node_pod_cidr(index: int) -> str:
    return str(list(CLUSTER_POD_CIDR.subnets(new_prefix=24))[index])


@dataclass
class PodAddress:
    ip: str
    host_ports: dict[int, int] = field(default_factory=dict)  # containerPort -> 127.0.0.1 port

    def host_address(self, container_port: int) -> str:
        return f"{HOST_IP}:{self.host_ports[container_port]}"


class PodNetwork:
    """Pod IP allocation per Node podCIDR plus the (IP, container port) -> local port table."""

    def __init__(self) -> None:
        self._by_pod: dict[str, PodAddress] = {}  # pod uid -> address
        self._by_ip: dict[str, PodAddress] = {}

    def attach(self, pod_uid: str, pod_cidr: str, container_ports: Iterable[int]) -> PodAddress:
        """An IP for the pod (idempotent per uid) and a fresh host port per container port."""
        if pod_uid in self._by_pod:
            return self._by_pod[pod_uid]
        network = ipaddress.ip_network(pod_cidr)
        # .0 is the network and .1 the bridge's gateway in the usual CNI layout.
        ip = next((str(a) for a in list(network.hosts())[1:] if str(a) not in self._by_ip), None)
        if ip is None:
            raise RuntimeError(f"pod CIDR {pod_cidr} is exhausted")
        taken = {p for a in self._by_pod.values() for p in a.host_ports.values()}
        ports: dict[int, int] = {}
        for container_port in container_ports:
            port = free_port()
            while port in taken or port in ports.values():
                port = free_port()
            ports[int(container_port)] = port
        address = PodAddress(ip, ports)
        self._by_pod[pod_uid] = address
        self._by_ip[ip] = address
        return address

    def detach(self, pod_uid: str) -> None:
        address = self._by_pod.pop(pod_uid, None)
        if address is not None:
            self._by_ip.pop(address.ip, None)

    def resolve(self, ip: str, port: int) -> str | None:
        """``127.0.0.1:<host port>`` where ``ip:port`` really listens, or None if no pod has it."""
        address = self._by_ip.get(ip)
        if address is None or int(port) not in address.host_ports:
            return None
        return address.host_address(int(port))
