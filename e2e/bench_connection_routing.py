#!/usr/bin/env python
"""The suite's scenarios with gRPC clients: requests routed per connection, at each connection age.

A Kubernetes Service balances connections, not requests, and a gRPC client sends every request over
one connection. This replays the scenario suite's traffic (``tritonscale simulate --suite``: its
classes, cold starts and targets, each scaled so a static fleet just meets the target at its peak)
with tritonscale at the CRD defaults under:

* ``rr``: requests routed one by one, round-robin (the suite's default: a per-request balancer);
* ``age S``: ``--connections`` clients, each request on its client's connection, a connection to a
  ready pod drawn at random when it opens, closed by Triton at S seconds
  (``spec.runtime.grpcMaxConnectionAgeSeconds``; gRPC's +-10% jitter) or when its pod goes
  (``simulate/engine.py``, ``routing="connection"``). ``age 0`` never closes one: a pod the
  autoscaler adds gets only the connections of clients whose pod went.

The static peak fleet runs under ``rr`` and at the operator's default age. Prints each scenario's
windows met and replica-hours, and the totals.

    .venv/bin/python e2e/bench_connection_routing.py [--seeds 0] [--slos tight] [--connections 1000]
        [--ages 0,10,30,60,120] [--jobs 2] [--trace FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

from tritonscale.api.spec import DEFAULT_GRPC_MAX_CONNECTION_AGE_S  # noqa: E402
from tritonscale.simulate import suite, traffic  # noqa: E402
from tritonscale.simulate.benchmark import Options, run_benchmark  # noqa: E402
from tritonscale.simulate.suite import OURS, Scenario, SuiteConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _run(sc: Scenario, cfg: SuiteConfig, ages: tuple[float, ...],
         connections: int) -> list[tuple[str, int, int, float]]:
    """(label, windows met, windows, replica-hours) per run of one scenario."""
    slo = cfg.slo_ms(sc.slo)
    cal = suite._calibration(cfg.batcher, slo)
    arr, horizon, _ = suite.scenario_arrivals(sc, cfg, cal.capacity_rps)
    base = suite._cluster(cfg, sc)
    runs = [("rr", OURS, base)] + [
        (f"age {a:g}", OURS, replace(base, routing="connection", connection_age_s=a, connections=connections))
        for a in ages]
    static = f"static:{cfg.peak_replicas}"
    runs += [("static rr", static, base),
             (f"static age {DEFAULT_GRPC_MAX_CONNECTION_AGE_S}", static,
              replace(base, routing="connection", connection_age_s=float(DEFAULT_GRPC_MAX_CONNECTION_AGE_S),
                      connections=connections))]
    out = []
    for label, policy, cluster in runs:
        s = run_benchmark(arr, horizon, policy, Options(slo, cluster, seed=sc.seed, with_oracle=False),
                          calibration=cal).outcomes[0].summary
        out.append((label, s.windows - s.windows_missed, s.windows, s.replica_hours))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--slos", default="tight", help="tight, loose or both (default tight)")
    p.add_argument("--classes", default=",".join(traffic.CLASSES), help="traffic classes (default all)")
    p.add_argument("--connections", type=int, default=1000, help="clients, one connection each (default 1000)")
    p.add_argument("--ages", default="0,10,30,60,120",
                   help="connection ages in seconds, 0: never (default 0,10,30,60,120)")
    p.add_argument("--jobs", type=int, default=2, help="scenarios run at once (default 2)")
    p.add_argument("--trace", type=Path,
                   help="the trace class's real trace (default ../shared/data/azure-llm-conv-2023.csv)")
    args = p.parse_args(argv)
    requested = tuple(c for c in args.classes.split(",") if c)
    try:
        trace, classes = suite.benchmark_trace(requested, args.trace, REPO)
    except ValueError as exc:
        print(f"bench_connection_routing: {exc}", file=sys.stderr)
        return 1
    if classes != requested:
        print(f"bench_connection_routing: no trace at {REPO / suite.DEFAULT_TRACE}: the trace class is skipped "
              "(--trace names one)", file=sys.stderr)
    ages = tuple(float(a) for a in args.ages.split(","))
    cfg = SuiteConfig(classes=classes, slos=tuple(args.slos.split(",")),
                      seeds=tuple(int(s) for s in args.seeds.split(",")),
                      trace_path=trace, jobs=args.jobs)
    todo = list(cfg.scenarios())
    suite.prepare(cfg, todo)
    t0 = time.monotonic()
    results = suite.fork_map(lambda sc, c: _run(sc, c, ages, args.connections), todo, cfg, args.jobs)
    print(f"tritonscale at the CRD defaults, {len(todo)} scenarios; per connection: {args.connections} clients "
          f"({time.monotonic() - t0:.0f} s)")
    totals: dict[str, list[float]] = {}
    for sc, runs in zip(todo, results, strict=True):
        print(f"{sc.name:32s} " + " | ".join(f"{lab} {met}/{n} {rh:.2f}" for lab, met, n, rh in runs))
        for lab, met, n, rh in runs:
            t = totals.setdefault(lab, [0, 0, 0.0])
            t[0] += met
            t[1] += n
            t[2] += rh
    print(f"\n{'routing':<16} {'windows met':>16} {'replica-h':>10}")
    for lab, (met, n, rh) in totals.items():
        print(f"{lab:<16} {int(met):>6}/{int(n):<5} {met / n:>5.1%} {rh:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
