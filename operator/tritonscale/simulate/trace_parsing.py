"""A trace file's contents parsed into arrival times (``arrivals.read_trace`` reads the file, gzip
or not, within its size cap; ``arrivals`` re-exports these names).

Trace files
-----------
* Azure CSV (the Azure Public Dataset LLM traces): a header line naming a
  ``TIMESTAMP`` column (any case); values like ``2023-11-16 18:15:46.6805900`` (7
  fractional digits, no zone), or plain numbers of seconds (BurstGPT's ``Timestamp``,
  Unix time). Other columns are ignored.
* Plain text: one arrival per line, either seconds from the start as a float
  (``12.5``) or an ISO-8601 timestamp (``2023-11-16T18:15:46.68Z``). Blank lines and
  ``#`` comments are skipped.
* JSON Lines, the Mooncake trace format (Kimi's FAST'25 traces; NVIDIA's aiperf and Dynamo replay
  it): one object per line with a ``timestamp`` key (any case), in milliseconds as Mooncake
  defines it, or an ISO-8601 string. Other keys are ignored. A JSON array of such objects
  (``[{"timestamp": ...}, ...]``) is read the same way.

Any of them may be gzip-compressed (``.csv.gz``).

Plain numbers are seconds in CSV and text and milliseconds in JSON unless ``unit`` (``--trace-unit``)
says otherwise: nothing in a column of relative numbers tells seconds from milliseconds, so the
``Trace`` says which unit was read, for the summary line. An ISO timestamp opens with a full date
(``YYYY-MM-DD``), and a file's timestamps all name their zone or none do.

Numbers that can only be Unix time in a finer unit are read in it: from 1e11 up, milliseconds
(1.7e12 in 2023), from 1e14 microseconds, from 1e17 nanoseconds -- Unix time in seconds stays below
1e11 until the year 5138, and a trace of seconds from its start does not open 3,000 years in.

Every form is made relative to the first arrival: seconds since the epoch are a trace that starts
at 0 too, and a file of seconds that starts at 12.5 replays from 0.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


# The units a trace's plain numbers may be read in (``--trace-unit``): seconds each.
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
# (smallest value, unit) of numbers that can only be Unix time in a finer unit than the second
# (module docstring): finest first.
_EPOCH_UNITS = ((1e17, "ns"), (1e14, "us"), (1e11, "ms"))
_SECONDS_PER = {**UNITS, "ns": 1e-9}


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its arrivals and how its values were read, for the summary that says so."""

    times: np.ndarray  # s from the first arrival, sorted
    form: str  # "csv", "text", "jsonl" or "json" (a JSON array of objects)
    # the unit its numbers were read in ("s", "ms", "us", "ns"); "" for ISO timestamps
    unit: str = ""
    # whether that unit was told by the numbers' size (Unix time in a finer unit than the second),
    # not by ``--trace-unit`` or the form's default
    by_size: bool = False


def default_unit(form: str) -> str:
    """The unit of a form's plain numbers without ``--trace-unit``: Mooncake's milliseconds in JSON,
    seconds elsewhere."""
    return "ms" if form in ("jsonl", "json") else "s"


def _in_seconds(t: np.ndarray, unit: str) -> tuple[np.ndarray, str, bool]:
    """Numbers read from a trace, in seconds: (seconds, the unit they were read in, whether their size
    told it). Each is one ``unit``, unless their smallest is Unix time in a finer unit
    (``_EPOCH_UNITS``), which no relative trace reaches (module docstring)."""
    lo = float(t.min())
    by_size = next((u for bound, u in _EPOCH_UNITS if lo >= bound), None)
    read = by_size or unit
    return t * _SECONDS_PER[read], read, by_size is not None


