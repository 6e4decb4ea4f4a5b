"""Reading a request body: within the size and time limits, as JSON of a
bounded depth, and a client's malformed HTTP logged as one WARNING line
(also for aiohttp's own parse errors, through ``ServerLog``)."""
from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .errors import error_response

if TYPE_CHECKING:
    from .accesslog import Exchange

log = logging.getLogger("vllm_fleet_gate")

# JSON nested deeper than this is refused (400 json_too_deep). No OpenAI
# request comes near it (a tool's JSON schema is a few dozen levels), and
# deeper bodies overflow the recursion of the JSON parser, of the counting of
# messages and of the /tokenize body's encoding.
MAX_JSON_DEPTH = 128


class BodyRefused(Exception):
    """A request body the gate will not take: too large, too slow, not
    well-formed HTTP, not JSON, or nested too deeply."""

    def __init__(self, status: int, reason: str, message: str, code: str, *, close: bool = False):
        super().__init__(message)
        self.status, self.reason, self.message, self.code, self.close = status, reason, message, code, close


def first_line(exc: BaseException) -> str:
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


class BodyReader:
    """The Gate's body reading (a part of ``app.Gate``): uses its config,
    metrics and the malformed-request log's rate limit."""

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
                400, "malformed_request", f"The request body is malformed: {first_line(exc)}.",
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

    def _refused(self, ex: Exchange, exc: BodyRefused) -> web.Response:
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
        log.warning("malformed HTTP request from %s: %s (answered 400)%s", remote or "-", first_line(exc), more)


class ServerLog(logging.LoggerAdapter):
    """aiohttp's server logger for the gate. aiohttp logs a request it cannot
    parse (a bad request line, bad headers, broken chunked framing) as an
    ERROR with a traceback, so any client could fill the journal; here it is
    the gate's one WARNING line (``Gate._malformed``), and aiohttp still
    answers it 400. An exception in the gate's own handlers stays an ERROR
    with its traceback: that is a bug to see."""

    def __init__(self, gate: BodyReader):
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
