"""Metric source: PromQL escaping, one grouped query per signal, value / no data / failure. The cache that
shares each round between ticks is test_snapshot_cache.py's."""

from __future__ import annotations

import math

import pytest

from tritonscale.scaling.prometheus_source import Snapshot
from tritonscale.scaling.promql_queries import (
    SIGNALS,
    SeriesSelector,
    build_queries,
    promql_regex_alternation,
    promql_string,
)


@pytest.mark.parametrize("raw, quoted", [
    ("plain", '"plain"'),
    ('a"b', '"a\\"b"'),
    ("a\\b", '"a\\\\b"'),
    ("line\nbreak", '"line\\nbreak"'),
    ('x"} or vector(1) #', '"x\\"} or vector(1) #"'),
])
def test_promql_string_escapes_everything_that_could_end_the_literal(raw, quoted):
    assert promql_string(raw) == quoted


def test_regex_alternation_escapes_regex_and_string_syntax():
    assert promql_regex_alternation(["a.b", "c|d"]) == '"a\\\\.b|c\\\\|d"'


def test_injection_attempt_stays_inside_one_matcher():
    evil = 'prod"} or vector(1) or {x="'
    sel = SeriesSelector(namespaces=(evil,), extra=(("job", evil),))
    m = sel.matchers()
    # Every quote of the payload is escaped, so the matcher list never closes early.
    unescaped_quotes = sum(1 for i, ch in enumerate(m) if ch == '"' and (i == 0 or m[i - 1] != "\\"))
    assert unescaped_quotes == 6  # three matchers, each with an opening and a closing quote
    assert "or vector(1)" in m and '\\"} or vector(1)' in m


# "job\n": a trailing newline passed `$` (auditK D6)
@pytest.mark.parametrize("bad", ["has space", 'q"uote', "1starts_with_digit", "dash-ed", "job\n"])
def test_label_names_are_validated(bad):
    with pytest.raises(ValueError):
        SeriesSelector(service_label=bad)


def test_one_query_per_signal_grouped_by_service():
    queries = build_queries(SeriesSelector(), 30)
    assert set(queries) == set(SIGNALS) and len(queries) == 17
    # requests per execution, and items per request apart: nv_inference_count counts a request's items (an
    # audit against a real tritonserver, session 84: a 16-item request read as 16 requests per batch)
    assert "nv_inference_count" not in queries["batch_size"]
    assert queries["batch_size"].index("nv_inference_request_success") < queries["batch_size"].index("exec_count")
    assert queries["batch_items"].index("nv_inference_count") < queries["batch_items"].index("request_success")
    for signal, q in queries.items():
        assert "by (namespace, inferenceservice" + ("" if signal == "targets" else ", model") in q
        assert 'inferenceservice!=""' in q
    assert queries["targets"] == 'count_values by (namespace, inferenceservice) ("up", up{inferenceservice!=""})'
    # the summary first; the histogram (coarse default buckets) only where there is none
    assert queries["p95_ms"].startswith("max by (") and " or histogram_quantile(0.95" in queries["p95_ms"]
    assert '[30s]' in queries["rps"]
    assert "irate(" in queries["recent_rps"] and "nv_inference_request_failure" in queries["recent_rps"]
    assert "nv_inference_request_failure" in queries["failed_rps"]
    least = queries["pending_min"]
    assert least.startswith("min by (") and "nv_inference_pending_request_count" in least
    most = queries["pending_max"]
    assert most.startswith("max by (") and "nv_inference_pending_request_count" in most
    # the seconds between a pod's last two scrapes: the same counter change over irate's time, the least
    # over pods, a reset's negative and an idle pod's 0/0 dropped
    gap = queries["scrape_s"]
    assert gap.startswith("min by (") and "idelta(nv_inference_request_success{" in gap and gap.endswith(") > 0)")
    assert "/ irate(nv_inference_request_success{" in gap and gap.count("[30s]") == 2


