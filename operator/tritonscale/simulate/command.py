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
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from tritonscale.api.spec import ModelSpec, ScaleDownPolicy, ScalingSpec, default_queue_timeout_us, field_bounds
from tritonscale.cli_numbers import at_least, int_in, non_negative_float, positive_float, share
from tritonscale.given_flags import record_given, was_given
from tritonscale.output_paths import ensure_distinct, ensure_image, ensure_parent, input_file_arg, write_output
from tritonscale.simulate import arrivals as arrivals_mod
from tritonscale.simulate import suite_command
from tritonscale.simulate.arrivals import MAX_REPLAY_SPAN_S
from tritonscale.simulate.benchmark import (
    Benchmark,
    Options,
    Outcome,
    default_jobs,
    fair_start,
    run_benchmark,
    scaling_spec,
)
from tritonscale.simulate.engine import (
    BATCHING_APPLY,
    CONNECTION_AGE_S,
    CONNECTIONS,
    RELOAD_PAUSE_S,
    ROUTINGS,
    ClusterConfig,
)
from tritonscale.simulate.metrics_view import PromConfig
from tritonscale.simulate.policies import POLICY_NAMES, validate_name
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S, plot, table, to_json
from tritonscale.simulate.suite_command import preferred_sizes


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
                        "with the new settings, maxSurge 25%% at a time, a cold start each) or 'reload' "
                        "(Triton's model-control reload, a pause per replica; default rollout)")
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


# The flags that set a field of the simulated service's spec.scaling (benchmark.scaling_spec).
SCALING_FLAGS = {"target_p95_milliseconds": "--slo-ms", "min_replicas": "--min-replicas",
                 "max_replicas": "--max-replicas", "interval_seconds": "--interval-s",
                 "scale_down": "--scale-down-stabilization-s"}
MAX_BATCH = field_bounds(ModelSpec, "max_batch_size")[1]
INTERVAL_S = field_bounds(ScalingSpec, "interval_seconds")  # the CRD's intervalSeconds range
WINDOW_S = field_bounds(ScalingSpec, "window_seconds")  # and windowSeconds


