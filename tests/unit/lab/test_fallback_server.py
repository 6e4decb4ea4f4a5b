"""Tests for lab/consumer/fallback_server.py: a real server on a loopback port."""
from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fallback_server as fs
import pytest

SCRIPT = Path(fs.__file__)


def request(server, method: str, path: str, body: dict | bytes | None = None, conn=None):
    """One request; returns (status, headers, raw body)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(*server.server_address[:2], timeout=5)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    resp = conn.getresponse()
    raw = resp.read()
    if own:
        conn.close()
    return resp.status, resp, raw


def sse_events(raw: bytes) -> list:
    """The data of each server-sent event, JSON-decoded except [DONE]."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


CHAT = {"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "x" * 400}], "max_tokens": 8}


def test_health(fallback):
    status, resp, raw = request(fallback, "GET", "/health")
    assert (status, raw) == (200, b"")


def test_models(fallback):
    status, resp, raw = request(fallback, "GET", "/v1/models")
    payload = json.loads(raw)
    assert status == 200 and resp.getheader("Content-Type") == "application/json"
    assert payload["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in payload["data"]] == [("fallback", "model", "vllm-fleet")]


def test_chat_completion(fallback):
    status, _, raw = request(fallback, "POST", "/v1/chat/completions", CHAT)
    payload = json.loads(raw)
    assert status == 200
    assert payload["object"] == "chat.completion" and payload["id"].startswith("chatcmpl-")
    assert payload["model"] == "fallback"
    choice = payload["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": fs.DEFAULT_TEXT}
    assert choice["finish_reason"] == "stop"
    assert fs.DEFAULT_TEXT.startswith("[fallback] ")
    # The messages' text, newline-joined, at 4 characters a token, rounded up.
    assert payload["usage"]["prompt_tokens"] == (len("be brief") + 1 + 400 + 3) // 4 == 103
    assert payload["usage"]["total_tokens"] == payload["usage"]["prompt_tokens"] + payload["usage"]["completion_tokens"]


def test_chat_completion_stream(fallback):
    status, resp, raw = request(fallback, "POST", "/v1/chat/completions", dict(CHAT, stream=True))
    assert status == 200
    assert resp.getheader("Content-Type") == "text/event-stream"
    assert resp.getheader("Transfer-Encoding") == "chunked"
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["model"] == "fallback"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == fs.DEFAULT_TEXT
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert len(chunks) > 3  # really streamed, word by word


def test_stream_usage_when_asked(fallback):
    body = dict(CHAT, stream=True, stream_options={"include_usage": True})
    events = sse_events(request(fallback, "POST", "/v1/chat/completions", body)[2])
    assert events[-2]["choices"] == [] and events[-2]["usage"]["prompt_tokens"] == 103


def test_completion(fallback):
    status, _, raw = request(fallback, "POST", "/v1/completions", {"prompt": "abcd" * 10, "max_tokens": 4})
    payload = json.loads(raw)
    assert status == 200 and payload["object"] == "text_completion" and payload["id"].startswith("cmpl-")
    assert payload["choices"][0]["text"] == fs.DEFAULT_TEXT
    assert payload["usage"]["prompt_tokens"] == 10


def test_completion_stream(fallback):
    events = sse_events(request(fallback, "POST", "/v1/completions", {"prompt": "hi", "stream": True})[2])
    assert events[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in events[:-1]) == fs.DEFAULT_TEXT
    assert {c["object"] for c in events[:-1]} == {"text_completion"}


@pytest.mark.parametrize(("method", "path", "body", "status", "kind"), [
    ("GET", "/v1/nothing", None, 404, "NotFound"),
    ("POST", "/health", {}, 404, "NotFound"),
    ("POST", "/v1/chat/completions", b"{not json", 400, "BadRequest"),
    ("POST", "/v1/chat/completions", b"[1, 2]", 400, "BadRequest"),
])
def test_errors_are_openai_shaped(fallback, method, path, body, status, kind):
    got, _, raw = request(fallback, method, path, body)
    error = json.loads(raw)["error"]
    assert (got, error["type"], error["code"]) == (status, kind, status)


def test_keep_alive_and_counts(fallback):
    conn = http.client.HTTPConnection(*fallback.server_address[:2], timeout=5)
    for _ in range(2):
        assert request(fallback, "POST", "/v1/chat/completions", CHAT, conn=conn)[0] == 200
    assert request(fallback, "POST", "/v1/chat/completions", dict(CHAT, stream=True), conn=conn)[0] == 200
    assert request(fallback, "GET", "/health", conn=conn)[0] == 200
    conn.close()
    assert fallback.requests == {"/v1/chat/completions": 3, "/health": 1}


def test_options():
    server = fs.FallbackServer(("127.0.0.1", 0), model="small", text="[fallback] hi there", delay_ms=200)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        start = time.monotonic()
        payload = json.loads(request(server, "POST", "/v1/chat/completions", CHAT)[2])
        assert time.monotonic() - start >= 0.2
        assert (payload["model"], payload["choices"][0]["message"]["content"]) == ("small", "[fallback] hi there")
        assert server.url == f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_bad_options(capsys):
    with pytest.raises(SystemExit):
        fs.parse_args(["--delay-ms", "-1"])
    assert "--delay-ms must be >= 0" in capsys.readouterr().err


def test_defaults():
    args = fs.parse_args([])
    assert (args.host, args.port, args.model, args.delay_ms) == ("127.0.0.1", 8001, "fallback", 0)


def test_runs_as_a_program_and_stops_on_sigterm():
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", "0", "--access-log"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)/v1 \(model fallback\)", line)
        assert match, line
        conn = http.client.HTTPConnection("127.0.0.1", int(match.group(1)), timeout=5)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert '"GET /health HTTP/1.1" 200' in err
    assert "fallback_server: stopped" in err


def test_port_in_use_is_a_clear_failure(fallback):
    port = str(fallback.server_address[1])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--port", port], capture_output=True, text=True,
                          timeout=10)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
