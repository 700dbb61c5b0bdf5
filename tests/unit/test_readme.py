"""The README stays true: its CRD reference is generated from the models, and CI runs
exactly the test command it gives. The simulator README's index of ideas measured lists every entry."""

from __future__ import annotations

import re
from pathlib import Path

from tritonscale.api.reference import BEGIN, END, markdown

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _marked(text: str, begin: str, end: str) -> tuple[int, int]:
    """Where a generated block lies in ``text``: from its ``begin`` marker through its ``end`` marker."""
    return text.index(begin), text.index(end) + len(end)


def test_crd_reference_matches_the_models():
    start, stop = _marked(README, BEGIN, END)
    block = README[start:stop]
    assert block == markdown(), (
        "README's CRD reference drifted from the models; regenerate with: .venv/bin/python -c "
        "\"from pathlib import Path; from tritonscale.api.reference import update_readme; "
        "p=Path('README.md'); p.write_text(update_readme(p.read_text()))\"")
    for field in ("spec.model.storageUri", "spec.batching.maxQueueDelayMicroseconds", "spec.runtime.gpus",
                  "spec.scaling.targetP95Milliseconds", "spec.scaling.scaleDown.stabilizationSeconds",
                  "status.p95Milliseconds", "status.conditions"):
        assert f"`{field}`" in block, field


def test_ci_runs_the_readme_test_command():
    match = re.search(r"\*\*Tests\*\*.*?```sh\n(.+?)\n```", README, re.S)
    assert match, "README has no **Tests** command block"
    command = match.group(1).strip()
    ci = (REPO / ".ci" / "run").read_text()
    assert command in ci.splitlines(), f".ci/run must run the README test command: {command}"


def test_main_job_command_is_the_sandbox():
    match = re.search(r"\*\*Set-up and main job\*\*.*?```sh\n(.+?)\n```", README, re.S)
    assert match and "tritonscale sandbox" in match.group(1) and match.group(1).startswith(".ci/setup")


def test_the_charts_readme_is_the_readmes_install_section():
    """The chart ships the README's "Install on a cluster" section (through the walkthrough) as its
    own README; a hand-kept copy had drifted (missing conditions, the log record, uninstall)."""
    section = README[README.index("## Install on a cluster\n"): README.index("## Measurements\n")].rstrip("\n") + "\n"
    chart = (REPO / "charts" / "tritonscale" / "README.md").read_text()
    fix = (".venv/bin/python -c \"t=open('README.md').read(); open('charts/tritonscale/README.md', 'w')"
           ".write(t[t.index('## Install on a cluster\\n'):t.index('## Measurements\\n')]"
           ".rstrip('\\n') + '\\n')\"")
    assert chart == section, f"charts/tritonscale/README.md differs from README.md's install section; copy it: {fix}"


def _decider_reasons() -> set[str]:
    """Every reason the decider's steps can put in the Scaling condition: the reason of each Step it
    makes, and the stabilizer's own."""
    src = "\n".join(p.read_text() for p in (REPO / "operator" / "tritonscale" / "scaling" / "decider").glob("*.py"))
    made = re.findall(r'Step\([^,()]+(?:\([^()]*\))?, "([A-Z][A-Za-z]+)"', src)
    named = re.findall(r'reason(?:, why)? = "([A-Z][A-Za-z]+)"', src)
    ternary = re.findall(r'"([A-Z][A-Za-z]+)" if n [<>] current', src) + re.findall(r'else "([A-Z][A-Za-z]+)"\)', src)
    return set(made) | set(named) | set(ternary)


def test_every_scaling_reason_is_in_the_readmes_table():
    """Users met reasons (LearningCapacity on every new service, BurstMemory, AtMaxReplicas) that no
    document named (a review of the docs, session 55)."""
    table = README[README.index("| reason | the decision |"):]
    table = table[:table.index("\n- ")]
    documented = {r for row in table.splitlines()[2:] if row.strip().startswith("|")
                  for r in re.findall(r"`([A-Z][A-Za-z]+)`", row.strip().split("|")[1])}
    reasons = _decider_reasons()
    assert {"Steady", "LoadIncreased", "LoadDecreased", "BurstMemory", "StabilizingScaleUp", "Idle",
            "LearningCapacity"} <= reasons, reasons  # the extraction still finds them
    assert reasons <= documented, f"not in the README's Scaling reasons table: {sorted(reasons - documented)}"
    assert documented <= reasons, f"in the table, but no decider step gives them: {sorted(documented - reasons)}"


SIMULATOR_README = REPO / "operator" / "tritonscale" / "simulate" / "README.md"
IDEAS_BEGIN = "<!-- ideas index: generated from the entries below by tests/unit/test_readme.py -->"
IDEAS_END = "<!-- end of the ideas index -->"
# An entry's headline: a line that opens with its verdict ("Rejected in session 84 (2026-12-04): **...**"); the
# bold title may run over several lines. Lists under an entry name more ideas than its headline.
_IDEA = re.compile(r"^((?:Adopted|Rejected|Measured|Also rejected|Tried|Re-measured|Probed)[^\n*]*?):? \*\*(.+?)\*\*",
                   re.M | re.S)


def ideas_index(text: str) -> str:
    """The simulator README's list of every decider and tuner idea measured: one line per entry's headline,
    in the order of the entries."""
    lines = [f"- {' '.join(m.group(1).split())}: {' '.join(m.group(2).split()).rstrip('.:')}"
             for m in _IDEA.finditer(text)]
    return "\n".join([IDEAS_BEGIN, "<details><summary>Every idea measured: the headline of each entry below "
                      f"({len(lines)})</summary>", "", *lines, "", "</details>", IDEAS_END])


def write_ideas_index() -> None:
    text = SIMULATOR_README.read_text()
    start, stop = _marked(text, IDEAS_BEGIN, IDEAS_END)
    SIMULATOR_README.write_text(text[:start] + ideas_index(text) + text[stop:])


def test_the_simulator_readmes_ideas_index_lists_every_entry():
    """The simulator README keeps every idea measured, adopted or rejected, as an entry with its figures; the
    index at its top lists their headlines, so an idea is looked up before it is measured again (session 75
    re-measured one session 71 had rejected). A new entry without its index line fails here."""
    text = SIMULATOR_README.read_text()
    assert IDEAS_BEGIN in text and IDEAS_END in text
    start, stop = _marked(text, IDEAS_BEGIN, IDEAS_END)
    block = text[start:stop]
    assert block.count("\n- ") > 50
    assert block == ideas_index(text), (
        "the simulator README's ideas index is stale; regenerate it: .venv/bin/python -c \"import sys; "
        "sys.path.insert(0, 'tests/unit'); import test_readme; test_readme.write_ideas_index()\"")
