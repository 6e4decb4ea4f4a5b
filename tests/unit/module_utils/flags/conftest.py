"""Fixtures shared by the flag tests: the vLLM flag tables."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.help import parse_help
from help_tables import HELP_PATH, drop_flag


@pytest.fixture(scope="session")
def help_all() -> str:
    return HELP_PATH.read_text()


@pytest.fixture(scope="session")
def table(help_all):
    return parse_help(help_all)


@pytest.fixture(scope="session")
def table_018(help_all):
    """0.32.0's table less the two scheduler flags added in 0.19.0 and 0.24.0, and less
    --watermark-config (text watermarking, history unknown), which would otherwise
    take `--watermark` as its abbreviation."""
    text = help_all
    for option in ("--scheduler-reserve-full-isl", "--watermark", "--watermark-config"):
        text = drop_flag(text, option)
    return parse_help(text)
