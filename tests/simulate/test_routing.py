"""How the simulated cluster routes requests: round-robin (kube-proxy IPVS, the default), at random
per request (kube-proxy's iptables mode) or per connection (gRPC clients, connections closed at an
age), and the flag, the suite's setup and its re-runs that carry it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonscale.simulate import suite, suite_report, suite_rerun
from tritonscale.simulate.capacity import capacity_at_slo
from tritonscale.simulate.command import main_simulate
from tritonscale.simulate.engine import (
    ROUTINGS,
    ClusterConfig,
    Connections,
    route_connections,
    routing_draws,
    simulate,
)
from tritonscale.simulate.policies.static import StaticPolicy
from tritonscale.simulate.replica import BatcherConfig
from tritonscale.simulate.report import summarise

SLO = 104.0  # the suite's tight target for the default replica (2 x its full batch)


@pytest.fixture(scope="module")
def fleet_at_capacity():
    """Three replicas fed 3x the rate one replica serves at the target under Poisson arrivals."""
    cal = capacity_at_slo(BatcherConfig(), SLO, requests=20_000)
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(1.0 / (3 * cal.capacity_rps), int(3 * cal.capacity_rps * 600)))
    return arrivals[arrivals < 600.0]


def _p95(arrivals: np.ndarray, routing: str, seed: int = 0) -> float:
    cluster = ClusterConfig(routing=routing, routing_seed=seed, max_replicas=3)
    return summarise(simulate(arrivals, StaticPolicy(3), cluster, 600.0), SLO).p95_ms


def test_random_routing_gives_each_replica_poisson_arrivals(fleet_at_capacity) -> None:
    """The calibrated capacity is one replica's under Poisson arrivals. Drawn at random per request,
    each replica's share of a Poisson stream is Poisson again, so a fleet at that capacity runs at
    the target; round-robin hands each replica every third arrival, far more regular, and the same
    fleet sits well under it (``simulate --routing``, 20 minutes at 800 rps: p95 103.5 against 89.2 ms)."""
    random_p95 = _p95(fleet_at_capacity, "random")
    robin_p95 = _p95(fleet_at_capacity, "round-robin")
    assert SLO * 0.93 <= random_p95 <= SLO * 1.1, random_p95
    assert robin_p95 < SLO * 0.93 < random_p95, (robin_p95, random_p95)


def test_random_routing_is_seeded(fleet_at_capacity) -> None:
    cut = fleet_at_capacity[fleet_at_capacity < 120.0]
    runs = [simulate(cut, StaticPolicy(3), ClusterConfig(routing="random", routing_seed=s, max_replicas=3), 120.0)
            for s in (1, 1, 2)]
    assert np.array_equal(runs[0].latency, runs[1].latency)
    assert not np.array_equal(runs[0].latency, runs[2].latency)
    assert len(runs[2].latency) == len(cut)  # every request served once, whichever replica drew it


class _TickingStatic(StaticPolicy):
    """A static fleet that ticks every 7 s: the same pods, the run cut into other segments."""

    def tick_times(self, horizon: float) -> np.ndarray:
        return np.arange(7.0, horizon, 7.0)


def test_each_request_keeps_its_draw_whatever_the_run_does(fleet_at_capacity) -> None:
    """Every policy's cluster routes a request by the same draw (common random numbers), not by
    draws taken segment by segment, which a policy's own ticks would shift."""
    cut = fleet_at_capacity[fleet_at_capacity < 120.0]
    cluster = ClusterConfig(routing="random", routing_seed=4, max_replicas=3)
    quiet = simulate(cut, StaticPolicy(3), cluster, 120.0)
    ticking = simulate(cut, _TickingStatic(3), cluster, 120.0)
    assert len(ticking.ticks) > 10
    assert np.array_equal(quiet.latency, ticking.latency)


def test_the_suite_states_every_routing_the_engine_has() -> None:
    # a routing the engine gained without a setup text would make the suite's JSON raise KeyError
    assert tuple(suite.ROUTING_TEXT) == ROUTINGS


def test_an_unknown_routing_is_refused() -> None:
    with pytest.raises(ValueError, match="routing must be one of round-robin, random"):
        ClusterConfig(routing="least-connections")
    with pytest.raises(ValueError, match="unknown routing 'sticky'"):
        suite.SuiteConfig(routing="sticky")
    assert main_simulate(["--shape", "poisson", "--slo-ms", "150", "--routing", "sticky"]) == 2


