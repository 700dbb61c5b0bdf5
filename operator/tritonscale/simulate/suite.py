"""The scenario suite: every policy on the same arrivals, over a matrix of traffic.

    traffic class x cold start x SLO (tight, loose) x seed

Each scenario is scaled so that a static fleet just meets the SLO at its peak: the
busiest minute needs ``peak_replicas`` replicas of the measured per-replica capacity,
and the static policy runs the oracle's largest per-minute need. Every policy --
tritonscale at the CRD defaults, the HPA, KEDA, Knative's KPA, Triton's queue-time HPA,
llm-d's SLO-ratio law, the static peak fleet and the oracle -- sees the same arrivals.

SLOs are set relative to the model's full-batch time t_B = a + b * maxBatchSize:
``tight`` = 2 t_B (a request may wait for one running batch, then run in its own) and
``loose`` = 6 t_B.

Scores per policy and scenario: window attainment (share of 60 s windows whose p95
is within the target; a rejected or timed-out request is a miss), replica-hours, cost
relative to the oracle, peak replicas relative to the oracle's peak. A policy is
*dominated* in a scenario when another (non-oracle) policy has at least its window
attainment at no higher cost.

Scenarios are independent, so they run in worker processes (fork); results do not
depend on ``jobs``.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tritonscale.api.spec import QUEUE_TIMEOUT_TARGETS, default_queue_timeout_us
from tritonscale.simulate import arrivals as arrivals_mod
from tritonscale.simulate import engine, traffic
from tritonscale.simulate.benchmark import Options, peak_replicas_scale, run_benchmark
from tritonscale.simulate.capacity import Calibration, capacity_at_slo
from tritonscale.simulate.engine import RELOAD_PAUSE_S, ClusterConfig, TickRecord
from tritonscale.simulate.metrics_view import PromConfig
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, Summary, json_number

# How requests reach the ready pods (``SuiteConfig.routing``, one of ``engine.ROUTINGS``), as the
# JSON's setup states it
ROUTING_TEXT = {
    "round-robin": ("round-robin over ready pods in the order they became ready (kube-proxy IPVS rr); "
                    "queues are not rebalanced, a new pod gets only new requests"),
    "random": ("each request to a ready pod drawn at random (kube-proxy iptables mode, per request: each pod "
               "sees Poisson arrivals); queues are not rebalanced, a new pod gets only new requests"),
    "connection": ("each request on one of `connections` client connections (gRPC: kube-proxy balances "
                   "connections), each to a ready pod drawn at random when it opens; Triton closes a connection at "
                   "`connection_age_s` (--grpc-max-connection-age, +-10% jitter; 0: never) or when its pod goes, "
                   "and the client's next request opens another; a new pod gets only new connections"),
}
ROUTING = ROUTING_TEXT["round-robin"]  # the default
# How Prometheus scrapes the pods (``SuiteConfig.scrape_spread``), as the JSON's setup states it
SCRAPES = {True: "every 15 s, each pod at its own offset (a hash of the pod, as Prometheus hashes targets)",
           False: "every 15 s, every pod at the ticks' instants (the best case)"}
SLO_FACTORS = {"tight": 2.0, "loose": 6.0}  # x the full-batch time
COLD_STARTS = (15.0, 60.0, 180.0)
DEFAULT_TRACE = "../shared/data/azure-llm-conv-2023.csv"  # relative to the repo root
TRACE_BIN_S = 10.0
# ... and at least this many of the trace's arrivals per slice on average: the Poisson draw multiplies
# each slice's count, and with it the count's own sampling noise (1/sqrt(n): 14% at the shared trace's
# 55 per 10 s). A 1 rps trace's 10 per slice read as bursts of 1.6x its busiest minute, which the scale
# then multiplied 1562-fold: 12 replicas at the peak where the scenario asks 8.
MIN_SLICE_ARRIVALS = 50


def trace_slice_s(raw: np.ndarray) -> float:
    """The slice the trace class's rate is taken over: TRACE_BIN_S, longer for a trace with fewer than
    MIN_SLICE_ARRIVALS arrivals per slice (the shared trace keeps 10 s)."""
    mean_rate = len(raw) / max(float(raw[-1]), 1e-9)
    return max(TRACE_BIN_S, MIN_SLICE_ARRIVALS / mean_rate)
# A trace shorter than a few windows scores nothing meaningful (one window is all or nothing).
MIN_TRACE_S = 5 * ATTAINMENT_WINDOW_S
OURS = "tritonscale"
# Done-when thresholds of the suite (issue 9), per class group
SMOOTH_ATTAINMENT, SMOOTH_COST_VS_ORACLE = 0.99, 1.3
BURSTY_ATTAINMENT = 0.90
PEAK_VS_ORACLE = 1.25


@dataclass(frozen=True)
class Scenario:
    cls: str
    cold_start_s: float
    slo: str  # "tight" | "loose"
    seed: int

    @property
    def name(self) -> str:
        return f"{self.cls}/cold{self.cold_start_s:g}s/{self.slo}/seed{self.seed}"

    @classmethod
    def from_name(cls, name: str) -> Scenario:
        """The scenario ``name`` names (``class/coldNs/slo/seedK``); ValueError for anything else."""
        kind, cold, slo, seed = name.split("/")
        return cls(kind, float(cold.removeprefix("cold").removesuffix("s")), slo, int(seed.removeprefix("seed")))

    @property
    def smooth(self) -> bool:
        return self.cls in traffic.SMOOTH


@dataclass(frozen=True)
class SuiteConfig:
    classes: tuple[str, ...] = traffic.CLASSES
    cold_starts: tuple[float, ...] = COLD_STARTS
    slos: tuple[str, ...] = ("tight", "loose")
    seeds: tuple[int, ...] = (0, 1, 2)
    duration_s: float = 3600.0
    peak_replicas: int = 8
    min_replicas: int = 1
    max_replicas: int = 20
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    trace_path: str | None = None  # the real trace for the "trace" class
    trace_unit: str | None = None  # what one of its plain numbers is (--trace-unit); None: the form's default
    jobs: int = 1
    # Triton queue timeout as a multiple of the scenario's SLO; the default is what the operator
    # renders when batching.queueTimeoutMicroseconds is unset; 0: no timeout
    queue_timeout_targets: float = QUEUE_TIMEOUT_TARGETS
    reload_pause_s: float = RELOAD_PAUSE_S  # a batcher change pauses each replica (--batching-apply reload)
    batching_apply: str = "rollout"  # how a tuned batcher reaches the replicas (--batching-tuner)
    # Prometheus scrapes each pod at its own offset (False: every pod at the ticks' instants, the
    # best case every result before 2026-11-24 session 26 was measured on)
    scrape_spread: bool = True
    keep_ticks: bool = False  # keep every policy's ticks (--decisions): output only, no score changes
    ranges: str = "suite"  # the synthetic classes' parameter ranges (traffic.RANGES; --ranges)
    routing: str = "round-robin"  # how requests reach the ready pods (ROUTING_TEXT; --routing)
    connections: int = engine.CONNECTIONS  # routing="connection": the clients (--connections)
    connection_age_s: float = engine.CONNECTION_AGE_S  # routing="connection": Triton's age (--connection-age)

    def __post_init__(self) -> None:
        if self.routing not in ROUTING_TEXT:
            raise ValueError(f"unknown routing {self.routing!r} (one of {', '.join(ROUTING_TEXT)})")
        bad = [c for c in self.classes if c not in traffic.CLASSES]
        if bad:
            raise ValueError(f"unknown traffic class(es) {', '.join(bad)} (one of {', '.join(traffic.CLASSES)})")
        traffic.ranges_named(self.ranges)  # a ValueError naming the choices
        bad = [s for s in self.slos if s not in SLO_FACTORS]
        if bad:
            raise ValueError(f"unknown SLO level(s) {', '.join(bad)} (tight or loose)")
        if any(c < 0 for c in self.cold_starts):
            raise ValueError("cold starts must be >= 0 s")
        if not 1 <= self.min_replicas <= self.peak_replicas <= self.max_replicas:
            raise ValueError("need 1 <= min replicas <= peak replicas <= max replicas")
        if self.duration_s < 600:
            raise ValueError("suite scenarios need at least 600 s")
        if not self.classes or not self.cold_starts or not self.slos or not self.seeds:
            raise ValueError("the suite matrix is empty")

    def slo_ms(self, level: str) -> float:
        return SLO_FACTORS[level] * self.batcher.service_s(self.batcher.max_batch) * 1000.0

    def scenarios(self) -> list[Scenario]:
        return [Scenario(c, cs, s, seed) for c in self.classes for cs in self.cold_starts
                for s in self.slos for seed in self.seeds]


# The quick subset CI runs: one scenario per traffic class.
QUICK_COLD_STARTS, QUICK_SLOS, QUICK_SEEDS = (60.0,), ("tight",), (0,)


@lru_cache(maxsize=16)
def _calibration(batcher: BatcherConfig, slo_ms: float) -> Calibration:
    return capacity_at_slo(batcher, slo_ms)


@lru_cache(maxsize=2)
def _trace(path: str, unit: str | None = None) -> np.ndarray:
    return arrivals_mod.load_trace(path, unit)


def checked_trace(path: str, unit: str | None = None, duration_s: float | None = None) -> np.ndarray:
    """The trace class's arrivals -- its first ``duration_s`` when given -- refused (ValueError) when
    too short to score or too sparse to scale."""
    raw = _trace(path, unit)
    if raw[-1] < MIN_TRACE_S:
        raise ValueError(f"{path}: its arrivals span {raw[-1]:.1f} s; the suite scores "
                         f"{ATTAINMENT_WINDOW_S:g} s windows and needs a trace of at least {MIN_TRACE_S:g} s")
    if duration_s is None:
        return raw
    if raw[-1] > duration_s:  # a day-long trace would take a day's simulation per policy
        raw = raw[raw <= duration_s]
        if len(raw) < 2 or raw[-1] < MIN_TRACE_S:
            raise ValueError(f"{path}: its first {duration_s:g} s (--duration) hold {len(raw)} "
                             f"arrival(s) over {raw[-1] if len(raw) else 0:.0f} s; the suite needs "
                             f"{MIN_TRACE_S:g} s of them")
    slice_s = trace_slice_s(raw)
    if slice_s >= float(raw[-1]):  # one slice: drawn at one flat rate, none of the trace's swings left
        raise ValueError(f"{path}: {len(raw)} arrivals over {raw[-1]:.0f} s are too sparse to scale: the suite "
                         f"takes a trace's rate per slice of at least {MIN_SLICE_ARRIVALS} arrivals (here "
                         f"{slice_s:.0f} s), so all of it would be one slice, replayed as a flat rate")
    return raw


def benchmark_trace(classes: tuple[str, ...], given: Path | None,
                    repo: Path) -> tuple[str | None, tuple[str, ...]]:
    """The trace the trace class replays and the classes left to run, as the e2e benchmarks take
    them: ``given`` (their --trace) or ``DEFAULT_TRACE`` beside ``repo``. A given file that is missing,
    too short or too sparse is a ValueError; the default one missing -- a checkout without ../shared
    beside it -- leaves the trace class out (the caller says so: the trace comes back None)."""
    if "trace" not in classes:
        return None, classes
    path = given if given is not None else repo / DEFAULT_TRACE
    if not path.exists():
        if given is not None:
            raise ValueError(f"--trace {given}: no such file")
        return None, tuple(c for c in classes if c != "trace")
    checked_trace(str(path), duration_s=SuiteConfig.duration_s)  # the benches replay the default duration
    return str(path), classes


def scenario_arrivals(sc: Scenario, cfg: SuiteConfig, capacity_rps: float) -> tuple[np.ndarray, float, str]:
    """(arrivals, horizon, description) with the busiest minute at ``peak_replicas`` x capacity."""
    if sc.cls == "trace":
        if not cfg.trace_path:
            raise ValueError("the trace class needs a trace file (--trace)")
        raw = checked_trace(cfg.trace_path, cfg.trace_unit, cfg.duration_s)
        slice_s = trace_slice_s(raw)
        # the peak over the slices the draw takes (longer than a minute for a sparse trace), so that the
        # busiest one is drawn at peak_replicas x capacity
        scale = peak_replicas_scale(raw, capacity_rps, cfg.peak_replicas, bin_s=max(60.0, slice_s))
        t = arrivals_mod.rate_scale(raw, scale, slice_s, sc.seed)
        return t, float(raw[-1]), f"{Path(cfg.trace_path).name} x{scale:.0f}" if scale >= 10 else \
            f"{Path(cfg.trace_path).name} x{scale:.2g}"
    rel = traffic.profile(sc.cls, sc.seed, cfg.duration_s, cfg.ranges)
    t = traffic.arrivals_from_profile(rel, cfg.peak_replicas * capacity_rps, sc.seed, cfg.duration_s)
    return t, cfg.duration_s, f"{sc.cls} (seed {sc.seed})"


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


# -- scoring across scenarios ------------------------------------------------------------------
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

