"""Output folders checked before a long run, so what ran is not lost at its end.

One rule for every command that writes files (``simulate --plot``, ``sandbox --summary``,
``cluster up --dir`` ...): the folder exists, made here if need be, and takes files;
otherwise a ValueError naming the flag, for a one-line error.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


def name_arg(text: str) -> str:
    """An argparse type for a path flag, kept as given: ``Path('')`` would be the current folder, silently."""
    if text == "":
        raise argparse.ArgumentTypeError("an empty path")
    return text


def path_arg(text: str) -> Path:
    """``name_arg``, as a Path."""
    return Path(name_arg(text))


def input_file_arg(text: str) -> str:
    """An argparse type for a file the command reads that is not read from a stream: ``-`` was taken
    for a file of that name ("-: cannot read: No such file or directory")."""
    if text == "-":
        raise argparse.ArgumentTypeError("- (standard input) is not read here: give a file name (./- for one "
                                         "named -)")
    return name_arg(text)


def input_path_arg(text: str) -> Path:
    """``input_file_arg``, as a Path."""
    return Path(input_file_arg(text))


def ensure_folder(flag: str, folder: Path | str) -> Path:
    if str(folder) == "":
        raise ValueError(f"{flag}: an empty path")
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
    """An output file (nothing to check without one, None): its folder takes files, and the path
    is not an empty string, a folder, or a file that cannot be written."""
    if path is None:
        return
    if str(path) == "":
        raise ValueError(f"{flag}: an empty path")
    if str(path) == "-":  # it wrote a file named "-", where `render -f -` (and most tools) mean a stream
        raise ValueError(f"{flag}: - (standard output) is not taken here: give a file name (./- for one named -)")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {path} is a folder, not a file")
    ensure_folder(flag, path.parent)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: cannot write {path}")


def check_file_name(flag: str, path: Path | str | None) -> None:
    """An output file's name (nothing to check without one, None) is neither empty nor a folder's. Checks
    the name only; makes nothing. (``Path('')`` is the current folder: "" was said to be a folder.)"""
    if path is None:
        return
    if str(path) == "":
        raise ValueError(f"{flag}: an empty path")
    if Path(path).is_dir():
        raise ValueError(f"{flag}: {path} is a folder, not a file")


def check_image_name(flag: str, path: Path | str | None) -> None:
    """An output image's name (``check_file_name``) has an extension matplotlib writes (it picks the format by
    it: 'x.json' fails only after the run, and 'x' silently becomes 'x.png'). Checks the name only; makes
    nothing."""
    if path is None:
        return
    check_file_name(flag, path)
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix not in formats:
        raise ValueError(f"{flag}: {path}: name the image .png (or one of .{', .'.join(sorted(formats))})")


def ensure_image(flag: str, path: Path | str | None) -> None:
    """An output image: ``check_image_name``, then ``ensure_parent`` (a refused name makes no folder)."""
    check_image_name(flag, path)
    ensure_parent(flag, path)


def replacing(path: Path | str, write: Callable[[Path], object]) -> Path:
    """Run ``write(p)``, which writes the file ``p``: a temporary file beside ``path`` (of its suffix, which
    tells matplotlib the format), moved over ``path`` once complete -- so a failed write (a full disk, a
    file size limit) leaves what ``path`` held, where it left a truncated CSV or PNG in place of a good
    one. A ``path`` that exists and is no regular file (/dev/stdout, a pipe) is written directly. Returns
    ``path``; an OSError propagates, and the temporary file is gone."""
    target = Path(path)
    if target.exists() and not target.is_file():
        write(target)
        return target
    temp = target.with_name(f".{target.stem}.partial-{os.getpid()}{target.suffix}")
    try:
        write(temp)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def write_output(flag: str, path: Path | str, write: Callable[[Path], object]) -> None:
    """``replacing(path, write)``; an OSError becomes a ValueError naming the flag."""
    try:
        replacing(path, write)
    except OSError as exc:
        raise ValueError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)  # hard links and symlinks too
    except OSError:
        pass
    return a.resolve() == b.resolve()


def ensure_distinct(outputs: dict[str, Path | str | None], inputs: dict[str, Path | str | None] | None = None) -> None:
    """No two output flags name the same file (the later write would replace the first, silently),
    and no output is an input file (``--decisions trace.csv`` would overwrite the trace it replays).
    Flags without a path (None) are left out; ``-`` and other non-files (/dev/stdin) are not compared."""
    outs = [(flag, Path(p)) for flag, p in outputs.items() if p not in (None, "", "-")]
    ins = [(flag, Path(p)) for flag, p in (inputs or {}).items() if p not in (None, "", "-")]
    for i, (flag, path) in enumerate(outs):
        for other, other_path in outs[:i]:
            if _same_file(path, other_path):
                raise ValueError(f"{flag}: {path} is also {other}'s file; give each its own")
        for other, other_path in ins:
            if other_path.is_file() and _same_file(path, other_path):
                raise ValueError(f"{flag}: {path} is the {other} file this run reads; writing it would replace it")
