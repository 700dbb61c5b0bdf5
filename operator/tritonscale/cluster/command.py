"""`tritonscale cluster up --dir DIR` (and `tritonscale cluster build`): a thin CLI over
:class:`ControlPlane`."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType

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
            print(ensure_binaries(_progress))
            return 0
        ensure_folder("--dir", args.dir)
        return _up(args.dir)
    except (ClusterError, ValueError) as exc:
        print(f"tritonscale cluster: {exc}", file=sys.stderr)
        return 1


def _up(directory: Path) -> int:
    def stop_signal(signum: int, _: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

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
        _progress(f"stopping ({why or 'SIGINT'})")
        return 0
    finally:
        plane.stop()
        _progress("stopped; no process left")
