"""Thin typed wrapper over the official kubernetes client.

Writes are create + JSON merge patch only (no apply, no PUT, no strategic
merge), so they mean the same thing on every API server version.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
import yaml
from kubernetes.client import ApiException

from tritonscale.api.manifests import invalid_yaml
from tritonscale.api.merge_patch import status_json_patch
from tritonscale.api.spec import GROUP, PLURAL, VERSION

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# The operator's writes name it in the objects' managedFields (the client's default is its user
# agent, "OpenAPI-Generator"): the autoscaler tells its own spec.replicas writes from another
# scaler's by it, and `kubectl get -o yaml --show-managed-fields` says who wrote what.
FIELD_MANAGER = "tritonscale"
# Field managers that are this operator: its own, and the kubernetes client's default (its user agent),
# under which versions before FIELD_MANAGER wrote -- spec.replicas stays theirs until the next scale.
OWN_MANAGERS = frozenset({FIELD_MANAGER, "OpenAPI-Generator"})

# Checked before every write; raises to refuse it. `tritonscale run --leader-elect` sets it
# to the elector's check, so a replica past its renew deadline writes nothing through here.
def _no_guard() -> None:
    """Alone (no --leader-elect): every write may go."""


_write_guard: Callable[[], None] = _no_guard
_writes = threading.Condition()
_in_flight = 0


def set_write_guard(guard: Callable[[], None]) -> None:
    """From the moment this returns, every write checks ``guard`` first."""
    global _write_guard
    with _writes:
        _write_guard = guard


def wait_for_writes(timeout_s: float) -> bool:
    """Wait until no write is in flight (True), or ``timeout_s`` passed (False)."""
    with _writes:
        return _writes.wait_for(lambda: _in_flight == 0, timeout_s)


# Set in a thread inside ``writes_together``: its writes were admitted together, at its start.
_together = threading.local()


@contextmanager
def _writing() -> Iterator[None]:
    if getattr(_together, "admitted", False):
        yield  # admitted and counted with the writes it goes with
        return
    global _in_flight
    with _writes:  # the check and the count under one lock: set_write_guard cannot slip between
        _write_guard()
        _in_flight += 1
    try:
        yield
    finally:
        with _writes:
            _in_flight -= 1
            _writes.notify_all()


@contextmanager
def writes_together() -> Iterator[None]:
    """The writes made in this thread within the block go as one: the guard is checked once, at the
    start (refused: nothing is written), and a stop (``wait_for_writes``) waits for the whole block.
    A tick's status and its replica count are such a pair: checked write by write, a SIGTERM between
    them left status saying the fleet had been scaled (desiredReplicas, lastScaleTime, "-> N
    replicas") when the count was never written. The renew deadline's watchdog still ends the process
    mid-block, as it ends a single write; the memory goes to status first for that case."""
    if getattr(_together, "admitted", False):
        yield
        return
    with _writing():
        _together.admitted = True
        try:
            yield
        finally:
            _together.admitted = False


# What a failed request to the API server raises: the server's refusal, or the connection's failure.
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError)

# Threads that may talk to the API server at once, each over its own connection: Kopf's workers (the
# reconciler's handlers) and the autoscaler's (ticks and resyncs, operator_main.tick_threads). Each tick
# waits on the API server: 20 objects whose status writes an admission webhook held for 9.5 s took every
# thread of the loop's default pool (6 on two cores), and 100 others ticked every 31 s instead of 10 (an
# exploration at scale, session 55). Waiting threads cost little.
KOPF_WORKERS = 16
TICK_THREADS = 64
# A connection per thread. At 32 for 80 threads, every pass after a restart (when every object ticks in
# the same second) logged "Connection pool is full, discarding connection" about 32 times and
# reconnected, for good (session 86's audit at 200-300 InferenceServices).
API_CONNECTIONS = KOPF_WORKERS + TICK_THREADS


def load_kubeconfig(path: str | None = None, configuration: Any = None) -> None:
    """``kubernetes.config.load_kube_config`` (KUBECONFIG or ~/.kube/config where ``path`` is None),
    raising only ConfigException, with a one-line reason: the client lets its YAML parser's error out,
    and a TypeError where the YAML is not a kubeconfig's shape."""
    try:
        kubernetes.config.load_kube_config(path, client_configuration=configuration)
    except yaml.YAMLError as exc:
        raise kubernetes.config.ConfigException(invalid_yaml(exc)) from exc
    except UnicodeDecodeError as exc:
        raise kubernetes.config.ConfigException(f"not text (UTF-8): {exc.reason} at byte {exc.start}") from exc
    except (TypeError, AttributeError, KeyError, IndexError) as exc:  # a list, a string, `contexts: 5`
        raise kubernetes.config.ConfigException(
            "not a kubeconfig: a mapping with clusters, contexts and users lists was expected") from exc


def load_credentials() -> None:
    """In-cluster service account if present, else KUBECONFIG / ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ):
        kubernetes.config.load_incluster_config()
    else:
        load_kubeconfig()
    # One connection per thread that may talk to the API at once: the reconciler's and the
    # autoscaler's worker threads (Kopf's max_workers, asyncio.to_thread's pool). With the
    # client's default of 4, urllib3 warned "Connection pool is full, discarding connection" at
    # every start with a dozen InferenceServices, and reconnected for the requests beyond 4.
    cfg = kubernetes.client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, API_CONNECTIONS)
    # No urllib3 retries (its default is three): a request to an API server that is gone took four
    # times its timeout -- past the leader's renew deadline -- and logged a "Retrying" warning for
    # each. Every caller tries again on its own schedule: the next tick, Kopf's retry, the next renewal.
    # (It also drops urllib3's one retry of a request on a keep-alive connection the API server closed
    # as it was reused -- it closes idle ones after 90 s: such a request fails, and is tried again as
    # any failed one is.)
    cfg.retries = 0
    if not cfg.verify_ssl:  # the kubeconfig's insecure-skip-tls-verify: said once, not urllib3's warning per request
        logging.getLogger("tritonscale").warning(
            "the API server's TLS certificate is not checked (insecure-skip-tls-verify in the kubeconfig)")
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    kubernetes.client.Configuration.set_default(cfg)


def client_for(kubeconfig: Path | str) -> kubernetes.client.ApiClient:
    """A client for the cluster and identity of one kubeconfig file, leaving the process-wide
    default configuration alone (the sandbox, the tests and the benchmarks hold several)."""
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


@dataclass(frozen=True)
class _Kind:
    read: Callable[..., Any]
    create: Callable[..., Any]  # the client's *_with_http_info calls: (object, status, headers)
    patch: Callable[..., Any]


# An API server's warning (RFC 7234's Warning header, as Kubernetes sends it: 299 - "text"), e.g. of an
# env var a later one of the same name hides. urllib3 joins several headers of one name with ", ".
_WARNING = re.compile(r'299 [^ ]+ "((?:[^"\\]|\\.)*)"')


def warnings_of(headers: Any) -> list[str]:
    """The texts of the API server's warnings in a response's ``headers``, as kubectl prints them."""
    raw = (headers or {}).get("Warning") or ""
    return [re.sub(r"\\(.)", r"\1", text) for text in _WARNING.findall(str(raw))]


# Every request the reconciler and the autoscaler make gives up after this (connect, read), in s: a
# request that never answers (a half-open connection after an API server's failover) would hold the
# object's lock -- and with it every later reconcile and tick of the object, the warm floor's
# included -- until TCP gives up, minutes later. Kopf's own requests use the same 30 s
# (operator_main: settings.networking.request_timeout).
REQUEST_TIMEOUT_S = (5.0, 30.0)


class WithTimeout:
    """An API object whose every call carries ``_request_timeout``."""

    def __init__(self, api: Any, timeout: float | tuple[float, float]) -> None:
        self._api, self._timeout = api, timeout

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(self._api, name), _request_timeout=self._timeout)


def api_status(exc: ApiException) -> dict[str, Any]:
    """The ``Status`` object an API server sends with a refusal, or {} when the body is none (a
    proxy's HTML page, an empty body, JSON that is no object)."""
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def namespace_terminating(exc: ApiException) -> bool:
    """The API server refused a create because the namespace is being deleted (403, a cause of reason
    NamespaceTerminating)."""
    details = api_status(exc).get("details")
    causes = (details if isinstance(details, dict) else {}).get("causes") or []
    return exc.status == 403 and any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating"
                                     for c in causes)


_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>:? ?")


def describe_api_error(exc: BaseException) -> str:
    """One line for a failed request: ``403 Forbidden: <the API server's message>`` for an
    ApiException (not its four lines of headers and body), else the exception's first line."""
    if isinstance(exc, ApiException):
        # an admission webhook's denial may be several lines (a policy engine's report): one line here
        message = " ".join(str(api_status(exc).get("message") or "").split())
        return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, BaseException):
        exc = exc.reason  # what failed, not the pool's "Max retries exceeded with url: ..." around it
    # urllib3 puts the connection's repr in ("<HTTPSConnection(host=..) at 0x7f...>", different at every
    # failure) -- as its first argument, its message the last: without it, the same failure reads the
    # same (and is said once)
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    last = args[-1] if len(args) > 1 else None
    raw = last if isinstance(exc, urllib3.exceptions.HTTPError) and isinstance(last, str) else str(exc)
    text = _OBJECT_REPR.sub("", raw.splitlines()[0] if raw else "")
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class Kube:
    """Namespaced get/create/patch for the kinds tritonscale owns, as plain dicts."""

    def __init__(self, api_client: kubernetes.client.ApiClient | None = None) -> None:
        self.client = api_client or kubernetes.client.ApiClient()
        core: Any = WithTimeout(kubernetes.client.CoreV1Api(self.client), REQUEST_TIMEOUT_S)
        apps: Any = WithTimeout(kubernetes.client.AppsV1Api(self.client), REQUEST_TIMEOUT_S)
        policy: Any = WithTimeout(kubernetes.client.PolicyV1Api(self.client), REQUEST_TIMEOUT_S)
        self.custom: Any = WithTimeout(kubernetes.client.CustomObjectsApi(self.client), REQUEST_TIMEOUT_S)
        self.core, self.apps = core, apps
        self._kinds = {
            "ConfigMap": _Kind(core.read_namespaced_config_map, core.create_namespaced_config_map_with_http_info,
                               core.patch_namespaced_config_map_with_http_info),
            "Service": _Kind(core.read_namespaced_service, core.create_namespaced_service_with_http_info,
                             core.patch_namespaced_service_with_http_info),
            "Deployment": _Kind(apps.read_namespaced_deployment, apps.create_namespaced_deployment_with_http_info,
                                apps.patch_namespaced_deployment_with_http_info),
            "PodDisruptionBudget": _Kind(policy.read_namespaced_pod_disruption_budget,
                                         policy.create_namespaced_pod_disruption_budget_with_http_info,
                                         policy.patch_namespaced_pod_disruption_budget_with_http_info),
        }

    def _dict(self, obj: Any) -> dict[str, Any]:
        return self.client.sanitize_for_serialization(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._dict(self._kinds[kind].read(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Create ``obj``; with ``dry_run`` the API server validates and admits it (every admission
        step, defaults filled in) and stores nothing."""
        return self.create_warned(obj, dry_run)[0]

    def create_warned(self, obj: dict[str, Any], dry_run: bool = False) -> tuple[dict[str, Any], list[str]]:
        """``create``, and the API server's warnings (``warnings_of``)."""
        extra = {"dry_run": "All"} if dry_run else {}
        with _writing():
            data, _, headers = self._kinds[obj["kind"]].create(obj["metadata"]["namespace"], obj,
                                                                field_manager=FIELD_MANAGER, **extra)
        return self._dict(data), warnings_of(headers)

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
              dry_run: bool = False) -> dict[str, Any]:
        return self.patch_warned(kind, namespace, name, patch, dry_run)[0]

    def patch_warned(self, kind: str, namespace: str, name: str, patch: dict[str, Any],
                     dry_run: bool = False) -> tuple[dict[str, Any], list[str]]:
        """``patch`` (a merge patch), and the API server's warnings (``warnings_of``)."""
        extra = {"dry_run": "All"} if dry_run else {}
        with _writing():
            data, _, headers = self._kinds[kind].patch(name, namespace, patch, _content_type=MERGE,
                                                       field_manager=FIELD_MANAGER, **extra)
        return self._dict(data), warnings_of(headers)

    def get_inference_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def node_unschedulable(self, name: str) -> bool | None:
        """Whether the node is cordoned (``spec.unschedulable``, set by ``kubectl cordon`` and
        ``drain``); None if it is gone."""
        try:
            node = self.core.read_node(name, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return bool((json.loads(node.data).get("spec") or {}).get("unschedulable"))

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """Pods matching ``label_selector``, as the API's JSON (not deserialised into
        client models: a tick lists them for every InferenceService).

        resourceVersion=0 lets the API server answer from its watch cache as it is. A
        consistent list (the default) waits until the cache has caught up with etcd's
        latest revision; after writes to other resources that took ~90 ms per list on
        the local control plane (e2e/bench_autoscaler_tick.py, 1,000 objects: 100.5 ms
        per tick, 9.35 ms with this). A census a moment old is fine: the next tick
        sees the rest."""
        resp = self.core.list_namespaced_pod(namespace, label_selector=label_selector, resource_version="0",
                                             _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def list_config_maps(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """ConfigMaps matching ``label_selector``, as the API's JSON, from the watch cache."""
        resp = self.core.list_namespaced_config_map(namespace, label_selector=label_selector, resource_version="0",
                                                    _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def list_replica_sets(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """ReplicaSets matching ``label_selector``, as the API's JSON, from the watch cache: the
        reconciler keeps the ConfigMaps any of them mounts, and a ReplicaSet too new for the cache
        mounts the ConfigMap of the Deployment's template as written or as it was before the pass,
        which it keeps anyway."""
        resp = self.apps.list_namespaced_replica_set(namespace, label_selector=label_selector, resource_version="0",
                                                     _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def list_deployments(self, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        """Deployments matching ``label_selector`` in ``namespace`` (None: every namespace), as the API's
        JSON. A consistent list, not the watch cache's: the upgrade gate (``reconcile.upgrade_rollouts``)
        replaces what it knows with it, at its first question and every few minutes after (its admissions
        cover the writes a list may predate)."""
        if namespace is None:
            resp = self.apps.list_deployment_for_all_namespaces(label_selector=label_selector, _preload_content=False)
        else:
            resp = self.apps.list_namespaced_deployment(namespace, label_selector=label_selector,
                                                        _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def delete_config_map(self, namespace: str, name: str, uid: str) -> None:
        """Delete the ConfigMap, only if it still is the one of ``uid`` (a precondition); gone already is fine."""
        with _writing():
            try:
                self.core.delete_namespaced_config_map(name, namespace, body={"preconditions": {"uid": uid}})
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def patch_inference_service_status(self, namespace: str, name: str, status: dict[str, Any], uid: str,
                                       current: Mapping[str, Any] | None) -> None:
        """Merge ``status`` into the object's status (``current``: the status the patch was worked out
        against), only while the object of that name is the one of ``uid``
        (``merge_patch.status_json_patch``); once it is another (deleted and created again meanwhile)
        or gone, an ApiException 404, as for a write to an object that is gone."""
        with _writing():
            try:
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, name, status_json_patch(uid, current, status),
                    _content_type=JSON_PATCH, field_manager=FIELD_MANAGER,
                )
            except ApiException as exc:
                if exc.status != 422:
                    raise
                now = self.get_inference_service(namespace, name)
                if now is not None and now["metadata"].get("uid") == uid:
                    raise  # refused for another reason (a field removed meanwhile)
                raise ApiException(status=404, reason=f"InferenceService {namespace}/{name} of uid {uid} is gone"
                                   + (" (another of its name was created)" if now is not None else "")) from None
