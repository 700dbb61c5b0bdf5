"""Startup, readiness and liveness probes, run the way the kubelet runs them.

Modelled on ``pkg/kubelet/prober/worker.go`` and ``prober_manager.go`` (Kubernetes
v1.35), because the timing is what the autoscaler sees as a cold start:

- one worker per probe, ticking every ``periodSeconds`` from when the pod is admitted
  (not from when the container starts). If the kubelet itself started less than one
  period ago, a worker first sleeps a random part of the period, as the kubelet does;
- results start as: startup unknown, readiness failure, liveness success, and are
  reset to that whenever the container is restarted (a new container ID);
- nothing is probed before ``initialDelaySeconds`` of the container running; the
  startup probe runs until it succeeds once, readiness and liveness only after that;
- a result changes only after ``successThreshold`` / ``failureThreshold`` equal
  results in a row;
- startup or liveness failure: the container is killed (and restarted under the pod's
  restartPolicy); the worker holds until a new container ID;
- once started, the readiness probe runs at once instead of waiting for its next tick
  (the kubelet's manual trigger), so a pod turns Ready on the first startup success.

So with the operator's probes (startup every 5 s, readiness every 5 s), a tritonserver
whose model is ready 2 s after start is Ready 2-5 s later than Triton says, as in a
cluster. Only ``httpGet`` and ``tcpSocket`` probes run; ``exec`` and ``grpc`` would
need the container's filesystem or a gRPC health client and count as success
(logged once).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)

KINDS = ("startup", "readiness", "liveness")
INITIAL = {"startup": None, "readiness": False, "liveness": True}


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # startup | readiness | liveness
    action: str  # httpGet | tcpSocket | unsupported
    port: int  # container port (a named port resolved against the container's ports)
    path: str = "/"
    period_s: float = 10.0
    timeout_s: float = 1.0
    initial_delay_s: float = 0.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_container(cls, container: dict[str, Any], kind: str) -> ProbeSpec | None:
        """The container's ``<kind>Probe`` with the API's defaults; None if it has none."""
        probe = container.get(f"{kind}Probe")
        if not probe:
            return None
        action = next((a for a in ("httpGet", "tcpSocket") if probe.get(a)), "unsupported")
        handler = probe.get(action) or {}
        port = _container_port(container, handler.get("port"))
        return cls(kind=kind, action=action, port=port, path=handler.get("path") or "/",
                   period_s=float(probe.get("periodSeconds") or 10),
                   timeout_s=float(probe.get("timeoutSeconds") or 1),
                   initial_delay_s=float(probe.get("initialDelaySeconds") or 0),
                   success_threshold=int(probe.get("successThreshold") or 1),
                   failure_threshold=int(probe.get("failureThreshold") or 3))


def _container_port(container: dict[str, Any], port: Any) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    return 0  # a named port the container does not declare: the probe fails, as in a cluster


@dataclass
class RunningContainer:
    """What the probes need to know about the current container instance."""

    id: str
    started_at: float  # monotonic
    running: bool = True


class ContainerProbes:
    """The three probe workers of one container, and what they conclude.

    ``target`` maps a container port to ``host:port`` where it listens;
    ``on_change()`` is called when started/ready changes; ``on_failure(kind)`` when a
    startup or liveness probe decides the container must be killed.
    """

    def __init__(self, container: dict[str, Any], *, target: Callable[[int], str | None],
                 on_change: Callable[[], None], on_failure: Callable[[str], None],
                 kubelet_started_at: float, deleting: Callable[[], bool]) -> None:
        self.specs = {k: s for k in KINDS if (s := ProbeSpec.from_container(container, k)) is not None}
        self.target = target
        self.on_change = on_change
        self.on_failure = on_failure
        self.kubelet_started_at = kubelet_started_at
        self.deleting = deleting
        self.container: RunningContainer | None = None
        self.results: dict[str, bool | None] = {k: INITIAL[k] for k in self.specs}
        self._container_id = {k: "" for k in self.specs}
        self._run: dict[str, tuple[bool | None, int]] = {k: (None, 0) for k in self.specs}  # (last result, in a row)
        self._hold = {k: False for k in self.specs}
        self._trigger = {k: asyncio.Event() for k in self.specs}
        self._tasks: list[asyncio.Task[None]] = []
        self._client = httpx.AsyncClient(trust_env=False)
        for spec in self.specs.values():
            if spec.action == "unsupported":
                log.warning("%s probe: only httpGet and tcpSocket run in the sandbox; counted as success", spec.kind)

    # ---- what the kubelet reads (prober_manager.UpdatePodStatus)

    @property
    def started(self) -> bool:
        c = self.container
        if c is None or not c.running:
            return False
        return "startup" not in self.specs or self.results["startup"] is True

    @property
    def ready(self) -> bool:
        if not self.started or self.container is None:  # started implies a container
            return False
        if "readiness" not in self.specs:
            return True
        if self.results["readiness"] is True and self._container_id["readiness"] == self.container.id:
            return True
        self._trigger["readiness"].set()  # "Trigger an immediate run of the readinessProbe"
        return False

    # ---- lifecycle

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(spec)) for spec in self.specs.values()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    def container_changed(self, container: RunningContainer | None) -> None:
        self.container = container
        for kind in self.specs:  # let every worker look at the new state now
            self._trigger[kind].set()

    # ---- one worker (prober/worker.go: run + doProbe)

    async def _worker(self, spec: ProbeSpec) -> None:
        if spec.period_s > time.monotonic() - self.kubelet_started_at:
            await asyncio.sleep(random.random() * spec.period_s)
        while True:
            if not await self._do_probe(spec):
                return
            trigger = self._trigger[spec.kind]
            try:
                await asyncio.wait_for(trigger.wait(), spec.period_s)
            except asyncio.TimeoutError:
                pass
            trigger.clear()

    def _set(self, kind: str, result: bool | None) -> None:
        if self.results[kind] != result:
            self.results[kind] = result
            self.on_change()

    async def _do_probe(self, spec: ProbeSpec) -> bool:
        kind, c = spec.kind, self.container
        if c is None:
            return True  # no container yet: wait for more information
        if self._container_id[kind] != c.id:
            self._container_id[kind] = c.id
            self._run[kind] = (None, 0)
            self._hold[kind] = False
            self._set(kind, INITIAL[kind])
        if self._hold[kind]:
            return True
        if not c.running:
            self._set(kind, False)
            return True
        if self.deleting() and kind in ("liveness", "startup"):
            self._set(kind, True)
            return False
        if time.monotonic() - c.started_at < spec.initial_delay_s:
            return True
        if (kind == "startup") == self.started:  # startup runs until started; the others after
            return True
        result = await self._probe(spec)
        if self.container is not c:  # restarted while probing: this result is stale
            return True
        last, run = self._run[kind]
        run = run + 1 if last == result else 1
        self._run[kind] = (result, run)
        if (not result and run < spec.failure_threshold) or (result and run < spec.success_threshold):
            return True
        self._set(kind, result)
        if not result and kind in ("liveness", "startup"):
            self._hold[kind] = True  # until a new container ID
            self._run[kind] = (None, 0)
            self.on_failure(kind)
        if result and kind == "startup" and "readiness" in self.specs:
            self._trigger["readiness"].set()
        return True

    async def _probe(self, spec: ProbeSpec) -> bool:
        if spec.action == "unsupported":
            return True
        address = self.target(spec.port)
        if address is None:
            return False
        if spec.action == "tcpSocket":
            host, port = address.rsplit(":", 1)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), spec.timeout_s)
                writer.close()
                return True
            except (OSError, asyncio.TimeoutError):
                return False
        try:
            resp = await self._client.get(f"http://{address}{spec.path}", timeout=spec.timeout_s)
        except httpx.HTTPError:
            return False
        return 200 <= resp.status_code < 400  # the kubelet's httpGet success range
