"""The operator's log (``configure_logging``, from ``operator_main.run``): Kopf's set-up of the root logger
with its [namespace/name] prefix, and the filters that keep one problem one line -- Kopf's line per child
event, its retries of a failed API request, its ERROR for a retry by design -- and credentials out of it."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import kopf


class QuietChildEvents(logging.Filter):
    """Drops Kopf's INFO line for each child event handled (``Handler 'child_changed' succeeded.``):
    one per change of every child of every InferenceService -- a Deployment's status moves at each
    pod's start and readiness -- so at scale most of the operator's log, for nothing done. What the
    handler does (a correction, a failure) it logs itself. Likewise for each event of an InferenceService
    (``note_deletion``, which notes deletions for the autoscaler's loop). ``tritonscale run --verbose``
    keeps them."""

    SUCCEEDED = ("Handler 'child_changed' succeeded.", "Handler 'note_deletion' succeeded.")
    # Kopf stops the autoscaler's daemons by cancelling them (the daemon's loop is written for it:
    # handlers.autoscale_daemon.autoscale), and says so at WARNING for each InferenceService at every
    # stop of the operator -- a thousand warnings per rollout for the designed way out.
    CANCELLED = "Daemon 'autoscale' is cancelled. Will escalate."

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ((record.levelno == logging.INFO and message in self.SUCCEEDED)
                    or (record.levelno == logging.WARNING and message == self.CANCELLED))


class ApiRetryDigest(logging.Filter):
    """Kopf logs every failed attempt of every API request at ERROR (``Request attempt #3/9 failed;
    will retry: GET https://10.0.0.1/apis/apps/v1/deployments?watch=true... -> ClientConnectorError(...)``):
    while the API server is away (a control-plane upgrade) that is about 8 lines per watched resource
    per 54 s of Kopf's backoffs -- 42 for a 45 s outage (tests/integration/test_apiserver_outage.py),
    and as many again per watched namespace -- for one problem, which Kopf handles (it retries, and a
    watch that escalates starts over). Here the first failure of a kind (the API server's address and
    the error's class) is said at WARNING, and that kind again at most every ``quiet_s``, with a count
    of those not shown; other records pass unchanged. Kopf's wording is matched, so if it changes,
    its own lines come through as before. ``tritonscale run --verbose`` keeps every one."""

    RETRY = re.compile(r"^Request attempt #\d+(?:/\d+)? failed; (?:will retry|escalating): "
                       r"\S+ (https?://[^/\s]+)\S* -> (\w+)")

    def __init__(self, quiet_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.quiet_s, self.clock = quiet_s, clock
        self._said: dict[tuple[str, str], float] = {}  # kind -> when last shown
        self._hidden: dict[tuple[str, str], int] = {}  # kind -> not shown since

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith("kopf"):
            return True
        message = record.getMessage()
        m = self.RETRY.match(message)
        if m is None:
            return True
        kind, now = (m.group(1), m.group(2)), self.clock()
        said = self._said.get(kind)
        if said is not None and now - said < self.quiet_s:
            self._hidden[kind] = self._hidden.get(kind, 0) + 1
            return False
        self._said[kind] = now
        hidden = self._hidden.pop(kind, 0)
        more = f" ({hidden} more like it since the last shown)" if hidden else ""
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = (f"Kubernetes API request failed, retrying{more}; the same failure is "
                                   f"said again at most every {self.quiet_s:g} s: {message}"), ()
        return True


class TemporaryAsWarning(logging.Filter):
    """Kopf logs a handler's ``kopf.TemporaryError`` at ERROR ("Handler 'reconcile_inference_service' failed
    temporarily: another object holds the name of ..."), at each of its retries. The handlers raise it for
    what they already report in status and retry by design -- a name another object holds, an API refusal
    -- so it is a WARNING: ERROR is left for what nobody handles."""

    TEMPORARY = re.compile(r"^Handler '[^']+' failed temporarily: ")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.name.startswith("kopf") and \
                self.TEMPORARY.match(record.getMessage()):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class HiddenCredentials(logging.Filter):
    """Credentials in a URL (``http://user:pass@host``) written as ``***`` in every log line, as status,
    Events and metric labels show them (``url_without_credentials``): with ``--verbose`` Kopf logs whole
    objects at DEBUG ("Creation is in progress: {...}"), a spec.scaling.prometheus.url with a password
    in it included, and the operator's log is read by more people than the InferenceService."""

    USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s'\"@]+@")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = self.USERINFO.sub(r"\g<scheme>***@", message)
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(verbose: bool) -> None:
    """Kopf's own set-up of the root logger, with its object prefix: its per-object lines ("Handler
    'reconcile_inference_service' failed temporarily: ...") open with [namespace/name], which the
    plain format dropped -- with many InferenceServices nobody could tell which one failed."""
    text_format: Any = LOG_FORMAT  # Kopf takes a format string as well as its LogFormat
    kopf.configure(verbose=verbose, log_format=text_format, log_prefix=True)
    for handler in logging.getLogger().handlers:  # Kopf's, which every logger's records reach
        handler.addFilter(HiddenCredentials())
        handler.addFilter(TemporaryAsWarning())
        if not verbose:
            handler.addFilter(ApiRetryDigest())
    # Kopf mutes asyncio outside debug; its "Task exception was never retrieved" is worth a line.
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.propagate, asyncio_log.handlers[:] = True, []
    if not verbose:
        logging.getLogger("kopf.objects").addFilter(QuietChildEvents())
        # Kopf's /healthz (the operator alone, without --leader-elect) is aiohttp's, whose access log
        # wrote a line per probe: 8,640 a day at a 10 s liveness probe.
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
