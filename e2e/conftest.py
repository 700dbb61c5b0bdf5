"""e2e/'s own pytest hooks and fixtures. ``pytest e2e/...`` alone does not load tests/conftest.py, whose
fixtures these tests do not use; what both need lives in ``tests/support``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.interrupt import sigterm_as_keyboard_interrupt


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM stops the run as Ctrl-C does, so a killed sandbox test stops the control plane,
    # tritonservers, Prometheus and the operator it started (support/interrupt.py).
    sigterm_as_keyboard_interrupt()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Any]:
    """A real control plane of this test's own (``tritonscale.cluster.ControlPlane``), for the sandbox's
    pieces; skipped (naming what to install) unless everything the sandbox needs is there."""
    from tritonscale.sandbox.preflight import preflight

    missing = preflight("step")
    if missing:
        pytest.skip("; ".join(m.what for m in missing))
    from tritonscale.cluster import ControlPlane

    cp = ControlPlane(tmp_path / "control-plane")
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()
