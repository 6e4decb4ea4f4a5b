# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measure an engine's prefill over HTTP: the probe's one network part.

Used by ``library/vllm_prefill_probe.py`` on the engine's head and by
``bench/prefill_detect.py`` from the controller. Standard library HTTP
(``http.client``) so one kept-alive connection carries every request: a
reconnect costs more than a small prefill (uvicorn's keep-alive is 5 s,
docs/reference/restart.md section 3.3). Every decision is in ``decision.py``.

One sample is one ``/v1/completions`` request with ``max_tokens=1`` and a
fresh ``cache_salt``, so no block of it is a prefix-cache hit. Its
engine-side prefill time is the change in
``vllm:request_prefill_time_seconds_sum`` across it, exact while it is the
only request; the client's time to the answer is kept beside it.

Under load that change counts other requests too, so a loaded sample
(``timed_sample``) reads the request's own interval instead: with
``--enable-per-request-metrics`` every completion carries
``metrics.time_to_first_token_ms``, first token minus scheduled, the same
quantity for this one request with its queue left out (``engine_prefill_seconds``).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import secrets
import time
import typing as t
from urllib.parse import urlsplit

from ansible.module_utils.prefill.decision import MAX_PROMPT_TOKENS
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.prefill.metrics import MetricsSnapshot, parse_metrics

# Words whose token counts are stable under any BPE: the prompt is built from
# these, counted with the engine's /tokenize, and trimmed to the length asked.
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
          "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")
MAX_BODY = 32 << 20
# How long a finished request's figures may take to reach /metrics.
METRICS_SETTLE_S = 2.0
METRICS_POLL_S = 0.01
# vLLM's versions are like 0.32.0 or 0.11.1rc3.dev12+g1234abc.cpu.
MAX_VERSION = 200


class EngineUnreachable(PrefillError):
    """Nothing answered at the engine's address (refused, reset, DNS)."""


class EngineTimeout(PrefillError):
    """A request got no answer in time while the connection stayed open."""


class NotAlone(PrefillError):
    """Another request finished a prefill beside a sample: its sums' change is not its own."""


class NoRequestMetrics(PrefillError):
    """A completion carried no per-request prefill time (the engine runs without
    --enable-per-request-metrics)."""


def engine_prefill_seconds(data: t.Any) -> float | None:
    """A completion's own engine-side prefill time in seconds (``metrics.time_to_first_token_ms``,
    first token minus scheduled, vLLM 0.31 and later with --enable-per-request-metrics), or None
    when it carries none. Anything but a positive finite number of milliseconds under a day is none.
    """
    metrics = data.get("metrics") if isinstance(data, dict) else None
    value = metrics.get("time_to_first_token_ms") if isinstance(metrics, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value) / 1000.0
    except OverflowError:  # an int past float's range
        return None
    return seconds if 0.0 < seconds <= 86400.0 else None


@dataclasses.dataclass(frozen=True)
class Sample:
    """One probe request."""

    server_seconds: float
    client_seconds: float
    prompt_tokens: int

    @property
    def seconds_per_token(self) -> float:
        return self.server_seconds / self.prompt_tokens

    def as_dict(self) -> dict:
        return {"server_seconds": self.server_seconds, "client_seconds": self.client_seconds,
                "prompt_tokens": self.prompt_tokens, "seconds_per_token": self.seconds_per_token}


