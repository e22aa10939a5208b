"""Copy the browser tests' best screenshots into docs/images/dashboard/, the ones
docs/dashboard.md shows. Run after the tests, and look at each picture before committing:

    .venv/bin/python -m pytest -q tests/e2e
    .venv/bin/python tests/e2e/refresh_doc_screenshots.py

Reads GPUFLEET_E2E_ARTIFACTS (default tests/e2e/artifacts/) as the tests write it; a
screenshot not there (its page not built yet, its test skipped) is named and left as it is.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("GPUFLEET_E2E_ARTIFACTS") or ROOT / "tests/e2e/artifacts")
DOCS = ROOT / "docs/images/dashboard"
# The pictures docs/dashboard.md embeds, by the name each test saves.
SHOWN = ("login", "fleet", "fleet-dark", "fleet-member", "environments", "environment",
         "projects", "project", "nodes", "node", "gpu", "gpu-dark", "requests",
         "request-approved", "request-new", "pools", "audit", "billing")


def main() -> int:
    DOCS.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in SHOWN:
        source = ARTIFACTS / f"{name}.png"
        if source.is_file():
            shutil.copyfile(source, DOCS / source.name)
            print(f"copied {source.name}")
        else:
            missing.append(name)
    if missing:
        print(f"not in {ARTIFACTS} (test skipped or not run): {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
