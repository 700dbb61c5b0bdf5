"""The burst memory: how many unforeseen rises engage it, how long it holds the highest need seen
after the last of them, and the sudden falls it also counts (``stabilize`` holds what it says)."""

from __future__ import annotations

from dataclasses import replace

from tritonscale.scaling.decider import constants as C
from tritonscale.scaling.decider.model import Demand, State
from tritonscale.scaling.decider.rate_model import cold_start, noise_now


def surprise_cost(state: State, interval_s: float) -> tuple[float, float]:
    """(what one surprise costs, the budget for them), in seconds of missed time: a surprise
    costs about one horizon (cold start + tick) before the replicas it asks for are ready, and
    the budget is SURPRISE_BUDGET of the burst memory's span, MAX_BURST_HOLD_S -- the share of
    it a 90% window objective affords."""
    return cold_start(state) + interval_s, C.SURPRISE_BUDGET * C.MAX_BURST_HOLD_S


def surprises_for_memory(state: State, interval_s: float) -> int:
    """How many surprises engage the burst memory: SURPRISES_FOR_MEMORY (a single one may be a
    one-off), or the first already when one more would take the shortfall past the window budget
    (``surprise_cost``; a long cold start spends it in one surprise)."""
    cost, budget = surprise_cost(state, interval_s)
    affordable = int(budget // cost)  # surprises within budget
    return max(1, min(int(C.SURPRISES_FOR_MEMORY), affordable))


def burst_hold(state: State, now: float, interval_s: float) -> float:
    """How long the burst memory holds the peak need after the last surprise (0: no surprise):
    SURPRISE_HOLD_COLD_STARTS cold starts, or BURST_HOLD_GAPS x the longest gap between the
    surprises remembered if longer -- and MAX_BURST_HOLD_S, its longest, once those surprises have
    spent the window budget (``surprise_cost``): a few short gaps say little about the next one,
    and where one more surprise would break the objective, capacity held costs less than a guess
    that ends too soon.
    ``interval_s``: the policy's tick."""
    if len(state.surprises) < surprises_for_memory(state, interval_s):
        return 0.0
    hold = C.SURPRISE_HOLD_COLD_STARTS * cold_start(state)
    gaps = [b - a for a, b in zip(state.surprises, state.surprises[1:], strict=False)]
    if gaps:
        hold = max(hold, C.BURST_HOLD_GAPS * max(gaps))
    cost, budget = surprise_cost(state, interval_s)
    if len(state.surprises) * cost >= budget:
        hold = C.MAX_BURST_HOLD_S  # the surprises remembered have spent the window budget
    hold = min(hold, C.MAX_BURST_HOLD_S)
    return hold if now - state.surprises[-1] <= hold else 0.0


def sudden_fall(state: State, d: Demand, now: float, cap: float | None, interval_s: float,
                sigma: float | None = None) -> State:
    """Record a sudden fall as a surprise, where one surprise engages the burst memory (long cold
    starts: ``surprises_for_memory`` is 1) and the memory holds nothing yet. Sudden: the rate now
    is below every reading of the minute before (LEVEL_S) by more than its noise, and at least one
    replica's planned capacity below the highest of them -- a step down, not a slope (a diurnal
    descent frees no replica within a minute) nor the end of a 10 s burst (the minute before
    holds the level it returns to). A jump down shows the traffic moves in jumps as large; where
    a cold start is so long that one unforeseen jump up spends the window budget, the burst
    memory then keeps the need from before the fall, and a return to it costs no missed windows.
    Shorter cold starts wait for two surprises, which a fall does not stand in for. ``sigma``: the
    rate's ``noise`` now, if the caller has it."""
    if not cap or surprises_for_memory(state, interval_s) != 1 or burst_hold(state, now, interval_s) > 0.0:
        return state
    before = [e[1] for e in state.rates[:-1] if now - e[0] <= C.LEVEL_S]
    if not before or d.rate + C.NOISE_Z * noise_now(state, now, sigma) >= min(before) \
            or max(before) - d.rate < cap * C.UTILISATION:
        return state
    return replace(state, surprises=(state.surprises + (now,))[-C.MAX_SURPRISES:])
