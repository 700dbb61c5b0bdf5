#!/usr/bin/env python
"""Throughput at p95 <= target with NVIDIA's perf_analyzer, on the sandbox's real tritonserver.

Three configs of the CPU cost model (``manifests/samples/python-cpu.yaml``: a batch of n costs
20 + 2n ms, max batch 16, target p95 150 ms), each rendered by the operator's own renderer and
served by a fresh tritonserver 2.51 (nvidia-pytriton) on 127.0.0.1:

* ``off``: the sample with ``batching.enabled: false`` (no dynamic_batching block);
* ``sample``: the sample as it is (preferred sizes [4, 8, 16], 2000 us queue delay);
* ``tuned``: what the batching tuner chooses for this cost model and target
  (``--tuned-delay-us``, ``--tuned-preferred``; see the README's "Throughput with perf_analyzer").

perf_analyzer (from the tritonclient 2.51 wheel: ``.ci/setup --bench``) sends open-loop Poisson
arrivals (``--request-rate-range`` with ``--binary-search``) and finds the highest rate whose
client-side p95 stays under the target (``--percentile=95 --latency-threshold``). The queue timeout
is switched off (``queueTimeoutMicroseconds: 0``) in all three: perf_analyzer ends a run at the
first failed request, and a request the 2x-target timeout would reject has missed the target anyway.

    .ci/setup --bench && .venv/bin/python e2e/bench_perf_analyzer.py [--configs off,sample,tuned]

Not part of CI: it takes about 3 minutes per config.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

import yaml  # noqa: E402

from tritonscale.api.spec import InferenceServiceSpec  # noqa: E402
from tritonscale.render.triton_config import render_config_pbtxt  # noqa: E402
from tritonscale.sandbox.tritonserver import TritonProcess, install_model  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "manifests" / "samples" / "python-cpu.yaml"
MODEL = "linear"
HINT = "run .ci/setup --bench (libb64-0d, nvidia-cuda-runtime-cu12 and perf_analyzer)"


def sample_spec() -> dict:
    spec: dict = yaml.safe_load(SAMPLE.read_text())["spec"]
    return spec


def config_for(name: str, args: argparse.Namespace) -> str:
    spec = sample_spec()
    batching = spec["batching"]
    batching["queueTimeoutMicroseconds"] = 0
    if name == "off":
        batching["enabled"] = False
    elif name == "tuned":
        batching["maxQueueDelayMicroseconds"] = args.tuned_delay_us
        batching["preferredBatchSizes"] = args.tuned_preferred
    elif name != "sample":
        raise SystemExit(f"unknown config {name!r}: off, sample or tuned")
    return render_config_pbtxt(InferenceServiceSpec.model_validate(spec), MODEL)


def perf_analyzer_env() -> tuple[Path, dict[str, str]]:
    binary = Path(sys.prefix) / "bin" / "perf_analyzer"
    cuda = importlib.util.find_spec("nvidia.cuda_runtime")
    if not binary.exists() or cuda is None or not cuda.submodule_search_locations:
        raise SystemExit(f"perf_analyzer or libcudart.so.12 missing: {HINT}")
    lib = Path(list(cuda.submodule_search_locations)[0]) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    return binary, env


def perf_analyzer_args(args: argparse.Namespace, name: str, address: str, csv_path: Path) -> list[str]:
    return [
        "-m", MODEL, "-u", address, "-i", "http", "--async",
        "--request-rate-range", args.rates_off if name == "off" else args.rates, "--binary-search",
        "--request-distribution", "poisson",
        "--percentile", "95", "--latency-threshold", f"{args.target_ms:g}",
        "--measurement-interval", str(args.window_ms), "--stability-percentage", "20", "--max-trials", "8",
        "-f", str(csv_path),
    ]


def run_one(name: str, args: argparse.Namespace, workdir: Path) -> list[dict[str, float]]:
    binary, env = perf_analyzer_env()
    install_model(workdir / "repo", MODEL, config_for(name, args))
    proc = TritonProcess.with_free_ports(workdir / "repo", log_path=workdir / "tritonserver.log")
    proc.start()
    try:
        if not proc.wait_ready_blocking(MODEL, timeout=60):
            raise SystemExit(f"tritonserver did not become ready:\n{proc.read_log()[-3000:]}")
        csv_path = workdir / "perf.csv"
        argv = perf_analyzer_args(args, name, proc.http_address, csv_path)
        print(f"[{name}] perf_analyzer {shlex.join(argv)}", flush=True)
        out = subprocess.run([str(binary), *argv], env=env, capture_output=True, text=True,
                             timeout=args.timeout_s)
        (workdir / "perf_analyzer.log").write_text(out.stdout + out.stderr)
    finally:
        proc.stop()
    if not csv_path.exists():
        raise SystemExit(f"[{name}] perf_analyzer wrote no results (exit {out.returncode}):\n{out.stdout[-2000:]}"
                         f"{out.stderr[-2000:]}")
    with csv_path.open() as f:
        return [{"rate": float(r["Request Rate"]), "throughput": float(r["Inferences/Second"]),
                 "p50_ms": float(r["p50 latency"]) / 1000, "p95_ms": float(r["p95 latency"]) / 1000,
                 "queue_ms": float(r["Server Queue"]) / 1000, "compute_ms": float(r["Server Compute Infer"]) / 1000}
                for r in csv.DictReader(f)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="off,sample,tuned", help="comma-separated: off, sample, tuned")
    ap.add_argument("--target-ms", type=float, default=None, help="p95 target (default: the sample's)")
    ap.add_argument("--rates", default="20:400:5", help="perf_analyzer --request-rate-range start:end:precision")
    # Unbatched, one instance serves 1000 / (20 + 2) = 45 rps: a search up to 400 rps would
    # leave minutes of backlog (no queue timeout) behind each overloaded level.
    ap.add_argument("--rates-off", default="10:100:2", help="the same for the off config")
    ap.add_argument("--window-ms", type=int, default=8000, help="perf_analyzer --measurement-interval")
    ap.add_argument("--tuned-delay-us", type=int, default=0, help="the tuned config's maxQueueDelayMicroseconds")
    ap.add_argument("--tuned-preferred", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                    help="the tuned config's preferredBatchSizes, comma-separated (default: none)")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per perf_analyzer run")
    args = ap.parse_args()
    if args.target_ms is None:
        args.target_ms = float(sample_spec()["scaling"]["targetP95Milliseconds"])

    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-perf-analyzer-") as tmp:
        for name in args.configs.split(","):
            rows = run_one(name, args, Path(tmp) / name)
            results[name] = rows
            for r in sorted(rows, key=lambda r: r["rate"]):
                mark = "ok" if r["p95_ms"] <= args.target_ms else "over"
                print(f"[{name}]   rate {r['rate']:6.0f}/s  throughput {r['throughput']:6.1f} infer/s  "
                      f"p50 {r['p50_ms']:6.1f} ms  p95 {r['p95_ms']:7.1f} ms  server queue {r['queue_ms']:5.1f} ms  "
                      f"compute {r['compute_ms']:5.1f} ms  {mark}", flush=True)

    print(f"\nthroughput at p95 <= {args.target_ms:g} ms (perf_analyzer 2.51, open-loop Poisson, HTTP, async):")
    print(f"{'config':<8} {'throughput infer/s':>18} {'at rate':>8} {'p95 ms':>7} {'p50 ms':>7}")
    for name, rows in results.items():
        ok = [r for r in rows if r["p95_ms"] <= args.target_ms]
        if not ok:
            print(f"{name:<8} {'none':>18}")
            continue
        best = max(ok, key=lambda r: r["throughput"])
        print(f"{name:<8} {best['throughput']:>18.1f} {best['rate']:>8.0f} {best['p95_ms']:>7.1f} "
              f"{best['p50_ms']:>7.1f}")


if __name__ == "__main__":
    main()
