"""Tests for plugins/module_utils/shared/versions.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.shared.versions import release_tuple, version_at_least, version_from_output, version_tuple
from filter_plugins import top_level_imports

VERSIONS_PY = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "shared" / "versions.py"


# ---- release_tuple: versions vLLM prints -------------------------------------

@pytest.mark.parametrize("text,value", [
    ("0.32.0", (0, 32, 0)), ("v0.19.0", (0, 19, 0)), ("0.20.2rc1.dev9+g01d4d1ad3", (0, 20, 2)),
    ("0.6.6.post1", (0, 6, 6)), ("1.2", (1, 2, 0)),
])
def test_release_tuple(text, value):
    assert release_tuple(text) == value


def test_release_tuple_rejects():
    with pytest.raises(ValueError):
        release_tuple("latest")


@pytest.mark.parametrize("out,version", [
    ("0.32.0\n", "0.32.0"),
    ("INFO 11-29 16:01:11 [__init__.py:1] Automatically detected platform cpu.\n0.32.0\n", "0.32.0"),
    ("vllm 0.20.2rc1.dev9+g01d4d1ad3", "0.20.2rc1.dev9+g01d4d1ad3"),
    ("", None),
])
def test_version_from_output(out, version):
    assert version_from_output(out) == version


# ---- version_tuple: versions an operator writes (min_cuda_version) ------------

@pytest.mark.parametrize(
    "have,need,ok",
    [("13.0", "12.8", True), ("12.8", "12.8", True), ("12.10", "12.8", True), ("12.4", "12.8", False),
     ("13", "12.8", True), ("12", "12.8", False), ("12.8.1", "12.8", True)],
)
def test_version_at_least(have, need, ok):
    assert version_at_least(have, need) is ok


@pytest.mark.parametrize("text", ["", "N/A", "12.x", "v12.8", None])
def test_version_tuple_refuses(text):
    with pytest.raises(ValueError):
        version_tuple(text)


def test_standard_library_only():
    # a leaf that any module_utils file may import (its docstring)
    assert top_level_imports(VERSIONS_PY) <= {"__future__", "re"}
