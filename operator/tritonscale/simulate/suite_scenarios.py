"""The suite's scenarios: the matrix of traffic they are drawn from, its configuration, and each
scenario's arrivals (a synthetic class, or the real trace scaled to the scenario's peak).

    traffic class x cold start x SLO (tight, loose) x seed

SLOs are set relative to the model's full-batch time t_B = a + b * maxBatchSize:
``tight`` = 2 t_B (a request may wait for one running batch, then run in its own) and
``loose`` = 6 t_B.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from tritonscale.api.spec import QUEUE_TIMEOUT_TARGETS
from tritonscale.simulate import arrivals as arrivals_mod
from tritonscale.simulate import engine, traffic
from tritonscale.simulate.benchmark import peak_replicas_scale
from tritonscale.simulate.engine import RELOAD_PAUSE_S
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S

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
