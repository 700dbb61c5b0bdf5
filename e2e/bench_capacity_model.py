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
``SAMPLE_EXCESS`` bounds.

A second table covers a queue delay longer than the batch time: 9 of the costs x delays of one and two
full-batch times x no preferred sizes or [4, 8, 16] (those within maxBatchSize) x targets of 2-6
full-batch times above the delay. There p95 is not monotone in the rate (light traffic waits out the
delay), so the replica's figure is ``simulate.capacity.robust_capacity_at_slo``: the largest rate that
meets the target with every rate down to ``ROBUST_SHARE`` of it meeting it too, as the model asks of its
sample (30,000 requests a rate: 64 rates and a bisection). Its columns: ``sample``, and ``decider``,
``batcher_model.delayed_capacity`` (the sample held within [sample / SAMPLE_EXCESS, sample] by the
heavy-traffic limit).

A benchmark, not a test: it asserts nothing (``tests/simulate/test_replica.py`` checks a few of these
points).
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
    ROBUST_SHARE,
    SAMPLE_EXCESS,
    capacity_at_target,
    delayed_capacity,
    greedy_capacity,
    greedy_p95_capacity,
)
from tritonscale.simulate.capacity import CALIBRATION_REQUESTS, capacity_at_slo, robust_capacity_at_slo  # noqa: E402
from tritonscale.simulate.replica import BatcherConfig  # noqa: E402

# (a ms, b ms per item, maxBatchSize): the suite's model first, then fixed-cost-heavy, per-item-heavy,
# small and large batches.
COSTS = [(20, 2, 16), (4, 3, 16), (40, 1, 16), (10, 1, 32), (20, 5, 4), (20, 15, 4), (5, 5, 8), (10, 10, 8),
         (20, 10, 8), (5, 20, 4), (50, 5, 8), (2, 2, 16)]
TARGETS = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0)  # x the full-batch time
DELAYED_COSTS = [(20, 2, 16), (4, 3, 16), (40, 1, 16), (10, 1, 32), (20, 5, 4), (20, 15, 4), (10, 10, 8),
                 (50, 5, 8), (2, 2, 16)]
DELAYS = (1.0, 2.0)  # x the full-batch time
DELAYED_REQUESTS = 30_000


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


def _delayed_row(args: tuple[float, float, int, float, bool, float]) -> tuple[str, float, float] | None:
    a, b, k, dmult, pref, mult = args
    full = a + b * k
    delay, target = dmult * full, mult * full
    preferred = tuple(p for p in (4, 8, 16) if p <= k) if pref else ()
    cfg = BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=delay, preferred=preferred)
    measured = robust_capacity_at_slo(cfg, target, ROBUST_SHARE, requests=DELAYED_REQUESTS)
    sample = capacity_at_target((a, b), k, target, delay, preferred, best_effort=False)
    if measured <= 0.0 or sample <= 0.0:  # a target the delay leaves no rate to meet, in either
        return None
    decider = delayed_capacity((a, b), k, target, delay, preferred)
    label = (f"{a:g} + {b:g}n ms, K={k}, delay {dmult:g}x{' [4,8,16]' if pref else ''}, {mult:g}x: "
             f"replica {measured:7.1f} rps")
    return label, sample / measured - 1.0, decider / measured - 1.0


def _table(title: str, names: tuple[str, ...], rows: list) -> None:
    print(title)
    print(f"{'':66}  " + " ".join(f"{n:>8}" for n in names))
    for label, *errs in rows:
        print(f"{label:66}  " + " ".join(f"{100 * e:+7.1f}%" for e in errs))
    for i, name in enumerate(names):
        col = sorted(r[1 + i] for r in rows)
        print(f"{name:>8}: least {100 * col[0]:+.1f}%, median {100 * col[len(col) // 2]:+.1f}%, "
              f"largest {100 * col[-1]:+.1f}% over {len(col)} points")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=CALIBRATION_REQUESTS, help="simulated requests per rate")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    started = time.perf_counter()
    work = [(a, b, k, m, args.requests) for a, b, k in COSTS for m in TARGETS]
    delayed = [(a, b, k, d, p, m) for a, b, k in DELAYED_COSTS for d in DELAYS for p in (False, True)
               for m in (2.0, 3.0, 4.0, 6.0) if d < m]
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        rows = [r for r in pool.map(_row, work) if r is not None]
        delayed_rows = [r for r in pool.map(_delayed_row, delayed) if r is not None]
    _table(f"capacity under greedy batching against the simulated replica ({args.requests:,} Poisson requests "
           f"per rate); SAMPLE_EXCESS = {SAMPLE_EXCESS:g}", ("closed", "sample", "decider"), rows)
    print()
    _table(f"capacity with a queue delay of 1-2 full-batch times against the simulated replica "
           f"({DELAYED_REQUESTS:,} Poisson requests per rate, rates down to {ROBUST_SHARE:g} of it meeting "
           f"the target too)", ("sample", "decider"), delayed_rows)
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
