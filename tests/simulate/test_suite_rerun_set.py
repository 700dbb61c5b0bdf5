"""e2e/bench_suite_rerun.py --set: a decider constant overridden with its own type."""

from __future__ import annotations

import pytest

from support import e2e_script


@pytest.fixture(scope="module")
def rerun():
    return e2e_script.load("bench_suite_rerun")


def test_an_int_constant_stays_an_int_and_a_float_one_a_float(rerun):
    # MAX_SURPRISES bounds a slice: as a float it failed every scenario with a TypeError
    out = rerun._override(["MAX_SURPRISES=4", "UTILISATION=0.93", "TREND_S=90"])
    assert out == {"MAX_SURPRISES": 4, "UTILISATION": 0.93, "TREND_S": 90.0}
    assert type(out["MAX_SURPRISES"]) is int and type(out["TREND_S"]) is float


@pytest.mark.parametrize(("pair", "message"), [
    ("MAX_SURPRISES=4.5", "is not an integer (MAX_SURPRISES is a count)"),
    ("UTILISATION=high", "is not a number"),
    ("NO_SUCH_CONSTANT=1", "a numeric constant of the decider"),
    ("UTILISATION", "want NAME=VALUE"),
])
def test_bad_overrides_are_refused_naming_the_pair(rerun, pair, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rerun._override([pair])
