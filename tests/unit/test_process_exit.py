"""``flush_and_exit``: the operator's last step after a stop (tritonscale.process_exit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tritonscale.sandbox.scenario import PACKAGE_ROOT


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={"PYTHONPATH": str(PACKAGE_ROOT)})


def test_it_keeps_what_was_buffered_and_the_exit_code_while_daemon_threads_still_run():
    # stdout to a pipe is block-buffered, and a MemoryHandler-style buffer is what a log
    # handler's flush() exists for: both must reach the reader although os._exit skips
    # the interpreter's own flushing.
    done = _run("""
        import logging, sys, threading, time
        from logging.handlers import MemoryHandler
        from tritonscale.process_exit import flush_and_exit

        out = logging.StreamHandler(sys.stderr)
        logging.getLogger().addHandler(MemoryHandler(capacity=100, flushLevel=logging.CRITICAL, target=out))
        logging.getLogger().setLevel(logging.INFO)
        threading.Thread(target=lambda: [time.sleep(0.01) for _ in iter(int, 1)], daemon=True).start()
        print("printed, still in the buffer", end="")
        logging.getLogger("t").info("logged, still in the memory handler")
        flush_and_exit(3)
        print("never reached")
    """)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed, still in the buffer"
    assert "logged, still in the memory handler" in done.stderr
