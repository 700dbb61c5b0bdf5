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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The kernel has no IPv6 (ipv6.disable=1), or no IPv6 address to bind: IPv4 alone, as before.
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


class _DualStackServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # Off whatever net.ipv6.bindv6only says: IPv4 clients arrive as ::ffff:a.b.c.d.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _ipv6_missing(exc: OSError) -> bool:
    return exc.errno in _NO_IPV6


def listening_socket(port: int) -> socket.socket:
    """A bound (not listening) TCP socket on ``port`` of every address, as the servers bind it, for a check
    that the port is free; OSError (EADDRINUSE, EACCES) if it is not. The caller closes it."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError as exc:
        if not _ipv6_missing(exc):
            raise
    else:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers: TIME_WAIT is no conflict
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", port))
            return sock
        except OSError as exc:
            sock.close()
            if not _ipv6_missing(exc):
                raise
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(port: int, handler: type[BaseHTTPRequestHandler], name: str) -> ThreadingHTTPServer:
    """``handler`` served on ``port`` of every address, IPv6 and IPv4, in a daemon thread named ``name``."""
    server: ThreadingHTTPServer
    try:
        server = _DualStackServer(("::", port), handler)
    except OSError as exc:
        if not _ipv6_missing(exc):
            raise
        server = ThreadingHTTPServer(("0.0.0.0", port), handler)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
