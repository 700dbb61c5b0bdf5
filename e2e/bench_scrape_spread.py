#!/usr/bin/env python
"""What the decider reads with every pod scraped on the ticks' grid, and with each pod at its own offset.

    .venv/bin/python e2e/bench_scrape_spread.py SCENARIO [SCENARIO ...] [--trace FILE]

SCENARIO is a suite scenario's name, e.g. ``trace/cold60s/tight/seed0``. Each is simulated twice
for tritonscale, as the suite runs it (same arrivals, starting replicas and cluster): with
``PromConfig(spread=False)`` (every pod scraped at the ticks' instants: fresh data) and with the
default per-pod offsets (``metrics_view.scrape_offset``). Printed per run: window attainment,
replica-hours, and three figures of the rate the decider reads at each tick (``Decision.details
["rate"]``) against the arrivals of the 15 s before the tick:
- the readings' tick-to-tick noise, as the standard deviation of their differences / sqrt(2);
- the arrivals' own, the same way;
- the mean of arrivals minus readings (how far the readings lag).
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.scaling import decider  # noqa: E402
from tritonscale.simulate import suite  # noqa: E402
from tritonscale.simulate.suite_rerun import run_ours  # noqa: E402

TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"
_READINGS: list[tuple[float, float]] = []
_decide = decider.decide


def _recording_decide(obs, replicas, policy, state, now):  # type: ignore[no-untyped-def]
    d = _decide(obs, replicas, policy, state, now)
    if d.details.get("rate") is not None:
        _READINGS.append((now, float(d.details["rate"])))
    return d


def _scenario(name: str) -> suite.Scenario:
    try:
        return suite.Scenario.from_name(name)
    except ValueError:
        raise SystemExit(f"bench_scrape_spread: {name!r} is not a scenario name like "
                         "trace/cold60s/tight/seed0") from None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenarios", nargs="+")
    p.add_argument("--trace", default=str(TRACE))
    a = p.parse_args(argv)
    cfg = suite.SuiteConfig(trace_path=a.trace if Path(a.trace).exists() else None)
    decider.decide = _recording_decide  # the policy calls decider.decide through the module
    for name in a.scenarios:
        sc = _scenario(name)
        for spread in (False, True):
            _READINGS.clear()
            s, arr = run_ours(sc, replace(cfg, scrape_spread=spread))
            t = np.array([r[0] for r in _READINGS])
            x = np.array([r[1] for r in _READINGS])
            arrived = np.array([np.count_nonzero((arr > tt - 15.0) & (arr <= tt)) / 15.0 for tt in t])
            print(f"{name:34s} {'per-pod offsets' if spread else 'ticks grid     '}  windows {s.window_attainment:6.1%}"
                  f"  {s.replica_hours:5.2f} replica-h  noise: readings {np.std(np.diff(x)) / np.sqrt(2):6.1f}"
                  f" arrivals {np.std(np.diff(arrived)) / np.sqrt(2):6.1f} rps  lag {np.mean(arrived - x):5.1f} rps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
