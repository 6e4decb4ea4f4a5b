"""The admin API (/admin/*): an aiohttp sub-application whose one
middleware checks the admin token before any admin handler runs."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from .admission import UnknownUpstream
from .auth import check_admin_token
from .body import BodyRefused, parse_json
from .errors import error_response

if TYPE_CHECKING:
    from .app import Gate

log = logging.getLogger("vllm_fleet_gate")

PREFIX = "/admin"
# Path under PREFIX: (method, the AdminApi handler).
ROUTES = {
    "/state": ("GET", "handle_state"),
    "/inflight": ("GET", "handle_inflight"),
    "/drain": ("POST", "handle_drain"),
    "/undrain": ("POST", "handle_undrain"),
    "/hold": ("POST", "handle_hold"),
    "/release": ("POST", "handle_release"),
}
# Each admin path's one method (a 405 names it).
ALLOWED = {PREFIX + path: method for path, (method, _) in ROUTES.items()}


class AdminApi:
    """The admin handlers over one gate's books."""

    def __init__(self, gate: Gate):
        self.gate = gate

    def app(self) -> web.Application:
        """The sub-application to mount at PREFIX."""
        app = web.Application(middlewares=[self._guard])
        for path, (method, handler) in ROUTES.items():
            app.router.add_route(method, path, getattr(self, handler))
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            # No admin route, or not with this method: answered, with no
            # token asked, as every path the gate does not serve (404/405).
            return await self.gate.handle_passthrough(request)
        denied = check_admin_token(request, self.gate._admin_token)
        if denied is not None:
            return denied
        return await handler(request)

    async def _body(self, request: web.Request) -> dict | web.Response:
        try:
            body = parse_json(await self.gate._read_body(request) or b"{}")
        except BodyRefused as exc:
            return error_response(exc.status, exc.message, exc.code, close=exc.close)
        if not isinstance(body, dict):
            return error_response(400, "The request body must be a JSON object.", "invalid_json")
        return body

    async def _upstream(self, request: web.Request) -> str | web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        name = body.get("upstream")
        engines = self.gate.admission.engines
        if not isinstance(name, str) or not name:
            return error_response(400, 'upstream is required: {"upstream": "<name>"}', "upstream_required")
        if name not in engines:
            return error_response(404, UnknownUpstream(name, engines).message, "unknown_upstream")
        return name

    async def handle_state(self, request: web.Request) -> web.Response:
        return web.json_response(self.gate.state())

    async def handle_inflight(self, request: web.Request) -> web.Response:
        adm = self.gate.admission
        return web.json_response({
            "inflight": adm.inflight,
            "queued": adm.queue_depth,
            "upstreams": {e.name: e.inflight for e in adm.engines.values()},
        })

    async def handle_drain(self, request: web.Request) -> web.Response:
        return await self._set_drained(request, True)

    async def handle_undrain(self, request: web.Request) -> web.Response:
        return await self._set_drained(request, False)

    async def _set_drained(self, request: web.Request, drained: bool) -> web.Response:
        name = await self._upstream(request)
        if isinstance(name, web.Response):
            return name
        if drained:
            self.gate.admission.drain(name)
        else:
            self.gate._wake(self.gate.admission.undrain(name))
        log.info("upstream %s %s by the admin API", name, "drained" if drained else "undrained")
        engine = self.gate.admission.engines[name]
        return web.json_response({"upstream": name, "drained": drained, "inflight": engine.inflight})

    async def handle_hold(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        seconds = body.get("seconds")
        limit = self.gate.config.max_hold_s
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= limit:
            return error_response(
                400, f'seconds must be a number greater than 0 and at most {limit:g}: {{"seconds": N}}', "invalid_hold"
            )
        self.gate.hold(seconds)
        log.info("hold for %g s by the admin API", seconds)
        return web.json_response({"held": True, "hold_remaining_s": round(self.gate.admission.hold_remaining_s(), 3)})

    async def handle_release(self, request: web.Request) -> web.Response:
        self.gate.release_hold()
        log.info("hold released by the admin API")
        return web.json_response({"held": False, "queued": self.gate.admission.queue_depth})
