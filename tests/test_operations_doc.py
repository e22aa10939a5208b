"""The event examples in docs/operations.md ("Families") are what the server sends: each
equals the golden event of its type (tests/api/test_event_schema.py makes those from the
real app), database ids aside."""

from __future__ import annotations

import json
import re

from tests.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "operations.md"
GOLDEN = REPO_ROOT / "tests" / "data" / "events" / "golden.json"


def _families_examples() -> list[dict]:
    text = DOC.read_text()
    section = text.split("### Families", 1)[1].split("\n### ", 1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", section, re.S)]


def test_every_documented_example_is_a_golden_event():
    golden = json.loads(GOLDEN.read_text())
    examples = _families_examples()
    assert len(examples) >= 8
    for example in examples:
        expected = golden[example["type"]]
        normalised = {**example, "id": "<id>"}
        if example["subject"]["kind"] == "token":
            normalised["subject"] = {**example["subject"], "id": "<token id>"}
        assert normalised == expected, example["type"]
