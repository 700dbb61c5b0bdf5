"""Benchmark: the autoscaler's cost per tick for N InferenceServices (default 1,000).

    .venv/bin/python e2e/bench_autoscaler_tick.py [--services 1000] [--rounds 5]

It starts a real Prometheus (Debian's package) scraping an exporter that serves
Triton-format series for N services (p95 summary, success and queue counters,
pending gauge) and prints:

  1. queries per tick, and ms for one round of them (PrometheusSource.fetch);
  2. ms to turn that snapshot into N decisions (observation + decide), with no batch cost learned
     and with one (the batcher model: each service its own cost, so its cache helps only while a
     cost stays the same);
  3. ms for N full operator ticks (run_tick: read the object and its Deployment,
     list the Deployment's pods, decide, patch status) against a real
     kube-apiserver (tritonscale.cluster) -- the API round trips.

A benchmark, not a test: it prints figures and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes
import yaml

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.cluster import ControlPlane
from tritonscale.kube.client import Kube, client_for
from tritonscale.sandbox.cluster_setup import apply_crd
from tritonscale.sandbox.prometheus_server import PrometheusServer
from tritonscale.scaling.decider import Policy, Replicas, State, decide
from tritonscale.scaling.prometheus_source import PrometheusSource, Snapshot
from tritonscale.scaling.tick import run_tick

REPO = Path(__file__).resolve().parents[1]


def exporter(n: int) -> tuple[ThreadingHTTPServer, str]:
    t0 = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            el = time.monotonic() - t0
            out = []
            for i in range(n):
                lab = f'namespace="ns{i % 10}",inferenceservice="svc-{i}",model="svc-{i}",version="1"'
                rps = 5 + i % 50
                out.append(f"nv_inference_request_success{{{lab}}} {rps * el:.2f}")
                out.append(f"nv_inference_queue_duration_us{{{lab}}} {rps * el * 2000:.2f}")
                out.append(f"nv_inference_pending_request_count{{{lab}}} {i % 3}")
                out.append(f'nv_inference_request_summary_us{{{lab},quantile="0.95"}} {40000 + 100 * (i % 200)}')
            body = ("\n".join(out) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"127.0.0.1:{srv.server_address[1]}"


JITTER = 0.005  # the fit's tick-to-tick movement in the suite (batching_tuner.scoring_cost's comment)
LEARNED_TICKS = 10


def decide_learned(snap: Snapshot, n: int, now: float) -> list[float]:
    """ms for N decisions with a batch cost learned (so the decider plans with the batcher model: the
    greedy closed form held within the sample's band, or the delayed branch at a 60 ms delay), each
    service its own cost, over LEARNED_TICKS ticks in which every fit moves by JITTER (a normal draw,
    seeded) about its own centre: the first tick finds nothing cached; later ones find the costs a fit
    has visited before (``batcher_model._settings_key`` keys them to three significant digits)."""
    rng = random.Random(92)
    policies = [Policy(min_replicas=1, max_replicas=20, target_p95_ms=150, max_batch_size=16, queue_delay_ms=d)
                for d in (0.0, 2.0, 60.0)]
    out = []
    for _ in range(LEARNED_TICKS):
        t = time.perf_counter()
        for i in range(n):
            a = (20.0 + (i % 97) * 0.05) * (1.0 + JITTER * rng.gauss(0.0, 1.0))  # ms
            b = (2.0 + (i % 89) * 0.01) * (1.0 + JITTER * rng.gauss(0.0, 1.0))  # ms per item
            state = State(batch_samples=((4.0, a + 4 * b, now - 30.0), (16.0, a + 16 * b, now - 15.0)))
            obs = snap.observation(f"ns{i % 10}", f"svc-{i}", f"svc-{i}")
            decide(obs, Replicas(3, 3), policies[i % 3], state, now)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.services
    # SIGTERM (e.g. from `timeout`) skips atexit; make it a normal exit so `finally` stops Prometheus.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    srv, addr = exporter(n)
    work = Path(tempfile.mkdtemp(prefix="tritonscale-bench-"))
    prom = PrometheusServer(work / "prom", scrape_interval_s=1.0, extra_jobs=[
        {"job_name": "triton-bench", "honor_labels": True, "scrape_interval": "1s",
         "static_configs": [{"targets": [addr]}]}]).start()
    plane = ControlPlane(work / "control-plane")
    clean = False
    try:
        # The CRD before the controllers start (the garbage collector knows it at once).
        kubeconfig = plane.start(before_controllers=lambda path: apply_crd(client_for(path)))
        asyncio.run(prom.wait_ready())
        source = PrometheusSource(prom.url)
        deadline = time.monotonic() + 60
        while True:  # until two scrapes give every service a rate
            snap = source.fetch(10)
            if snap.ok and len(snap.values.get("rps", {})) >= n and len(snap.values.get("p95_ms", {})) >= n:
                break
            if time.monotonic() > deadline:
                print(f"Prometheus never returned {n} series: {snap.error or len(snap.values.get('rps', {}))}")
                return 1
            time.sleep(1)

        fetch_ms = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            snap = source.fetch(10)
            fetch_ms.append((time.perf_counter() - t) * 1000)
        assert snap.ok, snap.error

        policy = Policy(min_replicas=1, max_replicas=20, target_p95_ms=100)
        t = time.perf_counter()
        for i in range(n):
            obs = snap.observation(f"ns{i % 10}", f"svc-{i}", f"svc-{i}")
            decide(obs, Replicas(3, 3), policy, State(), time.time())
        decide_ms = (time.perf_counter() - t) * 1000
        learned_ms = decide_learned(snap, n, time.time())

        # Full ticks against the real API server: N objects and their Deployments (paused:
        # the Deployment controller makes no ReplicaSets or pods for them).
        client = client_for(kubeconfig)
        custom = kubernetes.client.CustomObjectsApi(client)
        apps = kubernetes.client.AppsV1Api(client)
        for i in range(10):
            kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": f"ns{i}"}})
        sample = yaml.safe_load((REPO / "manifests/samples/python-cpu.yaml").read_text())
        for i in range(n):
            ns, name = f"ns{i % 10}", f"svc-{i}"
            body = {**sample, "metadata": {"name": name, "namespace": ns},
                    "spec": {**sample["spec"], "model": {**sample["spec"]["model"], "name": name}}}
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
            apps.create_namespaced_deployment(ns, {
                "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": 3, "paused": True, "selector": {"matchLabels": {"a": name}},
                         "template": {"metadata": {"labels": {"a": name}},
                                      "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        kube = Kube(client)
        t = time.perf_counter()
        for i in range(n):
            run_tick(kube, f"ns{i % 10}", f"svc-{i}", snap, time.time(), lambda *a: None)
        tick_ms = (time.perf_counter() - t) * 1000

        print(f"InferenceServices:                    {n}")
        print(f"Prometheus queries per tick:          {snap.queries} (one per signal, grouped by labels)")
        print(f"ms per query round (median of {args.rounds}):   {statistics.median(fetch_ms):.1f} "
              f"(min {min(fetch_ms):.1f}, max {max(fetch_ms):.1f})")
        print(f"ms to decide all {n} from the snapshot: {decide_ms:.1f} ({decide_ms / n * 1000:.0f} us each)")
        print(f"ms to decide all {n} with a learned batch cost, each its own (the batcher model; delays 0, 2 "
              f"and 60 ms), every fit moving {JITTER:.1%} a tick:")
        print(f"  first tick, nothing cached:          {learned_ms[0]:.1f} ({learned_ms[0] / n * 1000:.0f} us each)")
        later = learned_ms[-5:]
        print(f"  ticks {LEARNED_TICKS - 4}-{LEARNED_TICKS} (mean, max):              {statistics.mean(later):.1f}, "
              f"{max(later):.1f} ({statistics.mean(later) / n * 1000:.0f} us each)")
        print(f"ms for {n} full operator ticks:        {tick_ms:.0f} ({tick_ms / n:.2f} ms each; "
              f"2 GETs + 1 pod LIST + status PATCH against kube-apiserver)")
        clean = True
        return 0
    finally:
        plane.stop()
        prom.stop()
        srv.shutdown()
        # The control plane's etcd and Prometheus's data (~70 MB at 1,000 services) go after a clean
        # run; a failed one keeps them, with their logs.
        if clean:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs and data kept in {work}")


if __name__ == "__main__":
    sys.exit(main())
