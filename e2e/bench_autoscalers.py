#!/usr/bin/env python
"""Autoscaler comparison on the shared Azure trace: tritonscale vs HPA, KEDA, Knative KPA,
static peak provisioning and the offline oracle.

    .venv/bin/python e2e/bench_autoscalers.py [--rate-scale 230] [--slo-ms 150] [--seed 0] [--plot FILE.png]

Trace: ``../shared/data/azure-llm-conv-2023.csv`` relative to the repo root, or the file
named by ``$TRITONSCALE_TRACE``. It carries 19,366 requests over 58 minutes (5.5 rps
mean, 8.4 rps in the busiest minute). Rate scale 230 turns that into ~4.5 M requests
(1,270 rps mean, ~1,950 rps in the busiest minute) so that the oracle's busiest
minute needs 8 replicas of the default model (20 ms + 2 ms/item, batches of up to 16:
~290 rps per replica at p95 <= 150 ms).

Prints the exact command (the same as ``tritonscale simulate ...``), the table and the
wall time. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate.command import main_simulate  # noqa: E402

DEFAULT_TRACE = "../shared/data/azure-llm-conv-2023.csv"  # relative to the repo root
PEAK_8_SCALE = 230.0  # the oracle's busiest minute needs 8 replicas at this scale (see docstring)


def trace_path() -> str:
    env = os.environ.get("TRITONSCALE_TRACE")
    if env:
        return env
    return DEFAULT_TRACE if (REPO / DEFAULT_TRACE).exists() else str(REPO / DEFAULT_TRACE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate-scale", type=float, default=PEAK_8_SCALE)
    p.add_argument("--slo-ms", type=float, default=150.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", help="also draw load, p95 and replicas to this PNG")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    trace = trace_path()
    argv = ["--trace", trace, "--rate-scale", f"{args.rate_scale:g}", "--slo-ms", f"{args.slo_ms:g}",
            "--policy", "all", "--seed", str(args.seed)]
    if args.plot:
        argv += ["--plot", args.plot]
    if args.json:
        argv += ["--json"]
    os.chdir(REPO)  # the default trace path is relative to the repo root
    print("$ tritonscale simulate " + " ".join(shlex.quote(a) for a in argv), flush=True)
    started = time.perf_counter()
    rc = main_simulate(argv)
    print(f"benchmark wall time: {time.perf_counter() - started:.1f} s on {os.cpu_count()} CPU(s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
