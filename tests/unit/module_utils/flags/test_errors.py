"""Tests for plugins/module_utils/flags/errors.py: vllm_flags_info maps
VllmFlagsError to fail_json, so every error the flag logic raises must be one."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from ansible.module_utils.flags import errors
from ansible.module_utils.flags.errors import VllmFlagsError

FLAGS = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "flags"
# The files vllm_flags_info runs; pyrepr's ReprError is caught where it is read.
FLAG_FILES = ("help", "cmdline", "bootlog", "drift", "check", "report", "help_cache", "secrets_mask", "values")
ERRORS = {name for name, obj in inspect.getmembers(errors, inspect.isclass) if obj.__module__ == errors.__name__}


def test_every_error_is_a_vllm_flags_error():
    assert ERRORS == {"VllmFlagsError", "HelpTextError", "CmdlineError", "SourceError", "ExpectError"}
    for name in ERRORS:
        assert issubclass(getattr(errors, name), VllmFlagsError)


@pytest.mark.parametrize("name", FLAG_FILES)
def test_raises_only_flag_errors_to_the_module(name):
    """A ValueError or KeyError raised to the module would be a traceback, not a message."""
    tree = ast.parse((FLAGS / f"{name}.py").read_text())
    raised = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            raised.add(node.exc.func.id)
    # ValueError is raised by the value helpers only for their callers to catch
    allowed = ERRORS | ({"ValueError"} if name == "values" else set())
    assert raised <= allowed, raised - allowed