def test_snapshot_tells_value_no_data_and_failure_apart():
    key = ("ns", "svc", "m")
    snap = Snapshot(taken_at=0, ok=True, values={
        "rps": {key: 12.5, ("ns", "idle", "m"): 0.0},
        "p95_ms": {key: 80.0, ("ns", "idle", "m"): math.nan},
        "batch_size": {key: 4.0}, "batch_ms": {key: 28.0}, "pending": {key: 40.0}, "pending_min": {key: 3.0},
        "replicas": {key: 3.0, ("ns", "idle", "m"): 1.0}, "rate_pods": {key: 2.0}, "scrape_s": {key: 30.0},
        "batch_items": {key: 2.5},
    })
    obs = snap.observation("ns", "svc", "m")
    assert (obs.status, obs.rps, obs.p95_ms, obs.batch_size, obs.batch_ms) == ("ok", 12.5, 80.0, 4.0, 28.0)
    assert obs.items_per_request == 2.5
    assert (obs.pending, obs.pending_min, obs.pods, obs.rate_pods, obs.scrape_s) == (40.0, 3.0, 3.0, 2.0, 30.0)
    idle = snap.observation("ns", "idle", "m")
    assert (idle.status, idle.rps, idle.p95_ms) == ("ok", 0.0, None)  # NaN summary: no value, but data
    assert idle.scrape_s is None  # an idle pod's counter moves not: idelta / irate is 0/0, no series
    assert obs.message == "" and idle.message.startswith("Triton's p95 series reads nan: no request completed")
    # No latency series at all: what Triton does for a model with the response cache (its request summary
    # is off), which MetricsAvailable's NoLatency then names instead of "read NaN".
    cached = Snapshot(taken_at=0, ok=True, values={"rps": {key: 5.0}, "replicas": {key: 1.0}}).observation(*key)
    assert cached.status == "ok" and cached.p95_ms is None and "spec.model.responseCache" in cached.message
    missing = snap.observation("ns", "other", "m")
    assert missing.status == "no_data" and "inferenceservice=other" in missing.message
    # Series scraped (the instant count sees two pods) but rate() had too few samples in the window.
    short = Snapshot(taken_at=0, ok=True, window_s=10, values={"replicas": {key: 2.0}}).observation("ns", "svc", "m")
    assert short.status == "no_data"
    assert short.message.startswith("2 pod(s) export Triton's series but windowSeconds=10 holds fewer than two")
    failed = Snapshot(taken_at=0, ok=False, error="connection refused").observation("ns", "svc", "m")
    assert failed.status == "failed" and failed.message == "connection refused"


def test_a_window_rate_with_no_live_series_is_no_data_not_a_falling_load():
    """The pods' scrapes fail (or the pods are gone): Prometheus marks their series stale, so the instant
    count finds none, while rate() over the window still reads the earlier samples, fading -- read as
    the load, it scaled a fleet of 9 down to 8 on a real Prometheus before NoData held it."""
    key = ("ns", "svc", "m")
    values = {"rps": {key: 36.3}, "p95_ms": {key: 80.0}}
    for count in ({}, {key: 0.0}):  # the count absent (no series at all), or zero
        obs = Snapshot(taken_at=0, ok=True, values={**values, "replicas": count}).observation("ns", "svc", "m")
        assert obs.status == "no_data" and obs.rps is None
        assert obs.message.startswith("no pod exports Triton's series now (stale in Prometheus") \
            and "36.3 rps read over the window is of earlier scrapes" in obs.message


def test_negative_or_absurd_readings_are_no_measurement():
    key = ("ns", "svc", "m")
    snap = Snapshot(taken_at=0, ok=True, values={
        "rps": {key: 700.0}, "p95_ms": {key: -5.0}, "pending": {key: 1e200}, "recent_served_rps": {key: math.inf},
        "pending_at": {key: 1.7e9}, "replicas": {key: 2.0}})
    obs = snap.observation("ns", "svc", "m")
    assert (obs.rps, obs.p95_ms, obs.pending, obs.recent_served_rps, obs.pending_at) == (700.0, None, None, None, 1.7e9)
    for bad in (-1.0, math.inf, 1e300):  # said as what it is, not as "fewer than two scrapes"
        obs = Snapshot(taken_at=0, ok=True, values={"rps": {key: bad}, "replicas": {key: 2.0}}).observation(
            "ns", "svc", "m")
        assert obs.status == "no_data" and f"reads {bad:g}: not a rate" in obs.message, obs.message


def test_an_answer_that_is_no_instant_vector_fails_the_round_naming_prometheus(monkeypatch):
    from tritonscale.scaling.prometheus_source import PrometheusSource

    source = PrometheusSource("http://127.0.0.1:1")
    for answer in ("garbage", [1, 2], {"metric": {}}, [{"metric": "x", "value": [0, "1"]}]):
        monkeypatch.setattr(source._prom, "custom_query", lambda q, answer=answer: answer)
        snap = source.fetch(60)
        assert not snap.ok and snap.error.startswith("Prometheus at http://127.0.0.1:1: query for ")
        assert "no instant vector" in snap.error
    # a range vector (a Prometheus, or a proxy before it, answering another query type) was read as no
    # series at all: NoData, "Prometheus has no scrape target labelled ..."
    matrix = [{"metric": {"namespace": "ns"}, "values": [[1.7e9, "1"], [1.7e9 + 15, "2"]]}]
    monkeypatch.setattr(source._prom, "custom_query", lambda q: matrix)
    snap = source.fetch(60)
    assert not snap.ok and "its answer is a range vector (a matrix), not an instant vector" in snap.error


