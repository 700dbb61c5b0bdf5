"""``tritonscale simulate --suite``: the CLI shell of the scenario suite (``suite.py``)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tritonscale.api.spec import MAX_QUEUE_DELAY_US
from tritonscale.cli_numbers import int_in, non_negative_float
from tritonscale.given_flags import was_given
from tritonscale.output_paths import ensure_distinct, ensure_image, ensure_parent, write_output
from tritonscale.simulate import suite_report, traffic, tuner_suite
from tritonscale.simulate.arrivals import MAX_REPLAY_SPAN_S
from tritonscale.simulate.engine import CONNECTION_AGE_S, CONNECTIONS, RELOAD_PAUSE_S, TickRecord
from tritonscale.simulate.replica import DEFAULT_PREFERRED, BatcherConfig
from tritonscale.simulate.suite import Progress, run_suite
from tritonscale.simulate.suite_scenarios import (
    COLD_STARTS,
    DEFAULT_TRACE,
    QUICK_COLD_STARTS,
    QUICK_SEEDS,
    QUICK_SLOS,
    SuiteConfig,
    checked_trace,
)
from tritonscale.simulate.suite_scoring import ScenarioResult, check, to_dict

REPO = Path(__file__).resolve().parents[3]
# ``--check``: the exit code when tritonscale misses a criterion in some scenario; 1 and 2 stay what they
# are for every command (a value or file refused; a command line that does not parse), so CI tells a
# typo from a miss.
CHECK_FAILED = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scenario suite (--suite)")
    g.add_argument("--suite", nargs="?", const="full", choices=("full", "quick"),
                   help="run the scenario suite: every policy over traffic classes x cold starts x SLOs x seeds "
                        "('quick': one scenario per class, cold start 60 s, tight SLO, seed 0)")
    g.add_argument("--classes", help=f"comma list of traffic classes (default all: {','.join(traffic.CLASSES)})")
    g.add_argument("--cold-starts", help="comma list of cold starts in s (default 15,60,180)")
    g.add_argument("--slos", help="comma list of SLO levels: tight (2x the full-batch time), loose (6x) "
                                  "(default both)")
    g.add_argument("--seeds", help="comma list of seeds, or a count N for 0..N-1 (default 3)")
    g.add_argument("--ranges", default="suite", choices=tuple(traffic.RANGES),
                   help="the synthetic classes' parameter ranges: 'suite' (default, what the suite's figures were "
                        "measured on) or 'wide' (shorter periods, ramps, holds and bursts, larger jumps, more "
                        "volatility); the trace class is the same either way")
    g.add_argument("--peak-replicas", type=int_in(1), default=8,
                   help="replicas the busiest minute of every scenario needs (default 8)")
    g.add_argument("--check", action="store_true",
                   help=f"exit {CHECK_FAILED} when tritonscale misses the suite's criteria in any scenario "
                        "(1 and 2 are bad input and usage errors)")
    g.add_argument("--brief", action="store_true", help="print only the summary, not a table per scenario")


# A count of seeds (--seeds N) above this is a typo, not a run: each seed is ~42 scenarios.
MAX_SEED_COUNT = 1000


def _list(text: str | None, what: str, conv=str, expected: str = "a comma list") -> tuple | None:
    """A comma list of ``conv`` values; ``expected`` says what one reads, where an item does not."""
    if text is None:
        return None
    try:
        items = tuple(conv(x) for x in text.replace(" ", "").split(",") if x)
    except argparse.ArgumentTypeError as exc:  # read, but out of range: say why
        raise ValueError(f"--{what}: {exc}") from None
    except ValueError:
        raise ValueError(f"--{what}: cannot read {text!r}: expected {expected}") from None
    if not items:
        raise ValueError(f"--{what}: empty list")
    twice = sorted({x for x in items if items.count(x) > 1}, key=str)
    if twice:  # the same scenarios twice would only weigh them double in the summary
        raise ValueError(f"--{what}: {', '.join(str(x) for x in twice)} given more than once")
    return items


def preferred_sizes(text: str | None, max_batch: int) -> tuple[int, ...]:
    """--preferred-batch-sizes: a comma list ('' for none); unset, the default sizes that
    fit --max-batch (so --max-batch 1 or 8 needs no second flag)."""
    if text is None:
        return tuple(n for n in DEFAULT_PREFERRED if n <= max_batch)
    items = text.replace(" ", "").split(",")
    if items == [""]:
        return ()
    try:
        sizes = tuple(int(x) for x in items)  # an empty item ("4,,8", "4,") is refused, not skipped
    except ValueError:
        raise ValueError(f"--preferred-batch-sizes: expected a comma list of integers, got {text!r}") from None
    bad = [n for n in sizes if not 1 <= n <= max_batch]
    if bad:  # said here with its flag (the batcher's own check names none)
        raise ValueError(f"--preferred-batch-sizes: {', '.join(map(str, bad))} outside 1..{max_batch} "
                         f"(--max-batch {max_batch})")
    return sizes


def _trace_path(args: argparse.Namespace) -> str | None:
    if args.trace:
        return args.trace
    for base in (Path.cwd(), REPO):
        cand = base / DEFAULT_TRACE
        if cand.exists():
            return str(cand)
    return None


def check_batch_cost(args: argparse.Namespace) -> None:
    """--batch-base-ms and --batch-item-ms (a batch of n costs a + b*n ms): a ValueError naming them."""
    if args.batch_base_ms + args.batch_item_ms <= 0:
        raise ValueError("--batch-base-ms, --batch-item-ms: both 0 is a batch that takes no time; give either")


def check_model_flags(args: argparse.Namespace) -> None:
    """The replica model's flags, as a suite and one run share them: a ValueError naming the flag."""
    check_batch_cost(args)
    if args.max_queue_delay_us > MAX_QUEUE_DELAY_US:
        raise ValueError(f"--max-queue-delay-us: {args.max_queue_delay_us:g}; at most {MAX_QUEUE_DELAY_US} (the "
                         "CRD's batching.maxQueueDelayMicroseconds)")


