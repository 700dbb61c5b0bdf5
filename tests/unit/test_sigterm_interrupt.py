"""SIGTERM to a pytest run tears its fixtures down, so processes the tests started in their
own sessions do not outlive it: each conftest's hook (support/interrupt.py), checked by
running a child pytest with that conftest, SIGTERMing it mid-test, and looking for the
process its fixture started. Without a hook (the control) the process survives."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD_TEST = '''
import os
import time
from pathlib import Path

import pytest

from tritonscale import process_group


@pytest.fixture
def sleeper():
    proc, _ = process_group.spawn(["sleep", "300"], log_path=None)  # its own session, as the sandbox's are
    Path(os.environ["SLEEPER_PID"]).write_text(str(proc.pid))
    yield proc
    process_group.stop_group(proc, timeout=2)


def test_waits_to_be_killed(sleeper):
    Path(os.environ["READY"]).touch()
    time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z " not in stat  # a zombie has exited already


@pytest.mark.parametrize("conftest, cleaned_up", [
    ("tests/conftest.py", True),
    ("e2e/conftest.py", True),
    (None, False),  # the control: SIGTERM's default action skips every finaliser
])
def test_sigterm_stops_a_run_like_ctrl_c_and_its_processes_with_it(tmp_path, conftest, cleaned_up):
    run = tmp_path / "run"
    run.mkdir()
    (run / "test_child.py").write_text(CHILD_TEST)
    if conftest is not None:
        shutil.copy(ROOT / conftest, run / "conftest.py")
    pid_file, ready = tmp_path / "sleeper.pid", tmp_path / "ready"
    env = {**os.environ, "SLEEPER_PID": str(pid_file), "READY": str(ready),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "operator")])}
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(run),
                              "-c", os.devnull, str(run)], cwd=run, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < deadline, "the child test never started"
            time.sleep(0.1)
        sleeper = int(pid_file.read_text())
        assert _alive(sleeper)
        child.send_signal(signal.SIGTERM)
        output = child.communicate(timeout=30)[0]
        deadline = time.monotonic() + 5
        while _alive(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(sleeper) is not cleaned_up, output
        if cleaned_up:
            assert child.returncode == pytest.ExitCode.INTERRUPTED, output
        else:
            assert child.returncode == -signal.SIGTERM, output
    finally:
        if child.poll() is None:
            child.kill()
        if pid_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
