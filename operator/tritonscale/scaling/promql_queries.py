"""The PromQL of one tick: one query per signal, for every InferenceService at once (pure).

Series are selected by the labels ``namespace``, ``inferenceservice`` and
``model`` (names configurable); the chart's scrape config copies the pod label
``tritonscale.io/inferenceservice`` into ``inferenceservice``. Each query groups
by those labels, so 1,000 InferenceServices cost the same queries as one (one per signal).

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
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SIGNALS = ("p95_ms", "rps", "queue_ms", "pending", "pending_min", "pending_max", "pending_at", "replicas", "rate_pods",
           "batch_size", "batch_items", "batch_ms", "failed_rps", "recent_rps", "recent_served_rps", "scrape_s",
           "targets")
# The scrape targets of each service by their ``up`` value, keyed (namespace, inferenceservice, up):
# only for messages, so a service with no Triton series says whether its scrapes fail, or find no pod.
TARGETS_LABEL = "up"


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
    ``rate_model.level``) and its scale-down window absorb, where the phantom came with every
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
