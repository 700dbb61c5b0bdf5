"""The scenario suite: traffic classes, scaling to a static peak, honest scoring, dominance,
the criteria, the CLI -- and the quick subset CI runs (one scenario per traffic class)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from support.documented_fields import documented_json_fields
from tritonscale.simulate import suite, suite_rerun, traffic
from tritonscale.simulate.command import main_simulate
from tritonscale.simulate.policies.oracle import window_needs
from tritonscale.simulate.replica import BatcherConfig, Replica
from tritonscale.simulate.report import quantiles_ms, window_p95_ms
from tritonscale.simulate.suite import Row, Scenario, ScenarioResult, SuiteConfig

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"


@pytest.mark.parametrize("cls", traffic.SYNTHETIC)
def test_class_profiles_peak_at_one_and_differ_by_seed(cls):
    a = traffic.profile(cls, 0, 1800.0)
    assert len(a) == 1800 and a.min() > 0
    per_minute = a[: len(a) // 60 * 60].reshape(-1, 60).mean(axis=1)
    assert per_minute.max() == pytest.approx(1.0)
    assert np.array_equal(a, traffic.profile(cls, 0, 1800.0))  # deterministic
    assert not np.array_equal(a, traffic.profile(cls, 1, 1800.0))  # a seed is a new instance
    assert np.all(a[: int(traffic.LEAD_IN_S)] == a[0])  # every instance opens flat


def test_bursty_classes_jump_and_smooth_ones_do_not():
    def biggest_step(cls):
        return max(np.max(np.diff(traffic.profile(cls, s, 3600.0))) for s in range(3))

    assert biggest_step("flash") > 0.5 and biggest_step("onoff") > 0.5 and biggest_step("steps") > 0.3
    assert biggest_step("diurnal") < 0.01
    # a sawtooth falls at once, but rises only along its ramps (until session 62 each ramp after the
    # first began with a jump from the last trough to its own start, of up to 2x)
    assert biggest_step("ramps") < 0.01
    assert np.min(np.diff(traffic.profile("ramps", 0, 3600.0))) < -0.3


def test_scenarios_are_scaled_so_the_busiest_minute_needs_the_peak():
    cfg = SuiteConfig(classes=("steps",), duration_s=1800.0)
    arr, horizon, _ = suite.scenario_arrivals(Scenario("steps", 60.0, "tight", 0), cfg, capacity_rps=300.0)
    per_minute = np.bincount((arr // 60).astype(int)) / 60.0
    assert per_minute.max() == pytest.approx(cfg.peak_replicas * 300.0, rel=0.05)
    assert horizon == 1800.0


def test_slo_levels_are_relative_to_the_full_batch_time():
    cfg = SuiteConfig(batcher=BatcherConfig(base_ms=10.0, per_item_ms=5.0, max_batch=8, preferred=(4, 8)))
    assert cfg.slo_ms("tight") == pytest.approx(2 * 50.0) and cfg.slo_ms("loose") == pytest.approx(6 * 50.0)


def test_rejected_requests_are_misses_so_shedding_cannot_raise_attainment():
    r = Replica(0, 0.0, 0.0, BatcherConfig(base_ms=20, per_item_ms=2, max_batch=4, preferred=(4,),
                                           queue_timeout_ms=100.0))
    t = np.sort(np.random.default_rng(0).uniform(0, 60, 12000))  # 200 rps on a 143 rps replica
    r.add(t)
    r.advance(np.inf, np.inf)
    lat = r.latencies()
    assert np.isinf(lat).any()  # some were rejected
    wp = window_p95_ms(t, lat, 60.0, 60.0)
    assert np.isinf(wp[0]) or wp[0] > 100.0  # the window misses: rejects count as misses


@pytest.mark.parametrize("served", [14, 15, 16, 20, 33, 99])
def test_a_p95_between_a_served_latency_and_a_rejection_is_a_rejection(served):
    """np.quantile interpolates between the order statistics around 0.95 x (n - 1): with a rejection
    above, the p95 sat between a served latency and the stand-in, and 4e14 ms was printed as a p95."""
    lat = np.r_[np.full(served, 0.020), np.full(2, np.inf)]  # 2 of 16-101 rejected
    t = np.linspace(0.0, 59.0, len(lat))
    (wp,) = window_p95_ms(t, lat, 60.0, 60.0)
    exact = np.quantile(np.r_[np.full(served, 0.020), np.full(2, 1e3)], 0.95)  # with a finite stand-in
    assert np.isinf(wp) if exact > 0.020 + 1e-9 else wp == pytest.approx(20.0)
    (q,) = quantiles_ms(lat, [0.95])
    assert np.isinf(q) == np.isinf(wp)


def test_window_p95_per_window_of_arrival():
    # four 60 s windows: 100 requests at 10 ms, none, 100 with 6 rejected (over 5%: inf), and 100
    # at 30 ms plus 100 at 40 ms arriving past the horizon, which count in the last window
    t = np.concatenate([np.linspace(0.0, 59.9, 100), np.linspace(120.0, 179.9, 100), np.linspace(180.0, 239.9, 100),
                        np.linspace(240.0, 299.0, 100)])
    lat = np.concatenate([np.full(100, 0.010), np.r_[np.full(94, 0.020), np.full(6, np.inf)], np.full(100, 0.030),
                          np.full(100, 0.040)])
    wp = window_p95_ms(t, lat, 60.0, 210.0)
    assert len(wp) == 4
    assert wp[0] == pytest.approx(10.0) and np.isnan(wp[1]) and np.isinf(wp[2])
    assert wp[3] == pytest.approx(40.0)  # 95% of 30 ms and 40 ms alike reads 40
    assert window_p95_ms(t[:100], lat[:100], 60.0, 0.0).tolist() == [pytest.approx(10.0)]


def _row(policy, att, hours, peak=4):
    return Row(policy, att, 60, round((1 - att) * 60), hours, hours / 5.0, peak, peak / 4, 0, 0, 50.0)


def _result(cls, rows):
    return ScenarioResult(Scenario(cls, 60.0, "tight", 0), 100.0, 1000, "", 8, 4, True,
                          [*rows, _row("oracle", 1.0, 5.0)])


def test_dominance_and_the_criteria():
    res = _result("steps", [_row("tritonscale", 0.95, 6.0), _row("keda", 0.95, 5.5), _row("static:8", 1.0, 8.0)])
    assert res.dominators("tritonscale") == ["keda"]  # as good, cheaper
    assert res.dominators("static:8") == []
    v = suite.check(res)
    assert not v.holds and any("dominated by keda" in f for f in v.failures)
    ok = _result("steps", [_row("tritonscale", 0.95, 6.0), _row("keda", 0.90, 5.5), _row("static:8", 1.0, 8.0)])
    assert suite.check(ok).holds  # bursty: >= 90%, no costlier than static, not dominated
    costly = _result("steps", [_row("tritonscale", 0.97, 8.5), _row("static:8", 1.0, 8.0)])
    assert any("static peak fleet" in f for f in suite.check(costly).failures)
    smooth = _result("diurnal", [_row("tritonscale", 0.983, 6.0), _row("static:8", 1.0, 8.0)])
    assert any("99%" in f for f in suite.check(smooth).failures)
    peaky = _result("diurnal", [_row("tritonscale", 1.0, 6.0, peak=6), _row("static:8", 1.0, 8.0)])
    assert any("peak 6 > ceil(1.25 x oracle peak 4) = 5" in f for f in suite.check(peaky).failures)


@pytest.mark.parametrize(("argv", "message"), [
    (["--suite", "--classes", "nope"], "unknown traffic class"),
    (["--suite", "--slos", "medium"], "unknown SLO level"),
    (["--suite", "--cold-starts", "x"], "--cold-starts"),
    (["--suite", "--classes", "trace", "--trace", "/nonexistent/trace.csv"], "/nonexistent/trace.csv"),
    (["--suite", "quick", "--jobs", "0"], "--jobs: '0': must be >= 1"),
    (["--suite", "quick", "--duration", "1e8"], "--duration: 1e+08 s; a suite scenario runs 600 s"),
    (["--suite", "quick", "--duration", "300"], "--duration: 300 s; a suite scenario runs 600 s"),
    (["--suite", "quick", "--peak-replicas", "25"], "--peak-replicas: 25 must be within --min-replicas.."),
    (["--suite", "quick", "--peak-replicas", "0"], "argument --peak-replicas: '0': must be >= 1"),
    (["--suite", "quick", "--batch-base-ms", "0", "--batch-item-ms", "0"], "--batch-base-ms, --batch-item-ms"),
    (["--suite", "quick", "--batching-tuner", "--jobs", "-1"], "--jobs: '-1': must be >= 1"),
    # flags of one replay, which the suite sets per scenario, are refused, not dropped
    (["--suite", "quick", "--cold-start-s", "90"], "--cold-start-s sets one replay, not --suite (use --cold-starts)"),
    (["--suite", "--seed", "3"], "--seed sets one replay, not --suite (use --seeds)"),
    (["--suite", "--slo-ms", "100"], "--slo-ms sets one replay, not --suite (use --slos)"),
    (["--suite", "--policy", "keda"], "--policy sets one replay, not --suite (the suite runs every policy)"),
    (["--suite", "--interval-s", "30"], "--interval-s sets one replay, not --suite"),
    # ... at their default values too: `--cold-start-s 60` ran all three cold starts, silently
    (["--suite", "quick", "--cold-start-s", "60"], "--cold-start-s sets one replay, not --suite (use --cold-starts)"),
    (["--suite", "--seed", "0"], "--seed sets one replay, not --suite (use --seeds)"),
    (["--suite", "--policy", "all"], "--policy sets one replay, not --suite"),
    (["--suite", "quick", "--batching-tuner", "--reload-pause-s", "30"],
     "--reload-pause-s is the pause of --batching-apply reload; a rollout does not read it"),
    (["--suite", "quick", "--batching-tuner", "--decisions", "d.csv"], "--decisions: the tuner's evaluation"),
    (["--suite", "quick", "--classes", "flash", "--trace", "/nonexistent"], "--trace: the suite replays it only in"),
    (["--suite", "quick", "--batching-apply", "reload"], "--batching-apply: how a tuned batcher is applied"),
    (["--suite", "quick", "--reload-pause-s", "30"], "--reload-pause-s: how a tuned batcher is applied"),
    # ... and the suite's flags without --suite
    (["--shape", "steps", "--slo-ms", "150", "--cold-starts", "90"], "--cold-starts is a --suite flag"),
    (["--shape", "steps", "--slo-ms", "150", "--seeds", "3"], "--seeds is a --suite flag"),
    (["--shape", "steps", "--slo-ms", "150", "--check"], "--check is a --suite flag"),
    (["--shape", "steps", "--slo-ms", "150", "--ranges", "wide"], "--ranges is a --suite flag"),
    (["--shape", "steps", "--slo-ms", "150", "--ranges", "suite"], "--ranges is a --suite flag"),
    (["--shape", "steps", "--slo-ms", "150", "--batching-tuner", "--reload-pause-s", "30"],
     "--reload-pause-s is the pause of --batching-apply reload; a rollout does not read it"),
    (["--trace", "x.csv", "--slo-ms", "150", "--duration", "3600"], "--duration shapes a --shape"),
])
def test_suite_bad_input_is_one_line(capsys, argv, message):
    code = main_simulate(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]
    assert code == (2 if err[0].startswith("tritonscale simulate: error: argument --") else 1), (code, err)


def test_suite_decisions_name_the_scenario_of_every_tick(capsys, tmp_path):
    dec = tmp_path / "d.csv"
    argv = ["--suite", "quick", "--classes", "steps", "--duration", "600", "--brief", "--jobs", "1",
            "--decisions", str(dec)]
    assert main_simulate(argv) == 0
    rows = list(csv.reader(dec.read_text().splitlines()))
    assert rows[0] == ["scenario", "policy", "t", "current", "ready", "desired", "reason"]
    assert {r[0] for r in rows[1:]} == {"steps/cold60s/tight/seed0"}
    ours = [r for r in rows[1:] if r[1] == "tritonscale"]
    assert len(ours) >= 600 // 15 - 2 and all(r[6] for r in ours)  # a tick every 15 s, each with its reason
    assert {"keda", "hpa"} <= {r[1] for r in rows[1:]}


def test_the_trace_class_replays_the_first_duration_seconds_of_a_long_trace(tmp_path):
    trace = tmp_path / "long.txt"
    trace.write_text("\n".join(f"{i * 0.5:.1f}" for i in range(8000)))  # 2 rps for 4000 s
    cfg = SuiteConfig(classes=("trace",), duration_s=900.0, trace_path=str(trace))
    arr, horizon, _ = suite.scenario_arrivals(Scenario("trace", 60.0, "tight", 0), cfg, capacity_rps=300.0)
    assert horizon == 900.0 and arr.max() < 910.0
    assert len(arr) == pytest.approx(900 * 8 * 300.0, rel=0.05)  # still scaled: the busiest minute needs 8


def test_a_sparse_trace_whose_last_slice_is_its_busiest_is_scaled_to_the_peak(tmp_path):
    """The peak was counted over whole slices while the draw divides the last, partial one by its own
    width: 120 arrivals over 1000 s, half of them in the last 166 s (its slices are 417 s, for 50
    arrivals each), drew a busiest minute the oracle served with 18 replicas where the suite asks 8."""
    trace = tmp_path / "burst_at_end.txt"
    trace.write_text("\n".join(f"{x:.3f}" for x in [*np.linspace(0, 833, 60), *np.linspace(834, 1000, 60)]))
    cfg = SuiteConfig(classes=("trace",), trace_path=str(trace))
    sc = Scenario("trace", 60.0, "tight", 0)
    cal = suite._calibration(cfg.batcher, cfg.slo_ms("tight"))
    arr, horizon, _ = suite.scenario_arrivals(sc, cfg, cal.capacity_rps)
    needs = window_needs(arr, horizon, suite._cluster(cfg, sc), cfg.slo_ms("tight"), cal.capacity_rps)
    assert max(needs) == cfg.peak_replicas


def test_a_trace_too_sparse_to_scale_is_refused(capsys, tmp_path):
    """Arrivals at 0 and 300 s were one 7,500 s slice, scaled x8,007,201 into 16 M requests."""
    trace = tmp_path / "two.txt"
    trace.write_text("0\n300\n")
    assert main_simulate(["--suite", "--classes", "trace", "--trace", str(trace), "--duration", "600"]) == 1
    assert capsys.readouterr().err == (
        f"tritonscale simulate: {trace}: 2 arrivals over 300 s are too sparse to scale: the suite takes a trace's "
        "rate per slice of at least 50 arrivals (here 7500 s), so all of it would be one slice, replayed as a flat "
        "rate\n")


def test_the_trace_class_reads_trace_unit(tmp_path):
    trace = tmp_path / "ms.txt"
    trace.write_text("\n".join(str(i * 500) for i in range(2000)))  # 2 rps for 1000 s, in milliseconds
    cfg = SuiteConfig(classes=("trace",), duration_s=900.0, trace_path=str(trace), trace_unit="ms")
    _, horizon, _ = suite.scenario_arrivals(Scenario("trace", 60.0, "tight", 0), cfg, capacity_rps=300.0)
    assert horizon == 900.0
    doc = suite.to_dict(cfg, [], 0.0)
    assert doc["setup"]["trace_unit"] == "ms"  # and a re-run reads the trace in it
    doc["scenarios"] = [{"class": "trace", "slo": "tight", "cold_start_s": 60.0, "seed": 0}]
    assert suite_rerun.config_from_json(doc, str(trace)).trace_unit == "ms"


def test_a_trace_shorter_than_the_duration_says_its_own_span(capsys, tmp_path):
    """setup.duration_s said 600 while the 400 s trace's scenarios scored 7 windows (an exploratory
    review's finding): each scenario gives the seconds it simulated and scored."""
    trace = tmp_path / "t400.txt"
    trace.write_text("\n".join(f"{i * 0.25:.2f}" for i in range(1601)))  # 4 rps for 400 s
    assert main_simulate(["--suite", "--classes", "trace", "--trace", str(trace), "--cold-starts", "15",
                          "--slos", "tight", "--seeds", "0,", "--duration", "600", "--json"]) in (0, 3)
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["duration_s"] == 600.0
    (scenario,) = out["scenarios"]
    assert scenario["duration_s"] == 400.0
    assert {p["windows"] for p in scenario["policies"]} == {7}  # 60 s windows over 400 s, the last one partial


