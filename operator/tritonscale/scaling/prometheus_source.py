"""Triton signals from Prometheus: one query per signal per tick, for every InferenceService.

The queries themselves (the series selection and how the p95 combines) are
scaling/promql_queries.py's.

Results tell three cases apart: a value, no data (series absent, or NaN as
an idle summary reports), and a failure of the query.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonscale.scaling.decider import Observation, SourceFailure
from tritonscale.scaling.prometheus_http import deadline_session, describe_failure, redacted, shown_url
from tritonscale.scaling.promql_queries import TARGETS_LABEL, SeriesSelector, build_queries

# Signals only messages read: asked last, and a round that cannot get them (a label proxy that refuses
# ``up``, the round's deadline) goes on without them, where a failed round would hold every service.
MESSAGE_ONLY = frozenset({"scrape_s", "targets"})


Key = tuple[str, str, str]  # (namespace, inferenceservice, model)


# The largest reading taken as a measurement: past any rate, latency or queue, above a scrape time (s).
MAX_READING = 1e12
# The smallest reading taken as other than 0: below a nanosecond, a billionth of a request per second or
# of a queued request, a value is float noise (a p95 of 5e-324 ms divided by zero in the decider).
MIN_READING = 1e-9


@dataclass(frozen=True)
class Snapshot:
    """Every signal for every InferenceService, from one round of queries."""

    taken_at: float
    ok: bool
    error: str = ""
    values: Mapping[str, Mapping[Key, float]] = field(default_factory=dict)
    queries: int = 0
    window_s: int | None = None  # the rate window the queries used
    extra_matchers: str = ""  # the --series-label matchers the queries had, as PromQL (for messages)
    # Why there is no answer, as MetricsAvailable's reason: PrometheusUnavailable (asked, no answer), or
    # a setting that left nothing to ask -- NoPrometheusURL, PrometheusNotAllowed.
    failure: SourceFailure = "PrometheusUnavailable"

    def observation(self, namespace: str, name: str, model: str) -> Observation:
        if not self.ok:
            return Observation(status="failed", message=self.error, failure=self.failure)
        key = (namespace, name, model)

        def reading(v: float | None) -> float | None:
            # Every signal is a rate, a latency, a count or a scrape time: a negative, non-finite or
            # absurd one (past MAX_READING: 1e200 overflowed the decider's arithmetic at every tick)
            # is no measurement; one below MIN_READING is 0.
            if v is None or not math.isfinite(v) or v < 0 or v > MAX_READING:
                return None
            return 0.0 if v < MIN_READING else v

        def val(signal: str) -> float | None:
            return reading(self.values.get(signal, {}).get(key))

        raw = self.values.get("rps", {}).get(key)
        rps = reading(raw)
        if rps is None and raw is not None:  # a rate Prometheus did give, but no measurement
            return Observation(status="no_data",
                               message=f"Triton's request rate for this service reads {raw:g}: not a rate "
                                       f"(negative, not finite or absurd); nothing to decide on")
        if rps is None:
            pods = val("replicas")
            if pods:
                # The series are scraped, but rate() found fewer than two samples in the window.
                window = f"windowSeconds={self.window_s}" if self.window_s else "the rate window"
                return Observation(status="no_data",
                                   message=f"{pods:.0f} pod(s) export Triton's series but {window} holds fewer "
                                           f"than two scrapes of them: the pods or Prometheus just started, or the "
                                           f"window is shorter than two scrape intervals")
            extra = f", {self.extra_matchers} (--series-label)" if self.extra_matchers else ""
            return Observation(status="no_data",
                               message=f"no Triton series with namespace={namespace}, "
                                       f"inferenceservice={name}, model={model}{extra}: "
                                       + self._targets(namespace, name, model))
        pods = val("replicas")
        if not pods:
            # rate() reads a window that still holds samples of series no longer scraped; the instant
            # count honours staleness (a failed scrape marks its target's series stale at once). A
            # window rate with no live series is the traffic of pods gone or unreachable, fading: not
            # a fall of the load.
            return Observation(status="no_data",
                               message=f"no pod exports Triton's series now (stale in Prometheus: the pods' "
                                       f"scrapes fail, or the pods are gone; "
                                       f"{self._targets(namespace, name, model)}); the {rps:.1f} rps read over "
                                       f"the window is of earlier scrapes, fading")
        p95 = val("p95_ms")
        return Observation(status="ok", p95_ms=p95, rps=rps, queue_ms=val("queue_ms"), pods=pods,
                           rate_pods=val("rate_pods"),
                           message="" if p95 is not None else self._no_p95(key),
                           pending=val("pending"), pending_min=val("pending_min"),
                           pending_max=val("pending_max"), pending_at=val("pending_at"),
                           batch_size=val("batch_size"), batch_ms=val("batch_ms"),
                           items_per_request=val("batch_items"),
                           failed_rps=val("failed_rps"), recent_rps=val("recent_rps"),
                           recent_served_rps=val("recent_served_rps"), scrape_s=val("scrape_s"))


    def _no_p95(self, key: Key) -> str:
        """Why there is no p95 while requests flow: no series at all, or one that reads no latency."""
        raw = self.values.get("p95_ms", {}).get(key)
        if raw is None:
            return ("Triton exports no latency summary for the model: Triton turns it off for a model with "
                    "the response cache (spec.model.responseCache), and without "
                    "--metrics-config=summary_latencies=true")
        return f"Triton's p95 series reads {raw:g}: no request completed in its summary's last 60 s"

    def _targets(self, namespace: str, name: str, model: str) -> str:
        """Why a service has no live Triton series, from its scrape targets' ``up``."""
        if "targets" not in self.values:
            return "its scrape targets are not known"
        by_up = self.values["targets"]
        down, up = (int(by_up.get((namespace, name, v), 0)) for v in ("0", "1"))
        if down:
            return (f"Prometheus's scrapes of {down} of {down + up} target(s) labelled "
                    f"inferenceservice={name} fail (up == 0; Prometheus's /targets page gives the error)")
        if up:
            return (f"Prometheus scrapes {up} target(s) labelled inferenceservice={name}, but none exports "
                    f"Triton's series for model={model}: the model has not loaded yet, the port is not Triton's "
                    f"metrics port, or the model is named otherwise")
        return (f"Prometheus has no scrape target labelled namespace={namespace}, inferenceservice={name}: no pod "
                f"of it runs yet, or no PodMonitor or scrape config selects its pods and adds these labels")


