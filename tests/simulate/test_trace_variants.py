"""e2e/trace_variants.py: rearrangements of a real trace that keep its bursts."""

from __future__ import annotations

import numpy as np
import pytest

from support import e2e_script
from tritonscale.simulate.arrivals import load_trace


@pytest.fixture(scope="module")
def tv():
    return e2e_script.load("trace_variants")


def test_variants_keep_the_gaps_rearranged(tv):
    t = np.array([0.0, 1.0, 1.5, 4.0, 10.0])
    v = tv.variants(t)
    assert np.allclose(v["reverse"], [0.0, 6.0, 8.5, 9.0, 10.0])  # the gaps, last first
    assert np.allclose(v["shift"], [5.0, 5.0, 6.0, 6.5, 9.0])  # rotated by half the span
    assert np.allclose(v["stretch"], [0.0, 2.0, 3.0, 8.0, 20.0])
    assert len(v["squeeze"]) == 10 and np.allclose(v["squeeze"][:5], t / 2)
    assert np.allclose(np.sort(np.diff(v["reverse"])), np.sort(np.diff(t)))


def test_the_command_writes_files_the_trace_loader_reads(tv, tmp_path, monkeypatch):
    src = tmp_path / "arrivals.txt"
    src.write_text("\n".join(str(x) for x in (5.0, 6.0, 8.0, 11.0)) + "\n")
    monkeypatch.setattr("sys.argv", ["trace_variants.py", str(tmp_path / "out"), "--trace", str(src)])
    assert tv.main() == 0
    back = load_trace(str(tmp_path / "out" / "reverse.txt"))
    assert np.allclose(back, [0.0, 3.0, 5.0, 6.0])


def test_a_missing_trace_is_one_line_on_stderr(tv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["trace_variants.py", str(tmp_path), "--trace", str(tmp_path / "none.csv")])
    assert tv.main() == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.csv: no such file" in err
