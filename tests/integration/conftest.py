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


