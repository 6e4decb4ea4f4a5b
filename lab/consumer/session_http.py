"""One chat request of the session client: a POST to .../chat/completions, within a deadline.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from session_endpoint import public_url
from session_log import short_error

MAX_BODY_BYTES = 64 * 1024 * 1024
USER_AGENT = "vllm-fleet-session-client/1"


class RequestFailed(Exception):
    """A request that did not produce an answer.

    ``fallback`` says whether the fallback model should be tried: yes for
    transport failures, timeouts, 5xx, 429 and broken answers; no for other
    4xx, which the fallback would refuse too.
    """

    def __init__(self, message: str, status: int | None = None, fallback: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.fallback = fallback


@dataclass
class Reply:
    status: int
    text: str


class SocketTracker:
    """The sockets of requests in flight, so a stop can cut them at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set = set()
        self.closed = False

    def add(self, sock) -> bool:
        with self._lock:
            if self.closed:
                return False
            self._socks.add(sock)
            return True

    def discard(self, sock) -> None:
        with self._lock:
            self._socks.discard(sock)

    def abort(self) -> None:
        with self._lock:
            self.closed = True
            socks = list(self._socks)
        for sock in socks:
            try:
                # shutdown, not close: it wakes a thread blocked in recv().
                sock.shutdown(2)
            except OSError:
                pass



def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"timeout after {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed without a response"
    if isinstance(exc, http.client.IncompleteRead):
        return "response cut short"
    return f"{type(exc).__name__}: {short_error(exc)}"


def _arm(sock, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline passed")
    sock.settimeout(remaining)


def _error_type(data: bytes) -> str:
    """The error's type from an OpenAI-shaped error body, never its message.

    Messages can quote the request, and the log must not hold prompt text.
    """
    try:
        payload = json.loads(data)
    except ValueError:
        return ""
    if isinstance(payload, dict):
        inner = payload.get("error") if isinstance(payload.get("error"), dict) else payload
        kind = inner.get("type")
        if isinstance(kind, str) and kind:
            return " " + kind[:60]
    return ""


def _read_body(resp: http.client.HTTPResponse, sock, deadline: float, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body, within the deadline."""
    chunks, size = [], 0
    while size < limit:
        _arm(sock, deadline)
        data = resp.read1(min(65536, limit - size))
        if not data:
            # EOF: short of a Content-Length means the server went away.
            if resp.length:
                raise http.client.IncompleteRead(b"".join(chunks), resp.length)
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)


def _content(payload: object, stream: bool) -> str:
    """The answer's text from one completion object or stream chunk."""
    if not isinstance(payload, dict):
        raise RequestFailed("answer is not a JSON object", status=200)
    if "error" in payload or payload.get("object") == "error":
        raise RequestFailed("error in answer" + _error_type(json.dumps(payload).encode()), status=200)
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise RequestFailed("answer has no choices", status=200)
    if not choices:
        return ""  # a stream's usage chunk
    choice = choices[0] if isinstance(choices[0], dict) else {}
    part = choice.get("delta" if stream else "message") or {}
    text = part.get("content") if isinstance(part, dict) else None
    return text if isinstance(text, str) else ""


def _read_stream(resp: http.client.HTTPResponse, sock, deadline: float) -> str:
    """Read server-sent events to ``data: [DONE]``; a stream that ends sooner is broken."""
    parts: list[str] = []
    data_lines: list[str] = []

    def dispatch() -> bool:
        data = "\n".join(data_lines)
        data_lines.clear()
        if data.strip() == "[DONE]":
            return True
        try:
            payload = json.loads(data)
        except ValueError:
            raise RequestFailed("stream event is not JSON", status=200) from None
        parts.append(_content(payload, stream=True))
        return False

    while True:
        _arm(sock, deadline)
        line = resp.readline(MAX_BODY_BYTES)
        if not line:
            break
        line = line.rstrip(b"\r\n")
        if not line:
            if data_lines and dispatch():
                return "".join(parts)
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            data_lines.append(value[1:].decode("utf-8", "replace") if value.startswith(b" ")
                              else value.decode("utf-8", "replace"))
    if data_lines and dispatch():
        return "".join(parts)
    raise RequestFailed("stream ended before [DONE]", status=200)


def post_chat(base_url: str, body: dict, *, timeout: float, api_key: str | None = None,
              tracker: SocketTracker | None = None) -> Reply:
    """POST ``body`` to ``base_url``/chat/completions within ``timeout`` seconds in all.

    Returns the answer's text, or raises RequestFailed. One connection per
    request (``Connection: close``): a cutover must never reuse a socket to
    the old endpoint.
    """
    url = urlsplit(base_url.rstrip("/") + "/chat/completions")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise RequestFailed(f"not an http(s) URL: {public_url(base_url)}")
    stream = bool(body.get("stream"))
    deadline = time.monotonic() + timeout
    cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = cls(url.hostname, url.port, timeout=timeout)
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "User-Agent": USER_AGENT,
        "Connection": "close",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    sock = None
    resp: http.client.HTTPResponse | None = None
    try:
        try:
            conn.connect()
            sock = conn.sock
            if tracker is not None and not tracker.add(sock):
                raise RequestFailed("stopped", fallback=False)
            _arm(sock, deadline)
            conn.request("POST", url.path, body=json.dumps(body).encode(), headers=headers)
            _arm(sock, deadline)
            resp = conn.getresponse()
            if resp.status != 200:
                detail = _error_type(_read_body(resp, sock, deadline, 65536))
                retry = resp.status >= 500 or resp.status == 429
                raise RequestFailed(f"HTTP {resp.status}{detail}", status=resp.status, fallback=retry)
            if stream:
                return Reply(resp.status, _read_stream(resp, sock, deadline))
            raw = _read_body(resp, sock, deadline, MAX_BODY_BYTES)
            try:
                payload = json.loads(raw)
            except ValueError:
                raise RequestFailed("answer is not JSON", status=200) from None
            return Reply(resp.status, _content(payload, stream=False))
        except (OSError, http.client.HTTPException) as exc:
            raise RequestFailed(_describe(exc, timeout), status=resp.status if resp is not None else None) from None
    finally:
        if tracker is not None and sock is not None:
            tracker.discard(sock)
        conn.close()
