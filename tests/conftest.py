"""Shared fixtures: one real Kubernetes control plane per test session (etcd,
kube-apiserver, kube-controller-manager and kube-scheduler built from Kubernetes'
Go modules, see tritonscale.cluster), the chart installed on it with helm, and
the real operator process running as the chart's ServiceAccount, so the real
authorizer enforces the chart's RBAC on every request it makes.

Tests share the control plane; each gets its own namespace (``namespace``).
The helpers these fixtures are built from live in ``tests/support`` (test modules
import them from there, never from this file).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from support.audit_log import AuditLog
from support.cluster import (
    AUDIT_POLICY,
    OPERATOR_NAMESPACE,
    RELEASE,
    OperatorInstall,
    client_for,
    create_namespace,
    delete_namespace,
    install_chart,
    wait_for,
)
from support.interrupt import sigterm_as_keyboard_interrupt
from support.pod_ready_marker import PodReadyMarker, bind_models_claim
from tritonscale.api.spec import PLURAL
from tritonscale.cluster import ClusterError, ControlPlane
from tritonscale.sandbox.operator_process import OperatorProcess


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI time limit, `kill`) stops the run as Ctrl-C does (support/interrupt.py);
    # e2e/conftest.py does the same for a run of e2e/ alone, which does not load this file.
    sigterm_as_keyboard_interrupt()


# ---- the control plane, with the chart installed by helm --------------------------------


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the session, with charts/tritonscale installed by `helm install`
    (default values but one: the CRD from its crds/, a ClusterRole) before the controllers start,
    so the garbage collector knows InferenceServices from the beginning. The plane runs the
    OwnerReferencesPermissionEnforcement admission plugin, as OpenShift does, and the chart's
    `auto` grants the delete it checks only where OpenShift's API is served: the install says so
    (rbac.ownerReferencesPermissionEnforcement), or adopting orphaned children is refused."""
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), audit_policy=AUDIT_POLICY,
                         progress=lambda line: print(f"control plane: {line}", file=sys.stderr))
    helm_dir = tmp_path_factory.mktemp("helm")

    def install(kubeconfig: Path) -> None:
        plane.operator_install = install_chart(kubeconfig, helm_dir, RELEASE,
                                               {"rbac": {"ownerReferencesPermissionEnforcement": True}})

    try:
        plane.start(before_controllers=install)
    except ClusterError as exc:
        pytest.fail(f"the control plane did not start: {exc}", pytrace=False)
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def operator_install(control_plane: ControlPlane) -> OperatorInstall:
    return control_plane.operator_install


@pytest.fixture(scope="session")
def admin_client(control_plane: ControlPlane) -> kubernetes.client.ApiClient:
    return client_for(control_plane.kubeconfig)


@pytest.fixture
def api_client(control_plane: ControlPlane) -> kubernetes.client.ApiClient:
    """Cluster admin (group system:masters): what the tests use to act as users and kubelets."""
    return client_for(control_plane.kubeconfig)


@pytest.fixture(scope="session")
def audit_log(control_plane: ControlPlane) -> AuditLog:
    return AuditLog(control_plane.audit_log)


# ---- per test: a namespace, a Node, a models claim -------------------------------------


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient, operator_install: OperatorInstall,
              request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test (the CRD is installed by then)."""
    name = create_namespace(api_client, request.node.name)
    yield name
    delete_namespace(api_client, name)


@pytest.fixture(scope="module")
def module_namespace(admin_client: kubernetes.client.ApiClient, operator_install: OperatorInstall,
                     request: pytest.FixtureRequest) -> Iterator[str]:
    """One namespace for a module's tests that leave nothing behind (e.g. dry-run creates)."""
    name = create_namespace(admin_client, request.module.__name__.rsplit(".", 1)[-1])
    yield name
    delete_namespace(admin_client, name)


@pytest.fixture
def models_claim(api_client: kubernetes.client.ApiClient, namespace: str) -> Iterator[str]:
    """The `models` claim the samples mount (pvc://models/...), bound, so their pods can be scheduled."""
    pv = bind_models_claim(api_client, namespace)
    yield "models"
    try:
        kubernetes.client.CoreV1Api(api_client).delete_persistent_volume(pv)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def node(api_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``node(gpus=N, ready_after_s=S, capacity={...})``: register a Node and mark the pods bound to it
    Ready (support/pod_ready_marker.py: a test stand-in for a kubelet; nothing runs). ``S`` may be a
    function of the pod."""
    markers: list[PodReadyMarker] = []

    def register(gpus: int = 0, ready_after_s: float | Callable[[Any], float] = 0.5,
                 capacity: dict[str, str] | None = None) -> PodReadyMarker:
        name = f"node-{len(markers)}-{uuid.uuid4().hex[:6]}"
        marker = PodReadyMarker(api_client, name, gpus=gpus, ready_after_s=ready_after_s, capacity=capacity).start()
        markers.append(marker)
        return marker

    yield register
    for m in markers:
        m.stop()


# ---- the operator process ---------------------------------------------------------------


@pytest.fixture
def start_operator(operator_install: OperatorInstall, audit_log: AuditLog,
                   tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """``start_operator(*args, env=..., install=...)``: `tritonscale run` as the chart's
    ServiceAccount (``install``: another release's), returned once Kopf is watching
    InferenceServices (its watch request is in the API server's audit log). The
    process's ``audit_mark`` is where its requests begin in that log."""
    procs: list[OperatorProcess] = []

    def start(*extra_args: str, env: dict[str, str] | None = None,
              install: OperatorInstall | None = None) -> OperatorProcess:
        install = install or operator_install
        mark = audit_log.mark()
        op = OperatorProcess(install.kubeconfig, tmp_path / f"operator-{len(procs)}.log", extra_args, env)
        op.audit_mark = mark
        procs.append(op.start())
        wait_for(lambda: any(r.verb == "watch" and r.resource == PLURAL
                             for r in audit_log.requests(mark, user=install.user)) or not op.alive(),
                 30, what="operator to start watching")
        assert op.alive(), op.output()
        return op

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def lease(admin_client: kubernetes.client.ApiClient) -> Iterator[Callable[[], Any]]:
    """The chart's Lease, absent at the start and the end (other tests use it too);
    ``lease()`` reads it (None while absent)."""
    coordination = kubernetes.client.CoordinationV1Api(admin_client)

    def delete() -> None:
        try:
            coordination.delete_namespaced_lease(RELEASE, OPERATOR_NAMESPACE)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise

    def read() -> Any:
        try:
            return coordination.read_namespaced_lease(RELEASE, OPERATOR_NAMESPACE)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    delete()
    yield read
    delete()
