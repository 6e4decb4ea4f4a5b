#!/usr/bin/python3
"""The lab's stand-in for the field's application: long chat sessions with a fallback.

It keeps N chat sessions going at once. Before every request it rereads the
endpoint file that the toolkit writes on consumer hosts, so a cutover between
gate mode and direct mode takes effect at the next request. When the model
endpoint fails (connection error, timeout, HTTP 5xx or 429, a broken stream),
it sends the same request to the fallback model, as the field's application
did. Each request's outcome is one JSON line in the log; the summary mode
turns that log into counts and the length of the longest outage.

Standard library only: it runs on an offline Debian host with python3 and
nothing else. See README.md beside it for the options and formats.

Usage:
  session_client.py [--endpoint-file F] [--fallback-url URL] [--sessions N]
                    [--context-tokens N] [--prompt-tokens N] [--max-tokens N]
                    [--stream] [--timeout S] [--think-ms MS] [--duration S]
                    [--max-requests N] [--model NAME] [--log FILE] [--quiet]
  session_client.py --summary FILE [--since TS] [--until TS]
  session_client.py summarise FILE [--since TS] [--until TS]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit, urlunsplit

DEFAULT_ENDPOINT_FILE = "/etc/vllm-fleet/endpoint.env"
DEFAULT_LOG = "/var/log/vllm-fleet/session-client.jsonl"
# fallback_server.py's default address.
DEFAULT_FALLBACK_URL = "http://127.0.0.1:8001/v1"
OUTCOMES = ("ok", "fallback", "error")
CHARS_PER_TOKEN = 4
# Role markers and separators a chat template adds per message.
MESSAGE_OVERHEAD_TOKENS = 4
ERROR_MAX_CHARS = 200
MAX_BODY_BYTES = 64 * 1024 * 1024
# After SIGTERM, how long to wait for sessions stuck in connect().
STOP_GRACE_S = 2.0
USER_AGENT = "vllm-fleet-session-client/1"

# Filler for prompts. Code-like words: the lab's tiny model's BPE tokenizer
# was trained on Python sources and packs them at about 6 characters a token,
# so the 4-characters-a-token estimate never overfills its context.
WORDS = (
    "self return import value name args data file line path result error list string object type class "
    "default index count items keys buffer module function method from None True False yield lambda "
    "while break continue raise except finally assert global config option format parse encode decode"
).split()


# -- the endpoint file ----------------------------------------------------


class EndpointError(Exception):
    """The endpoint file is missing, unreadable or lacks OPENAI_BASE_URL."""


@dataclass(frozen=True)
class Endpoint:
    """What one read of the endpoint file says."""

    base_url: str
    mode: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)


def parse_env(text: str) -> dict[str, str]:
    """Parse KEY=VALUE lines as systemd's EnvironmentFile does, roughly.

    Blank lines and ``#`` comments are skipped, an ``export`` prefix is
    allowed, and one pair of matching quotes around a value is removed.
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def read_endpoint(path: str) -> Endpoint:
    """Read the endpoint file now; raise EndpointError when it is unusable."""
    try:
        with open(path, encoding="utf-8") as fh:
            values = parse_env(fh.read())
    except FileNotFoundError:
        raise EndpointError(f"endpoint file {path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EndpointError(f"endpoint file {path} is unreadable: {_short(exc)}") from None
    base_url = values.get("OPENAI_BASE_URL", "").rstrip("/")
    if not base_url:
        raise EndpointError(f"endpoint file {path} has no OPENAI_BASE_URL")
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise EndpointError(f"endpoint file {path}: OPENAI_BASE_URL is not an http(s) URL")
    return Endpoint(
        base_url=base_url,
        mode=values.get("VLLM_FLEET_MODE") or None,
        model=values.get("OPENAI_MODEL") or None,
        api_key=values.get("OPENAI_API_KEY") or None,
    )


def public_url(url: str) -> str:
    """The URL without any user:password, fit for a log."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


# -- conversations --------------------------------------------------------


def estimate_tokens(messages: Iterable[dict]) -> int:
    """Prompt size at 4 characters a token, plus a few tokens per message."""
    return sum(MESSAGE_OVERHEAD_TOKENS + (len(m["content"]) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
               for m in messages)


def trim_messages(messages: list[dict], budget: int) -> list[dict]:
    """Drop the oldest turns until the estimate fits ``budget``.

    A leading system message and the newest message are always kept, and the
    kept history starts at a user message, so roles still alternate.
    """
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    body = messages[len(head):]
    while len(body) > 1 and estimate_tokens(head + body) > budget:
        body = body[1:]
        while len(body) > 1 and body[0]["role"] != "user":
            body = body[1:]
    return head + body


class Conversation:
    """One chat session's history and its prompt generator."""

    def __init__(self, session: int, prompt_tokens: int, seed: str) -> None:
        self.session = session
        self.prompt_tokens = prompt_tokens
        self._rng = random.Random(f"{seed}-{session}")
        self.messages: list[dict] = [{
            "role": "system",
            "content": f"You are chat session {session} of the vllm-fleet lab. Keep every document in mind.",
        }]

    def ask(self, turn: int) -> None:
        lead = f"Session {self.session}, turn {turn}. Read this and keep it for later questions:"
        words = [lead]
        size = len(lead)
        while size < self.prompt_tokens * CHARS_PER_TOKEN:
            word = self._rng.choice(WORDS)
            words.append(word)
            size += len(word) + 1
        self.messages.append({"role": "user", "content": " ".join(words)})

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def forget_question(self) -> None:
        """Drop an unanswered question, so user and assistant keep alternating."""
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()

    def request_messages(self, budget: int) -> list[dict]:
        self.messages = trim_messages(self.messages, budget)
        return list(self.messages)


# -- one HTTP request -----------------------------------------------------


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


def _short(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[:ERROR_MAX_CHARS]


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"timeout after {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed without a response"
    if isinstance(exc, http.client.IncompleteRead):
        return "response cut short"
    return f"{type(exc).__name__}: {_short(exc)}"


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


# -- the log --------------------------------------------------------------


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class JsonlLog:
    """Append-only JSON lines, safe across threads.

    The file is reopened when its path no longer names the open file, so
    logrotate, or a test that deletes the log between runs, just works.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = None
        self._ident: tuple[int, int] | None = None
        self.closed = False
        with self._lock:
            self._file()

    def _file(self):
        if self.path == "-":
            return sys.stdout
        try:
            st = os.stat(self.path)
            ident = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            ident = None
        if self._fh is None or ident is None or ident != self._ident:
            if self._fh is not None:
                self._fh.close()
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._fh = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (held open)
            st = os.fstat(self._fh.fileno())
            self._ident = (st.st_dev, st.st_ino)
        return self._fh

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            if self.closed:
                return
            fh = self._file()
            fh.write(line)
            fh.flush()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._fh is not None:
                self._fh.close()
                self._fh = None


# -- the sessions ---------------------------------------------------------


class Client:
    """N sessions in threads, bounded by a duration, a request count or a stop."""

    def __init__(self, opts: argparse.Namespace, log: JsonlLog, stop: threading.Event | None = None) -> None:
        self.opts = opts
        self.log = log
        self.stop = stop or threading.Event()
        self.tracker = SocketTracker()
        self.counts = {outcome: 0 for outcome in OUTCOMES}
        self._lock = threading.Lock()
        self._started = 0
        self._seed = f"{os.getpid()}-{time.time_ns()}"
        self._deadline = time.monotonic() + opts.duration if opts.duration is not None else None
        self.budget = opts.context_tokens - opts.max_tokens

    def drain(self) -> None:
        """Start no new request; those in flight finish and are logged."""
        self._deadline = time.monotonic()

    def abort(self) -> None:
        """Stop now: no new turns, and requests in flight are cut and not logged."""
        self.stop.set()
        self.tracker.abort()

    def _claim(self) -> bool:
        """Take the next request slot, if the bounds leave one."""
        if self.stop.is_set():
            return False
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return False
        with self._lock:
            if self.opts.max_requests is not None and self._started >= self.opts.max_requests:
                return False
            self._started += 1
            return True

    def _pause(self) -> None:
        wait = self.opts.think_ms / 1000.0
        if self._deadline is not None:
            wait = min(wait, max(0.0, self._deadline - time.monotonic()))
        if wait > 0:
            self.stop.wait(wait)

    def run(self) -> dict[str, int]:
        threads = [threading.Thread(target=self._session, args=(n,), name=f"session-{n}", daemon=True)
                   for n in range(1, self.opts.sessions + 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            # Poll so that a signal is handled promptly in the main thread.
            while thread.is_alive() and not self.stop.is_set():
                thread.join(0.2)
        if self.stop.is_set():
            grace = time.monotonic() + STOP_GRACE_S
            for thread in threads:
                thread.join(max(0.0, grace - time.monotonic()))
        return dict(self.counts)

    def _session(self, session: int) -> None:
        conv = Conversation(session, self.opts.prompt_tokens, self._seed)
        turn = 0
        while self._claim():
            turn += 1
            self._turn(conv, session, turn)
            self._pause()

    def _turn(self, conv: Conversation, session: int, turn: int) -> None:
        # ts is taken before the endpoint file is read: every request stamped
        # after a cutover's write saw the new file.
        ts = now_iso()
        start = time.monotonic()
        conv.ask(turn)
        body: dict = {"messages": conv.request_messages(self.budget), "max_tokens": self.opts.max_tokens}
        if self.opts.stream:
            body["stream"] = True
        record: dict = {"ts": ts, "session": session, "turn": turn, "mode": None, "base_url": None}
        failure: RequestFailed
        try:
            endpoint = read_endpoint(self.opts.endpoint_file)
        except EndpointError as exc:
            failure = RequestFailed(str(exc))
        else:
            record["mode"] = endpoint.mode
            record["base_url"] = public_url(endpoint.base_url)
            model = endpoint.model or self.opts.model
            if model:
                body["model"] = model
            try:
                reply = post_chat(endpoint.base_url, body, timeout=self.opts.timeout,
                                  api_key=endpoint.api_key, tracker=self.tracker)
            except RequestFailed as exc:
                failure = exc
            else:
                conv.answer(reply.text)
                self._log(record, "ok", reply.status, start, None)
                return
        if self.stop.is_set():
            return  # cut by a stop: not the endpoint's fault, so not logged
        if not failure.fallback or not self.opts.fallback_url:
            conv.forget_question()
            self._log(record, "error", failure.status, start, str(failure))
            return
        try:
            # The fallback is another service: it never gets the model's API key.
            reply = post_chat(self.opts.fallback_url, body, timeout=self.opts.timeout, tracker=self.tracker)
        except RequestFailed as exc:
            if self.stop.is_set():
                return
            conv.forget_question()
            self._log(record, "error", exc.status if exc.status is not None else failure.status, start,
                      f"{failure}; fallback: {exc}")
            return
        conv.answer(reply.text)
        self._log(record, "fallback", reply.status, start, str(failure))

    def _log(self, record: dict, outcome: str, status: int | None, start: float, error: str | None) -> None:
        record.update(outcome=outcome, status=status,
                      latency_ms=round((time.monotonic() - start) * 1000.0, 1),
                      error=error[:ERROR_MAX_CHARS] if error else None)
        with self._lock:
            self.counts[outcome] += 1
        self.log.write(record)


# -- the summary ----------------------------------------------------------


def parse_ts(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def load_records(path: str) -> tuple[list[dict], int]:
    """The log's records, and how many lines were not records."""
    records, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if (not isinstance(record, dict) or record.get("outcome") not in OUTCOMES
                    or parse_ts(record.get("ts")) is None):
                bad += 1
                continue
            records.append(record)
    return records, bad


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(records: Iterable[dict], since: datetime | None = None, until: datetime | None = None) -> dict:
    """Counts per outcome, mode and base URL, and the runs of consecutive fallbacks.

    Records are put in time order (ts is when a request started). A run is a
    maximal sequence of ``fallback`` records with no other outcome between
    them, across all sessions. Its length in seconds runs from its first
    request's start to its last request's end (ts + latency_ms): the outage
    as the application saw it.
    """
    rows = []
    for record in records:
        ts = parse_ts(record.get("ts"))
        if ts is None or (since and ts < since) or (until and ts > until):
            continue
        session, turn = record.get("session"), record.get("turn")
        rows.append((ts, session if isinstance(session, int) else 0, turn if isinstance(turn, int) else 0, record))
    rows.sort(key=lambda row: row[:3])

    def zero() -> dict[str, int]:
        return {outcome: 0 for outcome in OUTCOMES}

    outcomes, by_mode, by_url = zero(), {}, {}
    latencies: dict[str, list[float]] = {outcome: [] for outcome in OUTCOMES}
    runs: list[dict] = []
    current: dict | None = None
    for ts, _, _, record in rows:
        outcome = record["outcome"]
        outcomes[outcome] += 1
        by_mode.setdefault(record.get("mode") or "unknown", zero())[outcome] += 1
        by_url.setdefault(record.get("base_url") or "unknown", zero())[outcome] += 1
        latency = record.get("latency_ms")
        latency = float(latency) if isinstance(latency, (int, float)) else 0.0
        latencies[outcome].append(latency)
        if outcome != "fallback":
            current = None
            continue
        end = ts.timestamp() + latency / 1000.0
        if current is None:
            current = {"requests": 0, "start": ts, "start_s": ts.timestamp(), "end_s": end, "last": ts}
            runs.append(current)
        current["requests"] += 1
        current["end_s"] = max(current["end_s"], end)
        current["last"] = ts

    fallbacks = [row[0] for row in rows if row[3]["outcome"] == "fallback"]
    errors = [row[0] for row in rows if row[3]["outcome"] == "error"]
    longest = None
    if runs:
        best = max(runs, key=lambda run: (run["end_s"] - run["start_s"], run["requests"]))
        longest = {
            "requests": best["requests"],
            "seconds": round(best["end_s"] - best["start_s"], 3),
            "start": best["start"].isoformat(timespec="milliseconds"),
            "last_start": best["last"].isoformat(timespec="milliseconds"),
        }
    iso = lambda ts: ts.isoformat(timespec="milliseconds") if ts else None  # noqa: E731
    return {
        "records": len(rows),
        "first_ts": iso(rows[0][0]) if rows else None,
        "last_ts": iso(rows[-1][0]) if rows else None,
        "outcomes": outcomes,
        "by_mode": by_mode,
        "by_base_url": by_url,
        "first_fallback_ts": iso(fallbacks[0]) if fallbacks else None,
        "last_fallback_ts": iso(fallbacks[-1]) if fallbacks else None,
        "first_error_ts": iso(errors[0]) if errors else None,
        "last_error_ts": iso(errors[-1]) if errors else None,
        "fallback_runs": len(runs),
        "longest_fallback_run": longest,
        "longest_fallback_run_s": longest["seconds"] if longest else 0.0,
        "latency_ms": {
            outcome: {"p50": _percentile(v, 0.5), "p95": _percentile(v, 0.95), "max": max(v)}
            for outcome, v in latencies.items() if v
        },
    }


# -- the command line -----------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _timestamp(text: str) -> datetime:
    ts = parse_ts(text)
    if ts is None:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {text}")
    return ts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="session_client.py",
        description="Long chat sessions against the endpoint in the vllm-fleet endpoint file, "
                    "with a fallback model; one JSON line per request.",
        epilog="summarise FILE is the same as --summary FILE.")
    run = parser.add_argument_group("sessions")
    run.add_argument("--endpoint-file", default=DEFAULT_ENDPOINT_FILE,
                     help="KEY=VALUE file reread before every request (default %(default)s)")
    run.add_argument("--fallback-url", default=DEFAULT_FALLBACK_URL,
                     help="OpenAI base URL of the fallback model; '' for none (default %(default)s)")
    run.add_argument("--sessions", type=_positive_int, default=3, help="concurrent sessions (default %(default)s)")
    run.add_argument("--context-tokens", type=_positive_int, default=1536,
                     help="context budget per request, prompt plus answer, at 4 chars/token (default %(default)s)")
    run.add_argument("--prompt-tokens", type=_positive_int, default=128,
                     help="size of each new user message (default %(default)s)")
    run.add_argument("--max-tokens", type=_positive_int, default=32, help="max_tokens per answer (default %(default)s)")
    run.add_argument("--model", default=None, help="model to ask for when the endpoint file has no OPENAI_MODEL")
    run.add_argument("--stream", action="store_true", help="ask for SSE streams and read each to [DONE]")
    run.add_argument("--timeout", type=_non_negative_float, default=30.0,
                     help="seconds per request, connect to last byte (default %(default)s)")
    run.add_argument("--think-ms", type=_non_negative_float, default=200.0,
                     help="pause between a session's turns (default %(default)s)")
    run.add_argument("--duration", type=_non_negative_float, default=None,
                     help="start no request after this many seconds; in-flight ones finish (default: no limit)")
    run.add_argument("--max-requests", type=_positive_int, default=None,
                     help="stop after this many requests in all sessions (default: no limit)")
    run.add_argument("--log", default=DEFAULT_LOG, help="JSONL log, appended; '-' for stdout (default %(default)s)")
    run.add_argument("--quiet", action="store_true", help="no start and end lines on stderr")
    summary = parser.add_argument_group("summary")
    summary.add_argument("--summary", metavar="FILE", help="print FILE's summary as JSON and exit")
    summary.add_argument("--since", type=_timestamp, help="summarise only requests started at or after this time")
    summary.add_argument("--until", type=_timestamp, help="summarise only requests started at or before this time")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv[:1] in (["summarise"], ["summarize"]):
        if len(argv) < 2 or argv[1].startswith("-"):
            build_parser().error("summarise needs a FILE")
        argv = ["--summary", *argv[1:]]
    parser = build_parser()
    opts = parser.parse_args(argv)
    if opts.summary is None:
        if opts.max_tokens >= opts.context_tokens:
            parser.error("--max-tokens must be smaller than --context-tokens")
        if opts.timeout <= 0:
            parser.error("--timeout must be > 0")
    return opts


def _summary_command(opts: argparse.Namespace) -> int:
    try:
        records, bad = load_records(opts.summary)
    except OSError as exc:
        print(f"session_client: cannot read {opts.summary}: {_short(exc)}", file=sys.stderr)
        return 2
    result = {"file": opts.summary, "bad_lines": bad, **summarise(records, opts.since, opts.until)}
    print(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(list(sys.argv[1:] if argv is None else argv))
    if opts.summary is not None:
        return _summary_command(opts)
    try:
        log = JsonlLog(opts.log)
    except OSError as exc:
        print(f"session_client: cannot open log {opts.log}: {_short(exc)}", file=sys.stderr)
        return 1
    client = Client(opts, log)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: client.abort())
    if not opts.quiet:
        print(f"session_client: {opts.sessions} sessions, endpoint file {opts.endpoint_file}, "
              f"fallback {opts.fallback_url or 'none'}, log {opts.log}", file=sys.stderr, flush=True)
    try:
        counts = client.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        log.close()
    if not opts.quiet:
        why = "stopped by signal" if client.stop.is_set() else "done"
        print(f"session_client: {why}: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
