"""Fixtures shared by the module_utils tests: the vLLM flag tables, and the prefill probe's client."""
from __future__ import annotations

import pytest
from ansible.module_utils.vllm_help import parse_help
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


# --- the prefill probe's tests (a fake vLLM: tests/prefill_fake.py; each test file gives ``fake``) ---

@pytest.fixture
def client(fake):
    from ansible.module_utils import prefill_client

    with prefill_client.EngineClient(fake.url, timeout=2.0) as c:
        yield c


@pytest.fixture
def fast_settle(monkeypatch):
    """A completion that never shows in /metrics is given up on after 50 ms, not 2 s."""
    from ansible.module_utils import prefill_client

    monkeypatch.setattr(prefill_client, "METRICS_SETTLE_S", 0.05)
