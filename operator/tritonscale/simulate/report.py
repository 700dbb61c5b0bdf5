"""Scoring runs: latency percentiles, SLO attainment, replica-hours; table, JSON and plot.

SLO attainment, two ways:

* window attainment: the share of 60 s windows (by arrival time, aligned to t = 0,
  windows without requests skipped) whose p95 latency is within the target;
* request attainment: the share of requests within the target.

Replica-hours count every pod from creation (a starting pod holds its GPU) to its
removal or the end of its drain, within [0, horizon]. ``cost_vs_oracle`` divides by
the oracle's replica-hours on the same arrivals.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tritonscale.simulate.engine import RunResult

ATTAINMENT_WINDOW_S = 60.0


# A rejected request's latency is inf. np.quantile interpolates inf - inf to NaN, so
# quantiles are taken over this finite stand-in and mapped back to inf.
_REJECTED_S = 1e12


def _stand_in(latency_s: np.ndarray) -> np.ndarray:
    """Latencies with each inf (rejected) replaced by the finite stand-in ``_REJECTED_S``."""
    return np.where(np.isinf(latency_s), _REJECTED_S, latency_s)


# Quantiles at or above this (s) are of the stand-in: np.quantile interpolates between the two order
# statistics around q x (n - 1), and when the upper one is a rejection its weight is the fraction of
# q x (n - 1) -- a multiple of 0.001 for any quantile of up to three decimals (0.95: of 0.05) -- so
# the quantile is at least 1e-3 x the stand-in (1e9 s, 31 years) where no latency of a replay (at
# most MAX_REPLAY_SPAN_S, 30 days) can be. Half the stand-in let a p95 of 4e14 ms through as a number.
_STAND_IN_FROM_S = _REJECTED_S * 1e-3


def _ms_or_inf(quantile_s: np.ndarray) -> np.ndarray:
    """Quantiles of stand-in latencies, in ms: those the stand-in entered back to inf."""
    return np.where(quantile_s >= _STAND_IN_FROM_S, np.inf, quantile_s * 1000.0)


def quantiles_ms(latency_s: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Quantiles in ms of latencies in seconds, where inf (rejected) stays inf."""
    return _ms_or_inf(np.quantile(_stand_in(latency_s), qs))


def window_p95_ms(arrival: np.ndarray, latency: np.ndarray, window_s: float, horizon: float) -> np.ndarray:
    """p95 latency (ms) of the requests arriving in each window; NaN for empty windows.
    Rejected requests (latency inf) count: a window where over 5% were rejected reads inf.
    (``quantiles_ms`` per window, with the stand-in for inf substituted once for all of them.)"""
    nw = max(1, math.ceil(horizon / window_s)) if horizon > 0 else 1
    # arrival is sorted: each window's requests are a slice, bounded where arrival // window_s steps
    edges = np.arange(1, nw) * window_s
    bounds = np.concatenate(([0], np.searchsorted(arrival, edges, side="left"), [len(arrival)]))
    lat = _stand_in(latency)
    out = np.full(nw, np.nan)
    for w in range(nw):
        lo, hi = bounds[w], bounds[w + 1]
        if hi > lo:
            out[w] = np.quantile(lat[lo:hi], 0.95)
    return _ms_or_inf(out)


@dataclass(frozen=True)
class Summary:
    policy: str
    requests: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    window_attainment: float  # 0..1; a rejected request is a miss
    request_attainment: float  # 0..1
    windows: int
    windows_missed: int
    replica_hours: float
    cost_vs_oracle: float | None
    mean_replicas: float
    max_replicas: int
    scale_events: int
    cold_starts: int
    rejected: int = 0  # requests the queue policy rejected (each counted as a miss)

    def to_dict(self) -> dict:
        return {k: json_number(round(v, 4)) if isinstance(v, float) else v for k, v in asdict(self).items()}


def json_number(v: float) -> float | str | None:
    """``v`` as the JSON outputs write it: JSON has no Infinity or NaN, and a strict parser refuses the
    whole file for one (KPA's p95 is infinite in most scenarios): "inf" and null."""
    return None if math.isnan(v) else str(v) if math.isinf(v) else v


