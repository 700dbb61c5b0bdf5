"""The pure decider, step by step (limit and clamp, and maxBatchSize in items against readings in requests): a
table (or a few cases) per step of the pipeline; split from test_decider.py. Scenarios over time are in
test_decider_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from support.decider_cases import CAP, FAILED, NO_DATA, POLICY, ok
from tritonscale.api.spec import ScalingSpec
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, PendingReading, Policy, Replicas, State, Step


# --- steps: limit and clamp --------------------------------------------------------------------
@pytest.mark.parametrize(("rec", "current", "replicas"), [(12, 2, 6), (1, 8, 7), (5, 4, 5)])
def test_limit(rec, current, replicas):
    assert D.limit(Step(rec, "x", ""), current, POLICY).replicas == replicas


@pytest.mark.parametrize(("rec", "rep", "policy", "replicas", "reason"), [
    (0, Replicas(3, 3), replace(POLICY, min_replicas=2, warm_buffer=1), 3, "x"),
    (25, Replicas(18, 18), POLICY, 20, "AtMaxReplicas"),
    (6, Replicas(4, 3, unschedulable=1), POLICY, 4, "Unschedulable"),  # no more Pending pods
    (3, Replicas(4, 3, unschedulable=1), POLICY, 3, "x"),  # scale-down still allowed
    # a lower recommendation held at the floor is no decrease; down to the floor still is one
    (0, Replicas(3, 3), replace(POLICY, min_replicas=2, warm_buffer=1), 3, "AtWarmFloor"),
    (0, Replicas(5, 5), replace(POLICY, min_replicas=2, warm_buffer=1), 3, "LoadDecreased"),
    # maxReplicas lowered below the fleet: the bound decides, and says so (it read "scaled down from 3 to 1:
    # Steady: ... -> 1 replica", seen by an exploratory review)
    (3, Replicas(3, 3), replace(POLICY, max_replicas=1), 1, "AtMaxReplicas"),
])
def test_clamp(rec, rep, policy, replicas, reason):
    given = {"AtMaxReplicas": "LoadIncreased", "AtWarmFloor": "LoadDecreased", "LoadDecreased": "LoadDecreased"}
    step = D.clamp(Step(rec, given.get(reason, "x"), ""), rep, policy)
    assert (step.replicas, step.reason) == (replicas, reason)
    if reason == "AtMaxReplicas" and replicas < rep.current:
        assert step.why.endswith(f"; lowering to maxReplicas={policy.max_replicas}"), step.why


@pytest.mark.parametrize(("rec", "rep", "replicas", "reason"), [
    (1, Replicas(1, 1, draining=1), 2, "DrainSurge"),  # the warm floor on a node being drained: one more first
    (3, Replicas(4, 4, draining=2), 5, "DrainSurge"),
    (19, Replicas(19, 19, draining=3), 20, "DrainSurge"),  # within maxReplicas
    (20, Replicas(20, 20, draining=1), 20, "x"),  # no room: the drain waits, as before
    (1, Replicas(2, 1, unschedulable=1, draining=1), 2, "DrainSurge"),  # its pod waits for room: kept, no flap
    (1, Replicas(1, 1, unschedulable=1, draining=1), 1, "x"),  # pods Pending already: none added
    (3, Replicas(3, 3), 3, "x"),
])
def test_drain_surge(rec, rep, replicas, reason):
    step = D.drain_surge(Step(rec, "x", ""), rep, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


def test_a_drain_surges_through_a_held_decision_too():
    """A Prometheus outage holds the count; a drain still gets its surge (applied to every decision)."""
    d = D.decide(FAILED, Replicas(1, 1, draining=1), POLICY, State(), 0.0)
    assert (d.replicas, d.reason, d.state.drain_surge) == (2, "DrainSurge", 1)
    # drained: the hold keeps the count without the surge, which goes (it stayed for good)
    after = D.decide(FAILED, Replicas(2, 2), POLICY, d.state, 15.0)
    assert (after.replicas, after.reason, after.state.drain_surge) == (1, "MetricsUnavailable", 0)
    assert after.message.startswith("holding 1 replica: metric source failed"), after.message
    assert D.decide(FAILED, Replicas(2, 2), POLICY, State(), 15.0).replicas == 2  # no memory of a surge: held


@pytest.mark.parametrize("obs", [FAILED, Observation(status="no_data", message="no series")])
def test_a_held_fleet_surges_once_per_drain_and_comes_back_when_it_ends(obs):
    """While the metrics fail (or no series), each tick of a drain added its pods again on top of the last
    surge, up to maxReplicas, and when the drain ended the hold kept them all (an exploratory audit: floor 3,
    a node of 3 cordoned, 6 held for good after the uncordon)."""
    policy = replace(POLICY, min_replicas=3, max_replicas=12)
    d = D.decide(obs, Replicas(3, 3, draining=3), policy, State(), 0.0)
    assert (d.replicas, d.reason, d.state.drain_surge) == (6, "DrainSurge", 3)
    for t in (15.0, 30.0, 45.0):  # the drain goes on: 6, not 9 and 12
        d = D.decide(obs, Replicas(6, 6, draining=3), policy, d.state, t)
        assert (d.replicas, d.state.drain_surge) == (6, 3)
    d = D.decide(obs, Replicas(6, 6, draining=1), policy, d.state, 60.0)  # two of its pods evicted
    assert (d.replicas, d.state.drain_surge) == (4, 1)
    d = D.decide(obs, Replicas(4, 4), policy, d.state, 75.0)  # the drain is over
    assert (d.replicas, d.state.drain_surge) == (3, 0)
    d = D.decide(obs, Replicas(3, 3), policy, d.state, 90.0)
    assert d.replicas == 3


def test_state_roundtrips_through_status_dict():
    st = State(recommendations=((1.0, 3, 2),), failures=2, capacity_rps=12.5, batch_samples=((4.0, 28.0, 1.0),),
               last_scale_time=5.0, rates=((1.0, 10.0, 12.0),), cold_start_s=42.0, surprises=(3.0,),
               last_pending=PendingReading(1.0, 7.0, 2.0), last_batch_size=4.0, raised_on_guess=True, drain_surge=2)
    assert State.from_dict(st.to_dict()) == st
    # only a JSON true is the flag: a hand-edited "true" or 1, or a memory written before it, is not
    for edited in ({"raisedOnGuess": "true"}, {"raisedOnGuess": 1}, {}):
        assert State.from_dict({**st.to_dict(), **edited} if edited else
                               {k: v for k, v in st.to_dict().items() if k != "raisedOnGuess"}) == \
            replace(st, raised_on_guess=False), edited
    assert State.from_dict({"rates": "garbage"}) == State()  # corrupt memory: start fresh
    for corrupt in ({"recommendations": [{"t": 1.0, "r": 4}]}, {"capacityRps": "lots"}, {"rates": [None]},
                    {"lastScaleTime": [1]}):
        assert State.from_dict(corrupt) == State(), corrupt
    # non-finite numbers (which would be written back as Infinity/NaN, a patch the API server refuses)
    # and times no RFC 3339 string can carry
    for corrupt in ({"coldStartSeconds": "inf"}, {"capacityRps": "nan"}, {"lastScaleTime": 1e12 * 1000},
                    {"rates": [[1.0, "nan", 2.0]]}):
        assert State.from_dict(corrupt) == State(), corrupt
    # a queueing entry of a development version's three fields is dropped, not the whole memory
    old = State.from_dict({"coldStartSeconds": 180.0, "queueing": [[1.0, 0.5, 2.0]]})
    assert old.cold_start_s == 180.0 and old.queueing == ()
    # numbers written as strings (a hand edit) read as the numbers they are
    assert State.from_dict({"capacityRps": "10"}).capacity_rps == 10.0
    assert State.from_dict({"recommendations": [[1.0, 4]]}).recommendations == ((1.0, 4, 4),)  # old format


def test_a_memory_of_numbers_no_tick_writes_starts_fresh_and_decides():
    """Numbers past model.MAX_REMEMBERED in a hand-edited memory: 1e300 rates overflowed the trend's sums, and
    1.7e308 ms a batch model's range, on every tick; a capacity of 5e-324 overflowed a division (session 104's
    fuzzing of status). Past the bound the memory starts afresh; below MIN_REMEMBERED a number reads as 0."""
    import json

    now = 1.75e9
    for corrupt in ({"rates": [[now - 15 * k, 1e300, 1e300] for k in (1, 2, 3)]},
                    {"batchSamples": [[1e300, 1.0, now]]}, {"batchSamples": [[40, 1.7e308, now], [40, 1, now]]},
                    {"lastPending": [1e300, 1.0]}, {"rates": [[now - 15, -1e13, 0.0]]}):
        assert State.from_dict(corrupt) == State(), corrupt
    tiny = State.from_dict({"capacityRps": 5e-324, "coldStartSeconds": 60.0})
    assert (tiny.capacity_rps, tiny.cold_start_s) == (0.0, 60.0)
    policy = Policy(min_replicas=2, warm_buffer=1, max_replicas=8, target_p95_ms=100.0, max_batch_size=1)
    for obs in (Observation("ok", rps=40.0, pending=0.0, pods=4.0),
                Observation("ok", p95_ms=60.0, rps=80.0, pending=2.0, batch_size=4.0, batch_ms=28.0, pods=4.0)):
        d = D.decide(obs, Replicas(4, 4), policy, tiny, now)
        assert 3 <= d.replicas <= 8
        json.dumps(d.state.to_dict(), allow_nan=False)  # a memory the API server takes back


def test_breach_with_a_draining_queue_adds_nothing():
    """The queue left by a burst, with arrivals now below what the ready replicas serve: it drains."""
    draining = D.Demand(900.0, 900.0, 2000.0, growth=-150.0)
    step = D.breach(Step(4, "Steady", ""), ok(900, p95=300, pending=2000), Replicas(4, 4), CAP, POLICY, draining)
    assert (step.replicas, step.reason) == (4, "Steady")
    behind = D.Demand(1300.0, 1300.0, 2000.0, growth=+20.0)  # arrivals above 4 x 300: the queue grows
    step = D.breach(Step(4, "Steady", ""), ok(1300, p95=300, pending=2000), Replicas(4, 4), CAP, POLICY, behind)
    assert (step.replicas, step.reason) == (5, "LatencyAboveTarget")
    stuck = D.Demand(900.0, 900.0, 2000.0, growth=0.0)  # not shrinking: the estimate must be off, more
    step = D.breach(Step(4, "Steady", ""), ok(900, p95=300, pending=2000), Replicas(4, 4), CAP, POLICY, stuck)
    assert step.replicas == 5

def test_scale_down_keeps_the_tolerance_as_hysteresis():
    # 3 replicas, a load that 2 would carry only at 96% of plan: stay at 3 (a wobble would flip 2-3-2)
    planned = 2 * CAP * D.UTILISATION * 0.96
    step = D.tolerate(Step(2, "LoadDecreased", ""), planned, CAP, 3, POLICY)
    assert step.replicas == 3
    # a load 2 carry at 80% of plan: down to 2
    step = D.tolerate(Step(2, "LoadDecreased", ""), 2 * CAP * D.UTILISATION * 0.8, CAP, 3, POLICY)
    assert step.replicas == 2


def test_a_fallback_raised_to_the_floor_says_both_numbers():
    """fallbackReplicas 2 below a warm floor of 3: it runs 3, and says that 3 is not the spec's 2."""
    policy = replace(POLICY, min_replicas=2, warm_buffer=1, fallback_replicas=2)
    step, _, _ = D.guard(FAILED, Replicas(3, 3), policy, State(failures=2))
    assert (step.replicas, step.reason) == (3, "FallbackAfterFailures")
    assert "running 3 replicas (fallbackReplicas=2, within the warm floor 3 and maxReplicas" in step.why
    exact, _, _ = D.guard(FAILED, Replicas(3, 3), replace(policy, fallback_replicas=4), State(failures=2))
    assert "running fallbackReplicas=4:" in exact.why


