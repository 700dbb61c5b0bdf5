"""Shared fixtures: one real Kubernetes control plane per test session (etcd,
kube-apiserver, kube-controller-manager and kube-scheduler built from Kubernetes'
Go modules, see tritonscale.cluster), the chart installed on it with helm, and
the real operator process running as the chart's ServiceAccount, so the real
authorizer enforces the chart's RBAC on every request it makes.

Tests share the control plane; each gets its own namespace (``namespace``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest
import yaml

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.cluster import ClusterError, ControlPlane
from tritonscale.cluster.control_plane import SERVICE_ACCOUNT_ISSUER

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "manifests" / "samples"
CHART = REPO / "charts" / "tritonscale"
BIN = Path(sys.executable).parent  # helm and kubectl from .ci/install-k8s-tools

OPERATOR_NAMESPACE = "tritonscale-system"
RELEASE = "tritonscale"  # the chart's ServiceAccount, ClusterRole and binding are named after it

# The API server logs every request of the ServiceAccounts in the operator's
# namespace (the operator runs as one of them), at level Metadata: who, verb,
# resource, response code. Everything else (the controllers, the tests) is not logged.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{OPERATOR_NAMESPACE}"]},
        {"level": "None"},
    ],
}


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def sibling_module(here: str, name: str) -> Any:
    """Import the test module ``name`` next to the file ``here`` (whatever pytest's import mode)."""
    import importlib.util
    import sys as _sys

    if name in _sys.modules:
        return _sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(here).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    _sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def exists(read: Callable[..., Any], *args: Any) -> bool:
    """Whether ``read(*args)`` finds the object (False on 404)."""
    try:
        read(*args)
        return True
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def sample(namespace: str, name: str = "python-cpu.yaml") -> dict[str, Any]:
    """A sample InferenceService, moved to ``namespace`` (the API server refuses a body
    whose namespace differs from the request's)."""
    body = yaml.safe_load((SAMPLES / name).read_text())
    body["metadata"]["namespace"] = namespace
    return body


def client_for(kubeconfig: Path | str) -> kubernetes.client.ApiClient:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


def run_tool(*cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run helm or kubectl from the venv; fail the test with its output if it fails."""
    tool = BIN / cmd[0]
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run .ci/setup (it installs helm and kubectl)", pytrace=False)
    proc = subprocess.run([str(tool), *cmd[1:]], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


# ---- the control plane, with the chart installed by helm --------------------------------

@dataclass(frozen=True)
class OperatorInstall:
    release: str
    namespace: str
    service_account: str
    kubeconfig: Path  # the ServiceAccount's identity: a token from the TokenRequest API
    helm_output: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def install_chart(kubeconfig: Path, workdir: Path, release: str,
                  values: dict[str, Any] | None = None) -> OperatorInstall:
    """`helm install RELEASE charts/tritonscale` into OPERATOR_NAMESPACE, then a kubeconfig
    for its ServiceAccount. The chart's own operator Deployment is scaled to 0: its image
    cannot run here (no kubelet, no registry); the tests run `tritonscale run` on this
    machine under the same ServiceAccount instead."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = ["helm", "install", release, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
           "--kubeconfig", str(kubeconfig)]
    if values:
        (workdir / f"{release}-values.yaml").write_text(yaml.safe_dump(values))
        cmd += ["--values", str(workdir / f"{release}-values.yaml")]
    out = run_tool(*cmd)
    admin = client_for(kubeconfig)
    apps = kubernetes.client.AppsV1Api(admin)
    apps.patch_namespaced_deployment_scale(release, OPERATOR_NAMESPACE, {"spec": {"replicas": 0}})
    sa = apps.read_namespaced_deployment(release, OPERATOR_NAMESPACE).spec.template.spec.service_account_name
    token = kubernetes.client.CoreV1Api(admin).create_namespaced_service_account_token(
        sa, OPERATOR_NAMESPACE, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                 "spec": {"audiences": [SERVICE_ACCOUNT_ISSUER], "expirationSeconds": 86400}},
    ).status.token
    admin_config = yaml.safe_load(kubeconfig.read_text())
    config = {**admin_config, "users": [{"name": sa, "user": {"token": token}}],
              "contexts": [{"name": "operator", "context": {"cluster": "tritonscale", "user": sa}}],
              "current-context": "operator"}
    path = workdir / f"{release}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return OperatorInstall(release, OPERATOR_NAMESPACE, sa, path, out.stdout + out.stderr)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the session, with charts/tritonscale installed by `helm install`
    (default values: the CRD from its crds/, a ClusterRole) before the controllers start,
    so the garbage collector knows InferenceServices from the beginning."""
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), audit_policy=AUDIT_POLICY,
                         progress=lambda line: print(f"control plane: {line}", file=sys.stderr))
    helm_dir = tmp_path_factory.mktemp("helm")

    def install(kubeconfig: Path) -> None:
        plane.operator_install = install_chart(kubeconfig, helm_dir, RELEASE)

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
def audit_log(control_plane: ControlPlane) -> Any:
    from audit_log import AuditLog

    return AuditLog(control_plane.audit_log)


# ---- per test: a namespace, a Node, a models claim -------------------------------------

def delete_namespace(api: kubernetes.client.ApiClient, name: str) -> None:
    """Delete ``name``. Its InferenceServices go first, and are gone when this returns:
    a later test's cluster-wide operator must not find them in a terminating namespace
    and write children or Events there (the API server refuses: NamespaceTerminating).
    With no operator left to release their finalizer, it is dropped."""
    custom = kubernetes.client.CustomObjectsApi(api)

    def remaining() -> list[dict[str, Any]]:
        return custom.list_namespaced_custom_object(GROUP, VERSION, name, PLURAL)["items"]

    for item in remaining():
        try:
            if item["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(GROUP, VERSION, name, PLURAL, item["metadata"]["name"],
                                                      {"metadata": {"finalizers": None}},
                                                      _content_type="application/merge-patch+json")
            custom.delete_namespaced_custom_object(GROUP, VERSION, name, PLURAL, item["metadata"]["name"])
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(lambda: not remaining(), 30, what=f"the InferenceServices of {name} to go")
    try:
        kubernetes.client.CoreV1Api(api).delete_namespace(name)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


def create_namespace(api: kubernetes.client.ApiClient, label: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:5]}"
    kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


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
    from pod_ready_marker import bind_models_claim

    pv = bind_models_claim(api_client, namespace)
    yield "models"
    try:
        kubernetes.client.CoreV1Api(api_client).delete_persistent_volume(pv)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def node(api_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``node(gpus=N, ready_after_s=S)``: register a Node and mark the pods bound to it
    Ready (tests/pod_ready_marker.py: a test stand-in for a kubelet; nothing runs)."""
    from pod_ready_marker import PodReadyMarker

    markers: list[PodReadyMarker] = []

    def register(gpus: int = 0, ready_after_s: float = 0.5) -> PodReadyMarker:
        name = f"node-{len(markers)}-{uuid.uuid4().hex[:6]}"
        marker = PodReadyMarker(api_client, name, gpus=gpus, ready_after_s=ready_after_s).start()
        markers.append(marker)
        return marker

    yield register
    for m in markers:
        m.stop()


