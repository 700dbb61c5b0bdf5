#!/usr/bin/env python
"""Does a batcher config of the tuner's grid meet more windows than no delay on its own, with the
fleet held fixed? Printed as figures, for the scenarios of a batching-tuner result.

    .venv/bin/python e2e/bench_batcher_fixed_fleet.py TUNER.json [--all] [--jobs N]

TUNER.json is ``e2e/bench_batching_tuner.py --json`` output. For each of its scenarios where the
tuner misses its done-when (or every scenario with ``--all``), the scenario's arrivals are served
by fixed fleets around the tuner's mean replica count -- from one below its floor to one above its
ceiling -- with every static config of the grid (``tuner_suite.GRID_DELAYS_MS`` x
``GRID_PREFERRED``), no autoscaler. Per fleet it prints the settled window attainment (the windows
after ``tuner_suite.SETTLE_S``, as the done-when counts them) with no delay and no preferred sizes,
the best of the grid, how many configs reach it and those that do not.

Where no config beats no delay at any fixed fleet, a grid config whose autoscaled run met more
windows than the tuner did so through the replicas the decider chose under it (the p95 it read),
not through what one replica serves. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate import suite, tuner_suite  # noqa: E402
from tritonscale.simulate.benchmark import Options, build  # noqa: E402
from tritonscale.simulate.engine import simulate  # noqa: E402
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, window_p95_ms  # noqa: E402
from tritonscale.simulate.suite import DEFAULT_TRACE, Scenario, SuiteConfig  # noqa: E402


def fleet_row(job: tuple[str, int], only: tuple[str, ...] | None = None) -> tuple[str, int, dict[str, float]]:
    """Settled attainment of every grid config (those labelled ``only``, if given) for one scenario
    served by ``replicas`` fixed replicas."""
    name, replicas = job
    sc = Scenario.from_name(name)
    cfg = SuiteConfig(classes=(sc.cls,), cold_starts=(sc.cold_start_s,), slos=(sc.slo,), seeds=(sc.seed,),
                      trace_path=str(REPO / DEFAULT_TRACE))
    slo = cfg.slo_ms(sc.slo)
    cal = suite._calibration(cfg.batcher, slo)
    arr, horizon, _ = suite.scenario_arrivals(sc, cfg, cal.capacity_rps)
    base = suite._cluster(cfg, sc)
    out = {}
    for label, delay, prefs, _tuner in tuner_suite.configs(slo, False, cfg.batcher.max_batch):
        if not label.startswith("static") or (only is not None and label not in only):
            continue
        cl = replace(base, batcher=replace(base.batcher, max_queue_delay_ms=delay, preferred=prefs))
        result = simulate(arr, build(f"static:{replicas}", Options(slo, cl, seed=sc.seed), cal, None), cl, horizon)
        wp = window_p95_ms(result.arrival, result.latency, ATTAINMENT_WINDOW_S, result.horizon)
        out[label] = tuner_suite.settled_attainment(wp, slo)
    return name, replicas, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tuner_json", help="e2e/bench_batching_tuner.py --json output")
    p.add_argument("--all", action="store_true", help="every scenario, not only those where the tuner misses")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    try:
        stored = json.loads(Path(args.tuner_json).read_text())["scenarios"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"bench_batcher_fixed_fleet: {args.tuner_json}: not a batching-tuner result ({e})")
    started = time.perf_counter()
    jobs, tuner_mean = [], {}
    for s in stored:
        if not args.all and all(v["holds"] for v in s["verdicts"]):
            continue
        hours = max(r["replica_hours"] for r in s["runs"] if r["tuner"])  # the costlier of the two starts
        mean = hours / (suite.SuiteConfig().duration_s / 3600.0)
        tuner_mean[s["name"]] = mean
        jobs += [(s["name"], n) for n in range(max(1, math.floor(mean) - 1), math.ceil(mean) + 2)]
    with multiprocessing.get_context("fork").Pool(max(1, args.jobs)) as pool:
        rows = pool.map(fleet_row, jobs)
    beaten = 0
    for name in tuner_mean:
        print(f"\n{name} (the tuner's runs average {tuner_mean[name]:.2f} replicas)")
        print(f"  {'fleet':>5} {'no delay':>8} {'grid best':>9} {'at best':>7}  configs below the best")
        for _, n, res in (r for r in rows if r[0] == name):
            plain = res[tuner_suite._label(0.0, ())]
            best = max(res.values())
            below = [f"{k.removeprefix('static ')} {v:.1%}" for k, v in res.items() if v < best]
            beaten += best > plain
            at = f"{len(res) - len(below)}/{len(res)}"
            print(f"  {n:>5} {plain:>8.1%} {best:>9.1%} {at:>7}  {', '.join(below) or '-'}")
    print(f"\nfixed fleets where a grid config met more settled windows than no delay: {beaten}/{len(rows)}")
    print(f"wall time: {time.perf_counter() - started:.0f} s, {args.jobs} worker(s)")
    return 0  # a benchmark: figures, not a verdict


if __name__ == "__main__":
    sys.exit(main())
