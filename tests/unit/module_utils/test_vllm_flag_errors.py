"""Tests for plugins/module_utils/vllm_flag_errors.py: vllm_flags_info maps
VllmFlagsError to fail_json, so every error the flag logic raises must be one."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from ansible.module_utils import vllm_flag_errors
from ansible.module_utils.vllm_flag_errors import VllmFlagsError

MODULE_UTILS = Path(__file__).resolve().parents[3] / "plugins" / "module_utils"
# The files vllm_flags_info runs; pyrepr's ReprError is caught where it is read.
FLAG_FILES = ("vllm_help", "vllm_cmdline", "vllm_bootlog", "vllm_drift", "vllm_flag_check",
              "vllm_flags_report", "vllm_help_cache", "secrets_mask", "vllm_values")
ERRORS = {name for name, obj in inspect.getmembers(vllm_flag_errors, inspect.isclass)
          if obj.__module__ == vllm_flag_errors.__name__}


def test_every_error_is_a_vllm_flags_error():
    assert ERRORS == {"VllmFlagsError", "HelpTextError", "CmdlineError", "SourceError", "ExpectError"}
    for name in ERRORS:
        assert issubclass(getattr(vllm_flag_errors, name), VllmFlagsError)


@pytest.mark.parametrize("name", FLAG_FILES)
def test_raises_only_flag_errors_to_the_module(name):
    """A ValueError or KeyError raised to the module would be a traceback, not a message."""
    tree = ast.parse((MODULE_UTILS / f"{name}.py").read_text())
    raised = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            raised.add(node.exc.func.id)
    # ValueError is raised by the value helpers only for their callers to catch
    allowed = ERRORS | ({"ValueError"} if name == "vllm_values" else set())
    assert raised <= allowed, raised - allowed
