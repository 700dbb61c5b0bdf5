"""The sandbox's kubelet: a Node on a real API server whose pods run as real tritonservers.

It does a kubelet's job and nothing of the controllers': Deployments, ReplicaSets,
rollouts, the PodDisruptionBudget and garbage collection are the real
kube-controller-manager's, placement is the real kube-scheduler's. What it does:

- registers its Node with its share of this machine's resources and keeps its Lease
  fresh (:mod:`node_registration`);
- list-watches the Pods bound to its Node (``spec.nodeName``, as the kubelet's own
  watch does) and runs one :class:`~tritonscale.sandbox.pod_worker.PodWorker` per pod:
  IP, volumes, init containers, tritonserver, probes, restarts, status, graceful
  deletion;
- hands Prometheus' file_sd the pods whose container runs (:class:`ScrapeTargets`),
  with the labels ``namespace``, ``inferenceservice`` and ``pod`` that the chart's
  relabelling gives real pods, at the host port the pod's ``metrics`` port maps to.

The sandbox gives each kubelet the identity a real one has, ``system:node:<name>`` in
group ``system:nodes``, so the API server's Node authorizer and NodeRestriction
admission limit it to its own Node, Lease and Pods, and to the ConfigMaps, claims
and tokens those Pods use.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonscale.api.spec import LABEL
from tritonscale.api.status import rfc3339
from tritonscale.sandbox.list_watch import ListWatch
from tritonscale.sandbox.node_registration import NodeHeartbeat, NodeResources
from tritonscale.sandbox.pod_network import PodNetwork, node_pod_cidr
from tritonscale.sandbox.pod_volumes import VolumeAPI
from tritonscale.sandbox.pod_worker import PodWorker
from tritonscale.sandbox.prometheus_server import PrometheusServer

log = logging.getLogger(__name__)

# On the sandbox's own shutdown (not a pod deletion) a tritonserver gets this long
# after SIGTERM: the load has stopped, so it has nothing to drain.
SHUTDOWN_GRACE_S = 5.0


class ScrapeTargets:
    """Prometheus' file_sd targets: the union of what every kubelet reports, written on change."""

    def __init__(self, prometheus: PrometheusServer) -> None:
        self.prometheus = prometheus
        self._by_node: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self._written: list[tuple[str, dict[str, str]]] | None = None

    def update(self, node: str, targets: list[tuple[str, dict[str, str]]]) -> None:
        self._by_node[node] = targets
        merged = sorted((t for ts in self._by_node.values() for t in ts), key=lambda t: (t[0], sorted(t[1].items())))
        if merged != self._written:
            self.prometheus.write_targets(merged)
            self._written = merged


@dataclass(frozen=True)
class KubeletEvent:
    at: float  # time.time()
    namespace: str
    pod: str
    service: str  # the pod's tritonscale.io/inferenceservice label, "" if none
    kind: str  # started | ready | crashed | restarted | stopping | stopped | backoff | unhealthy | killing | ...
    message: str


