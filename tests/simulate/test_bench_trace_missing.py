"""The suite's bench scripts without the shared trace: a named trace that is missing is an error, and a
missing default trace skips the trace class and says so (it once dropped it silently)."""

from __future__ import annotations

import pytest

from support import e2e_script


@pytest.fixture(scope="module")
def tuner_bench():
    return e2e_script.load("bench_batching_tuner")


def test_a_named_trace_that_is_missing_is_an_error(tuner_bench, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tuner_bench.tuner_suite, "run_tuner_suite",
                        lambda *a, **k: pytest.fail("ran without its trace"))
    assert tuner_bench.main(["--trace", str(tmp_path / "nope.csv")]) == 1
    assert f"--trace {tmp_path / 'nope.csv'}: no such file" in capsys.readouterr().err


def test_a_missing_default_trace_skips_the_class_and_says_so(tuner_bench, tmp_path, capsys, monkeypatch):
    ran = []

    def recording(cfg, progress=None):
        ran.append(cfg.classes)
        return []

    monkeypatch.setattr(tuner_bench, "REPO", tmp_path)  # a checkout without ../shared beside it
    monkeypatch.setattr(tuner_bench.tuner_suite, "run_tuner_suite", recording)
    monkeypatch.setattr(tuner_bench.tuner_suite, "text", lambda results: "")
    assert tuner_bench.main(["--classes", "flash,trace"]) == 0
    assert ran == [("flash",)]
    assert "the trace class is skipped" in capsys.readouterr().err


def test_the_trace_class_runs_when_its_trace_exists(tuner_bench, tmp_path, monkeypatch):
    ran = []
    trace = tmp_path / "t.txt"
    trace.write_text("0\n1\n")
    monkeypatch.setattr(tuner_bench.tuner_suite, "run_tuner_suite", lambda cfg, progress=None: ran.append(cfg) or [])
    monkeypatch.setattr(tuner_bench.tuner_suite, "text", lambda results: "")
    assert tuner_bench.main(["--classes", "flash,trace", "--trace", str(trace)]) == 0
    assert ran[0].classes == ("flash", "trace") and ran[0].trace_path == str(trace)
