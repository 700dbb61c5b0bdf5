"""e2e/bench_batcher_fixed_fleet.py: each grid config applied to a fixed fleet, and a bad file in one line."""

from __future__ import annotations

import json

import pytest

from support import e2e_script


@pytest.fixture(scope="module")
def bench():
    return e2e_script.load("bench_batcher_fixed_fleet")


def test_each_config_is_served_by_the_fixed_fleet(bench):
    # a 100 ms delay with no preferred size holds every batch for about the whole 104 ms target, so no
    # settled window is met at any fleet; with no delay the same fleet meets most: the configs are applied
    name, n, res = bench.fleet_row(("flash/cold15s/tight/seed0", 10), only=("static 0ms []", "static 100ms []"))
    assert (name, n, set(res)) == ("flash/cold15s/tight/seed0", 10, {"static 0ms []", "static 100ms []"})
    assert res["static 100ms []"] == 0.0 and res["static 0ms []"] > 0.9


def test_a_file_that_is_no_tuner_result_is_one_line(bench, tmp_path, monkeypatch):
    bad = tmp_path / "suite.json"
    bad.write_text(json.dumps({"setup": {}}))
    monkeypatch.setattr("sys.argv", ["bench_batcher_fixed_fleet.py", str(bad)])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert str(e.value).startswith(f"bench_batcher_fixed_fleet: {bad}: not a batching-tuner result")
