"""The HTTP side of asking Prometheus: which URLs the operator may ask (``--allowed-prometheus-url``) and how
it shows them (no password), a requests Session whose requests end at a round's deadline and that refuses
redirects which would lose the query, and a failure said in one line."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from tritonscale.api.spec import url_without_credentials


def allowed_by(url: str, allowed: Sequence[str]) -> bool:
    """Whether ``url`` is one of the ``allowed`` Prometheus URLs (``tritonscale run --allowed-prometheus-url``)
    or under one: the same scheme, host and port, and a path at or below the allowed one's, by whole path
    segments -- ``http://prom:9090`` allows ``http://prom:9090/tenant-a``, not ``http://prom:9090.evil.example``
    nor ``http://prom:90901``. Credentials are not compared: a tenant may bring its own. Read as the client
    that sends the query reads it (urllib3): a URL it reads another host in than urllib does (a backslash
    before the @), or whose path climbs with "." or ".." segments (raw or %-encoded: /tenants/a/../b is
    sent as /tenants/b), is refused."""
    from urllib3.util import parse_url

    def parts(u: str) -> tuple[str, str, int | None, str] | None:
        try:
            p, sent = urlsplit(u), parse_url(u)
            port = p.port or {"http": 80, "https": 443}.get(p.scheme.lower())
        except ValueError:
            return None
        host = (p.hostname or "").lower()
        segments = unquote(p.path).split("/")
        if "\\" in u or (sent.host or "").lower().strip("[]") != host or "." in segments or ".." in segments:
            return None
        return p.scheme.lower(), host, port, p.path.rstrip("/")

    want = parts(url)
    if want is None:
        return False
    for base in allowed:
        have = parts(base)
        if have is not None and want[:3] == have[:3] and (
                not have[3] or want[3] == have[3] or want[3].startswith(have[3] + "/")):
            return True
    return False


def shown_url(url: str) -> str:
    """``url`` as messages, logs and metric labels show it: credentials in it (``http://user:pass@host``)
    are replaced by ``***``. A status condition is readable by anyone who may ``get`` the object."""
    return url_without_credentials(url)


class LossyRedirect(Exception):
    """Prometheus's URL answered a query with a redirect that drops it: requests (as browsers and curl do)
    follows a 301, 302 or 303 as a GET without the body, where the query is, and the target's "no
    expression found in input" then blamed the PromQL. 307 and 308 keep the method and body, and work."""


def _refuse_lossy_redirect(response: Any) -> None:
    for hop in getattr(response, "history", None) or ():
        if hop.status_code in (301, 302, 303) and (hop.request is None or hop.request.method == "POST"):
            where = shown_url(hop.headers.get("Location", "") or "?")
            raise LossyRedirect(f"the Prometheus URL redirects (HTTP {hop.status_code}) to {where}, and a "
                                f"{hop.status_code} turns the query's POST into a GET without it: give the URL "
                                "it redirects to")


def deadline_session() -> Any:
    """A requests Session whose requests end at ``deadline`` (a time.monotonic() value the caller sets
    before each round): the body is read as it arrives and checked against it. Read timeouts alone let
    a Prometheus that trickles a byte every few seconds hold one query -- and with it every round of
    that Prometheus and window -- for as long as it trickles (a 90 s trickle held one for 93 s)."""
    import requests

    class DeadlineSession(requests.Session):
        """The deadline is the calling thread's: rounds of several windows run at once on one source."""

        _local = threading.local()

        @property
        def deadline(self) -> float | None:
            return getattr(self._local, "deadline", None)

        @deadline.setter
        def deadline(self, value: float | None) -> None:
            self._local.deadline = value

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            if method.upper() == "POST" and kwargs.get("params") and not kwargs.get("data"):
                # prometheus-api-client puts the query in the URL even for a POST: here it goes in the
                # form body Prometheus reads, so a long selector (many namespaces) fits any proxy's
                # URL limit (300 namespaces named ns000..ns299: a 15 KB URL for the longest query)
                kwargs["data"], kwargs["params"] = kwargs["params"], None
            deadline = self.deadline
            if deadline is None:
                response = super().request(method, url, *args, **kwargs)
                _refuse_lossy_redirect(response)
                return response
            if time.monotonic() >= deadline:
                raise requests.exceptions.Timeout("the round's time ran out")
            kwargs["stream"] = True
            response = super().request(method, url, *args, **kwargs)
            try:
                _refuse_lossy_redirect(response)
            except LossyRedirect:
                response.close()
                raise
            chunks = []
            # read1: what has arrived, up to 64 KiB (urllib3 >= 2.3); read waits for the whole 64 KiB
            read = getattr(response.raw, "read1", None) or response.raw.read
            try:
                while True:
                    chunk = read(1 << 16, decode_content=True)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    if time.monotonic() >= deadline:
                        raise requests.exceptions.Timeout("the answer was still arriving when the round's time ran out")
            finally:
                response.close()
            response._content = b"".join(chunks)
            response._content_consumed = True
            return response

    return DeadlineSession()


def redacted(text: str, url: str) -> str:
    """``text`` with ``url`` (as given, or without its trailing slash) shown as ``shown_url`` does:
    an exception's text may quote the URL it failed on."""
    for form in {url, url.rstrip("/")}:
        text = text.replace(form, shown_url(form))
    return text


def _prometheus_error(body_repr: str) -> str | None:
    """The ``error`` of Prometheus's JSON answer, from the repr of its bytes the client's exception
    carries; None if it is none (a proxy's page, say). Only an answer in the shape of Prometheus's
    errors (``status`` "error" and an ``errorType``): a URL in a spec may name any host the operator
    reaches, and what another service answers is not echoed into status, Events and the log."""
    import ast

    try:
        answer = json.loads(ast.literal_eval(body_repr))
    except (ValueError, SyntaxError, TypeError):
        return None
    if not (isinstance(answer, dict) and answer.get("status") == "error" and isinstance(answer.get("errorType"), str)):
        return None
    error = answer.get("error")
    return error if isinstance(error, str) and error else None


def describe_failure(exc: BaseException, timeout_s: float) -> str:
    """One plain sentence for a status condition, not a urllib3 repr with the query in it."""
    import requests
    from prometheus_api_client import PrometheusApiClientException

    text = str(exc)
    if isinstance(exc, LossyRedirect):
        return text
    if isinstance(exc, requests.exceptions.Timeout):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, requests.exceptions.SSLError):
        why = re.search(r"certificate verify failed: (.+?)\s*\(_ssl", text)
        if why and re.search(r"mismatch|not valid for", why.group(1)):  # a CA given or not: a wrong name
            return (f"its TLS certificate is not for this host name ({why.group(1)}): put a name the "
                    "certificate names in the Prometheus URL")
        if why:
            return (f"its TLS certificate is not trusted ({why.group(1)}): give its CA with "
                    "--prometheus-ca-file")
        return "the TLS handshake failed (is it https at that address?)"
    if isinstance(exc, requests.exceptions.ConnectionError):
        for needle, plain in (("Connection refused", "connection refused"),
                              ("Name or service not known", "host name not found"),
                              ("No route to host", "no route to host")):
            if needle in text:
                return f"{plain} (is Prometheus running at that address?)"
        return "cannot connect"
    if isinstance(exc, PrometheusApiClientException):  # "HTTP Status Code 500 (b'{...}')"
        status = re.search(r"HTTP Status Code (\d+) \((b['\"].*['\"])\)$", text, re.S)
        if status:
            error = _prometheus_error(status.group(2))
            # a path that is not Prometheus's: the base URL without the route prefix Prometheus serves
            # under (--web.route-prefix), or with /api/v1/query already in it
            hint = (" (no Prometheus query API under this URL's path: give Prometheus's base URL, with its "
                    "--web.route-prefix if it has one, and without /api/v1/...)") if status.group(1) == "404" else ""
            return f"HTTP {status.group(1)}" + (f": {error[:200]}" if error else "") + hint
    if isinstance(exc, (KeyError, TypeError, ValueError)):  # a 200 whose body is no query result
        return f"an answer that is not a query result ({type(exc).__name__}: {text[:100]})"
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {first[:200]}"
