"""Read a module's documentation blocks and its AnsibleModule arguments (shared
by the module tests; tests/unit/library/test_module_docs.py checks every module
with them)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "library"


def module_doc(module_file: str, name: str) -> dict:
    """A module's DOCUMENTATION, EXAMPLES or RETURN, parsed as YAML, read from
    library/<module_file> without importing it."""
    import ast

    import yaml

    tree = ast.parse((LIBRARY / module_file).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"{module_file} has no {name}")


class _Built(Exception):
    """Stops a module's main() once it has built its AnsibleModule."""


def ansible_module_kwargs(module) -> dict:
    """What ``module.main()`` gives ``AnsibleModule``: ``argument_spec``,
    ``mutually_exclusive``, ``required_one_of``, ``supports_check_mode``...

    Read by running main() up to that call, so a module is checked against the
    arguments it really uses, constant or inline.
    """
    seen = {}

    def capture(*args, **kwargs):
        if args:
            kwargs.setdefault("argument_spec", args[0])
        seen.update(kwargs)
        raise _Built

    original = module.AnsibleModule
    module.AnsibleModule = capture
    try:
        module.main()
    except _Built:
        return seen
    finally:
        module.AnsibleModule = original
    raise AssertionError(f"{module.__name__}.main() returned without building its AnsibleModule")
