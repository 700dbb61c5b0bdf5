"""The real control plane the integration and install tests share, and what they do
with it: install the chart with helm, create and delete namespaces, load the samples,
poll for a condition. ``tests/conftest.py`` builds its fixtures from these.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.api.status import rfc3339
from tritonscale.cluster.control_plane import SERVICE_ACCOUNT_ISSUER
from tritonscale.kube.client import client_for  # the tests' clients too: one per kubeconfig

REPO = Path(__file__).resolve().parents[2]
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


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition",
             detail: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``
    and, if given, ``detail()``: the state worth seeing when it timed out, not when it began."""
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
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}"
                         + (f"; {detail()}" if detail else ""))


async def until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2,
                detail: Callable[[], str] | None = None) -> Any:
    """``wait_for`` for async tests: ``predicate`` runs in a thread (it may block on the API);
    the failure names ``what`` and, if given, ``detail()`` (the state worth seeing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s: {what}" + (f"; {detail()}" if detail else ""))


def exists(read: Callable[..., Any], *args: Any) -> bool:
    """Whether ``read(*args)`` finds the object (False on 404)."""
    try:
        read(*args)
        return True
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def condition(custom: kubernetes.client.CustomObjectsApi, namespace: str, name: str, type_: str) -> dict[str, Any]:
    """The InferenceService's condition ``type_`` as the API returns it, or {} while it has none."""
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def service_pods(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    """The pods of InferenceService ``name`` (its label), terminating ones too."""
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={name}").items


def pod_ready(pod: Any) -> bool:
    """Ready, and not terminating."""
    return not pod.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def pod_unschedulable(pod: Any) -> bool:
    """Pending because the scheduler found no node for it."""
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])


def fast_scaling_sample(namespace: str) -> dict[str, Any]:
    """The sample on one GPU a replica, scaling 1..8 at a 100 ms target on 2 s ticks and a 10 s rate
    window (a test's exporter load shows within a few ticks), at most 4 more a tick."""
    body = sample(namespace)
    body["spec"]["runtime"]["gpus"] = 1
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 8, "targetP95Milliseconds": 100,
                               "intervalSeconds": 2, "windowSeconds": 10, "scaleUp": {"maxStep": 4}}
    return body


def sample(namespace: str, name: str = "python-cpu.yaml") -> dict[str, Any]:
    """A sample InferenceService, moved to ``namespace`` (the API server refuses a body
    whose namespace differs from the request's). The python-cpu sample ticks every 2 s over
    a 10 s window here, as in the sandbox (it keeps the defaults, 15 s and 60 s, for the
    chart's 15 s scrapes): the tests' Prometheus scrapes every second or two, and their
    clocks are seconds."""
    body = yaml.safe_load((SAMPLES / name).read_text())
    body["metadata"]["namespace"] = namespace
    if name == "python-cpu.yaml":
        body["spec"]["scaling"].update({"intervalSeconds": 2, "windowSeconds": 10})
    return body


def tuner_change(delay_us: int, previous_delay_us: int, reason: str, at_once: bool | None = None) -> dict[str, Any]:
    """status.batching as the operator's tuner writes it for a change to ``delay_us`` (no preferred sizes)
    from ``previous_delay_us``, made now: a test acting as the tuner writes it. ``lastChange`` is the
    tuner's clock (the daemon's time.time()), as the tuner's own write has it: the operator's tuner keeps
    ``previous`` and ``rolloutAtOnce`` until the rollout has been seen or MIN_CHANGE_INTERVAL_S passed. A
    lastChange of 0 (the epoch) is a change long past: a tick before the reconciler rendered it read no
    rollout and cleared both (a CI run's first read of the new template had maxSurge 25%, session 99)."""
    now = time.time()
    state: dict[str, Any] = {"previous": {"delayUs": previous_delay_us, "preferred": []}, "lastChange": now}
    if at_once is not None:
        state["rolloutAtOnce"] = at_once
    return {"maxQueueDelayMicroseconds": delay_us, "preferredBatchSizes": [], "source": "tuner", "reason": reason,
            "message": "set by the test, acting as the tuner", "lastChangeTime": rfc3339(now),
            "tunerState": state}


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


def delete_if_present(delete: Callable[..., Any], *args: Any) -> None:
    """``delete(*args)``, where a 404 means someone else got there first (the garbage
    collector removes a Node's Lease once the Node is gone: it is the Lease's owner)."""
    try:
        delete(*args)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


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

