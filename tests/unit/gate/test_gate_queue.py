"""Admission over HTTP with small pools (100 tokens): what fits goes, what
does not waits in FIFO order, and every way out releases what it held."""
from __future__ import annotations

import asyncio

import pytest
from gate_helpers import WAIT, completion, fill_then_queue, post, until


async def test_two_fit_the_third_queues_until_one_finishes(one):
    fake, gate, client = one
    a, b, c = await fill_then_queue(fake, gate, client)  # 40 + 40, then c
    assert gate.admission.reserved_tokens == 80 and fake.labels() == ["a", "b"]
    fake.release("a")
    assert (await a).status == 200
    await fake.wait_requests(3)
    assert fake.labels() == ["a", "b", "c"]
    fake.release_all()
    assert [(await t).status for t in (b, c)] == [200, 200]


async def test_fifo_is_strict(one):
    """A small request that would fit does not overtake a big one waiting."""
    fake, gate, client = one
    fake.block = True
    a, b = post(client, completion("a")), post(client, completion("b"))  # 80 of 100
    await fake.wait_requests(2)
    big = post(client, completion("big", 40, 10))  # 50: waits
    await until(lambda: gate.admission.queue_depth == 1, what="big to queue")
    small = post(client, completion("small", 5, 5))  # 10 would fit the free 20
    await until(lambda: gate.admission.queue_depth == 2, what="small to queue behind big")
    assert fake.labels() == ["a", "b"]
    fake.release("a")
    await fake.wait_requests(4)
    assert fake.labels() == ["a", "b", "big", "small"]
    fake.release_all()
    assert {(await t).status for t in (a, b, big, small)} == {200}


async def test_queue_full_is_429_with_retry_after(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], queue={"max_depth": 1})
    a, b, c = await fill_then_queue(fake, gate, client)
    r = await client.post("/v1/completions", json=completion("d"))
    assert r.status == 429 and r.headers["Retry-After"] == "7"
    assert (await r.json())["error"] == {
        "message": "The admission queue is full (1 requests waiting); retry later.",
        "type": "rate_limit_error", "param": None, "code": "queue_full",
    }
    fake.release_all()
    assert [(await t).status for t in (a, b, c)] == [200, 200, 200]


async def test_queue_timeout_is_503_with_retry_after(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], queue={"timeout_s": 0.1})
    fake.block = True
    a, b = post(client, completion("a")), post(client, completion("b"))
    await fake.wait_requests(2)
    r = await client.post("/v1/completions", json=completion("c"))
    assert r.status == 503 and r.headers["Retry-After"] == "7"
    body = await r.json()
    assert body["error"]["code"] == "queue_timeout"
    assert body["error"]["message"] == "Timed out after 0.1 s waiting for room in an engine's KV cache; retry later."
    assert gate.admission.queue_depth == 0
    assert gate.metrics.rejected.labels("queue_timeout")._value.get() == 1
    fake.release_all()
    assert [(await t).status for t in (a, b)] == [200, 200]


@pytest.mark.parametrize(
    "body, code",
    [
        (completion("long", 90, 20), "context_length_exceeded"),  # 110 > max_model_len 100
        (completion("long", 101, None), "context_length_exceeded"),  # the prompt alone
    ],
)
async def test_too_long_is_400_and_never_queued(one, body, code):
    fake, gate, client = one
    fake.block = True
    a, b = post(client, completion("a")), post(client, completion("b"))  # busy: anything that fits would queue
    await fake.wait_requests(2)
    r = await client.post("/v1/completions", json=body)
    assert r.status == 400 and (await r.json())["error"]["code"] == code
    assert gate.admission.queue_depth == 0
    assert gate.metrics.rejected.labels("too_long")._value.get() == 1
    fake.release_all()
    await asyncio.gather(a, b)


async def test_bigger_than_every_pool_is_400(fake_engine, start_gate):
    fake = await fake_engine()
    raw_upstream = {"name": "e1", "url": fake.url, "kv_cache_tokens": 50, "max_model_len": 100}
    gate, client = await start_gate([fake], upstreams=[raw_upstream])
    r = await client.post("/v1/completions", json=completion("big", 50, 10))
    assert r.status == 400
    assert (await r.json())["error"] == {
        "message": "This request needs 60 KV-cache tokens, more than the largest engine's KV cache pool "
                   "(50 tokens), so it could never be admitted. Please reduce the prompt or max_tokens.",
        "type": "invalid_request_error", "param": None, "code": "exceeds_kv_cache_pool",
    }


async def test_no_max_tokens_reserves_up_to_max_model_len(one):
    fake, gate, client = one
    fake.block = True
    a = post(client, completion("a", 30, None))
    await fake.wait_requests(1)
    assert gate.admission.reserved_tokens == 100
    fake.release("a")
    assert (await a).status == 200


async def test_count_max_tokens_off_reserves_the_prompt_only(fake_engine, start_gate):
    fake = await fake_engine()
    gate, client = await start_gate([fake], count_max_tokens=False)
    fake.block = True
    a = post(client, completion("a", 30, 60))
    await fake.wait_requests(1)
    assert gate.admission.reserved_tokens == 30
    fake.release("a")
    assert (await a).status == 200


# -- disconnects ---------------------------------------------------------------------
async def test_disconnect_while_queued_leaves_the_queue(one):
    fake, gate, client = one
    a, b, c = await fill_then_queue(fake, gate, client)
    c.cancel()  # the client gives up: its connection closes
    await until(lambda: gate.admission.queue_depth == 0, what="the waiter to leave the queue")
    assert gate.admission.reserved_tokens == 80
    assert gate.metrics.client_disconnects.labels("queued")._value.get() == 1
    fake.release_all()
    assert [(await t).status for t in (a, b)] == [200, 200]
    assert fake.labels() == ["a", "b"]  # c never reached the engine


async def test_disconnect_mid_stream_releases_and_aborts_the_engine(one):
    fake, gate, client = one
    fake.stream_pause = asyncio.Event()
    r = await client.post("/v1/completions", json=completion("s", stream=True))
    await asyncio.wait_for(r.content.readuntil(b"\n\n"), WAIT)
    assert gate.admission.reserved_tokens == 40
    r.close()  # the client goes away mid-stream
    await until(lambda: gate.admission.reserved_tokens == 0, what="the reservation to be freed")
    await until(lambda: fake.cancelled == ["s"], what="the engine request to be aborted")
    assert gate.metrics.client_disconnects.labels("upstream")._value.get() == 1


async def test_disconnect_while_the_engine_computes_releases(one):
    fake, gate, client = one
    fake.block = True
    a = post(client, completion("a"))
    await fake.wait_requests(1)
    a.cancel()
    await until(lambda: gate.admission.inflight == 0, what="the request to be released")
    await until(lambda: fake.cancelled == ["a"], what="the engine request to be aborted")
