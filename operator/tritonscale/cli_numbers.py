"""Numbers on the command line: argparse types that refuse what no run can use.

A flag given ``nan`` or ``inf`` is refused by argparse with the flag's name ("argument
--duration: 'inf' is not a finite number"), instead of surfacing minutes later as an
OverflowError or a NumPy error that names neither the flag nor the value.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def non_negative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def at_least(low: float, what: str = "") -> Callable[[str], float]:
    """A finite float of at least ``low``; ``what`` says why, in the error."""

    def parse(text: str) -> float:
        value = finite_float(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: must be >= {low:g}" + (f" ({what})" if what else ""))
        return value

    parse.__name__ = f"at_least_{low:g}"
    return parse


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number of at least ``low`` (and at most ``high``): refused by argparse with the flag's
    name, not later by the code it feeds, in that code's words."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"within {low}..{high}"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {bounds}")
        return value

    parse.__name__ = f"int_in_{low}_{high}"
    return parse


def share(text: str) -> float:
    """A share in (0, 1]."""
    value = finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in (0, 1]")
    return value
