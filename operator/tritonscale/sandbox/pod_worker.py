"""One pod on the sandbox's kubelet, from binding to deletion.

Like the kubelet's pod worker (``pkg/kubelet/pod_workers.go`` + ``kuberuntime``):

1. **Sandbox**: an IP from the Node's podCIDR and a host port per container port
   (:mod:`pod_network`); PodReadyToStartContainers turns True.
2. **Volumes** (:mod:`pod_volumes`); a failed mount (ConfigMap not written yet,
   claim not bound) is retried every ``MOUNT_RETRY_S`` with a FailedMount Event.
3. **Init containers**, in order, each to completion. They run as host processes
   with their paths mapped onto the volumes: tritonscale's ``model-fetch`` runs its
   own ``/bin/sh`` script, which for a ``pvc://`` model symlinks the version
   directories out of the claim and copies ``config.pbtxt`` out of the ConfigMap
   volume. The claim is the model store the sandbox provisions with the cost model
   (``sandbox/model/model.py``) as version 1: that file stands in for a model
   fetched from storage, the only thing here that is not the operator's own output.
   An ``s3://`` or ``gs://`` model would need the AWS or gcloud CLI and fails the
   init container, as it would on a node without them.
4. **The container**: tritonserver (the binary bundled in nvidia-pytriton) started
   with the container's own ``command``/``args``, after mapping container paths
   onto volumes and container ports onto host ports; ``env`` values are passed on.
   Probes run as :mod:`probes` describes.
5. **Restarts** (``restartPolicy: Always``): an exit is noticed on the next relist
   (``RELIST_S``, the kubelet's PLEG period); the first restart is immediate, then
   CrashLoopBackOff waits 10 s, 20 s, 40 s ... up to 300 s, reset after 10 minutes
   without a crash (the kubelet's container backoff).
6. **Deletion**: when the pod gets a ``deletionTimestamp``, SIGTERM to the
   container's process group, up to ``deletionGracePeriodSeconds`` to exit, then
   SIGKILL; the final status (containers terminated, phase Succeeded or Failed) is
   written and the pod object deleted with grace 0 and a uid precondition.

Status is written as a JSON merge patch of ``status`` whenever it changes
(:mod:`pod_status`); the scheduler's PodScheduled condition is carried along.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonscale.kube.client import describe_api_error
from tritonscale.sandbox import pod_volumes
from tritonscale.sandbox.containers import RestartBackoff, container_env, map_args
from tritonscale.sandbox.pod_network import HOST_IP, PodAddress
from tritonscale.sandbox.pod_status import ContainerRecord, exit_code, pod_status, running_state, terminated_state
from tritonscale.sandbox.probes import ContainerProbes, RunningContainer
from tritonscale.sandbox.tritonserver import TritonProcess

if TYPE_CHECKING:
    from tritonscale.sandbox.kubelet import Kubelet

log = logging.getLogger(__name__)

RELIST_S = 1.0  # the kubelet's PLEG relist period: how soon an exited container is noticed
MOUNT_RETRY_S = 2.0
INIT_TIMEOUT_S = 120.0
KUBELET_CONDITIONS = {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}


class PodWorker:
    """Runs one pod; :meth:`update` hands it each new version of the pod object."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any], pod_cidr: str) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.pod_cidr = pod_cidr
        self.dir = kubelet.workdir / "pods" / self.namespace / f"{self.name}_{self.uid[:8]}"
        spec = pod["spec"]
        self.init = [ContainerRecord(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []]
        self.containers = [ContainerRecord(c["name"], c.get("image", "")) for c in spec["containers"]]
        self.address: PodAddress | None = None
        self.start_time = time.time()
        self.process: TritonProcess | None = None
        self.probes: ContainerProbes | None = None
        self.deleting = asyncio.Event()
        self.removed = False  # the pod object is gone from the API (force-deleted)
        self.cold_starts_s: list[float] = []
        self._container_started = 0.0  # monotonic, of the current instance
        self._container_started_wall = 0.0
        self._finished_at = 0.0  # wall time the last container instance exited
        self._conditions: list[dict[str, Any]] = []
        self._dirty = asyncio.Event()
        self._probe_kill: str | None = None
        self._wake = asyncio.Event()
        self._last_status: dict[str, Any] | None = None
        self.task: asyncio.Task | None = None

    # ---- what the kubelet reads

    @property
    def labels(self) -> dict[str, str]:
        return self.pod["metadata"].get("labels") or {}

    @property
    def ready(self) -> bool:
        return bool(self.containers) and all(c.ready for c in self.containers)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def host_address(self, port_name: str) -> str | None:
        """127.0.0.1:<host port> of the container port called ``port_name``."""
        for p in self.pod["spec"]["containers"][0].get("ports") or []:
            if p.get("name") == port_name and self.address and p["containerPort"] in self.address.host_ports:
                return self.address.host_address(p["containerPort"])
        return None

    # ---- driven by the kubelet

    def start(self) -> PodWorker:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")
        if self.pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()
        return self

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not self.deleting.is_set():
            self.deleting.set()
            self._wake.set()

    def remove(self) -> None:
        """The pod object is gone from the API: stop, and write nothing more."""
        self.removed = True
        self.deleting.set()
        self._wake.set()

    def kill(self) -> bool:
        """SIGKILL the container's whole process group, as the OOM killer would; False if none runs."""
        if not self.running:
            return False
        assert self.process is not None and self.process.pid is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    # ---- the pod's life

    async def _run(self) -> None:
        writer = asyncio.create_task(self._status_writer())
        try:
            try:
                volumes = await self._prepare()
                if volumes is not None and await self._run_init(volumes):
                    await self._run_container(volumes)
            except Exception as exc:  # a bug here must not take the other pods down, nor keep this one
                log.exception("kubelet: pod %s/%s failed: %s", self.namespace, self.name, exc)
                self.kubelet.event(self, "failed", f"{self.name}: kubelet error: {exc}")
                self._waiting(self.containers, "CreateContainerError", f"sandbox kubelet: {exc}")
                await self.deleting.wait()  # until its deletion, which is still honoured
            await self._terminate()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("kubelet: stopping pod %s/%s failed: %s", self.namespace, self.name, exc)
        finally:
            if self.probes is not None:
                await self.probes.stop()
            if self.process is not None:
                await asyncio.to_thread(self.process.stop, 0)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            self.kubelet.network.detach(self.uid)
            self.kubelet.pod_changed()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, or return True at once when the pod is being deleted."""
        try:
            await asyncio.wait_for(self.deleting.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    async def _prepare(self) -> dict[str, Path] | None:
        container = self.pod["spec"]["containers"][0]
        ports = [p["containerPort"] for p in container.get("ports") or []]
        self.address = self.kubelet.network.attach(self.uid, self.pod_cidr, ports)
        self._mark()
        while not self.deleting.is_set():
            try:
                return await asyncio.to_thread(pod_volumes.set_up, self.kubelet.volume_api, self.pod,
                                               self.dir / "volumes")
            except pod_volumes.MountError as exc:
                self._waiting(self.containers, "ContainerCreating", "")
                self.kubelet.event(self, "failed-mount", f"{self.name}: MountVolume.SetUp failed: {exc}",
                                   reason="FailedMount", warning=True)
            except Exception as exc:  # the API briefly away
                log.warning("kubelet: mounting volumes of %s failed: %s", self.name, describe_api_error(exc))
            if await self._sleep(MOUNT_RETRY_S):
                break
        return None

    def _waiting(self, records: list[ContainerRecord], reason: str, message: str) -> None:
        for rec in records:
            rec.state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        self._mark()

    async def _run_init(self, volumes: dict[str, Path]) -> bool:
        """Every init container to completion, in order; False if the pod is deleted first."""
        for spec, rec in zip(self.pod["spec"].get("initContainers") or [], self.init, strict=True):
            backoff = RestartBackoff()
            first = True
            while not rec.ready:
                if self.deleting.is_set():
                    return False
                if not first:
                    delay = backoff.delay(self._finished_at, time.time())
                    if delay > 0:
                        self._back_off(rec, backoff, delay)
                        if await self._sleep(delay):
                            return False
                        continue
                    rec.restart_count += 1
                first = False
                await self._run_init_once(spec, rec, volumes)
        return not self.deleting.is_set()

    def _back_off(self, rec: ContainerRecord, backoff: RestartBackoff, delay: float) -> None:
        rec.last_state = {"terminated": rec.terminated}
        rec.state = {"waiting": {"reason": "CrashLoopBackOff",
                                 "message": f"back-off {backoff.backoff_s:.0f}s restarting failed container="
                                            f"{rec.name} pod={self.name}_{self.namespace}({self.uid})"}}
        self._mark()
        self.kubelet.event(self, "backoff", f"{self.name}: back-off {delay:.0f} s restarting failed container "
                           f"{rec.name}", reason="BackOff", warning=True)

    async def _run_init_once(self, spec: dict[str, Any], rec: ContainerRecord, volumes: dict[str, Path]) -> None:
        mounts = pod_volumes.mounts(spec, volumes)
        argv = [pod_volumes.rewrite_paths(a, mounts) for a in (spec.get("command") or []) + (spec.get("args") or [])]
        log_path = self.dir / f"{rec.name}.log"
        started = time.time()
        rec.container_id = f"sandbox://{self.uid[:8]}-{rec.name}-{rec.restart_count}"
        rec.state = running_state(started)
        self._mark()
        with open(log_path, "ab") as out:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, cwd=str(self.dir),
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                         **container_env(spec, self.pod, self.address.ip if self.address else "")},
                    start_new_session=True)
            except OSError as exc:  # no such executable on this machine: exit code 127, as a shell says
                out.write(f"sandbox kubelet: cannot run {argv[:1]}: {exc}\n".encode())
                proc, code = None, 127
            if proc is not None:
                try:
                    code = await asyncio.wait_for(proc.wait(), INIT_TIMEOUT_S)
                except asyncio.TimeoutError:
                    proc.kill()
                    code = await proc.wait()
        self._finished_at = time.time()
        rec.state = terminated_state(exit_code(code), started, self._finished_at, rec.container_id)
        rec.ready = code == 0
        if code != 0:
            self.kubelet.event(self, "init-failed", f"{self.name}: init container {rec.name} exited with "
                               f"{exit_code(code)}: {shlex.join(argv)[:200]}; log {log_path}", warning=True)
        self._mark()

    async def _run_container(self, volumes: dict[str, Path]) -> None:
        spec = self.pod["spec"]["containers"][0]
        rec = self.containers[0]
        argv = (spec.get("command") or []) + (spec.get("args") or [])
        if len(self.containers) != 1 or not argv or Path(argv[0]).name != "tritonserver":
            self._waiting(self.containers, "CreateContainerError",
                          "the sandbox's kubelet runs pods with one container whose command is tritonserver")
            await self.deleting.wait()
            return
        address = self.address
        assert address is not None
        mounts = pod_volumes.mounts(spec, volumes)
        args = map_args(argv[1:], mounts, address.host_ports)
        repo = next((a.partition("=")[2] for a in args if a.startswith("--model-repository=")), str(self.dir))
        ports = {p.get("name"): address.host_ports[p["containerPort"]] for p in spec.get("ports") or []}
        env = container_env(spec, self.pod, address.ip)
        self.probes = ContainerProbes(
            spec, target=lambda port: address.host_address(port) if port in address.host_ports else None,
            on_change=self._probes_changed, on_failure=self._probe_failed,
            kubelet_started_at=self.kubelet.started_at, deleting=self.deleting.is_set)
        self.probes.start()
        backoff = RestartBackoff()
        first = True
        while not self.deleting.is_set():
            if not first:
                delay = backoff.delay(self._finished_at, time.time())
                if delay > 0:
                    self._back_off(rec, backoff, delay)
                    if await self._sleep(delay):
                        break
                    continue
            self.process = TritonProcess(Path(repo), ports.get("http", 0), ports.get("grpc", 0),
                                         ports.get("metrics", 0), log_path=self.dir / f"{rec.name}.log",
                                         container_args=args, env=env)
            self.process.start()
            assert self.process.pid is not None  # started
            self.kubelet.started_pids.append(self.process.pid)
            now = time.time()
            if not first:
                rec.restart_count += 1
                if "terminated" in rec.state:
                    rec.last_state = {"terminated": rec.terminated}
            rec.container_id = f"sandbox://{self.process.pid}"
            rec.state = running_state(now)
            rec.ready = rec.started = False
            self._container_started = time.monotonic()
            self._container_started_wall = now
            self._probe_kill = None
            self.probes.container_changed(RunningContainer(rec.container_id, self._container_started))
            self._mark()
            self.kubelet.event(self, "started" if first else "restarted",
                               f"{self.name} {'started' if first else 'restarted'} (restart #{rec.restart_count}; "
                               f"pod IP {address.ip}, http on 127.0.0.1:{ports.get('http')})",
                               reason="Started")
            first = False
            if await self._watch_container():
                break  # being deleted: _terminate stops it
            code = exit_code(self.process.returncode)
            self._finished_at = time.time()
            rec.state = terminated_state(code, now, self._finished_at, rec.container_id)
            rec.ready = rec.started = False
            self.probes.container_changed(RunningContainer(rec.container_id, self._container_started, running=False))
            await asyncio.to_thread(self.process.stop, 0)  # reap it, close its log, remove its shm
            self._mark()
            self.kubelet.event(self, "crashed", f"{self.name} tritonserver exited (code {code})")

    async def _watch_container(self) -> bool:
        """Until the container exits (True: the pod is being deleted instead). A failed
        startup or liveness probe kills it with the pod's grace period."""
        assert self.process is not None
        while self.process.is_alive():
            if self.deleting.is_set():
                return True
            if self._probe_kill is not None:
                grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                self.kubelet.event(self, "killing", f"{self.name}: container failed its {self._probe_kill} probe, "
                                   "will be restarted", reason="Killing")
                self._probe_kill = None
                await self._stop_container(grace)
                return False
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), RELIST_S)
            except asyncio.TimeoutError:
                pass
        return False

    async def _stop_container(self, grace: float) -> None:
        """SIGTERM the container's process group, give it ``grace`` seconds, then SIGKILL what
        is left. Waits on the loop, not on a thread: several pods stopping at once must not
        hold the thread pool the status writes need."""
        assert self.process is not None and self.process.pid is not None
        if self.process.is_alive():
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            while self.process.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        await asyncio.to_thread(self.process.stop, 0)  # SIGKILL the rest, reap, close the log, remove shm

    def _probes_changed(self) -> None:
        rec = self.containers[0]
        assert self.probes is not None
        started, ready = self.probes.started, self.probes.ready
        if (started, ready) == (rec.started, rec.ready):
            return
        became_ready = ready and not rec.ready
        rec.started, rec.ready = started, ready
        self._mark()
        if became_ready:
            took = time.monotonic() - self._container_started
            self.cold_starts_s.append(took)
            self.kubelet.cold_starts_s.append(took)
            self.kubelet.event(self, "ready", f"{self.name} ready {took:.1f} s after its container started")
        self.kubelet.pod_changed()

    def _probe_failed(self, kind: str) -> None:
        self._probe_kill = kind
        self.kubelet.event(self, "unhealthy", f"{self.name}: {kind} probe failed", reason="Unhealthy", warning=True)
        self._wake.set()

    async def _terminate(self) -> None:
        """The pod is being deleted (or is gone): stop the container within the grace period,
        write the final status, delete the object."""
        if self.process is not None and self.process.is_alive():
            meta = self.pod["metadata"]
            grace = meta.get("deletionGracePeriodSeconds")
            grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace)
            if self.kubelet.closing:
                grace = min(grace, self.kubelet.shutdown_grace_s)
            self.kubelet.event(self, "stopping", f"{self.name} stopping (grace {grace:.0f} s)",
                               reason="Killing")
            rec = self.containers[0]
            began = time.time()
            await self._stop_container(grace)
            rec.state = terminated_state(exit_code(self.process.returncode), self._container_started_wall,
                                         time.time(), rec.container_id)
            rec.ready = rec.started = False
            self.kubelet.event(self, "stopped", f"{self.name} stopped after {time.time() - began:.1f} s")
        if self.removed:
            return
        await self._write_status()
        await asyncio.to_thread(self.kubelet.delete_pod, self.namespace, self.name, self.uid)

    # ---- status

    def _mark(self) -> None:
        self._dirty.set()

    def _status(self) -> dict[str, Any]:
        status = pod_status(previous_conditions=self._conditions, pod_ip=self.address.ip if self.address else None,
                            host_ip=HOST_IP, start_time=self.start_time, init_containers=self.init,
                            containers=self.containers, deleting=self.deleting.is_set(), now=time.time())
        self._conditions = status["conditions"]
        others = [c for c in (self.pod.get("status") or {}).get("conditions") or []
                  if c.get("type") not in KUBELET_CONDITIONS]
        status["conditions"] = others + status["conditions"]
        return status

    async def _write_status(self) -> None:
        status = self._status()
        if status == self._last_status or self.removed:
            return
        await asyncio.to_thread(self.kubelet.patch_pod_status, self.namespace, self.name, status)
        self._last_status = status

    async def _status_writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._write_status()
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    return  # the pod is gone
                log.warning("kubelet: writing the status of %s failed: %s", self.name, describe_api_error(exc))
                await asyncio.sleep(1.0)
                self._dirty.set()

