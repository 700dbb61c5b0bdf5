"""A failed Kubernetes request is one line for the user (log, Kopf's event), never a traceback or
four lines of HTTP headers; the reconcile handler turns it into Kopf's retry. How a refusal of a child
is named by the spec field it came from is test_child_refusals.py's."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest
import urllib3
from kubernetes.client import ApiException
from urllib3.connection import HTTPSConnection

from tritonscale.handlers import reconciler
from tritonscale.kube.client import describe_api_error, namespace_terminating


def api_error(status: int, reason: str, message: str | None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "message": message}) if message is not None else "not json"
    return exc


@pytest.mark.parametrize(("exc", "line"), [
    (api_error(403, "Forbidden", 'deployments.apps "linear" is forbidden: exceeded quota: gpus'),
     '403 Forbidden: deployments.apps "linear" is forbidden: exceeded quota: gpus'),
    (api_error(500, "Internal Server Error", None), "500 Internal Server Error"),
    # an admission webhook's report over several lines (a policy engine's), kept on one
    (api_error(400, "Bad Request", 'admission webhook "validate.kyverno.svc" denied the request: \n\n'
                                   "resource Deployment/default/linear was blocked:\n\nrequire-labels:\n  check-team: "
                                   "label team is required"),
     '400 Bad Request: admission webhook "validate.kyverno.svc" denied the request: resource '
     "Deployment/default/linear was blocked: require-labels: check-team: label team is required"),
    (urllib3.exceptions.ReadTimeoutError(None, "/apis", "Read timed out. (read timeout=30)"),
     "ReadTimeoutError: None: Read timed out. (read timeout=30)"),
    # the pool's wrapper is unwrapped and the connection's repr (another at every failure) left out
    (urllib3.exceptions.MaxRetryError(None, "/apis", urllib3.exceptions.NewConnectionError(
        HTTPSConnection("127.0.0.1", 1), "Failed to establish a new connection: [Errno 111] Connection refused")),
     "NewConnectionError: HTTPSConnection(host='127.0.0.1', port=1): Failed to establish a new connection: "
     "[Errno 111] Connection refused"),
    (urllib3.exceptions.MaxRetryError(None, "/apis", urllib3.exceptions.ConnectTimeoutError(
        HTTPSConnection("10.255.255.1", 6443), "Connection to 10.255.255.1 timed out. (connect timeout=5)")),
     "ConnectTimeoutError: Connection to 10.255.255.1 timed out. (connect timeout=5)"),
])
def test_a_failed_request_is_one_line(exc: BaseException, line: str) -> None:
    assert describe_api_error(exc) == line


def test_the_reconcile_handler_retries_api_failures_without_a_traceback(monkeypatch) -> None:
    def refused(*_args, **_kwargs):
        raise api_error(403, "Forbidden", "exceeded quota: gpus")

    monkeypatch.setattr(reconciler, "reconcile", refused)
    monkeypatch.setattr(reconciler, "_kube", lambda: None)
    monkeypatch.setattr(reconciler, "_events_for", lambda body: None)
    with pytest.raises(kopf.TemporaryError) as err:
        reconciler.reconcile_inference_service(body={"metadata": {"name": "x", "namespace": "y"}})
    assert str(err.value) == "the Kubernetes API refused or failed a request: 403 Forbidden: exceeded quota: gpus"
    assert err.value.__cause__ is None
    assert err.value.delay == reconciler.API_RETRY_S  # soon: Kopf's default is a flat 60 s
    with pytest.raises(kopf.TemporaryError) as err:
        reconciler.reconcile_inference_service(body={"metadata": {"name": "x", "namespace": "y"}}, retry=2)
    assert err.value.delay == 4 * reconciler.API_RETRY_S


class _Kube:
    """A Kube whose reads fail ``failures`` times, then return the InferenceService."""

    def __init__(self, failures: int) -> None:
        self.failures, self.reads = failures, 0

    def get_inference_service(self, namespace: str, name: str) -> dict:
        self.reads += 1
        if self.reads <= self.failures:
            raise api_error(503, "Service Unavailable", "etcdserver: leader changed")
        return {"metadata": {"name": name, "namespace": namespace}}


def test_a_failed_child_correction_is_one_line(monkeypatch, caplog) -> None:
    """A child's event handler is never retried by Kopf: its failure (here the owner's read) is one
    warning line, not a traceback; the daemon's resync (test_autoscale_daemon.py) corrects it."""
    kube, reconciled = _Kube(failures=1), []
    monkeypatch.setattr(reconciler, "_kube", lambda: kube)
    monkeypatch.setattr(reconciler, "_events_for", lambda body: None)
    monkeypatch.setattr(reconciler, "reconcile", lambda _kube, owner, _events: reconciled.append(owner["metadata"]))
    with caplog.at_level("WARNING", logger="tritonscale"):
        reconciler.child_changed(body={"metadata": {"labels": {reconciler.LABEL: "linear"}}}, namespace="prod",
                                 type="MODIFIED")
    assert reconciled == []
    assert [r.getMessage() for r in caplog.records] == [
        "prod/linear: correcting a child failed: 503 Service Unavailable: etcdserver: leader changed"]
    reconciler.child_changed(body={"metadata": {"labels": {reconciler.LABEL: "linear"}}}, namespace="prod",
                             type="MODIFIED")
    assert reconciled == [{"name": "linear", "namespace": "prod"}]


