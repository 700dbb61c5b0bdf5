"""The operator's own HTTP listeners (/healthz, /metrics): on every address of the pod, IPv6 and IPv4.

A pod's primary IP may be IPv6 (an IPv6 single-stack cluster, or a dual-stack one listing IPv6 first): the
kubelet's probes and Prometheus's pod discovery connect to it. Bound to 0.0.0.0 the operator refused them
there -- a liveness probe failing into a restart loop, no metrics (auditE, session 84). One IPv6 socket
with IPV6_V6ONLY off takes both families; a kernel without IPv6 gets an IPv4 socket as before.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

# The kernel has no IPv6 (ipv6.disable=1), or no IPv6 address to bind: IPv4 alone, as before.
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)
T = TypeVar("T")


class _DualStackServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # Off whatever net.ipv6.bindv6only says: IPv4 clients arrive as ::ffff:a.b.c.d.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _every_address(ipv6: Callable[[], T], ipv4: Callable[[], T]) -> T:
    """``ipv6()``, or ``ipv4()`` where the kernel has no IPv6 (``_NO_IPV6``); any other OSError (the port in
    use, not permitted) is raised: one family's refusal is the other's too."""
    try:
        return ipv6()
    except OSError as exc:
        if exc.errno not in _NO_IPV6:
            raise
    return ipv4()


def _bound(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers: TIME_WAIT is no conflict
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def listening_socket(port: int) -> socket.socket:
    """A bound (not listening) TCP socket on ``port`` of every address, as the servers bind it, for a check
    that the port is free; OSError (EADDRINUSE, EACCES) if it is not. The caller closes it."""
    return _every_address(lambda: _bound(socket.AF_INET6, "::", port), lambda: _bound(socket.AF_INET, "0.0.0.0", port))


def serve(port: int, handler: type[BaseHTTPRequestHandler], name: str) -> ThreadingHTTPServer:
    """``handler`` served on ``port`` of every address, IPv6 and IPv4, in a daemon thread named ``name``."""
    server = _every_address(lambda: _DualStackServer(("::", port), handler),
                            lambda: ThreadingHTTPServer(("0.0.0.0", port), handler))
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