# -- trace files ----------------------------------------------------------------------------
def _seconds(values: Sequence[str], lines: Sequence[int], path: str) -> np.ndarray | None:
    """A TIMESTAMP column of plain numbers (seconds, e.g. BurstGPT's, or Unix time), else None (its
    first value is no number: timestamps). A later value that is no finite number is refused by its
    line (``lines``: each value's line in the file)."""
    try:
        float(values[0])
    except ValueError:
        return None
    try:
        t = np.array([float(v) for v in values])
    except ValueError:
        i = next(i for i, v in enumerate(values) if not _is_float(v))
        raise TraceError(f"{path}: line {lines[i]}: not a number of seconds (the column's first value is one): "
                         f"{values[i][:60]!r}") from None
    bad = np.flatnonzero(~(np.isfinite(t) & (t >= 0)))
    if len(bad):  # >= 0 as in plain text: an arrival before the trace's clock started is no time of it
        raise TraceError(f"{path}: line {lines[bad[0]]}: arrival must be a finite number >= 0, "
                         f"got {values[bad[0]].strip()[:60]}")
    return t


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


# An ISO timestamp opens with a full date: numpy reads '2023' and even '29' as years, so a string of
# milliseconds ({"timestamp": "29"}) became a date 1,994 years before its neighbours, and a stray '2023'
# among 2023's timestamps a date within the trace.
_FULL_DATE = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]|$)|\d{8}T")  # extended, or basic (20231116T181546) format


def _has_zone(v: str) -> bool:
    """Whether an ISO timestamp names its zone: Z, or an offset after the date (``+05:00``, ``-0700``)."""
    return v.endswith("Z") or "+" in v[10:] or "-" in v[10:]


def _parse_timestamps(values: Sequence[str], path: str, lines: Sequence[int], unit: str = "line") -> np.ndarray:
    """ISO timestamps -> seconds since the epoch (float64). Fast path through numpy when every value is
    a full date without a zone. ``lines``: each value's line in the file, for the message that refuses
    one."""
    clean = [v.strip() for v in values]
    if all(_FULL_DATE.match(v) and not _has_zone(v) for v in clean):
        try:
            stamps = np.array(clean, dtype="datetime64[ns]")
            if not np.isnat(stamps).any():  # numpy reads '' and 'NaT' as NaT (a date in 1677 as a number)
                return stamps.astype(np.int64) / 1e9
        except ValueError:
            pass  # fall through to the line-by-line parser for a precise message
    out = np.empty(len(clean))
    zoned: bool | None = None  # whether the first timestamp names its zone
    for i, v in enumerate(clean):
        try:
            out[i], aware = _iso_seconds(v)
        except ValueError:
            raise TraceError(f"{path}: {unit} {lines[i]}: not a timestamp: {v[:60]!r}") from None
        zoned = aware if zoned is None else zoned
        _same_zoning(aware, zoned, v, f"{path}: {unit} {lines[i]}", f"{unit} {lines[0]}")
    return out


def _same_zoning(aware: bool, first: bool, v: str, where: str, first_where: str) -> None:
    """Refuse a timestamp that names its zone when the first did not, or the other way round: a
    zone-less time names no instant to put beside one that does (taking it as UTC made a 300 s trace
    of alternating +05:00 and zone-less times span 18,300 s)."""
    if aware != first:
        raise TraceError(f"{where}: {v[:60]!r} {'names a zone' if aware else 'names no zone'} (Z or an offset) and "
                         f"{first_where}'s timestamp {'does not' if aware else 'does'}; give every timestamp "
                         "a zone or none")


def _iso_seconds(v: str) -> tuple[float, bool]:
    """(seconds since the epoch, whether it names its zone) of an ISO-8601 timestamp; ValueError
    unless it opens with a full date (``_FULL_DATE``). A zone-less time is taken as UTC."""
    v = v.strip()
    if not _FULL_DATE.match(v):
        raise ValueError(v)
    if v.endswith("Z"):
        v = v[:-1] + "+00:00"
    # datetime.fromisoformat takes at most 6 fractional digits; Azure writes 7.
    head, dot, frac = v.partition(".")
    zone = ""
    if dot:
        digits = ""
        for j, ch in enumerate(frac):
            if not ch.isdigit():
                zone = frac[j:]
                break
            digits += ch
        else:
            zone = ""
        v = head + "." + (digits[:6] or "0") + zone
    d = datetime.fromisoformat(v)
    if d.tzinfo is None:
        return (d - datetime(1970, 1, 1)).total_seconds(), False
    return d.timestamp(), True


