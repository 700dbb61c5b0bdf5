"""One replay's inputs from ``tritonscale simulate``'s flags: the Options, held to the CRD's bounds as
the operator would hold the spec, and the arrivals (a --trace read, or a --shape drawn), each refused in
one line when it cannot be replayed or scored.
"""

from __future__ import annotations

import argparse

import numpy as np
from pydantic import ValidationError

from tritonscale.api.spec import ModelSpec, ScaleDownPolicy, ScalingSpec, default_queue_timeout_us, field_bounds
from tritonscale.simulate import arrivals as arrivals_mod
from tritonscale.simulate import suite_command
from tritonscale.simulate.arrivals import MAX_REPLAY_SPAN_S
from tritonscale.simulate.benchmark import Options, scaling_spec
from tritonscale.simulate.engine import ClusterConfig
from tritonscale.simulate.metrics_view import PromConfig
from tritonscale.simulate.replay_report import figure
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import ATTAINMENT_WINDOW_S
from tritonscale.simulate.suite_command import preferred_sizes

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


# ... and the most requests: each is an arrival and a latency (16 bytes) and more while it is served, so
# a billion is already more than a machine of tens of GB holds (numpy's Poisson draw also fails past ~1e19).
MAX_REQUESTS = 1e9
# A replay holds every request's arrival and latency, and per-second timelines, in memory.
OUT_OF_MEMORY = ("out of memory: the replay is too large for this machine -- too many requests or too long a "
                 "span (lower --rate, --rate-scale or --duration, or replay a shorter trace)")
