"""Wiring for the lab consumer's tests: real servers on loopback.

Puts ``lab/consumer`` on sys.path (its programs are scripts, not a package)
and gives tests a stub engine that can be switched between healthy and
several kinds of failure, and the real fallback server, each on an
ephemeral 127.0.0.1 port.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

CONSUMER = Path(__file__).resolve().parents[3] / "lab" / "consumer"
if str(CONSUMER) not in sys.path:
    sys.path.insert(0, str(CONSUMER))

import fallback_server  # noqa: E402
from lab_http import send_json, write_chunk  # noqa: E402

# What a stub engine does with each chat request.
HEALTHY = "healthy"
STATUS = "status"          # answer with .status_code and an error body
SLOW = "slow"              # sleep .delay_s, then answer
DROP = "drop"              # close the connection without answering
BREAK_STREAM = "break"     # stream two chunks, then close mid-stream
BAD_JSON = "bad_json"      # 200 with a body that is not JSON


class _StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubEngine

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        behaviour = self.server.record(self.path, dict(self.headers), body)
        if behaviour == SLOW:
            time.sleep(self.server.delay_s)
            behaviour = HEALTHY
        if behaviour == DROP:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behaviour == STATUS:
            # Like some servers, quote the request in the message: the client
            # must log only the error's type.
            first = body["messages"][-1]["content"]
            send_json(self, self.server.status_code, {"error": {
                "message": f"refused: {first}" + " " * self.server.error_pad, "type": "StubError",
                "code": self.server.status_code}})
            return
        if behaviour == BAD_JSON:
            data = b"<html>not json</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if body.get("stream"):
            self._stream(broken=behaviour == BREAK_STREAM)
        else:
            send_json(self, 200, {"id": "chatcmpl-stub", "object": "chat.completion", "model": "tiny",
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": self.server.answer}}]})

    def _stream(self, broken: bool):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        words = self.server.answer.split(" ")
        for i, word in enumerate(words):
            if broken and i == 2:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            chunk = {"object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": word if i == 0 else " " + word}}]}
            write_chunk(self, b"data: " + json.dumps(chunk).encode() + b"\n\n")
        write_chunk(self, b"data: [DONE]\n\n")
        write_chunk(self, b"")


class StubEngine(ThreadingHTTPServer):
    """A switchable stand-in for vLLM's chat API that records what it got."""

    daemon_threads = True

    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.name = name
        self.answer = f"stub answer from {name} with several words"
        self.behaviour = HEALTHY
        self.status_code = 503
        self.delay_s = 0.0
        self.error_pad = 0  # spaces added to error bodies, to make them large
        # 1-based request numbers answered with status_code whatever the behaviour.
        self.fail_numbers: set[int] = set()
        self.requests: list[dict] = []
        self._lock = threading.Lock()

    def handle_error(self, request, client_address):
        pass  # clients that time out leave broken pipes behind; that is the point

    def record(self, path: str, headers: dict, body: dict) -> str:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            number = len(self.requests)
            return STATUS if number in self.fail_numbers else self.behaviour

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def wait_requests(self, count: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"{self.name} saw {len(self.requests)} requests, wanted {count}"
            time.sleep(0.01)


def _serve(server, servers: list):
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    servers.append(server)
    return server


@pytest.fixture
def make_engine():
    """Start stub engines by name; all are shut down after the test."""
    servers: list = []
    yield lambda name="engine": _serve(StubEngine(name), servers)
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fallback():
    """The real fallback server on an ephemeral port."""
    servers: list = []
    server = _serve(fallback_server.FallbackServer(("127.0.0.1", 0)), servers)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_url():
    """A loopback URL that refuses connections: bound, never listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


class EndpointFile:
    """The consumer's endpoint file, written as the role writes it: whole, by rename."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, **values: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        lines = ["# Ansible managed", *(f"{key}={value}" for key, value in values.items())]
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.path)


@pytest.fixture
def endpoint_file(tmp_path):
    return EndpointFile(tmp_path / "endpoint.env")
