"""docs/architecture.md's "Where is X" table stays true: every path it
names exists, and every function it names (``name()``) is defined in the
Python file named in the same row."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PATH = re.compile(r"`((?:roles|plugins|library|playbooks|docs|gate|lab)/[^`\s]+)`")
FUNCTION = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)\(\)`")


def _rows() -> list[str]:
    text = DOC.read_text()
    section = text.split("## Where is X", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| question")]


ROWS = _rows()


def test_the_map_has_its_questions():
    assert len(ROWS) >= 8


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.split("|")[1].strip()[:50])
def test_every_path_and_function_in_a_row_exists(row):
    answer = row.split("|")[2]
    paths = [REPO / p for p in PATH.findall(answer)]
    # A short path after a full one in the same row ("flags/check.py") sits beside it.
    missing = [str(p.relative_to(REPO)) for p in paths if not p.exists()]
    assert not missing, missing
    defined = set()
    for path in paths:
        if path.suffix == ".py":
            defined |= {n.name for n in ast.walk(ast.parse(path.read_text()))
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    functions = FUNCTION.findall(answer)
    assert not set(functions) - defined, (functions, [str(p.relative_to(REPO)) for p in paths])
