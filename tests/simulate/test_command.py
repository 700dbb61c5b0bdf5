"""``tritonscale simulate`` end to end on a short shape: JSON, determinism, plot, errors."""

from __future__ import annotations

import json

import pytest

from tritonscale.simulate.command import main_simulate

FAST = ["--shape", "steps", "--rate", "500", "--duration", "240", "--slo-ms", "150",
        "--max-replicas", "8", "--cold-start-s", "30", "--jobs", "1"]
FIELDS = {"policy", "window_attainment", "request_attainment", "replica_hours", "p95_ms", "scale_events",
          "cold_starts", "cost_vs_oracle", "requests", "p50_ms", "p99_ms"}


def run_json(capsys, *extra: str):
    assert main_simulate([*FAST, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_all_policies_print_one_list_and_are_deterministic(capsys) -> None:
    first = run_json(capsys, "--policy", "all", "--seed", "3")
    assert [r["policy"] for r in first] == ["tritonscale", "hpa", "keda", "kpa", "triton-queue", "slo-ratio",
                                            first[6]["policy"], "oracle"]
    assert first[6]["policy"].startswith("static:")
    for r in first:
        assert FIELDS <= set(r)
        assert 0.0 <= r["window_attainment"] <= 1.0 and 0.0 <= r["request_attainment"] <= 1.0
        assert r["replica_hours"] > 0
    assert first[-1]["cost_vs_oracle"] == 1.0
    assert run_json(capsys, "--policy", "all", "--seed", "3", "--jobs", "2") == first  # jobs change nothing
    other_seed = run_json(capsys, "--policy", "all", "--seed", "4")
    assert other_seed[0]["requests"] != first[0]["requests"]


def test_single_policy_prints_one_object(capsys) -> None:
    out = run_json(capsys, "--policy", "static:3", "--no-oracle")
    assert out["policy"] == "static:3" and out["cold_starts"] == 0 and out["cost_vs_oracle"] is None


def test_table_and_plot(capsys, tmp_path) -> None:
    png = tmp_path / "p.png"
    dec = tmp_path / "d.csv"
    assert main_simulate([*FAST, "--policy", "keda", "--plot", str(png), "--decisions", str(dec)]) == 0
    text = capsys.readouterr().out
    assert "| keda " in text and "capacity at p95 <= 150 ms" in text and "wall time" in text
    assert png.stat().st_size > 10_000
    assert dec.read_text().startswith("policy,t,current,ready,desired,reason\nkeda,15,")  # the HPA's 15 s sync


def test_decisions_carry_the_tuners_verdict_with_the_batching_tuner(capsys, tmp_path) -> None:
    """--batching-tuner --decisions: a last column, batching, with the tuner's reason and message at each
    tick (the rows said nothing of the tuner but its changes, printed at the end)."""
    import csv

    dec = tmp_path / "d.csv"
    assert main_simulate([*FAST, "--policy", "tritonscale", "--no-oracle", "--batching-tuner",
                          "--max-queue-delay-us", "0", "--preferred-batch-sizes", "", "--decisions", str(dec)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(dec.open()))
    assert rows and list(rows[0]) == ["policy", "t", "current", "ready", "desired", "reason", "batching"]
    verdicts = {r["batching"].split(":")[0] for r in rows}
    assert verdicts and "" not in verdicts, verdicts
    assert verdicts <= {"LearningCost", "Idle", "Rollout", "Optimal", "WithinHysteresis", "Confirming", "TooSoon",
                        "MoreCapacity", "MoreHeadroom", "BreachRelief", "Breach", "Bounds"}, verdicts


def test_trace_file(capsys, tmp_path) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text("\n".join(f"{i * 0.01:.2f}" for i in range(12_000)))  # 100 rps for 120 s
    assert main_simulate(["--trace", str(trace), "--slo-ms", "150", "--policy", "tritonscale", "--json",
                          "--no-oracle", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 12_000 and out["window_attainment"] == 1.0


def test_a_trace_at_one_instant_is_refused(capsys, tmp_path) -> None:
    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP\n2023-11-16 18:15:46.6805900\n")
    assert main_simulate(["--trace", str(trace), "--slo-ms", "150"]) == 1
    err = capsys.readouterr().err
    assert "all 1 arrival(s) at one instant" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--slo-ms", "150", "--policy", "hpa"], "give --trace FILE or --shape NAME"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "magic"], "unknown policy 'magic'"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "static:0"], "static:N needs N >= 1"),
    (["--trace", "/nonexistent.csv", "--slo-ms", "150"], "/nonexistent.csv: cannot read"),
    (["--shape", "poisson", "--slo-ms", "10"], "SLO of 10 ms is below what one replica serves"),
    (["--shape", "poisson", "--slo-ms", "abc"], "argument --slo-ms: 'abc' is not a number"),
    (["--shape", "poisson", "--slo-ms", "150", "--duration", "inf"], "argument --duration: 'inf' is not a finite"),
    (["--shape", "poisson", "--slo-ms", "150", "--cold-start-s", "nan"], "argument --cold-start-s: 'nan' is not a"),
    (["--shape", "poisson", "--slo-ms", "150", "--scrape-s", "1e-9"], "argument --scrape-s: '1e-9': must be >= 1"),
    (["--shape", "poisson", "--slo-ms", "150", "--interval-s", "1.5"], "--interval-s: 1.5: the CRD's intervalSeconds"),
    (["--shape", "poisson", "--slo-ms", "150", "--plot", "/tmp/p.json"], "--plot: /tmp/p.json: name the image .png"),
    (["--shape", "poisson", "--slo-ms", "150", "--plot", "/tmp"], "--plot: /tmp is a folder, not a file"),
    (["--shape", "poisson", "--slo-ms", "150", "--decisions", ""], "--decisions: an empty path"),
    # Path("") is the current folder: it said "--plot:  is a folder, not a file" (session 104's CLI fuzzing)
    (["--shape", "poisson", "--slo-ms", "150", "--plot", ""], "--plot: an empty path"),
    (["--shape", "poisson", "--slo-ms", "150", "--rate", "1e-9"], "draws none; raise --rate"),
    # it wrote a file named "-" (an exploratory review's finding)
    (["--shape", "poisson", "--slo-ms", "150", "--decisions", "-"], "--decisions: - (standard output) is not taken"),
    # a static fleet and the oracle never tick: their --decisions file would hold a header only
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "static:3", "--decisions", "/tmp/d.csv"],
     "--decisions: --policy static:3 makes no decisions"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "oracle", "--decisions", "/tmp/d.csv"],
     "--decisions: --policy oracle makes no decisions"),
    (["--shape", "poisson", "--slo-ms", "700000"], "--slo-ms: Input should be less than or equal to 600000"),
    (["--shape", "poisson", "--slo-ms", "150", "--max-replicas", "5000"], "--max-replicas: Input should be less"),
    (["--shape", "poisson", "--slo-ms", "150", "--max-batch", "10000000"],
     "--max-batch: '10000000': must be within 1..4096"),
    (["--trace", "/tmp/x.csv", "--slo-ms", "150", "--duration", "5"], "--duration shapes a --shape"),
    (["--shape", "poisson", "--slo-ms", "150", "--rate-bin-s", "5"], "--rate-bin-s slices a --trace"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "hpa", "--static-replicas", "3"],
     "--static-replicas sizes the static fleet of --policy all"),
    (["--shape", "poisson", "--slo-ms", "150", "--batching-apply", "reload"], "add --batching-tuner"),
    (["--suite", "quick", "--cold-starts", "15,inf"], "--cold-starts: 'inf' is not a finite number"),
    (["--suite", "quick", "--seeds", "1,1"], "--seeds: 1 given more than once"),
    (["--suite", "quick", "--seeds", "x"], "--seeds: cannot read 'x': expected a comma list of integers"),
    (["--suite", "quick", "--seeds", "99999999999999999999"], "--seeds: a count of at most 1000"),
    (["--suite", "quick", "--batching-tuner", "--plot", "/tmp/t.png"], "--plot: the tuner's evaluation"),
    (["--shape", "poisson"], "--slo-ms is required"),
    (["--shape", "poisson", "--slo-ms", "150", "--preferred-batch-sizes", "4,32"],
     "--preferred-batch-sizes: 32 outside 1..16 (--max-batch 16)"),
    # an empty item was skipped: "4,,8" read as [4, 8] (found by an exploratory review)
    (["--shape", "poisson", "--slo-ms", "150", "--preferred-batch-sizes", "4,,8"],
     "--preferred-batch-sizes: expected a comma list of integers, got '4,,8'"),
    (["--shape", "poisson", "--slo-ms", "150", "--scale-down-stabilization-s", "-1"],
     "argument --scale-down-stabilization-s: '-1': must be >= 0"),
    (["--shape", "poisson", "--slo-ms", "150", "--plot", "/dev/null/p.png"],
     "--plot: /dev/null is a file, not a folder"),
    (["--suite", "quick", "--plot", "/dev/null/p.png"], "--plot: /dev/null is a file, not a folder"),
    (["--suite", "quick", "--seeds", "0,-1"], "--seeds: seeds must be >= 0"),
    (["--suite", "quick", "--seeds", "0"], "--seeds: a count must be >= 1"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "all", "--static-replicas", "0"],
     "--static-replicas: '0': must be >= 1"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "all", "--static-replicas", "30"],
     "--static-replicas: 30 must be within --min-replicas..--max-replicas (1..20)"),
    (["--shape", "poisson", "--slo-ms", "150", "--initial-replicas", "50"],
     "--initial-replicas: 50 must be within --min-replicas..--max-replicas (1..20)"),
    (["--shape", "poisson", "--slo-ms", "150", "--min-replicas", "0"], "--min-replicas: '0': must be >= 1"),
    (["--shape", "poisson", "--slo-ms", "150", "--seed", "-1"], "--seed: '-1': must be within 0..4294967295"),
    (["--shape", "poisson", "--slo-ms", "150", "--headroom", "2"], "--headroom: '2': must be in (0, 1]"),
    (["--suite", "quick", "--cold-starts", "-5"], "--cold-starts: '-5': must be >= 0"),
    (["--shape", "poisson", "--slo-ms", "150", "--window-s", "7.5"], "--window-s: 7.5: the CRD's windowSeconds"),
    (["--shape", "poisson", "--slo-ms", "150", "--window-s", "20"], "--window-s 20 holds fewer than two scrapes"),
    # a flag the chosen policy does not read is an error, not dropped
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "keda", "--interval-s", "30"],
     "--interval-s is read by --policy tritonscale (or all); --policy keda does not read it"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "tritonscale", "--headroom", "0.5"],
     "--headroom is read by --policy keda or kpa or triton-queue"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "hpa", "--batching-tuner"], "--batching-tuner is read by"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "oracle", "--no-oracle"], "--no-oracle leaves out"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "static:2", "--initial-replicas", "5"],
     "--initial-replicas is read by --policy tritonscale or hpa"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "static:2", "--window-s", "120"], "--window-s is read by"),
    # the policy's name is checked first: which flags it reads depends on it
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "tritonscal", "--interval-s", "30"],
     "unknown policy 'tritonscal'"),
    (["--shape", "poisson", "--slo-ms", "150", "--rate", "1e12", "--duration", "0.001"], "--rate: 1e+12 rps for"),
    # each message names its flag (they said "HPA utilisation target", "lam value too large", ...)
    (["--shape", "poisson", "--slo-ms", "150", "--hpa-target", "5"], "argument --hpa-target: '5': must be in (0, 1]"),
    # a file named - was looked for ("-: cannot read: No such file or directory")
    (["--trace", "-", "--slo-ms", "150"], "argument --trace: - (standard input) is not read here: give a file name"),
    (["--suite", "quick", "--trace", "-"], "argument --trace: - (standard input) is not read here"),
    (["--shape", "poisson", "--slo-ms", "150", "--min-replicas", "5", "--max-replicas", "3"],
     "--min-replicas 5 is above --max-replicas 3"),
    (["--shape", "poisson", "--slo-ms", "150", "--batch-base-ms", "0", "--batch-item-ms", "0"],
     "--batch-base-ms, --batch-item-ms: both 0"),
    (["--shape", "poisson", "--slo-ms", "150", "--max-queue-delay-us", "1e12"], "--max-queue-delay-us: 1e+12; at most"),
    (["--shape", "steps", "--slo-ms", "150", "--rate", "1e20", "--duration", "600"], "--rate: 1e+20 rps for 600 s"),
    (["--shape", "poisson", "--slo-ms", "150", "--rate", "0.01", "--duration", "1e7"],
     "--duration: 1e+07 s; a replay takes at most"),
    (["--shape", "poisson", "--slo-ms", "150", "--policy", "static:2", "--min-replicas", "5"],
     "static:2: fewer than --min-replicas=5"),
    # the CRD's rule: a REJECT timeout within the queue delay rejects what the batcher holds (it ran)
    (["--shape", "poisson", "--slo-ms", "150", "--queue-timeout-us", "1000"],
     "--queue-timeout-us 1000 must be more than the queue delay (--max-queue-delay-us 2000)"),
    (["--shape", "poisson", "--slo-ms", "150", "--queue-timeout-us", "5000", "--max-queue-delay-us", "5000"],
     "--queue-timeout-us 5000 must be more than the queue delay (--max-queue-delay-us 5000)"),
])
def test_bad_input_is_one_line_and_its_exit_code_says_which_kind(capsys, argv, message) -> None:
    """A command line that does not parse (argparse's ``argument --flag: ...``) exits 2, as for every
    tritonscale command; a value or file refused while preparing the run exits 1."""
    code = main_simulate(argv)
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert code == (2 if err.startswith("tritonscale simulate: error: argument --") else 1), (code, err)