def summarise(run: RunResult, slo_ms: float, oracle_hours: float | None = None,
              window_s: float = ATTAINMENT_WINDOW_S, window_p95: np.ndarray | None = None) -> Summary:
    """``window_p95``: ``window_p95_ms`` of the run over ``window_s``, if the caller has it."""
    lat_ms = run.latency * 1000.0
    n = len(lat_ms)
    pct = quantiles_ms(run.latency, [0.5, 0.95, 0.99]) if n else np.full(3, np.nan)
    wp = window_p95_ms(run.arrival, run.latency, window_s, run.horizon) if window_p95 is None else window_p95
    valid = ~np.isnan(wp)
    ok = int(np.sum(wp[valid] <= slo_ms))
    hours = run.replica_seconds() / 3600.0
    grid = np.arange(0.0, run.horizon, 1.0)
    alive = run.replicas_over_time(grid) if len(grid) else np.zeros(1, dtype=int)
    return Summary(
        policy=run.policy,
        requests=n,
        p50_ms=float(pct[0]), p95_ms=float(pct[1]), p99_ms=float(pct[2]),
        window_attainment=ok / int(valid.sum()) if valid.any() else 1.0,
        request_attainment=float(np.mean(lat_ms <= slo_ms)) if n else 1.0,
        windows=int(valid.sum()),
        windows_missed=int(valid.sum()) - ok,
        replica_hours=hours,
        cost_vs_oracle=(hours / oracle_hours) if oracle_hours else None,
        mean_replicas=float(alive.mean()),
        max_replicas=int(alive.max()),
        scale_events=run.scale_events,
        cold_starts=run.cold_starts,
        rejected=int(np.isinf(run.latency).sum()),
    )


def table(rows: Sequence[Summary], slo_ms: float) -> str:
    head = ["policy", "requests", "p50 ms", "p95 ms", "p99 ms", f"win p95<={slo_ms:g}", f"req<={slo_ms:g}",
            "replica-h", "x oracle", "mean rep", "max rep", "scale ev", "cold st", "rejected"]
    body = []
    for s in rows:
        body.append([
            s.policy, f"{s.requests:,}", f"{s.p50_ms:.0f}", f"{s.p95_ms:.0f}", f"{s.p99_ms:.0f}",
            f"{s.window_attainment:.1%} ({s.windows - s.windows_missed}/{s.windows})",
            f"{s.request_attainment:.2%}", f"{s.replica_hours:.2f}",
            "-" if s.cost_vs_oracle is None else f"{s.cost_vs_oracle:.2f}",
            f"{s.mean_replicas:.1f}", str(s.max_replicas), str(s.scale_events), str(s.cold_starts),
            f"{s.rejected:,}",
        ])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=False))) + " |"

    sep = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in body)])


def to_json(rows: Sequence[Summary], as_list: bool, extra: dict[str, dict] | None = None) -> str:
    """The rows as JSON; ``extra``: more fields per policy (e.g. the tuner's batcher changes)."""
    data = [{**r.to_dict(), **(extra or {}).get(r.policy, {})} for r in rows]
    return json.dumps(data if as_list else data[0], indent=2)


def plot(arrivals: np.ndarray, horizon: float, outcomes: Sequence, slo_ms: float, path: str | Path,
         window_s: float = ATTAINMENT_WINDOW_S) -> None:
    """Load, per-window p95 against the target, and replicas over time, for every policy.

    ``outcomes``: ``benchmark.Outcome`` objects (summary, window_p95_ms, timeline_*).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_load, ax_p95, ax_rep) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    bin_s = 10.0
    nb = max(1, math.ceil(horizon / bin_s))
    counts = np.bincount(np.minimum((arrivals // bin_s).astype(int), nb - 1), minlength=nb)
    ax_load.step(np.arange(nb) * bin_s / 60, counts / bin_s, where="post", color="k", lw=0.8)
    ax_load.set_ylabel("load (rps per 10 s)")
    finite = [v for o in outcomes for v in np.asarray(o.window_p95_ms, dtype=float) if np.isfinite(v)]
    ceiling = max(finite + [slo_ms]) * 2.0  # where a window whose p95 is a rejection (inf) is drawn
    any_lost = False
    for o in outcomes:
        wp = np.asarray(o.window_p95_ms, dtype=float)
        mins = (np.arange(len(wp)) + 0.5) * window_s / 60
        lost = np.isinf(wp)
        line, = ax_p95.plot(mins, np.where(lost, ceiling, wp), marker=".", lw=1, label=o.summary.policy)
        if lost.any():  # matplotlib leaves inf out: a missed window would vanish from the plot
            ax_p95.plot(mins[lost], np.full(lost.sum(), ceiling), ls="none", marker="^", color=line.get_color())
            any_lost = True
    ax_p95.axhline(slo_ms, color="r", ls="--", lw=1, label=f"target {slo_ms:g} ms")
    if any_lost:
        ax_p95.annotate("^ p95 a rejection (queue timeout)", (0.01, 0.92), xycoords="axes fraction", fontsize=7)
    for o in outcomes:
        ax_rep.step(o.timeline_t / 60, o.timeline_alive, where="post", lw=1, label=o.summary.policy)
    ax_p95.set_yscale("log")
    ax_p95.set_ylabel(f"p95 per {window_s:g} s window (ms)")
    ax_p95.legend(fontsize=7, ncol=4)
    ax_rep.set_ylabel("replicas (incl. starting)")
    ax_rep.set_xlabel("minutes")
    ax_rep.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
