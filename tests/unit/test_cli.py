"""cli.py: `tritonscale render|crd|--help` as a user runs them.

The user-facing paths run as real subprocesses (exit code, stdout, stderr, no
Traceback). Each costs ~0.5 s of interpreter start-up, so the module fixture
``ran`` starts them all at once on a thread pool; the long tail of bad inputs
additionally runs in-process through ``cli.main`` (same code, milliseconds),
where an escaping exception is exactly what would print a Traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.config.kube_config
import pytest
import yaml

from tritonscale import cli
from tritonscale.render import yaml_text
from tritonscale.render.kubernetes_objects import (
    config_hash,  # as kubectl reads it back: a tensor named y stays a string
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))
SAMPLE_TEXT = (REPO / "manifests" / "samples" / "python-cpu.yaml").read_text()
BIN = str(Path(sys.executable).parent / "tritonscale")
KINDS = ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]


def sample_doc(stem: str = "python-cpu") -> dict[str, Any]:
    return yaml.safe_load((REPO / "manifests" / "samples" / f"{stem}.yaml").read_text())


# --- inputs -------------------------------------------------------------------------------------------

def _with_uid() -> str:
    doc = sample_doc()
    doc["metadata"]["uid"] = "1234-abcd"
    return yaml_text.dump(doc)


def _two_services() -> str:
    other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    return yaml_text.dump_all([sample_doc("python-cpu"), other, None, sample_doc("pytorch-warmup")])


def _contradictory() -> str:
    doc = sample_doc()
    doc["spec"]["scaling"].update(minReplicas=6, fallbackReplicas=9)
    doc["spec"]["model"]["warmup"]["batchSizes"] = [1, 64]
    return yaml_text.dump(doc)


def _bad_types() -> str:
    doc = sample_doc()
    doc["metadata"]["name"] = "Linear"
    doc["spec"]["model"]["maxBatchSize"] = "lots"
    doc["spec"]["scaling"]["targetP95Milliseconds"] = -3
    doc["spec"]["scaling"]["surprise"] = True
    return yaml_text.dump(doc)


def _second_doc_bad() -> str:
    good, bad = sample_doc(), sample_doc("pytorch-warmup")
    bad["spec"]["model"]["storageUri"] = "http://x"
    return yaml_text.dump_all([good, bad])


def _with_runtime(**changes: Any) -> str:
    doc = sample_doc()
    doc["spec"]["runtime"].update(changes)
    return yaml_text.dump(doc)


def _with_parameter_of(size: int) -> str:
    doc = sample_doc()
    doc["spec"]["model"]["parameters"] = {"vocabulary": "x" * size}
    return yaml_text.dump(doc)


def _with(**changes: Any) -> str:
    doc = sample_doc()
    doc.update(changes)
    return yaml_text.dump(doc)


@dataclass(frozen=True)
class Bad:
    """A bad input file (None: the file does not exist) and, per expected stderr line, its fragments."""

    content: str | bytes | None
    lines: tuple[tuple[str, ...], ...]


BAD_INPUTS: dict[str, Bad] = {
    "contradictory-spec": Bad(_contradictory(), (
        ("linear: spec.model.warmup.batchSizes:",),
        ("linear: spec.scaling.minReplicas:", "must be <= scaling.maxReplicas"),
        ("linear: spec.scaling.fallbackReplicas:",),
    )),
    "type-errors": Bad(_bad_types(), (
        ("Linear: metadata.name:", "DNS-1035"),
        ("spec.model.maxBatchSize:", "integer"),
        ("spec.scaling.targetP95Milliseconds:", "greater than 0"),
        ("spec.scaling.surprise:", "unknown field"),
    )),
    "second-document-bad": Bad(_second_doc_bad(), (("bert-classifier: spec.model.storageUri:", "s3://BUCKET/PATH"),)),
    "spec-null": Bad(_with(spec=None), (("linear: spec:",),)),
    "no-name": Bad(_with(metadata={}), (("document 1: metadata.name:",),)),
    "invalid-yaml": Bad("apiVersion: v1\nkind: [unclosed\n", (("invalid YAML",),)),
    "invalid-yaml-tab": Bad("a: b\n\tc: d\n", (("invalid YAML",),)),
    "missing-file": Bad(None, (("cannot read",),)),
    "no-inferenceservice": Bad("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
                               (("no InferenceService documents",),)),
    "empty-file": Bad("", (("no InferenceService documents",),)),
    "wrong-api-group": Bad(_with(apiVersion="example.com/v1"), (("apiVersion", "tritonscale.io/v1alpha1"),)),
    "wrong-api-version": Bad(_with(apiVersion="tritonscale.io/v2"), (("apiVersion", "tritonscale.io/v1alpha1"),)),
    "metadata-not-a-mapping": Bad(_with(metadata="linear"), (("metadata",),)),
    "not-utf8": Bad(b"\xff\xfe not utf-8\n", (("cannot read",),)),
    # kubectl reads YAML 1.1: a bare y is a boolean, and the API server refuses it as a tensor name
    "bare-y-tensor-name": Bad((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text().replace(
        '{name: "y",', "{name: y,"), (("linear: spec.model.outputs[0].name:", "valid string",
                                        "not the boolean true", "quote it"),)),
    "name-with-final-newline": Bad(_with(metadata={"name": "linear\n"}), (("metadata.name:", "DNS-1035"),)),
    # what the operator refused before its dry runs and render had passed (an audit, session 80): the
    # kubernetes client's model of the Deployment, once for both containers; a ConfigMap over 1 MiB
    "env-value-a-number": Bad(_with_runtime(env=[{"name": "THREADS", "value": 4}]), (
        ("linear: spec.runtime.env[0].value (Deployment/linear spec.template.spec.containers[0].env[0].value)",
         "Input should be a valid string"),)),
    "env-without-a-name": Bad(_with_runtime(env=[{"value": "1"}]), (
        ("linear: spec.runtime.env[0].name (Deployment/linear", "Field required"),)),
    "affinity-unknown-key": Bad(_with_runtime(affinity={"nodeAffinity": {"bogus": 1}}), (
        ("linear: spec.runtime.affinity.nodeAffinity.bogus", "Extra inputs are not permitted"),)),
    "configmap-too-large": Bad(_with_parameter_of(1_100_000), (
        ("linear: spec.model.parameters.vocabulary: the rendered config.pbtxt is", "more than the 1048576 bytes"),)),
    # 0.9 MB of env, which the Deployment holds twice (the init container's too): every dry run passed, and the
    # write failed in etcd ("request is too large") after the ConfigMap was written, on every pass (auditG,
    # session 84)
    # what kubectl refuses as "invalid Unicode character escape code", and a key it cannot send (JSON keys are text):
    # both ended render in a traceback (auditG, session 84)
    "lone-surrogate": Bad(SAMPLE_TEXT.replace('cost_per_item_ms: "2"', 'cost_per_item_ms: "\\ud800"'), (
        ("document 1: spec.model.parameters.cost_per_item_ms: invalid Unicode: '\\ud800'",),)),
    "null-key": Bad(SAMPLE_TEXT.replace("requests: {cpu: 500m", "requests: {null: 1, cpu: 500m"), (
        ("document 1: spec.runtime.resources.requests key YAML reads as null", "quote it"),)),
    "deployment-too-large": Bad(_with_runtime(env=[{"name": f"VAR_{i}", "value": "x" * 1000} for i in range(900)]), (
        ("linear: spec.runtime.env: the rendered Deployment/linear is", "more than the 1572864 bytes etcd stores"),)),
}

# Run as real processes too: the cases a user meets most (one per kind of failure).
SUBPROCESS_BAD_INPUTS = ["contradictory-spec", "invalid-yaml", "missing-file", "no-inferenceservice",
                         "wrong-api-group"]

XFAIL: dict[str, str] = {}  # known product bugs (none open)


def test_render_takes_what_the_api_server_stores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fields set to null are pruned by the API server (and defaulted), and 16.0 reaches an integer
    field as 16 (kubectl's YAML to JSON): render accepts both, as ``kubectl apply`` does."""
    doc = sample_doc()
    doc["spec"]["model"]["maxBatchSize"] = 16.0
    doc["spec"]["scaling"].update(maxReplicas=None, scaleDown=None)
    doc["spec"]["runtime"]["serviceAccountName"] = None
    path = tmp_path / "stored.yaml"
    path.write_text(yaml_text.dump(doc))
    assert cli.main(["render", "-f", str(path)]) == 0, capsys.readouterr().err
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    config = next(o for o in objs if o["kind"] == "ConfigMap")
    assert "max_batch_size: 16\n" in next(iter(config["data"].values()))
    assert deployment["spec"]["template"]["spec"].get("serviceAccountName") is None


