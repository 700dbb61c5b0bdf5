"""Shared fixtures: an emulated Kubernetes API and the real operator process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest

from tritonscale.sandbox.kubernetes_api import EmulatedCluster

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "manifests" / "samples"


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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmulatedCluster]:
    c = EmulatedCluster().start()
    c.kubeconfig = c.write_kubeconfig(str(tmp_path / "kubeconfig"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def api_client(cluster: EmulatedCluster) -> kubernetes.client.ApiClient:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(cluster.kubeconfig, client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


class OperatorProcess:
    def __init__(self, cluster: EmulatedCluster, log_path: Path, extra_args: list[str], env: dict[str, str]):
        self.log_path = log_path
        cmd = [str(Path(sys.executable).parent / "tritonscale"), "run", "--liveness-port", "0",
               "--metrics-port", "0", *extra_args]
        full_env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "PYTHONUNBUFFERED": "1", **env}
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
def start_operator(cluster: EmulatedCluster, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    procs: list[OperatorProcess] = []

    def start(*extra_args: str, env: dict[str, str] | None = None) -> OperatorProcess:
        op = OperatorProcess(cluster, tmp_path / f"operator-{len(procs)}.log", list(extra_args), env or {})
        procs.append(op)
        # Kopf is watching once its first LIST of inferenceservices reached the emulator.
        wait_for(lambda: any(c.resource == "inferenceservices" and c.verb == "watch" for c in cluster.api.calls)
                 or not op.alive(), 30, what="operator to start watching")
        assert op.alive(), op.output()
        return op

    yield start
    for p in procs:
        p.stop()
