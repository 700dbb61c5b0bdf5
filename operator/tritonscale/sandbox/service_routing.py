"""kube-proxy's part for the load generator: where a Service's traffic goes.

The real EndpointSlice controller publishes, for the Service, one endpoint per pod
it selects: the pod IP, the ready/serving/terminating conditions (ready = the pod's
Ready condition and not terminating), and per slice the ports, resolved from the
Service's ``targetPort`` (``http``) to the container port (8000).
:class:`ServiceRouter` list-watches those slices and picks endpoints as kube-proxy
does: the ready ones; only when none is ready, the serving terminating ones
(kube-proxy's terminating-endpoint fallback, GA since 1.28). The load generator
spreads requests round-robin over that list.

Each ``(pod IP, container port)`` is then resolved through the sandbox's pod network
(:mod:`pod_network`) to the 127.0.0.1 port the pod's tritonserver listens on, the
way a CNI route carries a packet for the pod IP to the pod. An endpoint that does
not resolve (a pod on a node of another kubelet) is skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tritonscale.sandbox.list_watch import ListWatch
from tritonscale.sandbox.pod_network import PodNetwork

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _condition(endpoint: dict[str, Any], name: str, default: bool) -> bool:
    value = (endpoint.get("conditions") or {}).get(name)
    return default if value is None else bool(value)


def pick_endpoints(slices: list[dict[str, Any]], port_name: str) -> list[tuple[str, int]]:
    """``(address, port)`` kube-proxy would route ``port_name`` to, sorted, without duplicates."""
    ready: set[tuple[str, int]] = set()
    fallback: set[tuple[str, int]] = set()
    for s in slices:
        if s.get("addressType") != "IPv4":
            continue
        port = next((p.get("port") for p in s.get("ports") or [] if (p.get("name") or "") == port_name), None)
        if port is None:
            continue
        for ep in s.get("endpoints") or []:
            terminating = _condition(ep, "terminating", False)
            # An unset "ready" or "serving" means unknown, which consumers treat as true.
            is_ready = _condition(ep, "ready", True) and not terminating
            serving = _condition(ep, "serving", _condition(ep, "ready", True))
            for address in ep.get("addresses") or []:
                if is_ready:
                    ready.add((address, int(port)))
                elif serving and terminating:
                    fallback.add((address, int(port)))
    return sorted(ready or fallback)


class ServiceRouter:
    """The ready backends of one Service port, as ``127.0.0.1:<port>`` addresses."""

    def __init__(self, api_client: Any, namespace: str, service: str, network: PodNetwork,
                 port_name: str = "http") -> None:
        import kubernetes

        self._discovery = kubernetes.client.DiscoveryV1Api(api_client)
        self.namespace, self.service, self.port_name = namespace, service, port_name
        self.network = network
        self._watch: ListWatch | None = None
        self._backends: list[str] = []

    def start(self) -> ServiceRouter:
        self._watch = ListWatch(self._discovery.list_namespaced_endpoint_slice, self.namespace,
                                on_change=self._refresh, loop=asyncio.get_running_loop(),
                                name=f"endpointslices {self.namespace}/{self.service}",
                                label_selector=f"{SERVICE_NAME_LABEL}={self.service}").start()
        return self

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _refresh(self) -> None:
        assert self._watch is not None
        backends = []
        for address, port in pick_endpoints(self._watch.snapshot(), self.port_name):
            host = self.network.resolve(address, port)
            if host is not None:  # None: no local pod listens there
                backends.append(host)
        self._backends = backends

    def backends(self) -> list[str]:
        """The current list (what the load generator calls at every request)."""
        return list(self._backends)

    def endpoints(self) -> list[tuple[str, int]]:
        """The ``(pod IP, port)`` pairs picked from the EndpointSlices, before resolution."""
        return pick_endpoints(self._watch.snapshot(), self.port_name) if self._watch else []
