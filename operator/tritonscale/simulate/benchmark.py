"""One comparison: the same arrivals through every requested policy, scored alike.

Order of work: measure the per-replica capacity at the SLO (``capacity``), plan
the oracle's per-window needs on the arrivals, then run each policy. Every
policy starts with what the oracle provisions at t = 0 warm (``fair_start``: the
largest need of the windows within one cold start; nobody is charged for a cold
start at t = 0 or spends the first cold start under-provisioned) unless
``initial_replicas`` says otherwise. Autoscalers with a scale-down window
(tritonscale, HPA, KEDA) start as if they had been running at that count: their
recommendation history holds it at t = 0, so none of them drops replicas on the
first 15 s of data just because its 300 s window is still empty. Everything else
they learn (tritonscale's capacity estimate, KPA's panic state) starts empty.

Policies are independent, so ``jobs > 1`` runs them in worker processes (fork);
results do not depend on it.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from tritonscale.api.spec import AutoTuneSpec, BatchingSpec, ScaleDownPolicy, ScalingSpec, field_bounds
from tritonscale.scaling import batching_status as bs
from tritonscale.scaling import decider
from tritonscale.simulate.arrivals import rate_profile
from tritonscale.simulate.capacity import Calibration, capacity_at_slo
from tritonscale.simulate.engine import ClusterConfig, RunResult, TickRecord, simulate
from tritonscale.simulate.policies import parse_static, validate_name
from tritonscale.simulate.policies.hpa import HpaPolicy
from tritonscale.simulate.policies.keda import KedaPolicy
from tritonscale.simulate.policies.kpa import KpaPolicy
from tritonscale.simulate.policies.oracle import solve, window_needs
from tritonscale.simulate.policies.periodic import Bounds
from tritonscale.simulate.policies.slo_ratio import SloRatioPolicy
from tritonscale.simulate.policies.static import StaticPolicy
from tritonscale.simulate.policies.triton_queue import TritonQueuePolicy
from tritonscale.simulate.policies.tritonscale import TritonscalePolicy, batcher_settings
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, Summary, summarise, window_p95_ms

WINDOW_S = field_bounds(ScalingSpec, "window_seconds")  # the CRD's windowSeconds range

TIMELINE_STEP_S = 5.0


@dataclass(frozen=True)
class Options:
    slo_ms: float
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    interval_s: float | None = None  # tritonscale tick; None: the CRD default intervalSeconds
    scale_down_stabilization_s: float | None = None  # None: the CRD default scaleDown.stabilizationSeconds
    headroom: float = 0.8  # baselines aim at this share of the measured capacity
    hpa_target: float = 0.7  # HPA GPU duty-cycle target
    initial_replicas: int | None = None  # None: the oracle's first-window need
    static_replicas: int | None = None  # the static policy in "all"; None: the oracle's peak need
    with_oracle: bool = True  # needed for cost_vs_oracle
    jobs: int = 1
    seed: int = 0
    batching_tuner: bool = False  # tritonscale tunes the batcher (spec.batching.autoTune, default bounds)

    def __post_init__(self) -> None:
        if not self.slo_ms > 0:
            raise ValueError("--slo-ms must be > 0")
        if self.interval_s is not None and not self.interval_s > 0:
            raise ValueError("tick interval must be > 0 s")
        if not 0 < self.headroom <= 1:
            raise ValueError("baseline headroom must be in (0, 1]")
        if not 0 < self.hpa_target <= 1:
            raise ValueError("HPA utilisation target must be in (0, 1]")


@dataclass
class Outcome:
    """What is kept of one policy's run: the scores, per-window p95, replicas over time, ticks."""

    summary: Summary
    window_p95_ms: np.ndarray
    timeline_t: np.ndarray
    timeline_alive: np.ndarray
    timeline_ready: np.ndarray
    ticks: list[TickRecord]
    tunings: tuple[tuple[float, str, str], ...] = ()  # the batching tuner's changes: (time, reason, settings)


@dataclass
class Benchmark:
    options: Options
    calibration: Calibration
    needs: list[int]
    policies: list[str]
    outcomes: list[Outcome]
    arrivals: int
    horizon: float
    oracle_meets_slo: bool | None = None
    # The queue delay (ms) the capacity and the oracle's needs were sized at, when not the run's own
    # (``calibrate``: a start the batching tuner must leave)
    sized_at_delay_ms: float | None = None


def outcome(run: RunResult, slo_ms: float) -> Outcome:
    grid = np.arange(0.0, run.horizon, TIMELINE_STEP_S)
    wp = window_p95_ms(run.arrival, run.latency, ATTAINMENT_WINDOW_S, run.horizon)
    return Outcome(summarise(run, slo_ms, window_p95=wp), wp,
                   grid, run.replicas_over_time(grid), run.replicas_over_time(grid, ready_only=True), run.ticks,
                   run.tunings)


