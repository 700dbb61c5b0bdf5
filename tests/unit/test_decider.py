"""The pure decider, step by step: a table (or a few cases) per step of the pipeline.
Scenarios over time are in test_decider_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from support.decider_cases import A_MS, B_MS, CAP, FAILED, NO_DATA, POLICY, known_capacity, ok, rates
from tritonscale.api.spec import ScalingSpec
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Demand, Observation, PendingReading, Policy, Replicas, State, Step
from tritonscale.scaling.decider.batcher_model import md1_p95_capacity


# --- step: guard -------------------------------------------------------------------------------
@pytest.mark.parametrize(("obs", "current", "policy", "state", "replicas", "reason", "metrics_ok"), [
    (FAILED, 4, POLICY, State(), 4, "MetricsUnavailable", False),
    (FAILED, 4, replace(POLICY, fallback_replicas=6), State(failures=2), 6, "FallbackAfterFailures", False),
    (FAILED, 4, replace(POLICY, fallback_replicas=6), State(failures=0), 4, "MetricsUnavailable", False),
    (FAILED, 0, POLICY, State(), 1, "MetricsUnavailable", False),  # never below the floor
    (ok(100), 0, POLICY, State(), 1, "BelowFloor", True),
    (ok(100), 3, replace(POLICY, target_p95_ms=None), State(), 1, "NoTarget", True),  # held at the floor
    (NO_DATA, 3, POLICY, State(), 3, "NoData", False),
    (ok(100), 3, POLICY, State(), None, None, True),  # nothing to guard: the pipeline decides
    # No target: nothing to scale on, whatever the metrics do (it said MetricsUnavailable).
    (FAILED, 3, replace(POLICY, target_p95_ms=None), State(), 1, "NoTarget", False),
    (FAILED, 0, replace(POLICY, target_p95_ms=None), State(), 1, "BelowFloor", False),
    (FAILED, 25, POLICY, State(), POLICY.max_replicas, "MetricsUnavailable", False),  # the ceiling holds too
])
def test_guard(obs, current, policy, state, replicas, reason, metrics_ok):
    step, st, good = D.guard(obs, Replicas(current, current), policy, state)
    assert good is metrics_ok
    if replicas is None:
        assert step is None
    else:
        assert (step.replicas, step.reason) == (replicas, reason)
    assert st.failures == (state.failures + 1 if obs.status == "failed" else 0)


@pytest.mark.parametrize(("current", "words"), [
    (1, "holding 1 replica: metric source failed"),
    (4, "holding 4 replicas: metric source failed"),
    (0, "raising to the warm floor of 1 replica: metric source failed"),  # it said "holding 1 replicas"
    (25, "lowering to maxReplicas=20: metric source failed"),  # it said "holding 25 replicas"
])
def test_guard_says_what_it_does_while_metrics_fail(current, words):
    step, _, _ = D.guard(FAILED, Replicas(current, current), POLICY, State())
    assert step.why.startswith(words), step.why
    # ... and the decision says the count once: "holding 4 replicas: ... -> 4 replicas" read twice (an audit)
    d = D.decide(FAILED, Replicas(current, current), POLICY, State(), 1000.0)
    assert d.message.startswith(words) and (" -> " in d.message) == words.startswith(("raising", "lowering")), \
        d.message


# --- step: demand ------------------------------------------------------------------------------
@pytest.mark.parametrize(("obs", "last_pending", "rate", "backlog"), [
    (ok(200), None, 200, 0),
    (ok(200, pending=300), (0.0, 0.0), 200 + 300 / 15, 300),  # the queue grew by 300 in 15 s
    (ok(200, pending=0), (0.0, 150.0), 190, 0),  # a draining queue: arrivals below exits
    (ok(200, failed=50), None, 250, 0),  # rejected requests are demand too
    (Observation(status="ok", rps=120.0, failed_rps=30.0), None, 150, 0),  # no irate: the window's rate
    (ok(0, pending=0), (0.0, 10.0), 0, 0),  # never negative
])
def test_demand_is_exits_plus_queue_growth(obs, last_pending, rate, backlog):
    d = D.demand(obs, State(last_pending=last_pending and PendingReading(*last_pending)), now=15.0)
    assert d.rate == pytest.approx(rate)
    assert d.backlog == backlog


@pytest.mark.parametrize(("pending_at", "last_pending", "growth"), [
    # the gauge's change over the scrapes it was read at, not over the ticks
    (15.0, (0.0, 0.0, 2.0, 7.0), 300 / 15),
    (30.0, (0.0, 0.0, 2.0, 7.0), 300 / 30),  # two scrapes since the last tick's
    (0.0, (0.0, 300.0, 2.0, 20.0), 20.0),  # the last tick's scrape again: its growth holds
    (0.0, (0.0, 300.0, 2.0), 0.0),  # ... unknown from a state written before growth was kept
])
def test_queue_growth_is_per_scrape_interval(pending_at, last_pending, growth):
    obs = replace(ok(200, pending=300), pending_at=pending_at)
    d = D.demand(obs, State(last_pending=PendingReading(*last_pending)), now=15.0)
    assert d.growth == pytest.approx(growth)
    assert d.rate == pytest.approx(200 + growth)


def test_learn_keeps_the_scrape_time_and_growth_for_the_next_tick():
    obs = replace(ok(200, pending=300), pending_at=12.5, pending_min=140.0)
    s = D.learn(State(), obs, Replicas(2, 2), POLICY, 15.0, 220.0, growth=20.0)
    # the last two fields: the ready count at the last tick (none: today's, so no replica counts as
    # joined), and the last tick the ready count rose at (nothing known before: this one)
    assert s.last_pending == (12.5, 300.0, 2.0, 20.0, 140.0, 2.0, 15.0)
    assert State.from_dict(s.to_dict()).last_pending == (12.5, 300.0, 2.0, 20.0, 140.0, 2.0, 15.0)  # survives a restart


@pytest.mark.parametrize(("saved", "read"), [
    ([1.0, 7.0], (1.0, 7.0, None, 0.0, 0.0, None, None)),  # the oldest memories: no ready count, no growth
    ([1.0, 7.0, 2.0, 5.0, 3.0], (1.0, 7.0, 2.0, 5.0, 3.0, None, None)),  # before the ready count of the tick before
    ([1.0, 7.0, 2.0, 5.0, 3.0, 1.0], (1.0, 7.0, 2.0, 5.0, 3.0, 1.0, None)),  # before the last join's time
    ([1.0, 7.0, 2.0, 5.0, 3.0, 1.0, 0.5, 9.0], (1.0, 7.0, 2.0, 5.0, 3.0, 1.0, 0.5)),  # a newer field: ignored
    ([1.0], None), (None, None),
])
def test_an_older_or_newer_queue_reading_loads_with_unknown_fields(saved, read):
    last = State.from_dict({"lastPending": saved}).last_pending
    assert last == read
    if last is not None:
        assert (last.ready, last.ready_before, last.joined_at) == read[2:3] + read[5:]  # the fields by name
        # saved up to the first unknown field, and read back the same
        assert State.from_dict(State(last_pending=last).to_dict()).last_pending == read


# --- step: learn -------------------------------------------------------------------------------
_LEARNED = State(batch_samples=((8.0, 36.0, 100.0), (16.0, 52.0, 200.0)), capacity_rps=280.0,
                 capacity_ceiling_rps=300.0, queueing=((100.0, 1.2, 40.0, 2.0),), last_batch_size=8.0,
                 cold_start_s=90.0, rates=((100.0, 500.0, 560.0),), surprises=(50.0,))
_FORGOTTEN = replace(_LEARNED, batch_samples=(), capacity_rps=None, capacity_ceiling_rps=None, queueing=(),
                     last_batch_size=None)


@pytest.mark.parametrize(("served", "done_at", "serving", "rolling", "expected"), [
    (None, None, None, False, _LEARNED),  # nothing known: kept
    ("a", None, None, True, replace(_LEARNED, serving="a")),  # unknown now (no record): kept
    (None, None, "a", False, replace(_LEARNED, serving="a")),  # memory from before the record: adopted
    (None, None, "a", True, replace(_LEARNED, serving="a~")),
    ("a", None, "a", False, replace(_LEARNED, serving="a")),
    ("a", None, "a", True, replace(_LEARNED, serving="a")),  # a rollout of the same model (a batching change): kept
    # another model: its speed is learned anew, and settled once its rollout is done
    ("a", None, "b", False, replace(_FORGOTTEN, serving="b~", rolled_out_at=1000.0)),
    ("a", None, "b", True, replace(_FORGOTTEN, serving="b~")),
    ("b~", None, "b", True, replace(_LEARNED, serving="b~")),  # learned while rolling out: kept meanwhile
    ("b~", None, "b", False, replace(_LEARNED, serving="b~", rolled_out_at=1000.0)),  # done: the window runs
    ("b~", 970.0, "b", False, replace(_LEARNED, serving="b~", rolled_out_at=970.0)),  # old pods still in it
    ("b~", 940.0, "b", False, replace(_FORGOTTEN, serving="b")),  # a window after: forgotten, settled
    ("b~", 940.0, "b", True, replace(_LEARNED, serving="b~")),  # rolling again: the clock restarts
    ("b~", None, "c", True, replace(_FORGOTTEN, serving="c~")),  # another change mid-rollout
])
def test_forget_model(served, done_at, serving, rolling, expected):
    """What was learned of a model's speed (batch cost, capacities, queueing) is forgotten when the pods
    serve another, and again a rate window after its rollout is done (that window still holds the old
    pods' scrapes); the traffic's history (rates, surprises) and the cold start stay."""
    state = replace(_LEARNED, serving=served, rolled_out_at=done_at)
    assert D.forget_model(state, Replicas(3, 3, serving=serving, rolling_out=rolling), 1000.0, 60.0) == expected


def test_forget_model_runs_on_a_tick_without_metrics_and_survives_a_restart():
    d = D.decide(FAILED, Replicas(3, 3, serving="b"), POLICY, replace(_LEARNED, serving="a"), 1000.0)
    assert (d.state.batch_samples, d.state.capacity_rps, d.state.serving) == ((), None, "b~")
    assert (State.from_dict(d.state.to_dict()).serving, State.from_dict(d.state.to_dict()).rolled_out_at) == \
        ("b~", 1000.0)
    settled = D.decide(FAILED, Replicas(3, 3, serving="b"), POLICY, d.state, 1000.0 + POLICY.window_s)
    assert settled.state.serving == "b"
    assert State.from_dict({"failures": 1}).serving is None  # memory from before the field


def test_learn_cold_start_longer_at_once_shorter_slowly():
    s = D.learn_cold_start(State(), Replicas(2, 2, startup_s=(40.0, 90.0)))
    assert s.cold_start_s == 90.0
    s = D.learn_cold_start(s, Replicas(2, 2, startup_s=(30.0,)))
    assert 30.0 < s.cold_start_s < 90.0
    assert D.learn_cold_start(s, Replicas(2, 2)) == s
    assert D.cold_start(State()) == D.DEFAULT_COLD_START_S


@pytest.mark.parametrize("obs", [NO_DATA, FAILED])
def test_a_tick_that_holds_for_want_of_metrics_still_learns_the_cold_start(obs):
    # a pod's start is reported once: a held tick (no series yet, Prometheus down) must keep it
    d = D.decide(obs, Replicas(3, 3, startup_s=(180.0,)), POLICY, State(), 0.0)
    assert d.reason in ("NoData", "MetricsUnavailable")
    assert d.state.cold_start_s == 180.0


def test_batch_bins_keep_the_lower_envelope_and_forget_it_after_the_ttl():
    s = D.add_batch_sample((), 8.0, 40.0, 0.0)
    s = D.add_batch_sample(s, 8.2, 44.0, 10.0)  # same bin, biased high: not kept
    assert [e[1] for e in s] == [40.0]
    s = D.add_batch_sample(s, 8.1, 39.0, 20.0)  # lower: replaces
    assert [e[1] for e in s] == [39.0]
    s = D.add_batch_sample(s, 8.0, 45.0, 20.0 + D.BATCH_SAMPLE_TTL_S + 1)  # the old one expired
    assert [e[1] for e in s] == [45.0]
    s = D.add_batch_sample(s, 14.0, 48.0, 0.0)
    assert [round(e[0]) for e in s] == [8, 14]


def test_a_batch_sample_faster_than_every_smaller_batch_is_a_bad_reading():
    s = D.add_batch_sample((), 2.0, 24.0, 0.0)
    s = D.add_batch_sample(s, 8.0, 36.0, 0.0)
    s = D.add_batch_sample(s, 16.0, 2.4, 10.0)  # one tick's served rate read 20000 rps: not a batch time
    assert [e[0] for e in s] == [2.0, 8.0]
    s = D.add_batch_sample(s, 16.0, 25.0, 20.0)  # faster than the batch of 8 (biased high), not than 2: kept
    assert [e[0] for e in s] == [2.0, 8.0, 16.0]
    s = D.add_batch_sample(s, 1.0, 21.0, 30.0)  # nothing smaller to compare with: kept
    assert [e[0] for e in s] == [1.0, 2.0, 8.0, 16.0]


def test_learn_bounds_the_request_weighted_batch_time_by_the_time_between_batches():
    # 2 busy replicas at 200 rps in batches of 2: a batch starts every 2 * 2 / 200 s = 20 ms on each,
    # so a batch takes at most 20 ms, whatever the request-weighted compute time (26 ms) says
    busy = replace(ok(200, pending=1.0), batch_size=2.0, batch_ms=26.0, recent_served_rps=200.0)
    s = D.learn(State(), busy, Replicas(2, 2), POLICY, 0.0, 200.0)
    assert s.batch_samples[0][1] == 26.0  # no earlier tick: whether the ready count held is unknown
    s = D.learn(replace(s, batch_samples=()), busy, Replicas(2, 2), POLICY, 15.0, 200.0)
    assert s.batch_samples[0][1] == pytest.approx(20.0)
    idle = replace(busy, recent_served_rps=50.0)  # mostly idle replicas: the compute time is the tighter
    s = D.learn(replace(s, batch_samples=()), idle, Replicas(2, 2), POLICY, 30.0, 50.0)
    assert s.batch_samples[0][1] == 26.0
    s = D.learn(replace(s, batch_samples=()), busy, Replicas(3, 3), POLICY, 45.0, 200.0)  # a replica came
    assert s.batch_samples[0][1] == 26.0


@pytest.mark.parametrize(("pods", "ms"), [
    (None, 1000.0 * 16 / 900),  # a source that does not say: the ready replica served it all (17.8 ms)
    (1.0, 1000.0 * 16 / 900),
    (3.0, 52.0),  # three pods served 900 rps; the bound (53.3 ms) is looser than the time measured
])
def test_the_time_between_batches_counts_every_pod_that_served_the_rate(pods, ms):
    """One replica ready of three (the others draining, or marked NotReady by the node controller while
    their clients keep their connections): the served rate is the three pods', and over the ready one
    it read as a batch of 16 every 18 ms -- three times the capacity there is."""
    served = replace(ok(900, pending=1.0), batch_size=16.0, batch_ms=52.0, recent_served_rps=900.0, pods=pods)
    state = D.learn(State(), served, Replicas(3, 1), POLICY, 0.0, 900.0)
    s = D.learn(replace(state, batch_samples=()), served, Replicas(3, 1), POLICY, 15.0, 900.0)
    assert s.batch_samples[0][1] == pytest.approx(ms)


def test_the_saturation_sample_counts_every_pod_that_served_the_rate():
    # a full batch queued on each of 3 scraped pods, 1 of them ready: 923 rps is three pods' saturation
    last = PendingReading(0.0, 200.0, 1.0, 0.0, 16.0)
    s = D.learn(State(last_pending=last), replace(SATURATED, pending_min=16.0, pods=3.0), Replicas(3, 1), POLICY,
                15.0, 923.0)
    assert [e[1] for e in s.batch_samples if e[0] == 16.0] == [pytest.approx(52.0, rel=1e-3)]


def test_learn_skips_batch_samples_of_a_load_change():
    s = D.learn(State(), ok(100, batch=4.0), Replicas(2, 2), POLICY, 0.0, 100.0)
    assert len(s.batch_samples) == 1  # the first sample is taken
    s = D.learn(s, ok(300, batch=9.0), Replicas(2, 2), POLICY, 15.0, 300.0)  # 4 -> 9: mixed batches
    assert len(s.batch_samples) == 1
    s = D.learn(s, ok(300, batch=9.2), Replicas(2, 2), POLICY, 30.0, 300.0)  # steady at 9: a sample
    assert sorted(round(e[0]) for e in s.batch_samples) == [4, 9]


def test_learn_skips_batch_samples_while_a_replica_that_just_joined_is_in_the_readings():
    """The readings span the last two scrapes: a pod ready within them ran other batch sizes than the
    rest (only new requests; the others drained backlogs), and the request-weighted time reads high."""
    s = D.learn(State(), ok(100, pending=1.0, batch=4.0), Replicas(2, 2), POLICY, 0.0, 100.0)
    s = D.learn(s, ok(100, pending=1.0, batch=4.1), Replicas(2, 2), POLICY, 15.0, 100.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4]
    s = D.learn(s, ok(150, pending=1.0, batch=5.0), Replicas(3, 3), POLICY, 30.0, 150.0)  # a third joined
    s = D.learn(s, ok(150, pending=1.0, batch=5.0), Replicas(3, 3), POLICY, 45.0, 150.0)  # ... a tick ago
    assert sorted(round(e[0]) for e in s.batch_samples) == [4]
    s = D.learn(s, ok(150, pending=1.0, batch=5.0), Replicas(3, 3), POLICY, 60.0, 150.0)  # held two ticks
    assert sorted(round(e[0]) for e in s.batch_samples) == [4, 5]
    full = ok(900, pending=1.0, batch=16.0)  # full batches barely vary in size: taken even so
    s = D.learn(s, full, Replicas(4, 4), POLICY, 75.0, 900.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4, 5, 16]


# Overload: 3 ready replicas serving 3 x 16 / 52 ms = 923 rps, the saturation rate, in full batches.
SATURATED = replace(ok(923.0, pending=200.0), recent_served_rps=923.0)


@pytest.mark.parametrize(("last_min", "now_min", "ready_before", "sample"), [
    (16.0, 16.0, 3, True),  # a full batch waited on every replica at both ends: the saturation rate
    (16.0, 2.0, 3, False),  # one replica had less than a full batch now: it did not run back to back
    (2.0, 16.0, 3, False),  # ... or at the last tick: its queue filled within the interval
    (16.0, 16.0, 2, False),  # a replica became ready within the interval
    (None, None, 3, False),  # a source without the least-queued pod's gauge: no evidence
])
def test_learn_takes_the_saturation_rate_as_a_full_batch_sample_only_if_every_replica_queued_one(
        last_min, now_min, ready_before, sample):
    # 200 requests queued in all, more than a full batch per replica (48): but round-robin gives a
    # replica that just became ready only new requests while the others drain their backlogs, so
    # the total proves nothing about the least-queued replica.
    last = (0.0, 200.0, float(ready_before), 0.0) + (() if last_min is None else (last_min,))
    state = State(last_pending=PendingReading(*last))
    s = D.learn(state, replace(SATURATED, pending_min=now_min), Replicas(3, 3), POLICY, 15.0, 923.0)
    full = [e for e in s.batch_samples if e[0] == 16.0]
    if sample:
        assert full and full[0][1] == pytest.approx(1000.0 * 16 * 3 / 923.0)  # 52 ms: the model's a + 16b
    else:
        assert not full
    assert s.last_pending is not None and s.last_pending[4] == (now_min or 0.0)  # the next tick's "before"


@pytest.mark.parametrize("tick", [2.0, 5.0, 15.0, 25.0])
def test_rate_history_is_one_sample_per_tick_bounded_by_time(tick):
    pol = replace(POLICY, interval_s=tick)
    s = State()
    for i in range(400):
        s = D.learn(s, ok(100), Replicas(1, 1), pol, i * tick, 100.0)
    memory = D.signals.rate_memory(State(), pol)
    assert len(s.rates) == math.floor(memory / tick) + 1  # every tick within the memory
    assert s.rates[-1][0] == 399 * tick
    # ticks under 10 s once kept one sample in all (the latest replaced the one before while it
    # was younger than 10 s): no noise, trend or rise was ever measured
    assert s.rates[-1][0] - s.rates[0][0] > memory - tick


def test_a_tick_out_of_turn_replaces_the_latest_sample():
    s = D.learn(State(), ok(100), Replicas(1, 1), POLICY, 0.0, 100.0)
    s = D.learn(s, ok(100), Replicas(1, 1), POLICY, 15.0, 110.0)
    s = D.learn(s, ok(100), Replicas(1, 1), POLICY, 16.0, 120.0)  # within half an interval of the last
    assert [(e[0], e[1]) for e in s.rates] == [(0.0, 100.0), (16.0, 120.0)]


# --- step: capacity ----------------------------------------------------------------------------
@pytest.mark.parametrize(("samples", "max_batch", "expect"), [
    (((4.0, 28.0, 0.0), (12.0, 44.0, 0.0)), 16, CAP),  # spread: the fitted line
    (((15.0, 50.0, 0.0),), 16, pytest.approx(300.0, rel=0.2)),  # one size near the max: known
    (((6.0, 32.0, 0.0),), 16, "guess"),  # one mid size: a half-fixed, half-per-item guess
    (((1.5, 23.0, 0.0),), 16, None),  # tiny batches only: unknown
    # no batching (an M/D/1 queue at 25 ms): planned below the 40 rps saturation, at the p95 capacity
    # the simulated replica measures, 24.7 rps (simulate.capacity.capacity_at_slo)
    (((1.0, 25.0, 0.0),), 1, pytest.approx(24.7 / D.UTILISATION, rel=0.1)),
])
def test_capacity_from_batch_cost(samples, max_batch, expect):
    cap, _ = D.capacity(State(batch_samples=samples), replace(POLICY, max_batch_size=max_batch), 100.0)
    if expect == "guess":
        assert cap is not None and 0.5 * CAP < cap < 1.2 * CAP
    elif expect is None:
        assert cap is None
    else:
        assert cap == pytest.approx(expect) if isinstance(expect, float) else cap == expect


@pytest.mark.parametrize(("samples", "obs_batch", "guessed_from"), [
    # a remembered size of a good share of the maximum: the guess, whatever this tick's batches
    # (the sandbox's step read 72 ms for a mean of 2.7 per batch of a 20 + 15n ms model: 60 ms)
    (((6.0, 32.0, 0.0),), (10.0, 90.0), (6.0, 32.0)),
    # remembered sizes all too small: this tick's larger batches give the guess
    (((1.5, 23.0, 0.0),), (6.0, 32.0), (6.0, 32.0)),
    (((1.5, 23.0, 0.0),), (3.0, 26.0), None),  # ... if they are a good share of the maximum
])
def test_a_single_batch_size_guess_prefers_a_remembered_sample(samples, obs_batch, guessed_from):
    policy = replace(POLICY, max_batch_size=16)
    obs = replace(ok(100), batch_size=obs_batch[0], batch_ms=obs_batch[1])
    cap, source = D.capacity(State(batch_samples=samples), policy, 100.0, obs)
    if guessed_from is None:
        assert cap is None
    else:
        alone, _ = D.capacity(State(batch_samples=((*guessed_from, 0.0),)), policy, 100.0)
        assert (cap, source) == (alone, "batch cost, one batch size")


_COST_20_2 = ((4.0, 28.0, 0.0), (12.0, 44.0, 0.0))  # a + b n = 20 + 2n ms: saturation 16 / 52 ms = 307.7 rps


@pytest.mark.parametrize(("cap", "source", "samples", "expect"), [
    # the planned p95 capacity over UTILISATION (301 / 0.9 at a 312 ms target, a steady rate):
    # above what a replica serves at all, so the bare need reads the saturation rate instead
    (334.4, "batch cost", _COST_20_2, pytest.approx(16000 / 52)),
    (294.4, "batch cost", _COST_20_2, 294.4),  # below saturation: the figure itself
    (334.4, "batch cost, one batch size", _COST_20_2, pytest.approx(16000 / 52)),
    (334.4, "p95", _COST_20_2, 334.4),  # learned from p95: no batch cost to bound it
    (None, "batch cost: only small batches seen so far", _COST_20_2, None),
    (334.4, "batch cost", (), 334.4),  # no samples: nothing to bound it with
])
def test_bare_capacity_never_exceeds_saturation(cap, source, samples, expect):
    assert D.bare_capacity(cap, source, State(batch_samples=samples), POLICY) == expect


def test_batch_capacity_respects_a_tight_target():
    # plans (capacity x UTILISATION) at the p95 capacity, never above UTILISATION of saturation
    assert D.batch_capacity((20.0, 2.0), 16, 312.0) == pytest.approx(16000 / 52)
    assert D.batch_capacity((20.0, 2.0), 16, 150.0) == pytest.approx(16000 / 52)
    tight = D.batch_capacity((20.0, 2.0), 16, 104.0) * D.UTILISATION
    assert 0.85 * 267 < tight < 267  # the simulated replica's p95 capacity at 104 ms: 267 rps
    # the same target with smaller batches: far less, and less than the mean-value rule's 166 rps
    # (2 * (20 + 2*5) <= 60), which ignored that batch sizes vary; the simulated replica: 136 rps
    assert 0.8 * 136 < D.batch_capacity((20.0, 2.0), 16, 60.0) * D.UTILISATION < 136
    # a target within two batches of one (2 x 22 ms > 30): only a lightly loaded replica meets it,
    # one request at a time -- the M/D/1 queue's p95 capacity (waits of at most 8 ms: ~8% busy)
    light = D.batch_capacity((20.0, 2.0), 16, 30.0)
    assert light == pytest.approx(md1_p95_capacity(22.0, 30.0) / D.UTILISATION)
    assert 0.05 * 1000 / 22 < light * D.UTILISATION < 0.1 * 1000 / 22
    # a target below even one batch of one (22 ms > 20): plan with batches of one, never 0
    assert D.batch_capacity((20.0, 2.0), 16, 20.0) == pytest.approx(1000 / 22)


@pytest.mark.parametrize(("target", "share", "planned"), [
    (312.0, None, 0.9 * 16000 / 52),  # no share given: UTILISATION of saturation, 277 rps
    (312.0, 0.95, 0.95 * 16000 / 52),  # 292: below the p95 capacity (301), the share binds
    (312.0, 1.0, None),  # steady traffic: the p95 capacity itself (the simulated replica: 301)
    (104.0, 1.0, None),  # a tight target: the p95 capacity (265) is below any share of saturation
    (104.0, None, None),
])
def test_batch_capacity_plans_at_most_the_share_of_saturation(target, share, planned):
    from tritonscale.scaling.decider.batcher_model import greedy_p95_capacity

    got = D.batch_capacity((20.0, 2.0), 16, target, share=share) * D.UTILISATION
    assert got == pytest.approx(planned if planned is not None else greedy_p95_capacity((20.0, 2.0), 16, target))


def test_horizon_rise_is_the_95pc_quantile_of_the_rates_change_over_one_horizon():
    import random

    rng = random.Random(3)
    noisy = rates(*((10 * k, 1000 + rng.gauss(0.0, 10.0)) for k in range(40)))
    # a difference of two samples has sd 10 x sqrt(2): its 95% quantile is ~23 rps
    assert 10.0 < D.horizon_rise(noisy, 60.0) < 40.0
    ramp = rates(*((10 * k, 1000 + 2.0 * 10 * k) for k in range(40)))
    assert D.horizon_rise(ramp, 60.0) == pytest.approx(120.0)  # 2 rps/s over 60 s, every time
    # a single step of 300: most lag-60 s differences miss it, so it moves the quantile far less
    stepped = rates(*((10 * k, (1000 if k < 20 else 1300) + rng.gauss(0.0, 10.0)) for k in range(40)))
    assert D.horizon_rise(stepped, 60.0) < 150.0
    assert D.horizon_rise(rates((0, 1000), (10, 1000), (20, 1000)), 60.0) is None  # too little history
    # dozens of differences, but from a history 10 s short of RISE_HORIZONS (6) horizons: too few
    # independent rises for a 95% quantile
    spanning = int(D.constants.RISE_HORIZONS * 60.0 / 10.0) + 1  # samples 10 s apart over that many horizons
    assert D.horizon_rise(rates(*((10 * k, 1000.0) for k in range(spanning - 1))), 60.0) is None
    assert D.horizon_rise(rates(*((10 * k, 1000.0) for k in range(spanning))), 60.0) == pytest.approx(0.0)


def test_saturation_share_is_high_only_for_a_rate_that_holds_still():
    import random

    rng = random.Random(5)
    steady = State(rates=rates(*((10 * k, 2000 + rng.gauss(0.0, 15.0)) for k in range(60))))
    high = D.saturation_share(steady, 590.0, 75.0, 2000.0)
    assert 0.97 < high < 1.0  # Poisson-like noise of 0.75%: its 95% quantiles move ~2%
    # the same steady rate over five horizons (375 s) is too little evidence that it holds still
    short = State(rates=tuple(e for e in steady.rates if e[0] <= 380.0))
    assert D.saturation_share(short, 380.0, 75.0, 2000.0) == D.UTILISATION
    wander = State(rates=rates(*((10 * k, 2000 * (1.0 + 0.2 * math.sin(k / 3.0))) for k in range(60))))
    assert D.saturation_share(wander, 590.0, 75.0, 2000.0) == D.UTILISATION  # moves 20% in a horizon
    # a steady climb of 1 rps/s: the first sample a horizon (75 s) on is 80 s on, 80 rps higher
    climbing = State(rates=rates(*((10 * k, 1000 + 1.0 * 10 * k) for k in range(60))))
    assert D.saturation_share(climbing, 590.0, 75.0, 1590.0) == pytest.approx(1.0 - 80.0 / 1590.0)
    assert D.saturation_share(State(), 0.0, 75.0, 2000.0) == D.UTILISATION  # nothing known yet


# --- step: forecast (trend, noise, level) ------------------------------------------------------
def test_trend_follows_a_ramp_not_a_step_or_noise():
    ramp = rates(*((t, 100 + 2.0 * t) for t in range(0, 241, 15)))
    assert D.trend(ramp, 240.0, 75.0) == pytest.approx(2.0, rel=0.05)
    step = rates(*((t, 100 if t < 150 else 400) for t in range(0, 241, 15)))
    assert D.trend(step, 240.0, 75.0) == 0.0  # rises in one half only
    wiggle = rates(*((t, 100 + (10 if (t // 15) % 2 else -10)) for t in range(0, 241, 15)))
    assert D.trend(wiggle, 240.0, 75.0) == 0.0
    falling = rates(*((t, 500 - 1.0 * t) for t in range(0, 241, 15)))
    assert D.trend(falling, 240.0, 75.0) == 0.0


def test_trend_of_a_ramp_survives_one_low_reading():
    """A ramp of 1 rps/s over a 200 s span (halves at t = 200-290 and 300-400) with one reading 15%
    low at the end of the older half, as when a new pod's traffic is missing from the sum of
    irate until its second scrape: the halves' median slopes still rise about 1 rps/s, so the
    trend stays near the whole span's lower bound (a least-squares older half read 0.27)."""
    for dip in (210, 290, 300, 350):
        ramp = rates(*((t, (600 + 1.0 * t) * (0.85 if t == dip else 1.0)) for t in range(0, 401, 10)))
        assert 0.7 < D.trend(ramp, 400.0, 200.0) < 1.0, dip


def test_noise_estimates_the_spread_and_ignores_steps_and_trends():
    import random

    rng = random.Random(7)
    eps = [rng.gauss(0.0, 10.0) for _ in range(20)]
    flat = rates(*((15 * k, 100 + e) for k, e in enumerate(eps)))
    sigma = D.noise(flat, 285.0)
    assert 6.0 < sigma < 15.0  # 10 estimated from 19 differences
    stepped = rates(*((15 * k, (100 if k < 10 else 400) + e) for k, e in enumerate(eps)))
    assert D.noise(stepped, 285.0) == pytest.approx(sigma, rel=0.35)  # one jump among many differences
    ramp = rates(*((15 * k, 100 + 3.0 * 15 * k + e) for k, e in enumerate(eps)))
    assert D.noise(ramp, 285.0) == pytest.approx(sigma, rel=0.35)  # a trend is not noise
    assert D.noise(rates(*((15 * k, 100 + 30 * k) for k in range(20))), 285.0) == 0.0


def test_noise_needs_enough_differences_to_ignore_a_start_and_a_step():
    """The sandbox's first readings at 2 s ticks (rps, from a real run): idle, the load starting,
    its 15 rps, the step to 70. Each level shift moves one lag-1 and two lag-2 differences; with
    three of each (the old minimum) the start and the step were half of them, and the noise read
    11.5 rps -- twice a 70 rps Poisson load's at 2 s (sqrt(70 x 2) / 2 = 5.9) -- enough margin for a
    fourth replica. Too few differences mean no estimate (no margin) yet."""
    seen = [0.0, 0.0, 2.0, 14.0, 18.0, 15.0, 13.0, 18.0, 26.0, 84.5]
    for n in range(2, len(seen) + 1):
        sigma = D.noise(rates(*((2.0 * k, r) for k, r in enumerate(seen[:n]))), 2.0 * (n - 1))
        if n - 1 < 2 * D.NOISE_SHIFTS * D.SHIFT_READINGS + 1:
            assert sigma == 0.0, n
        else:
            assert 0.0 < sigma < 5.9, n


def test_noise_ignores_a_start_and_a_step_that_each_take_two_readings(monkeypatch):
    """A reading sums the pods' ``irate`` over the interval before each pod's last scrape, so a step
    in the offered load shows partly in one reading and fully in the next (SHIFT_READINGS). The
    decider's readings of a sandbox step run (15 -> 70 rps at 2 s ticks; requests out plus the
    queue's change, from that run's Prometheus): the start reads 0, 2.5, 12.5, the step 22, 76.5.
    Whichever of the base phase's readings a history starts from, the noise read at the step's first
    full reading and the two after it -- when the scale-up is sized -- stays under a 70 rps Poisson
    load's (sqrt(70 x 2) / 2 = 5.9). Counting one moved difference per shift (five differences were
    enough) it read up to 10 rps: a plan 16 rps above the step's 76.5, a fourth replica with the
    backlog (the sandbox's step peaked at 4 in a CI run)."""
    seen = [0.0, 2.5, 12.5, 16.0, 18.0, 13.5, 18.5, 22.0, 76.5, 66.5, 72.5, 69.0]
    step = seen.index(76.5)

    def worst() -> float:
        return max(D.noise(rates(*((2.0 * k, r) for k, r in enumerate(seen[a:b]))), 2.0 * (b - a - 1))
                   for a in range(step - 3) for b in range(step + 1, step + 4))

    assert worst() < 5.9
    monkeypatch.setattr(D.constants, "SHIFT_READINGS", 1)
    assert worst() > 1.5 * 5.9


def test_noise_of_alternating_readings_is_no_larger_than_their_spread():
    # the first five readings of the real trace replayed from its busiest half, and five more in their
    # pattern: they alternate, so the differences are +-440 or so. From the first four differences
    # alone their median absolute deviation said 697 rps against the readings' spread of 314 (now too
    # few differences for an estimate); the noise is never more than the spread
    seen = [1966.7, 1737.9, 2174.2, 1738.1, 2178.8, 1741.0, 2170.0, 1740.0, 2175.0, 1739.0]
    first = rates(*((15 * k, r) for k, r in enumerate(seen)))
    spread = D.signals._median_and_sd(seen)[1]
    diffs = D.signals._median_and_sd([b - a for a, b in zip(seen, seen[1:], strict=False)])[1] / math.sqrt(2)
    assert D.noise(first, 135.0) == pytest.approx(min(diffs, spread))
    assert D.noise(rates(*((15 * k, r) for k, r in enumerate(seen[:9]))), 120.0) == 0.0
    for k in range(10, 16):  # alternating on: whichever of the two is smaller
        more = seen + [1966.7 if j % 2 == 0 else 1737.9 for j in range(6, k)]
        s_k = D.signals._median_and_sd(more)[1]
        assert D.noise(rates(*((15 * j, r) for j, r in enumerate(more))), 15.0 * (len(more) - 1)) <= s_k + 1e-9
    # readings that do not alternate keep the differences' estimate (smaller than the spread of a trend)
    climbing = rates(*((15 * k, 1000 + 40 * k + (5 if k % 3 else -5)) for k in range(10)))
    assert 0.0 < D.noise(climbing, 135.0) < 15.0  # the readings themselves spread 178


def test_noise_of_readings_that_blend_two_intervals_is_read_two_ticks_apart():
    import random

    # Pods scraped at spread phases: each reading is the mean of two consecutive intervals' rates,
    # so neighbours share one. Their lag-1 differences see half the noise; lag-2 ones do not.
    rng = random.Random(11)
    x = [rng.gauss(0.0, 10.0) for _ in range(21)]
    blended = [(a + b) / 2 for a, b in zip(x, x[1:], strict=False)]
    hist = rates(*((15 * k, 500 + r) for k, r in enumerate(blended)))
    lag1 = D.signals._median_and_sd([b - a for a, b in zip(blended, blended[1:], strict=False)])[1] / math.sqrt(2)
    lag2 = D.signals._median_and_sd([b - a for a, b in zip(blended, blended[2:], strict=False)])[1] / math.sqrt(2)
    assert lag2 > 1.2 * lag1  # the lag-1 estimate reads low
    assert D.noise(hist, 285.0) == pytest.approx(min(lag2, D.signals._median_and_sd(blended)[1]))
    # independent readings: the two lags agree, near the noise itself (10)
    plain = rates(*((15 * k, 500 + e) for k, e in enumerate(x)))
    assert 6.0 < D.noise(plain, 300.0) < 15.0


def test_forecast_plans_level_plus_trend_over_the_horizon_plus_noise():
    st = State(rates=rates(*((t, 100 + 2.0 * t) for t in range(0, 241, 15))), cold_start_s=60.0)
    planned, horizon = D.forecast(D.Demand(580.0, 580.0, 0.0), st, POLICY, 240.0)
    assert horizon == 75.0
    # a clean ramp has no noise: level (580, the latest) + 2 rps/s x 75 s
    assert planned == pytest.approx(580.0 + 2.0 * 75.0, rel=0.02)


def _sawtooth(cycles: int) -> tuple[tuple[float, float, float], ...]:
    """From 600 rps, 4 rps/s for 180 s (to 1,260), an instant drop back and 120 s there; repeated."""
    out = []
    for k in range(cycles):
        out += [(300.0 * k + i, 600.0 + 4.0 * i) for i in range(0, 180, 15)]
        out += [(300.0 * k + 180.0 + i, 600.0) for i in range(0, 120, 15)]
    return rates(*out)


@pytest.mark.parametrize(("hist", "now", "share"), [
    # a ramp that goes on: each tick's planned rise (2 rps/s x 75 s) came, and more is not counted
    (rates(*((t, 100 + 2.0 * t) for t in range(0, 481, 15))), 480.0, 1.0),
    # nothing ever extrapolated: no evidence, the trend is trusted whole
    (rates(*((t, 500.0) for t in range(0, 481, 15))), 480.0, 1.0),
    # a sawtooth whose ramps end within a horizon of the trend seeing them. The first ramp's ticks at
    # 120-165 s (its earlier ones have less than the trend's 120 s span behind them) planned 300 rps
    # each and met the drop one horizon later: none came. Each later ramp plans 50 rps at its 90th s
    # (the halves' slopes just agree), which came (the reading at its 165th s is 300 over the level),
    # then 250 and four times 300 that met the drop. 100 of 4,200.
    (_sawtooth(3), 885.0, 100.0 / 4200.0),
])
def test_trend_delivery_is_the_share_of_its_planned_rises_the_rate_delivered(hist, now, share):
    assert D.trend_delivery(hist, now, 75.0, 60.0) == pytest.approx(share)


def test_trend_delivery_of_a_ramp_that_slows_is_partial():
    # 2 rps/s until 240 s, then 1 rps/s: ticks whose horizon crosses the change or lies beyond it
    # planned rises at the old pace and got less; none got nothing
    slows = rates(*((t, 100 + (2.0 * t if t <= 240 else 480 + 1.0 * (t - 240))) for t in range(0, 601, 15)))
    assert 0.5 < D.trend_delivery(slows, 600.0, 75.0, 60.0) < 1.0


def test_trend_delivery_needs_evidence(monkeypatch):
    # one sawtooth cycle: four ticks (120-165 s) planned a rise that met the drop
    assert D.trend_delivery(_sawtooth(1), 285.0, 75.0, 60.0) == 0.0
    monkeypatch.setattr(D.constants, "TREND_EVIDENCE", 5)
    assert D.trend_delivery(_sawtooth(1), 285.0, 75.0, 60.0) == 1.0  # four ticks are not enough for five


def test_forecast_extrapolates_the_trend_as_far_as_the_rate_delivered_it(monkeypatch):
    st = State(rates=_sawtooth(3)[:-8], cold_start_s=60.0)  # the third ramp's top, at 765 s: 4 rps/s
    d = D.Demand(1260.0, 1260.0, 0.0)
    delivered = D.trend_delivery(st.rates, 765.0, 75.0, POLICY.window_s)
    assert 0.0 < delivered < 0.1 and D.trend(st.rates, 765.0, 75.0) == pytest.approx(4.0)
    planned, _ = D.forecast(d, st, POLICY, 765.0)
    monkeypatch.setattr(D.signals, "trend_delivery", lambda *a: 1.0)  # the trend trusted whole
    whole, _ = D.forecast(d, st, POLICY, 765.0)
    assert whole - planned == pytest.approx(4.0 * 75.0 * (1.0 - delivered))


@pytest.mark.parametrize(("window_s", "expect"), [
    (60.0, (70 * 5 + 10 * 2) / 7),  # the default rate window: the last minute's mean (7 samples at 10 s)
    (20.0, 30.0),  # a 20 s window (the sandbox's is 10 s): the samples at 40, 50 and 60 s
    (5.0, 10.0),  # shorter than a tick: the latest sample
])
def test_the_level_is_the_mean_over_the_policy_rate_window_or_the_latest_if_higher(window_s, expect):
    st = State(rates=rates(*((t, 70.0 if t < 50 else 10.0) for t in range(0, 61, 10))))
    assert D.level(D.Demand(10.0, 10.0, 0.0), st, 60.0, window_s) == pytest.approx(expect)
    assert D.level(D.Demand(90.0, 90.0, 0.0), st, 60.0, window_s) == 90.0  # the latest, if higher


def test_the_policy_rate_window_comes_from_the_spec():
    assert Policy.from_spec(ScalingSpec(windowSeconds=20)).window_s == 20.0
    assert Policy.from_spec(ScalingSpec()).window_s == D.LEVEL_S  # the default: the level the suite measured


@pytest.mark.parametrize(("pending_at", "now", "age"), [
    (232.5, 240.0, 7.5),  # pods scraped 7.5 s before the tick, on average
    (240.0, 240.0, 0.0),  # scraped at the tick
    (None, 240.0, 0.0),  # a source that does not say when: read as now
    (241.0, 240.0, 0.0),  # a clock a second ahead of the operator's: never negative
    (40.0, 240.0, 30.0),  # a stalled scrape: at most two ticks (15 s each)
])
def test_data_age_is_the_time_since_the_pods_were_scraped(pending_at, now, age):
    assert D.data_age(replace(ok(100), pending_at=pending_at), now, POLICY) == pytest.approx(age)


def test_the_plan_looks_ahead_from_when_its_data_was_scraped():
    st = State(rates=rates(*((t, 100 + 2.0 * t) for t in range(0, 241, 15))), cold_start_s=60.0)
    assert D.plan_horizon(st, POLICY, 7.5) == 82.5  # 7.5 s old + 60 s cold start + 15 s tick
    fresh, h0 = D.forecast(D.Demand(580.0, 580.0, 0.0), st, POLICY, 240.0)
    stale, h1 = D.forecast(D.Demand(580.0, 580.0, 0.0), st, POLICY, 240.0, age=7.5)
    assert (h0, h1) == (75.0, 82.5)
    # the ramp's 2 rps/s over the 7.5 s the data is behind, on top of the fresh plan
    assert stale - fresh == pytest.approx(2.0 * 7.5, rel=0.02)


# --- step: surprise ----------------------------------------------------------------------------
def test_surprise_when_the_rate_outruns_the_plan_of_a_cold_start_ago():
    # planned 120 all along, from a history long enough for the noise (noise_measured)
    hist = tuple((t, 100.0, 120.0) for t in range(-120, 181, 15))
    st = State(rates=hist, cold_start_s=60.0)
    assert D.surprise(st, D.Demand(119.0, 119.0, 0.0), 180.0).surprises == ()  # within the plan
    got = D.surprise(st, D.Demand(400.0, 400.0, 0.0), 180.0).surprises
    assert got == (180.0,)
    again = D.surprise(replace(st, surprises=got), D.Demand(400.0, 400.0, 0.0), 200.0).surprises
    assert again == (180.0,)  # one per cold start


def test_a_plan_read_low_for_one_tick_is_no_surprise_later():
    """A removed pod's rate leaves the sum a tick before its traffic shows on the others (a
    rollout, a scale-down): the plan of that tick is low, but the fleet was sized for the minute's
    highest plan, so the rate's return a cold start later is no surprise."""
    hist = tuple((t, 500.0, 550.0) for t in range(-120, 181, 15))
    dip = tuple((t, 380.0, 400.0) if t == 120 else (t, r, p) for t, r, p in hist)
    st = State(rates=dip, cold_start_s=60.0)
    assert D.surprise(st, D.Demand(520.0, 520.0, 0.0), 180.0).surprises == ()
    assert D.surprise(st, D.Demand(800.0, 800.0, 0.0), 180.0).surprises == (180.0,)  # a real rise still is


def test_the_span_of_plans_a_surprise_is_measured_against_is_the_rate_window():
    """A burst's plan from a rate window earlier hid the next burst: with 2 s ticks and a 10 s window (the
    sandbox's), bursts every 50 s, the fleet cut to 1 between them, no surprise was ever recorded (an
    exploratory review); the span covers what it is for, the one rate window a removed pod's rate is missing
    from the sum before the others' rates show its traffic."""
    burst = lambda t: 80.0 if -50 <= t <= -30 else 15.0  # noqa: E731 (the last burst, 30-50 s ago)
    hist = tuple((float(t), burst(t), 100.0 if burst(t) > 20 else 20.0) for t in range(-200, 1, 2))
    st = State(rates=hist, cold_start_s=8.0)
    now_burst = D.Demand(80.0, 80.0, 0.0)
    assert D.surprise(st, now_burst, 0.0, span=10.0).surprises == (0.0,)
    assert D.surprise(st, now_burst, 0.0, span=60.0).surprises == ()  # the last burst's plan in the span


def _jump_seen_over_three_ticks() -> State:
    """500 rps planned at 550 until t = 0, then a flash crowd's jump to 2,000 rps that the readings show
    over three ticks (each pod is scraped at its own offset): plans of 650, 1,600 and 2,200 at 0, 15 and
    30 s; the first reading of it (t = 0) was a surprise. Plans of 2,200 after."""
    before = tuple((float(t), 500.0, 550.0) for t in range(-300, 0, 15))
    jump = ((0.0, 600.0, 650.0), (15.0, 1500.0, 1600.0), (30.0, 2000.0, 2200.0))
    after = tuple((float(t), 2000.0, 2200.0) for t in range(45, 75, 15))
    return State(rates=before + jump + after, cold_start_s=60.0, surprises=(0.0,))


@pytest.mark.parametrize(("now", "rate", "surprised", "why"), [
    # 75 s after the first reading, the plans of a cold start ago (0-15 s: at most 1,600) are below
    # 2,000, but the plan of 30 s, while the jump still showed, covers it: the same jump, its replicas
    # starting -- no second surprise (one flash crowd counted twice engaged the burst memory)
    (75.0, 2000.0, False, "the same jump"),
    (75.0, 2600.0, True, "a rise above what the jump's own plans asked for"),
    # 30 minutes on, the jump's plans are long out of the window: a new burst of the same height after
    # a scale-down is a surprise again (on/off traffic's bursts recur at one height)
    (1800.0, 2000.0, True, "a later burst of the same height"),
])
def test_a_jump_seen_over_several_ticks_is_one_surprise(now, rate, surprised, why):
    st = _jump_seen_over_three_ticks()
    if now > 100:  # back at 500 rps (planned at 550) for the half hour before
        st = replace(st, rates=st.rates + tuple((float(t), 500.0, 550.0) for t in range(75, int(now), 15)))
    got = D.surprise(st, D.Demand(rate, rate, 0.0), now).surprises
    assert (got[-1] == now) is surprised, why


@pytest.mark.parametrize(("planned", "cap", "served"), [
    (500.0, 100.0, 6 * 90.0),  # 500 rps at 90 (0.9 x 100) a replica: 6 replicas, 540 rps
    (540.0, 100.0, 540.0),  # exactly 6 replicas' worth
    (10.0, 100.0, 90.0),  # one replica at least
    (500.0, None, 500.0),  # capacity unknown: the plan itself
])
def test_bought_is_what_the_plans_whole_replicas_serve(planned, cap, served):
    assert D.bought(planned, cap) == pytest.approx(served)


def test_decide_remembers_what_its_plan_bought_so_a_rise_within_the_last_replica_is_no_surprise():
    """Steady 500 rps on replicas of CAP: the plan buys whole replicas, and a rise a cold start
    later that they still serve (the last one's spare room) costs nothing -- no surprise."""
    st, now = State(cold_start_s=60.0), 0.0
    for _ in range(16):  # every plan a cold start before the rise had its noise measured
        now += 15.0
        d = D.decide(ok(500.0), Replicas(6, 6), POLICY, st, now)
        st = d.state
    served = st.rates[-1][2]
    assert served == pytest.approx(D.bought(d.details["planned_rps"], d.details["capacity_rps"]))
    assert served > d.details["planned_rps"] + 10.0  # spare room in the last replica
    rise = (served + d.details["planned_rps"]) / 2  # above the plan, within what it bought
    assert D.surprise(st, D.Demand(rise, rise, 0.0), now + 60.0).surprises == ()
    assert D.surprise(st, D.Demand(served + 50.0, served + 50.0, 0.0), now + 60.0).surprises == (now + 60.0,)


def test_the_first_plans_made_before_the_noise_was_measured_are_no_evidence_of_a_surprise():
    """A new service's first plans are its first readings, with no noise margin (noise needs
    2 x NOISE_SHIFTS x SHIFT_READINGS + 1 differences): a later reading above one of them is no evidence. The same
    reading against the same plans, made once enough samples preceded them, is a surprise. (With
    three differences, as before, the plans at 60 and 75 s counted, and 390 was a surprise.)
    Within one minute of plans it is all of them or none (``signals.surprise``)."""
    first = ((-15.0, 371.0, 371.0), (0.0, 375.0, 375.0),
             (15.0, 376.0, 376.0), (30.0, 377.0, 377.0), (45.0, 380.0, 380.0), (60.0, 365.0, 365.0),
             (75.0, 366.0, 366.0), (90.0, 384.0, 384.0), (105.0, 377.0, 380.0), (120.0, 378.0, 381.0))
    st = State(rates=first + ((135.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(st, D.Demand(390.0, 390.0, 0.0), 135.0).surprises == ()
    later = tuple((t + 120.0, r, p) for t, r, p in first[2:])  # the same plans, once ten samples preceded them
    st = State(rates=first + later + ((255.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(st, D.Demand(390.0, 390.0, 0.0), 255.0).surprises == (255.0,)
    # ... and a minute of plans only some of which had their noise is no evidence either: the others
    # alone would be a lower bar than the fleet was sized for
    mixed = State(rates=first + later[:3] + ((180.0, 390.0, 392.0),), cold_start_s=60.0)
    assert D.surprise(mixed, D.Demand(390.0, 390.0, 0.0), 180.0).surprises == ()


# --- step: recommend ---------------------------------------------------------------------------
@pytest.mark.parametrize(("demand", "planned", "cap", "current", "replicas", "reason"), [
    (D.Demand(0.0, 0.0, 0.0), 0.0, CAP, 5, 1, "Idle"),
    (D.Demand(500.0, 500.0, 0.0), 500.0, None, 3, 3, "LearningCapacity"),
    (D.Demand(1000.0, 1000.0, 0.0), 1000.0, CAP, 2, math.ceil(1000 / (CAP * D.UTILISATION)), "LoadIncreased"),
    (D.Demand(1000.0, 1000.0, 7500.0), 1000.0, CAP, 2, math.ceil((1000 + 100) / (CAP * D.UTILISATION)),
     "LoadIncreased"),  # 7,500 queued drain over the 75 s horizon: +100 rps
    (D.Demand(1000.0, 1000.0, 1e6), 1000.0, CAP, 2, math.ceil(1000 * (1 + D.BACKLOG_MAX_EXTRA) / (CAP * D.UTILISATION)),
     "LoadIncreased"),  # a huge backlog: a quarter more at most
    (D.Demand(200.0, 200.0, 0.0), 200.0, CAP, 4, 1, "LoadDecreased"),
])
def test_recommend(demand, planned, cap, current, replicas, reason):
    step = D.recommend(demand, planned, 75.0, cap, "batch cost", current, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


# --- step: breach ------------------------------------------------------------------------------
@pytest.mark.parametrize(("obs", "rep", "rec", "replicas", "reason"), [
    (ok(900, p95=80, pending=500), Replicas(4, 4), 4, 4, "Steady"),  # no breach
    (ok(900, p95=300, pending=0), Replicas(4, 4), 4, 4, "Steady"),  # breach, no queue: the summary lags
    (ok(900, p95=300, pending=500), Replicas(4, 4), 4, 5, "LatencyAboveTarget"),  # one more, not 3x more
    (ok(900, p95=3000, pending=5000), Replicas(4, 4), 4, 5, "LatencyAboveTarget"),  # still one more
    (ok(900, p95=300, pending=500), Replicas(4, 4), 7, 7, "LatencyAboveTarget"),  # the rate asks more already
    (ok(900, p95=300, pending=500), Replicas(6, 4), 5, 6, "WaitingForWarmup"),  # starting replicas cover it
])
def test_breach_is_bounded(obs, rep, rec, replicas, reason):
    step = D.breach(Step(rec, "Steady", ""), obs, rep, CAP, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


def test_a_breach_without_queue_pressure_says_both_causes_and_the_queue_it_weighed():
    """It said "the summary lags" only, also while 40 requests were queued and for a model whose own
    latency was above the target for good (an exploratory review's finding)."""
    none = D.breach(Step(4, "Steady", "x"), ok(900, p95=300, pending=0), Replicas(4, 4), CAP, POLICY)
    # "more replicas would not help" read as a contradiction appended to a scale-up the plan made (an
    # exploratory review): it is the breach rule's share that is none
    assert "with no queue under 1x the target: the breach adds no replica to the plan" in none.why, none.why
    assert "or the model's own latency is above the target" in none.why, none.why
    small = D.breach(Step(4, "Steady", "x"), ok(900, p95=300, pending=10), Replicas(4, 4), CAP, POLICY)
    assert small.replicas == 4
    assert f"with 10 queued, {10 / 4 / CAP * 1000:.0f} ms of work per ready replica, under 1x" in small.why, small.why


@pytest.mark.parametrize(("pending", "most_queued", "replicas", "reason"), [
    # 40 queued over 4 replicas is 36 ms of work each at ~278 rps: under the target
    (40, None, 4, "Steady"),  # a source without the most-queued pod's gauge: the mean, as before
    (40, 10, 4, "Steady"),  # spread evenly: no pressure
    (40, 40, 5, "LatencyAboveTarget"),  # all on one pod (gRPC clients that drew it): 144 ms of work there
])
def test_a_breach_weighs_the_most_queued_replica(pending, most_queued, replicas, reason):
    """A Service balances gRPC clients by connection: the queue sits on the pods that drew the most clients,
    and spread over the fleet it read as no pressure, breach after breach (``simulate --routing connection
    --connections 64``: "p95 254 ms > target 104 ms with 23 queued, 20 ms of work per ready replica")."""
    obs = replace(ok(900, p95=300, pending=pending), pending_max=most_queued)
    step = D.breach(Step(4, "Steady", "x"), obs, Replicas(4, 4), CAP, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)
    if most_queued == 10:
        assert f"with 40 queued, {40 / 4 / CAP * 1000:.0f} ms of work on the most-queued replica" in step.why, step.why


@pytest.mark.parametrize(("before", "replicas", "reason"), [
    (4.0, 5, "LatencyAboveTarget"),  # the same 4 served the interval and the queue grew: one more
    (2.0, 4, "WaitingForWarmup"),  # 2 joined since the last tick: the growth was measured without them
    (None, 5, "LatencyAboveTarget"),  # no last tick to compare with: the breach rule as before
])
def test_breach_waits_a_tick_for_replicas_that_just_became_ready(before, replicas, reason):
    last = None if before is None else PendingReading(0.0, 350.0, before)
    growing = D.Demand(900.0, 900.0, 500.0, growth=10.0, last=last)
    step = D.breach(Step(4, "Steady", ""), ok(900, p95=300, pending=500), Replicas(4, 4), CAP, POLICY, growing)
    assert (step.replicas, step.reason) == (replicas, reason)


# --- step: settle ------------------------------------------------------------------------------
@pytest.mark.parametrize(("before", "earlier", "queued", "rep", "rec", "reason", "replicas"), [
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 4, "QueueDraining", 3),  # joined at this tick, backlog drains: hold
    (3.0, 1.0, (11.0, 2.0), Replicas(3, 3), 4, "QueueDraining", 3),  # joined the tick before (the sandbox's step)
    (3.0, 1.0, (20.0, 10.0), Replicas(3, 3), 4, "QueueDraining", 3),  # half the queue gone: a drain
    (3.0, 3.0, (30.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no one joined within two ticks
    (3.0, 1.0, (33.0, 31.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # forming batches wobble: no drain
    (3.0, 1.0, (11.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # the queue holds: the reading is arrivals
    (3.0, 1.0, (11.0, 21.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # the queue grows: scale up
    (3.0, 1.0, (None, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no earlier queue reading
    (3.0, 1.0, (0.0, 0.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no queue then or now: nothing drained
    (2.0, 1.0, (30.0, 11.0), Replicas(4, 3), 5, "LoadIncreased", 5),  # a replica still starting: not all ready
    (None, None, (30.0, 11.0), Replicas(3, 3), 4, "LoadIncreased", 4),  # no earlier ticks to compare with
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 3, "Steady", 3),  # no scale-up to hold
    (1.0, 1.0, (30.0, 11.0), Replicas(3, 3), 2, "LoadDecreased", 2),  # scale-down is not its business
])
def test_settle_holds_scale_up_while_new_replicas_drain_the_queue(before, earlier, queued, rep, rec, reason,
                                                                     replicas):
    was, now = queued
    growth = 0.0 if was is None else (now - was) / 2.0  # the sandbox's 2 s ticks
    last = None if was is None else PendingReading(0.0, was, before, 0.0, 0.0, earlier)  # None: no last reading
    d = D.Demand(93.0, 70.0, now, growth=growth, last=last)
    step = D.settle(Step(rec, "LoadIncreased" if rec > 3 else ("Steady" if rec == 3 else "LoadDecreased"), ""),
                    d, rep)
    assert (step.replicas, step.reason) == (replicas, reason)


def test_settle_leaves_a_breach_with_a_queue_to_the_breach_rule():
    d = D.Demand(93.0, 70.0, 5.0, growth=-11.5, last=PendingReading(0.0, 28.0, 1.0, 0.0, 0.0, 1.0))
    step = D.settle(Step(4, "LatencyAboveTarget", ""), d, Replicas(3, 3))
    assert (step.replicas, step.reason) == (4, "LatencyAboveTarget")


def test_the_last_two_ready_counts_reach_demand():
    """learn records the ready count of the tick before the last, and demand reads both."""
    st = State(last_pending=PendingReading(0.0, 30.0, 1.0, 5.0, 10.0))  # 1 ready at the last tick (an old memory)
    st = D.learn(st, replace(ok(70, pending=28.0), pending_at=2.0), Replicas(3, 3), POLICY, 2.0, 70.0)
    assert st.last_pending is not None and st.last_pending[2:3] + st.last_pending[5:6] == (3.0, 1.0)
    d = D.demand(replace(ok(70, pending=5.0), pending_at=4.0), st, 4.0)
    assert d.last is not None and (d.last.ready, d.last.ready_before, d.last.pending) == (3.0, 1.0, 28.0)
    old = D.demand(ok(70), State(last_pending=PendingReading(0.0, 30.0, 1.0, 5.0, 10.0)), 4.0).last
    assert old is not None and old.ready_before is None


# --- step: tolerate ----------------------------------------------------------------------------
@pytest.mark.parametrize(("rec", "planned", "current", "replicas", "reason"), [
    (3, 4 * CAP * D.UTILISATION * 0.95, 4, 4, "WithinTolerance"),  # 95% of plan: hold
    (2, 4 * CAP * D.UTILISATION * 0.5, 4, 3, "LoadDecreased"),  # 2 would run full: 3, with hysteresis
    (2, 4 * CAP * D.UTILISATION * 0.4, 4, 2, "LoadDecreased"),
    (6, 4 * CAP * D.UTILISATION * 1.3, 4, 6, "LoadIncreased"),  # scale-up is never held back
])
def test_tolerate_holds_scale_down_only(rec, planned, current, replicas, reason):
    step = D.tolerate(Step(rec, "LoadDecreased" if rec < current else "LoadIncreased", ""), planned, CAP,
                      current, POLICY)
    assert (step.replicas, step.reason) == (replicas, reason)


@pytest.mark.parametrize(("rec", "planned", "current", "revised", "replicas", "reason"), [
    (2, 3 * CAP * D.UTILISATION * 2 / 3 * 0.95, 3, True, 2, "LoadDecreased"),  # 2 at 95%: no band for it
    (2, 3 * CAP * D.UTILISATION * 2 / 3 * 0.95, 3, False, 3, "WithinTolerance"),  # ... which holds 3 otherwise
    (3, 4 * CAP * D.UTILISATION * 0.95, 4, True, 3, "LoadDecreased"),  # within the band at 4: still not held
    (6, 4 * CAP * D.UTILISATION * 1.3, 4, True, 6, "LoadIncreased"),  # a scale-up is its own
])
def test_tolerate_does_not_hold_a_count_raised_on_a_revised_guess(rec, planned, current, revised, replicas, reason):
    step = D.tolerate(Step(rec, "LoadDecreased" if rec < current else "LoadIncreased", ""), planned, CAP,
                      current, POLICY, revised=revised)
    assert (step.replicas, step.reason) == (replicas, reason)
    assert ("guessed from one batch size" in step.why) is (revised and rec < current)


_FLAT = 2 * CAP * D.UTILISATION * 0.95  # 2 replicas carry it at 95% of the plan: within the tolerance


def _flat(state: State, now: float) -> State:
    """``state`` with a flat rate history long enough for the noise (steps.measure lets it scale down),
    the recommendation of 3 older than the scale-down window and the last tick's of 2 within it
    (steps.stabilize: a memory with none in the window is a lapse, and holds the count)."""
    return replace(state, rates=tuple((now - 15.0 * k, _FLAT, _FLAT) for k in range(30, 0, -1)),
                   recommendations=((now - 200.0, 3, 2), (now - 15.0, 2, 2)))


@pytest.mark.parametrize(("raised_on_guess", "replicas"), [(True, 2), (False, 3)])
def test_a_count_raised_on_a_guess_is_released_once_the_capacity_is_known(raised_on_guess, replicas):
    st = _flat(known_capacity(State(raised_on_guess=raised_on_guess)), 1000.0)
    d = D.decide(ok(_FLAT, batch=8.0), Replicas(3, 3), POLICY, st, 1000.0)
    assert d.replicas == replicas, d.message
    assert d.state.raised_on_guess is (raised_on_guess and replicas == 3)  # a scale-down clears it


def test_a_count_raised_on_a_guess_is_held_while_the_capacity_is_still_the_guess():
    st = _flat(State(batch_samples=((8.0, A_MS + 8 * B_MS, 1000.0),), raised_on_guess=True), 1000.0)
    d = D.decide(ok(_FLAT, batch=8.0), Replicas(3, 3), POLICY, st, 1000.0)
    assert "one batch size" in d.message and d.replicas == 3 and d.state.raised_on_guess


@pytest.mark.parametrize(("samples", "flag"), [
    (((8.0, A_MS + 8 * B_MS, 0.0),), True),  # one batch size: the scale-up rests on the guess
    (None, False),  # the cost line known
])
def test_a_scale_up_records_whether_it_rested_on_a_guess(samples, flag):
    st = known_capacity() if samples is None else State(batch_samples=samples)
    d = D.decide(ok(3 * CAP, batch=8.0), Replicas(2, 2), POLICY, st, 15.0)
    assert d.replicas > 2 and d.state.raised_on_guess is flag, d.message


# --- step: measure -----------------------------------------------------------------------------
SHORT = tuple((15.0 * k, 500.0, 500.0) for k in range(9))  # 8 differences: the noise is not measured yet
LONG = tuple((15.0 * k, 500.0, 500.0) for k in range(10))  # 9: it is (2 x NOISE_SHIFTS x SHIFT_READINGS + 1)


@pytest.mark.parametrize(("hist", "step", "current", "replicas", "reason"), [
    (SHORT, D.Step(3, "LoadDecreased", "x"), 5, 5, "MeasuringNoise"),  # a plan without its margin: no less
    (LONG, D.Step(3, "LoadDecreased", "x"), 5, 3, "LoadDecreased"),
    (SHORT, D.Step(7, "LoadIncreased", "x"), 5, 7, "LoadIncreased"),  # more, at once
    (SHORT, D.Step(1, "Idle", "x"), 5, 1, "Idle"),  # no requests: nothing to measure
    (SHORT, D.Step(5, "Steady", "x"), 5, 5, "Steady"),
])
def test_measure_holds_scale_down_until_the_noise_is_measured(hist, step, current, replicas, reason):
    now = hist[-1][0]
    assert D.noise_measured(hist, now) == (len(hist) - 1 >= 2 * D.NOISE_SHIFTS * D.SHIFT_READINGS + 1)
    got = D.measure(step, State(rates=hist), now, current)
    assert (got.replicas, got.reason) == (replicas, reason)


# --- step: climbing ----------------------------------------------------------------------------
FLAT = tuple((15.0 * k, 1000.0 + (5.0 if k % 2 else -5.0), 0.0) for k in range(20))  # noise ~5 rps
VEE = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 760.0), (360.0, 830.0))
FALL = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 650.0), (360.0, 600.0))
WOBBLE = FLAT + rates((300.0, 900.0), (315.0, 800.0), (330.0, 700.0), (345.0, 701.0), (360.0, 703.0))
# two minutes up at 2 rps/s out of a drop: in the 75 s window the low is 820 rps at 360 s and the latest reading
# 970, so the climb leads to 970 + 2 rps/s x 75 s (a 60 s cold start and a tick) = 1,120 rps
SEEN = FLAT + rates(*((300.0 + 15.0 * k, 700.0 + 30.0 * k) for k in range(10)))


@pytest.mark.parametrize(("hist", "step", "planned", "replicas", "reason"), [
    (VEE, D.Step(3, "LoadDecreased", "x"), None, 5, "RateClimbing"),  # 130 rps out of the window's low of 700
    (FALL, D.Step(3, "LoadDecreased", "x"), None, 3, "LoadDecreased"),  # still falling: the low is now
    (WOBBLE, D.Step(3, "LoadDecreased", "x"), None, 3, "LoadDecreased"),  # 3 rps over the low: within the noise
    (VEE, D.Step(7, "LoadIncreased", "x"), None, 7, "LoadIncreased"),  # scale-ups are not its business
    (VEE, D.Step(1, "Idle", "x"), None, 1, "Idle"),  # no requests: the floor
    (SEEN, D.Step(3, "LoadDecreased", "x"), 1120.0, 3, "LoadDecreased"),  # the plan carries the climb
    (SEEN, D.Step(3, "LoadDecreased", "x"), 1100.0, 5, "RateClimbing"),  # not yet where the climb leads
    (SEEN, D.Step(3, "LoadDecreased", "x"), None, 5, "RateClimbing"),  # no plan given: held while it climbs
])
def test_climbing_holds_a_scale_down_while_the_rate_climbs_out_of_the_windows_low(hist, step, planned, replicas,
                                                                                    reason):
    now = hist[-1][0]
    got = D.climbing(step, State(rates=hist, cold_start_s=60.0), POLICY, 5, now, planned=planned)
    assert (got.replicas, got.reason) == (replicas, reason)
    if reason == "RateClimbing" and hist is VEE:
        assert "climbs 130 rps out of the lowest reading of the last 75s" in got.why
    if planned == 1100.0:
        assert "until the plan reaches where the climb leads, 1120 rps" in got.why


def test_climbing_expects_the_climb_to_go_on_as_far_as_the_rate_delivered_its_trends(monkeypatch):
    # SEEN's climb leads to 970 + 2 rps/s x 75 s; a rate that delivered half its trends, to 970 + 75
    monkeypatch.setattr(D.steps, "trend_delivery", lambda *a: 0.5)
    state = State(rates=SEEN, cold_start_s=60.0)
    held = D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, SEEN[-1][0], planned=1040.0)
    assert held.reason == "RateClimbing" and "where the climb leads, 1045 rps" in held.why
    assert D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, SEEN[-1][0], planned=1045.0).replicas == 3


def test_climbing_reads_only_the_scale_down_window(monkeypatch):
    # at a 15 s cold start the window is 30 s (cold start + tick): the low of 700 rps at 330 s is outside
    # it, and the climb is counted from 830 rps at 360 s
    state = State(rates=VEE + rates((375.0, 900.0), (390.0, 970.0)), cold_start_s=15.0)
    got = D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, 390.0)
    assert got.reason == "RateClimbing" and "climbs 140 rps out of the lowest reading of the last 30s" in got.why
    monkeypatch.setattr(D.constants, "CLIMB_NOISES", 0.0)  # off
    assert D.climbing(D.Step(3, "LoadDecreased", "x"), state, POLICY, 5, 390.0).replicas == 3


# --- step: complete -----------------------------------------------------------------------------
@pytest.mark.parametrize(("step", "pods", "ready_before", "replicas", "reason"), [
    # 4 of 6 pods unseen: the rate reads a third of the load; one replica kept per missing pod
    (D.Step(3, "LoadDecreased", "x"), 2.0, 6, 6, "PartialData"),
    (D.Step(1, "Idle", "x"), 2.0, 6, 5, "PartialData"),  # the unseen pods may be the busy ones
    (D.Step(1, "LoadDecreased", "x"), 5.0, 6, 2, "PartialData"),  # one unseen: the seen load's 1, and 1
    (D.Step(3, "LoadDecreased", "x"), 2.0, None, 6, "PartialData"),  # no earlier tick: the ready count now
    (D.Step(3, "LoadDecreased", "x"), 6.0, 6, 3, "LoadDecreased"),
    (D.Step(3, "LoadDecreased", "x"), 7.0, 6, 3, "LoadDecreased"),  # a starting pod scraped too: no matter
    (D.Step(3, "LoadDecreased", "x"), None, 6, 3, "LoadDecreased"),  # a source that does not count pods
    (D.Step(3, "LoadDecreased", "x"), 4.0, 4, 3, "LoadDecreased"),  # 2 ready since the last tick, unscraped yet
    (D.Step(3, "LoadDecreased", "x"), 3.0, 4, 4, "PartialData"),
    (D.Step(9, "LoadIncreased", "x"), 2.0, 6, 9, "LoadIncreased"),  # a low reading that still asks for more
    (D.Step(6, "Steady", "x"), 2.0, 6, 6, "Steady"),
])
def test_complete_keeps_a_replica_for_each_pod_missing_from_the_series(step, pods, ready_before, replicas, reason):
    obs = replace(ok(100.0), pods=pods)
    state = State(last_pending=PendingReading(0.0, 0.0, 6.0, 0.0, 0.0, ready_before))
    got = D.complete(step, obs, Replicas(6, 6), state, 6)
    assert (got.replicas, got.reason) == (replicas, reason)
    if reason == "PartialData":
        settled = min(6, ready_before or 6)
        assert got.why.endswith(f"only {pods:.0f} of the {settled} ready replicas export Triton's series now: "
                                "one replica kept for each missing pod")


@pytest.mark.parametrize(("step", "pods", "rate_pods", "replicas", "what"), [
    # a window shorter than two scrape intervals: every pod has series, 3 of 6 a rate -- half the load read
    (D.Step(3, "LoadDecreased", "x"), 6.0, 3.0, 6, "have a rate over the window (two scrapes in it)"),
    (D.Step(2, "LoadDecreased", "x"), 6.0, 5.0, 3, "have a rate over the window (two scrapes in it)"),
    (D.Step(3, "LoadDecreased", "x"), 4.0, 3.0, 6, "export Triton's series now"),  # scrapes failing too
    (D.Step(3, "LoadDecreased", "x"), 6.0, 6.0, 3, None),
    (D.Step(3, "LoadDecreased", "x"), 6.0, None, 3, None),  # a source that does not count them (the simulator)
    (D.Step(8, "LoadIncreased", "x"), 6.0, 3.0, 8, None),  # scale-ups are left alone
])
def test_complete_keeps_a_replica_for_each_pod_without_a_rate_over_the_window(step, pods, rate_pods, replicas, what):
    """A windowSeconds under twice the scrape interval read a third to half of the traffic as all of it,
    status said Available, and the fleet settled at 3 where 5 were needed, or flapped 6 -> 5 -> 6 (an
    exploration against Debian's Prometheus, session 55)."""
    obs = replace(ok(100.0), pods=pods, rate_pods=rate_pods)
    state = State(last_pending=PendingReading(0.0, 0.0, 6.0, 0.0, 0.0, 6))
    got = D.complete(step, obs, Replicas(6, 6), state, 6)
    assert got.replicas == replicas
    if what is None:
        assert got.reason == step.reason
    else:
        assert got.reason == "PartialData" and f"ready replicas {what}: one replica kept" in got.why, got.why


def test_noise_is_measured_over_the_last_five_minutes_or_enough_readings_at_long_ticks():
    """At 15 s ticks the last NOISE_S hold 20 readings; at 60 s ticks only 5 or 6, never the 10 the
    noise needs, so a slow-ticking service would never measure it -- and, held by ``measure``, never
    scale down. There the last readings enough for both lags' estimates count instead, and the rate
    history keeps that many."""
    wobble = (3.0, -4.0, 6.0, -1.0, 2.0, -7.0, 5.0, 0.0, -3.0, 4.0)
    slow = tuple((60.0 * k, 500.0 + wobble[k], 500.0) for k in range(10))
    now = slow[-1][0]
    assert sum(1 for e in slow if now - e[0] <= D.NOISE_S) == 6
    assert D.noise_measured(slow, now) and D.noise(slow, now) > 0.0
    assert not D.noise_measured(slow[:9], slow[8][0])  # eight differences: not yet
    fast = tuple((15.0 * k, 500.0, 500.0) for k in range(40))
    assert D.noise_measured(fast, fast[-1][0])
    policy = replace(POLICY, interval_s=60.0)
    assert D.signals.rate_memory(State(cold_start_s=15.0), policy) >= 14 * 60.0  # 15 readings at 60 s


# --- step: stabilize (windows and burst memory) --------------------------------------------------
def test_scale_down_window_is_learned_unless_set():
    # what a removed replica takes to come back: the learned cold start and one tick
    assert D.scale_down_window(POLICY, State(cold_start_s=90.0))[0] == 90.0 + POLICY.interval_s
    assert D.scale_down_window(POLICY, State())[0] == D.DEFAULT_COLD_START_S + POLICY.interval_s
    assert D.scale_down_window(POLICY, State(cold_start_s=5.0))[0] == 2 * POLICY.interval_s
    assert D.scale_down_window(replace(POLICY, scale_down_stabilization_s=300.0), State())[0] == 300.0


def test_burst_hold_needs_recurring_surprises_and_grows_with_their_gaps():
    tick = POLICY.interval_s
    assert D.burst_hold(State(cold_start_s=60.0, surprises=(100.0,)), 150.0, tick) == 0.0  # one may be a one-off
    st = State(cold_start_s=60.0, surprises=(100.0, 400.0))
    assert D.burst_hold(st, 450.0, tick) == D.SURPRISE_HOLD_COLD_STARTS * 60.0  # 2 x 300 s gap < 10 cold starts
    assert D.burst_hold(st, 400.0 + D.SURPRISE_HOLD_COLD_STARTS * 60.0 + 1, tick) == 0.0  # expired
    st = State(cold_start_s=60.0, surprises=(100.0, 1000.0))
    assert D.burst_hold(st, 1100.0, tick) == min(D.MAX_BURST_HOLD_S, D.BURST_HOLD_GAPS * 900.0)
    assert D.burst_hold(State(), 0.0, tick) == 0.0


@pytest.mark.parametrize(("cold_start_s", "surprises", "hold"), [
    # 60 s cold start: each surprise costs ~75 s of misses, the budget is 180 s (10% of 1800 s)
    (60.0, (555.0, 780.0), 600.0),  # two: 150 s spent, 10 cold starts (2 x the 225 s gap is less)
    # three spent it (225 s): the next surprise would break the objective, so the memory holds its
    # longest -- not 10 cold starts (600 s; 2 x the 270 s gap is less), which the next on/off burst,
    # 740 s on, outlasted (onoff/cold60s/tight/seed6)
    (60.0, (555.0, 780.0, 1050.0), 1800.0),
    (15.0, (100.0, 200.0, 300.0), 200.0),  # 15 s: three cost ~90 s, within the budget: 2 x the gap
    (15.0, tuple(100.0 * k for k in range(1, 7)), 1800.0),  # six cost ~180 s: spent
])
def test_burst_hold_is_longest_once_the_surprises_spent_the_window_budget(cold_start_s, surprises, hold):
    st = State(cold_start_s=cold_start_s, surprises=surprises)
    assert D.burst_hold(st, surprises[-1] + 1.0, POLICY.interval_s) == hold


@pytest.mark.parametrize(("surprises", "now", "kept"), [
    ((), 100.0, ()),
    ((100.0,), 1900.0, (100.0,)),  # the last one MAX_BURST_HOLD_S ago: still remembered
    ((100.0,), 1901.0, ()),  # then forgotten
    # The group the last surprise came in, measured back from it, not from now: the first is
    # 1,830 s old, but within MAX_BURST_HOLD_S of the second, so the memory they engaged holds
    # for its whole hold after the second (steps/cold60s/tight/seed7 let go of it here)
    ((690.0, 2040.0), 2520.0, (690.0, 2040.0)),
    ((100.0, 2000.0, 2500.0), 2600.0, (2000.0, 2500.0)),  # 100 s is 2,400 s before the last
    ((690.0, 2040.0), 3841.0, ()),
])
def test_recurring_surprises_are_measured_back_from_the_last_one(surprises, now, kept):
    assert D.recurring(surprises, now) == kept


def test_the_burst_memory_holds_its_whole_hold_after_the_second_surprise():
    """Surprises at 690 and 2,040 s at a 60 s cold start engage the memory (two recur), which holds
    min(MAX_BURST_HOLD_S, 2 x the 1,350 s gap) = 1,800 s after the second. Each tick's ``surprise``
    keeps both until then, though the first is older than MAX_BURST_HOLD_S from 2,490 s on."""
    hist = tuple((float(t), 500.0, 600.0) for t in range(2220, 2521, 15))
    st = State(rates=hist, cold_start_s=60.0, surprises=(690.0, 2040.0))
    for now in (2520.0, 3000.0, 3840.0):
        after = D.surprise(st, D.Demand(500.0, 500.0, 0.0), now)
        assert after.surprises == (690.0, 2040.0)
        assert D.burst_hold(after, now, POLICY.interval_s) == D.MAX_BURST_HOLD_S
    gone = D.surprise(st, D.Demand(500.0, 500.0, 0.0), 3841.0)
    assert gone.surprises == () and D.burst_hold(gone, 3841.0, POLICY.interval_s) == 0.0


@pytest.mark.parametrize(("cold_start_s", "interval_s", "cost"), [
    (None, 15.0, D.DEFAULT_COLD_START_S + 15.0),  # nothing learned: the default cold start
    (15.0, 15.0, 30.0),
    (60.0, 15.0, 75.0),
    (180.0, 30.0, 210.0),
])
def test_a_surprise_costs_a_horizon_against_a_tenth_of_the_memory(cold_start_s, interval_s, cost):
    st = State() if cold_start_s is None else State(cold_start_s=cold_start_s)
    assert D.surprise_cost(st, interval_s) == (cost, D.SURPRISE_BUDGET * D.MAX_BURST_HOLD_S)


@pytest.mark.parametrize(("cold_start_s", "interval_s", "needed"), [
    (15.0, 15.0, 2),  # a surprise costs ~30 s of misses: a single one may be a one-off
    (60.0, 15.0, 2),  # ~75 s: two fit the budget (10% of 1800 s = 180 s)
    (75.0, 15.0, 2),  # ~90 s: two still fit
    (90.0, 15.0, 1),  # ~105 s: a second would not
    (180.0, 15.0, 1),  # ~195 s: one already spends the budget
    (600.0, 30.0, 1),
])
def test_surprises_for_memory_follows_what_a_surprise_costs(cold_start_s, interval_s, needed):
    st = State(cold_start_s=cold_start_s)
    assert D.surprises_for_memory(st, interval_s) == needed
    one = replace(st, surprises=(100.0,))
    assert (D.burst_hold(one, 150.0, interval_s) > 0.0) == (needed == 1)


def _fall_case(cold_start_s: float, now_rate: float, before: tuple[float, ...], surprises=()) -> State:
    """Readings every 15 s up to t = 600 (noise ~1 rps), then ``before`` for the last minute and
    ``now_rate`` at t = 660; returns the state after ``sudden_fall``."""
    steady = tuple((15.0 * k, 1000.0 + (k % 2)) for k in range(40))
    last = tuple((600.0 + 15.0 * (i + 1), r) for i, r in enumerate(before))
    st = State(cold_start_s=cold_start_s, rates=rates(*steady, *last, (660.0, now_rate)), surprises=surprises)
    return D.sudden_fall(st, Demand(now_rate, now_rate, 0.0), 660.0, CAP, POLICY.interval_s)


@pytest.mark.parametrize(("cold_start_s", "now_rate", "before", "surprises", "recorded"), [
    (180.0, 550.0, (1000.0, 1000.0, 1000.0), (), True),  # a step down by ~1.8 replicas
    (60.0, 550.0, (1000.0, 1000.0, 1000.0), (), False),  # short cold start: memory waits for two
    (180.0, 900.0, (1000.0, 1000.0, 1000.0), (), False),  # less than one replica's capacity
    (180.0, 940.0, (1010.0, 990.0, 970.0), (), False),  # a slope: within a minute no replica freed
    (180.0, 1000.0, (1000.0, 1600.0, 1000.0), (), False),  # a burst's end: back to the minute's level
    (180.0, 550.0, (1000.0, 1000.0, 1000.0), (500.0,), False),  # the memory already holds
])
def test_sudden_fall_engages_the_memory_only_for_a_jump_at_long_cold_starts(
        cold_start_s, now_rate, before, surprises, recorded):
    st = _fall_case(cold_start_s, now_rate, before, surprises)
    assert (660.0 in st.surprises) == recorded
    if recorded:  # and the memory then holds: the need from before the fall is kept
        assert D.burst_hold(st, 700.0, POLICY.interval_s) > 0.0


def test_stabilize_holds_the_window_maximum_and_the_burst_memory():
    st = State(cold_start_s=60.0, recommendations=((0.0, 8, 7), (50.0, 6, 5)))
    step, _ = D.stabilize(Step(3, "LoadDecreased", ""), st, POLICY, 8, 100.0, remember=3, bare=3)
    assert (step.replicas, step.reason) == (6, "StabilizingScaleDown")  # 8 is outside the 60 s window
    burst = replace(st, surprises=(5.0, 10.0))
    step, _ = D.stabilize(Step(3, "LoadDecreased", ""), burst, POLICY, 8, 100.0, remember=3, bare=3)
    assert (step.replicas, step.reason) == (7, "BurstMemory")  # the bare peak need since the surprise
    step, _ = D.stabilize(Step(9, "LoadIncreased", ""), st, POLICY, 8, 100.0, remember=9, bare=8)
    assert step.replicas == 9  # scale-up at once (window 0)


def test_a_hold_above_the_count_found_keeps_that_count_and_says_so():
    """As the HPA's scale-down window: a hold keeps replicas and adds none. A count another writer cut below
    the burst memory (kubectl scale to 3 while 8 was held) stays at 3, and the reason says it: it read
    "holding the peak need of 8 ... -> 3 replicas"."""
    burst = State(cold_start_s=60.0, recommendations=((50.0, 8, 8),), surprises=(5.0, 10.0))
    step, _ = D.stabilize(Step(2, "LoadDecreased", ""), burst, POLICY, 3, 100.0, remember=2, bare=2)
    assert (step.replicas, step.reason) == (3, "BurstMemory")
    assert "holding the peak need of 8" in step.why and "(held at the 3 there are: a hold keeps replicas, " \
        "it adds none)" in step.why
    step, _ = D.stabilize(Step(2, "LoadDecreased", ""), burst, POLICY, 8, 100.0, remember=2, bare=2)
    assert step.replicas == 8 and "held at the" not in step.why  # the hold within the count: said as before


def test_empty_memory_seeds_the_window_with_the_current_size():
    step, st = D.stabilize(Step(2, "LoadDecreased", ""), State(), POLICY, 6, 1000.0, remember=2, bare=2)
    assert step.replicas == 6 and st.recommendations[0][1] == 6


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
