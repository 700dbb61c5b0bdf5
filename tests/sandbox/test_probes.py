"""The sandbox kubelet's probe workers against a real HTTP endpoint (aiohttp), with
1-2 s periods: startup gates readiness, a startup success triggers the readiness
probe at once, thresholds count consecutive results, a failed liveness probe asks
for a kill, and a restarted container starts from the initial results. ~8 s."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from tritonscale.sandbox.probes import ContainerProbes, RunningContainer
from tritonscale.sandbox.tritonserver import free_port


class Endpoint:
    def __init__(self) -> None:
        self.ready = False
        self.live = True
        self.hits: list[tuple[float, str]] = []

    def app(self) -> web.Application:
        async def ready(request: web.Request) -> web.Response:
            self.hits.append((time.monotonic(), request.path))
            return web.Response(status=200 if self.ready else 503)

        async def live(request: web.Request) -> web.Response:
            self.hits.append((time.monotonic(), request.path))
            return web.Response(status=200 if self.live else 500)

        app = web.Application()
        app.router.add_get("/ready", ready)
        app.router.add_get("/live", live)
        return app


CONTAINER = {
    "ports": [{"name": "http", "containerPort": 8000}],
    "startupProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1, "failureThreshold": 30},
    # A long readiness period: only the kubelet's manual trigger can make the pod ready fast.
    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 30, "failureThreshold": 3},
    "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}, "periodSeconds": 1, "failureThreshold": 2},
}


async def _until(predicate, timeout: float) -> float:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "timed out"
        await asyncio.sleep(0.02)
    return time.monotonic()


async def test_probes_gate_readiness_trigger_it_after_startup_and_ask_for_a_kill_on_liveness_failures():
    endpoint = Endpoint()
    port = free_port()
    runner = web.AppRunner(endpoint.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    failures: list[str] = []
    changes: list[tuple[bool, bool]] = []
    probes: ContainerProbes

    def on_change() -> None:
        changes.append((probes.started, probes.ready))

    probes = ContainerProbes(CONTAINER, target=lambda p: f"127.0.0.1:{port}" if p == 8000 else None,
                             on_change=on_change, on_failure=failures.append,
                             kubelet_started_at=time.monotonic() - 100, deleting=lambda: False)
    try:
        probes.start()
        probes.container_changed(RunningContainer("c1", time.monotonic()))
        await asyncio.sleep(2.5)
        assert not probes.started and not probes.ready
        assert {path for _, path in endpoint.hits} == {"/ready"}  # liveness waits for startup
        endpoint.ready = True
        started_at = await _until(lambda: probes.started, 2.0)
        ready_at = await _until(lambda: probes.ready, 1.0)
        assert ready_at - started_at < 0.5  # not the 30 s readiness period
        assert changes[-1] == (True, True)

        endpoint.live = False
        await _until(lambda: failures, 4.0)
        assert failures == ["liveness"]
        live_hits = [t for t, path in endpoint.hits if path == "/live"]
        assert len(live_hits) >= 2  # failureThreshold 2: one failure alone kills nothing
        await asyncio.sleep(1.5)
        assert failures == ["liveness"]  # on hold until a new container

        endpoint.live = True
        probes.container_changed(RunningContainer("c2", time.monotonic()))
        await _until(lambda: not probes.ready, 1.0)  # a new container starts unready
        await _until(lambda: probes.ready, 3.0)
    finally:
        await probes.stop()
        await runner.cleanup()
