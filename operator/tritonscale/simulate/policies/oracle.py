"""The oracle: the cheapest per-minute replica schedule that meets the SLO, planned offline.

It knows every arrival in advance. For each 60 s attainment window w it finds
``need[w]``, the fewest replicas whose p95 for that window's arrivals is within
the target -- by simulating the window on its own (routed as the cluster routes: round-robin,
or at random by the same per-request draws the cluster takes, ``engine.routing_draws``; warm
replicas, 5 s of the previous window's traffic as a lead-in) and stepping the count down
from a capacity guess while it passes, or up until it does.

A pod needed in window w must be created ``cold_start_s`` before w starts, and a
pod that would be idle for less than a cold start is cheaper kept than re-created,
so the provisioned count at time t is max(need[w] for every w with
w_start - C <= t < w_end). With C = 60 s = one window that is
max(need[w], need[w+1]) during window w.

The schedule is then simulated in full, with the real carry-over between windows;
windows that still miss get one more replica, for up to ``rounds`` rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tritonscale.simulate.engine import ClusterConfig, RunResult, View, route, routing_draws, simulate
from tritonscale.simulate.replica import BatcherConfig, Replica
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, quantiles_ms, window_p95_ms

LEAD_IN_S = 5.0  # queues are not empty at a window boundary; 5 s of traffic refills them
VERIFY_ROUNDS = 6


def _isolated_p95_ms(arrivals: np.ndarray, lo: int, start: int, hi: int, n: int, cfg: BatcherConfig,
                     draws: np.ndarray | None = None) -> float:
    """p95 of arrivals[start:hi] on ``n`` warm replicas, arrivals[lo:start] as the lead-in; routed
    round-robin, or by ``draws`` (uniform in [0, 1), one per arrival from ``lo``: random routing)."""
    pods = [Replica(i, 0.0, 0.0, cfg) for i in range(n)]
    for r, part in zip(pods, route(arrivals[lo:hi], n, draws), strict=True):
        r.add(part)
        r.advance(math.inf, math.inf)
        r.sync()
    t0 = arrivals[start]
    lat = np.concatenate([r.latencies()[r.arrivals.view >= t0] for r in pods])
    return float(quantiles_ms(lat, [0.95])[0])


def window_needs(arrivals: np.ndarray, horizon: float, cluster: ClusterConfig, slo_ms: float,
                 capacity_rps: float, window_s: float = ATTAINMENT_WINDOW_S,
                 windows: int | None = None) -> list[int]:
    """Fewest replicas per window (see the module docstring); only the first ``windows`` if given."""
    nw = max(1, math.ceil(horizon / window_s))
    needs = []
    every = routing_draws(cluster, len(arrivals))  # random routing: each count tried routes by the same draws
    for w in range(nw if windows is None else max(1, min(windows, nw))):
        w0, w1 = w * window_s, (w + 1) * window_s
        start, hi = np.searchsorted(arrivals, [w0, w1], side="left")
        if w == nw - 1:
            hi = len(arrivals)
        lo = int(np.searchsorted(arrivals, w0 - LEAD_IN_S, side="left"))
        if hi <= start:
            needs.append(cluster.min_replicas)
            continue
        span = min(w1, horizon) - w0
        guess = max(cluster.min_replicas, min(cluster.max_replicas, math.ceil((hi - start) / span / capacity_rps)))

        draws = None if every is None else every[lo:hi]

        def ok(n: int, lo: int = lo, start: int = start, hi: int = hi, draws: np.ndarray | None = draws) -> bool:
            return _isolated_p95_ms(arrivals, lo, start, hi, n, cluster.batcher, draws) <= slo_ms

        n = guess
        if ok(n):
            while n > cluster.min_replicas and ok(n - 1):
                n -= 1
        else:
            while n < cluster.max_replicas and not ok(n + 1):
                n += 1
            n = min(n + 1, cluster.max_replicas)
        needs.append(n)
    return needs


def provision_schedule(needs: list[int], window_s: float, cold_start_s: float) -> list[tuple[float, int]]:
    """Change points (time, pods) of max(need[w] : w_start - C <= t < w_end)."""
    times = sorted({0.0} | {max(0.0, w * window_s - cold_start_s) for w in range(len(needs))}
                   | {w * window_s for w in range(1, len(needs))})
    out: list[tuple[float, int]] = []
    for t in times:
        n = max(needs[w] for w in range(len(needs)) if w * window_s - cold_start_s <= t < (w + 1) * window_s)
        if not out or out[-1][1] != n:
            out.append((t, n))
    return out


@dataclass
class OraclePolicy:
    schedule: list[tuple[float, int]]
    name: str = "oracle"

    def initial_replicas(self, default: int) -> int:
        return self.schedule[0][1]

    def tick_times(self, horizon: float) -> np.ndarray:
        return np.array([t for t, _ in self.schedule[1:]])

    def step(self, view: View) -> tuple[int, str]:
        n = self.schedule[0][1]
        for t, k in self.schedule:
            if t <= view.now + 1e-9:
                n = k
        return n, "Schedule"


@dataclass
class OracleSolution:
    needs: list[int]
    run: RunResult
    rounds: int
    meets_slo: bool
    window_p95: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))


def solve(arrivals: np.ndarray, horizon: float, cluster: ClusterConfig, slo_ms: float, capacity_rps: float,
          window_s: float = ATTAINMENT_WINDOW_S, rounds: int = VERIFY_ROUNDS,
          needs: list[int] | None = None) -> OracleSolution:
    needs = list(needs) if needs is not None else window_needs(arrivals, horizon, cluster, slo_ms, capacity_rps,
                                                               window_s)
    for k in range(1, rounds + 1):
        run = simulate(arrivals, OraclePolicy(provision_schedule(needs, window_s, cluster.cold_start_s)),
                       cluster, horizon)
        wp = window_p95_ms(run.arrival, run.latency, window_s, run.horizon)
        missed = [w for w in range(min(len(wp), len(needs))) if wp[w] > slo_ms]
        fixable = [w for w in missed if needs[w] < cluster.max_replicas]
        if not fixable or k == rounds:
            return OracleSolution(list(needs), run, k, not missed, wp)
        for w in fixable:
            needs[w] += 1
    raise AssertionError("unreachable: rounds >= 1")
