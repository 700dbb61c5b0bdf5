"""A local node agent: the kubelet + ReplicaSet controller the emulated API lacks.

For every Deployment labelled ``tritonscale.io/inferenceservice`` it keeps
``spec.replicas`` real ``tritonserver`` processes running on 127.0.0.1 and
reports them back in the Deployment's ``status``, the way a cluster would:

- **Pods.** Each replica ("pod") gets its own model repository: the cost model
  (``sandbox/model/model.py``, a batch of n costs a + b*n ms) plus the
  ``config.pbtxt`` the operator rendered into the ConfigMap. The sandbox stands
  in for the init container, which in a cluster copies that ConfigMap next to
  the model files fetched from storage.
- **Readiness.** A pod counts as ready only once Triton answers
  ``/v2/models/<model>/ready`` -- after the model loaded and its warmup ran --
  the same check as the Deployment's readinessProbe. Cold starts are real: about
  2 s for the cost model on this machine.
- **Restarts.** A tritonserver that exits is restarted in place (same pod name,
  same ports, so Prometheus keeps one series per pod), with CrashLoopBackOff-like
  delays of 0, 1, 2, 4 ... 10 s. It is not ready until Triton says so again.
- **Scale-down** stops pods that are not ready first, then the newest, like a
  ReplicaSet. A stopping pod leaves the endpoints at once and gets 1 s to drain
  its in-flight requests before SIGTERM.
- **Rollout.** When the pod template's ``tritonscale.io/config-hash`` changes,
  pods are replaced one at a time with maxSurge 1 / maxUnavailable 0 (what the
  operator's Deployment asks for): start one new pod, and stop an old one only
  once the ready count stays at ``spec.replicas`` without it.
- **Discovery.** Prometheus scrapes every pod that is starting or ready through
  file_sd, with the labels ``namespace``, ``inferenceservice`` and ``pod`` that
  the chart's relabelling gives real pods.
- **Endpoints.** :meth:`NodeAgent.endpoints` lists the HTTP addresses of ready
  pods, which is what a Service routes to.

The agent talks to the API through the official kubernetes client, like any
controller: list Deployments, read ConfigMaps, patch ``deployments/status``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from tritonscale.render.kubernetes_objects import HASH_ANNOTATION, LABEL, config_hash
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.sandbox.tritonserver import TritonProcess, install_model

log = logging.getLogger(__name__)

# Kubelet polls: the API every 0.5 s (a new spec.replicas is acted on within half a
# second, well inside the operator's 2 s tick), processes every 0.1 s (a crashed pod
# leaves the endpoints within 0.1 s, so few requests go to a dead port).
API_POLL_S = 0.5
PROCESS_POLL_S = 0.1
# Triton's /ready after model load + warmup. The cost model takes ~2 s; 120 s is the
# budget a slow CI machine gets before the start counts as failed and is retried.
READY_TIMEOUT_S = 120.0
# In-flight requests on a stopping pod: a batch costs at most ~100 ms in the sandbox,
# so 1 s drains the queue a single replica holds at its capacity.
DRAIN_S = 1.0
RESTART_BACKOFF_S = (0.0, 1.0, 2.0, 4.0, 8.0, 10.0)
# Until the ConfigMap matches the template's hash (the operator writes the ConfigMap
# first, then the Deployment), wait up to this long before using it anyway.
CONFIG_MATCH_GRACE_S = 5.0

_MODEL_NAME = re.compile(r'^\s*name:\s*"([^"]+)"', re.MULTILINE)


class ClusterClient(Protocol):
    def list_deployments(self) -> list[dict[str, Any]]: ...
    def read_configmap(self, namespace: str, name: str) -> Optional[dict[str, Any]]: ...
    def patch_deployment_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...


class KubernetesClusterClient:
    """:class:`ClusterClient` over the official kubernetes client (plain JSON dicts)."""

    def __init__(self, api_client: Any) -> None:
        import kubernetes

        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._exc = kubernetes.client.ApiException

    def list_deployments(self) -> list[dict[str, Any]]:
        resp = self._apps.list_deployment_for_all_namespaces(_preload_content=False)
        return json.loads(resp.data).get("items") or []

    def read_configmap(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        try:
            resp = self._core.read_namespaced_config_map(name, namespace, _preload_content=False)
        except self._exc as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def patch_deployment_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._apps.patch_namespaced_deployment_status(name, namespace, {"status": status})


@dataclass(eq=False)
class Pod:
    """One replica: a tritonserver process and its bookkeeping."""

    name: str
    index: int
    config_hash: str
    process: TritonProcess
    created_at: float  # monotonic
    state: str = "starting"  # starting | ready | crashed | stopping
    restarts: int = 0
    failed_starts: int = 0  # consecutive starts that never became ready
    ready_at: Optional[float] = None
    restart_at: Optional[float] = None
    started_at: float = 0.0  # monotonic, of the current process
    cold_starts_s: list[float] = field(default_factory=list)
    task: Optional[asyncio.Task] = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(eq=False)
class Workload:
    """The pods of one Deployment."""

    namespace: str
    name: str
    service: str  # the tritonscale.io/inferenceservice label value
    replicas: int = 0
    generation: int = 0
    template_hash: str = ""
    configmap: str = ""
    configs: dict[str, tuple[str, str]] = field(default_factory=dict)  # hash -> (model, config.pbtxt)
    pods: list[Pod] = field(default_factory=list)
    next_index: int = 0
    last_status: Optional[dict[str, Any]] = None
    deleted: bool = False
    hash_seen_at: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> list[Pod]:
        return [p for p in self.pods if p.state != "stopping"]

    def status(self) -> dict[str, Any]:
        live = self.live
        ready = sum(1 for p in live if p.ready)
        return {
            "observedGeneration": self.generation,
            "replicas": len(live),
            "updatedReplicas": sum(1 for p in live if p.config_hash == self.template_hash),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, self.replicas - ready),
        }


@dataclass(frozen=True)
class AgentEvent:
    at: float  # time.time()
    namespace: str
    service: str
    pod: str
    kind: str  # started | ready | crashed | restarted | stopped | start-failed
    message: str


class NodeAgent:
    """Runs the pods of every tritonscale Deployment as local tritonserver processes.

    ``run(stop)`` loops until ``stop`` is set; ``shutdown()`` stops every process.
    ``on_event`` is called (on the agent's loop) for each :class:`AgentEvent`.
    """

    def __init__(
        self,
        cluster: ClusterClient,
        workdir: Path | str,
        prometheus: Optional[PrometheusServer] = None,
        *,
        on_event: Optional[Callable[[AgentEvent], None]] = None,
        api_poll_s: float = API_POLL_S,
        ready_timeout_s: float = READY_TIMEOUT_S,
        drain_s: float = DRAIN_S,
    ) -> None:
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.prometheus = prometheus
        self.on_event = on_event
        self.api_poll_s = api_poll_s
        self.ready_timeout_s = ready_timeout_s
        self.drain_s = drain_s
        self.workloads: dict[tuple[str, str], Workload] = {}
        self.events: list[AgentEvent] = []
        self.started_pids: list[int] = []  # every tritonserver ever started (each is its own process group)
        self.api_errors = 0
        self.cold_starts_s: list[float] = []  # process start -> model ready, every start
        self._wake = asyncio.Event()
        self._targets: Optional[list[tuple[str, dict[str, str]]]] = None
        self._background: set[asyncio.Task] = set()
        self._closing = False

    # ---- queries (for the load generator, the live view and tests) ------------------------

    def endpoints(self, namespace: str, service: str) -> list[str]:
        """``host:port`` of the ready pods of ``service``: what its Service routes to."""
        return [p.process.http_address for w in self.workloads.values()
                if w.namespace == namespace and w.service == service for p in w.pods if p.ready]

    def workload(self, namespace: str, name: str) -> Optional[Workload]:
        return self.workloads.get((namespace, name))

    def ready_count(self, namespace: str, name: str) -> int:
        w = self.workload(namespace, name)
        return sum(1 for p in w.live if p.ready) if w else 0

    @property
    def restarts(self) -> int:
        return sum(e.kind == "crashed" for e in self.events)

    def kill(self, namespace: str, name: str, pod: Optional[str] = None) -> str:
        """SIGKILL one pod's tritonserver (the oldest ready one unless ``pod`` is named),
        as a crash would. The agent notices and restarts it. Returns the pod name."""
        w = self.workload(namespace, name)
        candidates = [p for p in (w.live if w else []) if (p.name == pod if pod else p.ready)]
        if not candidates:
            raise LookupError(f"no {'pod ' + pod if pod else 'ready pod'} in {namespace}/{name}")
        victim = candidates[0]
        if victim.process.pid is not None:
            try:  # the whole group: tritonserver and its python-backend stub, as an OOM kill would
                os.killpg(victim.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victim.name

    # ---- main loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        next_api = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_api or self._wake.is_set():
                self._wake.clear()
                next_api = now + self.api_poll_s
                try:
                    deployments = await asyncio.to_thread(self.cluster.list_deployments)
                except Exception as exc:  # the API may be briefly unavailable; keep the pods running
                    self.api_errors += 1
                    log.warning("node agent: listing Deployments failed: %s", exc)
                else:
                    await self._sync(deployments)
            self._check_processes()
            await self._publish()
            try:
                await asyncio.wait_for(self._wake.wait(), PROCESS_POLL_S)
            except asyncio.TimeoutError:
                pass

    async def _sync(self, deployments: list[dict[str, Any]]) -> None:
        seen: set[tuple[str, str]] = set()
        for d in deployments:
            meta = d.get("metadata") or {}
            service = (meta.get("labels") or {}).get(LABEL)
            if not service or meta.get("deletionTimestamp"):
                continue
            key = (meta.get("namespace") or "default", meta["name"])
            seen.add(key)
            w = self.workloads.get(key)
            if w is None:
                w = self.workloads[key] = Workload(namespace=key[0], name=key[1], service=service)
            w.deleted = False
            spec = d.get("spec") or {}
            template = spec.get("template") or {}
            w.replicas = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
            w.generation = int(meta.get("generation") or 0)
            w.template_hash = ((template.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION, "")
            w.configmap = _configmap_name(template) or f"{w.name}-config"
            if await self._ensure_config(w):
                self._reconcile(w)
        for key in [k for k in self.workloads if k not in seen]:
            w = self.workloads[key]
            w.replicas, w.deleted = 0, True
            self._reconcile(w)
            if not w.pods:
                del self.workloads[key]

    async def _ensure_config(self, w: Workload) -> bool:
        if w.template_hash in w.configs:
            return True
        try:
            cm = await asyncio.to_thread(self.cluster.read_configmap, w.namespace, w.configmap)
        except Exception as exc:
            self.api_errors += 1
            log.warning("node agent: reading ConfigMap %s/%s failed: %s", w.namespace, w.configmap, exc)
            return False
        text = ((cm or {}).get("data") or {}).get("config.pbtxt")
        if not text:
            return False
        first_seen = w.hash_seen_at.setdefault(w.template_hash, time.monotonic())
        if w.template_hash and config_hash(text) != w.template_hash:
            if time.monotonic() - first_seen < CONFIG_MATCH_GRACE_S:
                return False  # the ConfigMap for this template is not written yet
            log.warning("node agent: %s/%s config.pbtxt does not match template hash %s; using it anyway",
                        w.namespace, w.configmap, w.template_hash)
        m = _MODEL_NAME.search(text)
        w.configs[w.template_hash] = (m.group(1) if m else w.service, text)
        return True

    # ---- the ReplicaSet / rollout arithmetic -----------------------------------------------

    def _reconcile(self, w: Workload) -> None:
        want = w.replicas
        live = w.live
        current = [p for p in live if p.config_hash == w.template_hash]
        old = [p for p in live if p.config_hash != w.template_hash]
        if not old or want == 0:
            for p in old:
                self._stop(w, p)
            if len(current) < want:
                for _ in range(want - len(current)):
                    self._start(w)
            elif len(current) > want:
                for p in _victims(current, len(current) - want):
                    self._stop(w, p)
            return
        # Rolling update, maxSurge 1 / maxUnavailable 0.
        if len(current) > want:
            for p in _victims(current, len(current) - want):
                self._stop(w, p)
            current = [p for p in w.live if p.config_hash == w.template_hash]
        for p in [p for p in old if not p.ready]:  # never serving: no availability to keep
            self._stop(w, p)
        old = [p for p in old if p.ready]
        ready = sum(1 for p in w.live if p.ready)
        for p in _victims(old, len(old)):
            if ready - 1 < want:
                break
            self._stop(w, p)
            ready -= 1
        if len(current) < want and len(w.live) < want + 1:
            self._start(w)

    def _start(self, w: Workload) -> Pod:
        model, config = w.configs[w.template_hash]
        name = f"{w.name}-{w.next_index}"
        w.next_index += 1
        pod_dir = self.workdir / "pods" / w.namespace / name
        install_model(pod_dir / "models", model, config)
        proc = TritonProcess.with_free_ports(pod_dir / "models", log_path=pod_dir / "tritonserver.log")
        pod = Pod(name=name, index=w.next_index - 1, config_hash=w.template_hash, process=proc,
                  created_at=time.monotonic())
        w.pods.append(pod)
        self._launch(w, pod, model)
        self._event(w, pod, "started", f"{pod.name} starting (ports http {proc.http_port}, "
                                       f"metrics {proc.metrics_port})")
        return pod

    def _launch(self, w: Workload, pod: Pod, model: str) -> None:
        pod.state = "starting"
        pod.started_at = time.monotonic()
        pod.process.start()
        if pod.process.pid is not None:
            self.started_pids.append(pod.process.pid)
        pod.task = self._spawn(self._await_ready(w, pod, model))

    async def _await_ready(self, w: Workload, pod: Pod, model: str) -> None:
        ok = await pod.process.wait_ready(model, timeout=self.ready_timeout_s)
        if pod.state != "starting":
            return
        if ok:
            pod.state = "ready"
            pod.ready_at = time.monotonic()
            pod.failed_starts = 0
            took = pod.ready_at - pod.started_at
            pod.cold_starts_s.append(took)
            self.cold_starts_s.append(took)
            self._event(w, pod, "ready", f"{pod.name} ready after {took:.1f} s (model {model} loaded and warm)")
            self._wake.set()
        elif pod.process.is_alive():  # a startupProbe that never passed: restart the container
            self._event(w, pod, "start-failed", f"{pod.name} not ready after {self.ready_timeout_s:.0f} s; killing it")
            pod.process.kill()
        # An exited process is picked up by _check_processes.

    def _check_processes(self) -> None:
        now = time.monotonic()
        for w in self.workloads.values():
            for pod in w.live:
                if pod.state in ("starting", "ready") and not pod.process.is_alive():
                    code = pod.process.returncode
                    was_ready = pod.ready
                    pod.state = "crashed"
                    pod.restarts += 1
                    if not was_ready:
                        pod.failed_starts += 1
                    delay = RESTART_BACKOFF_S[min(pod.restarts - 1, len(RESTART_BACKOFF_S) - 1)]
                    pod.restart_at = now + delay
                    self._event(w, pod, "crashed",
                                f"{pod.name} tritonserver exited (code {code}); restart #{pod.restarts}"
                                + (f" in {delay:.0f} s" if delay else ""))
                    self._wake.set()
                elif pod.state == "crashed" and pod.restart_at is not None and now >= pod.restart_at \
                        and not self._closing:
                    pod.restart_at = None
                    self._spawn(self._restart(w, pod))

    async def _restart(self, w: Workload, pod: Pod) -> None:
        await asyncio.to_thread(pod.process.stop, 0)  # reap it, close its log, remove its shm
        if pod.state != "crashed" or self._closing:
            return
        if pod.failed_starts >= 2:  # maybe a port got taken meanwhile: move to fresh ones
            old = pod.process
            pod.process = TritonProcess.with_free_ports(old.model_repository, log_path=old.log_path)
        model = w.configs.get(pod.config_hash, (w.service, ""))[0]
        self._launch(w, pod, model)
        self._event(w, pod, "restarted", f"{pod.name} restarted (restart #{pod.restarts})")

    def _stop(self, w: Workload, pod: Pod) -> None:
        if pod.state == "stopping":
            return
        drain = self.drain_s if pod.ready else 0.0
        pod.state = "stopping"
        if pod.task is not None:
            pod.task.cancel()
        self._spawn(self._terminate(w, pod, drain))

    async def _terminate(self, w: Workload, pod: Pod, drain_s: float) -> None:
        try:
            if drain_s:
                await asyncio.sleep(drain_s)
        finally:
            await asyncio.to_thread(pod.process.stop, 5.0)
            if pod in w.pods:
                w.pods.remove(pod)
            self._event(w, pod, "stopped", f"{pod.name} stopped")
            self._wake.set()

    # ---- reporting -------------------------------------------------------------------------

    async def _publish(self) -> None:
        targets = [
            (p.process.metrics_address, {"namespace": w.namespace, "inferenceservice": w.service, "pod": p.name})
            for w in self.workloads.values() for p in w.live
        ]
        if self.prometheus is not None and targets != self._targets:
            self.prometheus.write_targets(targets)
            self._targets = targets
        for w in list(self.workloads.values()):
            status = w.status()
            if status != w.last_status and not w.deleted:
                try:
                    await asyncio.to_thread(self.cluster.patch_deployment_status, w.namespace, w.name, status)
                    w.last_status = status
                except Exception as exc:
                    self.api_errors += 1
                    log.warning("node agent: patching %s/%s status failed: %s", w.namespace, w.name, exc)

    def _event(self, w: Workload, pod: Pod, kind: str, message: str) -> None:
        ev = AgentEvent(time.time(), w.namespace, w.service, pod.name, kind, message)
        self.events.append(ev)
        log.info("node agent: %s", message)
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:  # a broken view must not stop the pods
                log.exception("node agent: event callback failed")

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def shutdown(self) -> None:
        """Stop every tritonserver (SIGTERM, then SIGKILL after 5 s) and wait for them."""
        self._closing = True
        pods = [p for w in self.workloads.values() for p in w.pods]
        for p in pods:
            if p.task is not None:
                p.task.cancel()
        await asyncio.gather(*(asyncio.to_thread(p.process.stop, 5.0) for p in pods), return_exceptions=True)
        # Stops already under way (scale-down) finish on their own threads: wait for them.
        if self._background:
            await asyncio.wait(list(self._background), timeout=15)
        for w in self.workloads.values():
            w.pods.clear()
        if self.prometheus is not None:
            self.prometheus.write_targets([])
            self._targets = []


def _victims(pods: list[Pod], n: int) -> list[Pod]:
    """Which ``n`` pods a ReplicaSet removes first: not ready before ready, then newest."""
    return sorted(pods, key=lambda p: (p.ready, -p.index))[:max(0, n)]


def _configmap_name(template: dict[str, Any]) -> Optional[str]:
    for vol in (template.get("spec") or {}).get("volumes") or []:
        cm = vol.get("configMap")
        if cm and cm.get("name"):
            return cm["name"]
    return None
