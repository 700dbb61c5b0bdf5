"""The rate to plan for: its noise, its trend and how much of it a trend delivers, its usual rise
over one horizon, its level, and the forecast one plan horizon ahead (the decider's rate model;
``signals`` learns the readings it works on)."""

from __future__ import annotations

import math
import statistics

from tritonscale.scaling.decider import constants as C
from tritonscale.scaling.decider.model import Demand, Observation, Policy, State


def sampled_at(obs: Observation, now: float) -> float:
    """When the pending gauge was scraped (the tick's time if the source does not say)."""
    return obs.pending_at if obs.pending_at is not None else now


def cold_start(state: State) -> float:
    return state.cold_start_s if state.cold_start_s is not None else C.DEFAULT_COLD_START_S


def _fit(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and its standard error (inf with fewer than 3 points)."""
    n = len(pts)
    if n < 3:
        return 0.0, math.inf
    tm = sum(t for t, _ in pts) / n
    rm = sum(r for _, r in pts) / n
    sxx = sum((t - tm) ** 2 for t, _ in pts)
    if sxx <= 0:
        return 0.0, math.inf
    slope = sum((t - tm) * (r - rm) for t, r in pts) / sxx
    res = sum((r - rm - slope * (t - tm)) ** 2 for t, r in pts)
    return slope, math.sqrt(res / (n - 2) / sxx)


def _median_slope(pts: list[tuple[float, float]]) -> float:
    """Theil-Sen slope of two or more points: the median of the slopes between every two of them
    (0 if all share one time). A least-squares slope follows any one reading; this one follows
    most of them. Used for the halves of the trend's span, where a single low reading -- a new
    pod's traffic missing from the sum of ``irate`` until its second scrape, a 10 s lull --
    would otherwise read as a half that does not rise and stop a ramp's trend for a whole span."""
    slopes = [(r2 - r1) / (t2 - t1) for i, (t1, r1) in enumerate(pts) for t2, r2 in pts[i + 1:] if t2 != t1]
    return statistics.median(slopes) if slopes else 0.0


def trend(rates: tuple[tuple[float, float, float], ...], now: float, horizon: float) -> float:
    """A rising trend (rps per second) worth extrapolating: the lower 95% confidence bound of
    the least-squares slope over the last max(C.TREND_S, horizon) -- look back as far as the plan
    looks ahead -- and no more than either half of that window rises (the halves' Theil-Sen
    slopes: a ramp rises in both halves; a step in one only, and is met by the rate itself, not
    extrapolated). 0 if none."""
    span = max(C.TREND_S, C.TREND_HORIZON_SHARE * horizon)
    pts = [(e[0], e[1]) for e in rates if now - e[0] <= span]
    older = [(t, r) for t, r in pts if now - t > span / 2]
    newer = [(t, r) for t, r in pts if now - t <= span / 2]
    slope, se = _fit(pts)
    halves = min(_median_slope(older), _median_slope(newer)) if len(older) >= 2 and len(newer) >= 2 else 0.0
    return max(0.0, min(slope - C.NOISE_Z * se, halves))


def horizon_rise(rates: tuple[tuple[float, float, float], ...], horizon: float) -> float | None:
    """The 95% quantile of the rate's change over one horizon in the remembered history, robustly
    (median + NOISE_Z x the MAD of the lag-horizon differences, as a standard deviation); None
    with fewer than three such differences, or a history shorter than RISE_HORIZONS horizons
    (overlapping differences are not independent: a short history says little about rises)."""
    pts = [(e[0], e[1]) for e in rates]
    diffs, j = [], 0
    for t, r in pts:
        while j < len(pts) and pts[j][0] < t + horizon:
            j += 1
        if j < len(pts):
            diffs.append(pts[j][1] - r)
    if len(diffs) < 3 or pts[-1][0] - pts[0][0] < C.RISE_HORIZONS * horizon:  # diffs imply pts
        return None
    mid, sd = _median_and_sd(diffs)
    return mid + C.NOISE_Z * sd


def saturation_share(state: State, now: float, horizon: float, rate: float, sigma: float | None = None) -> float:
    """The share of saturation a replica may be planned at, between UTILISATION and 1: one minus
    the rate's unforeseen movement relative to ``rate`` -- the larger of its tick-to-tick noise
    and its rise over one horizon (``horizon_rise``), each at the 95% quantile. Near saturation
    any rise beyond the plan builds a queue that grows until replicas arrive, a horizon later;
    below the p95 capacity the queueing is already priced in. Steady traffic may run its
    replicas up to the p95 capacity; a rate that wanders, jumps or climbs keeps UTILISATION.
    ``sigma``: the rate's ``noise`` now, if the caller has it."""
    rise = horizon_rise(state.rates, horizon)
    if rise is None or rate <= 0.0:
        return C.UTILISATION
    moved = max(C.NOISE_Z * noise_now(state, now, sigma), rise)
    return min(1.0, max(C.UTILISATION, 1.0 - moved / rate))


def noise(rates: tuple[tuple[float, float, float], ...], now: float) -> float:
    """Standard deviation of the rate's tick-to-tick noise over the last NOISE_S: the smaller of two
    robust estimates, each inflated by a different departure from independent noise.
    - The median absolute deviation of differences between readings: a steady trend or a single
      step barely moves it. Readings one tick apart (lag 1) and two ticks apart (lag 2), the
      larger. Prometheus scrapes each pod at its own phase of the interval, so a reading (a sum
      of the pods' ``irate``) blends the last two intervals, and consecutive readings share one:
      lag-1 differences understate the noise (half of it, for white noise and pods spread
      evenly), lag-2 differences do not. But readings that alternate (bursts shorter than two
      samples: neighbours are anti-correlated) make the lag-1 differences two-humped, and their
      deviation erratic: from the four differences of a service's first minute on the real
      trace replayed from its busiest half it said 697 rps against the readings' 314, planned
      3326 rps for a rate of 2179, and the fleet peaked at 14 replicas where 9 sufficed.
    - The median absolute deviation of the readings themselves: alternation does not inflate it;
      a trend or a step does, and then the first is the smaller."""
    pts = _noise_readings(rates, now)
    diffs = [b - a for a, b in zip(pts, pts[1:], strict=False)]
    if len(diffs) < _enough_differences(1):
        return 0.0
    _, sd = _median_and_sd(diffs)  # about the median: a steady trend moves every difference alike
    lag2 = [b - a for a, b in zip(pts, pts[2:], strict=False)]
    if len(lag2) >= _enough_differences(2):
        sd = max(sd, _median_and_sd(lag2)[1])
    _, spread = _median_and_sd(pts)
    # the difference of two iid normals has sd sigma*sqrt(2)
    return min(sd / math.sqrt(2.0), spread)


def noise_measured(rates: tuple[tuple[float, float, float], ...], now: float) -> bool:
    """``noise`` has an estimate: enough readings (``_noise_readings``). Before, a plan carries no
    noise margin."""
    return len(_noise_readings(rates, now)) - 1 >= _enough_differences(1)


def _noise_readings(rates: tuple[tuple[float, float, float], ...], now: float) -> list[float]:
    """The readings the noise is measured over: those of the last NOISE_S or, where ticks are too
    far apart for NOISE_S to hold enough for both lags' estimates (``intervalSeconds`` above 20 s),
    the last ``noise_count()`` -- else a slow-ticking service's noise would never be measured
    (and, through ``steps.measure``, it would never scale down)."""
    past = [e for e in rates if e[0] <= now]
    recent = [e[1] for e in past if now - e[0] <= C.NOISE_S]
    return recent if len(recent) >= noise_count() else [e[1] for e in past[-noise_count():]]


def noise_count() -> int:
    """Readings enough for the lag-2 estimate: ``_enough_differences(2)`` differences two apart."""
    return _enough_differences(2) + 2


def _enough_differences(lag: int) -> int:
    """How many lag-``lag`` differences the MAD needs to ignore NOISE_SHIFTS level shifts, each
    moving lag + SHIFT_READINGS - 1 of them: more than twice as many as move."""
    return 2 * C.NOISE_SHIFTS * (lag + C.SHIFT_READINGS - 1) + 1


def noise_now(state: State, now: float, sigma: float | None = None) -> float:
    """The rate's noise: the caller's (``decide`` computes it once per tick), else ``noise``."""
    return noise(state.rates, now) if sigma is None else sigma


def _median_and_sd(values: list[float]) -> tuple[float, float]:
    """Robust centre and spread: the (upper) median, and the median absolute deviation from it
    as a normal standard deviation (the MAD of a normal is 0.6745 of its sd)."""
    ordered = sorted(values)
    mid = ordered[len(ordered) // 2]
    dev = sorted(abs(x - mid) for x in ordered)
    return mid, 1.4826 * dev[len(dev) // 2]


def data_age(obs: Observation, now: float, policy: Policy) -> float:
    """Seconds since the pending gauge was scraped (``sampled_at``), the mean over pods: Prometheus
    scrapes each pod at its own phase of the interval, so a tick reads data up to one scrape
    interval old, half of one on average. At most two ticks: older data is a stalled scrape, not
    the phase of one, and planning further ahead for it would stretch the trend over minutes."""
    return min(max(0.0, now - sampled_at(obs, now)), 2.0 * policy.interval_s)


def plan_horizon(state: State, policy: Policy, age: float = 0.0) -> float:
    """How far ahead a plan made now must look: from the moment the data it reads describes
    (``age`` before now) until a replica asked for now is ready and the next tick can correct
    it -- age + cold start + one tick."""
    return age + cold_start(state) + policy.interval_s


def trend_delivery(rates: tuple[tuple[float, float, float], ...], now: float, horizon: float,
                   window: float) -> float:
    """The share of its extrapolated trends the rate went on to deliver, in [0, 1]. At each earlier
    tick of the history that extrapolated a rise (``trend`` over the reach ``forecast`` gives it:
    the horizon, at most TREND_MAX_HORIZON_S) and lies a whole horizon back, the rise planned is
    set against the rise that came: the first reading one horizon later minus that tick's level
    (the mean over ``window``, or its reading if higher), counted from none (the rate stopped or
    turned) up to the rise planned (more than planned is the noise margin's or the next
    surprise's to meet, not evidence for a longer extrapolation). The share is the sum delivered
    over the sum planned, with TREND_EVIDENCE more ticks that planned the mean rise and got it
    whole: a share estimated from a few ticks moves towards what they show as they add up, not
    from 1 to the raw ratio at the third (three ticks at the top of the last ramp, each followed
    by the fall, read 0 and took the trend from the next ramp's start). 1 with no such tick."""
    span = max(C.TREND_S, C.TREND_HORIZON_SHARE * horizon)
    reach = min(horizon, C.TREND_MAX_HORIZON_S)
    planned = delivered = 0.0
    ticks = j = 0
    for i, (t, r, _) in enumerate(rates):
        if t + horizon > now:
            break
        if t - rates[0][0] < span:  # a trend needs its whole span behind it
            continue
        past = rates[: i + 1]
        rise = trend(past, t, horizon) * reach
        if rise <= 0.0:
            continue
        while j < len(rates) and rates[j][0] < t + horizon:
            j += 1
        if j == len(rates):
            break
        came = rates[j][1] - _level(past, t, window, r)
        planned += rise
        delivered += min(rise, max(0.0, came))
        ticks += 1
    if not ticks:
        return 1.0
    whole = C.TREND_EVIDENCE * planned / ticks  # TREND_EVIDENCE ticks of the mean rise planned, delivered whole
    return (delivered + whole) / (planned + whole)


def forecast(d: Demand, state: State, policy: Policy, now: float, age: float = 0.0,
             sigma: float | None = None, now_level: float | None = None) -> tuple[float, float]:
    """(rate to plan for, horizon): the rate when a replica asked for now is ready -- the
    level (last minute's mean, or the latest sample if higher; ``now_level``, if the caller has
    it), plus a rising trend over the horizon (``plan_horizon``) scaled by the share of its trends
    the rate has delivered (``trend_delivery``), plus the rate's noise at the 95% quantile
    (``sigma``, if the caller has it)."""
    horizon = plan_horizon(state, policy, age)
    rise = trend(state.rates, now, horizon) * min(horizon, C.TREND_MAX_HORIZON_S)
    if rise > 0.0:
        rise *= trend_delivery(state.rates, now, horizon, policy.window_s)
    base = level(d, state, now, policy.window_s) if now_level is None else now_level
    plan = base + rise + C.NOISE_Z * noise_now(state, now, sigma)
    return plan, horizon


def level(d: Demand, state: State, now: float, span: float) -> float:
    """The rate now: the mean over ``span`` (the policy's rate window, ``Policy.window_s``), or the
    latest sample if higher."""
    return _level(state.rates, now, span, d.rate)


def _level(rates: tuple[tuple[float, float, float], ...], now: float, span: float, latest: float) -> float:
    """``level`` of a rate history at ``now``, with ``latest`` the reading then (``trend_delivery``
    reads it at past ticks)."""
    recent = [e[1] for e in rates if now - e[0] <= span] or [latest]
    return max(latest, sum(recent) / len(recent))
