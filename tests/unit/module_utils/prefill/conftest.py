"""Fixtures shared by the prefill tests: the probe's client."""
from __future__ import annotations

import pytest

# --- the prefill probe's tests (a fake vLLM: tests/prefill_fake.py; each test file gives ``fake``) ---

@pytest.fixture
def client(fake):
    from ansible.module_utils.prefill import client as prefill_client

    with prefill_client.EngineClient(fake.url, timeout=2.0) as c:
        yield c


@pytest.fixture
def fast_settle(monkeypatch):
    """A completion that never shows in /metrics is given up on after 50 ms, not 2 s."""
    from ansible.module_utils.prefill import client as prefill_client

    monkeypatch.setattr(prefill_client, "METRICS_SETTLE_S", 0.05)
