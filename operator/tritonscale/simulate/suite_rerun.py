"""Re-run tritonscale alone on the scenarios of a stored suite result.

A whole suite runs eight policies and the oracle on 126 one-hour scenarios; a change to the
decider changes only tritonscale's row. ``rerun`` simulates tritonscale on a stored scenario's
arrivals -- the same arrivals, the same starting replicas (``benchmark.fair_start`` of the
oracle's per-window needs) and the same cluster as ``suite.run_scenario`` -- and scores it
against the other policies' stored rows, so a candidate change is judged by the suite's own
criteria (``suite.check``) in a fraction of the time. With the decider unchanged it reproduces
the stored row exactly (``tests/simulate/test_suite.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tritonscale.simulate import engine, suite
from tritonscale.simulate.benchmark import Options, run_benchmark
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import Summary
from tritonscale.simulate.suite_scenarios import Scenario, SuiteConfig
from tritonscale.simulate.suite_scoring import OURS, Row, ScenarioResult, row_of

_ROW_FIELDS = tuple(Row.__dataclass_fields__)


def _number(v: Any) -> Any:
    """A stored field: "inf" (how the suite's JSON writes an infinite p95) back to a float."""
    return float(v) if v in ("inf", "-inf") else v


def config_from_json(d: dict[str, Any], trace_path: str | None) -> SuiteConfig:
    """The suite's configuration from a stored result's ``setup`` (ValueError when it has none)."""
    try:
        setup, scenarios = d["setup"], d["scenarios"]
        rep = setup["replica"]
        batcher = BatcherConfig(base_ms=float(rep["base_ms"]), per_item_ms=float(rep["per_item_ms"]),
                                max_batch=int(rep["max_batch"]), max_queue_delay_ms=float(rep["max_queue_delay_ms"]),
                                preferred=tuple(int(p) for p in rep["preferred"]))
        lo, hi = (int(v) for v in setup["replica_range"])
        timeout = setup["queue_timeout"]  # "2 x the SLO (...)" or "none", as suite.to_dict writes it
        targets = 0.0 if timeout == "none" else float(timeout.split(" x ")[0])
        return SuiteConfig(classes=tuple(dict.fromkeys(s["class"] for s in scenarios)),
                           slos=tuple(dict.fromkeys(s["slo"] for s in scenarios)),
                           duration_s=float(setup["duration_s"]), peak_replicas=int(setup["peak_replicas"]),
                           min_replicas=lo, max_replicas=hi, batcher=batcher, trace_path=trace_path,
                           trace_unit=setup.get("trace_unit"),  # None in results before --trace-unit
                           queue_timeout_targets=targets, ranges=setup.get("ranges", "suite"),
                           # results before 2026-11-24 (session 26) say nothing: every pod was
                           # scraped at the ticks' instants
                           scrape_spread=setup.get("scrapes", suite.SCRAPES[False]) == suite.SCRAPES[True],
                           routing=_routing(setup.get("routing", suite.ROUTING)),
                           connections=int(setup.get("connections", engine.CONNECTIONS)),
                           connection_age_s=float(setup.get("connection_age_s", engine.CONNECTION_AGE_S)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not a suite result (tritonscale simulate --suite --json): {e}") from None


def _routing(text: str) -> str:
    """The routing a setup's text names (``suite.ROUTING_TEXT``; any round-robin wording, as results
    before session 70 only ran that); ValueError for another."""
    for name, said in suite.ROUTING_TEXT.items():
        if text == said:
            return name
    if text.startswith("round-robin"):
        return "round-robin"
    raise ValueError(f"unknown routing {text!r}")


def scenario_arrivals(sc: Scenario, cfg: SuiteConfig) -> tuple[np.ndarray, float]:
    """The scenario's arrivals and horizon, as ``suite.run_scenario`` draws them."""
    capacity = suite._calibration(cfg.batcher, cfg.slo_ms(sc.slo)).capacity_rps
    arr, horizon, _ = suite.scenario_arrivals(sc, cfg, capacity)
    return arr, horizon


def run_ours(sc: Scenario, cfg: SuiteConfig,
             drawn: tuple[np.ndarray, float] | None = None) -> tuple[Summary, np.ndarray]:
    """tritonscale alone on a suite scenario, as ``suite.run_scenario`` runs it (the same arrivals,
    cluster and starting replicas): its summary, and the arrivals. ``drawn``: the scenario's
    ``scenario_arrivals``, if the caller has them already."""
    slo_ms = cfg.slo_ms(sc.slo)
    cal = suite._calibration(cfg.batcher, slo_ms)
    arr, horizon = drawn if drawn is not None else scenario_arrivals(sc, cfg)
    # run_benchmark starts it warm with the suite's fair_start (the oracle's first windows).
    opts = Options(slo_ms, suite._cluster(cfg, sc), seed=sc.seed, with_oracle=False)
    return run_benchmark(arr, horizon, OURS, opts, calibration=cal).outcomes[0].summary, arr


def rerun(stored: dict[str, Any], cfg: SuiteConfig) -> ScenarioResult:
    """One stored scenario with tritonscale simulated again and every other row as stored.
    ValueError when the arrivals are not the stored run's (another trace than it ran on): scored
    against the stored rows, such a re-run would compare runs on different traffic."""
    sc = _scenario(stored)
    slo_ms = cfg.slo_ms(sc.slo)
    drawn = scenario_arrivals(sc, cfg)
    if len(drawn[0]) != int(stored["requests"]):  # checked before the simulation, which takes the time
        raise ValueError(f"{stored['name']}: these arrivals are {len(drawn[0]):,} requests, the stored run's were "
                         f"{int(stored['requests']):,} ({stored['arrivals']}): not the traffic it ran on"
                         + (f" (the trace {cfg.trace_path}; give the one it ran on)" if sc.cls == "trace" else ""))
    s, _ = run_ours(sc, cfg, drawn)
    oracle = next(p for p in stored["policies"] if p["policy"] == "oracle")
    cost = s.replica_hours / oracle["replica_hours"] if oracle["replica_hours"] else None
    rows = [row_of(s, cost, oracle["max_replicas"]) if p["policy"] == OURS
            else Row(**{k: _number(p[k]) for k in _ROW_FIELDS})
            for p in stored["policies"]]
    return ScenarioResult(sc, slo_ms, int(stored["requests"]), stored["arrivals"], int(stored["static_replicas"]),
                          int(stored["oracle_peak"]), stored["oracle_meets_slo"], rows, duration_s=drawn[1])


def _scenario(stored: dict[str, Any]) -> Scenario:
    return Scenario(stored["class"], float(stored["cold_start_s"]), stored["slo"], int(stored["seed"]))


def rerun_all(stored: Sequence[dict[str, Any]], cfg: SuiteConfig, jobs: int = 1) -> list[ScenarioResult]:
    """``rerun`` of each stored scenario, in worker processes (fork) when ``jobs`` > 1; in order."""
    suite.prepare(cfg, [_scenario(s) for s in stored])
    return suite.fork_map(rerun, stored, cfg, jobs)