# --- running everything at once -----------------------------------------------------------------------

@dataclass(frozen=True)
class Invocation:
    argv: tuple[str, ...]
    stdin: str | None = None


def _plan(tmp: Path) -> dict[str, Invocation]:
    plan: dict[str, Invocation] = {f"render:{s.stem}": Invocation((BIN, "render", "-f", str(s))) for s in SAMPLES}
    (tmp / "two-services.yaml").write_text(_two_services())
    plan["two-services"] = Invocation((BIN, "render", "-f", str(tmp / "two-services.yaml")))
    for name in SUBPROCESS_BAD_INPUTS:
        plan[f"bad:{name}"] = Invocation((BIN, "render", "-f", write_bad_input(tmp, name)))
    plan["stdin"] = Invocation((BIN, "render", "-f", "-"),
                               (REPO / "manifests" / "samples" / "python-cpu.yaml").read_text())
    plan["python-m-crd"] = Invocation((sys.executable, "-m", "tritonscale", "crd"))
    plan["help"] = Invocation((BIN, "--help"))
    return plan


def write_bad_input(tmp: Path, name: str) -> str:
    path = tmp / f"bad-{name}.yaml"
    content = BAD_INPUTS[name].content
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return str(path)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Invocation, subprocess.CompletedProcess[str]]]:
    plan = _plan(tmp_path_factory.mktemp("cli"))

    def call(inv: Invocation) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(inv.argv), capture_output=True, text=True, input=inv.stdin, timeout=60, cwd=REPO)

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(plan, pool.map(call, plan.values()), strict=True))
    return {k: (plan[k], done[k]) for k in plan}


