"""The proxied routes: the generation routes, admitted by KV pool (read,
count, queue, forward), and every other path passed through to a ready
engine; each answered request gets its access log line."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web

from .accesslog import Exchange, log_exchange
from .admin import ALLOWED as ADMIN_ALLOWED
from .admission import ADMITTED, FAILED, BadRequest, Rejected, Ticket
from .auth import check_api_key
from .body import BodyRefused, parse_json
from .errors import CLIENT_CLOSED, error_response, sentence
from .generation import Plan

# The gate's own paths, never passed to an engine (the engine's /health,
# /metrics and /openapi.json are the engine's, not the gate's), and
# everything under /admin.
_OWN_PATHS = frozenset(("/health", "/metrics", "/openapi.json"))

_REJECTIONS = {
    "too_long": (400, "context_length_exceeded", False),
    "never_fits": (400, "exceeds_kv_cache_pool", False),
    "queue_full": (429, "queue_full", True),
    "shutting_down": (503, "shutting_down", True),
}


class Proxy:
    """A part of ``app.Gate``: the handlers of the proxied routes."""

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
        ex = Exchange(request.method, request.path)
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
    async def _read(self, request: web.Request, ex: Exchange) -> bytes | web.Response:
        """What every proxied request passes first: the shutdown, the API
        key, the body's size. The body, or the refusal."""
        if self.shutting_down:
            return self._shutting_down(ex)
        denied = check_api_key(request, self._api_keys)
        if denied is not None:
            ex.reason = "unauthorized"
            self.metrics.rejected.labels("unauthorized").inc()
            return denied
        try:
            return await self._read_body(request)
        except BodyRefused as exc:
            return self._refused(ex, exc)

    async def _completion(self, request: web.Request, ex: Exchange,
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

    async def _wait(self, ticket: Ticket, ex: Exchange) -> web.Response | None:
        """Wait in the queue. None once admitted, else the refusal."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters[ticket.id] = fut
        try:
            await asyncio.wait_for(fut, self.config.queue_timeout_s)
        except TimeoutError:
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
            return self._no_engine(ex, sentence(message))
        if self.admission.held:
            message = (f"Timed out after {waited:g} s waiting for the hold on admissions to end "
                       f"(POST /admin/hold); retry later.")
        else:
            unready = self.admission.not_ready()
            also = f" ({'; '.join(unready)})" if unready else ""
            message = f"Timed out after {waited:g} s waiting for room in an engine's KV cache{also}; retry later."
        return self._reject(ex, 503, "queue_timeout", message, "queue_timeout", retry=True)

    async def _passthrough(self, request: web.Request, ex: Exchange) -> web.StreamResponse:
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
        allowed = "GET" if path in _OWN_PATHS else ADMIN_ALLOWED.get(path)
        if allowed is None:
            return error_response(404, f"The gate has no admin route {path}.", "not_found")
        return error_response(405, f"{request.method} is not allowed on the gate's {path}; use {allowed}.",
                              "method_not_allowed", headers={"Allow": allowed})

    async def _pass(self, request: web.Request, body: bytes, ex: Exchange) -> web.StreamResponse:
        """To any ready engine, without admission."""
        name = self._pick_any_ready()
        if name is None:
            return self._no_engine(ex, sentence(f"{self.admission.none_ready() or 'no engine is ready'}."))
        ex.upstream = name
        self._passing += 1
        try:
            return await self._forward(request, body, name, ex, admitted=False)
        finally:
            self._passing -= 1
            self._update_idle()

    def _pick_any_ready(self) -> str | None:
        """An engine for calls outside admission (/tokenize, passthrough):
        the first ready one not drained, else the first ready one."""
        ready = [e for e in self.admission.engines.values() if e.ready]
        for engine in ready:
            if not engine.drained:
                return engine.name
        return ready[0].name if ready else None

    def _reject(
        self, ex: Exchange, status: int, reason: str, message: str, code: str, *, retry: bool = False
    ) -> web.Response:
        self.metrics.rejected.labels(reason).inc()
        ex.reason = reason
        return error_response(status, message, code, retry_after=self.config.retry_after_s if retry else None)

    def _no_engine(self, ex: Exchange, message: str) -> web.Response:
        return self._reject(ex, 503, "no_ready_upstream", message, "no_ready_upstream", retry=True)

    def _shutting_down(self, ex: Exchange) -> web.Response:
        return self._reject(
            ex, 503, "shutting_down", "The gate is shutting down; retry shortly.", "shutting_down", retry=True
        )

    def _bad(self, ex: Exchange, message: str, code: str) -> web.Response:
        return self._reject(ex, 400, "bad_request", message, code)

    def _log(self, ex: Exchange, started: float) -> None:
        log_exchange(ex, started, self._access_sink)