def test_a_trace_too_short_to_score_is_refused_before_any_scenario_runs(capsys, tmp_path):
    trace = tmp_path / "short.txt"
    trace.write_text("\n".join(f"{i * 0.5:.1f}" for i in range(200)))  # 99.5 s
    assert main_simulate(["--suite", "quick", "--classes", "steps,trace", "--trace", str(trace)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tritonscale simulate: {trace}: its arrivals span 99.5 s; the suite scores 60 s windows "
                   "and needs a trace of at least 300 s"]


def test_quick_suite_in_ci(capsys, tmp_path):
    """One scenario per traffic class (cold start 60 s, tight SLO, seed 0): every policy on the same
    arrivals, the JSON carries the tables, summary and criteria, and tritonscale is on the frontier --
    no other policy (the oracle aside) dominates it, its peak stays within ceil(1.25 x the oracle's),
    and on bursty classes it meets >= 90% of windows at no more than the static peak fleet's cost."""
    argv = ["--suite", "quick", "--json", "--plot", str(tmp_path / "suite.png")]
    if TRACE.exists():
        argv += ["--trace", str(TRACE)]
    else:
        argv += ["--classes", ",".join(traffic.SYNTHETIC)]
    assert main_simulate(argv) == 0
    # standard JSON: no Infinity or NaN (KPA's p95 is infinite in most scenarios), which strict parsers refuse
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in the suite's JSON"))
    assert (tmp_path / "suite.png").stat().st_size > 10_000
    assert out["setup"]["routing"].startswith("round-robin")
    assert "rejected" in out["setup"]["attainment"]
    names = {s["class"] for s in out["scenarios"]}
    assert names >= set(traffic.SYNTHETIC)
    for s in out["scenarios"]:
        if s["class"] != "trace":
            assert s["duration_s"] == out["setup"]["duration_s"], s["name"]
        policies = [p["policy"] for p in s["policies"]]
        assert policies[:6] == ["tritonscale", "hpa", "keda", "kpa", "triton-queue", "slo-ratio"]
        assert policies[6].startswith("static:") and policies[-1] == "oracle"
        me = s["policies"][0]
        assert me["dominated_by"] == [], (s["name"], me)
        assert me["max_replicas"] <= -(-5 * s["oracle_peak"] // 4), (s["name"], me)
        if s["class"] in traffic.BURSTY:
            static = s["policies"][6]
            assert me["window_attainment"] >= 0.9 and me["replica_hours"] <= static["replica_hours"], (s["name"], me)
    assert {p["policy"] for p in out["summary"]} >= {"tritonscale", "hpa", "keda", "kpa", "static", "oracle"}
    # every field is one the simulator's README documents for other tooling
    fields = set(out) | set(out["setup"]) | set(out["setup"]["replica"]) | set(out["check"])
    fields |= {k for s in out["scenarios"] for k in s} | {k for s in out["scenarios"] for p in s["policies"] for k in p}
    fields |= {k for s in out["scenarios"] for k in s["tritonscale_check"]} | {k for p in out["summary"] for k in p}
    fields |= {k for f in out["check"]["failing"] for k in f}
    assert fields - documented_json_fields("suite") == set()
    # tritonscale alone, re-run on a stored scenario (e2e/bench_suite_rerun.py), reproduces its stored row
    stored = next(s for s in out["scenarios"] if s["class"] == "steps")
    again = suite_rerun.rerun(stored, suite_rerun.config_from_json(out, None))
    assert again.row("tritonscale").__dict__ == {k: stored["policies"][0][k] for k in Row.__dataclass_fields__}
    assert suite.check(again).holds == stored["tritonscale_check"]["holds"]
    assert [r.policy for r in again.rows] == [p["policy"] for p in stored["policies"]]
    # other arrivals than the stored run's (another trace) are refused, not scored against its rows
    with pytest.raises(ValueError, match="not the traffic it ran on"):
        suite_rerun.rerun({**stored, "requests": stored["requests"] + 1}, suite_rerun.config_from_json(out, None))
    # the result names the trace the trace class ran on, for the re-run to replay
    assert out["setup"]["trace"] == (str(TRACE.resolve()) if TRACE.exists() else None)
    # the result says how Prometheus scraped, and a re-run scrapes the same way; results from before
    # the key existed were all scraped at the ticks' instants
    assert out["setup"]["scrapes"] == suite.SCRAPES[True] and suite_rerun.config_from_json(out, None).scrape_spread
    legacy = {**out, "setup": {k: v for k, v in out["setup"].items() if k != "scrapes"}}
    assert suite_rerun.config_from_json(legacy, None).scrape_spread is False
    # ... and which parameter ranges the classes were drawn from (results without the key: the suite's)
    assert out["setup"]["ranges"] == "suite"
    assert suite_rerun.config_from_json({**out, "setup": {**out["setup"], "ranges": "wide"}}, None).ranges == "wide"
    assert suite_rerun.config_from_json({**legacy, "setup": {k: v for k, v in legacy["setup"].items()
                                                             if k != "ranges"}}, None).ranges == "suite"


@pytest.mark.parametrize("doc", [{}, {"setup": {"replica": {}}, "scenarios": []}, {"setup": None, "scenarios": []}])
def test_a_rerun_refuses_what_is_not_a_suite_result(doc):
    with pytest.raises(ValueError, match="not a suite result"):
        suite_rerun.config_from_json(doc, None)


def _square_after(item, cfg):  # a fork_map worker: the later items finish first
    import time
    time.sleep(0.05 * (3 - item))
    return item * item


@pytest.mark.parametrize("jobs", [1, 2])
def test_fork_map_tells_progress_as_items_finish_and_keeps_the_items_order(jobs):
    told = []
    out = suite.fork_map(_square_after, [0, 1, 2, 3], SuiteConfig(), jobs, progress=lambda d, t: told.append((d, t)))
    assert out == [0, 1, 4, 9]
    assert told == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_progress_on_stderr_at_the_first_each_tenth_and_the_last(capsys):
    from tritonscale.simulate.suite_command import stderr_progress

    report = stderr_progress("suite", started=0.0)
    for done in range(1, 127):
        report(done, 126)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == [
        f"suite: {d}/126 scenarios done" for d in (1, 13, 26, 38, 51, 63, 76, 89, 101, 114, 126)]
    assert all(line.endswith(" s") for line in lines)


def _fail_first(item, cfg):
    import time
    n, where = item
    (where / f"started-{n}").touch()
    if n == 0:
        raise ValueError("item 0 is bad")
    time.sleep(1.0)
    return n


def test_fork_map_stops_at_a_failed_item_without_running_the_rest(tmp_path):
    with pytest.raises(ValueError, match="item 0 is bad"):
        suite.fork_map(_fail_first, [(n, tmp_path) for n in range(8)], SuiteConfig(), 2)
    # item 0 fails at once; the other worker may have started one or two items by then, and the
    # queued rest are cancelled, not run before the error is raised
    assert len(list(tmp_path.glob("started-*"))) <= 3


def test_check_exit_code_tells_a_missed_criterion_from_bad_input(capsys, monkeypatch):
    """``--check``: 0 when every scenario holds, CHECK_FAILED (3) when one misses; a command line that
    does not parse stays 2 and a refused value 1, so CI tells a typo from a miss."""
    from tritonscale import cli
    from tritonscale.simulate import suite_command
    from tritonscale.simulate.suite import Verdict

    argv = ["simulate", "--suite", "quick", "--classes", "steps", "--duration", "600", "--brief", "--jobs", "1",
            "--check"]
    monkeypatch.setattr(suite_command, "check", lambda r: Verdict(r.scenario.name, True, ()))
    assert cli.main(argv) == 0
    monkeypatch.setattr(suite_command, "check", lambda r: Verdict(r.scenario.name, False, ("a criterion missed",)))
    assert cli.main(argv) == suite_command.CHECK_FAILED == 3
    with pytest.raises(SystemExit) as usage:
        cli.main([*argv, "--classez", "steps"])
    assert usage.value.code == 2
    assert cli.main([*argv, "--classes", "nope"]) == 1
    capsys.readouterr()


def test_an_output_may_not_overwrite_another_or_the_trace(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(f"{i * 0.01:.2f}" for i in range(12_000)))
    before = trace.read_text()
    base = ["--slo-ms", "150", "--policy", "tritonscale", "--no-oracle", "--jobs", "1"]
    assert main_simulate(["--trace", str(trace), *base, "--decisions", str(trace)]) == 1
    assert "--decisions: " in capsys.readouterr().err and trace.read_text() == before
    same = str(tmp_path / "x.png")
    assert main_simulate(["--trace", str(trace), *base, "--plot", same, "--decisions", same]) == 1
    assert "is also --plot's file" in capsys.readouterr().err and not (tmp_path / "x.png").exists()
    assert main_simulate(["--suite", "quick", "--classes", "trace", "--trace", str(trace), "--decisions",
                          str(tmp_path / "." / "trace.csv")]) == 1
    assert "this run reads" in capsys.readouterr().err and trace.read_text() == before
    # ... the shared trace the suite finds by itself too
    from tritonscale.simulate.suite_command import DEFAULT_TRACE, REPO

    shared = REPO / DEFAULT_TRACE  # ../shared beside the checkout, as CI has it
    assert shared.exists() and main_simulate(["--suite", "quick", "--decisions", str(shared)]) == 1
    assert "--decisions: " in capsys.readouterr().err


@pytest.mark.parametrize("sc", [suite.Scenario("flash", 15.0, "tight", 0), suite.Scenario("trace", 180.0, "loose", 12),
                                suite.Scenario("randomwalk", 7.5, "tight", 3)])
def test_a_scenario_is_read_back_from_its_name(sc):
    assert suite.Scenario.from_name(sc.name) == sc


@pytest.mark.parametrize("name", ["flash/cold15s/tight", "flash/coldXs/tight/seed0", "flash/cold15s/tight/seedK"])
def test_a_name_that_is_no_scenario_is_a_value_error(name):
    with pytest.raises(ValueError):
        suite.Scenario.from_name(name)
