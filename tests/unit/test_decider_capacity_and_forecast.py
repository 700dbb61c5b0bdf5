"""The pure decider, step by step (capacity and forecast (trend, noise, level)): a table (or a few cases) per
step of the pipeline; split from test_decider.py. Scenarios over time are in test_decider_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from support.decider_cases import CAP, POLICY, ok, rates, sawtooth
from tritonscale.api.spec import ScalingSpec
from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Policy, State
from tritonscale.scaling.decider.batcher_model import md1_p95_capacity


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
    spread = D.rate_model._median_and_sd(seen)[1]
    diffs = D.rate_model._median_and_sd([b - a for a, b in zip(seen, seen[1:], strict=False)])[1] / math.sqrt(2)
    assert D.noise(first, 135.0) == pytest.approx(min(diffs, spread))
    assert D.noise(rates(*((15 * k, r) for k, r in enumerate(seen[:9]))), 120.0) == 0.0
    for k in range(10, 16):  # alternating on: whichever of the two is smaller
        more = seen + [1966.7 if j % 2 == 0 else 1737.9 for j in range(6, k)]
        s_k = D.rate_model._median_and_sd(more)[1]
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
    lag1 = D.rate_model._median_and_sd([b - a for a, b in zip(blended, blended[1:], strict=False)])[1] / math.sqrt(2)
    lag2 = D.rate_model._median_and_sd([b - a for a, b in zip(blended, blended[2:], strict=False)])[1] / math.sqrt(2)
    assert lag2 > 1.2 * lag1  # the lag-1 estimate reads low
    assert D.noise(hist, 285.0) == pytest.approx(min(lag2, D.rate_model._median_and_sd(blended)[1]))
    # independent readings: the two lags agree, near the noise itself (10)
    plain = rates(*((15 * k, 500 + e) for k, e in enumerate(x)))
    assert 6.0 < D.noise(plain, 300.0) < 15.0


def test_forecast_plans_level_plus_trend_over_the_horizon_plus_noise():
    st = State(rates=rates(*((t, 100 + 2.0 * t) for t in range(0, 241, 15))), cold_start_s=60.0)
    planned, horizon = D.forecast(D.Demand(580.0, 580.0, 0.0), st, POLICY, 240.0)
    assert horizon == 75.0
    # a clean ramp has no noise: level (580, the latest) + 2 rps/s x 75 s
    assert planned == pytest.approx(580.0 + 2.0 * 75.0, rel=0.02)


@pytest.mark.parametrize(("hist", "now", "share"), [
    # a ramp that goes on: each tick's planned rise (2 rps/s x 75 s) came, and more is not counted
    (rates(*((t, 100 + 2.0 * t) for t in range(0, 481, 15))), 480.0, 1.0),
    # nothing ever extrapolated: no evidence, the trend is trusted whole
    (rates(*((t, 500.0) for t in range(0, 481, 15))), 480.0, 1.0),
    # a sawtooth whose ramps end within a horizon of the trend seeing them. The first ramp's ticks at
    # 120-165 s (its earlier ones have less than the trend's 120 s span behind them) planned 300 rps
    # each and met the drop one horizon later: none came. Each later ramp plans 50 rps at its 90th s
    # (the halves' slopes just agree), which came (the reading at its 165th s is 300 over the level),
    # then 250 and four times 300 that met the drop. 100 of 4,200 in 16 ticks, with three more ticks
    # that delivered the mean rise (262.5) whole.
    (sawtooth(3), 885.0, (100.0 + 3 * 262.5) / (4200.0 + 3 * 262.5)),
])
def test_trend_delivery_is_the_share_of_its_planned_rises_the_rate_delivered(hist, now, share):
    assert D.trend_delivery(hist, now, 75.0, 60.0) == pytest.approx(share)


def test_trend_delivery_of_a_ramp_that_slows_is_partial():
    # 2 rps/s until 240 s, then 1 rps/s: ticks whose horizon crosses the change or lies beyond it
    # planned rises at the old pace and got less; none got nothing
    slows = rates(*((t, 100 + (2.0 * t if t <= 240 else 480 + 1.0 * (t - 240))) for t in range(0, 601, 15)))
    assert 0.5 < D.trend_delivery(slows, 600.0, 75.0, 60.0) < 1.0


def test_trend_delivery_from_a_few_ticks_counts_for_as_much_as_they_show(monkeypatch):
    """TREND_EVIDENCE more ticks that delivered the mean rise planned whole: a share read from a few
    ticks is not the raw ratio (until session 100 three ticks at a ramp's top, each followed by the
    fall, read 0 and took the trend from the next ramp's start), and more ticks that got nothing bring
    it down as they add up."""
    # one sawtooth cycle: four ticks (120-165 s) planned 300 rps each and met the drop: 0 of 4 x 300
    assert D.trend_delivery(sawtooth(1), 285.0, 75.0, 60.0) == pytest.approx(3.0 / 7.0)
    # the same ticks a cycle on: the first ramp's four, then the second's 50 (delivered) and 250, 300 x 4
    # (not): more evidence that the trends stop, a lower share
    assert D.trend_delivery(sawtooth(2), 585.0, 75.0, 60.0) < 3.0 / 7.0
    monkeypatch.setattr(D.constants, "TREND_EVIDENCE", 5)
    assert D.trend_delivery(sawtooth(1), 285.0, 75.0, 60.0) == pytest.approx(5.0 / 9.0)
    monkeypatch.setattr(D.constants, "TREND_EVIDENCE", 0)  # the raw share
    assert D.trend_delivery(sawtooth(1), 285.0, 75.0, 60.0) == 0.0


def test_forecast_extrapolates_the_trend_as_far_as_the_rate_delivered_it(monkeypatch):
    st = State(rates=sawtooth(3)[:-8], cold_start_s=60.0)  # the third ramp's top, at 765 s: 4 rps/s
    d = D.Demand(1260.0, 1260.0, 0.0)
    delivered = D.trend_delivery(st.rates, 765.0, 75.0, POLICY.window_s)
    assert 0.0 < delivered < 0.5 and D.trend(st.rates, 765.0, 75.0) == pytest.approx(4.0)
    planned, _ = D.forecast(d, st, POLICY, 765.0)
    monkeypatch.setattr(D.rate_model, "trend_delivery", lambda *a: 1.0)  # the trend trusted whole
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
