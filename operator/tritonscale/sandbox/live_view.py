"""What the sandbox shows while it runs, and the timeline it keeps for the summary.

:class:`Recorder` collects every request result (from the load generator), one
:class:`Sample` per second, the operator's scale events and the kubelets'
pod events. :func:`format_line` turns a sample into the one line per second the
terminal shows; it is plain text, so it reads the same under CI as in a terminal:

    t=  42s  offered  70.1 rps  p95  180/200 ms (prom 240)  ready 3/4 desired 4  | scaled up 1->4: Panic

Smoothing: offered rate and p95 are over the last ``WINDOW_S`` = 5 s. At 10 rps a
5 s window holds ~50 requests, enough for a p95 that does not jump on every
second-long gap; a shorter window would, a longer one would hide a 6 s cold start.
"""

from __future__ import annotations

import math
import re
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np

from tritonscale.sandbox.loadgen import RequestRecord

WINDOW_S = 5.0

_SCALED = re.compile(r"scaled (?P<verb>up|down) from (?P<from>\d+) to (?P<to>\d+): (?P<reason>[A-Za-z]+)")


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the load started
    offered_rps: float  # scheduled arrivals over the last WINDOW_S
    completed_rps: float  # successful responses over the last WINDOW_S
    p95_ms: float | None  # client-side, responses completed in the last WINDOW_S
    operator_p95_ms: float | None  # what the operator read from Prometheus (status.p95Milliseconds)
    ready: int  # the Deployment's status.readyReplicas (pods Ready by their readiness probe)
    desired: int  # Deployment spec.replicas (the autoscaler's output)
    errors: int  # failed requests completed in the last second


@dataclass(frozen=True)
class ScaleEvent:
    t: float
    from_replicas: int
    to_replicas: int
    reason: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 1), "from": self.from_replicas, "to": self.to_replicas,
                "reason": self.reason, "message": self.message}

    @property
    def text(self) -> str:
        verb = "up" if self.to_replicas > self.from_replicas else "down"
        return f"scaled {verb} {self.from_replicas}->{self.to_replicas}: {self.reason}"


@dataclass(frozen=True)
class Mark:
    """Something else worth a note on the timeline: a pod crash, a restart, a kill."""

    t: float
    kind: str
    text: str


def parse_scaled_event(message: str) -> tuple[int, int, str] | None:
    """``(from, to, reason)`` from the operator's "Scaled" Event message, or None."""
    m = _SCALED.search(message or "")
    if not m:
        return None
    return int(m.group("from")), int(m.group("to")), m.group("reason")


@dataclass
class Recorder:
    """Collects request results, per-second samples and events, all on one clock:
    seconds since the load started (the load generator's ``send_time`` clock)."""

    arrivals: np.ndarray
    target_p95_ms: float | None = None
    records: list[RequestRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    scale_events: list[ScaleEvent] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    _done: deque = field(default_factory=deque)  # (completion t, latency ms, ok)
    _seen_events: set[str] = field(default_factory=set)

    def on_result(self, rec: RequestRecord, now_t: float) -> None:
        self.records.append(rec)
        self._done.append((now_t, rec.latency_ms, rec.ok))

    def take_sample(self, t: float, ready: int, desired: int, operator_p95_ms: float | None) -> Sample:
        while self._done and self._done[0][0] < t - WINDOW_S:
            self._done.popleft()
        lat = [ms for _, ms, ok in self._done if ok]
        errors = sum(1 for at, _, ok in self._done if not ok and at >= t - 1.0)
        lo = max(0.0, t - WINDOW_S)
        span = t - lo
        offered = (np.searchsorted(self.arrivals, t) - np.searchsorted(self.arrivals, lo)) / span if span > 0 else 0.0
        sample = Sample(
            t=t,
            offered_rps=float(offered),
            completed_rps=len(lat) / span if span > 0 else 0.0,
            p95_ms=float(np.percentile(lat, 95)) if lat else None,
            operator_p95_ms=operator_p95_ms,
            ready=ready,
            desired=desired,
            errors=errors,
        )
        self.samples.append(sample)
        return sample

    def add_scale_event(self, uid: str, t: float, message: str) -> ScaleEvent | None:
        """Record an operator "Scaled" Event once (by its uid); None if seen or unparsable."""
        if uid in self._seen_events:
            return None
        self._seen_events.add(uid)
        parsed = parse_scaled_event(message)
        if parsed is None:
            return None
        ev = ScaleEvent(t, parsed[0], parsed[1], parsed[2], message)
        self.scale_events.append(ev)
        return ev

    def add_mark(self, t: float, kind: str, text: str) -> Mark:
        m = Mark(t, kind, text)
        self.marks.append(m)
        return m


def _ms(v: float | None) -> str:
    return "   -" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:4.0f}"


def format_line(s: Sample, target_p95_ms: float | None, notes: Sequence[str] = ()) -> str:
    target = f"{target_p95_ms:.0f}" if target_p95_ms else "-"
    line = (f"t={s.t:4.0f}s  offered {s.offered_rps:5.1f} rps  p95 {_ms(s.p95_ms)}/{target} ms "
            f"(prom {_ms(s.operator_p95_ms).strip()})  ready {s.ready}/{s.desired} desired {s.desired}")
    if s.errors:
        line += f"  errors {s.errors}"
    if notes:
        line += "  | " + "; ".join(notes)
    return line


class LiveView:
    """Writes one line per sample to ``stream`` (stdout by default), flushed at once."""

    def __init__(self, target_p95_ms: float | None, stream: IO[str] | None = None,
                 quiet: bool = False) -> None:
        self.target_p95_ms = target_p95_ms
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self._pending: list[str] = []

    def note(self, text: str) -> None:
        """Attach ``text`` to the next line (scale events, pod crashes, restarts)."""
        self._pending.append(text)

    def say(self, text: str) -> None:
        """A free-standing line (startup steps, shutdown)."""
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def show(self, sample: Sample) -> None:
        notes, self._pending = self._pending, []
        if not self.quiet:
            print(format_line(sample, self.target_p95_ms, notes), file=self.stream, flush=True)


def samples_as_dicts(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    out = []
    for s in samples:
        d = asdict(s)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, 2)
        out.append(d)
    return out
