"""The batching tuner in the scenario suite (``tritonscale simulate --suite --batching-tuner``).

Per scenario (the suite's traffic classes x cold starts x SLOs x seeds, ``suite.py``), tritonscale
at the CRD defaults runs:

* from each poor start (``POOR_STARTS``: no queue delay and no preferred sizes; a delay as long
  as the p95 target) without the tuner and with it (``spec.batching.autoTune`` at its default
  bounds: delays up to what the target leaves after a full batch, any preferred size);
* with every static batcher config of a brute-force grid (``GRID_DELAYS_MS`` x
  ``GRID_PREFERRED``), the tuner off. The *best static* config is the cheapest (replica-hours)
  of those whose window attainment is at least min(99%, the best attainment in the grid).

Done-when (issue 13): from each poor start the tuner reaches at least the best static config's
attainment, or 99% if that is lower, within 1.1x its replica-hours. "Reaches" is judged on the
windows after ``SETTLE_S`` -- the first windows belong to the poor start itself (a target-long
delay misses every window until the first tick can act) -- and both figures are reported, with the
verdict count on every window (which charges the tuner's first rollout: it falls mostly within
``SETTLE_S``) and the count of pairs that hold with the tuner and not without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from tritonscale.simulate.benchmark import Options, build, fair_start, start_windows
from tritonscale.simulate.engine import simulate
from tritonscale.simulate.policies.oracle import window_needs
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, summarise, window_p95_ms
from tritonscale.simulate.suite import Progress, _calibration, _cluster, fork_map, prepare
from tritonscale.simulate.suite_scenarios import Scenario, SuiteConfig, scenario_arrivals

GRID_DELAYS_MS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
GRID_PREFERRED: tuple[tuple[int, ...], ...] = ((), (4, 8, 16), (16,))
QUICK_GRID_DELAYS_MS = (0.0, 2.0, 20.0, 100.0)
QUICK_GRID_PREFERRED: tuple[tuple[int, ...], ...] = ((), (4, 8, 16))
# (name, delay as a share of the p95 target, preferred sizes)
POOR_STARTS: tuple[tuple[str, float, tuple[int, ...]], ...] = (("no-delay", 0.0, ()), ("oversized", 1.0, ()))
SETTLE_S = 300.0  # five windows: the poor start's own, and the tuner's first change and reload
ATTAINMENT_FLOOR, COST_LIMIT = 0.99, 1.1


@dataclass(frozen=True)
class Run:
    label: str  # "no-delay", "no-delay+tuner", "static 2ms [4,8,16]"...
    delay_ms: float
    preferred: tuple[int, ...]
    tuner: bool
    attainment: float  # all windows
    settled_attainment: float  # windows from SETTLE_S on
    replica_hours: float
    rejected: int
    changes: tuple[tuple[float, str, str], ...] = ()  # the tuner's (time, reason, settings)


@dataclass
class TunerScenario:
    scenario: Scenario
    slo_ms: float
    runs: list[Run]

    def run(self, label: str) -> Run:
        return next(r for r in self.runs if r.label == label)

    def best_static(self, settled: bool = True) -> Run:
        grid = [r for r in self.runs if r.label.startswith("static")]
        bar = min(ATTAINMENT_FLOOR, max(_attained(r, settled) for r in grid))
        return min((r for r in grid if _attained(r, settled) >= bar), key=lambda r: (r.replica_hours, r.delay_ms))

    def dominators(self, start: str) -> list[Run]:
        """Static grid configs better than the tuner from ``start`` on one axis and no worse on the
        other (settled attainment, replica-hours; a tie -- the tuner settled on that very config --
        is not dominance): reported beside the done-when, which compares against one "best" config
        and so cannot tell a cheaper, slightly lower trade-off from a worse one."""
        me = self.run(f"{start}+tuner")
        return [r for r in self.runs if r.label.startswith("static")
                and r.settled_attainment >= me.settled_attainment and r.replica_hours <= me.replica_hours
                and (r.settled_attainment, -r.replica_hours) != (me.settled_attainment, -me.replica_hours)]

    def verdicts(self, settled: bool = True, tuner: bool = True) -> list[tuple[str, bool, str]]:
        """(start, holds, why) per poor start, with the tuner on (``tuner`` False: the same start without it),
        judged on the windows after SETTLE_S (``settled``) or on every window."""
        best = self.best_static(settled)
        bar = min(ATTAINMENT_FLOOR, _attained(best, settled))
        out = []
        for name, *_ in POOR_STARTS:
            r = self.run(f"{name}+tuner" if tuner else name)
            cost = r.replica_hours / best.replica_hours if best.replica_hours else math.inf
            ok = _attained(r, settled) >= bar and cost <= COST_LIMIT
            out.append((name, ok, f"attainment {_attained(r, settled):.1%} (bar {bar:.1%}), "
                                  f"{cost:.2f}x the best static's replica-hours"))
        return out

    def tuner_made(self) -> list[bool]:
        """Per poor start: the done-when (settled) holds with the tuner and not without it -- the pairs the
        tuner, not the decider alone, is responsible for (an audit, session 84: from no delay the tuner
        changes nothing where that start is already the best, and a pass there is the decider's)."""
        return [on[1] and not off[1] for on, off in zip(self.verdicts(), self.verdicts(tuner=False), strict=True)]


def _attained(r: Run, settled: bool) -> float:
    return r.settled_attainment if settled else r.attainment


def _label(delay_ms: float, prefs: tuple[int, ...]) -> str:
    return f"static {delay_ms:g}ms [{','.join(map(str, prefs))}]"


def within(prefs: tuple[int, ...], max_batch: int) -> tuple[int, ...]:
    """A grid's preferred sizes for a model of ``max_batch``: those that fit, and its largest (a full
    batch, what 16 stands for at the default 16) as ``max_batch`` when it does not."""
    kept = tuple(p for p in prefs if p <= max_batch)
    return kept + (max_batch,) if prefs and max(prefs) > max_batch and max_batch not in kept else kept


def configs(slo_ms: float, quick: bool, max_batch: int = 16) -> list[tuple[str, float, tuple[int, ...], bool]]:
    out = []
    for name, share, prefs in POOR_STARTS:
        out += [(name, share * slo_ms, prefs, False), (f"{name}+tuner", share * slo_ms, prefs, True)]
    delays, prefs_grid = (QUICK_GRID_DELAYS_MS, QUICK_GRID_PREFERRED) if quick else (GRID_DELAYS_MS, GRID_PREFERRED)
    grid = list(dict.fromkeys(within(p, max_batch) for p in prefs_grid))  # (16,) and (4, 8, 16) may meet
    return out + [(_label(d, p), d, p, False) for d in delays for p in grid]


def settled_attainment(window_p95: np.ndarray, slo_ms: float) -> float:
    """The share of windows from SETTLE_S on (with requests) whose p95 is within ``slo_ms``: what the
    done-when judges."""
    late = window_p95[int(SETTLE_S // ATTAINMENT_WINDOW_S):]
    late = late[~np.isnan(late)]
    return float(np.mean(late <= slo_ms)) if len(late) else 1.0


def run_scenario(sc: Scenario, cfg: SuiteConfig, quick: bool = False) -> TunerScenario:
    slo = cfg.slo_ms(sc.slo)
    cal = _calibration(cfg.batcher, slo)
    arr, horizon, _ = scenario_arrivals(sc, cfg, cal.capacity_rps)
    base = _cluster(cfg, sc)
    needs = window_needs(arr, horizon, base, slo, cal.capacity_rps, windows=start_windows(Options(slo, base)))
    runs = []
    for label, delay, prefs, tuner in configs(slo, quick, cfg.batcher.max_batch):
        cl = replace(base, batcher=replace(base.batcher, max_queue_delay_ms=delay, preferred=prefs))
        opts = Options(slo, cl, seed=sc.seed, batching_tuner=tuner)
        policy = build("tritonscale", opts, cal, fair_start(needs, opts))
        result = simulate(arr, policy, cl, horizon)
        wp = window_p95_ms(result.arrival, result.latency, ATTAINMENT_WINDOW_S, result.horizon)
        s = summarise(result, slo, window_p95=wp)
        runs.append(Run(label, delay, prefs, tuner, s.window_attainment, settled_attainment(wp, slo),
                        s.replica_hours, s.rejected,
                        tuple(getattr(policy, "tunings", ()))))
    return TunerScenario(sc, slo, runs)


def run_tuner_suite(cfg: SuiteConfig, scenarios: Sequence[Scenario] | None = None,
                    quick: bool = False, progress: Progress | None = None) -> list[TunerScenario]:
    todo = list(scenarios if scenarios is not None else cfg.scenarios())
    prepare(cfg, todo)
    return fork_map(partial(run_scenario, quick=quick), todo, cfg, cfg.jobs, progress=progress)


def text(results: Sequence[TunerScenario], per_scenario: bool = True) -> str:
    lines = ["Batching tuner: tritonscale's replica-hours and window attainment (all windows / after "
             f"{SETTLE_S:g} s), from poor starts with and without the tuner, and the best static batcher config "
             "of the grid (cheapest with attainment >= min(99%, the grid's best))."]
    held = total = dominated = held_all = made = 0
    for res in results:
        held_all += sum(ok for _, ok, _ in res.verdicts(settled=False))
        made += sum(res.tuner_made())
        best = res.best_static()
        rows = [res.run(f"{n}{t}") for n, *_ in POOR_STARTS for t in ("", "+tuner")] + [best]
        if per_scenario:
            lines += ["", f"{res.scenario.name} (SLO {res.slo_ms:.0f} ms)",
                      f"  {'config':<28} {'replica-h':>9} {'attain':>7} {'settled':>7} {'rejected':>8}  tuner changes"]
            for r in rows:
                name = ("best " + r.label) if r is best else r.label
                ch = "; ".join(f"{t:.0f}s {why}: {what}" for t, why, what in r.changes[:3])
                lines.append(f"  {name:<28} {r.replica_hours:>9.2f} {r.attainment:>7.1%} {r.settled_attainment:>7.1%} "
                             f"{r.rejected:>8}  {ch}")
        for start, ok, why in res.verdicts():
            total += 1
            held += ok
            dom = res.dominators(start)
            dominated += bool(dom)
            if per_scenario or not ok:
                lines.append(f"  {'holds' if ok else 'FAILS'}: from {start}: {why}; "
                             + (f"dominated by {', '.join(r.label for r in dom[:3])}" if dom
                                else "no static config dominates it"))
    lines += ["", f"done-when holds in {held}/{total} (scenario, poor start) pairs",
              f"  judged on every window instead (the tuner's first rollout included, the best static chosen the "
              f"same way): {held_all}/{total}",
              f"  pairs where it holds with the tuner and not without it: {made}/{total}",
              f"a static grid config dominates the tuner (better on attainment or replica-hours, worse on neither) "
              f"in {dominated}/{total}"]
    return "\n".join(lines)


def from_dict(doc: dict[str, Any]) -> list[TunerScenario]:
    """The scenarios ``to_dict`` wrote, to judge a stored run again (``e2e/bench_batching_tuner.py
    --from-json``); KeyError or ValueError for a document that is not one."""
    return [TunerScenario(Scenario.from_name(sc["name"]), float(sc["slo_ms"]), [
        Run(r["label"], float(r["delay_ms"]), tuple(r["preferred"]), bool(r["tuner"]), float(r["attainment"]),
            float(r["settled_attainment"]), float(r["replica_hours"]), int(r["rejected"]),
            tuple((float(t), str(why), str(what)) for t, why, what in r.get("changes") or ()))
        for r in sc["runs"]]) for sc in doc["scenarios"]]


def to_dict(results: Sequence[TunerScenario], ranges: str = "suite") -> dict[str, Any]:
    """The runs and verdicts as JSON; ``ranges``: the classes' parameter ranges (``SuiteConfig.ranges``)."""
    return {"ranges": ranges, "scenarios": [{
        "name": r.scenario.name, "slo_ms": r.slo_ms, "best_static": r.best_static().label,
        "runs": [{**run.__dict__, "changes": [list(c) for c in run.changes]} for run in r.runs],
        "verdicts": [{"start": s, "holds": ok, "why": why, "dominated_by": [d.label for d in r.dominators(s)],
                      "holds_on_every_window": every[1], "holds_without_tuner": off[1]}
                     for (s, ok, why), every, off in zip(r.verdicts(), r.verdicts(settled=False),
                                                         r.verdicts(tuner=False), strict=True)],
    } for r in results]}