# ---- the operator process ---------------------------------------------------------------

class OperatorProcess:
    def __init__(self, kubeconfig: Path, user: str, log_path: Path, extra_args: list[str], env: dict[str, str]):
        self.log_path, self.user = log_path, user
        cmd = [str(BIN / "tritonscale"), "run", "--liveness-port", "0", "--metrics-port", "0", *extra_args]
        full_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", **env}
        full_env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@pytest.fixture
def start_operator(operator_install: OperatorInstall, audit_log: Any,
                   tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """``start_operator(*args, env=..., install=...)``: `tritonscale run` as the chart's
    ServiceAccount (``install``: another release's), returned once Kopf is watching
    InferenceServices (its watch request is in the API server's audit log)."""
    procs: list[OperatorProcess] = []

    def start(*extra_args: str, env: dict[str, str] | None = None,
              install: OperatorInstall | None = None) -> OperatorProcess:
        install = install or operator_install
        mark = audit_log.mark()
        op = OperatorProcess(install.kubeconfig, install.user, tmp_path / f"operator-{len(procs)}.log",
                             list(extra_args), env or {})
        op.audit_mark = mark
        procs.append(op)
        wait_for(lambda: any(r.verb == "watch" and r.resource == PLURAL
                             for r in audit_log.requests(mark, user=install.user)) or not op.alive(),
                 30, what="operator to start watching")
        assert op.alive(), op.output()
        return op

    yield start
    for p in procs:
        p.stop()
