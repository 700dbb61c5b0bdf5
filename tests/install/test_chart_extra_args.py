"""extraArgs and seriesLabels against `tritonscale run`'s flags (helm template): the chart knows every
flag, refuses one the operator does not take or the chart sets itself, and a series label given twice,
and passes on what only adds. Split from test_chart.py.

helm comes from `.ci/install-k8s-tools`; without it these tests skip.
"""

from __future__ import annotations

import re

import pytest
import yaml

from support.chart_render import CHART, helm_template, helm_template_raw
from support.chart_render import one as _one


def test_the_chart_knows_every_flag_of_the_operator() -> None:
    """The chart refuses an extraArgs flag that `tritonscale run` does not have (the operator would exit at
    start, a crash loop after `helm install` said deployed): its list must be the parser's."""
    from tritonscale.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(getattr(a, "choices", None), dict))
    run = commands.choices["run"]
    flags = {o for a in run._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    template = (CHART / "templates" / "deployment.yaml").read_text()
    listed = re.search(r'\$runFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed, "no $runFlags list in the Deployment template"
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == flags
    # and the flags that take no value ("--verbose=1": "ignored explicit argument"), short ones too
    no_value = {o for a in run._actions if a.nargs == 0 for o in a.option_strings if o not in ("-h", "--help")}
    listed = re.search(r'\$noValueFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed, "no $noValueFlags list in the Deployment template"
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == no_value
    listed = re.search(r'\$valueFlags := list ((?:"[^"]+" ?)+)', template)
    assert listed and set(re.findall(r'"([^"]+)"', listed.group(1))) <= flags - no_value


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "extraArgs: --bogus: tritonscale run has no flag --bogus (the operator would exit at start)"),
    (["--verbos=1"], "extraArgs: --verbos=1: tritonscale run has no flag --verbos"),
    (["-x"], "extraArgs: -x: tritonscale run takes no -x (its short flags: -v, repeatable, and -n NAMESPACE"),
    (["-vx"], "extraArgs: -vx: tritonscale run takes no -vx"),  # argparse: "ignored explicit argument 'x'"
    # "'1a' is not a Prometheus label name", and "expected NAME=VALUE"
    (["--series-label=1a=b"], "extraArgs: --series-label=1a=b: --series-label takes NAME=VALUE, NAME a Prometheus"),
    (["--series-label", "team"], "extraArgs: team: --series-label takes NAME=VALUE"),
    # argparse: "ignored explicit argument '1'" and "expected one argument"
    (["--verbose=1"], "extraArgs: --verbose=1: --verbose takes no value (the operator would exit at start)"),
    (["-v=true"], "extraArgs: -v=true: -v takes no value"),
    (["-v", "--series-label"], "extraArgs: --series-label needs a value after it (the operator would exit at start)"),
    (["--allowed-prometheus-url"], "extraArgs: --allowed-prometheus-url needs a value after it"),
])
def test_an_extra_arg_the_operator_does_not_take_fails_to_render(args, message, tmp_path):
    proc = helm_template_raw({"extraArgs": args}, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_the_flags_the_chart_leaves_to_extra_args_render(tmp_path):
    args = ["--series-label", "team=search", "--allowed-prometheus-url=http://p:9090", "-v"]
    (c,) = _one(helm_template({"extraArgs": args}, tmp_path), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["args"][-4:] == args


@pytest.mark.parametrize(("arg", "flag"), [
    ("--metrics-port=9999", "--metrics-port"), ("--liveness-port", "--liveness-port"),
    ("--namespace=other", "--namespace"), ("-n", "-n"), ("--prometheus-url=http://p:9090", "--prometheus-url"),
    ("--leader-elect-lease-duration=30", "--leader-elect-lease-duration"),
    ("-nkube-system", "-n"), ("-vnkube-system", "-n"),  # a short flag's value in the same word
    # set from prometheus.tls.insecureSkipVerify; beside a CA ConfigMap the operator exited at every start
    ("--prometheus-insecure-skip-tls-verify", "--prometheus-insecure-skip-tls-verify"),
    ("--max-upgrade-rollouts=0", "--max-upgrade-rollouts"),  # the maxUpgradeRollouts value's
])
def test_extra_args_may_not_set_what_the_chart_sets(tmp_path, arg, flag):
    """The later flag wins in the operator: --metrics-port 9999 left the container port, the Service and
    the PodMonitor on 8080, and metrics broke silently. -nkube-system watched a namespace the chart's
    RBAC and its overlap check knew nothing of."""
    proc = helm_template_raw({"extraArgs": [arg, "1"]}, tmp_path)
    assert proc.returncode != 0
    assert f"extraArgs: {arg}: {flag} is set by the chart" in proc.stderr, proc.stderr


@pytest.mark.parametrize("values", [
    {"seriesLabels": {"cluster": "prod"}, "extraArgs": ["--series-label=cluster=prod"]},
    {"seriesLabels": {"cluster": "prod"}, "extraArgs": ["--series-label", "cluster=eu"]},
    {"extraArgs": ["--series-label", "cluster=a", "--verbose", "--series-label=cluster=b"]},
])
def test_a_series_label_given_twice_is_refused(tmp_path, values):
    """The operator exits at start on it ("--series-label cluster is given twice"): the chart rendered
    it, and the pods crash-looped."""
    proc = helm_template_raw(values, tmp_path)
    assert proc.returncode != 0
    assert "the series label cluster is given twice (seriesLabels or extraArgs)" in proc.stderr, proc.stderr


def test_series_labels_of_other_names_add_up(tmp_path):
    proc = helm_template_raw({"seriesLabels": {"cluster": "prod"},
                              "extraArgs": ["--series-label", "region=eu", "--series-label=zone=a"]}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dep = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--series-label=cluster=prod" in args
    assert args[-3:] == ["--series-label", "region=eu", "--series-label=zone=a"]


def test_extra_args_that_only_add_are_passed_on(tmp_path):
    proc = helm_template_raw({"extraArgs": ["--verbose", "-v", "--series-label=cluster=prod"]}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dep = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][-3:] == ["--verbose", "-v",
                                                                               "--series-label=cluster=prod"]


def test_the_operator_takes_no_abbreviated_flag():
    """What makes the check above by exact name enough: argparse would otherwise read --names=x or
    --prometheus-u=... as --namespace and --prometheus-url."""
    from tritonscale.cli import build_parser

    for args in (["run", "--names=kube-system"], ["run", "--prometheus-u=http://p:9090"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(args)
        assert exit_.value.code == 2
