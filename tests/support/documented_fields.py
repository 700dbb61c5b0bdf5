"""The field names the simulator's README documents for the JSON other tooling reads."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "operator" / "tritonscale" / "simulate" / "README.md"


def documented_json_fields(which: str) -> set[str]:
    """The names the README gives in backticks in "The suite's JSON": for ``which`` "suite" the section
    up to its tuner paragraph, for "tuner" that paragraph (``--suite --batching-tuner --json``)."""
    section = README.read_text().split("### The suite's JSON", 1)[1].split("\n### ", 1)[0]
    suite_part, tuner_part = section.split("With `--batching-tuner`", 1)
    return set(re.findall(r"`([a-z0-9_]+)(?:\[\])?`", suite_part if which == "suite" else tuner_part))
