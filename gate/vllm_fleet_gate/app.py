"""The gate's HTTP side: an OpenAI-compatible reverse proxy in front of vLLM
engines, with admission by KV pool (``admission.py``). This module builds
the aiohttp application and wires the Gate's parts: the proxied routes
(``proxy.py``), counting (``counting.py``), forwarding (``forwarding.py``),
body reading (``body.py``), engine health (``health.py``), the books
(``books.py``) and the admin sub-application (``admin.py``); the keys are
checked in ``auth.py``, the access log is ``accesslog.py`` and the error
body ``errors.py``.

The generation routes (``GENERATION_ROUTES``) are admitted; every other
path and method is passed through to a ready engine as it is, so a client
sees the engine's API. The gate's own routes are /health, /metrics and
/admin/*. Whatever the gate itself refuses is answered in OpenAI's error
shape.

aiohttp serves and aiohttp forwards, through one shared ClientSession whose
connector limit sits above the expected concurrency (docs/gate.md explains
why: an httpx pool collapsed at 64 concurrent requests on this design).
Streamed responses are relayed chunk by chunk as they arrive.

Run it with a runner that has ``handler_cancellation=True`` (``__main__``
does; aiohttp's test server does too): a client that goes away cancels its
handler, and the handler's ``finally`` takes it out of the queue or frees its
reservation and closes the engine connection, so vLLM aborts the request.
``Gate.server_options()`` holds the rest of the runner's options: the idle
timeout that also bounds trickled headers, and the server logger that logs
a client's malformed HTTP as one WARNING line rather than an ERROR with a
traceback.

The gate's own HTTP surface is described in ``openapi.json`` beside this
module (served at GET /openapi.json); a test holds it to the route table.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from importlib import resources

import aiohttp
from aiohttp import web

from .admin import PREFIX as ADMIN_PREFIX
from .admin import AdminApi
from .admission import Admission
from .body import BodyReader, ServerLog
from .books import Books
from .config import Config
from .counting import Counting
from .forwarding import Forwarding
from .generation import GENERATION_ROUTES
from .health import EngineHealth
from .metrics import CONTENT_TYPE, Metrics
from .proxy import Proxy

# The spec of the gate's own HTTP surface, a data file of the package.
SPEC_FILE = "openapi.json"


def spec_bytes() -> bytes:
    """The gate's OpenAPI spec, as the package holds it."""
    return resources.files(__package__).joinpath(SPEC_FILE).read_bytes()


class Gate(Proxy, Counting, Forwarding, BodyReader, EngineHealth, Books):
    """One gate: its books, its metrics, its engine sessions and handlers.
    Each concern's methods live in the part it inherits."""

    def __init__(self, config: Config, *, clock=time.monotonic, access_sink: Callable[[str], None] | None = None):
        """``access_sink``: called with each request's log line instead of
        logging it through the ``vllm_fleet_gate.access`` logger (``__main__``
        hands it straight to the batched log handler)."""
        self.config = config
        self._access_sink = access_sink
        self.admission = Admission(
            ((u.name, u.kv_cache_tokens, u.max_model_len) for u in config.upstreams),
            max_queue_depth=config.queue_max_depth,
            count_max_tokens=config.count_max_tokens,
            clock=clock,
        )
        self.bases = {u.name: u.url for u in config.upstreams}
        self.shutting_down = False
        self.metrics = Metrics(self.admission, lambda: self.shutting_down)
        self.session: aiohttp.ClientSession | None = None
        self._clock = clock
        self._waiters: dict[int, asyncio.Future] = {}
        self._health_task: asyncio.Task | None = None
        self._hold_timer: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._api_keys = [k.encode() for k in config.api_keys]
        self._admin_token = config.admin_token.encode()
        self._upstream_auth = (
            {"Authorization": f"Bearer {config.upstream_api_key}"} if config.upstream_api_key else {}
        )
        self._last_fallback_log = float("-inf")
        self._tokenize_mode = config.token_count_mode == "tokenize"
        self._passing = 0  # passthrough requests in flight (for a graceful stop)
        self._spec = spec_bytes()
        self._last_malformed_log = float("-inf")
        self._malformed_unlogged = 0

    # -- wiring -----------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes)
        add = app.router
        for path, reader in GENERATION_ROUTES.items():
            add.add_post(path, self._admitted(reader))
        add.add_get("/health", self.handle_health)
        add.add_get("/metrics", self.handle_metrics)
        add.add_get("/openapi.json", self.handle_openapi)
        app.add_subapp(ADMIN_PREFIX, AdminApi(self).app())  # its middleware checks the admin token
        # Last: everything else, any method, goes to an engine as it is.
        add.add_route("*", r"/{path:[\s\S]*}", self.handle_passthrough)  # a %0a in a path too
        app.cleanup_ctx.append(self._lifecycle)
        return app

    def server_options(self) -> dict:
        """The aiohttp runner's options for this gate (besides
        ``handler_cancellation=True``, which every runner of the gate needs):
        the idle timeout, which also closes a connection whose headers
        trickle in, and the server logger."""
        return {
            "access_log": None,
            "keepalive_timeout": self.config.client_idle_timeout_s,
            "logger": ServerLog(self),
        }

    async def _lifecycle(self, app: web.Application):
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        cfg = self.config
        # Idle engine connections are dropped before vLLM's keep-alive (5 s)
        # would: aiohttp does not retry a POST on a connection closed under it.
        connector = aiohttp.TCPConnector(
            limit=cfg.upstream_max_connections, limit_per_host=0, keepalive_timeout=cfg.upstream_keepalive_s
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            # No total limit: a 1M-token prefill or a long stream is normal.
            # sock_read bounds the silence between two chunks.
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=cfg.upstream_connect_timeout_s,
                sock_read=cfg.upstream_read_timeout_s,
            ),
            auto_decompress=False,
        )
        await self.poll_health()
        self._health_task = asyncio.create_task(self._health_loop(), name="vllm-fleet-gate-health")

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        self._cancel_hold_timer()
        if not self.admission.closed:
            self._wake(self.admission.close())
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- the gate's own endpoints ------------------------------------------------
    async def handle_health(self, request: web.Request) -> web.Response:
        """200 while an engine could take a request; the body says the same
        (state ok or holding), and otherwise why not (draining, unavailable)."""
        state = self._state_word()
        body = {"state": state, "held": self.admission.held}
        why = self.admission.none_ready()
        if why is not None:
            body["message"] = why
        body["upstreams"] = {
            e.name: {"ready": e.ready, "drained": e.drained, "state": e.state, "detail": e.detail}
            for e in self.admission.engines.values()
        }
        return web.json_response(body, status=503 if state in ("draining", "unavailable") else 200)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def handle_openapi(self, request: web.Request) -> web.Response:
        """The spec of the gate's own HTTP surface (no key needed, as /health)."""
        return web.Response(body=self._spec, content_type="application/json")
