"""The operator itself, ``tritonscale run``, as a subprocess in its own session (like
the in-cluster Pod), pointed at the sandbox's cluster and Prometheus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from tritonscale import process_group
from tritonscale.sandbox.scenario import PACKAGE_ROOT


class OperatorProcess:
    """``tritonscale run`` as a subprocess in its own session, like the in-cluster Pod."""

    def __init__(self, kubeconfig: Path, prometheus_url: str, log_path: Path) -> None:
        self.log_path = log_path
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never fall back to in-cluster credentials
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        self.cmd = [sys.executable, "-m", "tritonscale", "run", "--prometheus-url", prometheus_url,
                    "--metrics-port", "0", "--liveness-port", "0"]
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self._log: Any = None

    def start(self) -> "OperatorProcess":
        self.proc, self._log = process_group.spawn(self.cmd, log_path=self.log_path, env=self.env)
        process_group.register(self)
        return self

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None:
            process_group.stop_group(self.proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        process_group.unregister(self)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