def options_from_args(args: argparse.Namespace) -> Options:
    if args.queue_timeout_us is not None and args.queue_timeout_us < 0:
        raise ValueError("--queue-timeout-us must be >= 0")
    suite_command.check_model_flags(args)
    suite_command.check_routing_flags(args)
    if args.min_replicas > args.max_replicas:
        raise ValueError(f"--min-replicas {args.min_replicas} is above --max-replicas {args.max_replicas}")
    timeout_us = (default_queue_timeout_us(args.slo_ms, args.max_queue_delay_us) if args.queue_timeout_us is None
                  else args.queue_timeout_us)
    if 0 < timeout_us <= args.max_queue_delay_us:  # the CRD's rule (api/rules.timeout_outlasts)
        raise ValueError(f"--queue-timeout-us {timeout_us:g} must be more than the queue delay "
                         f"(--max-queue-delay-us {args.max_queue_delay_us:g}), or 0 for none: Triton would reject "
                         "every request the batcher holds for the whole delay (the CRD refuses it too)")
    batcher = BatcherConfig(args.batch_base_ms, args.batch_item_ms, args.max_batch,
                            args.max_queue_delay_us / 1000.0,
                            preferred_sizes(args.preferred_batch_sizes, args.max_batch),
                            timeout_us / 1000.0 if timeout_us > 0 else None)
    cluster = ClusterConfig(batcher, args.cold_start_s, args.min_replicas, args.max_replicas,
                            PromConfig(args.scrape_s, args.window_s), args.reload_pause_s, args.batching_apply,
                            routing=args.routing, routing_seed=args.seed, connections=args.connections,
                            connection_age_s=args.connection_age)
    if args.initial_replicas is not None and not args.min_replicas <= args.initial_replicas <= args.max_replicas:
        raise ValueError(f"--initial-replicas: {args.initial_replicas} must be within --min-replicas..--max-replicas "
                         f"({args.min_replicas}..{args.max_replicas})")
    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    if args.static_replicas is not None and not args.min_replicas <= args.static_replicas <= args.max_replicas:
        raise ValueError(f"--static-replicas: {args.static_replicas} must be within --min-replicas..--max-replicas "
                         f"({args.min_replicas}..{args.max_replicas})")
    if args.interval_s is not None and (args.interval_s != round(args.interval_s)
                                        or not INTERVAL_S[0] <= args.interval_s <= INTERVAL_S[1]):
        raise ValueError(f"--interval-s: {args.interval_s:g}: the CRD's intervalSeconds is whole seconds, "
                         f"{INTERVAL_S[0]}-{INTERVAL_S[1]}")
    if args.window_s != round(args.window_s) or not WINDOW_S[0] <= args.window_s <= WINDOW_S[1]:
        raise ValueError(f"--window-s: {args.window_s:g}: the CRD's windowSeconds is whole seconds, "
                         f"{WINDOW_S[0]}-{WINDOW_S[1]}")
    if args.window_s < 2 * args.scrape_s:  # as the operator's NoData says: rate() would never have a value
        raise ValueError(f"--window-s {args.window_s:g} holds fewer than two scrapes at --scrape-s {args.scrape_s:g}: "
                         "rate() needs two samples in its window")
    if args.scale_down_stabilization_s is not None:
        try:  # the CRD's own bounds, from the API model
            ScaleDownPolicy(stabilization_seconds=round(args.scale_down_stabilization_s))
        except ValidationError as exc:
            raise ValueError(f"--scale-down-stabilization-s: {exc.errors()[0]['msg']}") from None
    if not 1 <= args.max_batch <= MAX_BATCH:
        raise ValueError(f"--max-batch must be within 1..{MAX_BATCH} (the CRD's model.maxBatchSize)")
    opts = Options(args.slo_ms, cluster, args.interval_s, args.scale_down_stabilization_s, args.headroom,
                   args.hpa_target, args.initial_replicas, args.static_replicas, not args.no_oracle, args.jobs,
                   args.seed, args.batching_tuner)
    try:  # the spec.scaling the run's tritonscale gets, within the CRD's bounds
        scaling_spec(opts)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else ""
        raise ValueError(f"{SCALING_FLAGS.get(field, field)}: {err['msg']} (the CRD's spec.scaling bounds)") from None
    return opts