class MetricSource(Protocol):
    def fetch(self, window_s: int) -> Snapshot: ...


def _parse_vector(result: Any, sel: SeriesSelector) -> dict[Key, float]:
    """The instant vector's values by (namespace, inferenceservice, model); a malformed answer raises
    ValueError (a failed round: the tick holds)."""
    if not isinstance(result, list):
        raise ValueError(f"its answer is no instant vector (a {type(result).__name__})")
    out: dict[Key, float] = {}
    for sample in result:
        if not isinstance(sample, dict) or not isinstance(sample.get("metric", {}), dict):
            raise ValueError("its answer is no instant vector (a sample is not an object)")
        if "values" in sample and "value" not in sample:  # read as no series: "has no scrape target ..."
            raise ValueError("its answer is a range vector (a matrix), not an instant vector")
        metric = sample.get("metric", {})
        key = (metric.get(sel.namespace_label, ""), metric.get(sel.service_label, ""),
               metric.get(sel.model_label, ""))
        try:
            out[key] = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


# How long one round of queries may take before it stops as a failed snapshot (``PrometheusSource``),
# short of the default 15 s tick. The snapshot cache reads it too: a round still running within it is a
# slow Prometheus's, not a hung one's.
ROUND_TIMEOUT_S = 10.0


# Queries of a round in flight at once (``PrometheusSource._ask_all``): a round of 17 takes about a
# quarter of the time one after another would, and Prometheus runs each query on its own anyway.
QUERY_CONCURRENCY = 4


@dataclass(frozen=True)
class _Answer:
    """One query's outcome: its result, or the exception it raised, and when it finished."""

    ok: bool
    result: Any
    error: Exception | None
    finished: float
    asked: bool = True