def check_routing_flags(args: argparse.Namespace) -> None:
    """--connections and --connection-age describe --routing connection only: a ValueError naming them
    with another routing, as a suite and one run share them."""
    given = [f"--{d.replace('_', '-')}" for d, default in (("connections", CONNECTIONS),
                                                           ("connection_age", CONNECTION_AGE_S))
             if was_given(args, d, default)]
    if given and args.routing != "connection":
        raise ValueError(f"{', '.join(given)}: only with --routing connection (the routing is {args.routing})")


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    quick = args.suite == "quick"
    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    ensure_image("--plot", args.plot)
    ensure_parent("--decisions", args.decisions)
    # the trace the suite replays, given or the shared one it finds (the trace class reads it)
    ensure_distinct({"--plot": args.plot, "--decisions": args.decisions}, {"--trace": _trace_path(args)})
    if args.plot and args.batching_tuner:
        raise ValueError("--plot: the tuner's evaluation (--suite --batching-tuner) draws no plot; "
                         "leave out one of the two")
    if args.decisions and args.batching_tuner:
        raise ValueError("--decisions: the tuner's evaluation (--suite --batching-tuner) writes no ticks; "
                         "leave out one of the two")
    seeds = _list(args.seeds, "seeds", int, "a comma list of integers (0,3,7), or a count N for seeds 0..N-1")
    if seeds is not None and min(seeds) < 0:
        raise ValueError("--seeds: seeds must be >= 0")
    if seeds is not None and len(seeds) == 1 and args.seeds.strip().isdigit() and "," not in args.seeds:
        if seeds[0] < 1:  # a count: 0 would silently mean the default seeds
            raise ValueError("--seeds: a count must be >= 1 (seed 0 alone: --seeds 0,)")
        if seeds[0] > MAX_SEED_COUNT:
            raise ValueError(f"--seeds: a count of at most {MAX_SEED_COUNT} (each seed is a whole matrix of "
                             "scenarios); list seeds to pick larger ones")
        seeds = tuple(range(seeds[0]))
    classes = _list(args.classes, "classes") or traffic.CLASSES
    trace = _trace_path(args)
    if "trace" in classes and trace is None:
        if args.classes:
            raise ValueError(f"the trace class needs the real trace: pass --trace FILE (looked for {DEFAULT_TRACE})")
        classes = tuple(c for c in classes if c != "trace")
        print(f"suite: no {DEFAULT_TRACE} here and no --trace: the trace class is left out", file=sys.stderr)
    if "trace" in classes and trace is not None:
        checked_trace(trace, args.trace_unit)  # before any scenario runs
    if args.trace and "trace" not in classes:  # a flag the run would not read is an error, not dropped
        raise ValueError("--trace: the suite replays it only in the trace class; add trace to --classes")
    pause_given = was_given(args, "reload_pause_s", RELOAD_PAUSE_S)
    apply_given = was_given(args, "batching_apply", "rollout")
    if not args.batching_tuner and (apply_given or pause_given):
        raise ValueError(f"{'--batching-apply' if apply_given else '--reload-pause-s'}: "
                         "how a tuned batcher is applied; the suite tunes only with --batching-tuner")
    if pause_given and args.batching_apply != "reload":
        raise ValueError("--reload-pause-s is the pause of --batching-apply reload; a rollout does not read it")
    if not 600 <= args.duration <= MAX_REPLAY_SPAN_S:
        raise ValueError(f"--duration: {args.duration:g} s; a suite scenario runs 600 s (ten scored minutes) to "
                         f"{MAX_REPLAY_SPAN_S:g} s")
    if not args.min_replicas <= args.peak_replicas <= args.max_replicas:
        raise ValueError(f"--peak-replicas: {args.peak_replicas} must be within --min-replicas..--max-replicas "
                         f"({args.min_replicas}..{args.max_replicas})")
    check_model_flags(args)
    check_routing_flags(args)
    batcher = BatcherConfig(args.batch_base_ms, args.batch_item_ms, args.max_batch, args.max_queue_delay_us / 1000.0,
                            preferred_sizes(args.preferred_batch_sizes, args.max_batch))
    return SuiteConfig(
        classes=classes,
        cold_starts=(_list(args.cold_starts, "cold-starts", non_negative_float)
                     or (QUICK_COLD_STARTS if quick else COLD_STARTS)),
        slos=_list(args.slos, "slos") or (QUICK_SLOS if quick else ("tight", "loose")),
        seeds=seeds or (QUICK_SEEDS if quick else (0, 1, 2)),
        duration_s=args.duration,
        peak_replicas=args.peak_replicas,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        batcher=batcher,
        trace_path=trace,
        trace_unit=args.trace_unit,
        jobs=args.jobs,
        reload_pause_s=args.reload_pause_s,
        batching_apply=args.batching_apply,
        keep_ticks=bool(args.decisions),
        ranges=args.ranges,
        routing=args.routing,
        connections=args.connections,
        connection_age_s=args.connection_age,
    )