def parse_trace_text(text: str, path: str = "<trace>", unit: str | None = None) -> np.ndarray:
    """Arrival times (s from the first arrival, sorted) from the contents of a trace file."""
    return parse_trace(text, path, unit).times


def parse_trace(text: str, path: str = "<trace>", unit: str | None = None) -> Trace:
    """A trace file's contents parsed. ``unit`` (a key of ``UNITS``): what one of its plain numbers
    is; None: the form's default (``default_unit``). Numbers that can only be Unix time in a finer
    unit are read in it either way."""
    if unit is not None and unit not in UNITS:
        raise ValueError(f"unknown trace unit {unit!r} (one of {', '.join(UNITS)})")
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), None)
    if first is None:
        raise TraceError(f"{path}: no arrivals")
    header = lines[first]
    if any(c.strip().strip('"').upper() == "TIMESTAMP" for c in header.split(",")):  # one column or many
        reader = csv.reader(io.StringIO("\n".join(lines[first:])))
        cols = [c.strip().upper() for c in next(reader)]
        col = cols.index("TIMESTAMP")
        values, numbers = [], []  # each value and its line in the file (the last of a quoted multi-line row)
        for row in reader:
            if not row or not "".join(row).strip():
                continue
            if len(row) <= col:
                raise TraceError(f"{path}: line {first + reader.line_num}: no TIMESTAMP value")
            values.append(row[col])
            numbers.append(first + reader.line_num)
        if not values:
            raise TraceError(f"{path}: no arrivals after the header")
        t = _seconds(values, numbers, path)
        if t is None:
            iso = _parse_timestamps(values, path, numbers)
            return Trace(np.sort(iso - iso.min()), "csv")
        t, read, by_size = _in_seconds(t, unit or default_unit("csv"))
        return Trace(np.sort(t - t.min()), "csv", read, by_size)
    if header.lstrip().startswith("{"):
        return _json_lines(lines, first, path, unit or default_unit("jsonl"))
    if header.lstrip().startswith("["):
        return _json_array(text, path, unit or default_unit("json"))
    kept = [(i + 1, ln.strip()) for i, ln in enumerate(lines)
            if ln.strip() and not ln.lstrip().startswith("#")]
    seconds: list[float] = []
    stamps: list[float] = []
    zoned = False  # whether the first timestamp names its zone
    for n, v in kept:
        try:
            x = float(v)
        except ValueError:
            try:
                at, aware = _iso_seconds(v)
            except ValueError:
                if n == kept[0][0] and _looks_like_a_header(v):
                    raise TraceError(f"{path}: line {n}: no TIMESTAMP column (a header is comma-separated and names "
                                     f"a TIMESTAMP column): {v[:60]!r}") from None
                raise TraceError(f"{path}: line {n}: neither seconds nor an ISO timestamp: {v[:60]!r}") from None
            if seconds:
                raise TraceError(f"{path}: line {n}: a timestamp after lines of seconds") from None
            zoned = aware if not stamps else zoned
            _same_zoning(aware, zoned, v, f"{path}: line {n}", f"line {kept[0][0]}")
            stamps.append(at)
            continue
        if stamps:
            raise TraceError(f"{path}: line {n}: seconds ({v}) after lines of timestamps")
        if not math.isfinite(x) or x < 0:
            raise TraceError(f"{path}: line {n}: arrival must be a finite number of seconds >= 0, got {v}")
        seconds.append(x)
    # From the first arrival, as the timestamp forms are: seconds since the epoch (1700158546.68) are a
    # trace too, not one that starts 54 years in
    if stamps:
        t = np.array(stamps)
        return Trace(np.sort(t - t.min()), "text")
    t, read, by_size = _in_seconds(np.array(seconds), unit or default_unit("text"))
    return Trace(np.sort(t - t.min()), "text", read, by_size)


def _looks_like_a_header(line: str) -> bool:
    """A first line that is a table's header, not one arrival: it splits on a separator (a line of one
    arrival holds one value) into fields that start with a letter (a name, not a number or a date)."""
    for sep in (",", ";", "\t", "|"):
        fields = [f.strip().strip('"') for f in line.split(sep)]
        if len(fields) > 1 and all(f[:1].isalpha() for f in fields if f):
            return True
    return False


