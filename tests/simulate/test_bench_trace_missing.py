"""The suite's bench scripts without the shared trace: a named trace that is missing is an error, and a
missing default trace skips the trace class and says so (it once dropped it silently). All three take
the trace through ``suite.benchmark_trace``."""

from __future__ import annotations

import pytest

from support import e2e_script
from tritonscale.simulate import suite

# each bench and the name of the function it runs the scenarios with, in the module that holds it
BENCHES = {
    "bench_suite": ("run_suite", None),
    "bench_batching_tuner": ("run_tuner_suite", "tuner_suite"),
    "bench_connection_routing": ("fork_map", "suite"),
}


def _trace(path, seconds: int = 400, per_second: int = 20):
    """A trace long enough to score and dense enough to scale: ``per_second`` arrivals a second."""
    path.write_text("".join(f"{i / per_second:.3f}\n" for i in range(seconds * per_second)))
    return path


def _stub_runs(bench, name: str, monkeypatch) -> list:
    """Replace the bench's scenario runner (and what reports its results) with stubs that record the
    config and run nothing."""
    fn, holder = BENCHES[name]
    ran: list = []
    target = getattr(bench, holder) if holder else bench
    if fn == "fork_map":
        monkeypatch.setattr(target, "prepare", lambda cfg, todo: ran.append(cfg))
        monkeypatch.setattr(target, "fork_map", lambda f, todo, cfg, jobs: [[] for _ in todo])
    else:
        monkeypatch.setattr(target, fn, lambda cfg, progress=None: ran.append(cfg) or [])
    if name == "bench_suite":
        monkeypatch.setattr(bench.suite_report, "text", lambda cfg, results: "## Summary\n")
        monkeypatch.setattr(bench.suite_report, "plot", lambda results, path: None)
        monkeypatch.setattr(bench, "to_dict", lambda cfg, results, wall: {"check": {"failing": []}, "scenarios": []})
    if name == "bench_batching_tuner":
        monkeypatch.setattr(bench.tuner_suite, "text", lambda results: "")
    return ran


@pytest.fixture(params=sorted(BENCHES))
def bench(request):
    return request.param, e2e_script.load(request.param)


def test_a_named_trace_that_is_missing_is_an_error(bench, tmp_path, capsys, monkeypatch):
    name, mod = bench
    ran = _stub_runs(mod, name, monkeypatch)
    assert mod.main(["--trace", str(tmp_path / "nope.csv")]) == 1
    assert f"{name}: --trace {tmp_path / 'nope.csv'}: no such file" in capsys.readouterr().err
    assert ran == []


def test_a_named_trace_too_short_to_score_is_an_error(bench, tmp_path, capsys, monkeypatch):
    name, mod = bench
    ran = _stub_runs(mod, name, monkeypatch)
    short = _trace(tmp_path / "short.txt", seconds=10)
    assert mod.main(["--trace", str(short)]) == 1
    assert "the suite scores" in capsys.readouterr().err and ran == []


def test_a_missing_default_trace_skips_the_class_and_says_so(bench, tmp_path, capsys, monkeypatch):
    name, mod = bench
    ran = _stub_runs(mod, name, monkeypatch)
    monkeypatch.setattr(mod, "REPO", tmp_path)  # a checkout without ../shared beside it
    assert mod.main(["--classes", "flash,trace"] if name != "bench_suite" else
                    ["--out", str(tmp_path / "out")]) == 0
    assert "trace" not in ran[0].classes and ran[0].trace_path is None
    assert "the trace class is skipped" in capsys.readouterr().err


def test_the_trace_class_runs_when_its_trace_exists(tmp_path, monkeypatch):
    mod = e2e_script.load("bench_batching_tuner")
    ran = _stub_runs(mod, "bench_batching_tuner", monkeypatch)
    trace = _trace(tmp_path / "t.txt")
    assert mod.main(["--classes", "flash,trace", "--trace", str(trace)]) == 0
    assert ran[0].classes == ("flash", "trace") and ran[0].trace_path == str(trace)


@pytest.mark.parametrize(("classes", "given", "default_exists", "expected"), [
    (("flash",), None, False, (None, ("flash",))),                 # no trace class: nothing read
    (("flash", "trace"), None, False, (None, ("flash",))),         # the default missing: the class left out
    (("flash", "trace"), None, True, ("default", ("flash", "trace"))),
    (("flash", "trace"), "given", False, ("given", ("flash", "trace"))),
])
def test_benchmark_trace_resolves_the_trace_and_the_classes(tmp_path, classes, given, default_exists, expected):
    repo = tmp_path / "repo"
    repo.mkdir()
    default = repo / suite.DEFAULT_TRACE
    if default_exists:
        default.parent.mkdir(parents=True)
        _trace(default)
    named = _trace(tmp_path / "given.txt") if given else None
    paths = {"default": str(default), "given": str(named), None: None}
    assert suite.benchmark_trace(classes, named, repo) == (paths[expected[0]], expected[1])


def test_benchmark_trace_refuses_a_sparse_trace(tmp_path):
    sparse = tmp_path / "sparse.txt"
    sparse.write_text("".join(f"{i * 15.0}\n" for i in range(40)))  # 40 arrivals over 585 s: one slice
    with pytest.raises(ValueError, match="too sparse to scale"):
        suite.benchmark_trace(("trace",), sparse, tmp_path)
