#!/usr/bin/env python
"""The scenario suite, once, written three ways: the text report (a table per scenario, the
summary and the criteria), the JSON and the attainment-against-cost PNG.

    .venv/bin/python e2e/bench_suite.py [--out DIR] [--quick] [--jobs N] [--trace FILE]

The same as ``tritonscale simulate --suite`` (with ``--json`` / ``--plot``), in one run instead
of three. The real trace is ``../shared/data/azure-llm-conv-2023.csv`` beside the repository
(Azure LLM inference trace 2023, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024), or --trace. A benchmark,
not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate import suite_report  # noqa: E402
from tritonscale.simulate.benchmark import default_jobs  # noqa: E402
from tritonscale.simulate.suite import (  # noqa: E402
    DEFAULT_TRACE,
    QUICK_COLD_STARTS,
    QUICK_SEEDS,
    QUICK_SLOS,
    SuiteConfig,
    benchmark_trace,
    run_suite,
    to_dict,
)
from tritonscale.simulate.suite_command import stderr_progress  # noqa: E402


def _policy(scenario: dict, name: str) -> dict:
    """One policy's row of a scenario in the suite's JSON ("static" matches "static:8")."""
    return next(p for p in scenario["policies"] if p["policy"] == name or p["policy"].startswith(name + ":"))


def per_class_table(d: dict) -> str:
    """tritonscale per traffic class and cold start, from the suite's JSON (the README's table)."""
    failing = {f["scenario"] for f in d["check"]["failing"]}
    rows = ["| class | cold start | meets criteria | tritonscale windows met (worst / median) | x oracle (median) "
            "| static peak fleet x oracle (median) | KEDA windows met (worst) |", "|---|---:|---:|---:|---:|---:|---:|"]
    classes = list(dict.fromkeys(s["class"] for s in d["scenarios"]))
    colds = sorted({s["cold_start_s"] for s in d["scenarios"]})
    for c in classes:
        for cold in colds:
            sc = [s for s in d["scenarios"] if s["class"] == c and s["cold_start_s"] == cold]
            if not sc:
                continue
            me, static, keda = ([_policy(s, n) for s in sc] for n in ("tritonscale", "static", "keda"))
            att = [p["window_attainment"] for p in me]
            rows.append(f"| {c} | {cold:.0f} s | {sum(s['name'] not in failing for s in sc)}/{len(sc)} "
                        f"| {100 * min(att):.1f}% / {100 * statistics.median(att):.1f}% "
                        f"| {statistics.median(p['cost_vs_oracle'] for p in me):.2f} "
                        f"| {statistics.median(p['cost_vs_oracle'] for p in static):.2f} "
                        f"| {100 * min(p['window_attainment'] for p in keda):.1f}% |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/suite", help="directory for suite.txt, suite.json, suite.png")
    p.add_argument("--quick", action="store_true", help="one scenario per class (what CI runs)")
    p.add_argument("--jobs", type=int, default=default_jobs())
    p.add_argument("--trace", type=Path,
                   help="the trace class's real trace (default ../shared/data/azure-llm-conv-2023.csv)")
    args = p.parse_args(argv)
    cfg = SuiteConfig(jobs=args.jobs)
    try:
        trace, classes = benchmark_trace(cfg.classes, args.trace, REPO)
    except ValueError as exc:
        print(f"bench_suite: {exc}", file=sys.stderr)
        return 1
    if trace is None:
        print(f"bench_suite: no trace at {REPO / DEFAULT_TRACE}: the trace class is skipped (--trace names one)",
              file=sys.stderr)
    cfg = replace(cfg, classes=classes, trace_path=trace)
    if args.quick:
        cfg = replace(cfg, cold_starts=QUICK_COLD_STARTS, slos=QUICK_SLOS, seeds=QUICK_SEEDS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = run_suite(cfg, progress=stderr_progress("bench_suite", started))
    wall = time.perf_counter() - started
    text = (suite_report.text(cfg, results)
            + f"\n\nwall time: {wall:.1f} s on {os.cpu_count()} CPU(s), {cfg.jobs} worker(s)\n")
    as_json = to_dict(cfg, results, wall)
    text += "\n## tritonscale per class and cold start\n" + per_class_table(as_json) + "\n"
    (out / "suite.txt").write_text(text)
    (out / "suite.json").write_text(json.dumps(as_json, indent=1))
    suite_report.plot(results, str(out / "suite.png"))
    summary = text[text.index("## Summary"):]
    print(summary)
    print(f"written: {out / 'suite.txt'}, {out / 'suite.json'}, {out / 'suite.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
