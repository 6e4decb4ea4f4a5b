"""Test helpers for the gate: a fake vLLM engine, config builders, bounded
waits. Imported by conftest.py and the test modules."""
from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

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
    """Just enough of vLLM's OpenAI server: /v1/completions (plain and SSE,
    with delay, a pause after the first chunk, and abort mid-stream),
    /v1/chat/completions, /v1/models, /health (switchable) and /tokenize
    (one token per whitespace-separated word).

    Requests carry a label in the OpenAI ``user`` field; with ``block`` set
    each one waits until the test calls ``release(label)``.
    """

    MODEL = "fake-model"

    def __init__(self) -> None:
        self.health_status = 200
        self.delay = 0.0
        self.block = False
        self.abort_mid_stream = False
        self.stream_pause: asyncio.Event | None = None
        self.chunks = 3
        self.tokenize_status = 200
        self.requests: list[dict] = []  # {"path", "headers", "body"}
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
        app = web.Application()
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        return app

    async def _health(self, request):
        return web.Response(status=self.health_status)

    async def _models(self, request):
        return web.json_response({"object": "list", "data": [{"id": self.MODEL, "object": "model"}]})

    async def _tokenize(self, request):
        body = await request.json()
        self.tokenize_requests.append(body)
        if self.tokenize_status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.tokenize_status)
        if "prompt" in body:
            count = len(body["prompt"].split())
        else:
            count = sum(len(m.get("content", "").split()) for m in body["messages"])
        return web.json_response({"count": count, "max_model_len": 100, "tokens": list(range(count))})

    async def _completion(self, request):
        body = await request.json()
        label = body.get("user")
        self.requests.append({"path": request.path, "headers": request.headers.copy(), "body": body})
        try:
            if body.get("model") != self.MODEL:
                return web.json_response(
                    {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                               "type": "NotFoundError", "param": None, "code": 404}},
                    status=404,
                )
            if body.get("user") == "explode":
                return web.json_response({"error": {"message": "engine exploded", "code": 500}}, status=500)
            if self.block:
                await self._released.setdefault(label, asyncio.Event()).wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            if body.get("stream"):
                return await self._stream(request, body)
            return web.json_response({
                "id": "cmpl-1", "object": "text_completion", "model": self.MODEL,
                "choices": [{"index": 0, "text": f"ok {label}", "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }, headers={"X-Request-Id": "req-fake"})
        except asyncio.CancelledError:
            self.cancelled.append(label)
            raise

    async def _stream(self, request, body):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i in range(self.chunks):
            chunk = {"id": "cmpl-1", "choices": [{"index": 0, "text": f"t{i}"}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if i == 0:
                if self.abort_mid_stream:
                    request.transport.close()
                    return resp
                if self.stream_pause is not None:
                    await self.stream_pause.wait()
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


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
