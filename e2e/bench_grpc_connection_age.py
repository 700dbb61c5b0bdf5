#!/usr/bin/env python
"""What a gRPC connection age costs a client, on the real tritonserver.

``spec.runtime.grpcMaxConnectionAgeSeconds`` (default 30) renders ``--grpc-max-connection-age``:
Triton closes each gRPC connection at that age and the client reconnects, through the Service, to
a replica kube-proxy picks. That is how a replica the autoscaler adds gets gRPC traffic at all (the
Service balances connections, not requests). This measures the price: closed-loop gRPC clients
against one tritonserver serving the sample's model (``manifests/samples/python-cpu.yaml``: a + b*n
with a = 20 ms, b = 2 ms, max batch 16, its batcher), with no age, the default age, and a 1 s age
(30 times the default's reconnections). Each config gets a fresh tritonserver.

    .venv/bin/python e2e/bench_grpc_connection_age.py [--duration 20] [--clients 4]

Prints requests per second, p50 and p95 latency, failed requests (with their error and when they were
sent) and reconnections per config. The sample's queue policy rejects a request queued past 300 ms
("Request timeout expired"): a stall of the server fails every request queued at the time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

import yaml  # noqa: E402

from tritonscale.api.spec import DEFAULT_GRPC_MAX_CONNECTION_AGE_S, InferenceServiceSpec, model_name  # noqa: E402
from tritonscale.render.triton_config import render_config_pbtxt  # noqa: E402
from tritonscale.sandbox.grpc_clients import run_grpc_clients  # noqa: E402
from tritonscale.sandbox.tritonserver import TritonProcess, install_model  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "manifests" / "samples" / "python-cpu.yaml"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=20.0, help="seconds per config (default 20)")
    p.add_argument("--clients", type=int, default=4, help="closed-loop gRPC clients, one channel each (default 4)")
    args = p.parse_args(argv)
    doc = yaml.safe_load(SAMPLE.read_text())
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    model = model_name(spec, doc["metadata"]["name"])
    default = DEFAULT_GRPC_MAX_CONNECTION_AGE_S
    configs = [("no age", None), (f"{default} s (default)", default), ("1 s", 1)]
    print(f"{args.clients} closed-loop gRPC clients for {args.duration:g} s per config, model {model} "
          f"(the sample's batcher), one tritonserver")
    print(f"{'connection age':<16} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'failed':>6} {'reconnections':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        install_model(repo, model, render_config_pbtxt(spec, model))
        for label, age_s in configs:
            extra = [f"--grpc-max-connection-age={age_s * 1000}"] if age_s else []
            proc = TritonProcess.with_free_ports(repo, log_path=Path(tmp) / f"triton-{age_s}.log", extra_args=extra)
            proc.start()
            try:
                if not proc.wait_ready_blocking(model, timeout=60):
                    print(f"tritonserver did not get ready:\n{proc.read_log()[-2000:]}", file=sys.stderr)
                    return 1
                r = run_grpc_clients(f"127.0.0.1:{proc.grpc_port}", model, args.duration, clients=args.clients)
            finally:
                proc.stop()
            print(f"{label:<16} {r.rate():>7.1f} {r.percentile_ms(50):>7.1f} {r.p95_ms():>7.1f} {len(r.errors):>6} "
                  f"{r.reconnections:>13}")
            for msg in sorted(set(r.errors)):
                at = sorted(t for t, e in zip(r.error_times_s, r.errors, strict=True) if e == msg)
                print(f"  {len(at)} failed ({msg}), sent at {', '.join(f'{t:.1f}' for t in at)} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
