"""Load a filter plugin from plugins/filter/ by path, as Ansible does (shared by
the filter tests)."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from ansible.module_utils import _internal as _mu_internal

FILTER_DIR = Path(__file__).resolve().parent.parent / "plugins" / "filter"


def load_filters(stem: str) -> dict:
    """plugins/filter/<stem>.py's filters, by name.

    Importing the controller's ansible.errors (as filter plugins do) marks the
    whole test process as the controller, after which modules run in-process
    send their warnings to the display instead of their result: the flag is
    put back as it was.
    """
    was_controller = _mu_internal.is_controller
    spec = importlib.util.spec_from_file_location(f"{stem}_filter_under_test", FILTER_DIR / f"{stem}.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    _mu_internal.is_controller = was_controller
    return plugin.FilterModule().filters()


def top_level_imports(path: Path) -> set:
    """The top-level package of every import in a Python file (a leaf module_utils file
    imports the standard library only)."""
    tree = ast.parse(Path(path).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    return imported | {node.module.split(".")[0] for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.module}
