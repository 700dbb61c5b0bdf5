"""cli.py: what `tritonscale render` reads as kubectl does -- several files, a directory, a List, what
the API server stores, keys YAML reads as numbers -- and the refusals that span documents (one object
twice, every bad document reported). One file of good or bad documents is test_cli.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonscale import cli
from tritonscale.render import yaml_text

REPO = Path(__file__).resolve().parents[2]
SAMPLE_TEXT = (REPO / "manifests" / "samples" / "python-cpu.yaml").read_text()


def sample_doc(stem: str = "python-cpu") -> dict[str, Any]:
    return yaml.safe_load((REPO / "manifests" / "samples" / f"{stem}.yaml").read_text())


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
