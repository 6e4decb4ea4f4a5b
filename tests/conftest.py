"""Shared pytest wiring.

Makes the repository's ``plugins/module_utils`` importable as
``ansible.module_utils.<package>.<name>`` (as Ansible does at run time through
``ansible.cfg``) and the ``library/`` modules importable by name, and gives
tests a ``run_module`` helper that runs a module's ``main()`` in-process.
"""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

runpy.run_path(str(REPO / "plugins" / "module_utils_path.py"))
if str(REPO / "library") not in sys.path:
    sys.path.insert(0, str(REPO / "library"))

from ansible.module_utils.testing import patch_module_args  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Property tests (tests/hostile.py): no deadline, since a 2-core CI machine's
# timing noise is not a finding; hostile inputs are large by design.
settings.register_profile("vllm-fleet", deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
settings.load_profile("vllm-fleet")


class ModuleExit(Exception):
    """Raised in place of sys.exit by a module under test."""


def _run(module, args: dict, check_mode: bool = False) -> dict:
    """Run ``module.main()`` with ``args``; return its JSON result.

    A failure comes back with ``failed: True`` rather than raising, so tests
    can assert on the exact message.
    """
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    # Importing controller code (ansible.errors, filter plugins) anywhere in
    # the test process flips module_utils into controller mode, where
    # warnings go to the display instead of the result. A module runs on a
    # target, so run it as one.
    from ansible.module_utils import _internal as mu_internal

    was_controller = mu_internal.is_controller
    mu_internal.is_controller = False
    try:
        return _run_target(module, args)
    finally:
        mu_internal.is_controller = was_controller


def _fake_exit(code=0):
    raise ModuleExit(code)


def _run_target(module, args: dict) -> dict:
    with patch_module_args(args):
        out = sys.stdout
        from io import StringIO
        buf = StringIO()
        sys.stdout = buf
        old_exit = sys.exit
        sys.exit = _fake_exit
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


@pytest.fixture(autouse=True)
def _fresh_module_warnings():
    """module.warn() collects into a process-wide store in ansible-core 2.19;
    clear it so one test's warnings never show up in the next."""
    from ansible.module_utils.common import warnings

    for store in ("_global_warnings", "_global_deprecations"):
        getattr(warnings, store, {}).clear()
    yield
    for store in ("_global_warnings", "_global_deprecations"):
        getattr(warnings, store, {}).clear()


def warning_texts(result: dict) -> list:
    """A result's warning texts (2.19 returns WarningSummary dicts)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


@pytest.fixture
def run_module():
    return _run


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