def result(ran: dict[str, Any], key: str) -> subprocess.CompletedProcess[str]:
    return ran[key][1]


# --- render: good input -------------------------------------------------------------------------------

@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_render_sample(ran: dict[str, Any], sample: Path) -> None:
    proc = result(ran, f"render:{sample.stem}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objs] == KINDS
    name = yaml.safe_load(sample.read_text())["metadata"]["name"]
    config = objs[0]["data"]["config.pbtxt"]
    assert [o["metadata"]["name"] for o in objs] == [f"{name}-config-{config_hash(config)}", name, name, name]
    assert all(o["metadata"]["namespace"] == "default" for o in objs)
    # No uid in the file: an ownerReference to a made-up uid would get the children garbage-collected.
    assert all("ownerReferences" not in o["metadata"] for o in objs)
    assert proc.stdout.startswith("---\n")
    config = objs[0]["data"]["config.pbtxt"]
    assert config.startswith("# Generated by tritonscale") and "\nname: " in config
    assert "config.pbtxt: |" in proc.stdout, "multi-line strings print as YAML blocks"


def test_render_keeps_owner_reference_when_uid_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "with-uid.yaml"
    path.write_text(_with_uid())
    assert cli.main(["render", "-f", str(path)]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["metadata"]["ownerReferences"][0]["uid"] for o in objs] == ["1234-abcd"] * 4


def test_render_two_services_in_one_file(ran: dict[str, Any]) -> None:
    proc = result(ran, "two-services")
    assert proc.returncode == 0, proc.stderr
    objs = list(yaml.safe_load_all(proc.stdout))
    assert len(objs) == 8
    assert [o["kind"] for o in objs] == KINDS * 2
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"] == ["linear", "bert-classifier"]


def test_render_from_stdin(ran: dict[str, Any]) -> None:
    proc = result(ran, "stdin")
    assert proc.returncode == 0, proc.stderr
    assert [o["kind"] for o in yaml.safe_load_all(proc.stdout)] == KINDS
    assert proc.stdout == result(ran, "render:python-cpu").stdout


# --- render: bad input --------------------------------------------------------------------------------

def _bad_params(names: list[str]) -> list[Any]:
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n])) if n in XFAIL else n
            for n in names]


