"""The queueing a model without batching sees, measured against the M/D/1 model its capacity
comes from (capacity.learn_queueing, capacity.unbatched_capacity)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.decider_cases import POLICY
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, PendingReading, Replicas, State
from tritonscale.scaling.decider.batcher_model import md1_p95_capacity, md1_p95_wait_ms, saturation_rps
from tritonscale.scaling.decider.capacity import last_join, learn_queueing, unbatched_capacity

SERVICE = 22.0  # ms per request: batch cost a + b = 11 + 11 (one batch size: split evenly)
TARGET = 44.0  # two service times: the M/D/1 queue meets it at 28.5% busy
UNBATCHED = replace(POLICY, max_batch_size=1, target_p95_ms=TARGET)
KNOWN = ((1.0, SERVICE, 0.0),)  # one batch-size sample at 1: the cost of a request
# held: the last tick saw 4 ready replicas too
STEADY = State(batch_samples=KNOWN, last_pending=PendingReading(0.0, 0.0, 4.0, 0.0, 0.0))
# ... the fourth of them ready since t = 60 s; or ready since 0 s, with a fifth gone at the last tick (85 s)
JOINED = replace(STEADY, last_pending=PendingReading(85.0, 0.0, 4.0, 0.0, 0.0, 4.0, 60.0))
FELL = replace(STEADY, last_pending=PendingReading(85.0, 0.0, 4.0, 0.0, 0.0, 5.0, 0.0))


def obs(rps: float, p95: float | None) -> Observation:
    return Observation(status="ok", p95_ms=p95, rps=rps, recent_rps=rps, pending=0.0)


@pytest.mark.parametrize("rho", [0.2, 0.285, 0.5, 0.8])
def test_md1_wait_quantile_inverts_the_capacity(rho):
    wait = md1_p95_wait_ms(rho / SERVICE, SERVICE)
    assert wait is not None and wait > 0
    assert md1_p95_capacity(SERVICE, SERVICE + wait) / 1000 * SERVICE == pytest.approx(rho, rel=1e-6)


@pytest.mark.parametrize(("rho", "expect"), [
    (0.03, 0.0),  # 97% of requests find the server free: no wait at the 95th percentile
    (1.0, None),  # overloaded
    (0.97, None),  # a wait beyond the exact formula's reach
])
def test_md1_wait_quantile_edges(rho, expect):
    assert md1_p95_wait_ms(rho / SERVICE, SERVICE) == expect


def _per(rho: float) -> float:
    return rho / SERVICE * 1000.0


@pytest.mark.parametrize(("state", "policy", "observation", "replicas", "expect"), [
    # half the model's wait at 50% busy on each of 4 ready replicas: a ratio of 0.5, at that rate
    (STEADY, UNBATCHED, obs(4 * _per(0.5), SERVICE + 0.5 * md1_p95_wait_ms(0.5 / SERVICE, SERVICE)),
     Replicas(4, 4), (0.5, _per(0.5), 4.0)),
    # more queueing than Poisson (a burst in the window): counted as the model, never above it
    (STEADY, UNBATCHED, obs(4 * _per(0.5), 500.0), Replicas(4, 4), (1.0, _per(0.5), 4.0)),
    # no queueing at all where the model has some: 0
    (STEADY, UNBATCHED, obs(4 * _per(0.5), SERVICE - 1), Replicas(4, 4), (0.0, _per(0.5), 4.0)),
    # the model queues too little at 4% busy for a ratio to mean anything
    (STEADY, UNBATCHED, obs(4 * _per(0.04), SERVICE), Replicas(4, 4), None),
    # a batching model: its capacity model is the batcher's, not M/D/1
    (STEADY, replace(UNBATCHED, max_batch_size=16), obs(4 * _per(0.5), SERVICE), Replicas(4, 4), None),
    # a pod still starting, or the ready count changed since the last tick: the window's p95 is
    # not this fleet's
    (STEADY, UNBATCHED, obs(4 * _per(0.5), SERVICE), Replicas(5, 4), None),
    (replace(STEADY, last_pending=PendingReading(0.0, 0.0, 3.0, 0.0, 0.0)), UNBATCHED, obs(4 * _per(0.5), SERVICE),
     Replicas(4, 4), None),
    # a p95 over the target within a minute of replicas joining: the backlog of the fleet before them
    (JOINED, UNBATCHED, obs(4 * _per(0.5), 500.0), Replicas(4, 4), None),
    # ... and within the target right after the join it is a measurement like any other
    (JOINED, UNBATCHED, obs(4 * _per(0.5), SERVICE - 1), Replicas(4, 4), (0.0, _per(0.5), 4.0)),
    # the fourth joined at 0 s and a fifth left at the last tick: a fall is no join (``last_join``),
    # so a breach a minute and more after the last rise is measured
    (FELL, UNBATCHED, obs(4 * _per(0.5), 500.0), Replicas(4, 4), (1.0, _per(0.5), 4.0)),
    # no batch cost yet, or no p95
    (replace(STEADY, batch_samples=()), UNBATCHED, obs(4 * _per(0.5), SERVICE), Replicas(4, 4), None),
    (STEADY, UNBATCHED, obs(4 * _per(0.5), None), Replicas(4, 4), None),
])
def test_learn_queueing(state, policy, observation, replicas, expect):
    got = learn_queueing(state, observation, replicas.ready, replicas.current, policy, 100.0).queueing
    if expect is None:
        assert got == ()
    else:
        assert len(got) == 1 and got[0][0] == 100.0
        assert got[0][1:] == pytest.approx(expect)


def test_a_breach_a_minute_after_the_join_is_measured():
    # the p95 window no longer holds the time before the fourth replica joined (at t = 60 s)
    now = 60.0 + D.P95_SUMMARY_S
    got = learn_queueing(JOINED, obs(4 * _per(0.5), 500.0), 4, 4, UNBATCHED, now).queueing
    assert len(got) == 1 and got[0][1:] == pytest.approx((1.0, _per(0.5), 4.0))
    assert learn_queueing(JOINED, obs(4 * _per(0.5), 500.0), 4, 4, UNBATCHED, now - 1.0).queueing == ()


@pytest.mark.parametrize(("last", "ready", "expect"), [
    (None, 4, 100.0),  # nothing known of the last tick: now
    (PendingReading(85.0, 0.0, 3.0, 0.0, 0.0, 3.0, 10.0), 4, 100.0),  # rose since the last tick: now
    (PendingReading(85.0, 0.0, 4.0, 0.0, 0.0, 3.0, 85.0), 4, 85.0),  # held: the last tick's record
    (PendingReading(85.0, 0.0, 5.0, 0.0, 0.0, 5.0, 40.0), 4, 40.0),  # fell: the rise before still
    (PendingReading(85.0, 0.0, 4.0, 0.0, 0.0), 4, 85.0),  # a memory from before the record: its tick
])
def test_last_join(last, ready, expect):
    assert last_join(State(last_pending=last), ready, 100.0) == expect


def test_learn_records_the_last_join():
    # a tick that sees a fifth replica ready records itself; the ticks after it keep that time
    state = replace(STEADY, last_pending=PendingReading(85.0, 0.0, 4.0, 0.0, 0.0, 4.0, 20.0))
    joined = D.learn(state, obs(100.0, 30.0), Replicas(5, 5), UNBATCHED, 100.0, 100.0)
    assert joined.last_pending is not None and joined.last_pending.joined_at == 100.0
    held = D.learn(joined, obs(100.0, 30.0), Replicas(5, 5), UNBATCHED, 115.0, 100.0)
    assert held.last_pending is not None and held.last_pending.joined_at == 100.0


def test_learn_queueing_forgets_after_the_noise_window():
    old = replace(STEADY, queueing=((0.0, 0.2, 10.0, 4.0), (200.0, 0.3, 10.0, 4.0)))
    got = learn_queueing(old, obs(0.0, None), 4, 4, UNBATCHED, D.NOISE_S + 100.0).queueing
    assert got == ((200.0, 0.3, 10.0, 4.0),)


def _with(*ratios: float, per: float = 30.0, fleet: float = 4.0) -> State:
    return replace(STEADY, queueing=tuple((float(i), k, per, fleet) for i, k in enumerate(ratios)))


def test_unbatched_capacity_needs_three_measurements():
    assert unbatched_capacity(_with(0.2, 0.2), (11.0, 11.0), TARGET, None) is None


@pytest.mark.parametrize(("ratios", "per", "expect"), [
    # a quarter of the modelled queueing: the M/D/1 rate whose p95 wait is four times the slack
    ((0.25, 0.25, 0.25), 30.0, md1_p95_capacity(SERVICE, SERVICE + 4 * (TARGET - SERVICE))),
    # the median: one window with a burst in it does not undo the others
    ((0.25, 1.0, 0.25), 30.0, md1_p95_capacity(SERVICE, SERVICE + 4 * (TARGET - SERVICE))),
    # no queueing seen: at most UTILISATION of saturation...
    ((0.0, 0.0, 0.0), 30.0, D.UTILISATION * 1000 / SERVICE),
    # ... and at most MAX_EXTRAPOLATION times the highest rate it was measured at
    ((0.0, 0.0, 0.0), 10.0, D.MAX_EXTRAPOLATION * 10.0),
])
def test_unbatched_capacity(ratios, per, expect):
    assert unbatched_capacity(_with(*ratios, per=per), (11.0, 11.0), TARGET, None) == pytest.approx(expect)


def test_a_ratio_counts_larger_for_a_smaller_fleet():
    # round-robin over 4 replicas makes each one's arrivals regular: every 4th arrival of a
    # Poisson stream queues about a quarter as much; over 2, half as much; one sees Poisson
    state = _with(0.25, 0.25, 0.25)
    four = unbatched_capacity(state, (11.0, 11.0), TARGET, None, fleet=4)
    assert four == pytest.approx(md1_p95_capacity(SERVICE, SERVICE + 4 * (TARGET - SERVICE)))
    assert unbatched_capacity(state, (11.0, 11.0), TARGET, None, fleet=8) == four  # no credit unseen
    assert unbatched_capacity(state, (11.0, 11.0), TARGET, None) == four
    two = unbatched_capacity(state, (11.0, 11.0), TARGET, None, fleet=2)
    assert two == pytest.approx(md1_p95_capacity(SERVICE, SERVICE + 2 * (TARGET - SERVICE)))
    one = unbatched_capacity(state, (11.0, 11.0), TARGET, None, fleet=1)
    assert one == pytest.approx(md1_p95_capacity(SERVICE, TARGET))  # the model's own rate


def test_a_scale_down_plans_the_smaller_fleet_with_its_own_capacity():
    # measured over 4 replicas: ~31 rps each at the target (the M/D/1 model: 13); 24 rps would fit
    # on one such replica, but one replica sees Poisson arrivals: two, by the model
    # (a history of steady readings: the rate's noise is measured, so the plan may ask for fewer)
    memory = replace(_with(0.25, 0.25, 0.25, per=20.0), rates=tuple((15.0 * k, 24.0, 24.0) for k in range(-10, 1)),
                     last_pending=PendingReading(0.0, 0.0, 4.0, 0.0, 0.0))
    policy = replace(UNBATCHED, scale_down_stabilization_s=0.0, tolerance=0.0, scale_down_max_step=10)
    d = D.decide(obs(24.0, 30.0), Replicas(4, 4), policy, memory, 15.0)
    assert d.replicas == 2, d.message


def test_the_share_of_saturation_bounds_it():
    got = unbatched_capacity(_with(0.0, 0.0, 0.0), (11.0, 11.0), TARGET, 0.95)
    assert got == pytest.approx(0.95 * saturation_rps((11.0, 11.0), 1))


@pytest.mark.parametrize(("ratios", "learned"), [
    ((1.0, 1.0, 1.0), False),  # Poisson queueing: the model as it was
    ((0.25, 0.25, 0.25), True),  # far more regular arrivals: the measured capacity, planned at UTILISATION
])
def test_capacity_of_an_unbatched_model(ratios, learned):
    modelled = md1_p95_capacity(SERVICE, TARGET) / D.UTILISATION  # planned at the p95 capacity
    cap, source = D.capacity(_with(*ratios), UNBATCHED, TARGET)
    if learned:
        assert source == "batch cost, queueing observed"
        assert cap == pytest.approx(md1_p95_capacity(SERVICE, SERVICE + 4 * (TARGET - SERVICE)))
        assert cap > modelled
    else:
        assert (cap, source) == (pytest.approx(modelled), "batch cost")


def test_batching_models_ignore_the_measurements():
    state = replace(_with(0.0, 0.0, 0.0), batch_samples=((4.0, 28.0, 0.0), (12.0, 44.0, 0.0)))
    assert D.capacity(state, POLICY, 100.0) == D.capacity(replace(state, queueing=()), POLICY, 100.0)


def test_the_measurements_survive_a_restart():
    state = _with(0.25, 0.5, 0.125, per=12.5, fleet=3.0)
    back = State.from_dict(state.to_dict())
    assert back.queueing == state.queueing