@pytest.mark.parametrize(("v", "text"), [(150.0, "150"), (10.4, "10"), (2.5, "2.5"), (0.5, "0.5"), (0.001, "0.001"),
                                          (0.0, "0")])
def test_ms_text_keeps_sub_millisecond_latencies(v, text):
    """A target of 0.5 ms read "target 0 ms" in the breach message."""
    assert D.steps.ms_text(v) == text


def test_a_held_decision_past_the_bounds_says_the_bound_not_holding():
    """maxReplicas lowered below the fleet while the service had no data read "NoData: holding 4 replicas
    ... -> 2 replicas" (found on the real control plane by an exploratory review)."""
    low = replace(POLICY, max_replicas=2)
    d = D.decide(NO_DATA, Replicas(4, 4), low, State(), 1000.0)
    assert d.replicas == 2 and d.reason == "NoData"
    assert d.message.startswith("lowering to maxReplicas=2: no usable series") and "holding" not in d.message
    assert d.message.endswith("-> 2 replicas")
    held = D.decide(NO_DATA, Replicas(3, 3), low, State(), 1000.0)  # already past it, no data: still lowered
    assert held.replicas == 2


def test_the_final_clamp_names_the_bound_that_decided():
    """The fallback goes through the scale-down pace (one replica a tick); maxReplicas below the fleet
    still binds at once, and the message says so."""
    pol = replace(POLICY, max_replicas=4, fallback_replicas=3, failure_threshold=1)
    d = D.decide(FAILED, Replicas(10, 10), pol, State(failures=5), 1000.0)
    assert d.replicas == 4 and d.reason == "StabilizingScaleDown"  # the window held 10: the bound decided
    assert d.message.endswith("; bounded by maxReplicas=4 -> 4 replicas"), d.message


