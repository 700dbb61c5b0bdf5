"""Traffic classes for the scenario suite: rate profiles drawn at random within a class.

Each class is a *family* of traces, not one trace: ``profile(cls, seed, duration)``
draws the class's parameters (levels, periods, burst lengths, jump sizes, onset
times) from the seed, so a seed is a new instance of the class. An autoscaler tuned
to one instance would not be tuned to the next one; the suite runs several seeds
of every class for that reason.

A profile is the request rate relative to its busiest minute (max over 60 s bins =
1), on a 1 s grid. The suite turns it into Poisson arrivals at an absolute scale.

Classes (smooth ones change over minutes, bursty ones jump within a tick):

* ``diurnal`` (smooth): a day compressed into 45-90 min periods, trough 20-50% of the peak;
* ``ramps`` (smooth): sawtooth cycles -- linear ramps up over 5-15 min from 20-40% to the
  peak (70-100% of it), a hold of 0-5 min, then a ramp down over 0-10 min (0 = an instant
  drop) to where the next ramp starts, held 0-3 min: the rate rises only along its ramps;
* ``steps`` (bursty): a level held 4-12 min, then an instant step to another level in
  15-100% of the peak (up to 6x in one step);
* ``onoff`` (bursty): a base of 15-30% of the peak with bursts to the peak of 1-4 min,
  2-10 min apart;
* ``flash`` (bursty): a base of 12-25% and one or two flash crowds -- an instant jump to
  the peak (4-8x) held 3-10 min;
* ``randomwalk`` (bursty): the log rate does a mean-reverting random walk in 10 s steps
  (volatility drawn per seed), so rises and falls of every size follow each other;
* ``trace`` (smooth): the shared real production trace (Azure LLM inference 2023,
  conversation; CC-BY 4.0, Patel et al., "Splitwise", ISCA 2024), Poisson at a scaled
  rate per 10 s slice; seeds differ in the Poisson draw.

The ranges above are ``RANGES["suite"]``, which every suite figure was measured on.
``RANGES["wide"]`` stretches them (``--ranges wide``): a check that the decider holds on
instances of each class drawn outside the ranges it was measured on, not only on new seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SYNTHETIC = ("diurnal", "ramps", "steps", "onoff", "flash", "randomwalk")
CLASSES = SYNTHETIC + ("trace",)
SMOOTH = frozenset({"diurnal", "ramps", "trace"})
BURSTY = frozenset({"steps", "onoff", "flash", "randomwalk"})
GRID_S = 1.0
# Every instance opens with this long at its first rate: a service has history before a
# trace begins, and no policy should be scored on a ramp that starts before it has seen one.
LEAD_IN_S = 300.0


def _normalise(rate: np.ndarray) -> np.ndarray:
    """Scale so the busiest 60 s bin averages 1."""
    n = len(rate) // 60 * 60
    per_min = rate[:n].reshape(-1, 60).mean(axis=1) if n else rate
    peak = float(per_min.max()) if len(per_min) else float(rate.max())
    return rate / peak


@dataclass(frozen=True)
class Ranges:
    """The ranges a class's parameters are drawn from (uniformly; minutes where named so)."""

    diurnal_period_min: tuple[float, float] = (45.0, 90.0)
    diurnal_trough: tuple[float, float] = (0.2, 0.5)
    ramp_up_min: tuple[float, float] = (5.0, 15.0)
    ramp_low: tuple[float, float] = (0.2, 0.4)
    step_hold_min: tuple[float, float] = (4.0, 12.0)
    onoff_base: tuple[float, float] = (0.15, 0.3)
    onoff_on_min: tuple[float, float] = (1.0, 4.0)
    onoff_gap_min: tuple[float, float] = (2.0, 10.0)
    flash_base: tuple[float, float] = (0.12, 0.25)
    walk_sigma: tuple[float, float] = (0.05, 0.12)  # per 10 s step, in log rate


# ``suite``: the ranges above, which every figure of the suite was measured on. ``wide``: each
# stretched past them towards harder traffic -- diurnal periods down to 20 min, ramps up in 2 min,
# steps held 2 min, on/off bursts of 30 s from a base of 8% every minute, flash crowds of 20x,
# twice the random walk's volatility -- to see how the decider holds on traffic of each class
# drawn outside the ranges it was measured on (``tritonscale simulate --suite --ranges wide``).
RANGES = {
    "suite": Ranges(),
    "wide": Ranges(diurnal_period_min=(20.0, 90.0), ramp_up_min=(2.0, 15.0), step_hold_min=(2.0, 12.0),
                   onoff_base=(0.08, 0.3), onoff_on_min=(0.5, 4.0), onoff_gap_min=(1.0, 10.0),
                   flash_base=(0.05, 0.25), walk_sigma=(0.05, 0.2)),
}


def ranges_named(name: str) -> Ranges:
    """``RANGES[name]``, or a ValueError naming the choices."""
    if name not in RANGES:
        raise ValueError(f"unknown parameter ranges {name!r} (one of {', '.join(RANGES)})")
    return RANGES[name]


