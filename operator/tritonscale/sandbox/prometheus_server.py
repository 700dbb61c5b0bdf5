"""Run a real Prometheus (Debian's ``prometheus`` 2.42) that scrapes sandbox tritonservers.

The ``triton`` job discovers its targets with ``file_sd_configs`` on
``<workdir>/targets.json`` (refresh 1 s).  :meth:`PrometheusServer.write_targets`
rewrites that file atomically, which is how the sandbox plays "pod discovery": every
tritonserver replica becomes a target ``127.0.0.1:<metrics port>`` with labels such as
``namespace``, ``inferenceservice`` and ``pod``.

Gotcha: ``/-/ready`` answers within a second, but a target's first scrape only lands
after file_sd has picked it up and the scrape loop fired (a few seconds).  Use
:meth:`PrometheusServer.wait_target_up` before asserting on queries.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

from tritonscale import process_group

from .tritonserver import free_port

__all__ = ["PrometheusServer", "find_prometheus"]

INSTALL_HINT = "install it with: apt-get install -y prometheus"


def find_prometheus() -> Path:
    """Path of the ``prometheus`` binary (``$PATH`` first, then /usr/bin/prometheus)."""
    found = shutil.which("prometheus")
    if found:
        return Path(found)
    for cand in ("/usr/bin/prometheus", "/usr/local/bin/prometheus"):
        if os.access(cand, os.X_OK):
            return Path(cand)
    raise RuntimeError(f"prometheus binary not found on PATH or in /usr/bin; {INSTALL_HINT}")


def _fmt_duration(seconds: float) -> str:
    ms = max(1, int(round(seconds * 1000)))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


class PrometheusServer:
    """A Prometheus process with its config, TSDB and file_sd targets under ``workdir``.

    ``extra_jobs``: additional scrape jobs, each either a raw Prometheus scrape config
    (a dict with ``static_configs``/``file_sd_configs``...) or the short form
    ``{"job_name": "operator", "targets": ["127.0.0.1:8080"], "labels": {...},
    "metrics_path": "/metrics"}``.
    ``rule_files``: recording/alerting rule files to load.
    The port is kept across ``stop()``/``kill()`` + ``start()``, so clients keep their URL.
    """

    def __init__(
        self,
        workdir: Path | str,
        scrape_interval_s: float = 1.0,
        port: int | None = None,
        *,
        extra_jobs: Sequence[Mapping[str, Any]] = (),
        rule_files: Sequence[Path | str] = (),
        evaluation_interval_s: float | None = None,
        retention: str = "2h",
        log_path: Path | str | None = None,
        binary: Path | str | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """``tls``: (certificate, key) PEM files to serve https with (``--web.config.file``)."""
        self.workdir = Path(workdir)
        self.scrape_interval_s = float(scrape_interval_s)
        self.evaluation_interval_s = float(evaluation_interval_s or scrape_interval_s)
        self.port = int(port) if port else free_port()
        self.extra_jobs = list(extra_jobs)
        self.rule_files = [Path(r) for r in rule_files]
        self.retention = retention
        self.log_path = Path(log_path) if log_path else self.workdir / "prometheus.log"
        self.binary = Path(binary) if binary else None
        self.config_path = self.workdir / "prometheus.yml"
        self.targets_path = self.workdir / "targets.json"
        self.tsdb_path = self.workdir / "data"
        self.tls = tls
        self.web_config_path = self.workdir / "web.yml"
        self._proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    # ---- addresses
    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # ---- config
    def _job(self, job: Mapping[str, Any]) -> dict[str, Any]:
        job = dict(job)
        if "targets" in job:
            sc: dict[str, Any] = {"targets": list(job.pop("targets"))}
            labels = job.pop("labels", None)
            if labels:
                sc["labels"] = dict(labels)
            job["static_configs"] = [sc]
        job.setdefault("scrape_interval", _fmt_duration(self.scrape_interval_s))
        job.setdefault("scrape_timeout", _fmt_duration(min(self.scrape_interval_s, 10.0)))
        return job

    def config(self) -> dict[str, Any]:
        interval = _fmt_duration(self.scrape_interval_s)
        cfg: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": _fmt_duration(min(self.scrape_interval_s, 10.0)),
                "evaluation_interval": _fmt_duration(self.evaluation_interval_s),
            },
            "scrape_configs": [
                {
                    "job_name": "triton",
                    "scrape_interval": interval,
                    "scrape_timeout": _fmt_duration(min(self.scrape_interval_s, 10.0)),
                    "metrics_path": "/metrics",
                    "file_sd_configs": [{"files": [str(self.targets_path)], "refresh_interval": "1s"}],
                },
                *[self._job(j) for j in self.extra_jobs],
            ],
        }
        if self.rule_files:
            cfg["rule_files"] = [str(r) for r in self.rule_files]
        return cfg

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._atomic_write(self.config_path, yaml.safe_dump(self.config(), sort_keys=False))
        if not self.targets_path.exists():
            self.write_targets([])
        if self.tls:
            cert, key = self.tls
            self._atomic_write(self.web_config_path, yaml.safe_dump(
                {"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}}))

    def write_targets(self, targets: Iterable[tuple[str, Mapping[str, str]]]) -> None:
        """Replace the ``triton`` job's targets: ``[("127.0.0.1:PORT", {"pod": ...}), ...]``.

        Written atomically (tmp file + ``os.replace``) so Prometheus never reads half a file.
        """
        groups = [{"targets": [addr], "labels": {str(k): str(v) for k, v in labels.items()}}
                  for addr, labels in targets]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._atomic_write(self.targets_path, json.dumps(groups, indent=1))

    @staticmethod
    def _atomic_write(path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    # ---- lifecycle
    def command(self) -> list[str]:
        binary = self.binary or find_prometheus()
        return [
            str(binary),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tsdb_path}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
            *([f"--web.config.file={self.web_config_path}"] if self.tls else []),
        ]

    def start(self) -> PrometheusServer:
        if self.is_alive():
            raise RuntimeError(f"prometheus already running (pid {self.pid})")
        cmd = self.command()  # raises a clear error if the binary is missing
        self.write_config()
        self._proc, self._log = process_group.spawn(cmd, log_path=self.log_path, cwd=self.workdir)
        process_group.register(self)
        return self

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    async def wait_ready(self, timeout: float = 30.0) -> bool:
        """Poll ``/-/ready``.  False on timeout or if the process died."""
        return await process_group.wait_http_ok(self.url, "/-/ready", timeout, self.is_alive)

    async def targets(self) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.url, timeout=5.0, trust_env=False) as client:
            r = await client.get("/api/v1/targets", params={"state": "active"})
            r.raise_for_status()
            return r.json()["data"]["activeTargets"]

    async def wait_target_up(self, instance: str, timeout: float = 30.0) -> bool:
        """Wait until the target whose ``instance`` label is ``instance`` has health ``up``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive():
                return False
            try:
                for t in await self.targets():
                    if t.get("labels", {}).get("instance") == instance and t.get("health") == "up":
                        return True
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            await asyncio.sleep(0.2)
        return False

    async def query(self, promql: str, time_s: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns ``data.result`` (vector samples)."""
        params: dict[str, Any] = {"query": promql}
        if time_s is not None:
            params["time"] = time_s
        async with httpx.AsyncClient(base_url=self.url, timeout=10.0, trust_env=False) as client:
            r = await client.get("/api/v1/query", params=params)
            r.raise_for_status()
            body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``.  Returns the exit code."""
        rc = process_group.stop_group(self._proc, timeout) if self._proc is not None else None
        if self._log is not None:
            self._log.close()
            self._log = None
        process_group.unregister(self)
        return rc

    def kill(self) -> None:
        """SIGKILL immediately (monitoring-outage tests).  ``start()`` brings it back."""
        if self._proc is not None:
            process_group.kill_group(self._proc)
        self.stop(timeout=0)

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