def write_ticks(path: str | Path, rows: Iterable[tuple[tuple[str, ...], str, TickRecord]],
                first: tuple[str, ...] = ()) -> None:
    """--decisions: every autoscaler tick and its reason as CSV, after the ``first`` columns (the
    suite's scenario); ``rows`` are (values of the first columns, policy, tick). With the batching
    tuner on, a last column ``batching`` gives its verdict at each of tritonscale's ticks."""
    rows = list(rows)
    tuned = any(r.batching for _, _, r in rows)  # a batching column only where the tuner ran
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*first, "policy", "t", "current", "ready", "desired", "reason", *(["batching"] if tuned else [])])
        for lead, policy, r in rows:
            w.writerow([*lead, policy, f"{r.t:.12g}", r.current, r.ready, r.desired, r.reason,
                        *([r.batching] if tuned else [])])


def write_decisions(results: list[ScenarioResult], path: str | Path) -> None:
    """--suite --decisions: every policy's ticks in every scenario, the scenario first."""
    write_ticks(path, (((r.scenario.name,), policy, tick) for r in results for policy, tick in r.ticks or ()),
                first=("scenario",))


def stderr_progress(what: str, started: float) -> Progress:
    """A ``Progress`` that tells stderr how many scenarios are done and the seconds since
    ``started``: after the first, at each tenth of the run, and at the last. A whole suite takes
    minutes, and stdout carries only the report (or the JSON)."""
    shown = [-1]

    def report(done: int, total: int) -> None:
        tenth = done * 10 // total
        if tenth > shown[0]:
            shown[0] = tenth
            print(f"{what}: {done}/{total} scenarios done, {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)

    return report


def run_tuner(args: argparse.Namespace, cfg: SuiteConfig, started: float) -> int:
    """--suite --batching-tuner: the tuner's evaluation (``tuner_suite.py``) instead of the policies'."""
    results = tuner_suite.run_tuner_suite(cfg, quick=args.suite == "quick",
                                          progress=stderr_progress("suite --batching-tuner", started))
    if args.json:
        print(json.dumps(tuner_suite.to_dict(results, cfg.ranges), indent=1))
    else:
        print(tuner_suite.text(results, per_scenario=not args.brief))
        print(f"\nwall time: {time.perf_counter() - started:.1f} s on {os.cpu_count()} CPU(s), {cfg.jobs} worker(s)")
    if args.check and not all(ok for r in results for _, ok, _ in r.verdicts()):
        return CHECK_FAILED
    return 0


SUITE_OUT_OF_MEMORY = ("out of memory: a scenario's replay is too large for this machine -- too many requests "
                       "(a fast model at --peak-replicas, or a long --duration); lower either, or --jobs 1")


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        cfg = config_from_args(args)
        if args.batching_tuner:
            return run_tuner(args, cfg, started)
        results = run_suite(cfg, progress=stderr_progress("suite", started))
    except (ValueError, OSError) as exc:
        print(f"tritonscale simulate: {exc}", file=sys.stderr)
        return 1
    except (MemoryError, BrokenProcessPool):  # a worker out of memory, or killed by the kernel for it
        print(f"tritonscale simulate: {SUITE_OUT_OF_MEMORY}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started
    if args.json:
        print(json.dumps(to_dict(cfg, results, wall), indent=1))
    else:
        print(suite_report.text(cfg, results, per_scenario=not args.brief))
        print(f"\nwall time: {wall:.1f} s on {os.cpu_count()} CPU(s), {cfg.jobs} worker(s)")
    # The files after the report: a failed write costs them, not a run of many minutes.
    try:
        if args.plot:
            write_output("--plot", args.plot, lambda p: suite_report.plot(results, p))
        if args.decisions:
            write_output("--decisions", args.decisions, lambda p: write_decisions(results, p))
    except ValueError as exc:
        print(f"tritonscale simulate: {exc}", file=sys.stderr)
        return 1
    if args.check and not all(check(r).holds for r in results):
        return CHECK_FAILED
    return 0
