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


def _apiserver(plane: ControlPlane):  # noqa: ANN202 -- a _Component (private to control_plane.py)
    return next(c for c in plane._components if c.name == "kube-apiserver")  # noqa: SLF001


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
    with open(comp.log_path, "ab") as log:
        log.write(b"\n==== restarted by tests/support/apiserver_restart.py ====\n")
    comp.proc, comp.log = process_group.spawn(comp.cmd, log_path=comp.log_path,
                                              env={**os.environ, "KUBECONFIG": os.devnull})
    admin = plane.pki.client_cert(ADMIN_USER, ["system:masters"])
    plane._wait("kube-apiserver", plane.server, "/readyz", started + timeout,  # noqa: SLF001
                verify=plane._tls_context(admin))  # noqa: SLF001
    return time.monotonic() - started