class EngineClient:
    """One kept-alive HTTP connection to a vLLM API server."""

    def __init__(self, url: str, timeout: float = 20.0, api_key: str | None = None,
                 clock: t.Callable[[], float] = time.monotonic) -> None:
        try:
            parts = urlsplit(url)
            port = parts.port  # a port past 65535 or not a number raises ValueError
        except (ValueError, TypeError, AttributeError):
            parts, port = None, None
        if parts is None or parts.scheme != "http" or not parts.hostname:
            raise PrefillError("url %s must be http://HOST:PORT, the engine's own API address" % _said(repr(url)))
        self.base = url.rstrip("/")
        self.host = parts.hostname
        self.port = port or 80
        self.prefix = parts.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.timeout = timeout
        self.api_key = api_key
        self.clock = clock
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: t.Any) -> None:
        self.close()

    def request(self, method: str, path: str, body: dict | None = None,
                timeout: float | None = None) -> tuple[int, bytes]:
        """Send one request on the kept-alive connection; reconnect once if the server closed it."""
        headers = {"Connection": "keep-alive"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        limit = self.timeout if timeout is None else timeout
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=limit)
            self._conn.timeout = limit
            if self._conn.sock is not None:
                self._conn.sock.settimeout(limit)
            try:
                self._conn.request(method, self.prefix + path, body=data, headers=headers)
                response = self._conn.getresponse()
                payload = response.read(MAX_BODY + 1)
            except TimeoutError:
                self.close()
                raise EngineTimeout("%s %s got no answer in %g s" % (method, path, limit)) from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                # A kept-alive connection the server closed while idle: once more, fresh.
                self.close()
                if attempt == 2:
                    raise EngineUnreachable("%s %s: %s" % (method, path, _said(str(exc)))) from None
                continue
            except (OSError, http.client.HTTPException, ValueError) as exc:
                # ValueError: a host name IDNA cannot encode (UnicodeError), a key that is not Latin-1.
                self.close()
                raise EngineUnreachable("%s %s%s: %s" % (method, self.base, path, _said(str(exc)))) from None
            if len(payload) > MAX_BODY:
                self.close()
                raise PrefillError("%s %s answered over %d bytes: is this vLLM?" % (method, path, MAX_BODY))
            # read(amt) returns a body cut short of its Content-Length as if whole.
            if response.length:
                self.close()
                raise EngineUnreachable("%s %s: the answer was cut after %d bytes, %d short of its "
                                        "Content-Length" % (method, path, len(payload), response.length))
            if response.will_close:
                self.close()
            return response.status, payload
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: dict | None = None,
             timeout: float | None = None) -> t.Any:
        status, payload = self.request(method, path, body, timeout)
        if status != 200:
            raise PrefillError("%s %s answered HTTP %d: %s" % (
                method, path, status, _said(payload[:300].decode("utf-8", "replace"), 300)))
        try:
            return json.loads(payload)
        except (ValueError, RecursionError):
            raise PrefillError("%s %s did not answer JSON: is this vLLM's API port?" % (method, path)) from None

    def health(self, timeout: float = 5.0) -> int:
        """/health's HTTP status; raises EngineUnreachable when nothing answers."""
        return self.request("GET", "/health", timeout=timeout)[0]

    def metrics(self) -> MetricsSnapshot:
        status, payload = self.request("GET", "/metrics")
        if status != 200:
            raise PrefillError("GET /metrics answered HTTP %d: is this vLLM's API port?" % status)
        return parse_metrics(payload)

    def version(self) -> str:
        data = self.json("GET", "/version")
        version = data.get("version") if isinstance(data, dict) else None
        if not isinstance(version, str) or not version.strip():
            raise PrefillError("GET /version did not answer {\"version\": ...}: is this vLLM?")
        if len(version) > MAX_VERSION or not version.isprintable():
            raise PrefillError("GET /version answered %s, not a vLLM version: is this vLLM?"
                               % _said(repr(version), 60))
        return version

    def count_tokens(self, model: str, prompt: str) -> int:
        data = self.json("POST", "/tokenize", {"model": model, "prompt": prompt})
        count = data.get("count") if isinstance(data, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_PROMPT_TOKENS:
            raise PrefillError("POST /tokenize did not answer a token count: is this vLLM?")
        return count

    def build_prompt(self, model: str, tokens: int, max_rounds: int = 8) -> tuple[str, int]:
        """A prompt the engine counts as ``tokens`` tokens (or the nearest below), and its count."""
        if tokens < 16:
            raise PrefillError("prompt_tokens %d is too short to time a prefill; use at least 16" % tokens)
        words = max(1, tokens)
        best: tuple[int, int] | None = None
        for _ in range(max_rounds):
            count = self.count_tokens(model, _text(words))
            if count <= tokens and (best is None or count > best[1]):
                best = (words, count)
            if count == tokens:
                break
            words = max(1, words + (tokens - count) if abs(tokens - count) < 8
                        else int(words * tokens / max(count, 1)))
        if best is None or best[1] < tokens * 0.9:
            raise PrefillError("could not build a %d-token prompt (the tokenizer counted %s): check the model"
                               % (tokens, best[1] if best else "more"))
        return _text(best[0]), best[1]

    def settled_metrics(self, before: MetricsSnapshot) -> MetricsSnapshot:
        """The first scrape that counts one more finished prefill than ``before``."""
        deadline = self.clock() + METRICS_SETTLE_S
        while True:
            after = self.metrics()
            if (after.prefill_time_count is not None and before.prefill_time_count is not None
                    and after.prefill_time_count > before.prefill_time_count
                    and not after.running):
                return after
            if self.clock() >= deadline:
                return after
            time.sleep(METRICS_POLL_S)

    def sample(self, model: str, prompt: str, timeout: float | None = None
               ) -> tuple[Sample, MetricsSnapshot, MetricsSnapshot]:
        """One probe request: (sample, scrape before, scrape after)."""
        before = self.metrics()
        started = self.clock()
        data = self.json("POST", "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "cache_salt": secrets.token_hex(16)}, timeout=timeout)
        client_seconds = self.clock() - started
        after = self.settled_metrics(before)
        usage = data.get("usage") if isinstance(data, dict) else None
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(counted, bool) or not isinstance(counted, int) or not 0 < counted <= MAX_PROMPT_TOKENS:
            raise PrefillError("the completion's usage has no prompt_tokens: is this vLLM?")
        server = None
        if (before.prefill_time_sum is not None and after.prefill_time_sum is not None
                and after.prefill_time_count == (before.prefill_time_count or 0) + 1):
            server = after.prefill_time_sum - before.prefill_time_sum
        if server is None or server <= 0:
            raise NotAlone("the engine's prefill time did not move by exactly one request across the "
                               "probe (another request ran, or /metrics lacks "
                               "vllm:request_prefill_time_seconds): probe when the engine is quiet")
        return Sample(server, client_seconds, counted), before, after


    def timed_sample(self, model: str, prompt: str, timeout: float | None = None) -> Sample:
        """One probe request timed by the engine itself (``engine_prefill_seconds``): valid beside
        other requests, since its interval is its own. NoRequestMetrics when the answer carries no
        such time."""
        started = self.clock()
        data = self.json("POST", "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "cache_salt": secrets.token_hex(16)}, timeout=timeout)
        client_seconds = self.clock() - started
        usage = data.get("usage") if isinstance(data, dict) else None
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(counted, bool) or not isinstance(counted, int) or not 0 < counted <= MAX_PROMPT_TOKENS:
            raise PrefillError("the completion's usage has no prompt_tokens: is this vLLM?")
        server = engine_prefill_seconds(data)
        if server is None:
            raise NoRequestMetrics("the completion carries no metrics.time_to_first_token_ms: the engine runs "
                                   "without --enable-per-request-metrics (vllm_fleet_prefill_timed)")
        return Sample(server, client_seconds, counted)


def _said(text: str, limit: int = 200) -> str:
    """What the other end said, for a message: cut, with control characters escaped."""
    cut = text[:limit]
    if not cut.isprintable():
        cut = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return cut + ("..." if len(text) > limit else "")


def _text(words: int) -> str:
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(words))
