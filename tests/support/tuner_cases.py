"""The batching tuner's tests' shared settings: the suite's replica model, its SLOs and the poor starting
configs the tuner is judged from."""

from __future__ import annotations

from tritonscale.scaling.batching_tuner import Bounds, Settings

COST = (20.0, 2.0)  # the simulator's and the sandbox's model: 20 ms + 2 ms per item, max batch 16
TIGHT, LOOSE = 104.0, 312.0  # the suite's SLOs: 2x and 6x the full-batch time
B16 = Bounds(16)
GREEDY, OVERSIZED, DEFAULT = Settings(0, ()), Settings(100_000, ()), Settings(2000, (4, 8, 16))
# At TIGHT and 150 rps per replica (the tuner tests' rate): OVERSIZED has no capacity at all (no rate meets the
# target: predicted p95 144 ms), MISSING some (62 rps) but is predicted over the target at that rate (114 ms),
# SLOW is predicted within it (103 ms) with less capacity than GREEDY (166 against 265 rps)
MISSING, SLOW = Settings(70_000, ()), Settings(60_000, ())
