#!/usr/bin/env python
"""tritonscale and KEDA on the suite's scenarios when Prometheus scrapes less often than the suite assumes.

    .venv/bin/python e2e/bench_scrape_interval.py [--scrape-s 30] [--window-s 60] [--classes C,...]
                                                  [--cold-starts 15,60,180] [--slos tight,loose]
                                                  [--seeds 0] [--jobs N] [--trace FILE]

The suite runs every policy with each pod scraped every 15 s and a 60 s rate window (the chart's
PodMonitor interval and the CRD's default ``windowSeconds``). A cluster's own Prometheus often
scrapes every 30 s (kube-prometheus-stack's default) or every minute (Prometheus's global default).
Each scenario is simulated for tritonscale (the CRD defaults, ticking every 15 s) and for KEDA on
request rate, on the same arrivals and starting replicas as the suite, once as the suite runs it and
once with ``--scrape-s``/``--window-s``. Printed per scenario and run: window attainment, replica-hours
and peak replicas, then per class the scenarios where tritonscale met fewer windows at the longer
scrape, and how many it met more in. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate import suite, traffic  # noqa: E402
from tritonscale.simulate.benchmark import Options, default_jobs, run_benchmark  # noqa: E402
from tritonscale.simulate.suite_rerun import scenario_arrivals  # noqa: E402

TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"
POLICIES = ("tritonscale", "keda")
SUITE_PROM = (15.0, 60.0)  # the suite's scrape interval and rate window


def _run(sc: suite.Scenario, cfg: suite.SuiteConfig, prom: tuple[tuple[float, float], ...]) -> list[tuple]:
    """(scrape, window, policy, attainment, replica-hours, peak) of each policy at each scrape."""
    slo_ms = cfg.slo_ms(sc.slo)
    cal = suite._calibration(cfg.batcher, slo_ms)
    drawn = scenario_arrivals(sc, cfg)
    cluster = suite._cluster(cfg, sc)
    rows = []
    for scrape_s, window_s in prom:
        at = replace(cluster, prom=replace(cluster.prom, scrape_s=scrape_s, window_s=window_s))
        for policy in POLICIES:
            s = run_benchmark(*drawn, policy, Options(slo_ms, at, seed=sc.seed, with_oracle=False),
                              calibration=cal).outcomes[0].summary
            rows.append((scrape_s, window_s, policy, s.window_attainment, s.replica_hours, s.max_replicas))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrape-s", type=float, default=30.0)
    p.add_argument("--window-s", type=float, default=60.0)
    p.add_argument("--classes", default=",".join(traffic.CLASSES))
    p.add_argument("--cold-starts", default="15,60,180")
    p.add_argument("--slos", default="tight,loose")
    p.add_argument("--seeds", default="0")
    p.add_argument("--jobs", type=int, default=default_jobs())
    p.add_argument("--trace", default=str(TRACE))
    a = p.parse_args(argv)
    try:
        if a.scrape_s <= 0 or a.window_s <= 0 or a.jobs < 1:
            raise ValueError("--scrape-s and --window-s must be > 0 and --jobs >= 1")
        cfg = suite.SuiteConfig(classes=tuple(a.classes.split(",")),
                                cold_starts=tuple(float(c) for c in a.cold_starts.split(",")),
                                slos=tuple(a.slos.split(",")), seeds=tuple(int(s) for s in a.seeds.split(",")),
                                trace_path=a.trace if "trace" in a.classes.split(",") else None, jobs=a.jobs)
        todo = cfg.scenarios()
        suite.prepare(cfg, todo)
    except (OSError, ValueError) as e:
        print(f"bench_scrape_interval: {e}", file=sys.stderr)
        return 1
    prom = (SUITE_PROM, (a.scrape_s, a.window_s))
    started = time.perf_counter()
    results = suite.fork_map(lambda sc, c: _run(sc, c, prom), todo, cfg, a.jobs)
    print(f"{'scenario':36} " + " | ".join(f"{pol} scrape {s:g} s window {w:g} s" for s, w in prom for pol in POLICIES))
    worse: dict[str, list[str]] = {}
    better = 0
    for sc, rows in zip(todo, results, strict=True):
        print(f"{sc.name:36} " + " | ".join(f"{att:6.1%} {rh:5.2f} rh peak {pk:2d}" for *_, att, rh, pk in rows))
        ours = [r for r in rows if r[2] == "tritonscale"]
        if ours[1][3] < ours[0][3]:
            worse.setdefault(sc.cls, []).append(f"{sc.name} {ours[0][3]:.1%} -> {ours[1][3]:.1%}")
        better += ours[1][3] > ours[0][3]
    print(f"\ntritonscale met fewer windows at a {a.scrape_s:g} s scrape ({a.window_s:g} s window) than at "
          f"{SUITE_PROM[0]:g} s ({SUITE_PROM[1]:g} s) in {sum(map(len, worse.values()))} of {len(todo)} scenarios, "
          f"more in {better}")
    for cls, names in worse.items():
        print(f"  {cls}: " + "; ".join(names))
    print(f"wall time: {time.perf_counter() - started:.1f} s, {a.jobs} worker(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
