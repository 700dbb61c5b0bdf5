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
