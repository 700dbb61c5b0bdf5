"""A queue delay that holds each replica well below what greedy batching serves: the decider's message says
so, and names the field (``capacity.undelayed_capacity``, ``steps.recommend``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Demand, Policy, State
from tritonscale.scaling.decider.capacity import GUESSED, undelayed_capacity

# The sandbox's model: a batch of n takes 20 + 15n ms, maxBatchSize 4, two batch sizes seen (slope known).
SANDBOX = replace(State(), batch_samples=((2.0, 50.0, 0.0), (4.0, 80.0, 0.0)))
# 20 + 5n ms, maxBatchSize 4.
TIGHT = replace(State(), batch_samples=((2.0, 30.0, 0.0), (4.0, 40.0, 0.0)))
# 20 + 2n ms, maxBatchSize 16: the suite's replica.
SUITE = replace(State(), batch_samples=((4.0, 28.0, 0.0), (16.0, 52.0, 0.0)))


def _policy(batch: int, target: float, delay: float, preferred: tuple[int, ...] = ()) -> Policy:
    return Policy(max_batch_size=batch, target_p95_ms=target, queue_delay_ms=delay, preferred_batch_sizes=preferred)


@pytest.mark.parametrize(("state", "policy", "named"), [
    # 150 ms of a 200 ms target: met only by a nearly idle replica (~1.2 rps); ~41 rps without the delay
    (SANDBOX, _policy(4, 200, 150), True),
    # a 2 ms delay, within the tolerance's share of the target (20 ms): not weighed
    (SANDBOX, _policy(4, 200, 2), False),
    (SANDBOX, _policy(4, 200, 20), False),
    # at a target of 1.5 full-batch times (20 + 5n ms, maxBatchSize 4, 60 ms) a 30 ms delay -- one batch of two's
    # time, which a greedy batcher would have used up by the time the instance frees -- costs ~72% (12 vs 42 rps)
    (TIGHT, _policy(4, 60, 30), True),
    # no delay at all
    (SANDBOX, _policy(4, 200, 0), False),
    # a 100 ms delay with preferred sizes at a 100 ms target costs the suite's replica ~15% (244 vs 288 rps)
    (SUITE, _policy(16, 100, 100, (4, 8, 16)), True),
    # at a 300 ms target the same delay costs nothing: both serve ~308 rps, saturation's share
    (SUITE, _policy(16, 300, 100, (4, 8, 16)), False),
    # a model that does not batch: the batcher's delay has nothing to hold
    (SANDBOX, _policy(1, 200, 150), False),
])
def test_the_delay_is_named_only_where_it_costs_more_than_the_tolerance(state: State, policy: Policy,
                                                                         named: bool) -> None:
    target = float(policy.target_p95_ms or 0)
    cap, source = D.capacity(state, policy, target)
    assert cap
    free = undelayed_capacity(state, policy, target, None, None, cap, source)
    if named:
        assert free is not None and free > cap * (1 + policy.tolerance), (cap, free)
        greedy, _ = D.capacity(state, replace(policy, queue_delay_ms=0.0), target)
        assert free == pytest.approx(greedy)
    else:
        assert free is None, (cap, free)


def test_a_capacity_guessed_from_one_batch_size_is_compared_on_the_same_guess() -> None:
    """One batch size of 4 (80 ms): the decider guesses 40 + 10n, and the delay is weighed on that guess."""
    state = replace(State(), batch_samples=((4.0, 80.0, 0.0),))
    policy = _policy(8, 200, 150)
    cap, source = D.capacity(state, policy, 200.0)
    assert source == GUESSED and cap
    free = undelayed_capacity(state, policy, 200.0, None, None, cap, source)
    assert free is not None and free > 2 * cap


def test_no_word_without_a_batch_cost() -> None:
    """A capacity from p95 alone (no batch statistics) says nothing of what the delay costs."""
    state = replace(State(), capacity_rps=50.0)
    policy = _policy(4, 200, 150)
    cap, source = D.capacity(state, policy, 200.0)
    assert source == "p95"
    assert undelayed_capacity(state, policy, 200.0, None, None, cap, source) is None


def test_the_message_names_the_delay_and_the_field() -> None:
    policy = _policy(4, 200, 150)
    step = D.recommend(Demand(70.0, 70.0, 0.0), 70.0, 75.0, 1.2, "batch cost", 1, policy, 41.4)
    assert step.reason == "LoadIncreased"
    assert step.why == ("70.0 rps now, planning 70.0 rps at ~1.2 rps per replica (batch cost) -- the 150 ms queue "
                        "delay holds it there, ~41.4 without it: lower batching.maxQueueDelayMicroseconds, or let "
                        "batching.autoTune choose it")
    plain = D.recommend(Demand(70.0, 70.0, 0.0), 70.0, 75.0, 41.4, "batch cost", 1, policy)
    assert "queue delay" not in plain.why


def test_decide_says_it_at_the_sandbox_step() -> None:
    """Through ``decide``: 70 rps on the sandbox's model with a 150 ms delay."""
    policy = replace(_policy(4, 200, 150), max_replicas=4)
    obs = D.Observation(status="ok", rps=70.0, recent_rps=70.0, p95_ms=230.0, batch_size=3.0, batch_ms=65.0,
                        pending=0.0)
    decision = D.decide(obs, D.Replicas(current=1, ready=1), policy, SANDBOX, now=1000.0)
    assert "the 150 ms queue delay holds it there" in decision.message, decision.message
    free = D.decide(obs, D.Replicas(current=1, ready=1), replace(policy, queue_delay_ms=0.0), SANDBOX, now=1000.0)
    assert "queue delay" not in free.message, free.message
