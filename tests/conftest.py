"""Shared pytest wiring.

Makes the repository's ``plugins/module_utils`` importable as
``ansible.module_utils.<name>`` (as Ansible does at run time through
``ansible.cfg``) and the ``library/`` modules importable by name, and gives
tests a ``run_module`` helper that runs a module's ``main()`` in-process.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

import ansible.module_utils  # noqa: E402

_MU = str(REPO / "plugins" / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)
if str(REPO / "library") not in sys.path:
    sys.path.insert(0, str(REPO / "library"))

from ansible.module_utils.testing import patch_module_args  # noqa: E402


class ModuleExit(Exception):
    """Raised in place of sys.exit by a module under test."""


def _run(module, args: dict, check_mode: bool = False) -> dict:
    """Run ``module.main()`` with ``args``; return its JSON result.

    A failure comes back with ``failed: True`` rather than raising, so tests
    can assert on the exact message.
    """
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    captured = {}

    def fake_exit(code=0):
        raise ModuleExit(code)

    with patch_module_args(args):
        out = sys.stdout
        from io import StringIO
        buf = StringIO()
        sys.stdout = buf
        old_exit = sys.exit
        sys.exit = fake_exit
        try:
            try:
                module.main()
            except ModuleExit:
                pass
        finally:
            sys.stdout = out
            sys.exit = old_exit
        text = buf.getvalue().strip()
    captured = json.loads(text.splitlines()[-1]) if text else {}
    return captured


@pytest.fixture
def run_module():
    return _run


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