def test_the_flag_reaches_a_single_run(capsys) -> None:
    argv = ["--shape", "poisson", "--rate", "800", "--duration", "300", "--slo-ms", "104", "--policy", "static:3",
            "--no-oracle", "--json"]
    p95 = {}
    for routing in ("round-robin", "random", "connection"):
        assert main_simulate([*argv, "--routing", routing]) == 0
        p95[routing] = json.loads(capsys.readouterr().out)["p95_ms"]
    assert p95["random"] > p95["round-robin"], p95
    # 1000 connections on 3 pods: each pod's share is Poisson and, for 30 s at a time, off by the luck
    # of how many connections reached it
    assert p95["connection"] > p95["round-robin"], p95


@pytest.mark.parametrize("routing", ["random", "connection"])
def test_the_suite_states_its_routing_and_a_rerun_reads_it_back(routing: str) -> None:
    extra = {"connections": 200, "connection_age_s": 5.0} if routing == "connection" else {}
    cfg = suite.SuiteConfig(classes=("steps",), cold_starts=(15.0,), slos=("tight",), seeds=(0,), duration_s=600.0,
                            routing=routing, **extra)
    res = suite.run_scenario(next(iter(cfg.scenarios())), cfg)
    out = json.loads(json.dumps(suite.to_dict(cfg, [res], 0.0)))
    assert out["setup"]["routing"] == suite.ROUTING_TEXT[routing]
    assert {k: out["setup"][k] for k in extra} == extra  # and nothing of connections for another routing
    assert ("connections" in out["setup"]) is (routing == "connection")
    back = suite_rerun.config_from_json(out, None)
    assert back.routing == routing
    if extra:
        assert (back.connections, back.connection_age_s) == (200, 5.0)
        assert "(connections 200, connection_age_s 5)" in suite_report.setup_text(cfg, 1)
    again = suite_rerun.rerun(out["scenarios"][0], back)
    assert again.row("tritonscale").replica_hours == res.row("tritonscale").replica_hours
    for said in (suite.ROUTING, "round-robin over ready pods (an older wording)"):
        legacy = {**out, "setup": {**out["setup"], "routing": said}}
        assert suite_rerun.config_from_json(legacy, None).routing == "round-robin"
    no_routing = {**out, "setup": {k: v for k, v in out["setup"].items() if k != "routing"}}
    assert suite_rerun.config_from_json(no_routing, None).routing == "round-robin"
    with pytest.raises(ValueError, match="not a suite result"):
        suite_rerun.config_from_json({**out, "setup": {**out["setup"], "routing": "by the moon"}}, None)


def test_the_oracles_needs_follow_the_routing(fleet_at_capacity) -> None:
    """The oracle sizes each window by simulating it alone, routed as the cluster routes. Sized
    round-robin, a random-routed static fleet of the oracle's peak need missed windows (the suite
    under --routing random: 270 for the static peak fleet before the oracle followed the routing)."""
    from tritonscale.simulate.policies.oracle import window_needs
    from tritonscale.simulate.report import window_p95_ms

    cal = capacity_at_slo(BatcherConfig(), SLO, requests=20_000)
    cut = fleet_at_capacity[fleet_at_capacity < 300.0]
    needs = {r: window_needs(cut, 300.0, ClusterConfig(routing=r, routing_seed=3), SLO, cal.capacity_rps)
             for r in ("round-robin", "random")}
    assert max(needs["random"]) > max(needs["round-robin"]), needs
    fleet = max(needs["random"])
    run = simulate(cut, StaticPolicy(fleet), ClusterConfig(routing="random", routing_seed=3, max_replicas=fleet), 300.0)
    assert np.all(window_p95_ms(run.arrival, run.latency, 60.0, 300.0) <= SLO)


# --------------------------------------------------------------------------- per connection (gRPC)


def _conns(n_arrivals: int, clients: int = 200, seed: int = 0) -> tuple[Connections, np.ndarray]:
    cfg = ClusterConfig(routing="connection", routing_seed=seed, connections=clients)
    draws = routing_draws(cfg, n_arrivals)
    assert draws is not None
    return Connections.draw(cfg, n_arrivals), draws


def _route(times: np.ndarray, ready: list[int], conns: Connections, draws: np.ndarray, lo: int,
           age_s: float) -> np.ndarray:
    return route_connections(times, ready, 3, conns, lo, draws, age_s)