# The API server's answer to a create in a namespace being deleted (kube-apiserver 1.34, as read back).
TERMINATING = json.dumps({
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'configmaps "new" is forbidden: unable to create new content in namespace term-x because it is '
               "being terminated",
    "reason": "Forbidden", "details": {"name": "new", "kind": "configmaps", "causes": [
        {"reason": "NamespaceTerminating", "message": "namespace term-x is being terminated",
         "field": "metadata.namespace"}]}, "code": 403})


def _terminating() -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = TERMINATING
    return exc


def _reconcile_raises(monkeypatch, error, calls: list[str] | None = None) -> None:
    """reconciler.reconcile replaced by one that raises ``error()`` (and notes the owner's name in ``calls``)."""
    def refused(_kube, owner, _events):
        if calls is not None:
            calls.append(owner["metadata"]["name"])
        raise error()
    monkeypatch.setattr(reconciler, "_kube", lambda: _Kube(failures=0))
    monkeypatch.setattr(reconciler, "_events_for", lambda body: None)
    monkeypatch.setattr(reconciler, "reconcile", refused)


def test_a_child_not_recreated_in_a_namespace_being_deleted_is_no_warning(monkeypatch, caplog) -> None:
    """Deleting a namespace deletes the children; the API server refuses to recreate them, and there
    is nothing to correct: not a warning (it was one per child)."""
    calls: list[str] = []
    _reconcile_raises(monkeypatch, _terminating, calls)
    with caplog.at_level("WARNING", logger="tritonscale"):
        reconciler.child_changed(body={"metadata": {"labels": {reconciler.LABEL: "linear"}}}, namespace="term-x",
                                 type="DELETED")
    assert calls == ["linear"] and caplog.records == []
    other = ApiException(status=403, reason="Forbidden")
    other.body = json.dumps({"kind": "Status", "message": "quota", "details": {"causes": [{"reason": "x"}]}})
    assert not namespace_terminating(other)


def test_the_operators_api_client_has_a_connection_per_worker_thread(tmp_path, monkeypatch, caplog) -> None:
    """With the client's default pool of 4, urllib3 warned "Connection pool is full, discarding
    connection" at every start with a dozen InferenceServices (Kopf's 16 workers, the ticks' threads)."""
    import kubernetes

    from tritonscale.kube import client as kc

    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                      "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # the client reads KUBECONFIG once, when it is imported
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    before = kubernetes.client.Configuration.get_default_copy()
    try:
        kc.load_credentials()
        assert kubernetes.client.Configuration.get_default_copy().connection_pool_maxsize == kc.API_CONNECTIONS
        kube = kc.Kube()
        assert kube.client.rest_client.pool_manager.connection_pool_kw["maxsize"] == kc.API_CONNECTIONS
        # ... and no urllib3 retries: an API server that is gone fails a request once (the kubeconfig's
        # port is closed), with no "Retrying" warning -- three of them per request before
        import logging

        with caplog.at_level(logging.WARNING, logger="urllib3"):
            with pytest.raises(urllib3.exceptions.HTTPError):
                kube.get("Deployment", "ns", "x")
        assert not [r for r in caplog.records if r.name.startswith("urllib3")], caplog.records
    finally:
        kubernetes.client.Configuration.set_default(before)


