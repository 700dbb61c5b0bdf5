"""Asking Prometheus over HTTP: answers read whole or cut at the round's deadline, queries four at a time and
no more once the round has failed, the query in the POST body, failures and redirects said plainly, no
password in a message, and which Prometheus URLs the operator may ask."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


def test_credentials_in_the_url_never_reach_a_message():
    """A failure's text goes to a status condition (anyone who may get the object reads it), Events,
    the log and a metric label: the URL's user and password are not in it."""
    from tritonscale.scaling.prometheus_http import shown_url
    from tritonscale.scaling.prometheus_source import PrometheusSource

    assert shown_url("http://admin:s3cret@127.0.0.1:9090/prom") == "http://***@127.0.0.1:9090/prom"
    assert shown_url("https://prom.example:9090") == "https://prom.example:9090"
    snap = PrometheusSource("http://admin:s3cret@127.0.0.1:1/", timeout_s=0.5).fetch(60)
    assert not snap.ok and "s3cret" not in snap.error and "admin" not in snap.error, snap.error
    assert "http://***@127.0.0.1:1" in snap.error


def test_an_answer_that_trickles_ends_the_round_at_its_deadline():
    """A Prometheus that sends headers and then a byte every so often keeps each read within its
    timeout: the round still ends at its deadline, a failure the tick counts."""
    import http.server
    import time

    from tritonscale.scaling.prometheus_source import PrometheusSource

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    with _prometheus(Trickle) as url:
        source = PrometheusSource(url, timeout_s=1.0, round_timeout_s=0.5)
        began = time.monotonic()
        snap = source.fetch(60)
        took = time.monotonic() - began
        assert not snap.ok and "answered 0 of 17 queries in 0.5 s; too slow for a tick" in snap.error, snap.error
        assert took < 2.0, took  # not the 4 s the trickle lasts


def test_a_slow_prometheus_is_asked_several_queries_at_once():
    """Session 86's scale audit: one query after another, a round stopped at its deadline (every service on that
    Prometheus held its count) once each query took about 0.6 s of the 10 s. 17 queries of 0.3 s each here
    take 5.1 s one after another, past a 3 s round; four at a time, about 1.5 s."""
    import json
    import threading
    import time

    from tritonscale.scaling.prometheus_source import QUERY_CONCURRENCY, PrometheusSource

    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    plain = _answering(200, body)
    in_flight, most = [0], [0]
    lock = threading.Lock()

    class Slow(plain):  # type: ignore[misc,valid-type]
        def do_POST(self):  # noqa: N802
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            time.sleep(0.3)
            with lock:
                in_flight[0] -= 1
            super().do_POST()

    with _prometheus(Slow) as url:
        began = time.monotonic()
        snap = PrometheusSource(url, round_timeout_s=3.0).fetch(60)
        took = time.monotonic() - began
    assert snap.ok and snap.queries == 17, snap.error
    assert took < 3.0 and most[0] == QUERY_CONCURRENCY, (took, most)


def test_a_round_asks_no_more_once_a_required_query_failed():
    """Session 86's review: four at a time, a round against a Prometheus that never answers went on asking,
    batch after batch of read timeouts, and failed at its deadline with every query sent; one after
    another it had failed at the first timeout. The queries not yet begun are not asked."""
    import time

    from tritonscale.scaling.prometheus_source import QUERY_CONCURRENCY, PrometheusSource

    body = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
    plain = _answering(200, body)

    class Hung(plain):  # type: ignore[misc,valid-type]
        def do_POST(self):  # noqa: N802
            time.sleep(3.0)

    with _prometheus(Hung) as url:
        began = time.monotonic()
        snap = PrometheusSource(url, timeout_s=0.4, round_timeout_s=5.0).fetch(60)
        took = time.monotonic() - began
    assert not snap.ok and snap.error.endswith("no answer within 0.4 s"), snap.error
    assert snap.queries <= QUERY_CONCURRENCY and took < 1.5, (snap.queries, took)


