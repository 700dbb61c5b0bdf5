"""cli.py: `tritonscale run`'s flags and environment (and `cluster up`'s --dir) as a user gives them: each
mistake is one line naming the flag or variable, exit 2 for usage, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes.config.kube_config
import pytest

from tritonscale import cli


@pytest.mark.parametrize(("argv", "expected"), [
    (["render"], "-f/--file"),
    ([], "usage: tritonscale"),
    (["frobnicate"], "invalid choice"),
    (["run", "--metrics-port", "70000"], "argument --metrics-port: expected a port 0..65535"),
    (["run", "--liveness-port", "-1"], "argument --liveness-port: expected a port 0..65535"),
    (["run", "--prometheus-url", "prometheus:9090"], "argument --prometheus-url: must be an http:// or https:// URL"),
    # the CRD's rule for spec.scaling.prometheus.url: a query would end up before /api/v1/query
    (["run", "--prometheus-url", "http://prom:9090/?a=b"], "no query or fragment, got 'http://prom:9090/?a=b'"),
    (["run", "--prometheus-url", "http://prom:9090#x"], "no query or fragment"),
    (["run", "--prometheus-url", "http://prom:0"], "argument --prometheus-url: the port must be 1-65535"),
    (["run", "--prometheus-url", "http://prom:9090/api/v1/query"],
     "argument --prometheus-url: give the server's base URL, without /api/v1/query: http://prom:9090"),
    (["run", "--namespace", "Team_A"], "argument --namespace/-n: 'Team_A' is not a namespace name"),
    (["run", "--leader-elect", "--leader-elect-resource-name", "a_b"], "'a_b' is not a Lease name"),
])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err
    if argv:  # one line naming the flag and where help is, not argparse's usage block above it
        assert err.count("\n") == 1 and err.rstrip().endswith("--help)"), err


def test_a_bad_port_in_the_environment_is_a_usage_error_of_run_only(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRITONSCALE_METRICS_PORT", "http")
    assert cli.main(["crd"]) == 0  # other commands do not read it
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run"])
    assert exit_info.value.code == 2
    assert "argument --metrics-port: expected a port 0..65535 (0 disables), got 'http' (the value of " \
           "TRITONSCALE_METRICS_PORT)" in capsys.readouterr().err


def test_a_bad_ca_file_in_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """It named --prometheus-ca-file, a flag the user never gave (found by an exploratory review)."""
    monkeypatch.setenv("TRITONSCALE_PROMETHEUS_CA_FILE", "/nope")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run"])
    assert exit_info.value.code == 2
    assert "argument --prometheus-ca-file: '/nope': no such file (the value of TRITONSCALE_PROMETHEUS_CA_FILE)" \
        in capsys.readouterr().err


@pytest.mark.parametrize("flags", [
    ["--leader-elect-renew-deadline", "12"],
    ["--leader-elect-resource-name", "tritonscale"],  # given, even at its default
    ["--leader-elect-resource-namespace", "ops", "--leader-elect-retry-period", "1"],
])
def test_election_flags_without_leader_elect_are_refused(flags: list[str], monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Without --leader-elect the operator acts at once: a Lease name given without it started an operator
    acting beside the elected one, with no word (found by an exploratory review)."""
    from tritonscale import operator_main
    started: list[object] = []
    monkeypatch.setattr(operator_main, "run", lambda options: started.append(options) or 0)
    assert cli.main(["run", "--metrics-port", "0", "--liveness-port", "0", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tritonscale run: {flags[0]} is read only with --leader-elect: add --leader-elect"), err
    assert started == []
    monkeypatch.setenv("POD_NAMESPACE", "ops")  # the Lease's namespace in a Pod
    assert cli.main(["run", "--metrics-port", "0", "--liveness-port", "0", "--leader-elect", *flags]) == 0
    assert len(started) == 1


def test_an_empty_prometheus_url_in_the_environment_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONSCALE_PROMETHEUS_URL", "")
    assert cli.build_parser().parse_args(["run"]).prometheus_url is None


def test_run_without_credentials_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert cli.main(["run", "--metrics-port", "0", "--liveness-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tritonscale run: no Kubernetes credentials") and err.count("\n") == 1, err


@pytest.mark.parametrize(("content", "said"), [
    (b"garbage: [\n", "line 2: invalid YAML: expected the node content"),
    (b"- a\n", "not a kubeconfig"),
    (b"hello\n", "not a kubeconfig"),
    (b"contexts: 5\n", "not a kubeconfig"),
    (b"\xff\xfe", "not text (UTF-8)"),
])
def test_run_with_a_malformed_kubeconfig_is_one_line(content: bytes, said: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an exploratory test: the client lets its YAML parser's error (or a TypeError from
    indexing a list as the mapping it expects) out, and `run` printed a traceback."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "kubeconfig").write_bytes(content)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    # the client reads KUBECONFIG once, when it is imported
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    assert cli.main(["run", "--metrics-port", "0", "--liveness-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tritonscale run: no Kubernetes credentials (not in a Pod; kubeconfig {tmp_path}")
    assert said in err and err.count("\n") == 1, err


def test_run_on_a_port_in_use_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before anything starts: the servers would fail in their own threads, with tracebacks
    (prometheus_client's start_http_server, Kopf's health reporter)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["run", "--metrics-port", str(port), "--liveness-port", "0"]) == 2
        err = capsys.readouterr().err
        assert err == f"tritonscale run: --metrics-port {port}: address already in use (0 disables)\n"
        assert cli.main(["run", "--metrics-port", "0", "--liveness-port", str(port)]) == 2
        assert capsys.readouterr().err.startswith(f"tritonscale run: --liveness-port {port}: address already in use")
    assert cli.main(["run", "--metrics-port", str(port), "--liveness-port", str(port)]) == 2
    assert "both" in capsys.readouterr().err


@pytest.mark.parametrize("pair", ["bad-name=x", "1abc=x", "job:x=y"])
def test_a_series_label_that_is_no_label_name_is_one_line(capsys: pytest.CaptureFixture[str], pair: str) -> None:
    """It reached the series selector and ended the operator with a traceback."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--series-label", pair, "--metrics-port", "0", "--liveness-port", "0"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"tritonscale run: error: argument --series-label: '{pair.split('=')[0]}' is not a "
                           "Prometheus label name")


def test_a_series_label_value_that_is_not_utf8_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """argv's byte 0xff arrives as a surrogate (os.fsdecode): it passed, then every tick's query failed to
    encode and was reported as Prometheus's answer (with fallbackReplicas set, the fleet moved to it)."""
    value = os.fsdecode(b"job=\xff")
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--series-label", value, "--metrics-port", "0", "--liveness-port", "0"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tritonscale run: error: argument --series-label: the value of job is not valid UTF-8")


def test_a_series_label_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The later value replaced the earlier, silently."""
    argv = ["run", "--series-label", "job=x", "--series-label", "job=y", "--metrics-port", "0", "--liveness-port", "0"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == "tritonscale run: --series-label job is given twice: a series has one value " \
                                      "per label\n"


def test_a_bad_prometheus_url_from_the_environment_says_so_and_hides_its_password(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's prometheus.urlSecret reaches the operator as TRITONSCALE_PROMETHEUS_URL: a bad one is
    named as the variable's value, with its password as ***."""
    monkeypatch.setenv("TRITONSCALE_PROMETHEUS_URL", "http://admin:s3cret@prom:9090/?x=1")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "got 'http://***@prom:9090/?x=1' (the value of TRITONSCALE_PROMETHEUS_URL)" in err, err
    assert "s3cret" not in err


def test_cluster_up_on_a_dir_with_a_file_for_a_folder_is_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """DIR/pki a file: a FileExistsError traceback before; now one line naming --dir and the path. (The
    control plane's binaries come from the cache CI's set-up builds.)"""
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "pki").write_text("not a folder")
    assert cli.main(["cluster", "up", "--dir", str(directory)]) == 1
    err = capsys.readouterr().err.strip().splitlines()  # progress lines ("cluster: ..."), then the error
    assert err[-1] == f"tritonscale cluster: --dir: {directory / 'pki'}: File exists", err
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize(("argv", "prog"), [
    (["run", "--prometheus", "http://p:9090"], "tritonscale run"),
    (["cluster", "up", "--dir", "d", "--bogus"], "tritonscale cluster up"),
])
def test_an_unknown_flag_is_said_by_its_commands_parser(capsys, argv, prog):
    """It was "tritonscale: error: unrecognized arguments ... (see tritonscale --help)": the top-level
    help, which lists no flag of the command."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error: unrecognized arguments: ") and f"(see {prog} --help)" in err, err
