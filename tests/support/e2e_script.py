"""Load a script of ``e2e/`` (not a package) as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

E2E = Path(__file__).resolve().parents[2] / "e2e"


def load(name: str) -> ModuleType:
    """``e2e/<name>.py`` as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, E2E / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