def expand(policy: str, needs: Sequence[int], opts: Options) -> list[str]:
    validate_name(policy)
    if policy != "all":
        return [policy]
    static_n = opts.static_replicas or max(needs)
    names = ["tritonscale", "hpa", "keda", "kpa", "triton-queue", "slo-ratio", f"static:{static_n}"]
    return names + (["oracle"] if opts.with_oracle else [])


def scaling_spec(opts: Options) -> ScalingSpec:
    """The InferenceService ``spec.scaling`` the simulated service runs: the CRD defaults
    (from the API model itself), with the replica range and target of the run and any
    tick, rate window or scale-down window the options set."""
    c = opts.cluster
    fields: dict = {"min_replicas": c.min_replicas, "max_replicas": c.max_replicas,
                    "target_p95_milliseconds": opts.slo_ms,
                    # one window for the rate() queries and the decider's level, as in the operator
                    "window_seconds": min(WINDOW_S[1], max(WINDOW_S[0], round(c.prom.window_s)))}
    if opts.interval_s is not None:
        fields["interval_seconds"] = max(1, round(opts.interval_s))
    if opts.scale_down_stabilization_s is not None:
        fields["scale_down"] = ScaleDownPolicy(stabilization_seconds=round(opts.scale_down_stabilization_s))
    return ScalingSpec(**fields)


def build(name: str, opts: Options, cal: Calibration, initial: int):
    c = opts.cluster
    seeded = ((0.0, initial),)  # "has been running at `initial`": fills the scale-down windows
    static_n = parse_static(name)
    if static_n is not None:
        if static_n > c.max_replicas:
            raise ValueError(f"{name}: more than --max-replicas={c.max_replicas}")
        if static_n < c.min_replicas:  # it ran below the floor every other policy is held to
            raise ValueError(f"{name}: fewer than --min-replicas={c.min_replicas}")
        return StaticPolicy(static_n)
    if name == "tritonscale":
        spec = scaling_spec(opts)
        # the decider plans with the batcher settings in force, as the operator's tick does
        pol = bs.with_settings(decider.Policy.from_spec(spec, c.batcher.max_batch), batcher_settings(c.batcher))
        ours = TritonscalePolicy(pol, interval_s=float(spec.interval_seconds), initial=initial,
                                 state=decider.State(recommendations=((0.0, initial, initial),)))
        if opts.batching_tuner:
            # the operator's bounds for a service whose batching has this queue timeout (the simulated
            # replicas reject, as timeout_action REJECT) and autoTune with no bounds of its own
            timeout = c.batcher.queue_timeout_ms
            batching = BatchingSpec(auto_tune=AutoTuneSpec(enabled=True), timeout_action="REJECT",
                                    queue_timeout_microseconds=round(timeout * 1000) if timeout else None)
            ours.batcher, ours.bounds = c.batcher, bs.batching_bounds(c.batcher.max_batch, batching)
            ours.reload_pause_s = c.reload_pause_s if c.batching_apply == "reload" else 0.0  # a rollout: view.rolling
        return ours
    bounds = Bounds(min_replicas=c.min_replicas, max_replicas=c.max_replicas, initial=initial)
    if name == "hpa":
        return HpaPolicy(opts.hpa_target, **bounds, recs=seeded)
    if name == "keda":
        return KedaPolicy(cal.target_rps, **bounds, recs=seeded)
    if name == "kpa":
        return KpaPolicy(cal.concurrency_at_headroom, **bounds)
    if name == "triton-queue":
        return TritonQueuePolicy(cal.queue_ms_at_headroom, **bounds, recs=seeded)
    if name == "slo-ratio":
        return SloRatioPolicy(opts.slo_ms, **bounds, recs=[(0.0, initial)])
    raise ValueError(f"unknown policy {name!r}")


# Worker inputs are set before the pool forks, so 4 M arrivals are not pickled per task.
_SHARED: dict = {}


def _run_one(name: str) -> tuple[Outcome, bool | None]:
    arrivals, horizon, opts, cal, needs = (_SHARED[k] for k in ("arrivals", "horizon", "opts", "cal", "needs"))
    if name == "oracle":  # on the config the needs were sized on (``calibrate``)
        sol = solve(arrivals, horizon, _SHARED.get("sized_on", opts.cluster), opts.slo_ms, cal.capacity_rps,
                    needs=needs)
        out = outcome(sol.run, opts.slo_ms)
        out.summary = replace(out.summary, policy="oracle")
        return out, sol.meets_slo
    initial = opts.initial_replicas or fair_start(needs, opts)
    run = simulate(arrivals, build(name, opts, cal, initial), opts.cluster, horizon)
    return outcome(run, opts.slo_ms), None