def test_no_series_names_the_series_label_matchers_too(monkeypatch):
    """The operator's --series-label matchers filter every query; a message naming only namespace,
    inferenceservice and model sent the user to check those (an exploratory review's finding)."""
    from tritonscale.scaling.prometheus_source import PrometheusSource
    from tritonscale.scaling.promql_queries import SeriesSelector

    source = PrometheusSource("http://127.0.0.1:1", selector=SeriesSelector(extra=(("job", 'tri"ton\\x'),)))
    monkeypatch.setattr(source._prom, "custom_query", lambda q: [])
    obs = source.fetch(60).observation("ns", "svc", "m")
    assert obs.status == "no_data"
    assert obs.message.startswith('no Triton series with namespace=ns, inferenceservice=svc, model=m, '
                                  'job="tri\\"ton\\\\x" (--series-label): Prometheus has no scrape target'), obs.message
    plain = Snapshot(taken_at=0, ok=True, values={}).observation("ns", "svc", "m")
    assert plain.message == ("no Triton series with namespace=ns, inferenceservice=svc, model=m: its scrape "
                             "targets are not known")


@pytest.mark.parametrize(("targets", "why"), [
    ({}, "Prometheus has no scrape target labelled namespace=ns, inferenceservice=svc: no pod of it runs yet, "
         "or no PodMonitor or scrape config selects its pods and adds these labels"),
    ({("ns", "svc", "0"): 2.0, ("ns", "svc", "1"): 1.0, ("ns", "other", "0"): 5.0},
     "Prometheus's scrapes of 2 of 3 target(s) labelled inferenceservice=svc fail (up == 0; Prometheus's "
     "/targets page gives the error)"),
    ({("ns", "svc", "1"): 3.0},
     "Prometheus scrapes 3 target(s) labelled inferenceservice=svc, but none exports "
     "Triton's series for model=m: the model has not loaded yet, the port is not Triton's metrics port, or the "
     "model is named otherwise"),
])
def test_no_series_says_what_the_services_scrape_targets_show(targets, why):
    """A service with no Triton series: its scrapes fail, find no pod, or scrape something else."""
    obs = Snapshot(taken_at=0, ok=True, values={"targets": targets}).observation("ns", "svc", "m")
    assert (obs.status, obs.message) == ("no_data", f"no Triton series with namespace=ns, inferenceservice=svc, "
                                                    f"model=m: {why}")
    stale = Snapshot(taken_at=0, ok=True, values={"targets": targets, "rps": {("ns", "svc", "m"): 4.0}})
    assert f"the pods are gone; {why}); the 4.0 rps" in stale.observation("ns", "svc", "m").message


def test_targets_are_read_by_their_up_value():
    """The targets query's answer is keyed by (namespace, inferenceservice, up), not by model."""
    from tritonscale.scaling.prometheus_source import PrometheusSource

    source = PrometheusSource("http://127.0.0.1:1")
    answers = {"targets": [{"metric": {"namespace": "ns", "inferenceservice": "svc", "up": "0"}, "value": [0, "2"]}]}
    queries = build_queries(source.selector, 60)
    source._prom.custom_query = lambda q: answers["targets"] if q == queries["targets"] else []
    obs = source.fetch(60).observation("ns", "svc", "m")
    assert "scrapes of 2 of 2 target(s) labelled inferenceservice=svc fail" in obs.message


def test_a_round_slower_than_its_deadline_is_a_failed_snapshot(monkeypatch):
    """Each read has its timeout, but a Prometheus answering each query slowly would stretch the
    round of 12 past several ticks: the round stops at its deadline, a failure the tick counts."""
    import time

    from tritonscale.scaling.prometheus_source import PrometheusSource

    source = PrometheusSource("http://127.0.0.1:1", round_timeout_s=0.1)
    asked = []

    def slow_query(q):
        asked.append(q)
        time.sleep(0.04)
        return []

    monkeypatch.setattr(source._prom, "custom_query", slow_query)
    snap = source.fetch(60)
    assert not snap.ok and 0 < len(asked) < 13, (snap, len(asked))
    assert f"answered {len(asked)} of 17 queries in 0.1 s" in snap.error


def test_a_reading_below_a_billionth_is_zero_and_the_decider_takes_it():
    """A p95 of 5e-324 ms passed every check and divided by zero in the decider at every tick; 1e-300 rps
    readings overflowed it (an exploration's fuzzing, session 55). Below MIN_READING a value is float noise."""
    from tritonscale.scaling.decider import Policy, Replicas, State, decide
    from tritonscale.scaling.prometheus_source import MIN_READING

    key = ("ns", "svc", "m")
    for tiny in (5e-324, 1e-310, 1e-300, MIN_READING / 2):
        values = {"rps": 40.0, "replicas": 2.0, "recent_rps": 40.0, "recent_served_rps": tiny, "p95_ms": tiny,
                  "pending": tiny, "batch_ms": tiny}
        obs = Snapshot(taken_at=1.7e9, ok=True, values={k: {key: v} for k, v in values.items()}).observation(*key)
        assert (obs.p95_ms, obs.recent_served_rps, obs.pending, obs.batch_ms) == (0.0, 0.0, 0.0, 0.0)
        d = decide(obs, Replicas(current=2, ready=2), Policy(target_p95_ms=100.0), State(), 1.7e9)
        assert d.replicas >= 1
    kept = Snapshot(taken_at=0, ok=True, values={"rps": {key: 2 * MIN_READING}, "replicas": {key: 1.0}})
    assert kept.observation(*key).rps == 2 * MIN_READING
