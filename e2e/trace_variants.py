#!/usr/bin/env python
"""Four rearrangements of a real arrival trace, as stand-ins for real traces the decider was
never tuned on: the same bursts in another order and on other time scales.

    .venv/bin/python e2e/trace_variants.py OUTDIR [--trace FILE]
    .venv/bin/tritonscale simulate --suite --classes trace --trace OUTDIR/shift.txt --seeds 0, --json

- ``reverse``: played backwards (rises become falls);
- ``shift``: rotated by half its length (it opens in its busiest half, and the seam is a step);
- ``stretch``: twice as slow (the suite replays its first hour: the first half, stretched);
- ``squeeze``: twice as fast, played twice (bursts half as long).

Each file holds one arrival time (seconds from the first) per line, which ``--trace`` reads.
The default trace is ``../shared/data/azure-llm-conv-2023.csv`` beside the repository (Azure
LLM inference trace 2023, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024). A tool, not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))  # run from a checkout

from tritonscale.simulate.arrivals import load_trace  # noqa: E402

TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"


def variants(t: np.ndarray) -> dict[str, np.ndarray]:
    """The four rearrangements of arrival times ``t`` (sorted, starting at 0)."""
    span = float(t[-1])
    return {
        "reverse": span - t[::-1],
        "shift": np.sort((t + span / 2) % span),
        "stretch": 2.0 * t,
        "squeeze": np.concatenate([0.5 * t, 0.5 * t + 0.5 * span]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory for reverse.txt, shift.txt, stretch.txt, squeeze.txt")
    p.add_argument("--trace", type=Path, default=TRACE, help="the real trace (default: the shared Azure trace)")
    args = p.parse_args()
    if not args.trace.exists():
        print(f"trace_variants: {args.trace}: no such file", file=sys.stderr)
        return 1
    t = np.sort(load_trace(str(args.trace)))
    t = t - t[0]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, arr in variants(t).items():
        np.savetxt(args.out / f"{name}.txt", np.sort(arr) - float(np.min(arr)), fmt="%.4f")
        print(f"{args.out / name}.txt: {len(arr)} arrivals over {float(np.ptp(arr)):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
