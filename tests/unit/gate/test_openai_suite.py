"""The client suite the lab runs in both serving modes
(tests/integration/openai_suite.py), here against the fake engine: once
directly, once through the gate, and the two must see the same."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from gate_helpers import FakeVLLM

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
import openai_suite  # noqa: E402


async def suite(url: str, api_key: str | None = None) -> dict:
    # The client is synchronous: run it off the loop that serves the fake and the gate.
    return await asyncio.to_thread(openai_suite.run_suite, url + "/v1", FakeVLLM.MODEL, api_key, timeout=10)


@pytest.mark.parametrize("mode", ["tokenize", "estimate"])
async def test_the_suite_sees_the_same_directly_and_through_the_gate(fake_engine, start_gate, mode):
    fake = await fake_engine()
    gate, client = await start_gate([fake], token_count={"mode": mode}, api_keys=["client-key-1"])
    direct = await suite(fake.url)
    through = await suite(str(client.make_url("")).rstrip("/"), "client-key-1")
    assert through == direct
    assert direct["embeddings"] == {"error": "NotFoundError", "status": 404, "body_keys": ["detail"]}
    assert direct["unknown_model"] == {"error": "NotFoundError", "status": 404,
                                       "body_keys": ["code", "message", "param", "type"]}
    assert direct["completion"]["usage"]["completion_tokens"] == openai_suite.MAX_TOKENS
    # Through the gate the generation routes were admitted, the others passed.
    assert gate.metrics.admitted_by["e1"]._value.get() == 7
