"""`make test` runs every lab test file, in the order the Makefile gives."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_integration_test_file_is_run_by_make_test():
    makefile = (REPO / "Makefile").read_text()
    # The value may continue over backslash-newlines.
    value = re.search(r"^LAB_TESTS := ((?:.*\\\n)*.*)$", makefile, re.M).group(1)
    listed = value.replace("\\\n", " ").split()
    present = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "integration").glob("test_*.py"))
    assert sorted(listed) == present, "LAB_TESTS in the Makefile must list every tests/integration/test_*.py"


def test_make_test_includes_the_lab():
    makefile = (REPO / "Makefile").read_text()
    deps = re.search(r"^test: (.+?) ##", makefile, re.M).group(1).split()
    assert deps == ["lint", "syntax", "unit", "lab-e2e"]
