"""The decider tests' shared fixtures: a policy, a fake model's cost line, observations and
decider memory with that cost line known."""

from __future__ import annotations

from dataclasses import replace

from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, Policy, State

POLICY = Policy(min_replicas=1, max_replicas=20, target_p95_ms=100.0, max_batch_size=16)
A_MS, B_MS = 20.0, 2.0  # the fake model: a batch of n costs a + b*n ms (saturates at 16/52 ms = 308 rps)
CAP = D.batch_capacity((A_MS, B_MS), 16, 100.0)  # ~288 rps, planned at 259 (the p95 capacity at 100 ms)


def ok(rate: float, p95: float | None = 50.0, pending: float = 0.0, batch: float | None = None,
       failed: float = 0.0) -> Observation:
    return Observation(status="ok", p95_ms=p95, rps=rate, recent_rps=rate + failed, failed_rps=failed,
                       pending=pending, batch_size=batch, batch_ms=None if batch is None else A_MS + B_MS * batch)


FAILED = Observation(status="failed", message="connection refused")
NO_DATA = Observation(status="no_data", message="no series")


def known_capacity(state: State | None = None, now: float = 0.0) -> State:
    """Memory with batch samples at two sizes: the cost line a + b*n is known."""
    state = state or State()
    s = D.add_batch_sample(state.batch_samples, 4.0, A_MS + 4 * B_MS, now)
    s = D.add_batch_sample(s, 12.0, A_MS + 12 * B_MS, now)
    return replace(state, batch_samples=s)


def rates(*pairs: tuple[float, float]) -> tuple[tuple[float, float, float], ...]:
    return tuple((t, r, r) for t, r in pairs)


def sawtooth(cycles: int) -> tuple[tuple[float, float, float], ...]:
    """From 600 rps, 4 rps/s for 180 s (to 1,260), an instant drop back and 120 s there; repeated."""
    out = []
    for k in range(cycles):
        out += [(300.0 * k + i, 600.0 + 4.0 * i) for i in range(0, 180, 15)]
        out += [(300.0 * k + 180.0 + i, 600.0) for i in range(0, 120, 15)]
    return rates(*out)