def load_arrivals(args: argparse.Namespace) -> tuple[np.ndarray, float, str]:
    """(arrivals, horizon, description)."""
    if args.rate_scale <= 0:
        raise ValueError("--rate-scale must be > 0")
    if args.shape and args.duration > MAX_REPLAY_SPAN_S:
        raise ValueError(f"--duration: {args.duration:g} s; a replay takes at most {MAX_REPLAY_SPAN_S:g} s "
                         f"({MAX_REPLAY_SPAN_S / 86400:g} days)")
    # (the shapes draw per second: a run shorter than one is drawn as one)
    requests = args.rate * args.rate_scale * max(args.duration, 1.0)
    if args.shape and requests > MAX_REQUESTS:
        raise ValueError(f"--rate: {args.rate * args.rate_scale:g} rps for {args.duration:g} s is {requests:.3g} "
                         f"requests; a replay holds at most {MAX_REQUESTS:.0e} (lower --rate, --rate-scale or "
                         "--duration)")
    # Shorter than one window, a replay has nothing to score or scale on: its p95 is scored per 60 s
    # window and the autoscalers' rate() spans --window-s (a 30 s shape scored "100.0% (1/1)" windows)
    least = max(args.window_s, ATTAINMENT_WINDOW_S)
    if args.shape and args.duration < least:
        raise ValueError(f"--duration: {args.duration:g} s, less than one {least:g} s window (p95 is scored per "
                         f"{ATTAINMENT_WINDOW_S:g} s, rate() over --window-s {args.window_s:g}): nothing to scale on "
                         "or score")
    if args.trace:
        trace = arrivals_mod.read_trace(args.trace, args.trace_unit)
        raw = trace.times
        if len(raw) * args.rate_scale > MAX_REQUESTS:
            raise ValueError(f"--rate-scale: {args.rate_scale:g} x {len(raw):,} arrivals is "
                             f"{len(raw) * args.rate_scale:.3g} requests; a replay holds at most {MAX_REQUESTS:.0e}")
        if float(raw[-1]) <= 0.0:
            raise ValueError(f"{args.trace}: all {len(raw)} arrival(s) at one instant: a trace must span some time")
        if float(raw[-1]) > MAX_REPLAY_SPAN_S:  # the replay steps through every second of it
            raise ValueError(f"{args.trace}: its arrivals span {raw[-1] / 86400:.3g} days; a replay takes at most "
                             f"{MAX_REPLAY_SPAN_S / 86400:g} (cut the trace, or run --suite, which replays its first "
                             f"--duration s)" + _refusal_hint(trace, args.trace_unit, "ms"))
        # the same for a trace (a Mooncake file in seconds, read as its milliseconds, replayed 1,465 requests
        # in 0.3 s)
        if float(raw[-1]) < least:
            raise ValueError(f"{args.trace}: its arrivals span {figure(float(raw[-1]))} s, less than one {least:g} s "
                             f"window (p95 is scored per {ATTAINMENT_WINDOW_S:g} s, rate() over --window-s "
                             f"{args.window_s:g}): nothing to scale on or score"
                             + _refusal_hint(trace, args.trace_unit, "s"))
        t = arrivals_mod.rate_scale(raw, args.rate_scale, args.rate_bin_s, args.seed)
        what = f"{args.trace}" + (f" x{args.rate_scale:g} (Poisson per {args.rate_bin_s:g} s, seed {args.seed})"
                                  if args.rate_scale != 1 else "") + read_as(trace, args.trace_unit)
        return t, float(raw[-1]), what
    if args.shape:
        t = arrivals_mod.shape_arrivals(args.shape, args.rate * args.rate_scale, args.duration, args.seed)
        return t, args.duration, f"shape {args.shape} at {args.rate * args.rate_scale:g} rps (seed {args.seed})"
    raise ValueError("give --trace FILE or --shape NAME")


def read_as(trace: arrivals_mod.Trace, given: str | None) -> str:
    """How a trace's values were read, for the arrivals line: nothing for ISO timestamps, the unit of
    its numbers otherwise -- the form's default with the flag that changes it (a file of milliseconds
    read as seconds replayed 300 s as 3.5 days, and said only "mean 0 rps")."""
    if not trace.unit:
        return ""
    words = arrivals_mod.UNIT_WORDS[trace.unit]
    if trace.by_size:
        return f" (timestamps read as Unix time in {words}, by their size)"
    if given is not None:
        return f" (timestamps read as {words}, --trace-unit {given})"
    other = _other_unit(trace, given)
    return f" (timestamps read as {words}" + (f"; {_unit_hint(other)})" if other else ")")


def _other_unit(trace: arrivals_mod.Trace, given: str | None) -> str | None:
    """The unit a trace's numbers are as likely to be in, when the form's default read them: ms for
    seconds, s for JSON's milliseconds (the two units traces are written in); else None."""
    if not trace.unit or trace.by_size or given is not None:
        return None
    return {"s": "ms", "ms": "s"}.get(trace.unit)


def _unit_hint(unit: str) -> str:
    return f"--trace-unit {unit} if they are {arrivals_mod.UNIT_WORDS[unit]}"


def _refusal_hint(trace: arrivals_mod.Trace, given: str | None, want: str) -> str:
    """For a span refused as too long (want "ms") or too short (want "s"): the flag that would read it
    in that unit, when the default read it."""
    if _other_unit(trace, given) != want:
        return ""
    return f"; its timestamps are read as {arrivals_mod.UNIT_WORDS[trace.unit]}: {_unit_hint(want)}"


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


# ... and the most requests: each is an arrival and a latency (16 bytes) and more while it is served, so
# a billion is already more than a machine of tens of GB holds (numpy's Poisson draw also fails past ~1e19).
MAX_REQUESTS = 1e9
# A replay holds every request's arrival and latency, and per-second timelines, in memory.
OUT_OF_MEMORY = ("out of memory: the replay is too large for this machine -- too many requests or too long a "
                 "span (lower --rate, --rate-scale or --duration, or replay a shorter trace)")


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
