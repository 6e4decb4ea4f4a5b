"""Property tests for plugins/module_utils/prefill/client.py over hostile
answers (tests/hostile.py): whatever answers on the engine's port. A raw
socket server sends bytes as given: the real answers of tests/fixtures/prefill/
(README.md there gives each source) framed by Content-Length or chunked and
cut at every point, valid framing around hostile bodies (not JSON, deep,
wrong types, huge numbers), and hostile status lines and headers. The
probe's own steps (prefill_probe.probe) run against such an engine too.

What each promises: PrefillError (EngineUnreachable, EngineTimeout) and
nothing else; an answer cut short never reads as a shorter one; and every
figure a call returns (a status, a token count, a prompt length) is written
in ASCII digits in what the engine sent.

(The client sends no streamed request: an SSE stream's hazards, a body cut
at any point and chunk framing, are the chunked cases here.)
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
import time

import pytest
from ansible.module_utils.prefill import client as pc
from ansible.module_utils.prefill import probe as prefill_probe
from ansible.module_utils.prefill.decision import MAX_PROMPT_TOKENS
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.prefill.metrics import parse_metrics
from hostile import HUGE_NUMBER, NOISE, any_text, assert_numbers_from, mutated, nested, raises_only
from hypothesis import given, settings
from hypothesis import strategies as st
from prefill_fake import COMPLETION, FIXTURES, MODEL, TRIMMED, FakeVllm

VERSION_BODY = (FIXTURES / "version.json").read_bytes()
TOKENIZE_BODY = (FIXTURES / "tokenize.json").read_bytes()
COMPLETION_BODY = (FIXTURES / "completion.json").read_bytes()
METRICS_BODY = TRIMMED.encode()
JSON_HEAD = "application/json"
TEXT_HEAD = "text/plain; version=0.0.4; charset=utf-8"


def framed(body: bytes, status: bytes = b"200 OK", chunked: bool = False, content_type: str = JSON_HEAD,
           chunk: int = 97) -> bytes:
    """An HTTP/1.1 answer as uvicorn frames it: Content-Length, or chunked (as a stream is)."""
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type.encode() + b"\r\nconnection: close\r\n"
    if not chunked:
        return head + b"content-length: %d\r\n\r\n" % len(body) + body
    parts = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    return head + b"transfer-encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


class RawEngine:
    """A TCP server that answers each request with ``answer(method, path, body)`` bytes, then closes."""

    def __init__(self, answer):
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> RawEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    got = conn.recv(65536)
                    if not got:
                        return
                    data += got
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                while length and len(body) < int(length.group(1)):
                    body += conn.recv(65536)
                method, path = head.split(b" ")[:2]
                self.requests += 1
                reply = self.answer(method.decode(), path.decode(), body)
                conn.sendall(reply)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def answering(reply: bytes) -> RawEngine:
    return RawEngine(lambda method, path, body: reply)


def call(engine: RawEngine, what):
    with pc.EngineClient(engine.url, timeout=2.0) as client:
        return raises_only(PrefillError, what, client)


def metrics_of(client):
    return client.metrics().as_dict()


# name -> (the call, the real answer's body, its content type)
CALLS = {
    "health": (lambda c: c.health(), b"", JSON_HEAD),
    "version": (lambda c: c.version(), VERSION_BODY, JSON_HEAD),
    "count_tokens": (lambda c: c.count_tokens(MODEL, "alpha"), TOKENIZE_BODY, JSON_HEAD),
    "completion": (lambda c: c.json("POST", "/v1/completions", {"model": MODEL}), COMPLETION_BODY, JSON_HEAD),
    "metrics": (metrics_of, METRICS_BODY, TEXT_HEAD),
}


def whole(name: str, chunked: bool):
    what, body, content_type = CALLS[name]
    with answering(framed(body, chunked=chunked, content_type=content_type)) as engine:
        return call(engine, what)


# --- real answers cut at every point ----------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_cut_of_a_real_answer_fails_or_is_whole(name, chunked):
    what, body, content_type = CALLS[name]
    reply = framed(body, chunked=chunked, content_type=content_type)
    want = whole(name, chunked)
    assert want is not None
    cut = {"reply": reply}
    with RawEngine(lambda method, path, got: cut["reply"]) as engine:
        for at in range(len(reply)):
            cut["reply"] = reply[:at]
            got = call(engine, what)
            # Whole when only framing is lost (the chunked stream's last empty
            # chunk, the blank line after an empty body's headers), never shorter.
            assert got is None or got == want, (at, got)


@pytest.mark.parametrize("name", ["health", "version", "count_tokens"])
def test_noise_anywhere_in_the_status_line_and_headers(name):
    """NUL, CR, ANSI, BOM ... at every point of a real answer's head: the same answer or PrefillError."""
    what, body, content_type = CALLS[name]
    reply = framed(body, content_type=content_type)
    head = len(reply) - len(body)
    want = whole(name, False)
    current = {"reply": reply}
    with RawEngine(lambda method, path, got: current["reply"]) as engine:
        for noise in NOISE:
            for at in range(head):
                current["reply"] = reply[:at] + noise.encode() + reply[at:]
                got = call(engine, what)
                assert got is None or got == want, (noise, at, got)


