"""``tritonscale simulate``: trace-driven autoscaling benchmark (the CLI shell).

    tritonscale simulate --trace FILE [--trace-unit U]|--shape NAME [--rate-scale X] --slo-ms N --policy P
                         [--seed S] [--json] [--plot FILE.png]

P is tritonscale, hpa, keda, kpa, triton-queue, slo-ratio, static:N, oracle or all. ``add_arguments`` +
``run`` plug into the main CLI; ``main_simulate(argv)`` is the same as a standalone
entry point. Errors are one line on stderr. Exit codes: 0 done; 1 a flag, value or file refused (a
flag the mode or policy does not read, a trace that does not parse, an SLO no replica meets, an
unwritable output); 2 a command line argparse cannot parse (an unknown flag, a value its type refuses:
as every ``tritonscale`` command); 3 ``--suite --check`` found a criterion missed
(``suite_command.CHECK_FAILED``); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tritonscale.cli_numbers import at_least, int_in, non_negative_float, positive_float, share
from tritonscale.given_flags import record_given, was_given
from tritonscale.output_paths import ensure_distinct, ensure_image, ensure_parent, input_file_arg, write_output
from tritonscale.simulate import arrivals as arrivals_mod
from tritonscale.simulate import suite_command
from tritonscale.simulate.benchmark import default_jobs, run_benchmark
from tritonscale.simulate.engine import (
    BATCHING_APPLY,
    CONNECTION_AGE_S,
    CONNECTIONS,
    RELOAD_PAUSE_S,
    ROUTINGS,
)
from tritonscale.simulate.policies import POLICY_NAMES, validate_name
from tritonscale.simulate.replay_inputs import MAX_BATCH, OUT_OF_MEMORY, load_arrivals, options_from_args
from tritonscale.simulate.replay_report import batcher_changes, describe, describe_tunings, write_decisions
from tritonscale.simulate.report import plot, table, to_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("arrivals")
    one = src.add_mutually_exclusive_group()
    one.add_argument("--trace", metavar="FILE", type=input_file_arg,
                     help="Azure CSV (TIMESTAMP column), one arrival per line (seconds or ISO time) "
                          "or Mooncake JSON Lines (timestamp in ms; a JSON array of those objects too)")
    src.add_argument("--trace-unit", choices=tuple(arrivals_mod.UNITS),
                     help="what one plain number of --trace is: s, ms or us (default: s; ms in JSON, as "
                          "Mooncake's); numbers that can only be Unix time in ms, us or ns are read in it "
                          "whatever this says")
    one.add_argument("--shape", choices=arrivals_mod.SHAPES, help="built-in arrival shape")
    src.add_argument("--rate", type=positive_float, default=200.0, help="--shape: base rate in rps (default 200)")
    src.add_argument("--duration", type=positive_float, default=3600.0,
                     help="--shape and the suite's classes: seconds (default 3600); the suite's trace class "
                          "replays the trace's first --duration s")
    src.add_argument("--rate-scale", type=positive_float, default=1.0, metavar="X",
                     help="multiply the rate: Poisson at X times the trace's rate per --rate-bin-s slice "
                          "(default 1: replay the trace as is)")
    src.add_argument("--rate-bin-s", type=at_least(0.1, "a slice of the trace"), default=10.0,
                     help="slice for --rate-scale (default 10 s)")
    src.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="random seed (default 0)")

    p.add_argument("--slo-ms", type=positive_float, help="p95 latency target in ms (required without --suite)")
    p.add_argument("--policy", default="all",
                   help=f"{', '.join(POLICY_NAMES[:-1])}, static:N, oracle, or all (default all)")

    m = p.add_argument_group("replica model (Triton dynamic batcher, batch of n costs a + b*n ms)")
    m.add_argument("--batch-base-ms", type=non_negative_float, default=20.0, help="a (default 20)")
    m.add_argument("--batch-item-ms", type=non_negative_float, default=2.0, help="b (default 2)")
    m.add_argument("--max-batch", type=int_in(1, MAX_BATCH), default=16, help="max_batch_size (default 16)")
    m.add_argument("--max-queue-delay-us", type=non_negative_float, default=2000.0,
                   help="default 2000 (with --suite --batching-tuner, this and --preferred-batch-sizes are the "
                        "config each scenario's load is scaled by; the tuner starts from its own poor configs)")
    m.add_argument("--preferred-batch-sizes",
                   help="comma list, '' for none (default: those of 4,8,16 within --max-batch)")
    m.add_argument("--queue-timeout-us", type=non_negative_float,
                   help="Triton queue timeout (REJECT); default: the operator's, twice --slo-ms; 0: none")
    m.add_argument("--cold-start-s", type=non_negative_float, default=60.0, help="pod creation to ready (default 60)")
    m.add_argument("--batching-tuner", action="store_true",
                   help="tritonscale also tunes the queue delay and preferred sizes (spec.batching.autoTune); "
                        "with --suite: replica-hours with and without it from poor starts, and the best static "
                        "config of a grid")
    m.add_argument("--batching-apply", choices=BATCHING_APPLY, default="rollout",
                   help="how a tuned batcher reaches the replicas: 'rollout' (the operator's way: extra pods "
                        "with the new settings, every replica's at once (maxSurge 100%%), a cold start each) or "
                        "'reload' (Triton's model-control reload, a pause per replica; default rollout)")
    m.add_argument("--reload-pause-s", type=non_negative_float, default=RELOAD_PAUSE_S,
                   help=f"with --batching-apply reload: each replica pauses this long, one after the other "
                        f"(default {RELOAD_PAUSE_S:g})")

    c = p.add_argument_group("cluster, metrics and policies")
    c.add_argument("--min-replicas", type=int_in(1), default=1, help="warm floor (default 1)")
    c.add_argument("--max-replicas", type=int_in(1), default=20,
                   help="ceiling for every policy (default 20, where the CRD's maxReplicas defaults to 10: room "
                        "above the suite's peak of 8 to show overshoot)")
    c.add_argument("--initial-replicas", type=int_in(1),
                   help="warm at t=0 (default: the oracle's largest need within the first cold start)")
    c.add_argument("--scrape-s", type=at_least(1.0), default=15.0, help="Prometheus scrape interval (default 15)")
    c.add_argument("--routing", choices=ROUTINGS, default="round-robin",
                   help="how requests reach the ready pods: 'round-robin' (kube-proxy IPVS rr, the default), "
                        "'random' (kube-proxy iptables mode, per request: each pod sees Poisson arrivals) or "
                        "'connection' (gRPC clients: --connections of them, each connection to a pod drawn when it "
                        "opens, closed at --connection-age); the draws seeded by --seed, in --suite by each "
                        "scenario's seed")
    c.add_argument("--connections", type=int_in(1), default=CONNECTIONS,
                   help=f"--routing connection: the clients, one connection each (default {CONNECTIONS})")
    c.add_argument("--connection-age", type=at_least(0.0), default=CONNECTION_AGE_S, metavar="S",
                   help="--routing connection: Triton closes each connection at this age, +-10%% (the operator's "
                        f"spec.runtime.grpcMaxConnectionAgeSeconds; default {CONNECTION_AGE_S:g}; 0: never)")
    c.add_argument("--window-s", type=positive_float, default=60.0,
                   help="rate() window, the CRD windowSeconds (default 60; Triton's p95 summary stays 60 s)")
    c.add_argument("--interval-s", type=at_least(1.0, "the CRD's intervalSeconds: whole seconds, 1-600"),
                   help="tritonscale tick (default: the CRD's intervalSeconds)")
    c.add_argument("--scale-down-stabilization-s", type=non_negative_float,
                   help="tritonscale scaleDown.stabilizationSeconds (default: the CRD default)")
    c.add_argument("--headroom", type=share, default=0.8,
                   help="baselines aim at this share of the measured capacity (default 0.8)")
    c.add_argument("--hpa-target", type=share, default=0.7, help="HPA GPU duty-cycle target (default 0.7)")
    c.add_argument("--static-replicas", type=int_in(1), help="static policy in --policy all (default: oracle's peak)")
    c.add_argument("--no-oracle", action="store_true", help="skip the oracle (no cost_vs_oracle)")
    c.add_argument("--jobs", type=int_in(1), default=default_jobs(), help="worker processes (default: up to 2)")

    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="JSON: one object, or a list with --policy all")
    o.add_argument("--plot", metavar="FILE.png", help="draw load, p95 vs target and replicas")
    o.add_argument("--decisions", metavar="FILE.csv",
                   help="write every autoscaler tick and its reason (with --suite: of every scenario, named "
                        "in a first column; with --batching-tuner, the tuner's verdict in a last column)")
    suite_command.add_arguments(p)
    record_given(p)


# Flags of one replay that the suite sets per scenario itself or does not vary, and why; and the
# suite's own flags, which one replay does not read. Either, given where it is not read, is an
# error rather than a flag silently dropped.
ONE_REPLAY_ONLY = {
    "shape": "the suite draws each traffic class itself", "rate": "the suite draws each traffic class itself",
    "rate_scale": "the suite scales each scenario to --peak-replicas",
    "rate_bin_s": "the suite scales each scenario to --peak-replicas", "seed": "use --seeds",
    "slo_ms": "use --slos", "policy": "the suite runs every policy", "cold_start_s": "use --cold-starts",
    "queue_timeout_us": "the suite runs the operator's default, twice each scenario's target",
    "initial_replicas": "the suite starts each scenario at the oracle's largest need within the first cold start",
    "static_replicas": "the suite sizes the static fleet for each scenario's peak",
    "no_oracle": "the suite scores every policy against the oracle",
    "scrape_s": "the suite runs the defaults", "window_s": "the suite runs the defaults",
    "interval_s": "the suite runs the CRD defaults", "scale_down_stabilization_s": "the suite runs the CRD defaults",
    "headroom": "the suite runs the baselines as documented",
    "hpa_target": "the suite runs the baselines as documented",
}
SUITE_ONLY = ("classes", "cold_starts", "slos", "seeds", "ranges", "peak_replicas", "check", "brief")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


AUTOSCALERS = ("tritonscale", "hpa", "keda", "kpa", "triton-queue", "slo-ratio")
# Flags that only some policies read, and which: given with another --policy, they would be dropped.
POLICY_FLAGS = {
    "interval_s": ("tritonscale",),
    "scale_down_stabilization_s": ("tritonscale",),
    "batching_tuner": ("tritonscale",),
    "hpa_target": ("hpa",),
    "headroom": ("keda", "kpa", "triton-queue"),  # the baselines sized from the measured capacity
    # what the autoscalers start from and read their metrics with; a static fleet and the oracle neither
    "initial_replicas": AUTOSCALERS,
    "scrape_s": AUTOSCALERS,
    "window_s": AUTOSCALERS,
}


def unread_flag(args: argparse.Namespace) -> str | None:
    """The first flag given (at any value, its default's too) that this mode does not read, as an
    error line."""
    defaults = vars(_parser().parse_args([]))

    def on_line(dest: str) -> bool:  # on the command line, at any value
        return was_given(args, dest, defaults[dest])

    if on_line("trace_unit") and not args.trace:
        return "--trace-unit reads the numbers of a --trace FILE; give one"
    if args.suite:
        for dest, why in ONE_REPLAY_ONLY.items():
            if on_line(dest):
                return f"{_flag(dest)} sets one replay, not --suite ({why})"
        return None
    for dest in SUITE_ONLY:
        if on_line(dest):
            return f"{_flag(dest)} is a --suite flag"
    given = {dest for dest in ("rate", "duration", "rate_bin_s", "static_replicas", "batching_apply",
                               "reload_pause_s") if on_line(dest)}
    if args.trace:
        for dest in sorted(given & {"rate", "duration"}):
            return f"{_flag(dest)} shapes a --shape; a --trace brings its own rate and span (scale it: --rate-scale)"
    if "rate_bin_s" in given and not (args.trace and args.rate_scale != 1):
        return "--rate-bin-s slices a --trace for --rate-scale; it sets nothing here"
    if "static_replicas" in given and args.policy != "all":
        return "--static-replicas sizes the static fleet of --policy all (alone: --policy static:N)"
    for dest in sorted(given & {"batching_apply", "reload_pause_s"}):
        if not args.batching_tuner:
            return f"{_flag(dest)} applies the batching tuner's changes: add --batching-tuner"
    if "reload_pause_s" in given and args.batching_apply != "reload":
        return "--reload-pause-s is the pause of --batching-apply reload; a rollout does not read it"
    if args.policy != "all":
        for dest, readers in POLICY_FLAGS.items():
            if on_line(dest) and args.policy not in readers:
                return (f"{_flag(dest)} is read by --policy {' or '.join(readers)} (or all); --policy {args.policy} "
                        "does not read it")
        if args.no_oracle and args.policy == "oracle":
            return "--no-oracle leaves out the oracle, which is what --policy oracle runs"
    return None


def run(args: argparse.Namespace) -> int:
    if not args.suite:
        try:  # first: which flags a policy reads depends on its name
            validate_name(args.policy)
        except ValueError as exc:
            print(f"tritonscale simulate: {exc}", file=sys.stderr)
            return 1
    unread = unread_flag(args)
    if unread:
        print(f"tritonscale simulate: {unread}", file=sys.stderr)
        return 1
    if args.suite:
        return suite_command.run(args)
    started = time.perf_counter()
    try:
        if args.slo_ms is None:
            raise ValueError("--slo-ms is required (or run --suite)")
        ensure_image("--plot", args.plot)
        ensure_parent("--decisions", args.decisions)
        ensure_distinct({"--plot": args.plot, "--decisions": args.decisions}, {"--trace": args.trace})
        if args.decisions and (args.policy == "oracle" or args.policy.startswith("static")):
            raise ValueError(f"--decisions: --policy {args.policy} makes no decisions (it never scales); "
                             "leave out --decisions or run an autoscaler (tritonscale, a baseline, or all)")
        opts = options_from_args(args)
        arrivals, horizon, what = load_arrivals(args)
        if len(arrivals) == 0:  # run_benchmark says so too, naming no flag
            scaled = "--rate-scale" if args.trace else "--rate"
            raise ValueError(f"no arrivals to simulate: {what} draws none; raise {scaled}")
        bench = run_benchmark(arrivals, horizon, args.policy, opts)
    except (ValueError, OSError) as exc:  # TraceError is a ValueError
        print(f"tritonscale simulate: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"tritonscale simulate: {OUT_OF_MEMORY}", file=sys.stderr)
        return 1
    rows = [o.summary for o in bench.outcomes]
    if args.json:
        print(to_json(rows, as_list=args.policy == "all",
                      extra={o.summary.policy: {"batcher_changes": batcher_changes(o)}
                             for o in bench.outcomes
                             if args.batching_tuner and o.summary.policy == "tritonscale"}))
    else:
        print(describe(bench, what, arrivals))
        print()
        print(table(rows, opts.slo_ms))
        if args.batching_tuner:
            print()
            print(describe_tunings(bench))
        print(f"\nwall time: {time.perf_counter() - started:.1f} s")
    # The files last: a failed write (a full disk) costs them, not the report above.
    try:
        if args.plot:
            write_output("--plot", args.plot, lambda p: plot(arrivals, horizon, bench.outcomes, opts.slo_ms, p))
        if args.decisions:
            write_output("--decisions", args.decisions, lambda p: write_decisions(bench, p))
    except ValueError as exc:
        print(f"tritonscale simulate: {exc}", file=sys.stderr)
        return 1
    return 0


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)


def _parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tritonscale simulate", description=__doc__.splitlines()[0])
    add_arguments(p)
    return p


def main_simulate(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    try:
        args = p.parse_args(argv)
    except ValueError as exc:
        print(f"tritonscale simulate: error: {exc} (see tritonscale simulate --help)", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main_simulate())
