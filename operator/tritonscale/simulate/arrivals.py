"""Request arrival times: parsed from a trace file or drawn from a built-in shape.

Every function returns a sorted float64 numpy array of seconds from the start of
the run. Randomness comes only from ``numpy.random.default_rng(seed)``, so the same
inputs and seed give the same arrivals.

Trace files (Azure CSV, plain text, Mooncake JSON Lines; their units) are parsed in
``trace_parsing``, whose names are re-exported here.

Rate scaling
------------
``rate_scale(times, x, bin_s, seed)`` keeps the trace's shape and multiplies its
rate: the arrivals become a Poisson process whose rate in each ``bin_s`` slice is
``x`` times the trace's count in that slice. The default 10 s slice keeps the
minute-scale swings and the 10 s bursts of the 2023 Azure conversation trace
(10 s peak 9.8 rps vs 5.5 rps mean), while the 1 s wiggles of a 5.5 rps trace are
Poisson noise (+-2.3 requests per second): replicating them 200 times over would
invent bursts that 200 times more users would average out.
"""

from __future__ import annotations

import gzip
import io
import math
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tritonscale.simulate.trace_parsing import UNIT_WORDS as UNIT_WORDS
from tritonscale.simulate.trace_parsing import UNITS as UNITS
from tritonscale.simulate.trace_parsing import Trace as Trace
from tritonscale.simulate.trace_parsing import TraceError as TraceError
from tritonscale.simulate.trace_parsing import default_unit as default_unit
from tritonscale.simulate.trace_parsing import parse_trace as parse_trace
from tritonscale.simulate.trace_parsing import parse_trace_text as parse_trace_text

SHAPES = ("poisson", "steps", "bursts", "diurnal")
# The longest span a replay takes: its timelines are per second and its ticks step through all of it
# (a line of 1e308 beside one of 0 made a replay that never ended).
MAX_REPLAY_SPAN_S = 30 * 86400.0


def load_trace(path: str, unit: str | None = None) -> np.ndarray:
    """A trace file's arrivals (``read_trace``)."""
    return read_trace(path, unit).times


# The most a trace may hold, read or unpacked (bytes): ~50 M arrivals of Azure's CSV lines, far past what
# a replay simulates in memory. `--trace /dev/zero` read until the kernel killed the process at 23 GB;
# the cap keeps a pipe (`--trace <(zcat ...)`) readable and refuses what never ends.
MAX_TRACE_BYTES = 1 << 30


def _read_capped(f: Any, path: str, what: str) -> bytes:
    raw = f.read(MAX_TRACE_BYTES + 1)
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(f"{path}: {what} more than {MAX_TRACE_BYTES >> 30} GiB, more than a trace holds "
                         "(a device or a file that never ends?)")
    return raw


def read_trace(path: str, unit: str | None = None) -> Trace:
    """A trace file, plain or gzip-compressed (told by its first bytes, whatever its name); ``unit``
    as ``parse_trace``'s. At most MAX_TRACE_BYTES, read or unpacked."""
    try:
        with open(path, "rb") as f:
            raw = _read_capped(f, path, "it holds")
        if raw[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unpacked:
                raw = _read_capped(unpacked, path, "it unpacks to")
        text = raw.decode("utf-8-sig")
    except OSError as exc:  # gzip.BadGzipFile is an OSError with no strerror
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except EOFError:
        raise TraceError(f"{path}: a truncated gzip file") from None
    except zlib.error as exc:  # a damaged deflate stream: zlib's own error, neither OSError nor EOFError
        raise TraceError(f"{path}: a corrupt gzip file ({exc})") from None
    except UnicodeDecodeError as exc:  # UTF-16 or Latin-1 text too: say which encoding is read
        raise TraceError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                         "a trace is read as UTF-8") from None
    trace = parse_trace(text, path, unit)
    if unit is not None and not trace.unit:  # a unit told for numbers the file does not have: not dropped silently
        raise TraceError(f"{path}: its timestamps are dates (ISO 8601), not numbers: --trace-unit {unit} says what "
                         "a plain number is; leave it out")
    return trace


