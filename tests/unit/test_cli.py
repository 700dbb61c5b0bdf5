"""cli.py: `tritonscale render|crd|--help` as a user runs them.

The user-facing paths run as real subprocesses (exit code, stdout, stderr, no
Traceback). Each costs ~0.5 s of interpreter start-up, so the module fixture
``ran`` starts them all at once on a thread pool; the long tail of bad inputs
additionally runs in-process through ``cli.main`` (same code, milliseconds),
where an escaping exception is exactly what would print a Traceback.

What render reads besides one file of good or bad documents (several files, a
directory, a List, what the API server stores) is in test_cli_render_inputs.py;
`run`'s flags and environment, and `cluster up`'s, in test_cli_run_options.py.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    assert config.startswith("# Generated by tritonscale") and "\nname: " in config
    assert "config.pbtxt: |" in proc.stdout, "multi-line strings print as YAML blocks"


def test_render_keeps_owner_reference_when_uid_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "with-uid.yaml"
    path.write_text(_with_uid())
    assert cli.main(["render", "-f", str(path)]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["metadata"]["ownerReferences"][0]["uid"] for o in objs] == ["1234-abcd"] * 4


@pytest.mark.parametrize("uid", ["12", "[1]", "{a: 1}"])
def test_render_names_a_uid_that_is_no_string(tmp_path: Path, capsys: pytest.CaptureFixture[str], uid: str) -> None:
    """It was reported four times against the children's ownerReferences[0].uid (session 104's CLI fuzzing)."""
    path = tmp_path / "bad-uid.yaml"
    path.write_text(_with_uid().replace("uid: 1234-abcd", f"uid: {uid}"))
    assert cli.main(["render", "-f", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "metadata.uid: must be a string" in err and "ownerReferences" not in err and "\n" not in err, err


def test_render_refuses_an_empty_file_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`-f ""` said ": cannot read: No such file or directory", naming neither the flag nor a file."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["render", "-f", ""])
    assert exit_info.value.code == 2
    assert "argument -f/--file: an empty path" in capsys.readouterr().err


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
