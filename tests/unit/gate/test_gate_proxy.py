"""The proxy path: passthrough (plain and SSE, unbuffered), bad input,
API keys, token counting, engine errors, and the access log."""
from __future__ import annotations

import asyncio
import logging
import re

import aiohttp
import pytest
from gate_helpers import WAIT, FakeVLLM, completion, free_port, until, words


def err(body: dict) -> tuple:
    e = body["error"]
    return e["type"], e["code"], e["message"]


# -- passthrough -----------------------------------------------------------------
async def test_completion_passthrough(one):
    fake, gate, client = one
    r = await client.post("/v1/completions", json=completion("a"), headers={"X-Request-Id": "abc"})
    assert r.status == 200
    assert (await r.json())["choices"][0]["text"] == "ok a"
    assert r.headers["X-Request-Id"] == "req-fake"
    sent = fake.requests[0]
    assert sent["path"] == "/v1/completions" and sent["headers"]["X-Request-Id"] == "abc"
    assert sent["body"] == completion("a")  # the body goes through unchanged


async def test_chat_passthrough_counts_messages_with_tokenize(one):
    fake, gate, client = one
    body = {"model": FakeVLLM.MODEL, "messages": [{"role": "user", "content": words(20)}], "max_tokens": 5, "user": "c"}
    fake.block = True
    task = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await fake.wait_requests(1)
    assert gate.admission.engines["e1"].reserved == 25
    assert fake.tokenize_requests == [{"model": FakeVLLM.MODEL, "messages": body["messages"]}]
    fake.release("c")
    r = await task
    assert r.status == 200 and fake.requests[0]["path"] == "/v1/chat/completions"


async def test_models_passthrough(one):
    fake, gate, client = one
    r = await client.get("/v1/models")
    assert r.status == 200
    assert (await r.json())["data"][0]["id"] == FakeVLLM.MODEL


async def test_sse_is_relayed_chunk_by_chunk(one):
    """The first event reaches the client while the engine is still
    paused mid-stream: nothing is buffered."""
    fake, gate, client = one
    fake.stream_pause = asyncio.Event()
    r = await client.post("/v1/completions", json=completion("s", stream=True))
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), WAIT)
    assert b'"t0"' in first
    assert not fake.stream_pause.is_set()  # the engine has not finished
    assert gate.admission.inflight == 1
    fake.stream_pause.set()
    rest = await asyncio.wait_for(r.content.read(), WAIT)
    assert rest.count(b"data: ") == 3 and rest.endswith(b"data: [DONE]\n\n")


async def test_engine_http_errors_pass_through(one):
    fake, gate, client = one
    r = await client.post("/v1/completions", json=completion("x", model="no-such-model"))
    assert r.status == 404  # unknown models are the engine's to answer
    assert (await r.json())["error"]["message"] == "The model `no-such-model` does not exist."
    r = await client.post("/v1/completions", json=completion("explode"))
    assert r.status == 500
    assert await r.json() == {"error": {"message": "engine exploded", "code": 500}}


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, code, message",
    [
        (b"{not json", "invalid_json", "The request body is not valid JSON."),
        (b"[1, 2]", "invalid_json", "The request body must be a JSON object."),
        (b'{"model": "m", "prompt": "hi", "max_tokens": -5}', "invalid_max_tokens",
         "max_tokens must be at least 1, got -5"),
        (b'{"model": "m", "prompt": "hi", "max_tokens": "9"}', "invalid_max_tokens",
         "max_tokens must be an integer, got str"),
        (b'{"model": "m"}', "prompt_required", "prompt is required"),
        (b'{"model": "m", "prompt": "hi", "max_tokens": 1000000000}', "context_length_exceeded",
         "This model's maximum context length is 100 tokens. However, you requested 1000000001 tokens "
         "(1 in the prompt, 1000000000 for the completion). Please reduce the length of the prompt or max_tokens."),
    ],
)
async def test_bad_input_is_400_with_openai_error(one, body, code, message):
    fake, gate, client = one
    r = await client.post("/v1/completions", data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400
    assert err(await r.json()) == ("invalid_request_error", code, message)
    assert "Retry-After" not in r.headers
    assert fake.requests == []


async def test_chat_without_messages(one):
    fake, gate, client = one
    r = await client.post("/v1/chat/completions", json={"model": "m"})
    assert r.status == 400 and err(await r.json())[2] == "messages is required"


async def test_body_over_the_limit_is_413(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], max_request_bytes=1024)
    r = await client.post("/v1/completions", json=completion("big", prompt_tokens=10, prompt="x" * 2000))
    assert r.status == 413 and err(await r.json())[1] == "request_too_large"


# -- API keys -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "headers, code",
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer wrong"}, "invalid_api_key"),
        ({"Authorization": "Basic client-key-1"}, "missing_api_key"),
    ],
)
async def test_api_key_required(fake_engine, start_gate, headers, code):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1", "client-key-2"])
    r = await client.post("/v1/completions", json=completion("a"), headers=headers)
    assert r.status == 401 and err(await r.json())[:2] == ("authentication_error", code)
    r = await client.get("/v1/models", headers=headers)
    assert r.status == 401
    assert fake.requests == [] and fake.tokenize_requests == []


