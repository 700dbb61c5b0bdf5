"""Triton signals from Prometheus: one query per signal per tick, for every InferenceService.

Series are selected by the labels ``namespace``, ``inferenceservice`` and
``model`` (names configurable); the chart's scrape config copies the pod label
``tritonscale.io/inferenceservice`` into ``inferenceservice``. Each query groups
by those labels, so 1,000 InferenceServices cost the same sixteen queries as one.

p95 combination
---------------
The per-pod summary ``nv_inference_request_summary_us{quantile="0.95"}`` (Triton's 60 s sliding
window; the rendered pods run ``--metrics-config=summary_latencies=true``) is combined with ``max by``:
summary quantiles cannot be merged, and the worst pod's p95 is an upper bound of the service's p95
(if every pod serves 95% of its requests within its own p95, then at least 95% of all requests finish
within the largest one). Where there is no summary -- Triton turns it off for a model with the response
cache -- and Triton exports its latency histogram (``--metrics-config=histogram_latencies=true`` in
``runtime.extraArgs``, newer releases), the p95 is ``histogram_quantile(0.95, sum by (..., le)
(rate(...bucket[W])))`` over the merged buckets. The summary comes first: the histogram's default
buckets are 100, 500, 2000 and 5000 ms, and a quantile interpolated inside the first reads any p95
under 100 ms as about 95 ms. One PromQL ``or`` picks the summary where it exists.

Results tell three cases apart: a value, no data (series absent, or NaN as
an idle summary reports), and a failure of the query.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonscale.scaling.decider import Observation, SourceFailure
from tritonscale.scaling.prometheus_http import deadline_session, describe_failure, redacted, shown_url

SIGNALS = ("p95_ms", "rps", "queue_ms", "pending", "pending_min", "pending_max", "pending_at", "replicas", "rate_pods",
           "batch_size", "batch_items", "batch_ms", "failed_rps", "recent_rps", "recent_served_rps", "scrape_s",
           "targets")
# The scrape targets of each service by their ``up`` value, keyed (namespace, inferenceservice, up):
# only for messages, so a service with no Triton series says whether its scrapes fail, or find no pod.
TARGETS_LABEL = "up"
# Signals only messages read: asked last, and a round that cannot get them (a label proxy that refuses
# ``up``, the round's deadline) goes on without them, where a failed round would hold every service.
MESSAGE_ONLY = frozenset({"scrape_s", "targets"})


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal. PromQL strings follow Go's escaping:
    backslash, double quote and control characters must be escaped."""
    out = ['"']
    for ch in value:
        if ch in ('\\', '"'):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def promql_regex_alternation(values: Iterable[str]) -> str:
    """A quoted RE2 regex matching exactly one of ``values`` (each regex-escaped)."""
    return promql_string("|".join(re.escape(v) for v in sorted(set(values))))


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def is_label_name(name: str) -> bool:
    """A Prometheus label name (the classic form every PromQL selector takes unquoted)."""
    return bool(_LABEL_NAME.fullmatch(name))


@dataclass(frozen=True)
class SeriesSelector:
    """How Triton's series are found. Label *names* are validated; label *values* escaped."""

    namespace_label: str = "namespace"
    service_label: str = "inferenceservice"
    model_label: str = "model"
    extra: tuple[tuple[str, str], ...] = ()  # extra equality matchers, e.g. (("job", "triton"),)
    namespaces: tuple[str, ...] = ()  # restrict to these namespaces (operator's --namespace)

    def __post_init__(self) -> None:
        for name in (self.namespace_label, self.service_label, self.model_label, *(k for k, _ in self.extra)):
            if not _LABEL_NAME.fullmatch(name):
                raise ValueError(f"invalid Prometheus label name {name!r}")

    def extra_matchers(self) -> str:
        """The --series-label matchers, as PromQL (escaped values)."""
        return ", ".join(f"{k}={promql_string(v)}" for k, v in self.extra)

    def matchers(self) -> str:
        parts = [f'{self.service_label}!=""']
        if self.extra:
            parts.append(self.extra_matchers())
        if self.namespaces:
            parts.append(f"{self.namespace_label}=~{promql_regex_alternation(self.namespaces)}")
        return ", ".join(parts)

    def group(self) -> str:
        return f"{self.namespace_label}, {self.service_label}, {self.model_label}"


def live_irate(series: str, window: str) -> str:
    """``irate`` of the series that have a sample now: a range vector ignores staleness markers,
    so a removed pod's ``irate`` would repeat its last rate for up to the window -- after a
    scale-down from n replicas the sum reads n/(n-1) of the traffic (14% high at n = 8, more
    than the 10% tolerance that held the scale-down back, so one taken near its threshold
    would turn straight back up). ``and`` with the instant selector (which does honour
    staleness) keeps only the series still scraped. ``rate`` needs no such filter: a gone pod's
    ``rate`` counts only what it served within the window, and fades out of it. The price: a
    single failed scrape also marks a live pod's series stale, so its rate is missing from the
    sum until the next scrape -- a one-tick dip, which the decider's level (the minute's mean,
    ``signals.level``) and its scale-down window absorb, where the phantom came with every
    scale-down."""
    return f"(irate({series}[{window}]) and {series})"


