"""The README stays true: its CRD reference is generated from the models, and CI runs
exactly the test command it gives."""

from __future__ import annotations

import re
from pathlib import Path

from tritonscale.api.reference import BEGIN, END, markdown

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_crd_reference_matches_the_models():
    block = README[README.index(BEGIN): README.index(END) + len(END)]
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
    assert chart == section, ("charts/tritonscale/README.md differs from README.md's install section; copy it: "
                              "sed -n '/^## Install on a cluster/,/^## Measurements/p' README.md | sed '$d'")
