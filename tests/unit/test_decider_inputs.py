"""The pure decider, step by step (guard, demand and learn: what the decider takes from a tick's readings): a
table (or a few cases) per step of the pipeline; split from test_decider.py. Scenarios over time are in
test_decider_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from support.decider_cases import FAILED, NO_DATA, POLICY, ok
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, PendingReading, Replicas, State


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


def test_learn_skips_batch_samples_while_a_new_pod_template_rolls_out():
    """Old and new pods side by side for the whole rollout (a batcher change: one queue delay on some pods,
    another on the rest) run batches of different sizes, and the request-weighted time reads high; at most of
    its ticks no pod has joined within the readings, so ``joined`` alone let such samples in."""
    s = D.learn(State(), ok(100, pending=1.0, batch=4.0), Replicas(3, 3), POLICY, 0.0, 100.0)
    s = D.learn(s, ok(100, pending=1.0, batch=4.1), Replicas(3, 3), POLICY, 15.0, 100.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4]
    for t in (30.0, 45.0, 60.0):  # steady readings, the ready count held: only the rollout is in the way
        s = D.learn(s, ok(150, pending=1.0, batch=6.0), Replicas(4, 3, rolling_out=True), POLICY, t, 150.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4]
    full = ok(900, pending=1.0, batch=16.0)  # full batches on every pod, whatever its settings: taken
    s = D.learn(s, full, Replicas(4, 3, rolling_out=True), POLICY, 75.0, 900.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4, 16]
    s = D.learn(s, ok(150, pending=1.0, batch=6.0), Replicas(3, 3), POLICY, 90.0, 150.0)  # rolled out
    s = D.learn(s, ok(150, pending=1.0, batch=6.0), Replicas(3, 3), POLICY, 105.0, 150.0)
    assert sorted(round(e[0]) for e in s.batch_samples) == [4, 6, 16]


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
