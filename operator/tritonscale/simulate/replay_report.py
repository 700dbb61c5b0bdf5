"""The text of one replay's report in ``tritonscale simulate``: what was replayed and how (the
arrivals, the replica model, the metrics, the baselines' sizing), the batching tuner's changes, and the
decisions file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tritonscale.simulate import suite_command
from tritonscale.simulate.benchmark import Benchmark, Outcome, fair_start, scaling_spec


def figure(x: float) -> str:
    """A rate or span for a summary line: whole numbers from 100 up, else 3 significant figures (0.0049
    rps was printed as 0 rps and a 0.3 s span as 0 s)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def describe(b: Benchmark, what: str, arrivals: np.ndarray) -> str:
    o, cal, c = b.options, b.calibration, b.options.cluster
    bt = c.batcher
    peak = np.bincount((arrivals // 60).astype(int)).max() / 60.0
    # a run shorter than a minute has no whole minute: its count over 60 s read as a "busiest minute"
    busiest = f", busiest minute {figure(peak)} rps" if b.horizon >= 60 else ""
    lines = [
        f"arrivals: {what}: {b.arrivals:,} requests over {figure(b.horizon)} s "
        f"(mean {figure(b.arrivals / b.horizon)} rps{busiest})",
        f"replica: {bt.base_ms:g} ms + {bt.per_item_ms:g} ms/item, max batch {bt.max_batch}, queue delay "
        f"{bt.max_queue_delay_ms * 1000:g} us, preferred {list(bt.preferred)}, queue timeout "
        f"{'none' if bt.queue_timeout_ms is None else f'{bt.queue_timeout_ms * 1000:g} us'}; "
        f"cold start {c.cold_start_s:g} s; "
        f"capacity at p95 <= {o.slo_ms:g} ms: {cal.capacity_rps:.0f} rps/replica (saturated {cal.max_rps:.0f})"
        + ("" if b.sized_at_delay_ms is None else
           f" at a queue delay of {b.sized_at_delay_ms * 1000:g} us, where the batching tuner can go: this start "
           f"meets no p95 of {o.slo_ms:g} ms, and the oracle's needs are sized there too"),
        f"metrics: scrape {c.prom.scrape_s:g} s, window {c.prom.window_s:g} s; "
        f"tritonscale tick {scaling_spec(o).interval_seconds} s; "
        f"replicas {c.min_replicas}..{c.max_replicas}, start with {o.initial_replicas or fair_start(b.needs, o)} warm",
        f"baselines at {o.headroom:.0%} of capacity: keda {cal.target_rps:.0f} rps/replica (served + rejected) "
        "every 15 s, "
        f"kpa {cal.concurrency_at_headroom:.1f} in flight/replica, hpa GPU duty cycle {o.hpa_target:.0%} "
        f"(measured duty cycle at that load: {cal.busy_at_headroom:.0%})",
    ]
    if b.oracle_meets_slo is not None:
        lines.append(f"oracle: per-minute needs {min(b.needs)}..{max(b.needs)} replicas; its simulated schedule "
                     f"{'meets' if b.oracle_meets_slo else 'does NOT meet'} the SLO in every window")
    return "\n".join(lines)


def batcher_changes(o: Outcome) -> list[dict[str, Any]]:
    """The batching tuner's changes in one run, for --json: when, why, and the settings after."""
    return [{"t": round(t, 3), "reason": reason, "settings": settings} for t, reason, settings in o.tunings]


def describe_tunings(b: Benchmark) -> str:
    """With --batching-tuner: the settings tritonscale's tuner put in force, and when (a change is a
    rollout or a reload: its pods are in the cold starts)."""
    lines = []
    for o in b.outcomes:
        if o.summary.policy != "tritonscale":
            continue
        lines.append(f"batching tuner (tritonscale): {len(o.tunings)} change(s) from the starting settings"
                     + (":" if o.tunings else ""))
        lines += [f"  t={t:.0f} s {reason}: {settings}" for t, reason, settings in o.tunings]
    return "\n".join(lines)


def write_decisions(b: Benchmark, path: str | Path) -> None:
    suite_command.write_ticks(path, (((), out.summary.policy, r) for out in b.outcomes for r in out.ticks))
