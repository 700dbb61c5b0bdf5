"""A test exporter that serves Triton-format metrics with values the test controls.

It speaks exactly the series the autoscaler queries -- counters
``nv_inference_request_success``, ``nv_inference_request_failure`` and
``nv_inference_queue_duration_us``, the
gauge ``nv_inference_pending_request_count`` and the summary
``nv_inference_request_summary_us`` -- with Triton's labels (model, version).
Counters advance at the configured request rate between scrapes, so
Prometheus' rate() sees that rate -- except that, split over pods, one pod serves at most full
batches back to back and rejects the rest of its share (see ``TritonExporter``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tritonscale.sandbox.prometheus_server import PrometheusServer


def ready_replicas(apps: Any, namespace: str, name: str) -> Callable[[], int]:
    """The Deployment's ready replicas, read at each call (1 until it exists): ``pods`` of a service
    whose pods follow what the operator scales. A read that fails (the API server restarting, or
    slow under load: each read has 2 s) keeps the last count -- pods do not vanish with the API
    server, and a count that fell to 1 for one scrape would restart the other pods' counters (a pod
    removed takes its series with it), which reads to the decider as pods without a rate."""
    last = 1

    def ready() -> int:
        nonlocal last
        try:
            last = apps.read_namespaced_deployment_status(name, namespace,
                                                          _request_timeout=2).status.ready_replicas or 1
        except Exception:  # noqa: BLE001  (not created yet, the API server restarting, a timeout)
            pass
        return last
    return ready


def exposition_handler(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    """A handler that answers every GET with ``render()`` in Prometheus's text format."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@dataclass
class ModelSeries:
    rps: float = 0.0
    failed_rps: float | None = None  # requests rejected; None: no failure series at all
    p95_ms: float | None = None  # None: NaN, as an idle Triton summary reports
    queue_ms: float = 1.0
    pending: float = 0.0
    batch_size: float = 4.0
    batch_ms: float = 28.0
    success: float = 0.0
    failure: float = 0.0
    queue_us_total: float = 0.0
    count: float = 0.0  # inferences (requests x batch dim 1)
    exec_count: float = 0.0
    compute_us_total: float = 0.0
    last: float = 0.0


