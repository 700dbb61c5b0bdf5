"""Text and PNG output of the scenario suite (``tritonscale simulate --suite``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from tritonscale.simulate.suite_scenarios import ROUTING_TEXT, SCRAPES, SuiteConfig
from tritonscale.simulate.suite_scoring import (
    OURS,
    PolicySummary,
    ScenarioResult,
    Verdict,
    check,
    summarise_policies,
)


def _table(head: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=False))) + " |"

    sep = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([line(head), sep, *(line(r) for r in body)])


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def setup_text(cfg: SuiteConfig, n: int) -> str:
    b = cfg.batcher
    slos = ", ".join(f"{lvl} {cfg.slo_ms(lvl):g} ms" for lvl in cfg.slos)
    return "\n".join([
        f"suite: {n} scenarios = classes [{', '.join(cfg.classes)}] x cold start "
        f"[{', '.join(f'{c:g}' for c in cfg.cold_starts)}] s x SLO [{slos}] x seeds "
        f"[{', '.join(map(str, cfg.seeds))}]"
        + ("" if cfg.ranges == "suite" else f"; the classes drawn from the {cfg.ranges!r} parameter ranges"),
        f"replica: {b.base_ms:g} ms + {b.per_item_ms:g} ms/item, max batch {b.max_batch}, queue delay "
        f"{b.max_queue_delay_ms * 1000:g} us, preferred {list(b.preferred)}; replicas {cfg.min_replicas}.."
        f"{cfg.max_replicas}; each scenario scaled so its busiest minute's mean rate needs {cfg.peak_replicas} "
        "replicas (its p95 within the minute may need more: the static fleet is the oracle's need)",
        f"routing: {ROUTING_TEXT[cfg.routing]}"
        + (f" (connections {cfg.connections}, connection_age_s {cfg.connection_age_s:g})"
           if cfg.routing == "connection" else ""),
        f"scrapes: {SCRAPES[cfg.scrape_spread]}; each policy ticks at its own period from t = 0",
        "queue: " + (f"requests queued longer than {cfg.queue_timeout_targets:g} x the SLO are rejected (the "
                     "operator's default Triton queue policy)" if cfg.queue_timeout_targets > 0 else "no timeout"),
        "tritonscale: the CRD defaults; static: the oracle's largest per-minute need, never scaled",
        "attainment: share of 60 s windows whose p95 is within the SLO (a rejected or timed-out request is a miss); "
        "cost: replica-hours, pods counted from creation",
    ])


def scenario_table(res: ScenarioResult) -> str:
    head = ["policy", "windows met", "replica-h", "x oracle", "peak", "x oracle peak", "rejected", "dominated by"]
    body = []
    for r in res.rows:
        dom = "" if r.policy == "oracle" else ", ".join(res.dominators(r.policy))
        body.append([r.policy, f"{r.window_attainment:.1%} ({r.windows - r.windows_missed}/{r.windows})",
                     f"{r.replica_hours:.2f}", _x(r.cost_vs_oracle), str(r.max_replicas), _x(r.peak_vs_oracle),
                     f"{r.rejected:,}", dom or "-"])
    title = (f"## {res.scenario.name}: SLO {res.slo_ms:g} ms, {res.requests:,} requests ({res.description}), "
             f"static {res.static_replicas}, oracle peak {res.oracle_peak}")
    if not res.oracle_meets_slo:  # a burst beyond maxReplicas: no policy could meet every window
        title += (f"\n(the oracle misses windows even at up to {res.oracle_peak} replicas: this traffic asks more than "
                  "the fleet can give, and no policy can meet every window)")
    return title + "\n" + _table(head, body)


def summary_table(rows: Sequence[PolicySummary]) -> str:
    head = ["policy", "scenarios", "worst windows met", "median windows met", "median x oracle",
            "worst x oracle", "worst peak x oracle peak", "dominated in"]
    body = [[s.policy, str(s.scenarios), f"{s.worst_attainment:.1%}", f"{s.median_attainment:.1%}",
             _x(s.median_cost_vs_oracle), _x(s.worst_cost_vs_oracle), _x(s.worst_peak_vs_oracle),
             "-" if s.policy == "oracle" else f"{s.dominated_in}/{s.scenarios}"] for s in rows]
    return _table(head, body)


def check_text(verdicts: Sequence[Verdict]) -> str:
    ok = sum(v.holds for v in verdicts)
    lines = [f"tritonscale meets the suite's criteria in {ok}/{len(verdicts)} scenarios"
             " (not dominated; peak <= ceil(1.25 x oracle peak); smooth classes >= 99% of windows at <= 1.3x the"
             " oracle; bursty classes >= 90% of windows at no more than the static peak fleet)"]
    lines += [f"  FAIL {v.scenario}: {'; '.join(v.failures)}" for v in verdicts if not v.holds]
    return "\n".join(lines)


def text(cfg: SuiteConfig, results: Sequence[ScenarioResult], per_scenario: bool = True) -> str:
    parts = [setup_text(cfg, len(results)), ""]
    if per_scenario:
        for res in results:
            parts += [scenario_table(res), ""]
    parts += ["## Summary over all scenarios", summary_table(summarise_policies(results)), "",
              check_text([check(r) for r in results])]
    return "\n".join(parts)


def plot(results: Sequence[ScenarioResult], path: str | Path) -> None:
    """Window attainment against cost (x oracle), one panel per traffic class, every scenario a point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = list(dict.fromkeys(r.scenario.cls for r in results))
    cols = min(4, len(classes))
    rows_n = (len(classes) + cols - 1) // cols
    policies = list(dict.fromkeys(("static" if r.policy.startswith("static:") else r.policy)
                                  for res in results for r in res.rows))
    # At least wide enough for the title; the legend wraps into rows of what fits (about 1.3 in a
    # label), and the figure grows by its rows (one or two classes clipped the legend and the title).
    width = max(4.2 * cols, 8.4)
    legend_cols = max(1, min(len(policies), int(width / 1.3)))
    legend_in = 0.3 * math.ceil(len(policies) / legend_cols) + 0.15
    height = 3.6 * rows_n + legend_in + 0.4
    fig, axes = plt.subplots(rows_n, cols, figsize=(width, height), squeeze=False)
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(policies)}
    for ax, cls in zip(axes.flat, classes, strict=False):
        for res in (r for r in results if r.scenario.cls == cls):
            for r in res.rows:
                key = "static" if r.policy.startswith("static:") else r.policy
                if r.cost_vs_oracle is None:
                    continue
                ax.scatter(r.cost_vs_oracle, r.window_attainment * 100, s=40 if key == OURS else 14,
                           color=colours[key], marker="*" if key == OURS else "o", alpha=0.8,
                           label=key)
        ax.set_title(cls)
        ax.set_xlabel("replica-hours / oracle")
        ax.set_ylabel("windows met (%)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(classes):]:
        ax.axis("off")
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=False):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=legend_cols)
    fig.suptitle("scenario suite: attainment against cost (each point one scenario)")
    fig.tight_layout(rect=(0, legend_in / height, 1, 1 - 0.4 / height))
    fig.savefig(path, dpi=110)
    plt.close(fig)
