"""The Events and log lines of Prometheus' answers stopping and coming back (the MetricsAvailable
condition's source failures), debounced per object and, in the log, per outage: a flapping Prometheus, or
one outage seen by many InferenceServices, says so once rather than at every flap or for every object."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, get_args

from tritonscale.api import status as st
from tritonscale.scaling.decider import SourceFailure

# MetricsAvailable's reasons for no answer at all (Observation.failure).
SOURCE_FAILURES: frozenset[str] = frozenset(get_args(SourceFailure))


def prometheus_transition(status: Mapping[str, Any] | None,
                          new: st.InferenceServiceStatus) -> tuple[str, str, str] | None:
    """(type, reason, message) of an Event when Prometheus's answers stop or come back: MetricsAvailable
    turning False with PrometheusUnavailable, or with NoPrometheusURL or PrometheusNotAllowed (nothing to
    ask) -- a Warning named so: the autoscaler holds its count, bursts go unserved -- and any other reason
    after it -- NoData too, an answer with too little in it yet. The
    conditions said so, but events and the log (where the API server's outage is a warning) did not.
    NoData alone is not the dependency failing (new pods, a model not loaded yet): its own condition
    says it, with no event."""
    def metrics(conds: list[st.Condition]) -> st.Condition | None:
        return next((c for c in conds if c.type == st.METRICS_AVAILABLE), None)

    def down(c: st.Condition | None) -> bool:
        return c is not None and c.status == "False" and c.reason in SOURCE_FAILURES

    before, after = metrics(st.conditions_of(status)), metrics(new.conditions)
    was_down = before.reason if before is not None and down(before) else None  # why it was down, if it was
    if after is None:
        return None
    if down(after) and after.reason != was_down:
        until = ("Prometheus answers" if after.reason == "PrometheusUnavailable"
                 else "it has a Prometheus URL it may query")
        return "Warning", after.reason, (f"{after.message}; the autoscaler holds the replica count "
                                         f"(spec.scaling.fallbackReplicas, if set, after failureThreshold "
                                         f"failed ticks) until {until}")[:1000]
    if was_down and not down(after):
        # NoData too: Prometheus answers, with too little yet (after its own restart, fewer than two scrapes)
        return "Normal", "PrometheusAvailable", f"Prometheus answers again: {after.message}"[:1000]
    return None


# Per object: the source failure its last Prometheus Warning event named (None: none outstanding), and
# since when Prometheus has answered after it. A flapping Prometheus (a restart loop, a round that times out
# now and then) posted a Warning and a PrometheusAvailable event at every flap: 7 Events in 2 minutes for
# one object, 2N for N objects on that Prometheus (auditK D2). Now the Warning is posted once per
# outstanding cause, and its PrometheusAvailable once Prometheus has answered for PROMETHEUS_BACK_S; the
# MetricsAvailable condition follows every tick, as before.
_prometheus_said: dict[str, tuple[str | None, float | None]] = {}
_prometheus_said_lock = threading.Lock()
PROMETHEUS_BACK_S = 60.0


def forget(uid: str) -> None:
    """A deleted object's entry goes (under the lock: a tick's read-then-write would put it back)."""
    with _prometheus_said_lock:
        _prometheus_said.pop(uid, None)


def _down_reason(conds: list[st.Condition]) -> str | None:
    c = next((c for c in conds if c.type == st.METRICS_AVAILABLE), None)
    return c.reason if c is not None and c.status == "False" and c.reason in SOURCE_FAILURES else None


def prometheus_event(uid: str, status: Mapping[str, Any] | None, new: st.InferenceServiceStatus,
                     now: float) -> tuple[str, str, str] | None:
    """The Event for Prometheus' state this tick, if any: ``prometheus_transition``'s, debounced. A Warning
    for a cause already warned of and not yet followed by its PrometheusAvailable is not said again; the
    PrometheusAvailable is said once Prometheus has answered for PROMETHEUS_BACK_S since the last failure
    (a restarted operator takes a failure that status shows as warned of)."""
    said = prometheus_transition(status, new)
    down = _down_reason(new.conditions)
    with _prometheus_said_lock:
        warned, up_since = _prometheus_said.get(uid, (_down_reason(st.conditions_of(status)), None))
        if down is not None:
            _prometheus_said[uid] = (down, None)
            return None if said is not None and said[0] == "Warning" and said[1] == warned else said
        if warned is None:
            _prometheus_said[uid] = (None, None)
            return None
        up_since = now if up_since is None else up_since
        if now - up_since < PROMETHEUS_BACK_S:
            _prometheus_said[uid] = (warned, up_since)
            return None
        _prometheus_said[uid] = (None, None)
    metrics = next((c for c in new.conditions if c.type == st.METRICS_AVAILABLE), None)
    return "Normal", "PrometheusAvailable", f"Prometheus answers again: {metrics.message if metrics else ''}"[:1000]


# When each Prometheus outage warning (its reason and message) was last logged at WARNING: one outage is
# one line per InferenceService that uses the URL -- 200 warnings for one problem at 200 objects. The
# first says it at WARNING; the others within SAME_OUTAGE_S at INFO (each object keeps its own Event).
_outages_said: dict[tuple[str, str], float] = {}
SAME_OUTAGE_S = 300.0


_outages_lock = threading.Lock()  # every service's tick thread reads and writes _outages_said


def transition_level(said: tuple[str, str, str], now: float) -> int:
    if said[0] != "Warning":
        return logging.INFO
    with _outages_lock:
        for key in [k for k, t in _outages_said.items() if now - t >= SAME_OUTAGE_S]:
            del _outages_said[key]
        key = (said[1], said[2])
        if key in _outages_said:
            return logging.INFO
        _outages_said[key] = now
        return logging.WARNING