def test_a_body_cut_short_of_its_content_length_is_unreachable():
    reply = framed(METRICS_BODY, content_type=TEXT_HEAD)
    end_of_line = len(reply) - len(METRICS_BODY) + METRICS_BODY.index(b"\n", 2000) + 1
    with answering(reply[:end_of_line]) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            # Without the check, a cut at a line's end read as a whole scrape, figures missing.
            with pytest.raises(pc.EngineUnreachable, match="cut after"):
                client.metrics()


# --- hostile bodies in valid framing -----------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20)
    | st.integers(min_value=10 ** 300, max_value=10 ** 4000),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["version", "count", "usage", "prompt_tokens", "tokens", "choices", "x"]), inner, max_size=5),
    max_leaves=20)
BODIES = st.one_of(
    st.binary(max_size=2000),
    any_text(2000).map(lambda s: s.encode("utf-8", "surrogatepass")),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([nested(10000).encode(), nested(10000, "{", "}", "").encode(),
                     ('{"version": ' * 5000 + "1" + "}" * 5000).encode(), HUGE_NUMBER.encode(),
                     b'{"count": ' + HUGE_NUMBER.encode() + b"}", b'{"count": 1' + b"0" * 4000 + b"}",
                     b'{"count": NaN}', b'{"count": Infinity}', b'{"count": -1}', b'{"count": 1e400}',
                     b'{"version": "' + b"9" * 100000 + b'"}', b'{"version": "0.32.0\x1b[31m"}',
                     b'{"version": "\\u0000"}', b'{"version": "\\ud800"}', b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00"]),
)


def check_figures(name: str, result, reply: bytes) -> None:
    """A status or a token count the client returns is written in what the engine sent.

    (json() returns the body's JSON as it is: a figure there is the body's.)"""
    if name in ("health", "count_tokens") and result is not None:
        assert isinstance(result, int) and not isinstance(result, bool)
        assert_numbers_from([result], reply.decode("latin-1"))


@given(BODIES, st.sampled_from(sorted(CALLS)), st.booleans())
@settings(max_examples=150)
def test_hostile_bodies(body, name, chunked):
    what, _, content_type = CALLS[name]
    reply = framed(body, chunked=chunked, content_type=content_type)
    with answering(reply) as engine:
        check_figures(name, call(engine, what), reply)


@given(st.binary(max_size=3000), st.sampled_from(sorted(CALLS)))
@settings(max_examples=150)
def test_hostile_bytes_for_an_answer(reply, name):
    with answering(reply) as engine:
        result = call(engine, CALLS[name][0])
    check_figures(name, result, reply)


HEAD_LINES = framed(COMPLETION_BODY).split(b"\r\n\r\n")[0].decode().split("\r\n") + [
    "HTTP/1.1 500 Internal Server Error", "Transfer-Encoding: chunked", "Content-Length: 0", "Content-Length: -1",
    "Content-Length: " + HUGE_NUMBER, "Connection: keep-alive"]


@given(st.lists(st.one_of(st.sampled_from(HEAD_LINES), mutated(HEAD_LINES), any_text(100)), max_size=12),
       st.sampled_from([COMPLETION_BODY, b"", b"zz\r\n" + COMPLETION_BODY]), st.sampled_from(sorted(CALLS)))
@settings(max_examples=150)
def test_hostile_status_lines_and_headers(lines, body, name):
    reply = "\r\n".join(lines).encode("utf-8", "surrogatepass") + b"\r\n\r\n" + body
    with answering(reply) as engine:
        result = call(engine, CALLS[name][0])
    check_figures(name, result, reply)


@pytest.mark.parametrize("status, want", [
    (b"200 OK", 200), (b"503 Service Unavailable", 503), (b"200", 200), (b"999 X", 999),
    (b"\xd9\xa2\xd9\xa0\xd9\xa0 OK", None),  # Arabic-Indic 200: int() would read it
    (b"2OO OK", None), (b"20 OK", None), (b"2000 OK", None), (b"-200 OK", None), (b"", None),
    (b"200 \x1b[31mOK\x00", 200),
])
def test_health_status_is_the_status_lines(status, want):
    with answering(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n\r\n") as engine:
        assert call(engine, lambda c: c.health()) == want


@pytest.mark.parametrize("body, match", [
    (b"<html>502 Bad Gateway</html>", "did not answer JSON"),
    (nested(10000).encode(), "did not answer JSON"),
    (b'{"version": ' + nested(100).encode() + b"}", r"did not answer \{\"version\""),
    (b'{"version": 0.32}', r"did not answer \{\"version\""),
    (b'{"version": ""}', r"did not answer \{\"version\""),
    (b'{"version": "' + b"9" * 100000 + b'"}', "not a vLLM version"),
    (b'{"version": "0.32.0\\u001b[31m"}', "not a vLLM version"),
    (b'["0.32.0"]', r"did not answer \{\"version\""),
])
def test_version_refuses(body, match):
    with answering(framed(body)) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            with pytest.raises(PrefillError, match=match) as got:
                client.version()
    assert len(str(got.value)) < 400 and "\x1b" not in str(got.value)


@pytest.mark.parametrize("count", [
    "-1", "1.0", "true", "null", '"12"', "1e3", "NaN", "Infinity", str(MAX_PROMPT_TOKENS + 1), "1" + "0" * 4000,
])
def test_count_tokens_refuses(count):
    with answering(framed(b'{"count": %s}' % count.encode())) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            with pytest.raises(PrefillError, match="did not answer a token count"):
                client.count_tokens(MODEL, "alpha")


def test_an_error_answer_is_shown_escaped_and_short():
    body = b"\x1b[31m" + b"x" * 10000 + b"\x00"
    with answering(framed(body, status=b"500 Internal Server Error")) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            with pytest.raises(PrefillError, match="answered HTTP 500") as got:
                client.version()
    assert "\x1b" not in str(got.value) and len(str(got.value)) < 500


def test_not_http_is_unreachable_and_said_escaped():
    with answering(b"SSH-2.0-OpenSSH_9.6\r\n" + b"\x1b[31m" * 50000 + b"\r\n") as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            with pytest.raises(pc.EngineUnreachable) as got:
                client.health()
    assert "\x1b" not in str(got.value) and len(str(got.value)) < 500


def test_an_answer_over_the_limit(monkeypatch):
    monkeypatch.setattr(pc, "MAX_BODY", 1000)
    for reply in (framed(b"x" * 1001), framed(b"x" * 5000, chunked=True),
                  b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n" + b"x" * 5000):
        with answering(reply) as engine:
            with pc.EngineClient(engine.url, timeout=2.0) as client:
                with pytest.raises(PrefillError, match="over 1000 bytes"):
                    client.request("GET", "/version")


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:port", "http://[::1", "http://h:-1",
                                 None, 8000, "http://" + "a" * 70 + ".example"])
def test_bad_urls_are_prefill_errors(url):
    with pytest.raises(PrefillError):
        with pc.EngineClient(url, timeout=0.5) as client:
            client.health()


# --- a sample's figures ---------------------------------------------------------------------------

@given(JSON_VALUES)
@settings(max_examples=60)
def test_sample_with_any_usage(usage):
    with FakeVllm(trim=True) as fake:
        def complete(h, body):
            fake.finish(16, 16e-4)
            fake._answer(h, 200, dict(COMPLETION, usage=usage))

        fake._complete = complete
        with pc.EngineClient(fake.url, timeout=2.0) as client:
            got = raises_only(PrefillError, client.sample, MODEL, "alpha " * 15)
    if got is not None:
        sample = got[0]
        assert sample.prompt_tokens == usage["prompt_tokens"]
        assert 0 < sample.prompt_tokens <= MAX_PROMPT_TOKENS
        assert math.isfinite(sample.seconds_per_token)


@pytest.mark.parametrize("prompt_tokens", ["1" + "0" * 4000, str(MAX_PROMPT_TOKENS + 1), "0", "-5", "1.5", '"16"'])
def test_sample_refuses_a_prompt_length_that_is_no_count(prompt_tokens):
    # 10**4000 tokens used to pass, and seconds_per_token then raised OverflowError.
    with FakeVllm(trim=True) as fake:
        def complete(h, body):
            fake.finish(16, 16e-4)
            raw = json.dumps(dict(COMPLETION, usage={"prompt_tokens": 0})).replace(
                '"prompt_tokens": 0', '"prompt_tokens": ' + prompt_tokens)
            fake._answer(h, 200, raw.encode())

        fake._complete = complete
        with pc.EngineClient(fake.url, timeout=2.0) as client:
            with pytest.raises(PrefillError, match="usage has no prompt_tokens"):
                client.sample(MODEL, "alpha " * 15)


# --- the probe against a hostile engine --------------------------------------------------------------

@contextlib.contextmanager
def settle(seconds: float = 0.02):
    """A completion the engine's /metrics never counts is given up on after ``seconds``, not 2 s.

    (Not the monkeypatch fixture: hypothesis runs many examples in one test call.)"""
    was, pc.METRICS_SETTLE_S = pc.METRICS_SETTLE_S, seconds
    try:
        yield
    finally:
        pc.METRICS_SETTLE_S = was


def hostile_engine(answers: dict):
    """An engine that answers the real thing on every path but those in ``answers``."""
    real = {"/health": framed(b""), "/version": framed(VERSION_BODY),
            "/metrics": framed(METRICS_BODY, content_type=TEXT_HEAD), "/v1/completions": framed(COMPLETION_BODY)}

    def answer(method, path, body):
        if path in answers:
            return answers[path]
        if path == "/tokenize":
            prompt = json.loads(body)["prompt"]
            return framed(json.dumps({"count": len(prompt.split()) + 1}).encode())
        return real.get(path, framed(b'{"detail": "Not Found"}', status=b"404 Not Found"))

    return RawEngine(answer)


PATHS = ["/health", "/version", "/metrics", "/tokenize", "/v1/completions"]


@given(st.dictionaries(st.sampled_from(PATHS), st.one_of(
    BODIES.map(framed), BODIES.map(lambda b: framed(b, content_type=TEXT_HEAD)), st.binary(max_size=500),
    st.sampled_from([framed(METRICS_BODY.replace(b"0.0\n", b"\xd9\xa3\n"), content_type=TEXT_HEAD),
                     framed(METRICS_BODY.replace(b"} 0.0\n", b"} NaN\n"), content_type=TEXT_HEAD),
                     framed(METRICS_BODY[:-100], content_type=TEXT_HEAD),
                     framed(METRICS_BODY, content_type=TEXT_HEAD)[:-100]])), min_size=1, max_size=3))
@settings(max_examples=40)
def test_probe_of_a_hostile_engine(answers):
    with settle(), hostile_engine(answers) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            result = raises_only(PrefillError, prefill_probe.probe, client, MODEL, 16, None, 0.01, 2.0)
    if result is not None:
        assert result["verdict"] in ("down", "inconclusive")
        json.dumps(result)  # what the module returns is JSON


def test_the_raw_engine_serves_a_probe():
    """The property above can fail: against the real answers the probe gets to its warm-up.

    (The raw engine's /metrics never moves, so the warm-up sees no prefill.)"""
    with settle(), hostile_engine({}) as engine:
        with pc.EngineClient(engine.url, timeout=2.0) as client:
            start = time.monotonic()
            result = prefill_probe.probe(client, MODEL, 16, None, 0.01, 2.0)
    assert result["verdict"] == "inconclusive" and result["answered"] is True
    assert result["reason"].startswith("warm-up: the engine's prefill time did not move"), result["reason"]
    assert result["vllm_version"] == "0.32.0" and result["prompt_tokens"] == 16
    assert time.monotonic() - start < 10
    assert parse_metrics(METRICS_BODY).prompt_tokens == result["metrics_before"]["prompt_tokens"]


# --- engine_prefill_seconds: a completion's own timing, from whatever JSON answered ------------

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                        max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), _JSON))
def test_engine_prefill_seconds_is_a_positive_finite_figure_or_none(noise, ttft):
    for data in (noise, {"metrics": noise}, {"metrics": {"time_to_first_token_ms": ttft}}):
        value = pc.engine_prefill_seconds(data)
        assert value is None or (isinstance(value, float) and 0 < value <= 86400 and math.isfinite(value))


@pytest.mark.parametrize("ttft,seconds", [
    (174.3, 0.1743), (1, 0.001), (0, None), (-5.0, None), (float("nan"), None), (float("inf"), None),
    (10 ** 400, None), (True, None), ("174", None), (86400001, None), (None, None),
])
def test_engine_prefill_seconds_reads_milliseconds(ttft, seconds):
    value = pc.engine_prefill_seconds({"metrics": {"time_to_first_token_ms": ttft}})
    assert value == (pytest.approx(seconds) if seconds is not None else None)


def test_engine_prefill_seconds_of_the_real_answer():
    # The lab's vLLM 0.32.0 with --enable-per-request-metrics (tests/fixtures/prefill/README.md).
    data = json.loads((FIXTURES / "completion-timed.json").read_bytes())
    assert pc.engine_prefill_seconds(data) == pytest.approx(data["metrics"]["time_to_first_token_ms"] / 1000)
    assert pc.engine_prefill_seconds(json.loads(COMPLETION_BODY)) is None