def test_the_operator_log_leaves_out_kopfs_routine_lines_only() -> None:
    """operator_logging.QuietChildEvents: Kopf's INFO line per child event and its WARNING per daemon
    cancelled at the operator's stop (the designed way out) are dropped; anything else is kept."""
    import logging

    from tritonscale.operator_logging import QuietChildEvents

    def kept(level: int, message: str) -> bool:
        return QuietChildEvents().filter(logging.LogRecord("kopf.objects", level, "", 0, message, None, None))

    assert not kept(logging.INFO, "Handler 'child_changed' succeeded.")
    assert not kept(logging.INFO, "Handler 'note_deletion' succeeded.")  # one per InferenceService event
    assert not kept(logging.WARNING, "Daemon 'autoscale' is cancelled. Will escalate.")
    assert kept(logging.INFO, "Handler 'reconcile_inference_service' succeeded.")
    assert kept(logging.ERROR, "Daemon 'autoscale' is cancelled. Will escalate.")
    assert kept(logging.WARNING, "Daemon 'autoscale' failed with an exception and will try again in 60 seconds")


def test_kopfs_retry_lines_are_said_once_a_minute_per_server_and_error() -> None:
    """operator_logging.ApiRetryDigest: while the API server is away Kopf logs each failed attempt of each
    watch at ERROR (its wording, kopf/_cogs/clients/api.py); one WARNING per API server and error
    class a minute is left, with a count of those not shown. Other records pass as they were."""
    import logging

    from tritonscale.operator_logging import ApiRetryDigest

    now = [0.0]
    digest = ApiRetryDigest(quiet_s=60.0, clock=lambda: now[0])

    def record(message: str, name: str = "kopf._cogs.clients.watching", level: int = logging.ERROR):
        return logging.LogRecord(name, level, "", 0, message, None, None)

    def retry(n: int, resource: str, error: str = "ClientConnectorError(ConnectionKey(host='127.0.0.1'))",
              server: str = "https://127.0.0.1:6443") -> logging.LogRecord:
        return record(f"Request attempt #{n}/9 failed; will retry: GET {server}/apis/apps/v1/{resource}"
                      f"?watch=true&resourceVersion=12 -> {error}")

    first = retry(1, "deployments")
    assert digest.filter(first) and first.levelno == logging.WARNING and first.levelname == "WARNING"
    assert first.getMessage().startswith("Kubernetes API request failed, retrying; the same failure is said "
                                         "again at most every 60 s: Request attempt #1/9 failed; will retry: GET")
    now[0] = 5.0
    assert not digest.filter(retry(2, "deployments"))
    assert not digest.filter(retry(1, "services"))  # another watch, the same server and error
    escalated = record("Request attempt #9/9 failed; escalating: GET https://127.0.0.1:6443/api/v1/pods"
                       "?watch=true -> ClientConnectorError(...)")
    assert not digest.filter(escalated)
    other_error = retry(3, "deployments", error="APIForbiddenError('forbidden')")
    assert digest.filter(other_error) and "#3/9" in other_error.getMessage()  # another kind: said at once
    assert digest.filter(retry(1, "deployments", server="https://10.0.0.1"))  # another server
    now[0] = 61.0
    again = retry(4, "deployments")
    assert digest.filter(again) and "(3 more like it since the last shown)" in again.getMessage()
    now[0] = 62.0
    assert not digest.filter(retry(5, "deployments"))
    # not Kopf's retry line, or not Kopf's: as it was
    for other in (record("Request attempt #2/9 failed; TCP closed; will re-authenticate: GET https://x/api"),
                  record("Handler 'reconcile_inference_service' failed temporarily: boom", name="kopf.objects"),
                  record(retry(6, "deployments").getMessage(), name="tritonscale.handlers"),
                  record(retry(7, "deployments").getMessage(), level=logging.DEBUG)):
        level, message = other.levelno, other.getMessage()
        assert digest.filter(other) and (other.levelno, other.getMessage()) == (level, message)


