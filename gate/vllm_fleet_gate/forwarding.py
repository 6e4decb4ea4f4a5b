"""Forwarding a request to an engine and relaying its answer, streamed
chunk by chunk as it arrives; the engine's failures answered as 502/504."""
from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from aiohttp import web

from .accesslog import Exchange
from .admission import DOWN
from .errors import CLIENT_CLOSED, error_response
from .health import connect_reason

log = logging.getLogger("vllm_fleet_gate")

# Only these cross the gate; Authorization never does (see upstream_api_key).
_REQUEST_HEADERS = ("Accept", "X-Request-Id", "traceparent", "tracestate")
_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Cache-Control", "X-Request-Id", "Allow")


def forwardable(value: str) -> bool:
    """Whether a client's header value can be sent on to an engine as it
    is. aiohttp keeps bytes that are not UTF-8 as surrogates, which it cannot
    send (its C writer drops them, its Python writer raises), and sends no
    control characters: such a value is dropped, not mangled."""
    return value.isprintable() or value.replace("\t", " ").isprintable()


class Forwarding:
    """A part of ``app.Gate``: uses its config, session, bases and metrics."""

    async def _forward(self, request: web.Request, body: bytes, name: str, ex: Exchange, *,
                       admitted: bool) -> web.StreamResponse:
        """Send the request to engine ``name`` as it came (method, path,
        query, body) and relay the answer. ``admitted``: a generation
        request, timed in the engine-latency metrics."""
        ctype = request.headers.get("Content-Type")
        if ctype is not None and not forwardable(ctype):
            ctype = None
        headers = {"Content-Type": ctype or "application/json"} if admitted or ctype else {}
        for key in _REQUEST_HEADERS:
            value = request.headers.get(key)
            if value is not None and forwardable(value):
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
        except TimeoutError:
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
        except TimeoutError:
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
                            ex: Exchange, sent: float | None) -> web.StreamResponse:
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
        except (TimeoutError, aiohttp.ClientError) as exc:
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

    def _cut_stalled(self, request: web.Request, upstream: aiohttp.ClientResponse, ex: Exchange) -> None:
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

    def _timed_out(self, ex: Exchange, name: str) -> web.Response:
        return self._upstream_error(ex, name, "timeout", 504, f"Engine {name} did not answer in time.",
                                    "upstream_timeout")

    def _upstream_error(self, ex: Exchange, name: str, kind: str, status: int, message: str,
                        code: str) -> web.Response:
        self.metrics.upstream_errors.labels(name, kind).inc()
        ex.reason = f"upstream_{kind}"
        ex.status = status
        log.warning("upstream %s: %s", name, message)
        return error_response(status, message, code)