def start_windows(opts: Options) -> int:
    """How many windows' needs ``fair_start`` reads: those that start within one cold start."""
    if opts.cluster.cold_start_s <= 0:
        return 1
    return max(1, math.ceil(opts.cluster.cold_start_s / ATTAINMENT_WINDOW_S)) + 1


def fair_start(needs: Sequence[int], opts: Options) -> int:
    """Replicas every policy starts with, warm: what the oracle provisions at t = 0 -- the largest
    need of the windows that start within one cold start -- so that nobody is charged for a cold
    start at t = 0 or spends the first cold start under-provisioned for want of history.
    ``needs`` must reach ``start_windows`` windows (or the whole run)."""
    return max(needs[: start_windows(opts)])


def calibrate(opts: Options) -> tuple[Calibration, ClusterConfig]:
    """What a replica serves at the SLO, for the baselines' targets and the oracle, and the cluster the
    oracle's needs are sized on. With the batching tuner a start too poor to meet the SLO at all (a
    queue delay as long as the target) is what the tuner is for: both are then of the config it can
    reach at once, no delay and the same sizes (the suite sizes them on the reference config)."""
    try:
        return capacity_at_slo(opts.cluster.batcher, opts.slo_ms, opts.headroom, opts.seed), opts.cluster
    except ValueError:
        if not opts.batching_tuner or opts.cluster.batcher.max_queue_delay_ms == 0:
            raise
        greedy = replace(opts.cluster, batcher=replace(opts.cluster.batcher, max_queue_delay_ms=0.0))
        return capacity_at_slo(greedy.batcher, opts.slo_ms, opts.headroom, opts.seed), greedy


def run_benchmark(arrivals: np.ndarray, horizon: float, policy: str, opts: Options,
                  calibration: Calibration | None = None) -> Benchmark:
    if len(arrivals) == 0:
        raise ValueError("no arrivals to simulate")
    validate_name(policy)
    cal, sized_on = calibrate(opts) if calibration is None else (calibration, opts.cluster)
    oracle_wanted = opts.with_oracle or policy == "oracle"
    peak_static = policy == "all" and opts.static_replicas is None
    needs = window_needs(arrivals, horizon, sized_on, opts.slo_ms, cal.capacity_rps,
                         windows=None if oracle_wanted or peak_static else start_windows(opts))
    names = expand(policy, needs, opts)
    if opts.with_oracle and "oracle" not in names:
        names_to_run = names + ["oracle"]
    else:
        names_to_run = list(names)
    for n in names_to_run:
        if n != "oracle":
            build(n, opts, cal, 1)  # validate before spending minutes
    _SHARED.update(arrivals=arrivals, horizon=horizon, opts=opts, cal=cal, needs=needs, sized_on=sized_on)
    jobs = max(1, min(opts.jobs, len(names_to_run)))
    order = sorted(names_to_run, key=lambda n: n != "oracle")  # the longest first
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            results = dict(zip(order, pool.map(_run_one, order), strict=False))
    else:
        results = {n: _run_one(n) for n in order}
    _SHARED.clear()
    oracle_hours = results["oracle"][0].summary.replica_hours if "oracle" in results else None
    outcomes = []
    for n in names:
        out = results[n][0]
        if oracle_hours:
            out.summary = replace(out.summary, cost_vs_oracle=out.summary.replica_hours / oracle_hours)
        outcomes.append(out)
    meets = results["oracle"][1] if "oracle" in results else None
    sized_at = None if sized_on == opts.cluster else sized_on.batcher.max_queue_delay_ms
    return Benchmark(opts, cal, needs, names, outcomes, len(arrivals), horizon, meets, sized_at)


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def peak_replicas_scale(arrivals: np.ndarray, capacity_rps: float, replicas: float, bin_s: float = 60.0) -> float:
    """Rate scale that makes the busiest ``bin_s`` slice need ``replicas`` at ``capacity_rps`` each. The
    slices are ``rate_profile``'s, the last one as wide as the trace leaves it, as ``rate_scale`` draws
    them: counting it over a whole ``bin_s`` understated its rate (a trace of arrivals at 0 and 300 s in
    one 7,500 s slice was scaled x8,007,201 and its oracle needed 20 replicas, not 8)."""
    peak = float(rate_profile(arrivals, bin_s, float(arrivals[-1])).max())
    return replicas * capacity_rps / peak
