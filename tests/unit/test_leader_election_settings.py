"""leader_election.py: the election's settings (client-go's defaults, the unsafe ones refused) and the
--leader-elect-* flags that give them."""

from __future__ import annotations

import pytest

from tritonscale import cli
from tritonscale.leader_election import ElectionSettings


def settings(identity: str, **kw) -> ElectionSettings:
    return ElectionSettings(lease_namespace="ops", identity=identity, **kw)


# ---- settings ---------------------------------------------------------------------------

def test_client_go_defaults_are_valid():
    s = settings("a")
    assert (s.lease_duration_s, s.renew_deadline_s, s.retry_period_s) == (15, 10.0, 2.0)
    assert s.problems() == []


@pytest.mark.parametrize("kw, problem", [
    ({"lease_duration_s": 10},
     "--leader-elect-lease-duration (10 s) must be greater than --leader-elect-renew-deadline"),
    ({"renew_deadline_s": 2.4}, "must be greater than 1.2 x --leader-elect-retry-period (2.4 s)"),
    ({"retry_period_s": 0.5, "renew_deadline_s": 3}, "--leader-elect-retry-period must be >= 1 s (got 0.5)"),
    ({"lease_namespace": ""}, "--leader-elect-resource-namespace is required outside a Pod"),
])
def test_unsafe_settings_are_refused(kw, problem):
    s = ElectionSettings(**{"lease_namespace": "ops", "identity": "a", **kw})
    assert any(problem in p for p in s.problems()), s.problems()


def test_cli_refuses_a_renew_deadline_not_below_the_lease(capsys):
    code = cli.main(["run", "--leader-elect", "--leader-elect-resource-namespace", "ops",
                     "--leader-elect-lease-duration", "10"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("tritonscale run: --leader-elect-lease-duration (10 s) must be greater than"), err



@pytest.mark.parametrize("value", ["0", "-5", str(2**31)])
def test_cli_refuses_a_lease_duration_the_lease_cannot_hold(value):
    """3000000000 passed, and every write of the Lease then failed (leaseDurationSeconds is an int32)."""
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["run", "--leader-elect-lease-duration", value])
    assert exit_.value.code == 2


def test_the_flags_defaults_are_the_settings_defaults() -> None:
    """cli states the --leader-elect-* defaults itself (it does not import the kubernetes client for every
    command); they must be client-go's timings as ElectionSettings states them."""
    d = ElectionSettings()
    assert cli._ELECTION_FLAGS == {"leader_elect_resource_name": d.lease_name,
                                   "leader_elect_resource_namespace": d.lease_namespace,
                                   "leader_elect_lease_duration": d.lease_duration_s,
                                   "leader_elect_renew_deadline": d.renew_deadline_s,
                                   "leader_elect_retry_period": d.retry_period_s}
