"""Output files are replaced whole: a failed write (a full disk, a file size limit) left a truncated CSV or
PNG where a good one had been (an exploration of the CLI, session 55)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tritonscale.output_paths import replacing, write_output


def _half_then_full(p: Path) -> None:
    p.write_text("0123456789" * 100)
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    keep = tmp_path / "keep.csv"
    keep.write_text("precious\n")
    with pytest.raises(ValueError, match=r"^--decisions: cannot write .*keep.csv: No space left on device$"):
        write_output("--decisions", keep, _half_then_full)
    assert keep.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.csv"]


def test_a_whole_write_replaces_the_file_and_keeps_its_suffix_for_the_writer(tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    out.write_text("old")
    seen: list[Path] = []

    def write(p: Path) -> None:
        seen.append(p)
        p.write_text("new")

    assert replacing(out, write) == out
    assert out.read_text() == "new" and seen[0].suffix == ".png" and seen[0] != out  # matplotlib reads the suffix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_a_path_that_is_no_regular_file_is_written_directly() -> None:
    seen: list[Path] = []
    replacing("/dev/null", lambda p: (seen.append(p), p.write_text("x")))
    assert seen == [Path("/dev/null")]