class PrometheusSource:
    """Queries one Prometheus with prometheus-api-client (sync; the operator calls it in a thread)."""

    def __init__(self, url: str, selector: SeriesSelector | None = None, timeout_s: float = 5.0,
                 round_timeout_s: float = ROUND_TIMEOUT_S, verify: bool | str = True) -> None:
        """``verify``: how an https Prometheus's certificate is checked -- True against the system's
        CAs (or the bundle in REQUESTS_CA_BUNDLE), a path against that PEM bundle, False not at all
        (``tritonscale run --prometheus-ca-file`` / ``--prometheus-insecure-skip-tls-verify``)."""
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        # ``timeout_s`` bounds each read, not a query: a Prometheus that answers slowly, or trickles
        # bytes, would stretch one round of queries past several ticks with no failure counted.
        # The round stops after this (s), short of the default 15 s tick, as a failed snapshot (the
        # tick holds and counts it towards fallbackReplicas).
        self._round_timeout_s = round_timeout_s
        self.selector = selector or SeriesSelector()
        # No client-side retries: a dead Prometheus must show up as a failure within one
        # tick (the decider holds), not after urllib3's backoff eats several ticks.
        # POST keeps long selectors (many namespaces) out of the URL.
        session = deadline_session()
        session.verify = verify  # False: the operator says so once at start (handlers.configure)
        self._session = session
        self._prom = PrometheusConnect(url=self.url, session=session, timeout=timeout_s,
                                       retry=Retry(total=0), method="POST")
        # Its adapter keeps requests' 10 connections: rounds of three windows at once (12 queries in flight)
        # discarded connections with a warning at every round (session 86's review). Room for eight windows.
        from requests.adapters import HTTPAdapter

        session.mount(self.url, HTTPAdapter(max_retries=Retry(total=0), pool_maxsize=8 * QUERY_CONCURRENCY))

    def fetch(self, window_s: int) -> Snapshot:
        started = time.time()
        values: dict[str, dict[Key, float]] = {}
        queries = build_queries(self.selector, window_s)
        deadline = time.monotonic() + self._round_timeout_s
        answers = self._ask_all(queries, deadline)
        done = sum(1 for a in answers.values() if a.ok)

        def failed(queries_asked: int, why: str) -> Snapshot:
            return Snapshot(taken_at=started, ok=False, queries=queries_asked,
                            error=f"Prometheus at {shown_url(self.url)}: {why}")

        def too_slow() -> Snapshot:
            return failed(len(answers), f"answered {done} of {len(queries)} queries in "
                                        f"{self._round_timeout_s:g} s; too slow for a tick")

        for signal in queries:  # the signals' order: the first failure is the one said
            optional = signal in MESSAGE_ONLY  # best effort: its failure or lateness fails no round
            answer = answers.get(signal)
            if answer is None or not answer.ok:
                if optional:
                    continue
                if answer is None or answer.finished >= deadline:  # not asked in time, or cut off mid-answer
                    return too_slow()
                assert answer.error is not None
                return failed(len(answers), redacted(describe_failure(answer.error, self._timeout_s), self.url))
            try:
                values[signal] = _parse_vector(answer.result, self.selector if signal != "targets" else
                                               dataclasses.replace(self.selector, model_label=TARGETS_LABEL))
            except ValueError as exc:
                if optional:
                    continue
                return failed(len(answers), f"query for {signal}: {exc}")
        return Snapshot(taken_at=started, ok=True, values=values, queries=done, window_s=int(window_s),
                        extra_matchers=self.selector.extra_matchers())

    def _ask_all(self, queries: Mapping[str, str], deadline: float) -> dict[str, _Answer]:
        """Each query's answer, QUERY_CONCURRENCY at a time, of those asked before ``deadline``. One after
        another, a round stopped at its deadline once Prometheus took about 0.6 s a query (session 86's
        scale audit: 200 of 200 ticks ran at 0.55 s, none at 0.65 s)."""
        from concurrent.futures import ThreadPoolExecutor

        failed = threading.Event()  # a required query failed: the round has failed, ask no more

        def ask(signal: str, q: str) -> _Answer:
            if time.monotonic() >= deadline or failed.is_set():
                return _Answer(False, None, None, time.monotonic(), asked=False)
            self._session.deadline = deadline  # the session's is the calling thread's: mid-answer too
            try:
                return _Answer(True, self._prom.custom_query(q), None, time.monotonic())
            except Exception as exc:  # connection refused, timeout, HTTP 4xx/5xx, bad JSON
                if signal not in MESSAGE_ONLY:
                    failed.set()
                return _Answer(False, None, exc, time.monotonic())

        with ThreadPoolExecutor(QUERY_CONCURRENCY, thread_name_prefix="prometheus-query") as pool:
            answers = dict(zip(queries, pool.map(ask, queries, queries.values()), strict=True))
        return {signal: a for signal, a in answers.items() if a.asked}
