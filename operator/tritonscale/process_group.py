"""Child processes that run in their own session and are stopped with everything they
started: the control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), tritonserver (and its python-backend stubs), Prometheus, the operator.

One place for what each of them needs: spawn in a new session (so a group signal
reaches grandchildren), SIGTERM-then-SIGKILL of the whole group, a registry whose
``atexit`` hook stops whatever is still running, and HTTP readiness polling.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with .stop(timeout=...)


@atexit.register
def _stop_all_at_exit() -> None:
    for owner in list(_LIVE):
        try:
            owner.stop(timeout=2)
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass


def register(owner: Any) -> None:
    _LIVE.add(owner)


def unregister(owner: Any) -> None:
    _LIVE.discard(owner)


def spawn(cmd: Sequence[str], *, log_path: Path | None, env: Mapping[str, str] | None = None,
          cwd: Path | str | None = None) -> tuple[subprocess.Popen, IO[bytes] | None]:
    """Start ``cmd`` in a new session (pgid == pid), output appended to ``log_path``."""
    log: IO[bytes] | None = None
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")
    proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
                            stdout=log if log is not None else subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(cwd) if cwd is not None else None)
    return proc, log


def stop_group(proc: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM the process group, wait up to ``timeout``, then SIGKILL what is left and
    wait until the group is empty (grandchildren such as python-backend stubs included).
    Always reaps ``proc``; returns its exit code."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.02)
    return proc.returncode


def stop_pids(pgids: Sequence[int], timeout: float) -> None:
    """``stop_group`` for groups that are not our children (left by a process that was killed): SIGTERM
    each group, wait up to ``timeout`` for all to end, then SIGKILL what is left."""
    def alive() -> list[int]:
        out = []
        for pgid in pgids:
            try:
                os.killpg(pgid, 0)
                out.append(pgid)
            except (ProcessLookupError, PermissionError):
                pass
        return out

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for pgid in alive():
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the whole group at once (crash simulation, or the end of stop_group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def wait_http_ok(base_url: str, path: str, timeout: float, alive: Callable[[], bool]) -> bool:
    """Poll ``base_url + path`` until it answers 200; False on timeout or once ``alive()`` is False."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=base_url, timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if not alive():
                return False
            try:
                if (await client.get(path)).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    return False


def wait_http_ok_blocking(base_url: str, path: str, timeout: float, alive: Callable[[], bool],
                          **client_options: Any) -> bool:
    """Synchronous :func:`wait_http_ok` (for sync fixtures and scripts). ``client_options``
    go to ``httpx.Client`` (TLS: ``verify=``, ``cert=``)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base_url, timeout=2.0, trust_env=False, **client_options) as client:
        while time.monotonic() < deadline:
            if not alive():
                return False
            try:
                if client.get(path).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False
