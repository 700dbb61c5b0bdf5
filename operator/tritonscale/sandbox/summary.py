"""The sandbox's results: a JSON summary and a PNG plot of the same timeline.

Pure functions of what the run recorded (request records, per-second samples,
scale events, pod events), so a test can build a summary from made-up data.

Summary keys (all latencies are client-side, measured by the load generator
from send to response, in ms):

- ``peak_replicas`` / ``final_replicas``: highest and last Deployment
  ``spec.replicas`` (what the autoscaler asked for); ``peak_ready_replicas`` and
  ``final_ready_replicas`` are the Deployment's ``status.readyReplicas`` (pods whose
  readiness probe, Triton's model-ready endpoint, passed);
- ``scale_events``: ``[{t, from, to, reason, message}]`` from the operator's
  "Scaled" Events, ``t`` in seconds since the load started;
- ``requests`` / ``errors`` / ``error_kinds``;
- ``p95_ms_by_phase``: p95 of the requests *sent* in each phase of the load
  shape, keyed by phase name (phases with the same name, e.g. every "burst",
  are pooled); ``phases`` has each phase on its own with p50/p95/p99 and the
  p95 of its second half (a step's p95 is dominated by the backlog that built
  while replicas were cold; the second half shows where scaling settled);
- ``restarts``: tritonserver processes that exited and were restarted;
- ``cold_starts_s``: container start to pod Ready (probes included), per start;
- ``config``: the cost model, batching and scaling the run used;
- ``timeline``: the per-second samples the plot is drawn from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonscale.sandbox.live_view import Mark, Sample, ScaleEvent, samples_as_dicts
from tritonscale.sandbox.loadgen import RequestRecord


@dataclass(frozen=True)
class Phase:
    name: str
    start_s: float
    end_s: float
    rps: float | None = None  # nominal offered rate (None for a trace)


def _q(values: Sequence[float], q: float) -> float | None:
    if not len(values):
        return None
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 1)


def _errors_by_kind(records: Sequence[RequestRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if not r.ok:
            key = r.error.split(":")[0] or "error"
            out[key] = out.get(key, 0) + 1
    return out


def phase_stats(records: Sequence[RequestRecord], phase: Phase, ran_s: float | None = None) -> dict[str, Any]:
    """One phase's figures; ``ran_s``: how far an interrupted load got -- the phase it stopped in counts
    up to there (its rate was divided by the whole phase), and one that never began has no rate."""
    end_s = phase.end_s if ran_s is None else min(phase.end_s, max(phase.start_s, ran_s))
    recs = [r for r in records if phase.start_s <= r.send_time < end_s]
    lat = [r.latency_ms for r in recs if r.ok]
    span = end_s - phase.start_s
    mid = phase.start_s + span / 2
    settled = [r.latency_ms for r in recs if r.ok and r.send_time >= mid]
    return {
        "name": phase.name,
        "start_s": round(phase.start_s, 1),
        "end_s": round(end_s, 1),
        "nominal_rps": phase.rps,
        "offered_rps": round(len(recs) / span, 2) if span > 0 else None,
        "requests": len(recs),
        "errors": sum(1 for r in recs if not r.ok),
        "p50_ms": _q(lat, 50),
        "p95_ms": _q(lat, 95),
        "p99_ms": _q(lat, 99),
        "p95_ms_second_half": _q(settled, 95),  # after scaling had time to react
    }


def build_summary(
    *,
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    scale_events: Sequence[ScaleEvent],
    marks: Sequence[Mark],
    phases: Sequence[Phase],
    restarts: int,
    cold_starts_s: Sequence[float],
    config: dict[str, Any],
    scenario: dict[str, Any],
    interrupted: bool,
    wall_s: float,
) -> dict[str, Any]:
    desired = [s.desired for s in samples] + [e.to_replicas for e in scale_events]
    ready = [s.ready for s in samples]
    # how far an interrupted load got: its last request sent, or its last second sampled
    # (a hair past the last send: the phase it stopped in keeps that request)
    ran_s = max([r.send_time for r in records] + [s.t for s in samples] + [0.0]) + 1e-6 if interrupted else None
    by_name: dict[str, list[float]] = {}
    for ph in phases:
        by_name.setdefault(ph.name, [])
        by_name[ph.name] += [r.latency_ms for r in records if r.ok and ph.start_s <= r.send_time < ph.end_s]
    lat = [r.latency_ms for r in records if r.ok]
    return {
        "outcome": "interrupted" if interrupted else "completed",
        "peak_replicas": max(desired) if desired else None,
        "final_replicas": samples[-1].desired if samples else None,
        "min_replicas_seen": min(s.desired for s in samples) if samples else None,
        "peak_ready_replicas": max(ready) if ready else None,
        "final_ready_replicas": samples[-1].ready if samples else None,
        "scale_events": [e.to_dict() for e in scale_events],
        "requests": len(records),
        "errors": sum(1 for r in records if not r.ok),
        "error_kinds": _errors_by_kind(records),
        "p95_ms": _q(lat, 95),
        "p95_ms_by_phase": {name: _q(v, 95) for name, v in by_name.items()},
        "phases": [phase_stats(records, ph, ran_s) for ph in phases],
        "restarts": restarts,
        "cold_starts_s": [round(c, 2) for c in cold_starts_s],
        "pod_events": [{"t": round(m.t, 1), "kind": m.kind, "text": m.text} for m in marks],
        "config": config,
        "scenario": scenario,
        "wall_s": round(wall_s, 1),
        "timeline": samples_as_dicts(samples),
    }


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def write_summary(summary: dict[str, Any], path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(summary), indent=2) + "\n")
    return path


def write_plot(summary: dict[str, Any], path: Path | str) -> Path:
    """Three panels on one time axis: offered load, p95 against the target, replicas.
    Phases are shaded, scale events drawn as vertical lines, pod crashes as red ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tl = summary.get("timeline") or []
    t = [s["t"] for s in tl]
    target = (summary.get("config") or {}).get("target_p95_ms")

    fig, (ax_load, ax_p95, ax_rep) = plt.subplots(3, 1, figsize=(13, 8.5), sharex=True,
                                                  gridspec_kw={"height_ratios": [1, 1.3, 1]})
    title = summary.get("scenario", {}).get("title") or "tritonscale sandbox"
    fig.suptitle(title, fontsize=11)

    shades = ["#f2f2f2", "#ffffff"]
    for i, ph in enumerate(summary.get("phases") or []):
        for ax in (ax_load, ax_p95, ax_rep):
            ax.axvspan(ph["start_s"], ph["end_s"], color=shades[i % 2], zorder=0)
        ax_load.text((ph["start_s"] + ph["end_s"]) / 2, 1.0, ph["name"], transform=ax_load.get_xaxis_transform(),
                     ha="center", va="bottom", fontsize=8, color="#555555")

    ax_load.plot(t, [s["offered_rps"] for s in tl], label="offered (last 5 s)", color="tab:blue")
    ax_load.plot(t, [s["completed_rps"] for s in tl], label="served (ok)", color="tab:green", alpha=0.8)
    ax_load.set_ylabel("requests/s")
    ax_load.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)

    def series(key: str) -> list[float]:
        return [s[key] if s.get(key) is not None else float("nan") for s in tl]

    ax_p95.plot(t, series("p95_ms"), label="p95, client\n(last 5 s)", color="tab:purple")
    ax_p95.plot(t, series("operator_p95_ms"),
                label="p95 the operator reads\n(Prometheus: max over pods of\nTriton's 60 s summary)",
                color="tab:orange", alpha=0.8)
    if target:
        ax_p95.axhline(target, color="red", linestyle="--", linewidth=1, label=f"target {target:g} ms")
    ax_p95.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax_p95.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_p95.yaxis.set_major_formatter(plain)
    ax_p95.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_p95.set_ylabel("p95 latency, ms")
    ax_p95.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)

    ax_rep.step(t, [s["desired"] for s in tl], where="post", label="desired (spec.replicas)", color="black")
    ax_rep.step(t, [s["ready"] for s in tl], where="post", label="ready", color="tab:green")
    cfg = summary.get("config") or {}
    if cfg.get("min_replicas") is not None:
        ax_rep.axhline(cfg["min_replicas"], color="grey", linestyle=":", linewidth=1, label="minReplicas")
    ax_rep.set_ylabel("replicas")
    ax_rep.set_xlabel("seconds since the load started")
    top = max([s["desired"] for s in tl] + [s["ready"] for s in tl] + [cfg.get("max_replicas") or 1])
    ax_rep.set_ylim(0, top + 0.8)
    ax_rep.yaxis.get_major_locator().set_params(integer=True)

    for ev in summary.get("scale_events") or []:
        color = "tab:red" if ev["to"] > ev["from"] else "tab:blue"
        for ax in (ax_load, ax_p95, ax_rep):
            ax.axvline(ev["t"], color=color, alpha=0.35, linewidth=1)
        ax_rep.annotate(f"{ev['from']}\u2192{ev['to']} {ev['reason']}", (ev["t"], ev["to"]),
                        xytext=(3, 4), textcoords="offset points", fontsize=7, rotation=30)
    last_mark = None
    for m in summary.get("pod_events") or []:
        if m["kind"] in ("crashed", "killed"):
            for ax in (ax_load, ax_p95, ax_rep):
                ax.axvline(m["t"], color="red", linestyle="-.", linewidth=1)
            if last_mark is None or m["t"] - last_mark > 3:  # a kill and the crash it causes: one label
                label = m["text"].split(" (")[0].replace("'s tritonserver", "")
                ax_rep.annotate(label, (m["t"], 0.2), xytext=(3, 0), textcoords="offset points",
                                fontsize=7, color="red")
            last_mark = m["t"]
    ax_rep.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    text = (f"requests {summary.get('requests')}  errors {summary.get('errors')}  "
            f"peak {summary.get('peak_replicas')}  final {summary.get('final_replicas')}  "
            f"restarts {summary.get('restarts')}  p95 by phase: "
            + ", ".join(f"{k} {v:.0f} ms" if v is not None else f"{k} -"
                        for k, v in (summary.get("p95_ms_by_phase") or {}).items()))
    fig.text(0.01, 0.005, text, fontsize=8, color="#333333")
    fig.subplots_adjust(left=0.07, right=0.80, top=0.93, bottom=0.08, hspace=0.12)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