class Kubelet:
    """``await start()`` registers the Node and starts watching; ``await stop()`` stops every pod's
    processes (the pods stay in the API, as when a node goes away).

    ``node_index`` picks the Node's podCIDR (``10.244.<index>.0/24``); kubelets of one
    sandbox share one :class:`PodNetwork` and one :class:`ScrapeTargets`.
    """

    def __init__(self, api_client: Any, workdir: Path | str, *, node_name: str, resources: NodeResources,
                 node_index: int = 0, network: PodNetwork | None = None,
                 targets: ScrapeTargets | None = None,
                 on_event: Callable[[KubeletEvent], None] | None = None) -> None:
        import kubernetes

        self.api_client = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self._exc = kubernetes.client.ApiException
        self.workdir = Path(workdir)
        self.node_name = node_name
        self.pod_cidr = node_pod_cidr(node_index)
        self.resources = resources
        self.network = network or PodNetwork()
        self.targets = targets
        self.on_event = on_event
        self.volume_api = VolumeAPI(api_client)
        self.heartbeat = NodeHeartbeat(api_client, node_name, node_index, resources)
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self.events: list[KubeletEvent] = []
        self.started_pids: list[int] = []  # every container process group ever started
        self.cold_starts_s: list[float] = []  # container start -> Ready, every start
        self.started_at = time.monotonic()
        self.closing = False
        self.shutdown_grace_s = SHUTDOWN_GRACE_S
        self._watch: ListWatch | None = None
        self._stop = asyncio.Event()
        self._heartbeat_task: asyncio.Task | None = None

    # ---- lifecycle

    async def start(self) -> Kubelet:
        await asyncio.to_thread(self.heartbeat.register)
        self._heartbeat_task = asyncio.create_task(self.heartbeat.run(self._stop))
        self._watch = ListWatch(self.core.list_pod_for_all_namespaces, on_change=self._sync,
                                loop=asyncio.get_running_loop(), name=f"kubelet {self.node_name}",
                                field_selector=f"spec.nodeName={self.node_name}").start()
        self.started_at = time.monotonic()
        return self

    async def stop(self) -> None:
        self.closing = True
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        for worker in self.workers.values():
            worker.remove()
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.shutdown_grace_s + 15)
        if self._heartbeat_task is not None:
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        if self.targets is not None:
            self.targets.update(self.node_name, [])

    # ---- the pods bound to our Nodes

    def _sync(self) -> None:
        if self.closing or self._watch is None:
            return
        seen: set[str] = set()
        for pod in self._watch.snapshot():
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.update(pod)
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                if pod["metadata"].get("deletionTimestamp"):  # left by an earlier kubelet
                    asyncio.get_running_loop().run_in_executor(
                        None, self.delete_pod, pod["metadata"]["namespace"], pod["metadata"]["name"], uid)
                continue
            self.workers[uid] = PodWorker(self, pod, self.pod_cidr).start()
        for uid, worker in list(self.workers.items()):
            if uid not in seen:
                if worker.task is not None and worker.task.done():
                    del self.workers[uid]
                elif not worker.removed:
                    worker.remove()
        self.pod_changed()

    def pod_changed(self) -> None:
        """A container started or stopped: keep Prometheus' targets in step."""
        if self.targets is None:
            return
        targets = []
        for w in self.workers.values():
            address = w.host_address("metrics")
            service = w.labels.get(LABEL)
            if w.running and service and address:
                targets.append((address, {"namespace": w.namespace, "inferenceservice": service, "pod": w.name}))
        self.targets.update(self.node_name, targets)

    # ---- API writes (called on worker threads)

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, namespace, {"status": status},
                                              _content_type="application/merge-patch+json")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, body={"gracePeriodSeconds": 0,
                                                                   "preconditions": {"uid": uid}})
        except self._exc as exc:
            if exc.status not in (404, 409):  # already gone, or a new pod of that name
                raise

    def _post_event(self, worker: PodWorker, reason: str, message: str, warning: bool) -> None:
        now = rfc3339(time.time())
        body = {"metadata": {"generateName": f"{worker.name}.", "namespace": worker.namespace},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": worker.namespace,
                                   "name": worker.name, "uid": worker.uid, "fieldPath": "spec.containers{triton}"},
                "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
                "source": {"component": "kubelet", "host": self.node_name},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            self.core.create_namespaced_event(worker.namespace, body, _preload_content=False)
        except Exception as exc:  # Events are best effort, as in the kubelet
            log.debug("kubelet: event %s for %s not recorded: %s", reason, worker.name, exc)

    def event(self, worker: PodWorker, kind: str, message: str, *, reason: str | None = None,
              warning: bool = False) -> None:
        ev = KubeletEvent(time.time(), worker.namespace, worker.name, worker.labels.get(LABEL, ""), kind, message)
        self.events.append(ev)
        log.info("kubelet: %s", message)
        if reason is not None and not self.closing:
            asyncio.get_running_loop().run_in_executor(None, self._post_event, worker, reason, message, warning)
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:  # a broken view must not stop the pods
                log.exception("kubelet: event callback failed")

    # ---- queries (the orchestrator, the chaos step, tests)

    def pods_of(self, namespace: str, service: str) -> list[PodWorker]:
        return [w for w in self.workers.values() if w.namespace == namespace and w.labels.get(LABEL) == service]

    @property
    def restarts(self) -> int:
        return sum(e.kind == "crashed" for e in self.events)

    def kill(self, namespace: str, service: str) -> str:
        """SIGKILL the tritonserver of the longest-running ready pod of ``service``, as a
        crash would; the pod's container is then restarted. Returns the pod's name."""
        ready = sorted((w for w in self.pods_of(namespace, service) if w.ready and not w.deleting.is_set()),
                       key=lambda w: w.start_time)
        for worker in ready:
            if worker.kill():
                return worker.name
        raise LookupError(f"no ready pod of {namespace}/{service} to kill")

