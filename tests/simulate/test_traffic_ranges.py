"""The traffic classes' parameter ranges: the suite's, and the wider ones of ``--ranges wide``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tritonscale.simulate import traffic
from tritonscale.simulate.suite import SuiteConfig

SUITE, WIDE = traffic.RANGES["suite"], traffic.RANGES["wide"]


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(traffic.Ranges)])
def test_wide_ranges_contain_the_suites(field):
    (lo, hi), (wlo, whi) = getattr(SUITE, field), getattr(WIDE, field)
    assert wlo <= lo <= hi <= whi


def test_wide_ranges_stretch_something_in_every_synthetic_class():
    stretched = {f.name.split("_")[0] for f in dataclasses.fields(traffic.Ranges)
                 if getattr(SUITE, f.name) != getattr(WIDE, f.name)}
    assert stretched == {"diurnal", "ramp", "step", "onoff", "flash", "walk"}


@pytest.mark.parametrize("cls", traffic.SYNTHETIC)
def test_wide_profiles_are_normalised_deterministic_and_new(cls):
    a = traffic.profile(cls, 0, 1800.0, "wide")
    per_min = a[: len(a) // 60 * 60].reshape(-1, 60).mean(axis=1)
    assert per_min.max() == pytest.approx(1.0) and a.min() > 0
    assert np.array_equal(a, traffic.profile(cls, 0, 1800.0, "wide"))
    assert np.all(a[: int(traffic.LEAD_IN_S)] == a[0])


def _bursts_s(rel: np.ndarray) -> list[int]:
    """Lengths (s) of the runs at the peak in an on/off profile."""
    on = np.concatenate([[0], (rel > 0.99).astype(int), [0]])
    edges = np.flatnonzero(np.diff(on))
    return list(edges[1::2] - edges[::2])


def test_wide_on_off_bursts_are_shorter_than_any_the_suite_draws():
    suite = [b for s in range(10) for b in _bursts_s(traffic.profile("onoff", s, 3600.0))]
    wide = [b for s in range(10) for b in _bursts_s(traffic.profile("onoff", s, 3600.0, "wide"))]
    assert min(suite) >= 60 and min(wide) < 60


def test_unknown_ranges_are_refused():
    with pytest.raises(ValueError, match="unknown parameter ranges 'huge'"):
        traffic.profile("steps", 0, 600.0, "huge")
    with pytest.raises(ValueError, match="unknown parameter ranges 'huge'"):
        SuiteConfig(ranges="huge")
