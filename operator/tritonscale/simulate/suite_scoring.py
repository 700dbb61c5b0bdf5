"""Scoring the suite across scenarios, and its JSON.

Scores per policy and scenario: window attainment (share of 60 s windows whose p95
is within the target; a rejected or timed-out request is a miss), replica-hours, cost
relative to the oracle, peak replicas relative to the oracle's peak. A policy is
*dominated* in a scenario when another (non-oracle) policy has at least its window
attainment at no higher cost.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonscale.simulate.engine import TickRecord
from tritonscale.simulate.report import Summary, json_number
from tritonscale.simulate.suite_scenarios import ROUTING_TEXT, SCRAPES, Scenario, SuiteConfig

OURS = "tritonscale"
# Done-when thresholds of the suite (issue 9), per class group
SMOOTH_ATTAINMENT, SMOOTH_COST_VS_ORACLE = 0.99, 1.3
BURSTY_ATTAINMENT = 0.90
PEAK_VS_ORACLE = 1.25


@dataclass(frozen=True)
class Row:
    """One policy in one scenario."""

    policy: str
    window_attainment: float
    windows: int
    windows_missed: int
    replica_hours: float
    cost_vs_oracle: float | None
    max_replicas: int
    peak_vs_oracle: float | None
    rejected: int
    scale_events: int
    p95_ms: float


def row_of(s: Summary, cost_vs_oracle: float | None, oracle_peak: int) -> Row:
    """A policy's scores in a scenario, its peak relative to the oracle's (None without one)."""
    return Row(s.policy, s.window_attainment, s.windows, s.windows_missed, s.replica_hours, cost_vs_oracle,
               s.max_replicas, s.max_replicas / oracle_peak if oracle_peak else None, s.rejected, s.scale_events,
               s.p95_ms)


@dataclass
class ScenarioResult:
    scenario: Scenario
    slo_ms: float
    requests: int
    description: str
    static_replicas: int
    oracle_peak: int
    oracle_meets_slo: bool | None
    rows: list[Row]
    timeline: dict[str, Any] | None = None
    ticks: list[tuple[str, TickRecord]] | None = None  # with SuiteConfig.keep_ticks: (policy, tick) for every tick
    duration_s: float | None = None  # simulated and scored: --duration, or a shorter trace's own span

    def row(self, policy: str) -> Row:
        return next(r for r in self.rows if r.policy == policy)

    def static_policy(self) -> str:
        return next(r.policy for r in self.rows if r.policy.startswith("static:"))

    def dominators(self, policy: str) -> list[str]:
        """Non-oracle policies with at least this policy's attainment at no higher cost."""
        me = self.row(policy)
        return [r.policy for r in self.rows
                if r.policy not in (policy, "oracle")
                and r.window_attainment >= me.window_attainment and r.replica_hours <= me.replica_hours]



@dataclass(frozen=True)
class PolicySummary:
    policy: str
    scenarios: int
    worst_attainment: float
    median_attainment: float
    median_cost_vs_oracle: float | None
    worst_cost_vs_oracle: float | None
    worst_peak_vs_oracle: float | None
    dominated_in: int


def _policy_key(name: str) -> str:
    return "static" if name.startswith("static:") else name


def summarise_policies(results: Sequence[ScenarioResult]) -> list[PolicySummary]:
    order: list[str] = []
    for res in results:
        for r in res.rows:
            k = _policy_key(r.policy)
            if k not in order:
                order.append(k)
    out = []
    for k in order:
        rows = [(res, r) for res in results for r in res.rows if _policy_key(r.policy) == k]
        att = [r.window_attainment for _, r in rows]
        cost = [r.cost_vs_oracle for _, r in rows if r.cost_vs_oracle is not None]
        peak = [r.peak_vs_oracle for _, r in rows if r.peak_vs_oracle is not None]
        dominated = 0 if k == "oracle" else sum(1 for res, r in rows if res.dominators(r.policy))
        out.append(PolicySummary(k, len(rows), min(att), statistics.median(att),
                                 statistics.median(cost) if cost else None, max(cost) if cost else None,
                                 max(peak) if peak else None, dominated))
    return out


@dataclass(frozen=True)
class Verdict:
    scenario: str
    holds: bool
    failures: tuple[str, ...]


