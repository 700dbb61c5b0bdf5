#!/usr/bin/env python
"""The batching tuner's evaluation in the simulator (issue 13's done-when), printed as figures.

For every scenario -- traffic class x SLO (tight, loose) x seed at one cold start -- tritonscale runs
from two poor batcher configs (no queue delay and no preferred sizes; a delay as long as the p95
target) with and without the tuner, and with every static config of the grid (delays 0-100 ms x
preferred sizes none, [4,8,16], [16]); see ``tritonscale.simulate.tuner_suite``. Same as
``tritonscale simulate --suite --batching-tuner`` on this matrix; kept out of CI (the full grid is
~25 runs per scenario: ~8 min for the default matrix on 2 cores).

    .venv/bin/python e2e/bench_batching_tuner.py [--seeds 0,1] [--cold-start 60] [--trace FILE] [--json out.json]
    .venv/bin/python e2e/bench_batching_tuner.py --batch-base-ms 5 --batch-item-ms 5 --max-batch 8   # another model
    .venv/bin/python e2e/bench_batching_tuner.py --from-json out.json   # a stored run's verdicts, counted again
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

from tritonscale.cli_numbers import int_in, non_negative_float  # noqa: E402
from tritonscale.simulate import traffic, tuner_suite  # noqa: E402
from tritonscale.simulate.replay_inputs import MAX_BATCH  # noqa: E402
from tritonscale.simulate.replica import BatcherConfig  # noqa: E402
from tritonscale.simulate.suite import DEFAULT_TRACE, SuiteConfig, benchmark_trace  # noqa: E402
from tritonscale.simulate.suite_command import check_batch_cost, preferred_sizes, stderr_progress  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1", help="comma list (default 0,1)")
    p.add_argument("--slos", default="tight,loose")
    p.add_argument("--cold-start", type=float, default=60.0)
    p.add_argument("--classes", default=",".join(traffic.CLASSES))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    p.add_argument("--trace", type=Path,
                   help="the trace class's real trace (default ../shared/data/azure-llm-conv-2023.csv)")
    # the replica model (a batch of n costs a + b*n ms), as `tritonscale simulate --suite` takes it; the load of
    # each scenario is scaled by its default batcher config (a 2 ms delay, the preferred sizes of 4,8,16 within it)
    defaults = BatcherConfig()
    p.add_argument("--batch-base-ms", type=non_negative_float, default=defaults.base_ms,
                   help=f"a (default {defaults.base_ms:g})")
    p.add_argument("--batch-item-ms", type=non_negative_float, default=defaults.per_item_ms,
                   help=f"b (default {defaults.per_item_ms:g})")
    p.add_argument("--max-batch", type=int_in(1, MAX_BATCH), default=defaults.max_batch,
                   help=f"max_batch_size (default {defaults.max_batch})")
    p.add_argument("--from-json", metavar="FILE", type=Path,
                   help="judge a run stored with --json again, with the verdicts as they are counted now (no "
                        "simulation)")
    args = p.parse_args(argv)
    if args.from_json is not None:
        try:
            results = tuner_suite.from_dict(json.loads(args.from_json.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"bench_batching_tuner: --from-json {args.from_json}: not a stored run ({exc!r})", file=sys.stderr)
            return 1
        print(tuner_suite.text(results))
        return 0
    try:
        check_batch_cost(args)
    except ValueError as exc:
        p.error(str(exc))
    batcher = BatcherConfig(args.batch_base_ms, args.batch_item_ms, args.max_batch, defaults.max_queue_delay_ms,
                            preferred_sizes(None, args.max_batch))
    classes = tuple(c for c in args.classes.split(",") if c)
    try:
        trace, kept = benchmark_trace(classes, args.trace, REPO)
    except ValueError as exc:
        print(f"bench_batching_tuner: {exc}", file=sys.stderr)
        return 1
    if kept != classes:  # a checkout without ../shared beside it: run the synthetic classes, and say so
        print(f"bench_batching_tuner: no trace at {REPO / DEFAULT_TRACE}: the trace class is skipped "
              "(--trace names one)", file=sys.stderr)
    cfg = SuiteConfig(classes=kept, cold_starts=(args.cold_start,), slos=tuple(args.slos.split(",")),
                      seeds=tuple(int(s) for s in args.seeds.split(",")), batcher=batcher, trace_path=trace,
                      jobs=args.jobs)
    started = time.perf_counter()
    results = tuner_suite.run_tuner_suite(cfg, progress=stderr_progress("bench_batching_tuner", started))
    print(tuner_suite.text(results))
    print(f"\nwall time: {time.perf_counter() - started:.0f} s on {os.cpu_count()} CPU(s), {cfg.jobs} worker(s)")
    if args.json:
        Path(args.json).write_text(json.dumps(tuner_suite.to_dict(results), indent=1))
    return 0  # a benchmark: the verdicts are figures in the text above, not its exit code


if __name__ == "__main__":
    sys.exit(main())
