"""Output folders checked before a long run, so what ran is not lost at its end.

One rule for every command that writes files (``simulate --plot``, ``sandbox --summary``,
``cluster up --dir`` ...): the folder exists, made here if need be, and takes files;
otherwise a ValueError naming the flag, for a one-line error.
"""

from __future__ import annotations

import os
from pathlib import Path


def ensure_folder(flag: str, folder: Path | str) -> Path:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag}: {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag}: cannot create {folder}: {exc.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: cannot write in {folder}")
    return folder


def ensure_parent(flag: str, path: Path | str | None) -> None:
    """The folder of an output file (nothing to check without one)."""
    if path:
        ensure_folder(flag, Path(path).parent)
