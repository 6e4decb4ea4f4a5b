"""The gate's HTTP side: an OpenAI-compatible reverse proxy in front of vLLM
engines, with admission by KV pool (``admission.py``).

The generation routes (``GENERATION_ROUTES``) are admitted; every other
path and method is passed through to a ready engine as it is, so a client
sees the engine's API. The gate's own routes are /health, /metrics and
/admin/*. Whatever the gate itself refuses is answered in OpenAI's error
shape.

aiohttp serves and aiohttp forwards, through one shared ClientSession whose
connector limit sits above the expected concurrency (docs/gate.md explains
why: an httpx pool collapsed at 64 concurrent requests on this design).
Streamed responses are relayed chunk by chunk as they arrive.

Run it with a runner that has ``handler_cancellation=True`` (``__main__``
does; aiohttp's test server does too): a client that goes away cancels its
handler, and the handler's ``finally`` takes it out of the queue or frees its
reservation and closes the engine connection, so vLLM aborts the request.
``Gate.server_options()`` holds the rest of the runner's options: the idle
timeout that also bounds trickled headers, and the server logger that logs
a client's malformed HTTP as one WARNING line rather than an ERROR with a
traceback.

The gate's own HTTP surface is described in ``openapi.json`` beside this
module (served at GET /openapi.json); a test holds it to the route table.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from importlib import resources
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .admission import (
    ADMITTED,
    DOWN,
    FAILED,
    GENERATION_ROUTES,
    UNHEALTHY,
    UNRESPONSIVE,
    Admission,
    BadRequest,
    Demand,
    Plan,
    Rejected,
    Ticket,
    UnknownUpstream,
    estimate_tokens,
)
from .config import Config
from .metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("vllm_fleet_gate")
access_log = logging.getLogger("vllm_fleet_gate.access")

# The gate's own paths, never passed to an engine (the engine's /health,
# /metrics and /openapi.json are the engine's, not the gate's), and
# everything under /admin.
_OWN_PATHS = frozenset(("/health", "/metrics", "/openapi.json"))

# The spec of the gate's own HTTP surface, a data file of the package.
SPEC_FILE = "openapi.json"

# JSON nested deeper than this is refused (400 json_too_deep). No OpenAI
# request comes near it (a tool's JSON schema is a few dozen levels), and
# deeper bodies overflow the recursion of the JSON parser, of the counting of
# messages and of the /tokenize body's encoding.
MAX_JSON_DEPTH = 128

# Only these cross the gate; Authorization never does (see upstream_api_key).
_REQUEST_HEADERS = ("Accept", "X-Request-Id", "traceparent", "tracestate")
_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Cache-Control", "X-Request-Id", "Allow")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_error",
}
# The status a client that went away is logged with (as nginx does).
CLIENT_CLOSED = 499

_REJECTIONS = {
    "too_long": (400, "context_length_exceeded", False),
    "never_fits": (400, "exceeds_kv_cache_pool", False),
    "queue_full": (429, "queue_full", True),
    "shutting_down": (503, "shutting_down", True),
}


def error_response(status: int, message: str, code: str, *, retry_after: int | None = None,
                   headers: dict | None = None, close: bool = False) -> web.Response:
    """An OpenAI-style error body. ``close``: end the connection after it
    (a body the gate stopped reading is still arriving)."""
    body = {"error": {"message": message, "type": _ERROR_TYPES.get(status, "error"), "param": None, "code": code}}
    if retry_after:
        headers = {**(headers or {}), "Retry-After": str(retry_after)}
    resp = web.json_response(body, status=status, headers=headers)
    if close:
        resp.force_close()
    return resp


def spec_bytes() -> bytes:
    """The gate's OpenAPI spec, as the package holds it."""
    return resources.files(__package__).joinpath(SPEC_FILE).read_bytes()


class BodyRefused(Exception):
    """A request body the gate will not take: too large, too slow, not
    well-formed HTTP, not JSON, or nested too deeply."""

    def __init__(self, status: int, reason: str, message: str, code: str, *, close: bool = False):
        super().__init__(message)
        self.status, self.reason, self.message, self.code, self.close = status, reason, message, code, close


def _first_line(exc: BaseException) -> str:
    """aiohttp's parse error in one printable line, without the client's
    bytes it quotes below the first line."""
    text = getattr(exc, "message", "") or str(exc) or type(exc).__name__
    line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    line = "".join(c if c.isprintable() else "?" for c in line.rstrip(":"))
    return line[:200]


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether decoded JSON nests lists and objects more than ``limit`` deep
    (without recursion, so any depth can be checked)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _too_deep_refusal() -> BodyRefused:
    return BodyRefused(400, "bad_request", f"The request body nests JSON deeper than {MAX_JSON_DEPTH} levels.",
                       "json_too_deep")


