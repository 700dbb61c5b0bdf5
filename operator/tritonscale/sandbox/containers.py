"""How a pod's container spec becomes a host process, and when it may restart.

- :func:`map_args`: the container's args with container paths mapped onto the pod's
  volumes (:func:`pod_volumes.rewrite_paths`) and ``--<name>-port=<containerPort>``
  mapped onto the host port the pod network gave that container port;
- :func:`container_env`: ``env`` with literal values and the downward-API fields a
  container commonly reads (pod name, namespace, IP, node);
- :class:`RestartBackoff`: the kubelet's CrashLoopBackOff timing.
"""

from __future__ import annotations

from typing import Any

from tritonscale.sandbox import pod_volumes
from tritonscale.sandbox.pod_network import HOST_IP


class RestartBackoff:
    """The kubelet's per-container restart backoff (client-go ``flowcontrol.Backoff``
    with 10 s initial and 300 s max, no jitter), as a pure object with explicit times."""

    def __init__(self, initial_s: float = 10.0, max_s: float = 300.0) -> None:
        self.initial_s, self.max_s = initial_s, max_s
        self.backoff_s: float | None = None
        self.last_update = 0.0

    def delay(self, finished_at: float, now: float) -> float:
        """Seconds still to wait before restarting a container that exited at ``finished_at``;
        0 means restart now (and the next exit waits twice as long)."""
        expired = finished_at - self.last_update > 2 * self.max_s
        if self.backoff_s is not None and not expired and now - finished_at < self.backoff_s:
            return self.backoff_s - (now - finished_at)
        if self.backoff_s is None or expired:
            self.backoff_s = self.initial_s
        else:
            self.backoff_s = min(2 * self.backoff_s, self.max_s)
        self.last_update = now
        return 0.0


def map_args(argv: list[str], mounts: list[pod_volumes.Mount], host_ports: dict[int, int]) -> list[str]:
    """A container's args for a host process: container paths onto volumes, and
    ``--<name>-port=<container port>`` onto the port the pod network gave it."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if eq and flag.startswith("--") and flag.endswith("-port") and value.isdigit() \
                and int(value) in host_ports:
            arg = f"{flag}={host_ports[int(value)]}"
        out.append(pod_volumes.rewrite_paths(arg, mounts))
    return out


def container_env(container: dict[str, Any], pod: dict[str, Any], pod_ip: str) -> dict[str, str]:
    """``env`` with literal values and the common downward-API fields."""
    fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
              "status.podIP": pod_ip, "status.hostIP": HOST_IP,
              "spec.nodeName": pod["spec"].get("nodeName", "")}
    env = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") in fields:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env
