"""The operator itself, ``tritonscale run``, as a subprocess in its own session (like the
in-cluster Pod), pointed at a cluster by a kubeconfig. The sandbox runs one against its
cluster and Prometheus; the integration tests run one per test as the chart's
ServiceAccount (``tests/conftest.py``, ``start_operator``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from tritonscale import process_group
from tritonscale.sandbox.scenario import PACKAGE_ROOT  # on the child's PYTHONPATH: a checkout runs too


class OperatorProcess:
    """``tritonscale run ARGS`` with ``KUBECONFIG=kubeconfig``, its output in ``log_path``;
    /metrics and /healthz are off unless ``args`` turn them on."""

    def __init__(self, kubeconfig: Path, log_path: Path, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        full_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", **(env or {})}
        full_env.pop("KUBERNETES_SERVICE_HOST", None)  # never fall back to in-cluster credentials
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), full_env.get("PYTHONPATH")) if p)
        self.cmd = [sys.executable, "-m", "tritonscale", "run", "--metrics-port", "0", "--liveness-port", "0",
                    *args]
        self.env = full_env
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> OperatorProcess:
        self.proc, self._log = process_group.spawn(self.cmd, log_path=self.log_path, env=self.env)
        process_group.register(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Kopf stops its handlers), SIGKILL after ``timeout``; closes the log."""
        if self.proc is not None:
            process_group.stop_group(self.proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        process_group.unregister(self)

    def output(self) -> str:
        """Everything the operator logged so far."""
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 3000) -> str:
        return self.output()[-n:]