def _check_rejection(name: str, path: str, returncode: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert returncode == 1, stderr
    assert stdout == "", "nothing is rendered when any document is bad"
    lines = stderr.splitlines()
    expected = BAD_INPUTS[name].lines
    assert len(lines) == len(expected), stderr
    for line, fragments in zip(lines, expected, strict=True):
        assert line.startswith(f"{path}: "), line
        for fragment in fragments:
            assert fragment in line, line


@pytest.mark.parametrize("name", _bad_params(SUBPROCESS_BAD_INPUTS))
def test_render_rejects_bad_input(ran: dict[str, Any], name: str) -> None:
    inv, proc = ran[f"bad:{name}"]
    _check_rejection(name, inv.argv[-1], proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("name", _bad_params(list(BAD_INPUTS)))
def test_render_rejects_bad_input_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             name: str) -> None:
    path = write_bad_input(tmp_path, name)
    try:
        rc = cli.main(["render", "-f", path])
    except Exception as exc:  # noqa: BLE001 - escaping here is a Traceback for the user
        pytest.fail(f"render raised {type(exc).__name__}: {exc} (the user would see a Traceback)")
    out = capsys.readouterr()
    _check_rejection(name, path, rc, out.out, out.err)


def test_render_keeps_going_after_a_bad_document_to_report_all(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Every bad document is reported in one run, not just the first."""
    bad_a, bad_b = sample_doc(), sample_doc("pytorch-warmup")
    bad_a["spec"]["scaling"]["minReplicas"] = 99
    bad_b["spec"]["model"]["backend"] = "jax"
    path = tmp_path / "two-bad.yaml"
    path.write_text(yaml_text.dump_all([bad_a, bad_b]))
    assert cli.main(["render", "-f", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[1:3] for line in err] == [
        ["linear", "spec.scaling.minReplicas"], ["bert-classifier", "spec.model.backend"]]


def test_render_refuses_an_object_defined_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same namespace/name twice (kubectl apply would keep the last): refused, nothing printed --
    not two sets of children of one name. The same name in another namespace is another object."""
    first, again, elsewhere = sample_doc(), sample_doc(), sample_doc()
    again["spec"]["scaling"]["maxReplicas"] = 3
    elsewhere["metadata"]["namespace"] = "other"
    path = tmp_path / "twice.yaml"
    path.write_text(yaml_text.dump_all([first, elsewhere, again]))
    assert cli.main(["render", "-f", str(path)]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"{path}: linear: document 3 defines default/linear again (first in document 1)\n"
    path.write_text(yaml_text.dump_all([first, elsewhere]))
    assert cli.main(["render", "-f", str(path)]) == 0
    assert capsys.readouterr().out.count("kind: Deployment") == 2


def test_a_wrong_api_version_in_a_list_is_named_by_the_objects_name(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A List's second item with a wrong apiVersion read "document 2" in a file of one document (auditA)."""
    good, bad, unnamed = sample_doc(), sample_doc(), sample_doc()
    bad["metadata"]["name"], bad["apiVersion"] = "other", "tritonscale.io/v1"
    del unnamed["metadata"]["name"]
    unnamed["apiVersion"] = "v1"
    path = tmp_path / "list.yaml"
    path.write_text(yaml_text.dump_all([{"apiVersion": "v1", "kind": "List", "items": [good, bad, unnamed]}]))
    assert cli.main(["render", "-f", str(path)]) == 1
    assert capsys.readouterr().err == (f"{path}: other: apiVersion: must be tritonscale.io/v1alpha1\n"
                                       f"{path}: document 3: apiVersion: must be tritonscale.io/v1alpha1\n")


def test_render_takes_several_files_as_kubectl_apply_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-f A -f B rendered B alone, and a missing or invalid A passed with exit 0 (an exploratory
    review's finding); -f A B (a shell glob) was refused as unrecognized arguments."""
    a, b = sample_doc(), sample_doc()
    b["metadata"]["name"] = "other"
    pa, pb, bad = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "bad.yaml"
    pa.write_text(yaml_text.dump_all([a]))
    pb.write_text(yaml_text.dump_all([b]))
    broken = sample_doc()
    broken["spec"]["scaling"]["minReplicas"] = 0
    bad.write_text(yaml_text.dump_all([broken]))
    for argv in (["-f", str(pa), "-f", str(pb)], ["-f", str(pa), str(pb)]):
        assert cli.main(["render", *argv]) == 0
        out = capsys.readouterr().out
        assert out.count("kind: Deployment") == 2 and "name: other" in out and "name: linear" in out
    for first in (tmp_path / "missing.yaml", bad):
        assert cli.main(["render", "-f", str(first), "-f", str(pb)]) == 1
        out = capsys.readouterr()
        assert out.out == "" and str(first) in out.err
    assert cli.main(["render", "-f", str(pa), str(pa)]) == 1
    assert capsys.readouterr().err == f"{pa}: InferenceService default/linear again (first in {pa})\n"


def test_render_names_the_kinds_it_found_when_none_is_an_inferenceservice(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    doc = sample_doc()
    doc["kind"] = "inferenceservice"
    path = tmp_path / "kind.yaml"
    path.write_text(yaml_text.dump_all([doc, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]))
    assert cli.main(["render", "-f", str(path)]) == 1
    assert capsys.readouterr().err == (f"{path}: no InferenceService documents found (kind inferenceservice, "
                                       "ConfigMap: render reads only kind InferenceService)\n")


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


# --- crd and help -------------------------------------------------------------------------------------

def test_python_dash_m_crd(ran: dict[str, Any]) -> None:
    proc = result(ran, "python-m-crd")
    assert proc.returncode == 0, proc.stderr
    crd = yaml.safe_load(proc.stdout)
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "inferenceservices.tritonscale.io"
    assert proc.stdout == (REPO / "crds" / "inferenceservices.tritonscale.io.yaml").read_text(), (
        "CRD drift: run `.venv/bin/tritonscale crd > crds/inferenceservices.tritonscale.io.yaml`")


def test_help_lists_commands(ran: dict[str, Any]) -> None:
    proc = result(ran, "help")
    assert proc.returncode == 0
    for command in ("run", "crd", "render"):
        assert f"    {command} " in proc.stdout, proc.stdout


def test_render_help_documents_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["render", "--help"])
    assert exit_info.value.code == 0
    assert "or - for stdin" in capsys.readouterr().out


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


def test_render_reads_the_list_kubectl_get_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl get tis -o yaml` prints a `kind: List`; each of its items renders as if given alone."""
    path = tmp_path / "listed.yaml"
    path.write_text(yaml_text.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                    "items": [sample_doc("python-cpu"), sample_doc("pytorch-warmup")]}))
    alone = tmp_path / "alone.yaml"
    alone.write_text(yaml_text.dump_all([sample_doc("python-cpu"), sample_doc("pytorch-warmup")]))
    assert cli.main(["render", "-f", str(path)]) == 0
    listed = capsys.readouterr().out
    assert cli.main(["render", "-f", str(alone)]) == 0
    assert listed == capsys.readouterr().out and "kind: Deployment" in listed


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


def test_render_of_a_directory_reads_its_manifests_as_kubectl_apply_does(capsys):
    """kubectl apply -f DIR reads the directory's .json, .yaml and .yml files in name order; render refused
    a directory ("is a directory: give one YAML file"), and the README said it took files as kubectl does."""
    samples = REPO / "manifests" / "samples"
    assert cli.main(["render", "-f", str(samples)]) == 0
    from_dir = capsys.readouterr().out
    files = sorted(str(p) for p in samples.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
    assert len(files) >= 2
    assert cli.main(["render", "-f", *files]) == 0
    assert from_dir == capsys.readouterr().out


def test_render_of_a_directory_skips_other_files_and_subdirectories(tmp_path, capsys):
    sample = (REPO / "manifests" / "samples" / "python-cpu.yaml").read_text()
    (tmp_path / "b.yml").write_text(sample)
    (tmp_path / "a.json").write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}')
    (tmp_path / "notes.txt").write_text("not: [yaml")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text("not: [yaml")
    assert cli.main(["render", "-f", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["ConfigMap", "Deployment", "Service",
                                                           "PodDisruptionBudget"]


def test_render_of_a_directory_without_inference_services_is_one_line(tmp_path, capsys):
    assert cli.main(["render", "-f", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (f"{tmp_path}: no .json, .yaml or .yml file in this directory "
                                       "(kubectl apply -f reads those)\n")
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert cli.main(["render", "-f", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (f"{tmp_path}: no InferenceService documents found in its .json, .yaml "
                                       "or .yml files\n")
    (tmp_path / "bad.yaml").write_text("kind: [")
    assert cli.main(["render", "-f", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path / 'bad.yaml'}: line ") and "invalid YAML" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["crd"], ["render", "-f", str(REPO / "manifests" / "samples" / "python-cpu.yaml")]])
def test_output_that_cannot_be_written_is_one_line(argv: list[str]) -> None:
    """A full disk (/dev/full) ended in a traceback after the work was done (an exploratory review)."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "tritonscale", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "operator")})
    assert proc.returncode == 1
    assert proc.stderr == f"tritonscale {argv[0]}: standard output: No space left on device\n", proc.stderr


def test_render_sends_int_and_boolean_keys_as_their_text_as_kubectl_does(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl (sigs.k8s.io/yaml) writes a key YAML reads as 1 or true as "1" or "true"; render sorted and matched
    the keys as they were and ended in a traceback on mixed ones (auditG, session 84)."""
    path = tmp_path / "keys.yaml"
    path.write_text(SAMPLE_TEXT.replace("requests: {cpu: 500m", "requests: {1: '1', cpu: 500m").replace(
        "  runtime:\n", "  runtime:\n    nodeSelector: {true: a, b: c}\n", 1))
    assert cli.main(["render", "-f", str(path)]) == 0, capsys.readouterr().err
    (dep,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"true": "a", "b": "c"}
    assert pod["containers"][0]["resources"]["requests"]["1"] == "1"