async def test_api_key_accepted_and_not_forwarded(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1", "client-key-2"])
    r = await client.post("/v1/completions", json=completion("a"), headers={"Authorization": "Bearer client-key-2"})
    assert r.status == 200
    assert "Authorization" not in fake.requests[0]["headers"]


async def test_upstream_api_key_is_sent_instead(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-1"], upstream_api_key="engine-key")
    r = await client.post("/v1/completions", json=completion("a"), headers={"Authorization": "Bearer client-key-1"})
    assert r.status == 200
    assert fake.requests[0]["headers"]["Authorization"] == "Bearer engine-key"


# -- token counting -------------------------------------------------------------------
async def test_tokenize_failure_falls_back_to_estimate_and_is_counted(one):
    fake, gate, client = one
    fake.tokenize_status = 500
    fake.block = True
    # 30 words "w" = 59 characters: ceil(59 / 4) = 15 tokens by estimate.
    task = asyncio.create_task(client.post("/v1/completions", json=completion("a", 30, 10)))
    await fake.wait_requests(1)
    assert gate.admission.engines["e1"].reserved == 15 + 10
    assert gate.metrics.tokenize_fallbacks.labels("error")._value.get() == 1
    fake.release("a")
    assert (await task).status == 200


async def test_estimate_mode_never_calls_tokenize(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], token_count={"mode": "estimate", "chars_per_token": 2})
    fake.block = True
    task = asyncio.create_task(client.post("/v1/completions", json=completion("a", 10, 5)))
    await fake.wait_requests(1)
    assert gate.admission.engines["e1"].reserved == 10 + 5  # 19 chars / 2
    assert fake.tokenize_requests == []
    fake.release("a")
    assert (await task).status == 200


async def test_token_id_prompts_are_counted_exactly(one):
    fake, gate, client = one
    fake.block = True
    task = asyncio.create_task(client.post("/v1/completions", json=completion("a", prompt=[1, 2, 3], max_tokens=4)))
    await fake.wait_requests(1)
    assert gate.admission.engines["e1"].reserved == 7 and fake.tokenize_requests == []
    fake.release("a")
    assert (await task).status == 200


# -- engine errors --------------------------------------------------------------------
async def test_engine_down_is_502_and_releases(one):
    fake, gate, client = one
    await fake.server.close()  # it was ready at the last poll; now it refuses
    r = await client.post("/v1/completions", json=completion("a", prompt=[1, 2, 3]))
    assert r.status == 502
    assert err(await r.json())[:2] == ("upstream_error", "upstream_unreachable")
    assert gate.metrics.upstream_errors.labels("e1", "connect")._value.get() == 1
    assert gate.admission.engines["e1"].ready is False  # no new work until /health says so
    assert gate.admission.reserved_tokens == 0


async def test_engine_refusing_from_the_start_is_not_ready(fake_engine, start_gate):
    gate, client = await start_gate([f"http://127.0.0.1:{free_port()}"], queue={"timeout_s": 0.05})
    assert gate.admission.engines["e1"].ready is False
    r = await client.post("/v1/completions", json=completion("a", prompt=[1]))
    assert r.status == 503 and err(await r.json())[1] == "no_ready_upstream"  # waited for an engine, in vain
    r = await client.get("/v1/models")
    assert r.status == 503 and err(await r.json())[1] == "no_ready_upstream"


async def test_engine_timeout_is_504_and_releases(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], upstream_timeouts={"read_s": 0.05})
    fake.block = True
    r = await client.post("/v1/completions", json=completion("slow"))
    assert r.status == 504
    assert err(await r.json())[:2] == ("upstream_error", "upstream_timeout")
    assert gate.metrics.upstream_errors.labels("e1", "timeout")._value.get() == 1
    await until(lambda: fake.cancelled == ["slow"], what="the engine request to be abandoned")


async def test_engine_abort_mid_stream_breaks_the_client_stream(one):
    fake, gate, client = one
    fake.abort_mid_stream = True
    r = await client.post("/v1/completions", json=completion("s", stream=True))
    assert r.status == 200
    first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), WAIT)
    assert b'"t0"' in first
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(r.content.read(), WAIT)
    assert gate.metrics.upstream_errors.labels("e1", "aborted")._value.get() == 1


# -- access log -------------------------------------------------------------------------
async def test_one_log_line_per_request_without_secrets(fake_engine, start_gate, caplog):
    fake = await fake_engine()
    gate, client = await start_gate([fake], api_keys=["client-key-SECRET"])
    caplog.set_level(logging.INFO, logger="vllm_fleet_gate")
    body = completion("a", prompt="TOPSECRETPROMPT " + words(9))
    r = await client.post("/v1/completions", json=body, headers={"Authorization": "Bearer client-key-SECRET"})
    assert r.status == 200
    r = await client.post("/v1/completions", json=body, headers={"Authorization": "Bearer client-key-WRONG"})
    assert r.status == 401
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "vllm_fleet_gate.access"]
    assert len(lines) == 2
    # an admission with a free pool waits no time worth naming, but a busy machine shows 0.1 ms
    assert re.fullmatch(r"POST /v1/completions 200 tokens=20 queue_ms=0\.\d upstream=e1 total_ms=\d+\.\d stream=false",
                        lines[0]), lines[0]
    assert lines[1].startswith("POST /v1/completions 401 tokens=- queue_ms=- upstream=- total_ms=")
    assert lines[1].endswith(" reason=unauthorized")
    everything = caplog.text
    assert "SECRET" not in everything and "WRONG" not in everything
