"""e2e/bench_batching_tuner.py's replica-model flags: the model every scenario runs (a batch of n costs
a + b*n ms, at most --max-batch), as ``tritonscale simulate --suite`` takes them, and the same default."""

from __future__ import annotations

import pytest

from support import e2e_script
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.suite_scenarios import SuiteConfig


@pytest.fixture
def bench(monkeypatch):
    """The bench, with its scenario runner replaced by one that records the config and runs nothing."""
    mod = e2e_script.load("bench_batching_tuner")
    ran: list = []
    monkeypatch.setattr(mod.tuner_suite, "run_tuner_suite", lambda cfg, progress=None: ran.append(cfg) or [])
    monkeypatch.setattr(mod.tuner_suite, "text", lambda results: "")
    return mod, ran


def test_the_model_flags_set_the_suites_batcher(bench):
    mod, ran = bench
    assert mod.main(["--classes", "flash", "--batch-base-ms", "5", "--batch-item-ms", "5", "--max-batch", "8"]) == 0
    # the scaling config keeps the default 2 ms delay and the preferred sizes of 4,8,16 that fit the model
    assert ran[0].batcher == BatcherConfig(5.0, 5.0, 8, 2.0, (4, 8))


def test_without_the_flags_the_model_is_the_suites_default(bench):
    mod, ran = bench
    assert mod.main(["--classes", "flash"]) == 0
    assert ran[0].batcher == SuiteConfig().batcher


@pytest.mark.parametrize(("argv", "named"), [
    (["--batch-base-ms", "0", "--batch-item-ms", "0"], "--batch-base-ms, --batch-item-ms"),
    (["--max-batch", "0"], "--max-batch"),
    (["--batch-item-ms", "-1"], "--batch-item-ms"),
])
def test_a_model_that_cannot_run_is_a_usage_error_naming_the_flag(bench, capsys, argv, named):
    mod, ran = bench
    with pytest.raises(SystemExit) as exc:
        mod.main(["--classes", "flash", *argv])
    assert exc.value.code == 2 and named in capsys.readouterr().err and ran == []