# -- rate profiles and Poisson draws ----------------------------------------------------------
def rate_profile(times: np.ndarray, bin_s: float, duration: float | None = None) -> np.ndarray:
    """Requests per second in consecutive ``bin_s`` slices (the last slice may be partial)."""
    if bin_s <= 0:
        raise ValueError("rate bin must be > 0 s")
    duration = float(times[-1]) if duration is None and len(times) else (duration or 0.0)
    nbins = max(1, math.ceil(duration / bin_s)) if duration > 0 else 1
    idx = np.minimum((times // bin_s).astype(np.int64), nbins - 1)
    counts = np.bincount(idx, minlength=nbins).astype(float)
    widths = np.full(nbins, bin_s)
    widths[-1] = max(duration - bin_s * (nbins - 1), 1e-9)
    return counts / widths


def poisson_arrivals(rates: np.ndarray, bin_s: float, rng: np.random.Generator,
                     duration: float | None = None) -> np.ndarray:
    """A Poisson process with piecewise-constant rate ``rates[i]`` on slice i of width ``bin_s``."""
    nb = len(rates)
    widths = np.full(nb, bin_s)
    if duration is not None:
        widths[-1] = max(0.0, duration - bin_s * (nb - 1))
    counts = rng.poisson(np.maximum(rates, 0.0) * widths)
    starts = np.repeat(np.arange(nb) * bin_s, counts)
    t = starts + rng.random(len(starts)) * np.repeat(widths, counts)
    t.sort()
    return t


def rate_scale(times: np.ndarray, x: float, bin_s: float = 10.0, seed: int = 0) -> np.ndarray:
    """The trace with its rate multiplied by ``x`` (see the module docstring); x == 1 replays it."""
    if x <= 0:
        raise ValueError("rate scale must be > 0")
    if x == 1.0 or len(times) == 0:
        return times
    duration = float(times[-1])
    rates = rate_profile(times, bin_s, duration) * x
    return poisson_arrivals(rates, bin_s, np.random.default_rng(seed), duration)


# -- built-in shapes ----------------------------------------------------------------------------
def _shape_rate(name: str, base: float, duration: float) -> Callable[[np.ndarray], np.ndarray]:
    if name == "poisson":
        return lambda t: np.full_like(t, base)
    if name == "steps":
        # 5 equal steps: 0.5x, 1x, 1.5x, 1x, 0.5x of the base rate -- each step is a
        # load change the autoscaler must follow within a cold start
        levels = np.array([0.5, 1.0, 1.5, 1.0, 0.5])
        return lambda t: base * levels[np.minimum((t / duration * 5).astype(int), 4)]
    if name == "bursts":
        # base rate, plus 30 s bursts at 2.5x every 5 minutes (from minute 2): shorter than
        # HPA's 300 s scale-down window, longer than a 15 s tick
        return lambda t: base * np.where(((t - 120.0) % 300.0 < 30.0) & (t >= 120.0), 2.5, 1.0)
    if name == "diurnal":
        # one "day" compressed into the run: 0.3x at night up to 1.7x at the midday peak
        return lambda t: base * (1.0 - 0.7 * np.cos(2 * np.pi * t / duration))
    raise ValueError(f"unknown shape {name!r} (one of {', '.join(SHAPES)})")


def shape_arrivals(name: str, rate: float, duration: float, seed: int = 0) -> np.ndarray:
    """Arrivals for a built-in shape with mean-ish rate ``rate`` rps over ``duration`` s."""
    if rate <= 0 or duration <= 0:
        raise ValueError("shape rate and duration must be > 0")
    fn = _shape_rate(name, rate, duration)
    bin_s = 1.0
    nb = math.ceil(duration / bin_s)
    mids = (np.arange(nb) + 0.5) * bin_s
    return poisson_arrivals(fn(mids), bin_s, np.random.default_rng(seed), duration)
