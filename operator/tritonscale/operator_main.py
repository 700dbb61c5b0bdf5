"""Start the Kopf operator with tritonscale's settings (the `tritonscale run` command).

Beside it: the objects ``configure`` plugs into Kopf's settings (``kopf_settings``) and the operator's
log, its filters included (``operator_logging``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from kubernetes.config import ConfigException

from tritonscale import http_listener
from tritonscale.kopf_settings import EditsCutRetryDelays, NamespaceWatchRetries, TolerantDiffBaseStorage
from tritonscale.kube.client import KOPF_WORKERS, TICK_THREADS
from tritonscale.leader_election import ElectionSettings
from tritonscale.operator_logging import configure_logging
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
