"""api/manifests.py: a manifest file becomes documents or one-line problems naming the file --
never a traceback, never a run that does not end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonscale.api import manifests
from tritonscale.api.manifests import MAX_DEPTH, MAX_VALUES, expanded_size, read_documents


def write(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "m.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def test_documents_of_a_plain_file(tmp_path: Path) -> None:
    docs, problems = read_documents(write(tmp_path, "a: 1\n---\n---\nb: [1, 2]\n"))
    assert (docs, problems) == ([{"a": 1}, {"b": [1, 2]}], [])


@pytest.mark.parametrize(("text", "problem"), [
    (b"\xff\xfe a: 1", "not UTF-8 text"),
    ("a: [1, 2\n", "invalid YAML"),
    ("[" * 2000 + "]" * 2000, "nested too deeply"),  # deeper than the parser's recursion
    ("x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels"),
    ("a: &a [*a]\n", "an alias refers to a list or map that contains it"),
    ("spec:\n  scaling:\n    minReplicas: 2\n    maxReplicas: 4\n    minReplicas: 0\n",
     "line 5: invalid YAML: found key 'minReplicas' twice in one mapping"),
    # "billion laughs": nine levels of ten aliases each expand to 10^9 values
    ("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10)), "aliases expand to more than"),
])
def test_a_file_that_is_no_object_is_one_problem(tmp_path: Path, text: str | bytes, problem: str) -> None:
    path = write(tmp_path, text)
    docs, problems = read_documents(path, "--service")
    assert docs == [] and len(problems) == 1, problems
    assert problems[0].startswith(f"--service: {path}: ") and problem in problems[0], problems


def test_missing_file_names_the_flag(tmp_path: Path) -> None:
    assert read_documents(str(tmp_path / "none.yaml"), "--service")[1] == [
        f"--service: {tmp_path / 'none.yaml'}: cannot read: No such file or directory"]
    assert read_documents(str(tmp_path), "--service")[1] == [  # a directory
        f"--service: {tmp_path}: is a directory: give one YAML file (each of several in turn)"]


def test_an_endless_input_is_read_only_so_far(monkeypatch, tmp_path: Path) -> None:
    """/dev/zero (or `yes | tritonscale render -f -`) grew to 5.9 GB in 10 s: reading stops past the cap."""
    if Path("/dev/zero").exists():
        assert read_documents("/dev/zero")[1] == [
            f"/dev/zero: more than {manifests.MAX_INPUT_BYTES // 2**20} MiB, far more than any manifest (an object "
            "holds at most 3 MiB): not read further"]
    monkeypatch.setattr(manifests, "MAX_INPUT_BYTES", 2**20)
    under = write(tmp_path, "a: " + "x" * (2**20 - 4) + "\n")  # exactly the cap: read
    assert read_documents(under) == ([{"a": "x" * (2**20 - 4)}], [])
    over = write(tmp_path, "a: " + "x" * (2**20 - 3) + "\n")
    assert read_documents(over, "--service")[1] == [
        f"--service: {over}: more than 1 MiB, far more than any manifest (an object holds at most 3 MiB): "
        "not read further"]


def test_expanded_size_counts_shared_values_each_time() -> None:
    shared = [1, 2, 3]
    assert expanded_size({"a": shared, "b": shared}) == 1 + 2 * (1 + 3)
    assert expanded_size("scalar") == 1
    assert expanded_size([[[]]]) == 3
    wide = [list(range(100))] * 20_000  # 2,020,001 values written out, 101 stored
    assert expanded_size(wide) > MAX_VALUES


def test_a_merge_key_may_be_overridden_and_keys_may_repeat_across_mappings(tmp_path: Path) -> None:
    text = "base: &b {minReplicas: 1, maxReplicas: 4}\nsvc:\n  <<: *b\n  maxReplicas: 8\nother: {minReplicas: 2}\n"
    docs, problems = read_documents(write(tmp_path, text))
    assert problems == []
    assert docs[0]["svc"] == {"minReplicas": 1, "maxReplicas": 8} and docs[0]["other"] == {"minReplicas": 2}


# What kubectl reads each plain scalar as: sigs.k8s.io/yaml (go-yaml v2 and Go's number parsing), as
# `helm template` printed them through toJson (the same library reads values.yaml), 2026-11-27 (an int
# and a float of one value print alike there: past int64, go-yaml v2's resolve takes ParseUint).
KUBECTL_READS: list[tuple[str, object]] = [
    ("y", True), ("yes", True), ("On", True), ("off", False), ("n", False),
    ("1e3", 1000.0), ("3e0", 3.0), ("0.5e-3", 0.0005), (".5", 0.5), ("-.5", -0.5), ("1.", 1.0),
    ("08", 8.0), ("0_8", 8.0), ("0755", 493), ("0o17", 15), ("0x1F", 31), ("-0x10", -16), ("0b101", 5),
    ("+0b11", 3), ("-17", -17), ("1_000", 1000), ("0", 0), ("0X1F", 31), ("0B101", 5), ("-0X1", -1),
    # past int64: Go's ParseUint, then past uint64 a float
    ("9223372036854775808", 9223372036854775808), ("18446744073709551616", 18446744073709551616.0),
    ("~", None), ("Null", None),
    # strings to kubectl, where PyYAML reads a date, a base-60 number or a value tag
    ("1:30", "1:30"), ("2024-05-01", "2024-05-01"), ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"), ("=", "="),
    ("1.2.3", "1.2.3"), ("1e", "1e"), ("0x", "0x"), ("0o", "0o"), ("Infinity", "Infinity"), ("NaN", "NaN"),
    ("nan", "nan"), ("abc", "abc"), ("+inf", "+inf"), ("-Infinity", "-Infinity"), ("+nan", "+nan"), (".", "."),
]


@pytest.mark.parametrize(("plain", "value"), KUBECTL_READS)
def test_a_plain_scalar_reads_as_kubectl_reads_it(tmp_path: Path, plain: str, value: object) -> None:
    docs, problems = read_documents(write(tmp_path, f"a: {plain}\n"))
    assert problems == []
    assert docs[0]["a"] == value and type(docs[0]["a"]) is type(value)


@pytest.mark.parametrize("text", [plain for plain, _ in KUBECTL_READS])
def test_a_string_is_written_so_kubectl_and_pyyaml_read_it_back_as_that_string(tmp_path: Path, text: str) -> None:
    """render's output goes to `kubectl apply`: an env value "1e-3" written plain is a number to kubectl,
    which then refuses the Deployment; one "2024-05-01" written plain is a date to PyYAML."""
    import yaml

    from tritonscale.render.yaml_text import dump

    out = dump({"value": text})
    docs, problems = read_documents(write(tmp_path, out))
    assert problems == [] and docs[0]["value"] == text, out
    assert yaml.safe_load(out)["value"] == text, out