def _json_array(text: str, path: str, unit: str) -> Trace:
    """A JSON array of the objects JSON Lines holds (``[{"timestamp": ...}, ...]``), as tools that write
    one document give them; its items are numbered in messages. An array of bare numbers is refused:
    nothing says whether they are seconds or milliseconds."""
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise TraceError(f"{path}: not a JSON array ({exc.args[0].split(':')[0]})") from None
    except RecursionError:  # not a ValueError: json's decoder recurses once per level
        raise TraceError(f"{path}: not a JSON array of arrivals (nested too deeply)") from None
    if not isinstance(items, list) or not items:
        raise TraceError(f"{path}: no arrivals")
    if not all(isinstance(v, dict) for v in items):
        n = next(i for i, v in enumerate(items, start=1) if not isinstance(v, dict))
        raise TraceError(f"{path}: item {n}: not a JSON object; a JSON array holds objects with a \"timestamp\" "
                         f"key (milliseconds or ISO); give bare arrivals one per line, in seconds")
    return _json_objects(enumerate(items, start=1), path, "item", unit)


def _json_lines(lines: Sequence[str], first: int, path: str, unit: str) -> Trace:
    """Arrival times (s from the first, sorted) from JSON Lines whose objects carry a ``timestamp``
    (``_json_objects``)."""

    def parsed() -> Iterator[tuple[int, Any]]:
        for n, ln in enumerate(lines[first:], start=first + 1):
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            try:
                yield n, json.loads(ln)
            except ValueError as exc:
                raise TraceError(f"{path}: line {n}: not a JSON object ({exc.args[0].split(':')[0]})") from None
            except RecursionError:
                raise TraceError(f"{path}: line {n}: not a JSON object of an arrival (nested too deeply)") from None

    return _json_objects(parsed(), path, "line", unit)


def _json_objects(objects: Iterable[tuple[int, Any]], path: str, unit: str, number_unit: str) -> Trace:
    """Arrival times (s from the first, sorted) from numbered JSON values, objects with a ``timestamp``:
    numbers of ``number_unit`` (Mooncake's milliseconds unless ``--trace-unit`` says otherwise) or
    ISO-8601 strings, one kind in a file. ``unit``: what a message numbers ("line" of JSON Lines, or
    "item" of a JSON array)."""
    form = "jsonl" if unit == "line" else "json"
    values: list[float | str] = []
    numbers: list[int] = []  # each value's line (or item) in the file
    for n, obj in objects:
        key = next((k for k in obj if k.lower() == "timestamp"), None) if isinstance(obj, dict) else None
        if key is None:
            raise TraceError(f"{path}: {unit} {n}: " + ("no \"timestamp\" key" if isinstance(obj, dict)
                                                     else "not a JSON object"))
        v = obj[key]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not number and not isinstance(v, str):
            raise TraceError(f"{path}: {unit} {n}: \"{key}\" must be {UNIT_WORDS[number_unit]} or an ISO timestamp, "
                             f"got {json.dumps(v)[:60]}")
        if number:
            try:
                v = float(v)
            except OverflowError:  # an integer past float's range (JSON's are unbounded)
                v = math.inf
            if not math.isfinite(v) or v < 0:  # json.loads takes NaN and Infinity; >= 0 as in plain text
                raise TraceError(f"{path}: {unit} {n}: \"{key}\" must be a finite number of {UNIT_WORDS[number_unit]} "
                                 f">= 0, got {str(obj[key])[:20]}")
        if values and number != isinstance(values[0], float):
            kinds = ("a number", "timestamps") if number else ("a timestamp", "numbers")
            raise TraceError(f"{path}: {unit} {n}: {kinds[0]} after lines of {kinds[1]}")
        values.append(v)
        numbers.append(n)
    if not values:
        raise TraceError(f"{path}: no arrivals")
    if isinstance(values[0], str):
        t = _parse_timestamps([str(v) for v in values], path, numbers, unit)
        return Trace(np.sort(t - t.min()), form)
    t, read, by_size = _in_seconds(np.array(values), number_unit)
    return Trace(np.sort(t - t.min()), form, read, by_size)
