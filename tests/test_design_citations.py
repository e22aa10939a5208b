"""The design lives in the repository: every citation of it names a section of
docs/design.md by name, and nothing sends a reader to a planning document they do not have."""

from __future__ import annotations

import re
import subprocess

from tests.paths import REPO_ROOT

DESIGN = REPO_ROOT / "docs" / "design.md"
CITATION = re.compile(r'docs/design\.md, "?([A-Z][^"\n]*)')


def _tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [f for f in listed if f.endswith((".py", ".md", ".toml", ".yaml", ".txt"))
            and f != "tests/test_design_citations.py"]


def _sections() -> list[str]:
    return [line.lstrip("#").strip() for line in DESIGN.read_text().splitlines()
            if line.startswith("#")]


def test_nothing_cites_the_planning_document():
    citing = [f for f in _tracked_text_files() if "DESIGN.md" in (REPO_ROOT / f).read_text()]
    assert citing == []


def test_every_citation_names_a_section_of_the_design():
    sections = _sections()
    assert {"Concepts", "Funnel and activity", "Layers", "Known ties"} <= set(sections)
    cited = 0
    for name in _tracked_text_files():
        # A name may wrap a line, or run on in the next part of a string literal.
        text = re.sub(r'"\s*"', "", " ".join((REPO_ROOT / name).read_text().split()))
        for found in CITATION.findall(text):
            cited += 1
            assert any(found.startswith(section) for section in sections), (name, found)
    assert cited > 50
