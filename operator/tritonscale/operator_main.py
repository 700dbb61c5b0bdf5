"""Start the Kopf operator with tritonscale's settings (the `tritonscale run` command)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from kubernetes.config import ConfigException

from tritonscale import http_listener
from tritonscale.kube.client import KOPF_WORKERS, TICK_THREADS
from tritonscale.leader_election import ElectionSettings
from tritonscale.process_exit import flush_and_exit
from tritonscale.reconcile.upgrade_rollouts import DEFAULT_MAX_ROLLOUTS


@dataclass
class OperatorOptions:
    namespaces: list[str] = field(default_factory=list)  # empty: cluster-wide
    prometheus_url: str | None = None
    # Non-empty: the only Prometheus URLs (and paths under them) a spec.scaling.prometheus.url may name
    allowed_prometheus_urls: tuple[str, ...] = ()
    # How an https Prometheus's certificate is checked: True against the system's CAs, a path
    # against that PEM bundle, False not at all (PrometheusSource's ``verify``).
    prometheus_tls_verify: bool | str = True
    metrics_port: int = 8080  # the operator's own /metrics; 0 disables
    liveness_port: int = 8081  # /healthz; 0 disables
    verbose: bool = False
    selector_labels: dict[str, str] = field(default_factory=dict)
    leader_election: ElectionSettings | None = None  # None: act at once, alone (standalone)
    # Fleets an operator upgrade's new pod template rolls at once (reconcile.upgrade_rollouts); 0: all
    max_upgrade_rollouts: int = DEFAULT_MAX_ROLLOUTS


class QuietChildEvents(logging.Filter):
    """Drops Kopf's INFO line for each child event handled (``Handler 'child_changed' succeeded.``):
    one per change of every child of every InferenceService -- a Deployment's status moves at each
    pod's start and readiness -- so at scale most of the operator's log, for nothing done. What the
    handler does (a correction, a failure) it logs itself. Likewise for each event of an InferenceService
    (``note_deletion``, which notes deletions for the autoscaler's loop). ``tritonscale run --verbose``
    keeps them."""

    SUCCEEDED = ("Handler 'child_changed' succeeded.", "Handler 'note_deletion' succeeded.")
    # Kopf stops the autoscaler's daemons by cancelling them (the daemon's loop is written for it:
    # handlers.autoscale), and says so at WARNING for each InferenceService at every stop of the
    # operator -- a thousand warnings per rollout for the designed way out.
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


# Kopf's diff-base is a copy of the object's spec, labels and annotations in one annotation, and an
# object's annotations may take 256 KiB in all -- kubectl apply's own copy of the object among them.
# Past this size the diff-base holds digests of its largest parts instead (``elide_essence``), so a
# spec of about 128 KiB applied with kubectl no longer made every write of Kopf's fail (422, "Too
# long") with two tracebacks at each event of the object.
DIFFBASE_MAX_BYTES = 16 * 1024
DIFFBASE_PART_BYTES = 1024  # parts larger than this are what a too large diff-base digests


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _digest(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()} ({len(text)} bytes, elided)"


def _elide(node: Any, part_bytes: int) -> Any:
    text = _json(node)
    if len(text) <= part_bytes:
        return node
    if isinstance(node, dict):
        node = {k: _elide(v, part_bytes) for k, v in node.items()}
    elif isinstance(node, list):
        node = [_elide(v, part_bytes) for v in node]
    else:
        return _digest(text)
    return node if len(_json(node)) <= part_bytes else _digest(text)


def elide_essence(essence: dict[str, Any], max_bytes: int = DIFFBASE_MAX_BYTES,
                  part_bytes: int = DIFFBASE_PART_BYTES) -> dict[str, Any]:
    """``essence`` as it is when its JSON fits ``max_bytes``; else, below spec and metadata, every
    part larger than ``part_bytes`` (a large parameter, a long env list, a whole block of them)
    replaced by the digest of its JSON. Deterministic, so the essence stored and the one Kopf builds
    at the next event compare part by part: a change of an elided part still shows as a change (and
    reconciles, which reads the whole object, not the diff). ``status`` is never elided: it holds only
    the fields Kopf's field handlers follow (``status.batching.*``), whose diffs need their values.
    The top-level stanzas stay dicts."""
    if len(_json(essence)) <= max_bytes:
        return essence
    return {key: value if key == "status" or not isinstance(value, dict)
            else {k: _elide(v, part_bytes) for k, v in value.items()} for key, value in essence.items()}


class TolerantDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's annotation diff-base, read as none where it is not JSON: hand-edited or truncated, it
    made Kopf fail every event of the object with a traceback (JSONDecodeError), and spec changes
    reached the children only through the periodic resync. Without a diff-base the next event is
    handled as a resume: reconciled from the spec as it is, and the annotation written afresh.
    Built small enough for an annotation (``elide_essence``).

    Read as none, too, on an object with no status: the API server drops status when an object is
    created (status is a subresource), and this operator writes one at its first reconcile, so such
    an object was never handled here. It is one restored from its own YAML (``kubectl get -o yaml``
    then ``apply``, ``replace --force``, a GitOps move), which carries the old object's diff-base:
    equal to its spec, it read as "nothing changed", and the object got no children, no status and
    no autoscaler, with nothing logged, until its spec was edited or the operator restarted."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        return elide_essence(dict(essence))

    def fetch(self, *, body: Any) -> Any:
        if not body.get("status"):
            return None
        try:
            return super().fetch(body=body)
        except ValueError:  # json.JSONDecodeError
            return None


class EditsCutRetryDelays(kopf.AnnotationsProgressStorage):
    """Kopf's annotation progress storage, except that a spec edit ends a handler's retry delay. A handler
    that raised ``kopf.TemporaryError`` (an API refusal: RBAC, a ResourceQuota, a webhook; ChildWriteFailed in
    status) is retried after its delay, doubled at each retry up to 5 minutes, and Kopf ran no handler for
    an edit made meanwhile: an edit that fixed the cause (resources lowered under the quota), or followed a
    fix of it, waited for the retry (32 s in an exploratory audit; up to 5 minutes). Here a record stored
    with a delay at one generation is read without it once the object has another: the edit is handled
    at once, and a failure again is delayed from then on. In this process's memory only: after a restart
    the delay stands, as before."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delayed_at: dict[tuple[str, str], Any] = {}  # (uid, handler) -> generation a delay was set at

    @staticmethod
    def _ids(key: Any, body: Any) -> tuple[tuple[str, str], Any]:
        meta = body.get("metadata") or {}
        return (str(meta.get("uid")), str(key)), meta.get("generation")

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        ids, generation = self._ids(key, body)
        if record.get("delayed"):
            self._delayed_at[ids] = generation
        else:
            self._delayed_at.pop(ids, None)
        super().store(key=key, record=record, body=body, patch=patch)

    def fetch(self, *, key: Any, body: Any) -> Any:
        record = super().fetch(key=key, body=body)
        ids, generation = self._ids(key, body)
        if record and record.get("delayed") and ids in self._delayed_at and self._delayed_at[ids] != generation:
            record = {**record, "delayed": None}
        return record

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        self._delayed_at.pop(self._ids(key, body)[0], None)
        super().purge(key=key, body=body, patch=patch)


class NamespaceWatchRetries:
    """Kopf's backoffs for its own API requests: its default ones (1, 1, 2, 3, 5, 8, 13, 21 s), and,
    for its watches in one namespace of several (``--namespace``: the InferenceServices' and their
    children's), then every ``RETRY_EVERY_S`` for as long as it takes.

    Kopf fails as a whole when one watch's backoffs run out: a namespace the operator may not read (a
    tenant deleted and recreated it, and the chart's Role in it went too) stopped it for every
    namespace, and Kopf 1.45 could then hang in its own cancellation with the Lease still renewed. Now
    that namespace's watch fails at each retry (said as ApiRetryDigest says Kopf's retries: a WARNING at most
    every 60 s), and the others are served. Every
    other request keeps Kopf's bounded backoffs: its fallbacks for a namespace list or a CRD watch it may
    not make (it falls back to the --namespace list) need them to run out, and a cluster-wide watch
    that may not list InferenceServices serves nothing -- it still fails, and the process exits 1.

    Kopf reads these backoffs at each request, in the task that makes it: a watch's is named
    ``watcher for RESOURCE@NAMESPACE`` (``@None`` cluster-wide, e.g.
    ``watcher for inferenceservices.v1alpha1.tritonscale.io@team-a``). Not Sized: Kopf then retries
    without end."""

    RETRY_EVERY_S = 30.0
    FIRST = (1, 1, 2, 3, 5, 8, 13, 21)
    WATCHER = "watcher for "

    def __iter__(self) -> Iterator[float]:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop
            task = None
        name = task.get_name() if task is not None else ""
        if name.startswith(self.WATCHER) and "@" in name and not name.endswith("@None"):
            return itertools.chain(self.FIRST, itertools.repeat(self.RETRY_EVERY_S))
        return iter(self.FIRST)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep Kopf's bookkeeping in our own annotation namespace and out of status.
    settings.persistence.progress_storage = EditsCutRetryDelays(prefix="tritonscale.io")
    settings.persistence.diffbase_storage = TolerantDiffBaseStorage(
        prefix="tritonscale.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "tritonscale.io/finalizer"
    settings.posting.level = logging.INFO
    # Events say they come from tritonscale (the "From" column of `kubectl describe`), and which
    # replica posted them; Kopf's own defaults are "kopf" and "dev".
    settings.posting.reporting_component = "tritonscale"
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    settings.posting.event_name_prefix = "tritonscale-event-"
    # No Kopf peering: one replica acts at a time, either alone or as the holder of the
    # leader Lease (tritonscale.leader_election; Kopf starts only once it is held).
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    settings.networking.error_backoffs = NamespaceWatchRetries()
    settings.execution.max_workers = KOPF_WORKERS


# Threads for the autoscaler's ticks and resyncs (asyncio.to_thread: the loop's default executor, which
# holds min(32, CPUs + 4) threads): kube.client.TICK_THREADS, for which it keeps connections.


@kopf.on.startup()
async def tick_threads(**_: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(TICK_THREADS, thread_name_prefix="tritonscale-tick"))


@kopf.on.startup()
def check_crd(**_: Any) -> None:
    """Once the operator acts (the leader, or alone; a standby reads nothing but its Lease): is the CRD in
    the cluster this version's? (``warn_crd_drift``)"""
    warn_crd_drift(_live_crd)


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


def run(options: OperatorOptions) -> int:
    """Run the operator until SIGTERM/SIGINT, then end the process (``flush_and_exit``).
    Returns only if it cannot start (no credentials)."""
    configure_logging(options.verbose)
    from tritonscale import handlers  # noqa: F401  (registers the handlers)
    from tritonscale.kube.client import load_credentials

    try:
        load_credentials()
    except ConfigException as exc:  # no in-cluster account and no usable kubeconfig
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        print(f"tritonscale run: no Kubernetes credentials (not in a Pod; kubeconfig {where}): {exc}",
              file=sys.stderr)
        return 1
    handlers.configure(options)
    from tritonscale.scaling import tick

    election = options.leader_election
    if election is not None:  # every replica of a release shares the Lease: a failover is the same operator
        tick.OPERATOR_ID = f"lease {election.lease_namespace}/{election.lease_name}"
    if options.namespaces:
        warn_missing_namespaces(options.namespaces, _namespace_names)
    if options.leader_election is not None:
        flush_and_exit(_run_elected(options, options.leader_election))
    from tritonscale.leader_election import LEADER

    LEADER.set(1)  # alone: always the one that acts
    liveness = f"http://0.0.0.0:{options.liveness_port}/healthz" if options.liveness_port else None
    try:
        kopf.run(
            clusterwide=not options.namespaces,
            namespaces=options.namespaces,
            standalone=True,
            liveness_endpoint=liveness,
        )
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 -- Kopf failed as a whole: one line and a non-zero exit
        _stopped_by(exc)
        flush_and_exit(1)
    flush_and_exit(0)  # Kopf has stopped; see tritonscale.process_exit


def _stopped_by(exc: BaseException) -> None:
    logging.getLogger("tritonscale").error(f"the operator stopped: Kopf failed: {type(exc).__name__}: "
                                           f"{' '.join(str(exc).split())[:1000]}")


def warn_missing_namespaces(namespaces: list[str], names: Callable[[], set[str]]) -> list[str]:
    """Warn, once at start, of each watched namespace (``--namespace``) that does not exist: a typo
    there otherwise starts an operator that serves nothing, without a word. ``names`` lists the
    cluster's namespaces; if it may not (RBAC), nothing is said. Returns the missing ones."""
    log = logging.getLogger("tritonscale")
    try:
        existing = names()
    except Exception as exc:  # noqa: BLE001 -- a check only: a manual run may lack the right
        log.debug(f"cannot list namespaces to check --namespace: {type(exc).__name__}: {exc}")
        return []
    missing = [n for n in namespaces if n not in existing]
    for n in missing:
        log.warning(f"--namespace {n}: no such namespace (yet); nothing there to serve until it is created")
    return missing


def warn_crd_drift(read: Callable[[], dict[str, Any] | None]) -> str | None:
    """Warn, once at start, when the InferenceService CRD in the cluster is not this version's (``read``:
    the live CRD, None if there is none): a `helm upgrade` leaves the CRD as it was, and the API server then
    drops the fields the older schema lacks, with nothing in the operator's log. If it may not list CRDs
    (RBAC), nothing is said. Returns the problem said."""
    from tritonscale.api.crd import crd_drift

    log = logging.getLogger("tritonscale")
    try:
        live = read()
    except Exception as exc:  # noqa: BLE001 -- a check only
        log.debug(f"cannot read the InferenceService CRD to check it: {type(exc).__name__}: {exc}")
        return None
    problem = crd_drift(live)
    if problem:
        log.warning(problem)
    return problem


def _live_crd() -> dict[str, Any] | None:
    import kubernetes

    from tritonscale import handlers
    from tritonscale.api.crd import CRD_NAME
    from tritonscale.kube.client import REQUEST_TIMEOUT_S, WithTimeout

    api = WithTimeout(kubernetes.client.ApiextensionsV1Api(handlers._kube().client), REQUEST_TIMEOUT_S)
    answer = api.list_custom_resource_definition(field_selector=f"metadata.name={CRD_NAME}", _preload_content=False)
    items = json.loads(answer.data).get("items") or []
    return items[0] if items else None


def _namespace_names() -> set[str]:
    from tritonscale import handlers

    return {ns.metadata.name for ns in handlers._kube().core.list_namespace().items}  # with its request timeout


def _run_elected(options: OperatorOptions, settings: ElectionSettings) -> int:
    """Stand by until this replica holds the Lease, then run Kopf until SIGTERM/SIGINT;
    then stop writing and hand the Lease back. Losing the Lease ends the process
    (tritonscale.leader_election)."""
    from tritonscale.kube import client as kube_client
    from tritonscale.leader_election import Elector

    if not options.verbose:  # the client's election logs every retry at INFO
        logging.getLogger("leaderelection").setLevel(logging.WARNING)
    loop = asyncio.new_event_loop()
    stop = threading.Event()
    kopf_stop = loop.create_future()  # an asyncio flag: Kopf waits for it without a thread

    def release_kopf() -> None:
        if not kopf_stop.done():
            kopf_stop.set_result(None)

    def on_signal(*_: Any) -> None:
        stop.set()
        loop.call_soon_threadsafe(release_kopf)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)

    @kopf.on.cleanup()
    async def _stopping(**_: Any) -> None:
        # Kopf's own SIGTERM/SIGINT handler (it replaces ours once Kopf runs) stops it without
        # setting our flag, and Kopf's task waiting on the flag then counted as hung: Kopf gave it
        # 5 s before cancelling it, and the Lease went back 5 s late at every rolling update.
        # Set it now, while Kopf stops its root tasks. And a second signal found Kopf's handler
        # setting its one-shot flag again: a traceback (InvalidStateError) in the log.
        release_kopf()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stopping_already, sig)

    elector = Elector(settings)
    kube_client.set_write_guard(elector.check_may_act)
    if options.liveness_port:
        _serve_health(options.liveness_port, lambda: _health(elector, loop))
    elector.start()
    while not elector.acquired.wait(0.2):
        if stop.is_set():
            logging.getLogger("tritonscale").info("stopped as a standby")
            return 0
    rc = 0
    try:
        # Kopf installs its own SIGTERM/SIGINT handlers; `stop` covers a signal that came
        # before it did.
        kopf.run(loop=loop, clusterwide=not options.namespaces, namespaces=options.namespaces,
                 standalone=True, stop_flag=kopf_stop)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 -- Kopf failed as a whole: hand the Lease back, exit 1
        _stopped_by(exc)
        rc = 1
    # Kopf has stopped; worker threads may still be in a write. Refuse new ones, wait for
    # those (half the renew deadline: we are still within our lease), and only then hand
    # the Lease back.
    kube_client.set_write_guard(_refuse_writes)
    if kube_client.wait_for_writes(timeout_s=settings.renew_deadline_s / 2):
        elector.release()
    else:
        elector.stopping = True  # a write is stuck: let the Lease expire rather than hand it over
        logging.getLogger("tritonscale").warning("a write did not finish; not releasing the Lease (it expires)")
    return rc


def _stopping_already(sig: signal.Signals) -> None:
    logging.getLogger("tritonscale").info(f"{sig.name} received: already stopping")


def _refuse_writes() -> None:
    from tritonscale.leader_election import NotLeader

    raise NotLeader("the operator is stopping: no writes")


def _health(elector: Any, loop: asyncio.AbstractEventLoop) -> tuple[int, dict[str, Any]]:
    """200 while the election runs and, on the leader, Kopf's event loop answers within 5 s."""
    body = {"role": elector.role(), "identity": elector.settings.identity, "holder": elector.holder}
    if not elector.alive():
        return 503, {**body, "error": "the leader election thread has stopped"}
    if elector.acquired.is_set() and loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=5)
        except Exception as exc:  # noqa: BLE001
            return 503, {**body, "error": f"the operator's event loop does not answer: {type(exc).__name__}"}
    return 200, body


def _serve_health(port: int, check: Callable[[], tuple[int, dict[str, Any]]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != "/healthz":
                self.send_error(404)
                return
            code, body = check()
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return http_listener.serve(port, Handler, "healthz")
