"""Read a module's documentation blocks without importing it (shared by the module tests)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def module_doc(module_file: str, name: str) -> dict:
    """A module's DOCUMENTATION, EXAMPLES or RETURN, parsed as YAML, read from
    library/<module_file> without importing it."""
    import ast

    import yaml

    tree = ast.parse((REPO / "library" / module_file).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"{module_file} has no {name}")
