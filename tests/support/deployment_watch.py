"""Watching what the operator does to a Deployment, and the skip for tests that need Debian's
Prometheus."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import kubernetes
import pytest
import urllib3

from tritonscale.sandbox.prometheus_server import find_prometheus


def _have_prometheus() -> bool:
    try:
        find_prometheus()
    except Exception:  # noqa: BLE001 -- any failure to find it means: skip
        return False
    return True


needs_prometheus = pytest.mark.skipif(not _have_prometheus(),
                                      reason="prometheus binary missing: apt-get install -y prometheus")


class ReplicaRecorder(threading.Thread):
    """The replica count the operator asks for (Deployment spec.replicas) every ``interval``
    seconds, as (``clock()``, replicas) in ``seen``; ``stop_flag.set()`` ends it. A read that fails
    (an API error, the API server away) is skipped."""

    def __init__(self, apps: kubernetes.client.AppsV1Api, namespace: str, name: str, interval: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(daemon=True)
        self.apps, self.ns, self.name, self.interval, self.clock = apps, namespace, name, interval, clock
        self.stop_flag = threading.Event()
        self.seen: list[tuple[float, int]] = []

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                d = self.apps.read_namespaced_deployment(self.name, self.ns, _request_timeout=5)
                self.seen.append((self.clock(), d.spec.replicas or 0))
            except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError):
                pass
            self.stop_flag.wait(self.interval)

    def values(self, since: float = -math.inf) -> list[int]:
        """The counts in order (those read at ``since`` or later), each run of equal counts once."""
        out: list[int] = []
        for t, n in self.seen:
            if t >= since and (not out or out[-1] != n):
                out.append(n)
        return out
