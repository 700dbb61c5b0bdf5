"""The chart tests' rendering of charts/tritonscale (tests/install/test_chart_*.py): one `helm template` per
configuration, shared by every chart test module."""

from __future__ import annotations

from typing import Any

import pytest

from support.chart_render import CONFIGS, helm_template


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Session-wide (it was one chart module's): the tests only read the objects (kubernetes_validate
    does not change them either), and five modules use it."""
    out = {}
    for name, values in CONFIGS.items():
        out[name] = helm_template(values, tmp_path_factory.mktemp(name), include_crds=True)
    return out
