"""e2e/'s own pytest hooks. ``pytest e2e/...`` alone does not load tests/conftest.py, whose
fixtures these tests do not use; what both need lives in ``tests/support``."""

from __future__ import annotations

import pytest

from support.interrupt import sigterm_as_keyboard_interrupt


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM stops the run as Ctrl-C does, so a killed sandbox test stops the control plane,
    # tritonservers, Prometheus and the operator it started (support/interrupt.py).
    sigterm_as_keyboard_interrupt()