class TritonExporter:
    """One pod's Triton, or with ``pods`` a whole service's: the series of that many pods, each
    labelled ``replica``, sharing the rates and the queue the test sets -- so the count of pods that
    export series (the decider's ``PartialData`` check) is the service's, not one. ``pods`` is read
    at every scrape (e.g. the Deployment's ready replicas); a pod added starts its counters at zero
    and a pod removed takes its series with it, as pods do. A pod's share of the rate above its
    saturation rate (``batch_size`` requests per ``batch_ms``) is counted as rejected
    (``nv_inference_request_failure``), not served: a pod cannot serve more than that."""

    def __init__(self, models: list[str], pods: Callable[[], int] | None = None) -> None:
        now = time.monotonic()
        self.series = {m: ModelSeries(last=now) for m in models}
        self._pods = pods
        self._replicas: dict[str, list[ModelSeries]] = {m: [] for m in models}
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), exposition_handler(self.render))
        self.port = self.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> TritonExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def set(self, model: str, **values: float | None) -> None:
        with self._lock:
            self._advance(time.monotonic())
            for k, v in values.items():
                setattr(self.series[model], k, v)

    def _advance(self, now: float) -> None:
        for s in [*self.series.values(), *(r for rs in self._replicas.values() for r in rs)]:
            dt = now - s.last
            s.success += s.rps * dt
            s.failure += (s.failed_rps or 0.0) * dt
            s.queue_us_total += s.rps * dt * s.queue_ms * 1000
            s.count += s.rps * dt
            s.exec_count += s.rps * dt / s.batch_size
            s.compute_us_total += s.rps * dt * s.batch_ms * 1000  # each request accrues its batch's time
            s.last = now

    def _pod_series(self, now: float, count: int | None) -> dict[tuple[str, str], ModelSeries]:
        """(model, label matchers) -> series: the model's own (``count`` None), or one per pod of
        ``count`` sharing its rates and queue."""
        if count is None:
            return {(m, f'model="{m}",version="1"'): s for m, s in self.series.items()}
        n = max(1, count)
        out = {}
        for m, total in self.series.items():
            pods = self._replicas[m]
            del pods[n:]
            pods += [ModelSeries(last=now) for _ in range(n - len(pods))]
            # A pod serves at most full batches back to back (its saturation rate); what its share of
            # the rate exceeds that by, its queue policy rejects. Without the cap, a test's rate set for
            # three pods was "served" by the one left ready in a rollout (1500 rps for 307), and the
            # decider learned a batch time of a fifth of the real one from it (the served rate per
            # ready pod bounds the time between batches: decider.signals.learn).
            saturation = 1000.0 * total.batch_size / total.batch_ms if total.batch_ms > 0 else math.inf
            for k, pod in enumerate(pods):  # the rates and the queue split evenly; latencies as set
                for attr in ("p95_ms", "queue_ms", "batch_size", "batch_ms"):
                    setattr(pod, attr, getattr(total, attr))
                share = total.rps / n
                pod.rps, pod.pending = min(share, saturation), total.pending / n
                failed = None if total.failed_rps is None else total.failed_rps / n
                if share > pod.rps:
                    failed = (failed or 0.0) + share - pod.rps
                # a failure counter, once exported, stays (at 0 while nothing fails), as Triton's does
                pod.failed_rps = failed if failed is not None or pod.failure == 0 else 0.0
                out[(m, f'model="{m}",version="1",replica="{k}"')] = pod
        return out

    def render(self) -> str:
        count = None if self._pods is None else self._pods()  # an API read, so outside the lock
        with self._lock:
            now = time.monotonic()
            self._advance(now)
            series = self._pod_series(now, count)
            lines = [
                "# TYPE nv_inference_request_success counter",
                *(f'nv_inference_request_success{{{ls}}} {s.success:.3f}' for (_, ls), s in series.items()),
                "# TYPE nv_inference_request_failure counter",
                *(f'nv_inference_request_failure{{{ls}}} {s.failure:.3f}'
                  for (_, ls), s in series.items() if s.failed_rps is not None),
                "# TYPE nv_inference_queue_duration_us counter",
                *(f'nv_inference_queue_duration_us{{{ls}}} {s.queue_us_total:.3f}' for (_, ls), s in series.items()),
                *(f'{name}{{{ls}}} {getattr(s, attr):.3f}'
                  for name, attr in (("nv_inference_count", "count"), ("nv_inference_exec_count", "exec_count"),
                                     ("nv_inference_compute_infer_duration_us", "compute_us_total"))
                  for (_, ls), s in series.items()),
                "# TYPE nv_inference_pending_request_count gauge",
                *(f'nv_inference_pending_request_count{{{ls}}} {s.pending}' for (_, ls), s in series.items()),
                "# TYPE nv_inference_request_summary_us summary",
            ]
            for (_, ls), s in series.items():
                v = "NaN" if s.p95_ms is None or math.isnan(s.p95_ms) else f"{s.p95_ms * 1000:.1f}"
                lines.append(f'nv_inference_request_summary_us{{{ls},quantile="0.95"}} {v}')
                lines.append(f'nv_inference_request_summary_us_count{{{ls}}} {s.success:.0f}')
            return "\n".join(lines) + "\n"


def scraped_exporter(workdir: Path, namespace: str, name: str,
                     pods: Callable[[], int] | None = None) -> tuple[TritonExporter, PrometheusServer]:
    """A TritonExporter for model ``name`` and Debian's Prometheus scraping it every second, with
    the labels the chart's relabelling gives a pod of InferenceService ``name``, once the target
    is up. ``pods``: the service's pods (TritonExporter). The caller stops both (Prometheus first);
    if set-up fails, both are stopped here."""
    exporter = TritonExporter([name], pods).start()
    prom = None
    try:
        prom = PrometheusServer(workdir, scrape_interval_s=1.0).start()
        prom.write_targets([(exporter.address, {"namespace": namespace, "inferenceservice": name,
                                                "pod": f"{name}-0"})])
        assert asyncio.run(prom.wait_ready()), prom.read_log()
        assert asyncio.run(prom.wait_target_up(exporter.address, timeout=30)), prom.read_log()
    except BaseException:
        if prom is not None:
            prom.stop()
        exporter.stop()
        raise
    return exporter, prom
