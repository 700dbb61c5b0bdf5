"""The operator's /healthz and /metrics listeners take IPv6 and IPv4 clients alike: bound to 0.0.0.0 they refused
the kubelet's probes and Prometheus's scrapes at a pod's IPv6 address (auditE, session 84)."""

from __future__ import annotations

import errno
import socket
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from tritonscale import http_listener


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_one_listener_serves_ipv4_and_ipv6_clients() -> None:
    server = http_listener.serve(0, _Ok, "test")
    try:
        port = server.server_address[1]
        assert _get(f"http://127.0.0.1:{port}/") == b"ok"
        if not _ipv6_loopback():
            pytest.skip("this machine has no IPv6 loopback")
        assert server.address_family == socket.AF_INET6
        assert _get(f"http://[::1]:{port}/") == b"ok"
        # the port check binds as the server does: in use for both families
        with pytest.raises(OSError) as taken:
            http_listener.listening_socket(port).close()
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        server.shutdown()
        server.server_close()


def test_a_kernel_without_ipv6_gets_an_ipv4_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoIPv6(http_listener._DualStackServer):
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(http_listener, "_DualStackServer", NoIPv6)
    server = http_listener.serve(0, _Ok, "test")
    try:
        assert server.address_family == socket.AF_INET
        assert _get(f"http://127.0.0.1:{server.server_address[1]}/") == b"ok"
    finally:
        server.shutdown()
        server.server_close()
    # ... but a port in use is still an error, not a fallback
    monkeypatch.undo()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        with pytest.raises(OSError) as in_use:
            http_listener.serve(taken.getsockname()[1], _Ok, "test")
        assert in_use.value.errno == errno.EADDRINUSE