def build_queries(sel: SeriesSelector, window_s: int) -> dict[str, str]:
    """The seventeen queries of one tick. Pure, so the escaping is unit-tested."""
    m, g, w = sel.matchers(), sel.group(), f"{int(window_s)}s"
    success = f"nv_inference_request_success{{{m}}}"
    failure = f"nv_inference_request_failure{{{m}}}"
    served = f"sum by ({g}) {live_irate(success, w)}"

    def per_pod(series: str) -> str:
        # One series per pod: Triton exports one per loaded version (spec.model.versionPolicyLatest > 1),
        # and counted as they come, one pod with two versions read as two pods, and its idle version's
        # empty queue as the least-queued pod's (an audit against a real tritonserver, session 84).
        return f"sum without (version) ({series})"

    return {
        "p95_ms": (
            f'max by ({g}) (nv_inference_request_summary_us{{quantile="0.95", {m}}}) / 1000 '
            f"or histogram_quantile(0.95, sum by ({g}, le) "
            f"(rate(nv_inference_first_response_histogram_ms_bucket{{{m}}}[{w}])))"
        ),
        "rps": f"sum by ({g}) (rate({success}[{w}]))",
        "queue_ms": (
            f"sum by ({g}) (rate(nv_inference_queue_duration_us{{{m}}}[{w}])) / 1000 "
            f"/ sum by ({g}) (rate({success}[{w}]))"
        ),
        "pending": f"sum by ({g}) (nv_inference_pending_request_count{{{m}}})",
        # The least-queued pod's: a full batch waits on every replica only if it waits on this one
        # (round-robin gives a replica that just became ready only new requests, so a large total
        # says nothing about it).
        "pending_min": f"min by ({g}) ({per_pod(f'nv_inference_pending_request_count{{{m}}}')})",
        # ... and the most-queued pod's: a queue that sits on a few pods (a Service balances gRPC clients
        # by connection, and some pods draw more of them) is not spread over the fleet.
        "pending_max": f"max by ({g}) ({per_pod(f'nv_inference_pending_request_count{{{m}}}')})",
        # When those gauges were scraped (the mean over pods): the queue's growth is per scrape
        # interval, and a tick may read the same scrape as the last one (decider.signals.demand).
        "pending_at": f"avg by ({g}) (timestamp(nv_inference_pending_request_count{{{m}}}))",
        "replicas": f"count by ({g}) ({per_pod(success)})",
        # Of those, the series with a rate over the window: rate() needs two samples in it, so with a
        # window shorter than two scrape intervals only the pods whose scrape phase fits have one, and
        # "rps" sums only them -- a third or half of the traffic read as all of it.
        "rate_pods": f"count by ({g}) ({per_pod(f'rate({success}[{w}])')})",
        # Batch cost, for the decider's capacity model: mean requests per execution, and
        # mean execution time (Triton adds a batch's compute time to each request in it),
        # between the last two scrapes (irate): a whole window mixes the batch sizes of a
        # changing load, and the request-weighted time then reads high. Requests, not
        # nv_inference_count's inferences: a request of 4 items is 4 inferences, and a pod
        # saturated by 16-item requests read 16 per execution where it ran one request each --
        # a capacity 16 times too high, held at one replica with p95 at twice the target (an
        # audit against a real tritonserver, session 84).
        "batch_size": (
            f"sum by ({g}) {live_irate(success, w)} "
            f"/ sum by ({g}) {live_irate(f'nv_inference_exec_count{{{m}}}', w)}"
        ),
        # Items per request (inferences / requests), for maxBatchSize, which counts items: a full
        # batch holds maxBatchSize / this many requests (decider.in_requests).
        "batch_items": (
            f"sum by ({g}) {live_irate(f'nv_inference_count{{{m}}}', w)} "
            f"/ sum by ({g}) {live_irate(success, w)}"
        ),
        "batch_ms": (
            f"sum by ({g}) {live_irate(f'nv_inference_compute_infer_duration_us{{{m}}}', w)} / 1000 "
            f"/ sum by ({g}) {live_irate(success, w)}"
        ),
        # Requests the queue policy rejected (Triton 2.51 exports them by `reason`, at 0 from the model's
        # load; earlier ones only once Triton counts a failure: absent read as 0).
        "failed_rps": f"sum by ({g}) (rate({failure}[{w}]))",
        # Requests out of the queue (served or rejected) between the last two scrapes: the
        # fastest rate Prometheus has; with the pending gauge's change it gives arrivals now.
        # Summed apart and added: Triton before the failure counter's `reason` label gives both
        # counters the same labels, and one irate() over both names is then a vector with the
        # same labelset twice -- an error that would fail every tick's snapshot. No failure
        # series (`or`): the served ones alone.
        "recent_rps": f"{served} + sum by ({g}) {live_irate(failure, w)} or {served}",
        # The served part alone: with a full batch queued on every replica, the saturation rate.
        "recent_served_rps": served,
        # How far apart Prometheus scrapes the pods: the seconds between each pod's last two scrapes
        # (irate divides the same counter change by them; ``> 0`` drops a reset and an idle pod's 0/0),
        # the least over pods (one missed scrape does not lengthen it). For a status note only: every
        # autoscaler figure was measured at a 15 s scrape, and a burst shorter than a scrape is unseen.
        "scrape_s": f"min by ({g}) ((idelta({success}[{w}]) / irate({success}[{w}])) > 0)",
        # Scrape targets by health, for messages only: the chart's relabelling gives ``up`` the
        # namespace and inferenceservice labels (it has no model label).
        "targets": (f'count_values by ({sel.namespace_label}, {sel.service_label}) '
                    f'("{TARGETS_LABEL}", up{{{m}}})'),
    }


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
        # bytes, would stretch one round of 16 queries past several ticks with no failure counted.
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
