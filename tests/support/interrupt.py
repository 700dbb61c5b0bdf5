"""SIGTERM stops a pytest run as Ctrl-C does.

SIGTERM's default action ends the interpreter at once: no fixture finaliser, no ``finally``
and no ``atexit`` hook runs, so the processes a test started in their own sessions (etcd,
kube-apiserver and the other control-plane components, tritonserver, Prometheus, the
operator) outlive it. As ``KeyboardInterrupt`` instead, pytest tears the fixtures down, a
running ``tritonscale sandbox`` stops everything it started (its orchestrator's ``finally``),
and ``tritonscale.process_group``'s ``atexit`` hook stops whatever is left. A CI time limit
and ``kill`` send SIGTERM.
"""

from __future__ import annotations

import signal


def sigterm_as_keyboard_interrupt() -> None:
    """Make SIGTERM raise ``KeyboardInterrupt`` in the main thread (``signal.default_int_handler``)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
