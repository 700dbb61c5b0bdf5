"""SIGTERM to `simulate --suite --jobs 2` ended the main process at once and left its worker processes
running, orphaned, for the rest of their scenarios; Ctrl-C ended it without a word (an exploration of the
CLI, session 55). Both now end every process and say so in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARGS = ["simulate", "--suite", "--classes", "steps,onoff", "--cold-starts", "60", "--slos", "tight",
        "--seeds", "0,1,2", "--jobs", "2"]


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc: Linux, as CI)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_the_suite_and_its_workers_with_one_line(tmp_path, sig, code):
    # SIGINT at its default, as in a terminal: a shell's background job (CI's, say) starts it ignored, and
    # Python then keeps it ignored -- Ctrl-C cannot reach such a process anyway
    proc = subprocess.Popen([sys.executable, "-m", "tritonscale", *ARGS, "--decisions", str(tmp_path / "d.csv")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:  # both workers running scenarios
            time.sleep(0.2)
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        time.sleep(1.0)
        os.kill(proc.pid, sig)  # the main process alone, as `kill` or a container runtime sends it
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == code, err
        assert err.strip().splitlines()[-1] == ("tritonscale simulate: interrupted"
                                                + (" (SIGTERM)" if sig == signal.SIGTERM else "")), err
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [w for w in workers if _alive(w)], workers
        assert not (tmp_path / "d.csv").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
