"""End the operator's process without the interpreter's finalization.

The operator runs daemon threads for its whole life: the leader election and its
watchdog, /healthz, the /metrics server, and an executor thread that may still be in a
tick or a Prometheus query. At interpreter shutdown CPython forces each daemon thread
out with ``pthread_exit`` the next time it takes the GIL, and that can abort the
process (python/cpython#87135). A clean-clone run of the failover test exited with SIGABRT
right after "released Lease": the election thread was still renewing and the
autoscaler's query was still retrying.

Nothing is lost by skipping finalization: the operator keeps its state in the API
server, and both callers run only after the last write (a graceful stop has waited
for in-flight writes and released the Lease; a lost Lease must stop writing at once).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def flush_and_exit(code: int) -> NoReturn:
    """Flush every log handler and the standard streams, then ``os._exit(code)``."""
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001  (a broken stream must not keep the process alive)
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
