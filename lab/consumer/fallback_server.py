#!/usr/bin/python3
"""The lab's fallback model: an OpenAI-shaped server that always answers.

In the field, the application fell back to a second, smaller model when the
main endpoint failed. This stands in for that model on a lab consumer host,
so that a fallback is an answer the client can count, not a second failure.

Standard library only: it runs on an offline Debian host with python3 and
nothing else.

Endpoints:
  GET  /health                 200, empty body (as vLLM)
  GET  /v1/models              one model, named by --model
  POST /v1/chat/completions    fixed text; "stream": true gives SSE chunks
  POST /v1/completions         the same for the legacy completions API

Usage:
  fallback_server.py [--host 127.0.0.1] [--port 8001] [--model fallback]
                     [--text TEXT] [--delay-ms 0] [--access-log]
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lab_http import send_json, serve_until_signal, write_chunk

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
DEFAULT_MODEL = "fallback"
DEFAULT_TEXT = "[fallback] The model endpoint is unavailable; this answer comes from the fallback model."
# A long-context request body can be megabytes; refuse anything absurd.
MAX_BODY_BYTES = 64 * 1024 * 1024


def estimate_tokens(text: str) -> int:
    """Token count at 4 characters a token, as the session client estimates."""
    return (len(text) + 3) // 4


def _prompt_text(path: str, body: dict) -> str:
    if path.endswith("/chat/completions"):
        parts = []
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                parts.append(content)
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def _pieces(text: str) -> list[str]:
    """Split the answer into word-sized stream deltas that join back exactly."""
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class FallbackHandler(BaseHTTPRequestHandler):
    """One request; the server object carries the settings and counters."""

    protocol_version = "HTTP/1.1"
    server: FallbackServer

    # -- plumbing ---------------------------------------------------------

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib's name)
        if self.server.access_log:
            super().log_message(format, *args)

    def _send_error_json(self, status: HTTPStatus, message: str) -> None:
        # vLLM's error shape: an "error" object with message, type and code.
        send_json(self, status, {"error": {
            "message": message, "type": status.phrase.replace(" ", ""), "param": None, "code": int(status),
        }})

    # -- GET --------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        self.server.count(path)
        if path == "/health":
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/v1/models":
            send_json(self, HTTPStatus.OK, {"object": "list", "data": [{
                "id": self.server.model, "object": "model", "created": self.server.started,
                "owned_by": "vllm-fleet", "root": self.server.model, "parent": None,
            }]})
        else:
            self._send_error_json(HTTPStatus.NOT_FOUND, f"no route for GET {path}")

    # -- POST -------------------------------------------------------------

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        self.server.count(path)
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_error_json(HTTPStatus.NOT_FOUND, f"no route for POST {path}")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send_error_json(HTTPStatus.BAD_REQUEST, "missing or oversized Content-Length")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            self._send_error_json(HTTPStatus.BAD_REQUEST, f"request body is not a JSON object: {exc}")
            return
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        chat = path == "/v1/chat/completions"
        prompt_tokens = estimate_tokens(_prompt_text(path, body))
        if body.get("stream"):
            self._stream(chat, body, prompt_tokens)
        else:
            self._complete(chat, prompt_tokens)

    def _usage(self, prompt_tokens: int) -> dict:
        completion = estimate_tokens(self.server.text)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion}

    def _complete(self, chat: bool, prompt_tokens: int) -> None:
        text = self.server.text
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": "stop"}
            kind, prefix = "chat.completion", "chatcmpl"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
            kind, prefix = "text_completion", "cmpl"
        send_json(self, HTTPStatus.OK, {
            "id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
            "model": self.server.model, "choices": [choice], "usage": self._usage(prompt_tokens),
        })

    def _stream(self, chat: bool, body: dict, prompt_tokens: int) -> None:
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        kind = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())

        def event(choice: dict | None, usage: dict | None = None) -> None:
            chunk = {"id": ident, "object": kind, "created": created, "model": self.server.model,
                     "choices": [choice] if choice else []}
            if usage:
                chunk["usage"] = usage
            write_chunk(self, b"data: " + json.dumps(chunk).encode() + b"\n\n")

        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:
            event({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})
        for piece in _pieces(self.server.text):
            if chat:
                event({"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None})
            else:
                event({"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
        if chat:
            event({"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"})
        else:
            event({"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"})
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            event(None, self._usage(prompt_tokens))
        write_chunk(self, b"data: [DONE]\n\n")
        write_chunk(self, b"")


class FallbackServer(ThreadingHTTPServer):
    """The HTTP server plus its settings and a per-path request counter."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, model: str = DEFAULT_MODEL, text: str = DEFAULT_TEXT,
                 delay_ms: int = 0, access_log: bool = False) -> None:
        self.model = model
        self.text = text
        self.delay_s = delay_ms / 1000.0
        self.access_log = access_log
        self.started = int(time.time())
        self.requests: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__(address, FallbackHandler)

    def count(self, path: str) -> None:
        with self._lock:
            self.requests[path] = self.requests.get(path, 0) + 1

    @property
    def url(self) -> str:
        """The OpenAI base URL clients use, e.g. http://127.0.0.1:8001/v1."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fallback_server.py",
        description="OpenAI-shaped fallback model for the vllm-fleet lab: always answers a fixed text.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port to bind; 0 picks a free one (default %(default)s)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="model name in answers and /v1/models (default %(default)s)")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="the answer's text")
    parser.add_argument("--delay-ms", type=int, default=0, help="wait this long before each answer (default 0)")
    parser.add_argument("--access-log", action="store_true", help="log each request to stderr")
    args = parser.parse_args(argv)
    if args.delay_ms < 0:
        parser.error("--delay-ms must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        server = FallbackServer((args.host, args.port), model=args.model, text=args.text,
                                delay_ms=args.delay_ms, access_log=args.access_log)
    except OSError as exc:
        print(f"fallback_server: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    serve_until_signal(server, f"fallback_server: listening on {server.url} (model {args.model})",
                       "fallback_server: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
