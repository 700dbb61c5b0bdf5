#!/usr/bin/env python
"""How far the decider's per-replica capacity under greedy batching is from the simulated replica's,
over a grid of batch costs and targets. Printed as figures.

    .venv/bin/python e2e/bench_capacity_model.py [--requests N] [--jobs N]

For each batch cost a + b*n ms and maxBatchSize K of the grid, and each target of 1.5-6 full-batch
times (a + b*K), it measures the rate at which one simulated replica's p95 reaches the target
(``simulate.capacity.capacity_at_slo``: Poisson arrivals, no queue delay, bisection) and prints,
as a share above or below it:

* ``closed``: ``batcher_model.greedy_p95_capacity``, the closed form (two regimes and an M/D/1 floor);
* ``sample``: ``batcher_model.capacity_at_target``, Triton's rule over the model's 2,000-arrival sample;
* ``decider``: ``batcher_model.greedy_capacity``, the closed form held within [sample / SAMPLE_EXCESS,
  sample] -- what the decider plans with.

Then the least, median and largest of each column. The ``sample`` column's largest is what
``SAMPLE_EXCESS`` bounds. A benchmark, not a test: it asserts nothing (``tests/simulate/test_replica.py``
checks a few of these points).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.scaling.decider.batcher_model import (  # noqa: E402
    SAMPLE_EXCESS,
    capacity_at_target,
    greedy_capacity,
    greedy_p95_capacity,
)
from tritonscale.simulate.capacity import CALIBRATION_REQUESTS, capacity_at_slo  # noqa: E402
from tritonscale.simulate.replica import BatcherConfig  # noqa: E402

# (a ms, b ms per item, maxBatchSize): the suite's model first, then fixed-cost-heavy, per-item-heavy,
# small and large batches.
COSTS = [(20, 2, 16), (4, 3, 16), (40, 1, 16), (10, 1, 32), (20, 5, 4), (20, 15, 4), (5, 5, 8), (10, 10, 8),
         (20, 10, 8), (5, 20, 4), (50, 5, 8), (2, 2, 16)]
TARGETS = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0)  # x the full-batch time


def _row(args: tuple[float, float, int, float, int]) -> tuple[str, float, float, float] | None:
    a, b, k, mult, requests = args
    target = mult * (a + b * k)
    cfg = BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=0.0, preferred=())
    try:
        measured = capacity_at_slo(cfg, target, requests=requests).capacity_rps
    except ValueError:  # a target even an idle replica misses
        return None
    closed = greedy_p95_capacity((a, b), k, target)
    sample = capacity_at_target((a, b), k, target, 0.0, ())
    decider = greedy_capacity((a, b), k, target)
    label = f"{a:g} + {b:g}n ms, K={k}, {mult:g}x ({target:g} ms): replica {measured:7.1f} rps"
    return label, closed / measured - 1.0, sample / measured - 1.0, decider / measured - 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=CALIBRATION_REQUESTS, help="simulated requests per rate")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    started = time.perf_counter()
    work = [(a, b, k, m, args.requests) for a, b, k in COSTS for m in TARGETS]
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        rows = [r for r in pool.map(_row, work) if r is not None]
    print(f"capacity under greedy batching against the simulated replica ({args.requests:,} Poisson requests "
          f"per rate); SAMPLE_EXCESS = {SAMPLE_EXCESS:g}")
    print(f"{'':62}  {'closed':>8} {'sample':>8} {'decider':>8}")
    for label, *errs in rows:
        print(f"{label:62}  " + " ".join(f"{100 * e:+7.1f}%" for e in errs))
    for i, name in enumerate(("closed", "sample", "decider")):
        col = sorted(r[1 + i] for r in rows)
        print(f"{name:>8}: least {100 * col[0]:+.1f}%, median {100 * col[len(col) // 2]:+.1f}%, "
              f"largest {100 * col[-1]:+.1f}% over {len(col)} points")
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