def check(res: ScenarioResult, policy: str = OURS) -> Verdict:
    """The suite's acceptance criteria for ``policy`` in one scenario (see the module docstring)."""
    me = res.row(policy)
    fails = []
    dom = res.dominators(policy)
    if dom:
        fails.append(f"dominated by {', '.join(dom)}")
    limit = math.ceil(PEAK_VS_ORACLE * res.oracle_peak)
    if me.max_replicas > limit:
        fails.append(f"peak {me.max_replicas} > ceil({PEAK_VS_ORACLE} x oracle peak {res.oracle_peak}) = {limit}")
    if res.scenario.smooth:
        if me.window_attainment < SMOOTH_ATTAINMENT:
            fails.append(f"windows met {me.window_attainment:.1%} < {SMOOTH_ATTAINMENT:.0%}")
        if me.cost_vs_oracle is not None and me.cost_vs_oracle > SMOOTH_COST_VS_ORACLE:
            fails.append(f"cost {me.cost_vs_oracle:.2f}x oracle > {SMOOTH_COST_VS_ORACLE}x")
    else:
        if me.window_attainment < BURSTY_ATTAINMENT:
            fails.append(f"windows met {me.window_attainment:.1%} < {BURSTY_ATTAINMENT:.0%}")
        static = res.row(res.static_policy())
        if me.replica_hours > static.replica_hours:
            fails.append(f"cost {me.replica_hours:.2f} > static peak fleet {static.replica_hours:.2f} replica-h")
    return Verdict(res.scenario.name, not fails, tuple(fails))


def to_dict(cfg: SuiteConfig, results: Sequence[ScenarioResult], wall_s: float) -> dict[str, Any]:
    verdicts = [check(r) for r in results]
    return {
        "setup": {
            "routing": ROUTING_TEXT[cfg.routing],
            **({"connections": cfg.connections, "connection_age_s": cfg.connection_age_s}
               if cfg.routing == "connection" else {}),
            "queue_timeout": (f"{cfg.queue_timeout_targets:g} x the SLO (Triton default_queue_policy, REJECT)"
                              if cfg.queue_timeout_targets > 0 else "none"),
            "replica": {"base_ms": cfg.batcher.base_ms, "per_item_ms": cfg.batcher.per_item_ms,
                        "max_batch": cfg.batcher.max_batch, "max_queue_delay_ms": cfg.batcher.max_queue_delay_ms,
                        "preferred": list(cfg.batcher.preferred)},
            "duration_s": cfg.duration_s, "peak_replicas": cfg.peak_replicas, "ranges": cfg.ranges,
            "replica_range": [cfg.min_replicas, cfg.max_replicas],
            "scrapes": SCRAPES[cfg.scrape_spread],
            # the trace class's file, so that a re-run (e2e/bench_suite_rerun.py) replays the same one
            "trace": str(Path(cfg.trace_path).resolve()) if cfg.trace_path and "trace" in cfg.classes else None,
            "trace_unit": cfg.trace_unit if cfg.trace_path and "trace" in cfg.classes else None,
            "slo_ms": {lvl: cfg.slo_ms(lvl) for lvl in cfg.slos},
            "tritonscale": "CRD defaults (spec.scaling from the API model)",
            "attainment": "share of 60 s windows with p95 <= SLO; rejected or timed-out requests are misses "
                          "(an infinite latency in their window's p95)",
        },
        "scenarios": [{
            "name": r.scenario.name, "class": r.scenario.cls, "cold_start_s": r.scenario.cold_start_s,
            "slo": r.scenario.slo, "slo_ms": r.slo_ms, "seed": r.scenario.seed, "duration_s": r.duration_s,
            "requests": r.requests, "arrivals": r.description, "static_replicas": r.static_replicas,
            "oracle_peak": r.oracle_peak, "oracle_meets_slo": r.oracle_meets_slo,
            "policies": [{**{k: json_number(v) if isinstance(v, float) else v for k, v in r_.__dict__.items()},
                          "dominated_by": r.dominators(r_.policy) if r_.policy != "oracle" else []}
                         for r_ in r.rows],
            "tritonscale_check": {"holds": v.holds, "failures": list(v.failures)},
        } for r, v in zip(results, verdicts, strict=False)],
        "summary": [s.__dict__ for s in summarise_policies(results)],
        "check": {"scenarios": len(verdicts), "hold": sum(v.holds for v in verdicts),
                  "failing": [{"scenario": v.scenario, "failures": list(v.failures)} for v in verdicts if not v.holds]},
        "wall_time_s": round(wall_s, 1),
    }
