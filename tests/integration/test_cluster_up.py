"""`tritonscale cluster up --dir D`: D/kubeconfig appears once the API server is ready,
`kubectl version` reports a v1.35 server, and SIGTERM leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from support.cluster import BIN, wait_for


def _processes_using(directory: Path) -> list[str]:
    """Command lines of live processes that mention ``directory`` (the components all do)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in (proc / "status").read_text().splitlines() if line.startswith("State:")), "")
        except OSError:
            continue
        if str(directory) in cmdline and "zombie" not in state:
            found.append(f"{proc.name}: {cmdline[:150]}")
    return found


def test_cluster_up_serves_v1_35_and_sigterm_leaves_nothing(tmp_path):
    directory = tmp_path / "k8s"
    log = open(tmp_path / "cluster-up.log", "w")
    proc = subprocess.Popen([str(BIN / "tritonscale"), "cluster", "up", "--dir", str(directory)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        kubeconfig = directory / "kubeconfig"
        wait_for(lambda: kubeconfig.exists() or proc.poll() is not None, 120, interval=0.2, what="DIR/kubeconfig")
        assert proc.poll() is None, (tmp_path / "cluster-up.log").read_text()
        out = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "version", "-o", "json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        server = json.loads(out.stdout)["serverVersion"]
        assert server["gitVersion"].startswith("v1.35.") and (server["major"], server["minor"]) == ("1", "35")
        running = _processes_using(directory)
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            assert any(f"/{name} " in line for line in running), (name, running)

        # A second `up` on the same DIR is refused at once, and leaves the running one alone (it deleted
        # its kubeconfig and hung on etcd's lock).
        second = subprocess.run([str(BIN / "tritonscale"), "cluster", "up", "--dir", str(directory)],
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 1 and "is in use by another `tritonscale cluster up`" in second.stderr, second
        assert kubeconfig.exists() and proc.poll() is None

        # A second SIGTERM while it stops waits for the stop (it left etcd running, or a traceback).
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "cluster-up.log").read_text()
        assert _processes_using(directory) == []
        assert "Traceback" not in (tmp_path / "cluster-up.log").read_text()
        assert not kubeconfig.exists()  # it pointed at ports nothing listens on any more
        output = (tmp_path / "cluster-up.log").read_text()
        assert "stopping (SIGTERM)" in output and "export KUBECONFIG=" in output
    finally:
        if proc.poll() is None:  # a failed assertion: stop it the way it is meant to be stopped
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
