"""Pod status as the kubelet writes it: pure functions of what the kubelet knows.

The rules follow ``pkg/kubelet/kubelet_pods.go`` (``getPhase``,
``generateAPIPodStatus``) and ``pkg/kubelet/status/generate.go`` (v1.35):

- **phase**: Pending until the init containers completed and a container has run;
  Running while a container runs or, under ``restartPolicy: Always``, waits to be
  restarted after it exited (CrashLoopBackOff is still Running); Succeeded or Failed
  only once the pod is being deleted and every container has terminated;
- **conditions** (PodScheduled is the scheduler's and is left alone):
  PodReadyToStartContainers (the sandbox -- here the pod IP -- exists),
  Initialized (init containers done), ContainersReady (every container ready) and
  Ready (ContainersReady; no readiness gates here). ``lastTransitionTime`` changes
  only when a condition's status does;
- **containerStatuses**: ``state`` (waiting / running / terminated), ``lastState``
  (the previous instance's termination), ``restartCount``, ``ready``, ``started``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonscale.api.status import rfc3339


@dataclass
class ContainerRecord:
    """One container of a pod, as the kubelet tracks it across restarts."""

    name: str
    image: str
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    container_id: str = ""
    restart_count: int = 0
    ready: bool = False
    started: bool = False

    def to_status(self) -> dict[str, Any]:
        status = {"name": self.name, "image": self.image, "imageID": "", "ready": self.ready,
                  "started": self.started, "restartCount": self.restart_count, "state": self.state,
                  "lastState": self.last_state}
        if self.container_id:
            status["containerID"] = self.container_id
        return status

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> dict[str, Any] | None:
        return self.state.get("terminated")


def running_state(started_at: float) -> dict[str, Any]:
    return {"running": {"startedAt": rfc3339(started_at)}}


def terminated_state(exit_code: int, started_at: float, finished_at: float, container_id: str,
                     signal_name: str = "") -> dict[str, Any]:
    """``state.terminated``: reason Completed for exit 0, Error otherwise (what containerd reports)."""
    return {"terminated": {"exitCode": int(exit_code), "reason": "Completed" if exit_code == 0 else "Error",
                           "startedAt": rfc3339(started_at), "finishedAt": rfc3339(finished_at),
                           "containerID": container_id, **({"message": signal_name} if signal_name else {})}}


def exit_code(returncode: int | None) -> int:
    """Popen's returncode (-9 for SIGKILL) as a container runtime reports it (128 + 9 = 137)."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode


def phase(*, initialized: bool, containers: list[ContainerRecord], deleting: bool) -> str:
    if not initialized:
        return "Pending"
    if deleting and containers and all(c.terminated for c in containers):
        return "Succeeded" if all((c.terminated or {}).get("exitCode") == 0 for c in containers) else "Failed"
    if any(c.running for c in containers):
        return "Running"
    # Waiting without ever having run: still Pending; waiting to restart after an exit:
    # Running (restartPolicy Always, the only one a ReplicaSet's pods have).
    if containers and all(c.last_state or c.terminated for c in containers):
        return "Running"
    return "Pending"


def conditions(previous: list[dict[str, Any]], *, sandbox_ready: bool, init_containers: list[ContainerRecord],
               containers: list[ContainerRecord], now: float) -> list[dict[str, Any]]:
    """The kubelet's four conditions, keeping lastTransitionTime where the status did not change."""
    pending_init = [c.name for c in init_containers if not c.ready]
    not_ready = [c.name for c in containers if not c.ready]
    unready = ("ContainersNotReady", f"containers with unready status: [{' '.join(not_ready)}]")
    wanted: list[tuple[str, bool, tuple[str, str]]] = [
        ("PodReadyToStartContainers", sandbox_ready, ("", "")),
        ("Initialized", not pending_init,
         ("ContainersNotInitialized", f"containers with incomplete status: [{' '.join(pending_init)}]")),
        ("ContainersReady", not not_ready, unready),
        ("Ready", not not_ready, unready),
    ]
    before = {c.get("type"): c for c in previous or []}
    out = []
    for kind, ok, (reason, message) in wanted:
        status = "True" if ok else "False"
        old = before.get(kind) or {}
        cond = {"type": kind, "status": status, "lastProbeTime": None,
                "lastTransitionTime": old.get("lastTransitionTime") if old.get("status") == status else rfc3339(now)}
        if not ok and reason:
            cond["reason"], cond["message"] = reason, message
        out.append(cond)
    return out


def pod_status(*, previous_conditions: list[dict[str, Any]], pod_ip: str | None, host_ip: str,
               start_time: float, init_containers: list[ContainerRecord],
               containers: list[ContainerRecord], deleting: bool, now: float) -> dict[str, Any]:
    """The ``status`` the kubelet patches (PodScheduled and qosClass stay as the API has them)."""
    initialized = all(c.ready for c in init_containers)
    status: dict[str, Any] = {
        "phase": phase(initialized=initialized, containers=containers, deleting=deleting),
        "conditions": conditions(previous_conditions, sandbox_ready=pod_ip is not None,
                                 init_containers=init_containers, containers=containers, now=now),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": rfc3339(start_time),
        "initContainerStatuses": [c.to_status() for c in init_containers],
        "containerStatuses": [c.to_status() for c in containers],
    }
    if pod_ip is not None:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    return status