def test_an_outage_stops_changing_the_memory_once_past_the_failure_threshold():
    """The failure count grew at every tick of an outage, so the memory -- and every object's status -- was
    written at every tick (200 objects, Prometheus down: a status write each per tick; an exploration at
    scale, session 55). It stops at failureThreshold, where a fallback starts, and says so."""
    policy = replace(POLICY, failure_threshold=3)
    state, seen = State(), []
    for t in range(10):  # no fallbackReplicas (the default): the count holds
        d = D.decide(FAILED, Replicas(4, 4), policy, state, 100.0 + 15.0 * t)
        state = d.state
        seen.append((state.failures, d.replicas, d.reason, state.to_dict()))
    assert [s[0] for s in seen] == [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
    assert {s[1:3] for s in seen} == {(4, "MetricsUnavailable")}
    assert all(s[3] == seen[2][3] for s in seen[2:])  # nothing new to write
    fallback = replace(policy, fallback_replicas=4)
    held = D.decide(FAILED, Replicas(4, 4), fallback, state, 300.0)
    assert held.reason == "FallbackAfterFailures" and held.state.failures == 3
    assert "metrics failed 3 or more times in a row (failureThreshold)" in held.message
    assert D.decide(ok(100.0), Replicas(4, 4), policy, state, 300.0).state.failures == 0


def test_the_policys_defaults_are_the_crds() -> None:
    """Policy's own defaults (what the decider's table tests use) are the CRD defaults' policy."""
    assert Policy() == Policy.from_spec(ScalingSpec())


# --- maxBatchSize counts items; the readings count requests -----------------------------------------------------
def _saturated_by_multi_item_requests(batch_size: float, items: float | None) -> D.Decision:
    """A real tritonserver 2.51 (the python-cpu sample, 20 + 2n ms per batch, maxBatchSize 16) sent 30 rps of
    16-item requests: one request per execution, 14 served and 13.5 rejected per second, p95 348 ms against a
    150 ms target -- the operator's readings of that pod (an audit, session 84), eight ticks of them."""
    pol = Policy(min_replicas=1, max_replicas=10, target_p95_ms=150, max_batch_size=16, queue_delay_ms=2.0,
                 preferred_batch_sizes=(4, 8, 16), interval_s=15, window_s=60)
    state, now, d = State(), 1000.0, None
    for _ in range(8):
        obs = Observation(status="ok", pods=1, rate_pods=1, pending_at=now - 1, scrape_s=2.0, p95_ms=347.9, rps=28.0,
                          queue_ms=250.0, pending=9.0, pending_min=9.0, pending_max=9.0, batch_size=batch_size,
                          batch_ms=52.65, failed_rps=13.5, recent_rps=31.4, recent_served_rps=14.0,
                          items_per_request=items)
        d = D.decide(obs, Replicas(current=1, ready=1), pol, state, now)
        state, now = d.state, now + 15
    assert d is not None
    return d


def test_a_full_batch_of_multi_item_requests_holds_maxbatchsize_over_the_items_per_request() -> None:
    """batch_size was nv_inference_count / exec_count, inferences per execution: the pod read 16 per batch, the
    capacity 304 rps, and the decider held one replica (Steady) at twice the target with half the requests
    rejected. Read in requests (1 per execution), with maxBatchSize in requests (16 items / 16 per request), it
    scales up."""
    held = _saturated_by_multi_item_requests(batch_size=16.0, items=None)  # as the operator read it before
    assert held.replicas == 1, held.message
    fixed = _saturated_by_multi_item_requests(batch_size=1.0, items=16.0)
    assert fixed.replicas >= 2, fixed.message
    assert D.in_requests(POLICY, Observation("ok", items_per_request=4.0)).max_batch_size == POLICY.max_batch_size // 4
    assert D.in_requests(POLICY, Observation("ok", items_per_request=1.0)) == POLICY
    assert D.in_requests(POLICY, Observation("ok", items_per_request=math.nan)) == POLICY
    assert D.in_requests(POLICY, Observation("ok", items_per_request=100.0)).max_batch_size == 1