@pytest.mark.parametrize(("age_s", "new_pod_share"), [
    (0.0, (0.0, 0.0)),  # connections never close: the pod that joined gets nothing
    (5.0, (0.4, 0.6)),  # every connection closed within one age of the join: about half each
])
def test_a_pod_that_joins_gets_only_connections_opened_after_it(age_s: float, new_pod_share: tuple) -> None:
    times = np.linspace(0.0, 30.0, 30_000, endpoint=False)
    conns, draws = _conns(len(times))
    before = _route(times[:10_000], [0], conns, draws, 0, age_s)  # pod 0 alone until t = 10
    assert set(before) == {0}
    after = _route(times[10_000:], [0, 1], conns, draws, 10_000, age_s)
    late = after[times[10_000:] >= 10.0 + 1.1 * age_s]  # one age (with its jitter) after the join
    lo, hi = new_pod_share
    assert lo <= np.mean(late == 1) <= hi


def test_a_pods_clients_reconnect_when_it_goes() -> None:
    times = np.linspace(0.0, 20.0, 20_000, endpoint=False)
    conns, draws = _conns(len(times))
    first = _route(times[:10_000], [0, 1], conns, draws, 0, 0.0)
    assert 0.35 <= np.mean(first == 1) <= 0.65
    then = _route(times[10_000:], [0, 2], conns, draws, 10_000, 0.0)  # pod 1 removed, pod 2 ready
    assert 1 not in set(then)
    # pod 0's clients stay on it (no age); only pod 1's moved, at random between 0 and 2
    moved = np.isin(conns.client[10_000:], np.unique(conns.client[:10_000][first == 1]))
    assert set(then[~moved]) <= {0}
    assert 0.3 <= np.mean(then[moved] == 2) <= 0.7


def test_connections_close_at_the_age_with_grpcs_jitter() -> None:
    times = np.linspace(0.0, 100.0, 100_000, endpoint=False)
    conns, draws = _conns(len(times), clients=50)
    _route(times[:50_000], [0, 1, 2], conns, draws, 0, 10.0)
    opened = conns.closes.copy()
    _route(times[50_000:], [0, 1, 2], conns, draws, 50_000, 10.0)
    # by t = 100 each client has reconnected several times; its connection closes 9-11 s after it opened,
    # and it opened at a request within the last ~11 s
    assert np.all(conns.closes != opened)
    assert np.all((conns.closes > 100.0 - 0.01) & (conns.closes <= 100.0 + 11.0))


def test_connection_routing_serves_every_request_once_and_is_seeded(fleet_at_capacity) -> None:
    cut = fleet_at_capacity[fleet_at_capacity < 120.0]

    def run(seed: int):
        cfg = ClusterConfig(routing="connection", routing_seed=seed, max_replicas=3, connection_age_s=10.0)
        return simulate(cut, StaticPolicy(3), cfg, 120.0)

    a, b, c = run(1), run(1), run(2)
    assert len(a.latency) == len(cut) and np.array_equal(a.arrival, cut)
    assert np.array_equal(a.latency, b.latency)
    assert not np.array_equal(a.latency, c.latency)


@pytest.mark.parametrize("bad", [{"connections": 0}, {"connection_age_s": -1.0}])
def test_connection_settings_are_checked(bad: dict) -> None:
    with pytest.raises(ValueError):
        ClusterConfig(routing="connection", **bad)


def test_the_connection_flags_reach_a_single_run_and_need_that_routing(capsys) -> None:
    argv = ["--shape", "poisson", "--rate", "800", "--duration", "300", "--slo-ms", "104", "--policy", "static:3",
            "--no-oracle", "--json"]
    p95 = {}
    for clients in ("1000", "5"):
        assert main_simulate([*argv, "--routing", "connection", "--connections", clients,
                              "--connection-age", "0"]) == 0
        p95[clients] = json.loads(capsys.readouterr().out)["p95_ms"]
    # five connections that never close on three pods: one pod carries two fifths of the load (or more)
    assert float(p95["5"]) > float(p95["1000"]), p95
    for flag in (["--connections", "64"], ["--connection-age", "10"]):
        assert main_simulate([*argv, *flag]) == 1
        assert f"{flag[0]}: only with --routing connection" in capsys.readouterr().err
