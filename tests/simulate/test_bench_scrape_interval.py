"""e2e/bench_scrape_interval.py: its baseline run is the suite's own, and the other scrape is applied."""

from __future__ import annotations

import pytest

from support import e2e_script
from tritonscale.simulate import suite
from tritonscale.simulate.suite_rerun import run_ours

SCENARIO = suite.Scenario("flash", 15.0, "tight", 0)


@pytest.fixture(scope="module")
def bench():
    return e2e_script.load("bench_scrape_interval")


@pytest.fixture(scope="module")
def rows(bench):
    return bench._run(SCENARIO, suite.SuiteConfig(classes=("flash",)), (bench.SUITE_PROM, (30.0, 60.0)))


def test_the_15_s_run_is_the_suites_own_row(rows):
    # the comparison is against tritonscale as the suite runs it: same arrivals, start and cluster
    ours = run_ours(SCENARIO, suite.SuiteConfig(classes=("flash",)))[0]
    scrape, window, policy, attainment, hours, peak = rows[0]
    assert (scrape, window, policy) == (15.0, 60.0, "tritonscale")
    assert (attainment, hours, peak) == (ours.window_attainment, ours.replica_hours, ours.max_replicas)


def test_each_run_scrapes_as_its_row_says(bench, rows, monkeypatch):
    assert [(s, w, p) for s, w, p, *_ in rows] == [(15.0, 60.0, "tritonscale"), (15.0, 60.0, "keda"),
                                                   (30.0, 60.0, "tritonscale"), (30.0, 60.0, "keda")]
    seen = []

    def recording(arrivals, horizon, policy, opts, calibration):
        seen.append((opts.cluster.prom.scrape_s, opts.cluster.prom.window_s, policy))
        return real(arrivals, horizon, policy, opts, calibration=calibration)

    real = bench.run_benchmark
    monkeypatch.setattr(bench, "run_benchmark", recording)
    again = bench._run(SCENARIO, suite.SuiteConfig(classes=("flash",)), (bench.SUITE_PROM, (30.0, 120.0)))
    assert seen == [(15.0, 60.0, "tritonscale"), (15.0, 60.0, "keda"), (30.0, 120.0, "tritonscale"),
                    (30.0, 120.0, "keda")]
    assert again[:2] == rows[:2]  # the same arrivals and start: the suite's run is reproduced


def test_bad_flags_are_one_line_errors(bench, capsys):
    assert bench.main(["--scrape-s", "0"]) == 1
    assert bench.main(["--seeds", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("bench_scrape_interval: ") for line in err)
