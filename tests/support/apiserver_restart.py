"""Stop and start again only the kube-apiserver of a running :class:`ControlPlane`, as a
control-plane upgrade does: same port, same flags (so the same serving certificate in
--cert-dir, the same CA, the same service-account keys), same etcd and its data. etcd,
kube-controller-manager and kube-scheduler keep running throughout."""

from __future__ import annotations

import os
import signal
import socket
import time

from tritonscale import process_group
from tritonscale.cluster import ClusterError, ControlPlane
from tritonscale.cluster.control_plane import ADMIN_USER


def _component(plane: ControlPlane, name: str):  # noqa: ANN202 -- a _Component (private to control_plane.py)
    return next(c for c in plane._components if c.name == name)  # noqa: SLF001


def _apiserver(plane: ControlPlane):  # noqa: ANN202
    return _component(plane, "kube-apiserver")


def _respawn(comp) -> None:  # noqa: ANN001 -- a _Component
    """Start ``comp`` again with its first command line, its log appended after a marker line."""
    with open(comp.log_path, "ab") as log:
        log.write(b"\n==== restarted by tests/support/apiserver_restart.py ====\n")
    comp.proc, comp.log = process_group.spawn(comp.cmd, log_path=comp.log_path,
                                              env={**os.environ, "KUBECONFIG": os.devnull})


def stop_apiserver(plane: ControlPlane, timeout: float = 15.0) -> tuple[int | None, float]:
    """SIGTERM kube-apiserver (SIGKILL after ``timeout``: its graceful shutdown waits for the
    clients' long watches). Returns its exit code and when (``time.monotonic()``) its port first
    refused a connection: from then on clients get "connection refused", as in an upgrade."""
    comp = _apiserver(plane)
    port = int(plane.server.rsplit(":", 1)[1])
    refused_at: float | None = None
    try:
        os.killpg(comp.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while comp.proc.poll() is None and time.monotonic() < deadline:
        if refused_at is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                refused_at = time.monotonic()
        time.sleep(0.05)
    code = process_group.stop_group(comp.proc, 1.0)
    if comp.log is not None:
        comp.log.close()
        comp.log = None
    return code, refused_at if refused_at is not None else time.monotonic()


def start_apiserver(plane: ControlPlane, timeout: float = 120.0) -> float:
    """Start kube-apiserver again with its first command line (its log appended), wait for
    /readyz; returns the seconds it took to become ready."""
    comp = _apiserver(plane)
    if comp.alive():
        raise ClusterError("kube-apiserver is still running")
    started = time.monotonic()
    _respawn(comp)
    admin = plane.pki.client_cert(ADMIN_USER, ["system:masters"])
    plane._wait("kube-apiserver", plane.server, "/readyz", started + timeout,  # noqa: SLF001
                verify=plane._tls_context(admin))  # noqa: SLF001
    return time.monotonic() - started


def restart_controllers(plane: ControlPlane, timeout: float = 60.0) -> None:
    """Restart kube-controller-manager and kube-scheduler (same command lines, logs appended),
    as the clean-up after an outage, so it does not reach the next test: client-go's reflectors
    retry a failed list with a backoff that doubles from 0.8 s to 30 s, plus up to 100% jitter,
    so an informer can stay stale a minute after kube-apiserver is back. Measured
    (/tmp/s50/bindprobe.py): a pre-bound claim created right after the restart bound in 67.5 s
    after a 20 s outage and 117.6 s after a 45 s one; with the controllers restarted, 1.4-16 s
    (the PV controller's 15 s resync). The CI run at 80ae289 lost the next test's claim that
    way (not Bound after 60 s). Fresh processes list at once."""
    deadline = time.monotonic() + timeout
    for name in ("kube-scheduler", "kube-controller-manager"):
        comp = _component(plane, name)
        process_group.stop_group(comp.proc, 10.0)
        if comp.log is not None:
            comp.log.close()
        _respawn(comp)
        port = next(a.split("=", 1)[1] for a in comp.cmd if a.startswith("--secure-port="))
        # /healthz is readable without credentials; the serving certificate is self-signed
        plane._wait(name, f"https://127.0.0.1:{port}", "/healthz", deadline, verify=False)  # noqa: SLF001


def recover(plane: ControlPlane) -> None:
    """After an outage test: kube-apiserver running again, the controllers restarted."""
    if not _apiserver(plane).alive():
        start_apiserver(plane)
    restart_controllers(plane)
