#!/usr/bin/env python
"""Dynamic batching on vs off, on the real tritonserver and the a + b*n cost model.

Both configs are rendered by the operator's own renderer (``render_config_pbtxt``)
from ``manifests/samples/python-cpu.yaml``: "on" is the sample as is (max batch 16,
preferred [4, 8, 16], 2000 us queue delay), "off" the same spec with
``batching.enabled: false``. Same open-loop Poisson load for both runs; each run
gets a fresh tritonserver.

    .venv/bin/python e2e/bench_batching.py [--duration 20] [--rps 80]

With a=20 ms, b=2 ms and one model instance the unbatched capacity is
1000 / (20 + 2) ~= 45 rps, so the default 80 rps overloads it, while batches of up to
16 (52 ms for 16 items, ~300 rps) absorb it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

import yaml  # noqa: E402

from tritonscale.api.spec import InferenceServiceSpec  # noqa: E402
from tritonscale.render.triton_config import render_config_pbtxt  # noqa: E402
from tritonscale.sandbox.loadgen import LoadResult, run_load, step_schedule  # noqa: E402
from tritonscale.sandbox.tritonserver import (  # noqa: E402
    TritonProcess,
    install_model,
    metric_value,
    read_metrics,
)

SAMPLE = Path(__file__).resolve().parents[1] / "manifests" / "samples" / "python-cpu.yaml"
MODEL = "linear"


def rendered_config(batched: bool, cost_base_ms: float, cost_per_item_ms: float) -> str:
    spec = yaml.safe_load(SAMPLE.read_text())["spec"]
    spec["batching"]["enabled"] = batched
    spec["model"]["parameters"] = {"cost_base_ms": str(cost_base_ms), "cost_per_item_ms": str(cost_per_item_ms)}
    return render_config_pbtxt(InferenceServiceSpec.model_validate(spec), MODEL)


async def bench_one(args: argparse.Namespace, batched: bool, workdir: Path) -> dict:
    cfg = rendered_config(batched, args.cost_base_ms, args.cost_per_item_ms)
    install_model(workdir / "repo", MODEL, cfg)
    proc = TritonProcess.with_free_ports(workdir / "repo", log_path=workdir / "tritonserver.log")
    proc.start()
    try:
        if not await proc.wait_ready(MODEL, timeout=60):
            raise SystemExit(f"tritonserver did not become ready:\n{proc.read_log()[-3000:]}")
        await run_load(proc.http_address, MODEL, [0.0, 0.05, 0.1])  # warm-up
        m0 = read_metrics(proc.metrics_port)
        arrivals = step_schedule([(args.duration, args.rps)], seed=args.seed)
        res: LoadResult = await run_load(
            proc.http_address, MODEL, arrivals, max_inflight=args.max_inflight, timeout_s=args.timeout
        )
        m1 = read_metrics(proc.metrics_port)
    finally:
        proc.stop()
    d_count = (metric_value(m1, "nv_inference_count", model=MODEL) or 0) - (
        metric_value(m0, "nv_inference_count", model=MODEL) or 0
    )
    d_exec = (metric_value(m1, "nv_inference_exec_count", model=MODEL) or 0) - (
        metric_value(m0, "nv_inference_exec_count", model=MODEL) or 0
    )
    return {
        "mode": "dynamic batching" if batched else "no batching",
        "sent": res.requests,
        "ok": res.ok,
        "errors": res.errors,
        "error_kinds": res.error_counts(),
        "goodput": res.throughput_rps(),
        "wall": res.duration_s,
        "p50": res.p50_ms,
        "p95": res.p95_ms,
        "p99": res.p99_ms,
        "batch": d_count / d_exec if d_exec else float("nan"),
        "lag": res.max_lag_ms,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load per run (default 20)")
    ap.add_argument("--rps", type=float, default=80.0,
                    help="offered Poisson rate (default 80 > ~45 unbatched capacity)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cost-base-ms", type=float, default=20.0)
    ap.add_argument("--cost-per-item-ms", type=float, default=2.0)
    ap.add_argument("--max-inflight", type=int, default=512)
    ap.add_argument("--timeout", type=float, default=30.0, help="per-request client timeout (s)")
    args = ap.parse_args()

    unbatched_cap = 1000.0 / (args.cost_base_ms + args.cost_per_item_ms)
    print(
        f"cost model a={args.cost_base_ms:g} ms b={args.cost_per_item_ms:g} ms, 1 instance; "
        f"open-loop Poisson {args.rps:g} rps for {args.duration:g} s (seed {args.seed}); "
        f"unbatched capacity ~{unbatched_cap:.0f} rps"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-batching-") as tmp:
        for batched in (True, False):
            t = time.monotonic()
            row = await bench_one(args, batched, Path(tmp) / ("on" if batched else "off"))
            row["elapsed"] = time.monotonic() - t
            rows.append(row)

    hdr = (f"{'mode':<17} {'sent':>5} {'ok':>5} {'err':>5} {'goodput rps':>11} {'p50 ms':>8} {'p95 ms':>8} "
           f"{'p99 ms':>8} {'avg batch':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(
            f"{r['mode']:<17} {r['sent']:>5} {r['ok']:>5} {r['errors']:>5} {r['goodput']:>11.1f} "
            f"{r['p50']:>8.1f} {r['p95']:>8.1f} {r['p99']:>8.1f} {r['batch']:>9.2f}"
        )
    for r in rows:
        if r["errors"]:
            print(f"  {r['mode']}: errors {r['error_kinds']}")
    print(
        "goodput = successful responses / wall time from first send to last response; "
        "latency is client-side, from send to response; "
        f"max send lag {max(r['lag'] for r in rows):.1f} ms."
    )


if __name__ == "__main__":
    asyncio.run(main())
