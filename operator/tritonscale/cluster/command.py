"""`tritonscale cluster up --dir DIR` (and `tritonscale cluster build`): a thin CLI over
:class:`ControlPlane`."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tritonscale.cluster.build import ClusterError, ensure_binaries
from tritonscale.cluster.control_plane import ControlPlane
from tritonscale.output_paths import ensure_folder, path_arg


class _Stop(Exception):
    """SIGTERM or SIGHUP: stop like Ctrl-C does."""


def _progress(line: str) -> None:
    print(f"cluster: {line}", file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="start etcd, kube-apiserver, kube-controller-manager and kube-scheduler on "
                                   "127.0.0.1; write DIR/kubeconfig once ready; stop everything on Ctrl-C/SIGTERM")
    up.add_argument("--dir", required=True, type=path_arg,
                    help="state directory: kubeconfig, keys, etcd data and logs/ (kept between runs)")
    sub.add_parser("build", help="only build (or find cached) the control-plane binaries and print their directory")


def run(args: argparse.Namespace) -> int:
    try:
        if args.cluster_command == "build":
            return _build()
        ensure_folder("--dir", args.dir)
        return _up(args.dir, process_ends=getattr(args, "process_ends", False))
    except (ClusterError, ValueError) as exc:
        print(f"tritonscale cluster: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file where the state wants a folder (DIR/pki, DIR/logs), the cache unwritable
        where = f" {exc.filename}" if exc.filename else ""
        flag = "--dir" if args.cluster_command == "up" else "the binaries' cache (XDG_CACHE_HOME)"
        print(f"tritonscale cluster: {flag}:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _build() -> int:
    """`cluster build`: SIGTERM and SIGHUP stop it as Ctrl-C does, go's processes with it (they ran on)."""
    def stop_signal(signum: int, _: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_signal)
    try:
        print(ensure_binaries(_progress))
        return 0
    except (KeyboardInterrupt, _Stop) as why:
        _progress(f"build stopped ({str(why) or 'SIGINT'}); nothing was cached")
        return 1


def _lock(directory: Path) -> Any:
    """An exclusive lock on DIR for as long as the process runs: a second `up` on it deleted the running
    one's kubeconfig and hung on etcd's data-dir lock, silently. The open file holds it."""
    import fcntl

    handle = open(directory / ".lock", "a+")  # noqa: SIM115 -- held until the process ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise ValueError(f"--dir: {directory} is in use by another `tritonscale cluster up`"
                         + (f" (pid {holder})" if holder else "")) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _up(directory: Path, process_ends: bool = False) -> int:
    def stop_signal(signum: int, _: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    lock = _lock(directory)
    # the caller's handlers, put back at the end (Ctrl-C's own is Python's KeyboardInterrupt)
    original = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_signal)
    plane = ControlPlane(directory, progress=_progress)
    try:
        kubeconfig = plane.start()
        print(f"export KUBECONFIG={shlex.quote(str(kubeconfig))}", flush=True)  # pasted into a shell
        _progress("running; Ctrl-C or SIGTERM stops it")
        while (problem := plane.failed()) is None:
            time.sleep(0.5)
        print(f"tritonscale cluster: {problem}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop) as why:
        _progress(f"stopping ({str(why) or 'SIGINT'})")
        return 0
    finally:
        # A second Ctrl-C or SIGTERM while stopping must not cut the stop short: it left etcd running
        # (or printed a traceback). The stop is bounded (process_group's grace), so the signals wait.
        for sig in original:
            signal.signal(sig, signal.SIG_IGN)
        try:
            plane.stop()
            _progress("stopped; no process left")
        finally:
            lock.close()
            # When the process ends right after, the signals stay ignored: with SIG_DFL back, a second
            # SIGTERM sent while a quick stop had just finished killed it (exit -15 after "stopped; no
            # process left"). An in-process caller gets its handlers back.
            if not process_ends:
                for sig, handler in original.items():
                    signal.signal(sig, handler)
