#!/usr/bin/env python
"""The scenario suite, once, written three ways: the text report (a table per scenario, the
summary and the criteria), the JSON and the attainment-against-cost PNG.

    .venv/bin/python e2e/bench_suite.py [--out DIR] [--quick] [--jobs N]

The same as ``tritonscale simulate --suite`` (with ``--json`` / ``--plot``), in one run instead
of three. The real trace is ``../shared/data/azure-llm-conv-2023.csv`` beside the repository
(Azure LLM inference trace 2023, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024). A benchmark,
not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate import suite_report  # noqa: E402
from tritonscale.simulate.benchmark import default_jobs  # noqa: E402
from tritonscale.simulate.suite import QUICK_COLD_STARTS, QUICK_SEEDS, QUICK_SLOS, SuiteConfig, run_suite, to_dict  # noqa: E402

TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/suite", help="directory for suite.txt, suite.json, suite.png")
    p.add_argument("--quick", action="store_true", help="one scenario per class (what CI runs)")
    p.add_argument("--jobs", type=int, default=default_jobs())
    args = p.parse_args()
    cfg = SuiteConfig(trace_path=str(TRACE) if TRACE.exists() else None, jobs=args.jobs)
    if not TRACE.exists():
        cfg = replace(cfg, classes=tuple(c for c in cfg.classes if c != "trace"))
    if args.quick:
        cfg = replace(cfg, cold_starts=QUICK_COLD_STARTS, slos=QUICK_SLOS, seeds=QUICK_SEEDS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = run_suite(cfg)
    wall = time.perf_counter() - started
    text = (suite_report.text(cfg, results)
            + f"\n\nwall time: {wall:.1f} s on {os.cpu_count()} CPU(s), {cfg.jobs} worker(s)\n")
    (out / "suite.txt").write_text(text)
    (out / "suite.json").write_text(json.dumps(to_dict(cfg, results, wall), indent=1))
    suite_report.plot(results, str(out / "suite.png"))
    summary = text[text.index("## Summary"):]
    print(summary)
    print(f"written: {out / 'suite.txt'}, {out / 'suite.json'}, {out / 'suite.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
