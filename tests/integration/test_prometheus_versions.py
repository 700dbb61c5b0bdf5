"""A model Triton serves in two versions (spec.model.versionPolicyLatest: 2) exports each series twice per pod,
``version="1"`` and ``"2"``. Counted as they came, one pod read as two, and its idle version's empty queue as the
least-queued pod's (an audit against a real tritonserver, session 84). On Debian's Prometheus, the operator's own
queries count pods, not versions."""

from __future__ import annotations

import asyncio
import threading
from http.server import ThreadingHTTPServer

from support.cluster import wait_for
from support.deployment_watch import needs_prometheus
from support.triton_exporter import exposition_handler
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.prometheus_source import PrometheusSource


def _exposition(queued_v2: int, served_v2: int) -> str:
    """One pod's Triton 2.51 with versions 1 (loaded, idle) and 2 (serving: clients that name no version get it)."""
    lines = []
    for version, served, queued in (("1", 0, 0), ("2", served_v2, queued_v2)):
        labels = f'model="linear",version="{version}"'
        lines += [f"nv_inference_request_success{{{labels}}} {served}",
                  f"nv_inference_pending_request_count{{{labels}}} {queued}",
                  f"nv_inference_exec_count{{{labels}}} {served // 4}",
                  f"nv_inference_count{{{labels}}} {served}"]
    return "\n".join(lines) + "\n"


def _serve(text: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), exposition_handler(lambda: text))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@needs_prometheus
def test_two_loaded_versions_count_as_one_pod_each(tmp_path):
    pods = [_serve(_exposition(queued_v2=32, served_v2=1000)), _serve(_exposition(queued_v2=6, served_v2=900))]
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0).start()
    try:
        prom.write_targets([(f"127.0.0.1:{p.server_address[1]}",
                             {"namespace": "ns", "inferenceservice": "linear", "pod": f"linear-{i}"})
                            for i, p in enumerate(pods)])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        source = PrometheusSource(prom.url)

        def observed():
            snap = source.fetch(10)
            assert snap.ok, snap.error
            return snap.observation("ns", "linear", "linear")

        obs = wait_for(lambda: (o := observed()).rate_pods == 2 and o, 30, what="both pods' rates")
        assert (obs.pods, obs.rate_pods) == (2, 2), obs
        # the least-queued pod's queue is its serving version's, 6 -- not the idle version's 0
        assert (obs.pending, obs.pending_min, obs.pending_max) == (38, 6, 32), obs
    finally:
        prom.stop()
        for p in pods:
            p.shutdown()
