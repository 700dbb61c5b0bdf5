#!/usr/bin/env python
"""Re-run tritonscale alone on a stored suite result, for trying a decider change.

    .venv/bin/python e2e/bench_suite_rerun.py SUITE.json [--only SUBSTR,...] [--set NAME=VALUE ...]
                                              [--json OUT] [--jobs N] [--trace FILE]
                                              [--scrapes stored|spread|aligned]

SUITE.json is ``tritonscale simulate --suite --json`` output (``e2e/bench_suite.py`` writes it as
``suite.json``). Every scenario (or those whose name contains one of ``--only``) is simulated
again for tritonscale only, on the same arrivals and starting replicas, and scored against the
other policies' stored rows by the suite's criteria; the oracle and the baselines are not re-run,
so the whole suite takes minutes instead of tens of minutes. ``--scrapes`` re-runs it with each
pod scraped at its own offset (``spread``) or every pod at the ticks' instants (``aligned``, the
best case every result before 2026-11-24 session 26 was measured on); by default, as the stored
result was (its setup's ``scrapes``). ``--set NAME=VALUE`` overrides a
constant of ``tritonscale.scaling.decider.constants`` for this run (an experiment; the decider
reads them at call time). Prints the scenarios whose figures or verdict changed and the count
that meets the criteria, before and after. The trace class replays the trace the result names
(its setup's ``trace``; results written before session 48 name none, and ``--trace`` must then
name it unless it was the shared Azure trace); a scenario whose arrivals are not the stored run's
(another trace) is refused, not scored against rows measured on other traffic. A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.scaling.decider import constants  # noqa: E402
from tritonscale.simulate.benchmark import default_jobs  # noqa: E402
from tritonscale.simulate.suite import OURS, SCRAPES, check  # noqa: E402
from tritonscale.simulate.suite_rerun import config_from_json, rerun_all  # noqa: E402

TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"


def _override(pairs: list[str]) -> dict[str, float]:
    """NAME=VALUE pairs as the constants' own types: an int constant (a count, a slice bound) stays
    an int, and a fractional value for one is refused."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        old = getattr(constants, name, None)
        if not sep or isinstance(old, bool) or not isinstance(old, int | float):
            raise ValueError(f"--set {pair!r}: want NAME=VALUE with NAME a numeric constant of the decider")
        try:
            out[name] = float(value) if isinstance(old, float) else int(value)
        except ValueError:
            kind = "a number" if isinstance(old, float) else f"an integer ({name} is a count)"
            raise ValueError(f"--set {pair!r}: {value!r} is not {kind}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite_json")
    p.add_argument("--only", default="", help="comma list: re-run the scenarios whose name contains one")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a decider constant")
    p.add_argument("--json", metavar="OUT", help="write the re-run scenarios' rows and verdicts")
    p.add_argument("--jobs", type=int, default=default_jobs())
    p.add_argument("--trace", help="the trace the stored trace scenarios ran on (default: the one the result "
                                   "names, or the shared Azure trace for a result that names none)")
    p.add_argument("--scrapes", choices=("stored", "spread", "aligned"), default="stored",
                   help="pods scraped at their own offsets or at the ticks' instants (default: as stored)")
    a = p.parse_args(argv)
    try:
        for name, value in _override(a.set).items():
            setattr(constants, name, value)
            print(f"decider constant {name} = {value:g}")
        data = json.loads(Path(a.suite_json).read_text(encoding="utf-8"))
        named = a.trace or (data.get("setup") or {}).get("trace")
        trace = named or str(TRACE)
        if any(s.get("class") == "trace" for s in data.get("scenarios") or []):
            # A re-run on another trace than the stored run's is refused scenario by scenario (its
            # request count differs); say which one this is.
            print(f"trace: {trace}" + ("" if named else " (the result does not name its trace; --trace names it)"))
        cfg = config_from_json(data, trace if Path(trace).exists() else None)
        if a.scrapes != "stored":
            cfg = replace(cfg, scrape_spread=a.scrapes == "spread")
        unsaid = a.scrapes == "stored" and "scrapes" not in data.get("setup", {})
        # Say which model runs: a result that does not say is read as aligned (the only model before
        # session 26), which is wrong for the few written between that change and the key's.
        print(f"scrapes: {SCRAPES[cfg.scrape_spread]}"
              + (" (the result does not say: read as aligned; --scrapes overrides)" if unsaid else ""))
        wanted = [w for w in a.only.split(",") if w]
        stored = [s for s in data["scenarios"] if not wanted or any(w in s["name"] for w in wanted)]
        if not stored:
            raise ValueError(f"no scenario of {a.suite_json} matches --only {a.only!r}")
        if a.jobs < 1:
            raise ValueError("--jobs must be >= 1")
        started = time.perf_counter()
        results = rerun_all(stored, cfg, a.jobs)
    except (OSError, ValueError) as e:
        print(f"bench_suite_rerun: {e}", file=sys.stderr)
        return 1
    rows = []
    for s, res in zip(stored, results, strict=True):
        old, new = next(r for r in s["policies"] if r["policy"] == OURS), res.row(OURS)
        verdict = check(res)
        was = s["tritonscale_check"]["holds"]
        changed = (abs(new.window_attainment - old["window_attainment"]) > 1e-9
                   or abs(new.replica_hours - old["replica_hours"]) > 1e-6 or verdict.holds != was)
        if changed:
            print(f"{s['name']:36s} windows {old['window_attainment']:.1%} -> {new.window_attainment:.1%}  "
                  f"{old['replica_hours']:.2f} -> {new.replica_hours:.2f} replica-h  peak {old['max_replicas']} -> "
                  f"{new.max_replicas}  {'meets' if was else 'misses'} -> {'meets' if verdict.holds else 'misses'}"
                  + (f" ({'; '.join(verdict.failures)})" if verdict.failures else ""))
        rows.append({"scenario": s["name"], "holds": verdict.holds, "failures": list(verdict.failures),
                     "held_before": was, "tritonscale": new.__dict__})
    before, after = sum(r["held_before"] for r in rows), sum(r["holds"] for r in rows)
    print(f"meets the criteria in {before} -> {after} of {len(rows)} scenarios; "
          f"wall time {time.perf_counter() - started:.1f} s, {a.jobs} worker(s)")
    if a.json:
        Path(a.json).write_text(json.dumps({"overrides": a.set, "scenarios": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
