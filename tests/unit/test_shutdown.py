"""How a replica stops (api/shutdown.py): the preStop wait, the grace and Triton's exit timeout, rendered."""

from __future__ import annotations

import pytest

from support.rendered import children, triton
from support.spec_cases import load_sample, mutate


@pytest.mark.parametrize(("args", "grace", "exit_s"), [
    (["--exit-timeout-secs=300"], 321, 300),  # the wait (16 s) + the user's 300 s + 5 s
    (["--exit-timeout-secs 120"], 141, 120),
    (["--exit-timeout-secs=10", "--log-verbose=1", "--exit-timeout-secs=90"], 111, 90),  # the last, as Triton
    (["--log-verbose=1"], 51, 30),  # none given: Triton's default 30 s
])
def test_an_exit_timeout_in_extra_args_sets_the_grace(args: list[str], grace: int, exit_s: int) -> None:
    """Session 86's review: runtime.extraArgs' --exit-timeout-secs=300 came after the operator's and won, while
    the grace stayed 51 s: the kubelet killed Triton 35 s into the 300 s it was given. The grace now budgets it."""
    doc = mutate(load_sample(), {"spec.runtime.extraArgs": args})
    deployment = children(doc)["Deployment"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    assert f"--exit-timeout-secs={exit_s}" in triton(deployment)["args"]


def test_a_grace_given_wins_over_an_exit_timeout_in_extra_args() -> None:
    doc = mutate(load_sample(), {"spec.runtime.extraArgs": ["--exit-timeout-secs=300"],
                                 "spec.runtime.terminationGracePeriodSeconds": 60})
    assert children(doc)["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