def test_default_preferred_sizes_follow_max_batch(capsys) -> None:
    argv = ["--shape", "poisson", "--rate", "50", "--duration", "120", "--slo-ms", "60", "--policy", "tritonscale",
            "--no-oracle", "--jobs", "1", "--batch-base-ms", "10", "--batch-item-ms", "0"]
    assert main_simulate([*argv, "--max-batch", "1"]) == 0  # [4,8,16] would not fit: none
    assert "max batch 1, queue delay 2000 us, preferred []" in capsys.readouterr().out
    assert main_simulate([*argv, "--max-batch", "8"]) == 0
    assert "preferred [4, 8]" in capsys.readouterr().out
    assert main_simulate([*argv, "--max-batch", "8", "--preferred-batch-sizes", "16"]) == 1  # given: checked
    assert "--preferred-batch-sizes: 16 outside 1..8 (--max-batch 8)" in capsys.readouterr().err


def test_a_failed_plot_write_keeps_the_report(capsys, monkeypatch, tmp_path) -> None:
    """The files are written after the report: a write that fails (a full disk) costs the file,
    not the run -- and names the flag."""
    import errno

    from tritonscale.simulate import command

    def full_disk(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(command, "plot", full_disk)
    argv = ["--shape", "poisson", "--rate", "50", "--duration", "120", "--slo-ms", "150", "--policy", "tritonscale",
            "--no-oracle", "--jobs", "1", "--json", "--plot", str(tmp_path / "p.png")]
    assert main_simulate(argv) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["policy"] == "tritonscale"  # the report is out
    assert captured.err == f"tritonscale simulate: --plot: cannot write {tmp_path / 'p.png'}: No space left on device\n"


def test_a_trace_spanning_ages_is_refused_not_replayed_for_ever(capsys, tmp_path) -> None:
    trace = tmp_path / "huge.txt"
    trace.write_text("0\n1e308\n")
    assert main_simulate(["--trace", str(trace), "--slo-ms", "150", "--policy", "tritonscale", "--no-oracle"]) == 1
    err = capsys.readouterr().err
    assert "a replay takes at most 30" in err and err.count("\n") == 1


def test_seconds_since_the_epoch_replay_from_the_first_arrival(capsys, tmp_path) -> None:
    trace = tmp_path / "epoch.txt"
    trace.write_text("".join(f"{1700158546.68 + 0.05 * i:.3f}\n" for i in range(12_000)))
    assert main_simulate(["--trace", str(trace), "--slo-ms", "150", "--policy", "tritonscale", "--no-oracle",
                          "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["policy"] == "tritonscale" and row["requests"] == 12_000


def test_plain_numbers_say_their_unit_and_trace_unit_changes_it(capsys, tmp_path) -> None:
    """A file of relative milliseconds was replayed as 3.5 days, said as "mean 0 rps"."""
    trace = tmp_path / "ms.txt"
    trace.write_text("".join(f"{200 * i}\n" for i in range(1501)))  # 5 rps for 300 s, in ms
    base = ["--trace", str(trace), "--slo-ms", "150", "--policy", "static:1", "--no-oracle", "--jobs", "1"]
    assert main_simulate(base) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"arrivals: {trace} (timestamps read as seconds; --trace-unit ms if they are milliseconds): "
                     "1,501 requests over 300,000 s (mean 0.005 rps, busiest minute 0.0167 rps)")
    assert main_simulate([*base, "--trace-unit", "ms"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"arrivals: {trace} (timestamps read as milliseconds, --trace-unit ms): "
                     "1,501 requests over 300 s (mean 5 rps, busiest minute 5 rps)")


def test_a_shape_shorter_than_a_window_is_refused(capsys) -> None:
    """A 30 s shape scored "100.0% (1/1)" windows, where a trace that short is refused (auditA, session 82)."""
    base = ["--shape", "poisson", "--slo-ms", "104", "--policy", "static:2", "--no-oracle", "--jobs", "1"]
    assert main_simulate([*base, "--duration", "30"]) == 1
    assert capsys.readouterr().err == (
        "tritonscale simulate: --duration: 30 s, less than one 60 s window (p95 is scored per 60 s, rate() over "
        "--window-s 60): nothing to scale on or score\n")
    assert main_simulate([*base, "--duration", "60"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("requests over 60 s (mean 203 rps, busiest minute 203 rps)"), first


def test_json_lines_in_seconds_are_refused_as_shorter_than_a_window(capsys, tmp_path) -> None:
    """Mooncake's unit is ms: a file in seconds replayed 1,465 requests in 0.3 s."""
    trace = tmp_path / "s.jsonl"
    trace.write_text("".join(f'{{"timestamp": {0.2 * i:.1f}}}\n' for i in range(1501)))
    base = ["--trace", str(trace), "--slo-ms", "150", "--policy", "static:1", "--no-oracle", "--jobs", "1"]
    assert main_simulate(base) == 1
    assert capsys.readouterr().err == (
        f"tritonscale simulate: {trace}: its arrivals span 0.3 s, less than one 60 s window (p95 is scored per "
        "60 s, rate() over --window-s 60): nothing to scale on or score; its timestamps are read as "
        "milliseconds: --trace-unit s if they are seconds\n")
    assert main_simulate([*base, "--trace-unit", "s"]) == 0
    assert "1,501 requests over 300 s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--shape", "poisson", "--slo-ms", "150", "--trace-unit", "ms"], "--trace-unit reads the numbers of a --trace"),
    (["--suite", "quick", "--classes", "steps", "--trace-unit", "ms"], "--trace-unit reads the numbers of a --trace"),
])
def test_trace_unit_needs_a_trace(capsys, argv, message) -> None:
    assert main_simulate(argv) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_span_of_ages_in_seconds_suggests_milliseconds(capsys, tmp_path) -> None:
    trace = tmp_path / "ms.txt"
    trace.write_text("0\n3600000000\n")  # 41.7 days of milliseconds, or 114 years of seconds
    assert main_simulate(["--trace", str(trace), "--slo-ms", "150", "--policy", "static:1", "--no-oracle"]) == 1
    err = capsys.readouterr().err
    assert err.endswith("; its timestamps are read as seconds: --trace-unit ms if they are milliseconds\n")
