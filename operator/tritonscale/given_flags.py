"""Which flags a command line gave, whatever their values.

A flag given at its default value is still a flag a mode may not read (``--suite --cold-start-s 60``
ran every cold start of the matrix, silently, when only values other than a default were noticed).
``record_given`` makes each action of a parser note its dest in ``namespace.given_flags``;
``was_given`` reads it.
"""

from __future__ import annotations

import argparse
from typing import Any

GIVEN = "given_flags"
_RECORDING: dict[type[argparse.Action], type[argparse.Action]] = {}


def record_given(p: argparse.ArgumentParser) -> None:
    """Make every action of ``p`` note its dest in ``namespace.given_flags`` when its flag is given."""
    p.set_defaults(**{GIVEN: frozenset()})
    for action in p._actions:  # noqa: SLF001  (argparse has no public list of a parser's actions)
        if action.dest not in ("help", argparse.SUPPRESS):
            action.__class__ = _recording(type(action))


def was_given(args: argparse.Namespace, dest: str, default: Any) -> bool:
    """Whether ``--dest`` was on the command line; for a Namespace no recording parser made, whether
    its value differs from ``default``."""
    recorded = getattr(args, GIVEN, None)
    return dest in recorded if recorded is not None else getattr(args, dest) != default


def _recording(base: type[argparse.Action]) -> type[argparse.Action]:
    """``base`` that also notes its dest as given (one subclass per action class)."""
    if base not in _RECORDING:
        class Recording(base):  # type: ignore[misc,valid-type]
            def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                         option_string: str | None = None) -> None:
                super().__call__(parser, namespace, values, option_string)
                setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})

        Recording.__name__ = f"Recording{base.__name__}"
        _RECORDING[base] = Recording
    return _RECORDING[base]