def parse_json(body: bytes) -> Any:
    """A request body decoded as JSON; BodyRefused (400) when it is not JSON
    or nests deeper than MAX_JSON_DEPTH."""
    try:
        payload = json.loads(body)
    except RecursionError:
        raise _too_deep_refusal() from None
    except ValueError:
        raise BodyRefused(400, "bad_request", "The request body is not valid JSON.", "invalid_json") from None
    # Each level needs a bracket, so a body with fewer than the limit cannot
    # be too deep: the common case costs two counts at C speed.
    if isinstance(payload, (dict, list)) and body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
        if too_deep(payload):
            raise _too_deep_refusal()
    return payload


def _forwardable(value: str) -> bool:
    """Whether a client's header value can be sent on to an engine as it
    is. aiohttp keeps bytes that are not UTF-8 as surrogates, which it cannot
    send (its C writer drops them, its Python writer raises), and sends no
    control characters: such a value is dropped, not mangled."""
    return value.isprintable() or value.replace("\t", " ").isprintable()


def _escaped(text: str) -> str:
    """``text`` with every space and unprintable character escaped, for a
    log line: a decoded path can hold a newline, which would forge a line."""
    out = []
    for c in text:
        out.append("%20" if c == " " else c if c.isprintable() else ascii(c)[1:-1])
    return "".join(out)