def _diurnal(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    period = rng.uniform(*r.diurnal_period_min) * 60
    trough = rng.uniform(*r.diurnal_trough)
    phase = rng.uniform(0, 2 * np.pi)
    return trough + (1 - trough) * 0.5 * (1 - np.cos(2 * np.pi * t / period + phase))


def _ramps(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    out = np.empty_like(t)
    i, n = 0, len(t)
    low = rng.uniform(*r.ramp_low)
    while i < n:
        up, hold = int(rng.uniform(*r.ramp_up_min) * 60), int(rng.uniform(0, 5) * 60)
        down = int(rng.choice([0.0, rng.uniform(1, 10)]) * 60)
        top = rng.uniform(0.7, 1.0)
        trough = int(rng.uniform(0, 3) * 60)
        # The ramp down and the trough are at the next cycle's start, so the rate never jumps up: a
        # sawtooth rises only along its ramps. (Until session 62 they were at this cycle's start and
        # the next ramp began with a jump to its own, of up to 2x: a step, in a class scored as smooth.)
        following = rng.uniform(*r.ramp_low)
        seg = np.concatenate([np.linspace(low, top, up, endpoint=False), np.full(hold, top),
                              np.linspace(top, following, down, endpoint=False), np.full(trough, following)])
        m = min(len(seg), n - i)
        out[i:i + m] = seg[:m]
        i += m
        low = following
    return out


def _steps(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    out = np.empty_like(t)
    i, n = 0, len(t)
    levels = []
    while i < n:
        hold = int(rng.uniform(*r.step_hold_min) * 60)
        level = rng.uniform(0.15, 1.0)
        levels.append((i, min(n, i + hold)))
        out[i:i + hold] = level
        i += hold
    # one step goes all the way up from a low level, so every instance has a big jump
    if len(levels) >= 3:
        a, b = levels[len(levels) // 2 - 1], levels[len(levels) // 2]
        out[a[0]:a[1]] = rng.uniform(0.15, 0.3)
        out[b[0]:b[1]] = 1.0
    return out


def _onoff(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    base = rng.uniform(*r.onoff_base)
    out = np.full_like(t, base)
    i = int(rng.uniform(*r.onoff_gap_min) * 60)
    while i < len(t):
        on = int(rng.uniform(*r.onoff_on_min) * 60)
        out[i:i + on] = 1.0
        i += on + int(rng.uniform(*r.onoff_gap_min) * 60)
    return out


def _flash(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    base = rng.uniform(*r.flash_base)
    out = np.full_like(t, base)
    n = len(t)
    crowds = int(rng.integers(1, 3))
    for k in range(crowds):
        length = int(rng.uniform(3, 10) * 60)
        lo = int(n * (0.15 + 0.7 * k / crowds))
        hi = max(lo + 1, int(n * (0.15 + 0.7 * (k + 1) / crowds)) - length)
        start = int(rng.integers(lo, hi))
        out[start:start + length] = 1.0
    return out


def _randomwalk(rng: np.random.Generator, t: np.ndarray, r: Ranges) -> np.ndarray:
    step_s = 10
    steps = math.ceil(len(t) / step_s)
    sigma = rng.uniform(*r.walk_sigma)
    revert = rng.uniform(0.005, 0.02)  # pull towards the mean per step
    x = np.empty(steps)
    x[0] = 0.0
    shocks = rng.normal(0.0, sigma, steps)
    for k in range(1, steps):
        x[k] = x[k - 1] * (1 - revert) + shocks[k]
    x = np.clip(x, -2.0, 2.0)  # at most e^4 = 55x between trough and peak
    return np.repeat(np.exp(x), step_s)[: len(t)]


_SHAPES: dict[str, Callable[[np.random.Generator, np.ndarray, Ranges], np.ndarray]] = {
    "diurnal": _diurnal, "ramps": _ramps, "steps": _steps, "onoff": _onoff, "flash": _flash,
    "randomwalk": _randomwalk,
}


def profile(cls: str, seed: int, duration: float, ranges: str = "suite") -> np.ndarray:
    """Relative rate (busiest minute = 1) per second for a synthetic class, its parameters drawn
    from ``RANGES[ranges]``."""
    params = ranges_named(ranges)
    if cls not in _SHAPES:
        raise ValueError(f"unknown traffic class {cls!r} (one of {', '.join(CLASSES)})")
    if duration < 120:
        raise ValueError("a traffic class needs at least 120 s")
    # a different stream per class, so seed 0 of "steps" is unrelated to seed 0 of "onoff"
    rng = np.random.default_rng([seed, CLASSES.index(cls)])
    lead = int(min(LEAD_IN_S, duration / 4) / GRID_S)
    t = np.arange(0.0, duration - lead * GRID_S, GRID_S)
    body = np.maximum(_SHAPES[cls](rng, t, params), 1e-3)
    return _normalise(np.concatenate([np.full(lead, body[0]), body]))


def arrivals_from_profile(rel: np.ndarray, peak_rps: float, seed: int, duration: float) -> np.ndarray:
    """Poisson arrivals with rate ``rel * peak_rps`` per 1 s slice."""
    from tritonscale.simulate.arrivals import poisson_arrivals

    rng = np.random.default_rng([seed, 1000])
    return poisson_arrivals(rel * peak_rps, GRID_S, rng, duration)