def test_the_object_handler_in_a_namespace_being_deleted_ends_without_a_retry(monkeypatch, caplog) -> None:
    """Kopf's create/update handler: a NamespaceTerminating refusal ends the handler (no TemporaryError,
    which Kopf logs as a warning at every retry until the namespace is gone); another 403 still retries."""
    _reconcile_raises(monkeypatch, _terminating)
    body = {"metadata": {"namespace": "term-x", "name": "linear"}}
    with caplog.at_level("WARNING", logger="tritonscale"):
        reconciler.reconcile_inference_service(body=body)
    assert caplog.records == []

    _reconcile_raises(monkeypatch, lambda: ApiException(status=403, reason="Forbidden"))
    with pytest.raises(kopf.TemporaryError):
        reconciler.reconcile_inference_service(body=body)


def test_a_write_refused_in_a_namespace_being_deleted_sets_no_condition_and_posts_no_event() -> None:
    """The handler ends quietly there; before it, the failed write's report set Ready=False ChildWriteFailed
    "... the operator tries again" (it does not) and posted a Warning event, whose create the namespace
    refused too (an exploratory audit). Another refusal is still reported."""
    from tritonscale.reconcile.reconciler_status import write_failed

    class Kube:
        patched: list[Any] = []

        def patch_status(self, *args: Any, **kwargs: Any) -> None:
            Kube.patched.append(args)

        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: Kube.patched.append((name, args))

    events: list[tuple] = []
    body = {"metadata": {"namespace": "term-x", "name": "linear", "generation": 2, "uid": "u"}, "status": {}}
    write_failed(Kube(), body, "ConfigMap/new", _terminating(), lambda *a: events.append(a), 0.0)
    assert Kube.patched == [] and events == []
    write_failed(Kube(), body, "ConfigMap/new", ApiException(status=403, reason="Forbidden"),
                  lambda *a: events.append(a), 0.0)
    assert Kube.patched and events


def test_a_failed_write_marks_the_spec_valid_at_its_generation_as_ready() -> None:
    """The checks passed (the refusal is not the spec's): SpecValid stayed at the previous generation beside
    a Ready of this one (an exploratory audit)."""
    from tritonscale.reconcile.reconciler_status import write_failed

    patched: list[Any] = []

    class Kube:
        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: patched.append(args)

    valid = {"type": "SpecValid", "status": "True", "reason": "Valid", "message": "spec is valid",
             "observedGeneration": 1, "lastTransitionTime": "2026-12-01T00:00:00Z"}
    body = {"metadata": {"namespace": "ns", "name": "linear", "generation": 2, "uid": "u"},
            "status": {"conditions": [valid]}}
    write_failed(Kube(), body, "Service/linear", ApiException(status=403, reason="Forbidden"), lambda *a: None, 0.0)
    ((_, _, status),) = patched
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["SpecValid"]["observedGeneration"] == conds["Ready"]["observedGeneration"] == 2
    assert conds["SpecValid"]["status"] == "True" and conds["Ready"]["reason"] == "ChildWriteFailed"
    assert conds["SpecValid"]["lastTransitionTime"] == valid["lastTransitionTime"]  # no transition


def test_an_insecure_kubeconfig_is_said_once_not_at_every_request(tmp_path, monkeypatch, caplog) -> None:
    """insecure-skip-tls-verify in the kubeconfig: urllib3 warned InsecureRequestWarning at every API
    request (4,302 warnings in an operator's first 40 s with 54 services, an exploratory review); the
    operator says it once, at start, and the warning is filtered."""
    import logging
    import warnings

    import kubernetes

    from tritonscale.kube import client as kc

    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                      "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1',\n"
                      "                               insecure-skip-tls-verify: true}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # the client reads KUBECONFIG once, when it is imported
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    before = kubernetes.client.Configuration.get_default_copy()
    try:
        with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING, logger="tritonscale"):
            warnings.simplefilter("always")
            kc.load_credentials()
            warnings.warn("Unverified HTTPS request", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)
        assert not [w for w in seen if issubclass(w.category, urllib3.exceptions.InsecureRequestWarning)], seen
        assert [r.getMessage() for r in caplog.records if r.name == "tritonscale"] == [
            "the API server's TLS certificate is not checked (insecure-skip-tls-verify in the kubeconfig)"]
    finally:
        kubernetes.client.Configuration.set_default(before)