def connect_reason(exc: aiohttp.ClientConnectorError) -> str:
    """``connection refused``, ``name or service not known``: the OS's words
    (aiohttp's own strerror is "Connect call failed (...)")."""
    err = exc.os_error
    if err.errno and err.errno > 0 and not isinstance(err, socket.gaierror):
        text = os.strerror(err.errno)
    else:
        text = err.strerror or str(err) or type(err).__name__
    return text[:1].lower() + text[1:]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _bearer(request: web.Request) -> bytes | None:
    value = request.headers.get("Authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    # aiohttp keeps bytes that are not UTF-8 as surrogates: these give them
    # back, so any bytes compare (and match no key) rather than raise.
    return token.encode("utf-8", "surrogateescape")


@dataclass
class _Exchange:
    """What the access log line says about one request (never the prompt
    or a key)."""

    method: str
    path: str
    status: int = 0
    tokens: int | None = None
    queue_ms: float | None = None
    upstream: str = "-"
    stream: bool = False
    reason: str = ""


class Gate:
    """One gate: its books, its metrics, its engine sessions and handlers."""

    def __init__(self, config: Config, *, clock=time.monotonic, access_sink: Callable[[str], None] | None = None):
        """``access_sink``: called with each request's log line instead of
        logging it through the ``vllm_fleet_gate.access`` logger (``__main__``
        hands it straight to the batched log handler)."""
        self.config = config
        self._access_sink = access_sink
        self.admission = Admission(
            ((u.name, u.kv_cache_tokens, u.max_model_len) for u in config.upstreams),
            max_queue_depth=config.queue_max_depth,
            count_max_tokens=config.count_max_tokens,
            clock=clock,
        )
        self.bases = {u.name: u.url for u in config.upstreams}
        self.shutting_down = False
        self.metrics = Metrics(self.admission, lambda: self.shutting_down)
        self.session: aiohttp.ClientSession | None = None
        self._clock = clock
        self._waiters: dict[int, asyncio.Future] = {}
        self._health_task: asyncio.Task | None = None
        self._hold_timer: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._api_keys = [k.encode() for k in config.api_keys]
        self._admin_token = config.admin_token.encode()
        self._upstream_auth = (
            {"Authorization": f"Bearer {config.upstream_api_key}"} if config.upstream_api_key else {}
        )
        self._last_fallback_log = float("-inf")
        self._tokenize_mode = config.token_count_mode == "tokenize"
        self._passing = 0  # passthrough requests in flight (for a graceful stop)
        self._admin_paths = {path: method for method, path in self._admin_routes()}
        self._spec = spec_bytes()
        self._last_malformed_log = float("-inf")
        self._malformed_unlogged = 0

    # -- wiring -----------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes)
        add = app.router
        for path, reader in GENERATION_ROUTES.items():
            add.add_post(path, self._admitted(reader))
        add.add_get("/health", self.handle_health)
        add.add_get("/metrics", self.handle_metrics)
        add.add_get("/openapi.json", self.handle_openapi)
        for (method, path), handler in self._admin_routes().items():
            add.add_route(method, path, handler)
        # Last: everything else, any method, goes to an engine as it is.
        add.add_route("*", r"/{path:[\s\S]*}", self.handle_passthrough)  # a %0a in a path too
        app.cleanup_ctx.append(self._lifecycle)
        return app

    def server_options(self) -> dict:
        """The aiohttp runner's options for this gate (besides
        ``handler_cancellation=True``, which every runner of the gate needs):
        the idle timeout, which also closes a connection whose headers
        trickle in, and the server logger."""
        return {
            "access_log": None,
            "keepalive_timeout": self.config.client_idle_timeout_s,
            "logger": _ServerLog(self),
        }

    def _admin_routes(self) -> dict:
        return {
            ("GET", "/admin/state"): self.handle_admin_state,
            ("GET", "/admin/inflight"): self.handle_admin_inflight,
            ("POST", "/admin/drain"): self.handle_drain,
            ("POST", "/admin/undrain"): self.handle_undrain,
            ("POST", "/admin/hold"): self.handle_hold,
            ("POST", "/admin/release"): self.handle_release,
        }

    def _admitted(self, reader: Callable[[dict], Plan | None]):
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._handle(request, reader)
        return handler

    async def handle_passthrough(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, None)

    async def _handle(self, request: web.Request, reader: Callable[[dict], Plan | None] | None) -> web.StreamResponse:
        """One proxied request, and its access log line. ``reader``: how a
        generation route's body is read; None: passed through."""
        started = time.perf_counter()
        ex = _Exchange(request.method, request.path)
        try:
            if reader is None:
                resp = await self._passthrough(request, ex)
            else:
                resp = await self._completion(request, ex, reader)
            if not ex.status:
                ex.status = resp.status
            return resp
        except asyncio.CancelledError:
            ex.status = CLIENT_CLOSED
            raise
        except Exception:
            ex.status = 500  # aiohttp answers 500 and logs the traceback
            raise
        finally:
            if reader is not None:
                self.metrics.response(ex.status)
            self._log(ex, started)

    async def _read(self, request: web.Request, ex: _Exchange) -> bytes | web.Response:
        """What every proxied request passes first: the shutdown, the API
        key, the body's size. The body, or the refusal."""
        if self.shutting_down:
            return self._shutting_down(ex)
        denied = self._check_api_key(request)
        if denied is not None:
            ex.reason = "unauthorized"
            self.metrics.rejected.labels("unauthorized").inc()
            return denied
        try:
            return await self._read_body(request)
        except BodyRefused as exc:
            return self._refused(ex, exc)

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole body, within ``max_request_bytes`` and
        ``listen.body_timeout_s``. Raises BodyRefused."""
        length = request.content_length
        if length is not None and length > self.config.max_request_bytes:
            raise self._too_large()  # said so up front: not worth reading
        try:
            if request.content.is_eof():
                return await request.read()  # all here already: no wait, no timer
            async with asyncio.timeout(self.config.client_body_timeout_s):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise self._too_large() from None
        except TimeoutError:
            raise BodyRefused(
                408, "request_timeout",
                f"The request body did not arrive within {self.config.client_body_timeout_s:g} s.",
                "request_timeout", close=True,
            ) from None
        except HttpProcessingError as exc:
            # Broken framing after the headers (a bad chunk, a short body).
            self._malformed(request.remote, exc)
            raise BodyRefused(
                400, "malformed_request", f"The request body is malformed: {_first_line(exc)}.",
                "malformed_body", close=True,
            ) from None
        except asyncio.CancelledError:
            self.metrics.client_disconnects.labels("body").inc()
            raise

    def _too_large(self) -> BodyRefused:
        limit = self.config.max_request_bytes
        return BodyRefused(
            413, "bad_request", f"The request body is larger than the gate's limit ({limit} bytes).",
            "request_too_large"
        )

    def _refused(self, ex: _Exchange, exc: BodyRefused) -> web.Response:
        self.metrics.rejected.labels(exc.reason).inc()
        ex.reason = exc.reason
        return error_response(exc.status, exc.message, exc.code, close=exc.close)

    def _malformed(self, remote: str | None, exc: BaseException) -> None:
        """A client's malformed HTTP: counted, and logged as one WARNING line
        without a traceback, at most one a second (the metric counts every
        one), so no client can fill the journal."""
        self.metrics.rejected.labels("malformed_request").inc()
        now = time.monotonic()
        if now - self._last_malformed_log < 1.0:
            self._malformed_unlogged += 1
            return
        more = f"; {self._malformed_unlogged} more since the last such line" if self._malformed_unlogged else ""
        self._last_malformed_log, self._malformed_unlogged = now, 0
        log.warning("malformed HTTP request from %s: %s (answered 400)%s", remote or "-", _first_line(exc), more)

    async def _lifecycle(self, app: web.Application):
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        cfg = self.config
        # Idle engine connections are dropped before vLLM's keep-alive (5 s)
        # would: aiohttp does not retry a POST on a connection closed under it.
        connector = aiohttp.TCPConnector(
            limit=cfg.upstream_max_connections, limit_per_host=0, keepalive_timeout=cfg.upstream_keepalive_s
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            # No total limit: a 1M-token prefill or a long stream is normal.
            # sock_read bounds the silence between two chunks.
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=cfg.upstream_connect_timeout_s,
                sock_read=cfg.upstream_read_timeout_s,
            ),
            auto_decompress=False,
        )
        await self.poll_health()
        self._health_task = asyncio.create_task(self._health_loop(), name="vllm-fleet-gate-health")

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if not self.admission.closed:
            self._wake(self.admission.close())
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- shutdown ---------------------------------------------------------
    def begin_shutdown(self) -> None:
        """Stop admitting: new requests and queued ones get 503, admitted
        ones carry on. The caller then waits with ``wait_idle``."""
        if self.shutting_down:
            return
        self.shutting_down = True
        failed = self.admission.close()
        log.info(
            "shutting down: %d in flight may finish, %d queued get 503",
            self.admission.inflight, len(failed),
        )
        self._wake(failed)

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is in flight or queued; False on timeout."""
        self._update_idle()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def _update_idle(self) -> None:
        if self.admission.inflight == 0 and self.admission.queue_depth == 0 and self._passing == 0:
            self._idle.set()
        else:
            self._idle.clear()

    # -- engine readiness ---------------------------------------------------
    async def poll_health(self) -> None:
        """Probe every engine's /health once (also runs every interval_s)."""
        await asyncio.gather(*(self._probe(name) for name in self.bases))

    async def _probe(self, name: str) -> None:
        # While vLLM loads its port refuses connections; a dead engine
        # answers 503; a wedged one may not answer. All mean: send it
        # nothing new, and say which it is.
        url = self.bases[name]
        timeout = aiohttp.ClientTimeout(total=self.config.health_timeout_s)
        health, detail = UNHEALTHY, ""
        try:
            async with self.session.get(url + "/health", timeout=timeout) as resp:
                await resp.read()
                ready = resp.status == 200
                detail = f"/health answered {resp.status} at {url}"
        except aiohttp.ClientConnectorError as exc:
            ready, health, detail = False, DOWN, f"{connect_reason(exc)} at {url}"
        except asyncio.TimeoutError:
            ready, health = False, UNRESPONSIVE
            detail = f"/health did not answer within {self.config.health_timeout_s:g} s at {url}"
        except (aiohttp.ClientError, OSError) as exc:
            ready, health, detail = False, DOWN, f"{type(exc).__name__} at {url}"
        self._set_ready(name, ready, health, detail)

    def _set_ready(self, name: str, ready: bool, health: str = "", detail: str = "") -> None:
        engine = self.admission.engines[name]
        was = (engine.ready, engine.health)
        self._wake(self.admission.set_ready(name, ready, health, detail))
        if (engine.ready, engine.health) != was:
            if ready:
                log.info("upstream %s is ready", name)
            else:
                log.warning("upstream %s", engine.describe())

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.poll_health()
            except Exception:  # pragma: no cover - keep polling whatever happens
                log.exception("health poll failed")

    # -- the books ----------------------------------------------------------
    def _wake(self, tickets: list[Ticket]) -> None:
        for ticket in tickets:
            if ticket.state == ADMITTED:
                self._count_admitted(ticket)
            fut = self._waiters.get(ticket.id)
            if fut is not None and not fut.done():
                fut.set_result(None)
        self._update_idle()

    def _count_admitted(self, ticket: Ticket) -> None:
        self.metrics.admitted_by[ticket.engine].inc()
        self.metrics.queue_seconds.observe(ticket.wait_s)

    def _finish(self, ticket: Ticket) -> None:
        self._wake(self.admission.release(ticket))

    def state(self) -> dict:
        snap = self.admission.snapshot()
        for name, upstream in snap["upstreams"].items():
            upstream["url"] = self.bases[name]
        snap["queue"]["timeout_s"] = self.config.queue_timeout_s
        # The rolling restart sizes a hold against both limits.
        snap["max_hold_s"] = self.config.max_hold_s
        return {"state": self._state_word(), "shutting_down": self.shutting_down, **snap}

    def _state_word(self) -> str:
        """draining and unavailable are the states /health answers 503 in."""
        if self.shutting_down:
            return "draining"
        if not self.admission.serving():
            return "unavailable"
        return "holding" if self.admission.held else "ok"

    # -- the generation routes, admitted ------------------------------------------
    async def _completion(self, request: web.Request, ex: _Exchange,
                          reader: Callable[[dict], Plan | None]) -> web.StreamResponse:
        body = await self._read(request, ex)
        if isinstance(body, web.Response):
            return body
        try:
            payload = parse_json(body)
        except BodyRefused as exc:
            return self._refused(ex, exc)
        if not isinstance(payload, dict):
            return self._bad(ex, "The request body must be a JSON object.", "invalid_json")
        ex.stream = payload.get("stream") is True
        try:
            plan = reader(payload)
            if plan is None:  # not a generation request after all
                return await self._pass(request, body, ex)
            # vLLM serves its one model when none is named.
            model = payload.get("model")
            demand = await self._demand(plan, model if isinstance(model, str) and model else None)
        except BadRequest as exc:
            return self._bad(ex, exc.message, exc.code)

        try:
            ticket = self.admission.submit(demand)
        except Rejected as rej:
            ex.tokens = rej.tokens
            status, code, retry = _REJECTIONS[rej.reason]
            return self._reject(ex, status, rej.reason, rej.message, code, retry=retry)
        self._update_idle()
        try:
            if ticket.state == ADMITTED:
                self._count_admitted(ticket)
            else:
                refused = await self._wait(ticket, ex)
                if refused is not None:
                    return refused
            ex.tokens, ex.upstream, ex.queue_ms = ticket.tokens, ticket.engine, ticket.wait_s * 1000
            return await self._forward(request, body, ticket.engine, ex, admitted=True)
        finally:
            self._finish(ticket)

    async def _wait(self, ticket: Ticket, ex: _Exchange) -> web.Response | None:
        """Wait in the queue. None once admitted, else the refusal."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters[ticket.id] = fut
        try:
            await asyncio.wait_for(fut, self.config.queue_timeout_s)
        except asyncio.TimeoutError:
            pass
        except asyncio.CancelledError:
            if ticket.state != ADMITTED:
                self.metrics.client_disconnects.labels("queued").inc()
            raise
        finally:
            self._waiters.pop(ticket.id, None)
        if ticket.state == ADMITTED:
            return None
        waited = self.config.queue_timeout_s
        ex.queue_ms = (self._clock() - ticket.created) * 1000
        ex.tokens = self.admission.tokens_for(ticket.demand)
        if ticket.state == FAILED:
            return self._shutting_down(ex)
        # Say what the wait was for: an engine at all, the end of a hold, or
        # room in a pool.
        none_ready = self.admission.none_ready()
        if none_ready is not None:
            message = f"{none_ready}. Waited {waited:g} s in the queue for one; retry later."
            return self._no_engine(ex, _sentence(message))
        if self.admission.held:
            message = (f"Timed out after {waited:g} s waiting for the hold on admissions to end "
                       f"(POST /admin/hold); retry later.")
        else:
            unready = self.admission.not_ready()
            also = f" ({'; '.join(unready)})" if unready else ""
            message = f"Timed out after {waited:g} s waiting for room in an engine's KV cache{also}; retry later."
        return self._reject(ex, 503, "queue_timeout", message, "queue_timeout", retry=True)

    async def _demand(self, plan: Plan, model: str | None) -> Demand:
        """Count each prompt: the engine's /tokenize in tokenize mode,
        else (or when it fails) the estimate."""
        cpt = self.config.chars_per_token
        found: list[int | None] = []
        if self._tokenize_mode:
            asks = [p.tokenize for p in plan.prompts if p.tokenize is not None]
            if model is not None:
                asks = [{"model": model, **ask} for ask in asks]
            if len(asks) == 1:
                found = [await self._tokenize(asks[0])]
            elif asks:
                found = list(await asyncio.gather(*(self._tokenize(ask) for ask in asks)))
        answers = iter(found)
        counts = []
        for p in plan.prompts:
            n = next(answers, None) if p.tokenize is not None else None
            if n is None:
                n = estimate_tokens(p.chars, cpt)
            if p.extra_chars:
                n += estimate_tokens(p.extra_chars, cpt)
            counts.append(p.tokens + n)
        return Demand(tuple(counts), plan.max_tokens, plan.sequences)

    async def _tokenize(self, req: dict) -> int | None:
        """The engine's own count (POST /tokenize), or None to estimate."""
        name = self._pick_any_ready()
        if name is None:
            return self._tokenize_fallback("no_ready_upstream")
        timeout = aiohttp.ClientTimeout(total=self.config.tokenize_timeout_s)
        try:
            async with self.session.post(
                self.bases[name] + "/tokenize", json=req, headers=self._upstream_auth, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    await resp.read()
                    return self._tokenize_fallback("error", f"{name} answered HTTP {resp.status}")
                data = await resp.json(content_type=None)
        except asyncio.TimeoutError:
            return self._tokenize_fallback("timeout", f"{name} took over {self.config.tokenize_timeout_s:g} s")
        except (aiohttp.ClientError, ValueError) as exc:
            return self._tokenize_fallback("error", f"{name}: {type(exc).__name__}")
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return self._tokenize_fallback("error", f"{name} returned no count")
        return count

    def _tokenize_fallback(self, reason: str, detail: str = "") -> None:
        self.metrics.tokenize_fallbacks.labels(reason).inc()
        now = time.monotonic()
        if now - self._last_fallback_log >= 60:  # at most one line a minute
            self._last_fallback_log = now
            log.warning("tokenize failed (%s%s); counting by estimate", reason, f": {detail}" if detail else "")
        return None

    def _pick_any_ready(self) -> str | None:
        """An engine for calls outside admission (/tokenize, passthrough):
        the first ready one not drained, else the first ready one."""
        ready = [e for e in self.admission.engines.values() if e.ready]
        for engine in ready:
            if not engine.drained:
                return engine.name
        return ready[0].name if ready else None

    async def _forward(self, request: web.Request, body: bytes, name: str, ex: _Exchange, *,
                       admitted: bool) -> web.StreamResponse:
        """Send the request to engine ``name`` as it came (method, path,
        query, body) and relay the answer. ``admitted``: a generation
        request, timed in the engine-latency metrics."""
        ctype = request.headers.get("Content-Type")
        if ctype is not None and not _forwardable(ctype):
            ctype = None
        headers = {"Content-Type": ctype or "application/json"} if admitted or ctype else {}
        for key in _REQUEST_HEADERS:
            value = request.headers.get(key)
            if value is not None and _forwardable(value):
                headers[key] = value
        headers.update(self._upstream_auth)
        url = self.bases[name]
        sent = time.perf_counter()
        try:
            upstream = await self.session.request(
                request.method, url + request.path_qs, data=body if body or admitted else None, headers=headers
            )
        except asyncio.CancelledError:
            self.metrics.client_disconnects.labels("upstream").inc()
            raise
        except asyncio.TimeoutError:
            return self._timed_out(ex, name)
        except aiohttp.ClientConnectorError as exc:
            # Refused or unreachable: stop sending it work until /health says so.
            reason = connect_reason(exc)
            self._set_ready(name, False, DOWN, f"{reason} at {url}")
            return self._upstream_error(
                ex, name, "connect", 502, f"Cannot connect to engine {name} at {url}: {reason}.",
                "upstream_unreachable",
            )
        except aiohttp.ClientError as exc:
            return self._upstream_error(
                ex, name, "other", 502, f"Engine {name} failed: {type(exc).__name__}.", "upstream_error"
            )

        try:
            ex.status = upstream.status
            # The raw header: cheaper than aiohttp's parsed content_type.
            if upstream.headers.get("Content-Type", "").lower().startswith("text/event-stream"):
                ex.stream = True
                resp = await self._relay_stream(request, upstream, name, ex, sent if admitted else None)
            else:
                data = await upstream.read()
                resp = web.Response(status=upstream.status, body=data, headers=self._response_headers(upstream))
            if admitted and not ex.reason:
                self.metrics.upstream_seconds_by[name].observe(time.perf_counter() - sent)
            return resp
        except asyncio.CancelledError:
            # The client went away: closing the engine connection makes vLLM
            # abort the request.
            self.metrics.client_disconnects.labels("upstream").inc()
            upstream.close()
            raise
        except asyncio.TimeoutError:
            upstream.close()
            return self._timed_out(ex, name)
        except aiohttp.ClientError as exc:
            upstream.close()
            return self._upstream_error(
                ex, name, "aborted", 502, f"Engine {name} broke off its response: {type(exc).__name__}.",
                "upstream_aborted",
            )
        finally:
            upstream.release()

    async def _relay_stream(self, request: web.Request, upstream: aiohttp.ClientResponse, name: str,
                            ex: _Exchange, sent: float | None) -> web.StreamResponse:
        """Relay SSE as it comes: each chunk is written (and so sent) on
        arrival, with no buffering in between. ``sent``: when the request
        went out, to time the first chunk (None: not timed)."""
        resp = web.StreamResponse(status=upstream.status, headers=self._response_headers(upstream))
        await resp.prepare(request)
        first = sent is not None
        transport = request.transport
        # A write waits only once the client stops reading and the buffer
        # fills past its high-water mark; only a write that could wait is
        # timed (a timer on every chunk would cost more than the relay). From
        # an empty buffer, a chunk no larger than the mark cannot fill it.
        high = transport.get_write_buffer_limits()[1] if transport is not None else 0
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    self.metrics.first_byte_by[name].observe(time.perf_counter() - sent)
                    first = False
                if transport is None or (not transport.get_write_buffer_size() and len(chunk) <= high):
                    await resp.write(chunk)
                else:
                    try:
                        async with asyncio.timeout(self.config.client_write_timeout_s):
                            await resp.write(chunk)
                    except TimeoutError:
                        self._cut_stalled(request, upstream, ex)
                        return resp
        except ConnectionResetError:
            # The client went away between two chunks (seen as a write error
            # when the handler is not cancelled first).
            self.metrics.client_disconnects.labels("upstream").inc()
            upstream.close()
            ex.status = CLIENT_CLOSED
            return resp
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            # The engine failed after the 200 went out: end the client's
            # stream abruptly (no terminating chunk), so the client sees a
            # broken response rather than a short, clean one.
            kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "aborted"
            self.metrics.upstream_errors.labels(name, kind).inc()
            log.warning("upstream %s broke off a stream: %s", name, type(exc).__name__)
            upstream.close()
            ex.reason = f"upstream_{kind}"
            if request.transport is not None:
                request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    def _cut_stalled(self, request: web.Request, upstream: aiohttp.ClientResponse, ex: _Exchange) -> None:
        """The client stopped reading its stream for listen.write_timeout_s:
        close the engine connection (vLLM aborts the request, the reservation
        is freed) and drop the client's without waiting to flush it."""
        self.metrics.client_disconnects.labels("stalled").inc()
        upstream.close()
        ex.status, ex.reason = CLIENT_CLOSED, "client_stalled"
        log.warning(
            "client %s stopped reading its stream for %g s; cut it", request.remote or "-",
            self.config.client_write_timeout_s,
        )
        if request.transport is not None:
            request.transport.abort()

    def _response_headers(self, upstream: aiohttp.ClientResponse) -> dict:
        out = {}
        for key in _RESPONSE_HEADERS:
            value = upstream.headers.get(key)
            if value is not None:
                out[key] = value
        return out

    def _timed_out(self, ex: _Exchange, name: str) -> web.Response:
        return self._upstream_error(ex, name, "timeout", 504, f"Engine {name} did not answer in time.",
                                    "upstream_timeout")

    def _upstream_error(self, ex: _Exchange, name: str, kind: str, status: int, message: str,
                        code: str) -> web.Response:
        self.metrics.upstream_errors.labels(name, kind).inc()
        ex.reason = f"upstream_{kind}"
        ex.status = status
        log.warning("upstream %s: %s", name, message)
        return error_response(status, message, code)

    # -- every other route: passed through ------------------------------------------
    async def _passthrough(self, request: web.Request, ex: _Exchange) -> web.StreamResponse:
        path = request.path
        if path in _OWN_PATHS or path == "/admin" or path.startswith("/admin/"):
            return self._not_served(request)
        body = await self._read(request, ex)
        if isinstance(body, web.Response):
            return body
        return await self._pass(request, body, ex)

    def _not_served(self, request: web.Request) -> web.Response:
        """The gate's own path with a method it does not serve, or an admin
        route it does not have."""
        path = request.path
        allowed = "GET" if path in _OWN_PATHS else self._admin_paths.get(path)
        if allowed is None:
            return error_response(404, f"The gate has no admin route {path}.", "not_found")
        return error_response(405, f"{request.method} is not allowed on the gate's {path}; use {allowed}.",
                              "method_not_allowed", headers={"Allow": allowed})

    async def _pass(self, request: web.Request, body: bytes, ex: _Exchange) -> web.StreamResponse:
        """To any ready engine, without admission."""
        name = self._pick_any_ready()
        if name is None:
            return self._no_engine(ex, _sentence(f"{self.admission.none_ready() or 'no engine is ready'}."))
        ex.upstream = name
        self._passing += 1
        try:
            return await self._forward(request, body, name, ex, admitted=False)
        finally:
            self._passing -= 1
            self._update_idle()

    # -- the gate's own endpoints ------------------------------------------------
    async def handle_health(self, request: web.Request) -> web.Response:
        """200 while an engine could take a request; the body says the same
        (state ok or holding), and otherwise why not (draining, unavailable)."""
        state = self._state_word()
        body = {"state": state, "held": self.admission.held}
        why = self.admission.none_ready()
        if why is not None:
            body["message"] = why
        body["upstreams"] = {
            e.name: {"ready": e.ready, "drained": e.drained, "state": e.state, "detail": e.detail}
            for e in self.admission.engines.values()
        }
        return web.json_response(body, status=503 if state in ("draining", "unavailable") else 200)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def handle_openapi(self, request: web.Request) -> web.Response:
        """The spec of the gate's own HTTP surface (no key needed, as /health)."""
        return web.Response(body=self._spec, content_type="application/json")

    # -- admin API ------------------------------------------------------------------
    def _check_api_key(self, request: web.Request) -> web.Response | None:
        if not self._api_keys:
            return None
        token = _bearer(request)
        if token is None:
            return error_response(401, "Missing API key: send Authorization: Bearer <key>.", "missing_api_key")
        # Compare against every key, so timing does not tell which matched.
        matched = False
        for key in self._api_keys:
            matched |= hmac.compare_digest(token, key)
        if not matched:
            return error_response(401, "Invalid API key.", "invalid_api_key")
        return None

    def _check_admin(self, request: web.Request) -> web.Response | None:
        token = _bearer(request)
        if token is None:
            return error_response(401, "The admin API needs Authorization: Bearer <admin_token>.",
                                  "missing_admin_token")
        if not hmac.compare_digest(token, self._admin_token):
            return error_response(403, "Invalid admin token.", "invalid_admin_token")
        return None

    async def _admin_body(self, request: web.Request) -> dict | web.Response:
        try:
            body = parse_json(await self._read_body(request) or b"{}")
        except BodyRefused as exc:
            return error_response(exc.status, exc.message, exc.code, close=exc.close)
        if not isinstance(body, dict):
            return error_response(400, "The request body must be a JSON object.", "invalid_json")
        return body

    async def _admin_upstream(self, request: web.Request) -> str | web.Response:
        denied = self._check_admin(request)
        if denied is not None:
            return denied
        body = await self._admin_body(request)
        if isinstance(body, web.Response):
            return body
        name = body.get("upstream")
        if not isinstance(name, str) or not name:
            return error_response(400, 'upstream is required: {"upstream": "<name>"}', "upstream_required")
        if name not in self.admission.engines:
            return error_response(404, UnknownUpstream(name, self.admission.engines).message, "unknown_upstream")
        return name

    async def handle_admin_state(self, request: web.Request) -> web.Response:
        denied = self._check_admin(request)
        if denied is not None:
            return denied
        return web.json_response(self.state())

    async def handle_admin_inflight(self, request: web.Request) -> web.Response:
        denied = self._check_admin(request)
        if denied is not None:
            return denied
        adm = self.admission
        return web.json_response({
            "inflight": adm.inflight,
            "queued": adm.queue_depth,
            "upstreams": {e.name: e.inflight for e in adm.engines.values()},
        })

    async def handle_drain(self, request: web.Request) -> web.Response:
        name = await self._admin_upstream(request)
        if isinstance(name, web.Response):
            return name
        self.admission.drain(name)
        log.info("upstream %s drained by the admin API", name)
        engine = self.admission.engines[name]
        return web.json_response({"upstream": name, "drained": True, "inflight": engine.inflight})

    async def handle_undrain(self, request: web.Request) -> web.Response:
        name = await self._admin_upstream(request)
        if isinstance(name, web.Response):
            return name
        self._wake(self.admission.undrain(name))
        log.info("upstream %s undrained by the admin API", name)
        engine = self.admission.engines[name]
        return web.json_response({"upstream": name, "drained": False, "inflight": engine.inflight})

    async def handle_hold(self, request: web.Request) -> web.Response:
        denied = self._check_admin(request)
        if denied is not None:
            return denied
        body = await self._admin_body(request)
        if isinstance(body, web.Response):
            return body
        seconds = body.get("seconds")
        limit = self.config.max_hold_s
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= limit:
            return error_response(
                400, f'seconds must be a number greater than 0 and at most {limit:g}: {{"seconds": N}}', "invalid_hold"
            )
        self.admission.hold(seconds)
        if self._hold_timer is not None:
            self._hold_timer.cancel()
        self._hold_timer = asyncio.get_running_loop().call_later(seconds, self._hold_expired)
        log.info("hold for %g s by the admin API", seconds)
        return web.json_response({"held": True, "hold_remaining_s": round(self.admission.hold_remaining_s(), 3)})

    def _hold_expired(self) -> None:
        self._hold_timer = None
        log.info("hold expired")
        self._wake(self.admission.release_hold())

    async def handle_release(self, request: web.Request) -> web.Response:
        denied = self._check_admin(request)
        if denied is not None:
            return denied
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        self._wake(self.admission.release_hold())
        log.info("hold released by the admin API")
        return web.json_response({"held": False, "queued": self.admission.queue_depth})

    # -- helpers --------------------------------------------------------------------
    def _reject(
        self, ex: _Exchange, status: int, reason: str, message: str, code: str, *, retry: bool = False
    ) -> web.Response:
        self.metrics.rejected.labels(reason).inc()
        ex.reason = reason
        return error_response(status, message, code, retry_after=self.config.retry_after_s if retry else None)

    def _no_engine(self, ex: _Exchange, message: str) -> web.Response:
        return self._reject(ex, 503, "no_ready_upstream", message, "no_ready_upstream", retry=True)

    def _shutting_down(self, ex: _Exchange) -> web.Response:
        return self._reject(
            ex, 503, "shutting_down", "The gate is shutting down; retry shortly.", "shutting_down", retry=True
        )

    def _bad(self, ex: _Exchange, message: str, code: str) -> web.Response:
        return self._reject(ex, 400, "bad_request", message, code)

    def _log(self, ex: _Exchange, started: float) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        path = ex.path
        if not path.isprintable() or " " in path:
            path = _escaped(path)  # a client's %0a must not start a line of its own
        line = (
            f"{ex.method} {path} {ex.status}"
            f" tokens={'-' if ex.tokens is None else ex.tokens}"
            f" queue_ms={'-' if ex.queue_ms is None else f'{ex.queue_ms:.1f}'}"
            f" upstream={ex.upstream} total_ms={(time.perf_counter() - started) * 1000:.1f}"
            f" stream={'true' if ex.stream else 'false'}{f' reason={ex.reason}' if ex.reason else ''}"
        )
        if self._access_sink is not None:
            self._access_sink(line)
        else:
            access_log.info(line)


class _ServerLog(logging.LoggerAdapter):
    """aiohttp's server logger for the gate. aiohttp logs a request it cannot
    parse (a bad request line, bad headers, broken chunked framing) as an
    ERROR with a traceback, so any client could fill the journal; here it is
    the gate's one WARNING line (``Gate._malformed``), and aiohttp still
    answers it 400. An exception in the gate's own handlers stays an ERROR
    with its traceback: that is a bug to see."""

    def __init__(self, gate: Gate):
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self._gate = gate

    def _client_error(self, args: tuple, exc_info: Any) -> bool:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if not isinstance(exc, HttpProcessingError):
            return False
        # aiohttp's call: ("Error handling request from %s", request.remote)
        self._gate._malformed(args[0] if args and isinstance(args[0], str) else None, exc)
        return True

    def exception(self, msg, *args, exc_info=True, **kwargs):
        if not self._client_error(args, exc_info):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)

    def debug(self, msg, *args, **kwargs):
        # aiohttp logs a first request that is not HTTP at all at DEBUG
        # (TLS or a scanner on the port): counted and logged the same way.
        if "exc_info" in kwargs and self._client_error(args, kwargs["exc_info"]):
            return
        self.logger.debug(msg, *args, **kwargs)
