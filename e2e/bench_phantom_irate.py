#!/usr/bin/env python
"""What the operator's old ``irate`` queries cost: the suite re-run with their phantom modelled.

    .venv/bin/python e2e/bench_phantom_irate.py SUITE.json [bench_suite_rerun.py options]

Before ``promql_queries.live_irate``, the operator summed ``irate(x[w])`` over every series in
the range, and a range vector ignores staleness markers: a removed pod's last rate stayed in the
sum until its last two samples left the window (``w`` - one scrape interval, as measured against
Debian's Prometheus in ``tests/integration/test_prometheus_staleness.py``'s set-up). The
simulator reads only live pods, as the operator now does. This script puts the phantom back --
a removed pod's requests finished between its last two scrapes, per second, added to
``recent_rps`` and ``recent_served_rps`` while it would still be in the range -- and re-runs
tritonscale on a stored suite (``e2e/bench_suite_rerun.py``, whose options it takes), then
prints the scale events, replica-hours and verdicts beside the stored run's. A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout
sys.path.insert(0, str(REPO / "e2e"))

import bench_suite_rerun  # noqa: E402

from tritonscale.simulate import metrics_view  # noqa: E402

_live_observe = metrics_view.observe
_seen: dict[int, Any] = {}  # every pod scraped so far in this simulation
_last_now = [0.0]


def _phantom_observe(pods, now, cfg, retired=()):  # type: ignore[no-untyped-def]
    if now < _last_now[0]:  # a new simulation in this worker
        _seen.clear()
    _last_now[0] = now
    for r in pods:
        _seen[id(r)] = r
    obs = _live_observe(pods, now, cfg, retired)
    if obs.status != "ok" or obs.recent_rps is None:
        return obs
    t = metrics_view.last_scrape(now, cfg.scrape_s)
    live = {id(r) for r in pods}
    out = served = 0.0
    for key, r in _seen.items():
        if key in live or r.removed is None or r.removed > t:
            continue
        last = metrics_view.last_scrape(r.removed, cfg.scrape_s)
        if t - last >= cfg.window_s - cfg.scrape_s:
            continue  # its last two samples have left the range
        end = r.req_end.view
        i0 = int(np.searchsorted(end, last - cfg.scrape_s, side="right"))
        i1 = int(np.searchsorted(end, last, side="right"))
        out += (i1 - i0) / cfg.scrape_s
        served += float(np.sum(r.req_rejected.a[i0:i1] == 0.0)) / cfg.scrape_s
    if not out:
        return obs
    return replace(obs, recent_rps=obs.recent_rps + out, recent_served_rps=(obs.recent_served_rps or 0.0) + served)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") or "--json" in argv:
        print("bench_phantom_irate: want SUITE.json first (tritonscale simulate --suite --json), then any of "
              "bench_suite_rerun.py's options but --json", file=sys.stderr)
        return 1
    metrics_view.observe = _phantom_observe  # before the re-run forks its workers
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rerun.json"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = bench_suite_rerun.main(argv + ["--json", str(out)])
        print(printed.getvalue().splitlines()[-1] if printed.getvalue() else "")
        if code:
            return code
        rows = json.loads(out.read_text(encoding="utf-8"))["scenarios"]
    stored = {s["name"]: next(p for p in s["policies"] if p["policy"] == "tritonscale")
              for s in json.loads(Path(argv[0]).read_text(encoding="utf-8"))["scenarios"]}
    events: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    ratio = []
    for row in rows:
        old, new = stored[row["scenario"]], row["tritonscale"]
        cls = row["scenario"].split("/")[0]
        events[cls][0] += old["scale_events"]
        events[cls][1] += new["scale_events"]
        ratio.append(new["replica_hours"] / old["replica_hours"])
        if row["holds"] != row["held_before"]:
            print(f"{row['scenario']:36s} windows {old['window_attainment']:.1%} -> {new['window_attainment']:.1%}, "
                  f"{old['scale_events']} -> {new['scale_events']} scale events: "
                  f"{'meets' if row['held_before'] else 'misses'} -> {'meets' if row['holds'] else 'misses'}")
    total = [sum(v[0] for v in events.values()), sum(v[1] for v in events.values())]
    print("scale events, live series -> with the phantom: "
          + ", ".join(f"{c} {a} -> {b}" for c, (a, b) in events.items()) + f"; all {total[0]} -> {total[1]}")
    print(f"replica-hours with the phantom / without: median {statistics.median(ratio):.3f}, "
          f"{min(ratio):.3f}-{max(ratio):.3f}, higher in {sum(r > 1 + 1e-6 for r in ratio)} of {len(ratio)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
