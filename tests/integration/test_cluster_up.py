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


def test_an_up_killed_with_sigkill_leaves_nothing_that_stops_the_next(tmp_path):
    """Session 86's audit: each component leads its own session, so a `cluster up` killed with SIGKILL (the OOM
    killer) stopped none of them; the next `up` on DIR started a second etcd on the data dir the orphan held,
    waited 180 s and quoted the orphan's log. It now stops them first (DIR/pids)."""
    directory = tmp_path / "k8s"

    def up(log_name: str) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "tritonscale"), "cluster", "up", "--dir", str(directory)],
                                stdout=open(tmp_path / log_name, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    first = up("first.log")
    second = None
    try:
        wait_for(lambda: (directory / "kubeconfig").exists() or first.poll() is not None, 120, interval=0.2,
                 what="DIR/kubeconfig")
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        first.send_signal(signal.SIGKILL)  # only the `up` process: its components live on
        first.wait(10)
        orphans = _processes_using(directory)
        assert len(orphans) >= 4, orphans

        second = up("second.log")
        started = time.monotonic()
        # DIR/kubeconfig is the killed run's still: the second is up once it says where its own is
        wait_for(lambda: "export KUBECONFIG=" in (tmp_path / "second.log").read_text() or second.poll() is not None,
                 120, interval=0.2, what="the second `up` to be ready")
        output = (tmp_path / "second.log").read_text()
        assert second.poll() is None, output
        assert "an earlier run on" in output and "left running" in output
        assert time.monotonic() - started < 60  # not the 180 s etcd deadline
        pids = {line.split(":")[0] for line in orphans}
        assert not pids & {line.split(":")[0] for line in _processes_using(directory)}  # the orphans are gone
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
        assert _processes_using(directory) == []
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for line in _processes_using(directory):  # a failed assertion: no orphan outlives the test
            os.killpg(int(line.split(":")[0]), signal.SIGKILL)