def test_a_healthy_answer_is_read_whole():
    import json

    from tritonscale.scaling.prometheus_source import PrometheusSource

    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": "ns", "inferenceservice": "svc", "model": "m"}, "value": [0, "12.5"]}]}}).encode()

    with _prometheus(_answering(200, body)) as url:
        snap = PrometheusSource(url).fetch(60)
        assert snap.ok and snap.observation("ns", "svc", "m").rps == 12.5


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_large_chunked_answer_is_read_whole(gzipped):
    """Prometheus streams a large answer chunked (and gzipped when asked): read as it arrives, whole."""
    import gzip
    import http.server
    import json

    from tritonscale.scaling.prometheus_source import PrometheusSource

    result = [{"metric": {"namespace": "ns", "inferenceservice": f"svc{i}", "model": "m"}, "value": [0, str(i)]}
              for i in range(3000)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    class Chunked(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            data = gzip.compress(body) if gzipped else body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 5000):
                self.wfile.write(f"{len(data[i:i + 5000]):x}\r\n".encode() + data[i:i + 5000] + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args):
            pass

    with _prometheus(Chunked) as url:
        snap = PrometheusSource(url).fetch(60)
        assert snap.ok, snap.error
        assert snap.observation("ns", "svc2999", "m").rps == 2999.0


def _answering(status: int, body: bytes, seen: list[tuple[str, str]] | None = None) -> type:
    """A stand-in Prometheus's handler: every POST answered ``status`` with the JSON ``body``; each
    request's path and form body noted in ``seen``."""
    import http.server

    class Answering(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            form = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            if seen is not None:
                seen.append((self.path, form))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Answering


@contextlib.contextmanager
def _prometheus(handler: type) -> Iterator[str]:
    """A stand-in Prometheus on 127.0.0.1 answering with ``handler``; yields its base URL."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_query_is_sent_in_the_post_body_not_the_url():
    """prometheus-api-client puts a POST's query in the URL: 300 namespaces made a 15 KB URL,
    beyond many proxies' limits. The form body takes it; the URL is the endpoint alone."""
    import json
    from urllib.parse import parse_qs

    from tritonscale.scaling.prometheus_source import PrometheusSource

    seen: list[tuple[str, str]] = []
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    with _prometheus(_answering(200, body, seen)) as url:
        assert PrometheusSource(url).fetch(60).ok
    assert seen and all(path == "/api/v1/query" for path, _ in seen), seen[:2]
    forms = [parse_qs(form) for _, form in seen]
    assert all(form.get("query") and ("nv_inference" in form["query"][0] or "up{" in form["query"][0])
               for form in forms), seen[:2]


@pytest.mark.parametrize(("status", "answer", "said"), [
    (500, {"status": "error", "errorType": "internal", "error": "query processing would load too many samples"},
     "HTTP 500: query processing would load too many samples"),
    (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 4"},
     "HTTP 400: parse error at char 4"),
    (200, {"status": "error"}, "an answer that is not a query result (KeyError"),
    (400, {"status": "error", "errorType": "bad_data", "error": 'invalid parameter "query": 1:8: parse error'},
     'HTTP 400: invalid parameter "query": 1:8: parse error'),
    (502, None, "HTTP 502"),  # a proxy's page: the status alone
    # another service's JSON (a URL in a spec may name any host): not echoed, the status alone
    (500, {"error": "INTERNAL-ONLY: db_password=letmein"}, "HTTP 500"),
    # a URL without Prometheus's route prefix, or with /api/v1/query in it: "HTTP 404" alone named no cause
    (404, None, "HTTP 404 (no Prometheus query API under this URL's path: give Prometheus's base URL, with its "
                "--web.route-prefix if it has one, and without /api/v1/...)"),
])
def test_a_failed_answer_is_said_plainly(status, answer, said):
    import json

    from tritonscale.scaling.prometheus_source import PrometheusSource

    body = b"<html>bad gateway</html>" if answer is None else json.dumps(answer).encode()
    with _prometheus(_answering(status, body)) as url:
        snap = PrometheusSource(url).fetch(60)
    assert not snap.ok and said in snap.error, snap.error
    assert "letmein" not in snap.error


def test_the_targets_query_is_best_effort():
    """It only words messages: a Prometheus (or label proxy) that refuses `up` must not fail the round, which
    would hold every service and count towards fallbackReplicas (found by a review)."""
    from tritonscale.scaling.prometheus_source import PrometheusSource
    from tritonscale.scaling.promql_queries import build_queries

    source = PrometheusSource("http://127.0.0.1:1")
    queries = build_queries(source.selector, 60)
    answer = [{"metric": {"namespace": "ns", "inferenceservice": "svc", "model": "m"}, "value": [0, "12.5"]}]

    def custom_query(q):
        if q == queries["targets"]:
            raise RuntimeError("HTTP 403: up is not allowed")
        return answer

    source._prom.custom_query = custom_query
    snap = source.fetch(60)
    assert snap.ok and snap.observation("ns", "svc", "m").rps == 12.5 and "targets" not in snap.values
    assert snap.observation("ns", "other", "m").message.endswith(": its scrape targets are not known")
    source._prom.custom_query = lambda q: "not a vector" if q == queries["targets"] else answer
    assert source.fetch(60).ok


def _redirecting(code: int) -> type:
    """A Prometheus behind a redirect: POST /api/v1/query -> ``code`` to /real/api/v1/query (with a user
    and password in the Location, which the message must not show), where a POST with a query in its
    body answers an empty vector, and anything else Prometheus's answer to a request without one."""
    import http.server
    import json

    ok = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    empty = json.dumps({"status": "error", "errorType": "bad_data",
                        "error": 'invalid parameter "query": 1:1: parse error: no expression found in input'}).encode()

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            form = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            if self.path == "/api/v1/query":
                self.send_response(code)
                self.send_header("Location", f"http://user:secret@{self.headers['Host']}/real/api/v1/query")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._answer(200 if "query=" in form else 400, ok if "query=" in form else empty)

        def do_GET(self):  # noqa: N802
            self._answer(400, empty)

        def log_message(self, *args):
            pass

    return Redirecting


@pytest.mark.parametrize("code", [301, 302, 303])
def test_a_redirect_that_drops_the_query_is_named(code):
    """A 301/302 (an http -> https proxy, say) turned the POST into a GET without its body, and the
    condition blamed the query: "HTTP 400: ... parse error: no expression found in input" (an
    exploration against a real Prometheus behind a redirecting front, session 55)."""
    from tritonscale.scaling.prometheus_source import PrometheusSource

    with _prometheus(_redirecting(code)) as url:
        snap = PrometheusSource(url).fetch(60)
    assert not snap.ok
    assert f"the Prometheus URL redirects (HTTP {code}) to http://***@127.0.0.1:" in snap.error, snap.error
    assert "give the URL it redirects to" in snap.error and "secret" not in snap.error, snap.error


@pytest.mark.parametrize("code", [307, 308])
def test_a_redirect_that_keeps_the_query_is_followed(code):
    from tritonscale.scaling.prometheus_source import PrometheusSource

    with _prometheus(_redirecting(code)) as url:
        snap = PrometheusSource(url).fetch(60)
    assert snap.ok, snap.error


@pytest.mark.parametrize(("url", "ok"), [
    ("http://prom.monitoring:9090", True),
    ("http://prom.monitoring:9090/", True),
    ("http://PROM.monitoring:9090/tenant-a", True),  # a path under it; host names are case-blind
    ("http://alice:pw@prom.monitoring:9090", True),  # a tenant's own credentials
    ("http://prom.monitoring:9090.evil.example", False),  # not the same host
    ("http://prom.monitoring:90901", False),
    ("https://prom.monitoring:9090", False),  # another scheme
    ("http://prom.monitoring", False),  # port 80, not 9090
    ("http://thanos.monitoring/api/tenants/a", True),
    ("http://thanos.monitoring:80/api/tenants/a/sub", True),  # the default port, stated
    ("http://thanos.monitoring/api/tenants/ab", False),  # whole path segments only
    ("http://thanos.monitoring/api/tenants", False),  # above the allowed path
    ("http://169.254.169.254/latest/meta-data", False),
    # read as the client that sends the query reads it (urllib3)
    ("http://127.0.0.1:8999\\@prom.monitoring:9090", False),  # urllib3's host: 127.0.0.1
    ("http://thanos.monitoring/api/tenants/a/../b", False),  # sent as /api/tenants/b
    ("http://thanos.monitoring/api/tenants/a/%2e%2e/b", False),
    ("http://thanos.monitoring/api/tenants/a/./x", False),
    ("http://[::1]:9090", False),
])
def test_allowed_prometheus_urls_match_scheme_host_port_and_a_path_below(url: str, ok: bool) -> None:
    from tritonscale.scaling.prometheus_http import allowed_by

    allowed = ["http://prom.monitoring:9090", "http://thanos.monitoring/api/tenants/a/"]
    assert allowed_by(url, allowed) is ok
    assert allowed_by(url, []) is False
