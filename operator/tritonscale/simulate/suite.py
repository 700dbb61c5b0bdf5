"""The scenario suite: every policy on the same arrivals, over a matrix of traffic.

    traffic class x cold start x SLO (tight, loose) x seed

Each scenario is scaled so that a static fleet just meets the SLO at its peak: the
busiest minute needs ``peak_replicas`` replicas of the measured per-replica capacity,
and the static policy runs the oracle's largest per-minute need. Every policy --
tritonscale at the CRD defaults, the HPA, KEDA, Knative's KPA, Triton's queue-time HPA,
llm-d's SLO-ratio law, the static peak fleet and the oracle -- sees the same arrivals.

The scenarios, their matrix and arrivals are in ``suite_scenarios``; the scores, the acceptance
check and the JSON in ``suite_scoring``; this module runs them. Their names are re-exported here,
where the benchmarks and tests import them.

Scenarios are independent, so they run in worker processes (fork); results do not
depend on ``jobs``.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from functools import lru_cache
from typing import Any

from tritonscale.api.spec import default_queue_timeout_us
from tritonscale.simulate.benchmark import Options, run_benchmark
from tritonscale.simulate.capacity import Calibration, capacity_at_slo
from tritonscale.simulate.engine import ClusterConfig
from tritonscale.simulate.metrics_view import PromConfig
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.suite_scenarios import DEFAULT_TRACE as DEFAULT_TRACE
from tritonscale.simulate.suite_scenarios import QUICK_COLD_STARTS as QUICK_COLD_STARTS
from tritonscale.simulate.suite_scenarios import QUICK_SEEDS as QUICK_SEEDS
from tritonscale.simulate.suite_scenarios import QUICK_SLOS as QUICK_SLOS
from tritonscale.simulate.suite_scenarios import ROUTING as ROUTING
from tritonscale.simulate.suite_scenarios import ROUTING_TEXT as ROUTING_TEXT
from tritonscale.simulate.suite_scenarios import SCRAPES as SCRAPES
from tritonscale.simulate.suite_scenarios import Scenario as Scenario
from tritonscale.simulate.suite_scenarios import SuiteConfig as SuiteConfig
from tritonscale.simulate.suite_scenarios import benchmark_trace as benchmark_trace
from tritonscale.simulate.suite_scenarios import checked_trace, scenario_arrivals
from tritonscale.simulate.suite_scoring import OURS as OURS
from tritonscale.simulate.suite_scoring import Row as Row
from tritonscale.simulate.suite_scoring import ScenarioResult as ScenarioResult
from tritonscale.simulate.suite_scoring import Verdict as Verdict
from tritonscale.simulate.suite_scoring import check as check
from tritonscale.simulate.suite_scoring import row_of
from tritonscale.simulate.suite_scoring import to_dict as to_dict


@lru_cache(maxsize=16)
def _calibration(batcher: BatcherConfig, slo_ms: float) -> Calibration:
    return capacity_at_slo(batcher, slo_ms)


def _cluster(cfg: SuiteConfig, sc: Scenario) -> ClusterConfig:
    batcher = cfg.batcher
    if cfg.queue_timeout_targets > 0:
        timeout_us = default_queue_timeout_us(cfg.slo_ms(sc.slo), batcher.max_queue_delay_ms * 1000.0,
                                              cfg.queue_timeout_targets)  # the operator's default
        batcher = replace(batcher, queue_timeout_ms=timeout_us / 1000.0)
    return ClusterConfig(batcher, sc.cold_start_s, cfg.min_replicas, cfg.max_replicas,
                         prom=PromConfig(spread=cfg.scrape_spread), reload_pause_s=cfg.reload_pause_s,
                         batching_apply=cfg.batching_apply, routing=cfg.routing, routing_seed=sc.seed,
                         connections=cfg.connections, connection_age_s=cfg.connection_age_s)


def run_scenario(sc: Scenario, cfg: SuiteConfig, keep_timeline: bool = False) -> ScenarioResult:
    slo_ms = cfg.slo_ms(sc.slo)
    cal = _calibration(cfg.batcher, slo_ms)
    arr, horizon, what = scenario_arrivals(sc, cfg, cal.capacity_rps)
    opts = Options(slo_ms, _cluster(cfg, sc), seed=sc.seed)
    bench = run_benchmark(arr, horizon, "all", opts, calibration=cal)
    oracle = next(o.summary for o in bench.outcomes if o.summary.policy == "oracle")
    rows = [row_of(o.summary, o.summary.cost_vs_oracle, oracle.max_replicas) for o in bench.outcomes]
    static = next(r.policy for r in rows if r.policy.startswith("static:"))
    timeline = None
    if keep_timeline:
        timeline = {o.summary.policy: {"t": o.timeline_t.tolist(), "alive": o.timeline_alive.tolist(),
                                       "window_p95_ms": o.window_p95_ms.tolist()} for o in bench.outcomes}
    ticks = [(o.summary.policy, r) for o in bench.outcomes for r in o.ticks] if cfg.keep_ticks else None
    return ScenarioResult(sc, slo_ms, bench.arrivals, what, int(static.split(":")[1]), oracle.max_replicas,
                          bench.oracle_meets_slo, rows, timeline, ticks, duration_s=horizon)


_WORK: dict[str, Any] = {}


def _call(item: Any) -> Any:
    return _WORK["fn"](item, _WORK["cfg"])


# Told (done, total) as each item of a fork_map finishes: the suites take minutes.
Progress = Callable[[int, int], None]


def fork_map(fn: Callable[[Any, SuiteConfig], Any], items: Sequence[Any], cfg: SuiteConfig, jobs: int,
             order: Sequence[int] | None = None, progress: Progress | None = None) -> list[Any]:
    """``fn(item, cfg)`` for each item, in worker processes (fork) when ``jobs`` > 1, results in the
    items' order. ``fn`` and ``cfg`` are inherited by the workers, not pickled; ``order``: the
    indexes in the order to start them (the largest first); ``progress``: called with (items done,
    items) as each finishes."""
    tell = progress or (lambda done, total: None)
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for item in items:
            out.append(fn(item, cfg))
            tell(len(out), len(items))
        return out
    idx = list(order) if order is not None else list(range(len(items)))
    _WORK.update(fn=fn, cfg=cfg)
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_call, items[i]): i for i in idx}
            done: dict[int, Any] = {}
            try:
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    tell(len(done), len(items))
            except BaseException:  # a failed item (or ^C): the rest would only be waited for
                pool.shutdown(wait=False, cancel_futures=True)
                # The running ones too: a SIGTERM reaches only this process, and the pool's exit waits for
                # them. Killed: they inherit the SIGTERM handler (cli.main), and a KeyboardInterrupt in a
                # pool worker is only its item's result -- it goes on to the next one.
                for worker in multiprocessing.active_children():
                    worker.kill()
                raise
    finally:
        _WORK.clear()
    return [done[i] for i in range(len(items))]


def prepare(cfg: SuiteConfig, todo: Sequence[Scenario]) -> None:
    """Before any scenario runs (and before workers fork, so they inherit both): fail early on a
    missing or bad trace file, and compute each SLO level's calibration once."""
    if any(s.cls == "trace" for s in todo):
        if not cfg.trace_path:
            raise ValueError("the trace class needs a trace file: pass --trace FILE or leave out the class")
        checked_trace(cfg.trace_path, cfg.trace_unit, cfg.duration_s)  # its first --duration s too sparse
    for level in {s.slo for s in todo}:
        _calibration(cfg.batcher, cfg.slo_ms(level))


def run_suite(cfg: SuiteConfig, scenarios: Sequence[Scenario] | None = None,
              progress: Progress | None = None) -> list[ScenarioResult]:
    todo = list(scenarios if scenarios is not None else cfg.scenarios())
    prepare(cfg, todo)
    # the trace class is the largest: start it first
    order = sorted(range(len(todo)), key=lambda i: todo[i].cls != "trace")
    return fork_map(run_scenario, todo, cfg, cfg.jobs, order, progress)
