"""Integration tests run the real playbooks against the lab.

They need the lab up (`make lab-up`, which `make test` does) and are skipped
unless VLLM_FLEET_LAB=1, so `pytest tests/unit` stays fast and hermetic.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labtools import run_playbook  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if os.environ.get("VLLM_FLEET_LAB") == "1":
        return
    skip = pytest.mark.skip(reason="lab tests need the lab: run `make lab-up` and set VLLM_FLEET_LAB=1 (make test does both)")
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def play():
    return run_playbook




# How long each lab phase took: a table at the end of every lab run (make
# test prints it; docs/lab.md keeps the latest figures).
_PHASES: dict[str, float] = {}
_TESTS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path, _, name = report.nodeid.partition("::")
    phase = Path(path).stem
    if phase == "test_molecule":  # one phase per role's scenario
        phase = f"test_molecule[{name.partition('[')[2].rstrip(']')}]"
    _PHASES[phase] = _PHASES.get(phase, 0.0) + report.duration
    _TESTS[report.nodeid] = _TESTS.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _PHASES or os.environ.get("VLLM_FLEET_LAB") != "1":
        return
    write = terminalreporter.write_line
    terminalreporter.section("lab phase times")
    for phase, seconds in _PHASES.items():
        write(f"{phase:<48} {seconds / 60:6.1f} min  ({seconds:5.0f} s)")
    write(f"{'total':<48} {sum(_PHASES.values()) / 60:6.1f} min")
    # Every test of a minute or more, slowest first: what a phase's growth came from.
    slowest = sorted(((n, s) for n, s in _TESTS.items() if s >= 60), key=lambda kv: -kv[1])
    write("tests of 60 s or more: " + "; ".join(f"{nodeid.split('::')[-1]} {s:.0f} s" for nodeid, s in slowest))
