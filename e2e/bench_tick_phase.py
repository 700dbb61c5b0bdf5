#!/usr/bin/env python
"""What reading the queue's growth per tick instead of per scrape costs, when ticks and scrapes drift.

    .venv/bin/python e2e/bench_tick_phase.py SUITE.json [--jitter S] [--phase S] [bench_suite_rerun.py options]

The autoscaler ticks every 15 s from t = 0, and Prometheus scrapes each pod every 15 s at its own
offset (``metrics_view.scrape_offset``). In a cluster the ticks, too, run from an unrelated
clock, and they drift against the scrapes: when a tick's phase is close to a pod's, it can read
the scrape the last tick read, and the next one two scrapes on. (Until session 26 the simulator
scraped every pod on the ticks' grid; the figures in simulate/README measured on that grid say
so.) The decider divides the pending gauge's change by the time between the
scrapes it was read at (``Observation.pending_at``); before, it divided by the time between
ticks, so such a pair read no growth and then twice the growth.

This script re-runs tritonscale on a stored suite (``e2e/bench_suite_rerun.py``, whose options it
takes but ``--json``) with ticks at ``interval x k + phase + U(-jitter, jitter)`` (seeded), twice:
with the growth per scrape (the decider as it is) and per tick (``pending_at`` withheld, the
decider as it was), and prints the verdicts, replica-hours and scale events of both against the
stored run. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout
sys.path.insert(0, str(REPO / "e2e"))

import bench_suite_rerun  # noqa: E402

from tritonscale.simulate import metrics_view  # noqa: E402
from tritonscale.simulate.policies import tritonscale as ts_policy  # noqa: E402

_observe = metrics_view.observe
_OPTS: dict[str, float] = {"jitter": 1.0, "phase": 0.0}


def _drifting_ticks(self, horizon: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(int(horizon) % (2**32))
    base = np.arange(self.interval_s, horizon, self.interval_s) + _OPTS["phase"]
    return np.sort(base + rng.uniform(-_OPTS["jitter"], _OPTS["jitter"], len(base)))


def _per_tick(pods, now, cfg, retired=()):  # type: ignore[no-untyped-def]
    return replace(_observe(pods, now, cfg, retired), pending_at=None)


def _run(argv: list[str]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rerun.json"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = bench_suite_rerun.main(argv + ["--json", str(out)])
        if code:
            raise SystemExit(code)
        return json.loads(out.read_text(encoding="utf-8"))["scenarios"]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("--jitter", type=float, default=1.0, help="seconds either side of each tick (default 1)")
    p.add_argument("--phase", type=float, default=0.0, help="seconds the ticks lag the scrapes (default 0)")
    args, rest = p.parse_known_args(argv)
    if "--json" in rest:
        p.error("--json is not taken: this prints a comparison")
    _OPTS.update(jitter=args.jitter, phase=args.phase)
    ts_policy.TritonscalePolicy.tick_times = _drifting_ticks  # type: ignore[method-assign]  # before the fork
    per_scrape = _run([args.suite, *rest])
    metrics_view.observe = _per_tick
    per_tick = _run([args.suite, *rest])
    metrics_view.observe = _observe
    stored = {s["name"]: next(q for q in s["policies"] if q["policy"] == "tritonscale")
              for s in json.loads(Path(args.suite).read_text(encoding="utf-8"))["scenarios"]}
    print(f"ticks every interval + {args.phase:g} s +- {args.jitter:g} s (uniform) against 15 s scrapes")
    for label, rows in (("growth per scrape (now)", per_scrape), ("growth per tick (before)", per_tick)):
        ratio = [r["tritonscale"]["replica_hours"] / stored[r["scenario"]]["replica_hours"] for r in rows]
        events = sum(r["tritonscale"]["scale_events"] for r in rows)
        print(f"{label:26s} meets the criteria in {sum(r['holds'] for r in rows)}/{len(rows)}; "
              f"replica-hours / aligned ticks: median {statistics.median(ratio):.3f}, max {max(ratio):.3f}; "
              f"scale events {events} (aligned: {sum(stored[r['scenario']]['scale_events'] for r in rows)})")
    for a, b in zip(per_scrape, per_tick, strict=True):
        if a["holds"] != b["holds"]:
            print(f"  {a['scenario']:36s} per scrape {a['tritonscale']['window_attainment']:.1%} "
                  f"{'meets' if a['holds'] else 'misses'}, per tick {b['tritonscale']['window_attainment']:.1%} "
                  f"{'meets' if b['holds'] else 'misses'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
