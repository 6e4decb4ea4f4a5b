"""Hostile clients, one case each: bytes no library would send, JSON nested
past any parser's recursion, bodies too large or too slow, headers that
trickle, clients that stop reading or go away at every stage, unknown
models, and HTTP that is not well-formed.

Every case asserts the status and a clear error body, that nothing was
logged at ERROR or with a traceback (the gate's log and the fakes'), and
that the books are back at zero (the autouse fixture, plus explicit waits
where a stage ends asynchronously). The gate is served with its own server
options, as ``__main__`` serves it (the ``serve_gate`` fixture).
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import pytest
from gate_helpers import (
    ADMIN,
    WAIT,
    EngineThread,
    GateProcess,
    SturdyFakeVLLM,
    assert_gate_error,
    assert_no_traceback,
    base_config,
    books,
    completion,
    http_request,
    log_problems,
    raw_exchange,
    read_answer,
    until,
    words,
)
from hostile import nested

from vllm_fleet_gate.app import Gate
from vllm_fleet_gate.config import ConfigError, parse_config

KEY = "client-key-1"
ZERO = {"reserved_tokens": 0, "inflight": 0, "queue_depth": 0}


@pytest.fixture(autouse=True)
def _log_everything(caplog):
    caplog.set_level(logging.INFO)


def gate_error(answer) -> dict:
    """The gate's own error body, as its spec says: OpenAI's shape, a
    message and a code."""
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    return assert_gate_error(answer.json())


def counted(gate, metric: str, label: str) -> float:
    return getattr(gate.metrics, metric).labels(label)._value.get()


def access_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vllm_fleet_gate.access"]


def malformed_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "malformed HTTP request" in r.getMessage()]


async def settle(gate) -> None:
    await until(lambda: books(gate) == ZERO, what=f"the books back at zero ({books(gate)})")


# -- bytes in headers -------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, body, keys, status, code",
    [
        ("/v1/completions", completion("a"), [KEY], 401, "invalid_api_key"),
        ("/v1/models", None, [KEY], 401, "invalid_api_key"),  # passed through, after the key
        ("/admin/state", None, [], 403, "invalid_admin_token"),
        ("/v1/completions", completion("a"), [], 200, None),  # no keys configured: the header is not read
    ],
)
async def test_non_utf8_bearer_token_is_refused_not_a_500(sturdy_engine, serve_gate, caplog, path, body, keys, status,
                                                          code):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], api_keys=keys)
    data = json.dumps(body).encode() if body is not None else b""
    method = "POST" if body is not None else "GET"
    answer = await raw_exchange(client.server.port, http_request(
        method, path, data, {"Connection": "close"}, raw_headers=b"Authorization: Bearer \xff\xfe\x80key\r\n"))
    assert answer.status == status
    if code is not None:
        assert gate_error(answer)["code"] == code
    assert_no_traceback(caplog.records, caplog.text)


async def test_a_forwarded_header_with_bytes_not_utf8_is_dropped(sturdy_engine, serve_gate, caplog):
    """aiohttp cannot send such bytes on (its C writer drops them, its
    Python one raises): the gate drops the header rather than mangle it."""
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    answer = await raw_exchange(client.server.port, http_request(
        "POST", "/v1/completions", json.dumps(completion("a")).encode(), {"Connection": "close"},
        raw_headers=b"X-Request-Id: r\xff\xfe1\r\ntraceparent: ok-1\r\n"))
    assert answer.status == 200 and answer.json()["choices"][0]["text"] == "ok a"
    sent = fake.requests[0]["headers"]
    assert "X-Request-Id" not in sent and sent["traceparent"] == "ok-1"
    assert_no_traceback(caplog.records, caplog.text)


# -- JSON nested past the parsers' recursion --------------------------------------------------
def chat_with(content_json: str) -> bytes:
    return ('{"model": "fake-model", "messages": [{"role": "user", "content": ' + content_json + "}]}").encode()


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", b'{"prompt": "hi", "x": ' + nested(5000).encode() + b"}"),  # past the parser's recursion
        ("/v1/completions", b'{"prompt": "hi", "x": ' + nested(1000, "{\"a\": ", "}").encode() + b"}"),
        ("/v1/chat/completions", chat_with(nested(1000))),  # inside messages: parsed, then counted and tokenized
        ("/v1/chat/completions", chat_with(nested(600, '[{"text": "w", "x": ', "}]", "1"))),
        ("/v1/chat/completions", chat_with(nested(200))),  # parses anywhere, but deeper than the gate takes
        ("/v1/responses", b'{"input": ' + nested(1000).encode() + b"}"),
        ("/invocations", chat_with(nested(1000))),
    ],
    ids=["completion-5000", "objects-1000", "chat-1000", "chat-parts-600", "chat-200", "responses-1000", "invocations"],
)
async def test_deeply_nested_json_is_400(sturdy_engine, serve_gate, caplog, path, body):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    r = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400
    error = assert_gate_error(await r.json())
    assert error["code"] == "json_too_deep" and error["type"] == "invalid_request_error"
    assert error["message"] == "The request body nests JSON deeper than 128 levels."
    assert fake.requests == [] and fake.tokenize_requests == []
    assert_no_traceback(caplog.records, caplog.text)


async def test_the_depth_limit_is_128_levels(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    # The body is level 1: 127 lists inside it make 128 levels.
    ok = await client.post("/v1/completions", json={**completion("a"), "x": json.loads(nested(127))})
    assert ok.status == 200
    deep = await client.post("/v1/completions", json={**completion("b"), "x": json.loads(nested(128))})
    assert deep.status == 400 and (await deep.json())["error"]["code"] == "json_too_deep"
    assert fake.labels() == ["a"]
    assert_no_traceback(caplog.records, caplog.text)


async def test_deeply_nested_admin_body_is_400(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    r = await client.post("/admin/hold", data=b'{"seconds": ' + nested(3000).encode() + b"}",
                          headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status == 400 and (await r.json())["error"]["code"] == "json_too_deep"
    assert not gate.admission.held
    assert_no_traceback(caplog.records, caplog.text)


# -- numbers past what Python prints -----------------------------------------------------------
HUGE = "9" * 4300  # the most digits json.loads takes; one more in a sum and str() refuses it


@pytest.mark.parametrize(
    "path, body, code",
    [
        ("/v1/completions", '{"prompt": "hi", "max_tokens": %s}' % HUGE, "invalid_max_tokens"),
        ("/v1/completions", '{"prompt": "hi", "max_tokens": 1, "n": %s}' % HUGE, "invalid_n"),
        ("/v1/completions", '{"prompt": [1, 2], "best_of": %s}' % HUGE, "invalid_best_of"),
        ("/v1/completions", '{"prompt": "hi", "max_tokens": -%s}' % HUGE, "invalid_max_tokens"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": %s}' % HUGE,
         "invalid_max_completion_tokens"),
        ("/v1/responses", '{"input": "x", "max_output_tokens": %s}' % HUGE, "invalid_max_output_tokens"),
        ("/inference/v1/generate", '{"token_ids": [1], "sampling_params": {"n": %s}}' % HUGE, "invalid_n"),
        ("/v1/completions", '{"prompt": "hi", "max_tokens": 9%s}' % HUGE, "invalid_json"),  # past json.loads' limit
    ],
    ids=["max_tokens", "n", "best_of", "negative", "max_completion_tokens", "max_output_tokens", "generate", "4301"],
)
async def test_an_integer_of_thousands_of_digits_is_400(sturdy_engine, serve_gate, caplog, path, body, code):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    r = await client.post(path, data=body.encode(), headers={"Content-Type": "application/json"})
    assert r.status == 400
    error = assert_gate_error(await r.json())
    assert error["code"] == code and len(error["message"]) < 200
    assert fake.requests == []
    assert_no_traceback(caplog.records, caplog.text)


# -- bodies too large -------------------------------------------------------------------------
async def test_a_body_declared_too_large_is_413_at_once(sturdy_engine, serve_gate, caplog):
    """Content-Length over the limit: refused before a byte of the body is
    read (the client need not send it)."""
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], max_request_bytes=1024)
    started = time.monotonic()
    answer = await raw_exchange(client.server.port, http_request(
        "POST", "/v1/completions", headers={"Content-Length": str(10 ** 12)}), timeout=2)
    assert answer.status == 413 and gate_error(answer)["code"] == "request_too_large"
    assert time.monotonic() - started < 1.5
    assert_no_traceback(caplog.records, caplog.text)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", "/admin/drain"])
async def test_a_chunked_body_over_the_limit_is_413(sturdy_engine, serve_gate, caplog, path):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], max_request_bytes=1024)
    chunk = b"x" * 700
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n"
    answer = await raw_exchange(client.server.port, http_request(
        "POST", path, body, {"Content-Length": None, "Transfer-Encoding": "chunked",
                             "Authorization": f"Bearer {ADMIN}"}))
    assert answer.status == 413
    error = gate_error(answer)
    assert error["code"] == "request_too_large"
    assert error["message"] == "The request body is larger than the gate's limit (1024 bytes)."
    assert fake.requests == []
    assert_no_traceback(caplog.records, caplog.text)


# -- slow clients ------------------------------------------------------------------------------
def test_the_client_timeouts_have_defaults_and_are_checked():
    cfg = parse_config(base_config(["http://127.0.0.1:9"]))
    assert (cfg.client_idle_timeout_s, cfg.client_body_timeout_s, cfg.client_write_timeout_s) == (75, 120, 60)
    with pytest.raises(ConfigError) as exc:
        parse_config(base_config(["http://127.0.0.1:9"],
                                 listen={"idle_timeout_s": 0, "body_timeout_s": "9", "write_timeout_s": -1}))
    assert exc.value.errors == [
        "listen.idle_timeout_s: must be a positive number, got 0",
        "listen.body_timeout_s: must be a positive number, got '9'",
        "listen.write_timeout_s: must be a positive number, got -1",
    ]
    options = Gate(parse_config(base_config(["http://127.0.0.1:9"], listen={"idle_timeout_s": 7}))).server_options()
    assert options["keepalive_timeout"] == 7 and options["access_log"] is None


async def test_trickled_headers_are_cut_at_the_idle_timeout(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], listen={"idle_timeout_s": 0.4})
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    started = time.monotonic()
    head = http_request("POST", "/v1/completions", b"{}")
    closed_after = None
    for byte in head[:-4]:  # never the blank line that ends the headers
        try:
            writer.write(bytes([byte]))
            await writer.drain()
            closed = await asyncio.wait_for(reader.read(1), 0.05) == b""
        except TimeoutError:
            closed = False
        except ConnectionError:
            closed = True
        if closed:
            closed_after = time.monotonic() - started
            break
    writer.close()
    assert closed_after is not None and 0.3 < closed_after < 2.0, closed_after
    assert fake.requests == [] and books(gate) == ZERO
    # The gate still serves.
    assert (await client.post("/v1/completions", json=completion("after"))).status == 200
    assert_no_traceback(caplog.records, caplog.text)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/models", "/admin/hold"])
async def test_a_trickled_body_is_408_at_the_body_timeout(sturdy_engine, serve_gate, caplog, path):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], listen={"body_timeout_s": 0.4})
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(http_request("POST", path, headers={"Content-Length": "1000", "Authorization": f"Bearer {ADMIN}"}))
    started = time.monotonic()
    seen = []

    async def trickle():
        while True:
            writer.write(b" ")
            await writer.drain()
            seen.append(books(gate))
            await asyncio.sleep(0.05)

    dripping = asyncio.create_task(trickle())
    try:
        answer = await read_answer(reader, timeout=WAIT)
    finally:
        dripping.cancel()
        writer.close()
    assert seen and all(b == ZERO for b in seen)  # nothing is reserved for a body still arriving
    assert answer.status == 408
    error = gate_error(answer)
    assert error["code"] == "request_timeout" and error["message"] == "The request body did not arrive within 0.4 s."
    assert answer.headers["connection"].lower() == "close"
    assert 0.3 < time.monotonic() - started < 2.0
    assert fake.requests == [] and not gate.admission.held
    assert counted(gate, "rejected", "request_timeout") == (0 if path.startswith("/admin") else 1)
    assert_no_traceback(caplog.records, caplog.text)


async def test_a_client_that_stops_reading_its_stream_is_cut(sturdy_engine, serve_gate, caplog):
    """Its reservation is held while the stream runs, and freed once the
    gate's writes have waited write_timeout_s for it; the engine's request
    is aborted."""
    fake = await sturdy_engine(flood=True)
    gate, client = await serve_gate([fake], listen={"write_timeout_s": 0.3})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", client.server.port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
                       "stream": True}).encode()
    writer.write(http_request("POST", SturdyFakeVLLM.FLOOD_ROUTE, body))
    await until(lambda: gate.admission.inflight == 1, what="the stream to be admitted")
    await until(lambda: fake.flood_cancelled, timeout=WAIT, what="the engine's request to be aborted")
    await settle(gate)
    writer.close()
    assert counted(gate, "client_disconnects", "stalled") == 1
    assert any("stopped reading its stream for 0.3 s" in r.getMessage() for r in caplog.records)
    assert any(" 499 " in line and "reason=client_stalled" in line for line in access_lines(caplog))
    assert_no_traceback(caplog.records, caplog.text)


# -- a client that goes away, at every stage ---------------------------------------------------
@pytest.mark.parametrize("stage", ["body", "tokenize", "queued", "upstream", "stream"])
async def test_a_client_that_goes_away_at_any_stage_frees_what_it_held(sturdy_engine, serve_gate, caplog, stage):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    fills = []
    if stage == "tokenize":
        fake.tokenize_pause = asyncio.Event()
    if stage in ("queued", "upstream"):
        fake.block = True
    if stage == "queued":  # 40 + 40 of 100: the next one waits
        fills = [asyncio.create_task(client.post("/v1/completions", json=completion(x))) for x in "ab"]
        await fake.wait_requests(2)
    if stage == "stream":
        fake.stream_pause = asyncio.Event()
    body = json.dumps(completion("gone", stream=stage == "stream")).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    if stage == "body":
        writer.write(http_request("POST", "/v1/completions", body)[:-10])  # the end of the body never comes
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is reading it
    else:
        writer.write(http_request("POST", "/v1/completions", body))
        await writer.drain()
    if stage == "tokenize":
        await until(lambda: len(fake.tokenize_requests) == 1, what="the /tokenize call")
    elif stage == "queued":
        await until(lambda: gate.admission.queue_depth == 1, what="the request to queue")
    elif stage == "upstream":
        await until(lambda: "gone" in fake.labels(), what="the request at the engine")
    elif stage == "stream":
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
        assert b" 200 " in head and b"text/event-stream" in head
        assert b'"t0"' in await asyncio.wait_for(reader.readuntil(b"\n\n"), WAIT)
        assert gate.admission.inflight == 1
    writer.close()

    await until(lambda: any(" 499 " in line for line in access_lines(caplog)), what="the access line with 499")
    if stage in ("upstream", "stream"):
        await until(lambda: "gone" in fake.cancelled, what="the engine's request to be aborted")
    if fake.tokenize_pause is not None:
        fake.tokenize_pause.set()
    fake.release_all()
    if fake.stream_pause is not None:
        fake.stream_pause.set()
    assert [(await t).status for t in fills] == [200] * len(fills)
    await settle(gate)
    if stage in ("body", "queued", "upstream", "stream"):
        label = "upstream" if stage == "stream" else stage
        assert counted(gate, "client_disconnects", label) == 1
    assert "gone" not in fake.labels() or stage in ("upstream", "stream")
    assert_no_traceback(caplog.records, caplog.text)


# -- unknown models ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_an_unknown_model_is_the_engines_404(sturdy_engine, serve_gate, caplog, path):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    if path == "/v1/completions":
        body = completion("m", model="no-such-model")
    else:
        body = {"model": "no-such-model", "messages": [{"role": "user", "content": words(5)}], "max_tokens": 5}
    r = await client.post(path, json=body)
    assert r.status == 404
    assert await r.json() == {"error": {"message": "The model `no-such-model` does not exist.",
                                        "type": "NotFoundError", "param": "model", "code": 404}}
    assert fake.tokenize_requests and fake.tokenize_requests[0]["model"] == "no-such-model"
    assert_no_traceback(caplog.records, caplog.text)


async def test_an_unknown_model_with_a_prompt_too_long_is_the_gates_400(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    r = await client.post("/v1/completions", json=completion("m", model="no-such-model", prompt="x" * 800))
    assert r.status == 400 and (await r.json())["error"]["code"] == "context_length_exceeded"
    assert fake.requests == []
    assert_no_traceback(caplog.records, caplog.text)


# -- HTTP that is not well-formed ------------------------------------------------------------------
GOOD = http_request("GET", "/health", headers={"Content-Type": None, "Content-Length": None})
MALFORMED = {
    "bad request line": b"GARBAGE\r\n\r\n",
    "bad request line after a good request": GOOD + b"NOT HTTP AT ALL\r\n\r\n",
    "bad header": b"GET /health HTTP/1.1\r\nHost: gate\r\nBad Header\r\n\r\n",
    "control character in a header": b"GET /health HTTP/1.1\r\nHost: gate\r\nX-Request-Id: a\x01b\r\n\r\n",
    "header line too long": b"GET /health HTTP/1.1\r\nHost: gate\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "bad Content-Length": b"POST /v1/completions HTTP/1.1\r\nHost: gate\r\nContent-Length: 12x\r\n\r\n{}",
    "Content-Length and chunked": (b"POST /v1/completions HTTP/1.1\r\nHost: gate\r\nContent-Length: 5\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    "bad chunk size": (b"POST /v1/completions HTTP/1.1\r\nHost: gate\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"zz\r\n{}\r\n0\r\n\r\n"),
    "bad chunk end": (b"POST /v1/completions HTTP/1.1\r\nHost: gate\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"2\r\n{}XX0\r\n\r\n"),
    "bytes not UTF-8 in the path": b"GET /\xff\xfe HTTP/1.1\r\nHost: gate\r\n\r\n",
}


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_malformed_http_is_one_warning_line_without_traceback(sturdy_engine, serve_gate, caplog, data):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    if data.startswith(GOOD):  # a keep-alive connection's second request
        writer.write(GOOD)
        assert (await read_answer(reader)).status == 200
        data = data[len(GOOD):]
    writer.write(data)
    await writer.drain()
    answer = await read_answer(reader)
    writer.close()
    assert answer.status == 400 and answer.body  # aiohttp's own plain 400, saying what is wrong
    await until(lambda: malformed_warnings(caplog), what="the warning line")
    (line,) = malformed_warnings(caplog)
    message = line.getMessage()
    assert line.name == "vllm_fleet_gate" and line.exc_info is None and "\n" not in message
    assert message.startswith("malformed HTTP request from 127.0.0.1: ") and message.endswith("(answered 400)")
    assert counted(gate, "rejected", "malformed_request") == 1
    assert fake.requests == []
    assert_no_traceback(caplog.records, caplog.text)


async def test_a_bad_chunk_after_the_headers_ends_at_the_body_timeout(sturdy_engine, serve_gate, caplog):
    """aiohttp stops a body whose chunk framing breaks after the handler
    started reading it without telling the handler: the body timeout ends
    the wait."""
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake], listen={"body_timeout_s": 0.3})
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: gate\r\nTransfer-Encoding: chunked\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.write(b"zz\r\n{}\r\n0\r\n\r\n")
    answer = await read_answer(reader)
    writer.close()
    assert answer.status == 408 and gate_error(answer)["code"] == "request_timeout"
    assert fake.requests == []
    assert_no_traceback(caplog.records, caplog.text)


async def test_a_flood_of_malformed_requests_is_rate_limited_in_the_log(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    started = time.monotonic()
    for _ in range(30):
        answer = await raw_exchange(client.server.port, MALFORMED["bad header"])
        assert answer.status == 400
    elapsed = time.monotonic() - started
    assert counted(gate, "rejected", "malformed_request") == 30
    lines = malformed_warnings(caplog)
    assert 1 <= len(lines) <= 1 + int(elapsed)
    if len(lines) > 1:
        assert "more since the last such line" in lines[1].getMessage()
    assert_no_traceback(caplog.records, caplog.text)


async def test_a_path_cannot_forge_a_log_line(sturdy_engine, serve_gate, caplog):
    fake = await sturdy_engine()
    gate, client = await serve_gate([fake])
    answer = await raw_exchange(client.server.port, http_request(
        "GET", "/x%0aERROR%20vllm_fleet_gate:%20forged%00", headers={"Connection": "close"}))
    assert answer.status == 404  # the engine's
    (line,) = [x for x in access_lines(caplog) if x.startswith("GET /x")]
    assert line.startswith("GET /x\\nERROR%20vllm_fleet_gate:%20forged\\x00 404 ")
    assert_no_traceback(caplog.records, caplog.text)


# -- the same, in a real gate process ------------------------------------------------------------
def test_the_gate_process_cuts_a_stalled_reader_and_logs_malformed_http_in_one_line(tmp_path):
    """``python -m vllm_fleet_gate``, as systemd runs it (uvloop's loop and
    its own buffer limits, the batched log handler)."""
    engine = EngineThread(SturdyFakeVLLM(flood=True))
    fake = engine.start()
    gate = GateProcess(tmp_path, fake, listen={"write_timeout_s": 0.3})
    gate.start()
    try:
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", gate.port))
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}).encode()
        stalled.sendall(http_request("POST", SturdyFakeVLLM.FLOOD_ROUTE, body))  # and never reads

        def inflight() -> int:
            return gate.state()["inflight"]

        deadline = time.monotonic() + WAIT
        while inflight() == 0 and not fake.flood_cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        while (inflight() or not fake.flood_cancelled) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gate.books_after() == {"reserved_tokens": 0, "inflight": 0, "queued": 0}
        assert fake.flood_cancelled  # the engine's request was aborted
        stalled.close()

        with socket.create_connection(("127.0.0.1", gate.port)) as bad:
            bad.sendall(MALFORMED["bad header"])
            assert bad.recv(100).startswith(b"HTTP/1.0 400 ")
        metrics = gate.session.get(gate.url + "/metrics", timeout=5).text
        assert 'vllm_fleet_gate_client_disconnects_total{stage="stalled"} 1.0' in metrics
        assert 'vllm_fleet_gate_rejected_total{reason="malformed_request"} 1.0' in metrics
    finally:
        status = gate.stop()
        engine.stop()
    log = gate.log_path.read_text()
    assert status == 0 and not log_problems(log), log
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    assert [w for w in warnings if "malformed" in w] == [
        "WARNING vllm_fleet_gate: malformed HTTP request from 127.0.0.1: Invalid header token (answered 400)"]
    assert [w for w in warnings if "stopped reading" in w] == [
        "WARNING vllm_fleet_gate: client 127.0.0.1 stopped reading its stream for 0.3 s; cut it"]
