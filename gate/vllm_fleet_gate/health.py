"""Engine health: each engine's /health probed at start and every
interval, and an engine marked down when a connection to it fails."""
from __future__ import annotations

import asyncio
import logging
import os
import socket

import aiohttp

from .admission import DOWN, UNHEALTHY, UNRESPONSIVE

log = logging.getLogger("vllm_fleet_gate")


def connect_reason(exc: aiohttp.ClientConnectorError) -> str:
    """``connection refused``, ``name or service not known``: the OS's words
    (aiohttp's own strerror is "Connect call failed (...)")."""
    err = exc.os_error
    if err.errno and err.errno > 0 and not isinstance(err, socket.gaierror):
        text = os.strerror(err.errno)
    else:
        text = err.strerror or str(err) or type(err).__name__
    return text[:1].lower() + text[1:]


class EngineHealth:
    """The Gate's engine readiness (a part of ``app.Gate``)."""

    async def poll_health(self) -> None:
        """Probe every engine's /health once (also runs every interval_s)."""
        await asyncio.gather(*(self._probe(name) for name in self.bases))

    async def _probe(self, name: str) -> None:
        # While vLLM loads its port refuses connections; a dead engine
        # answers 503; a wedged one may not answer. All mean: send it
        # nothing new, and say which it is.
        url = self.bases[name]
        timeout = aiohttp.ClientTimeout(total=self.config.health_timeout_s)
        health, detail = UNHEALTHY, ""
        try:
            async with self.session.get(url + "/health", timeout=timeout) as resp:
                await resp.read()
                ready = resp.status == 200
                detail = f"/health answered {resp.status} at {url}"
        except aiohttp.ClientConnectorError as exc:
            ready, health, detail = False, DOWN, f"{connect_reason(exc)} at {url}"
        except TimeoutError:
            ready, health = False, UNRESPONSIVE
            detail = f"/health did not answer within {self.config.health_timeout_s:g} s at {url}"
        except (aiohttp.ClientError, OSError) as exc:
            ready, health, detail = False, DOWN, f"{type(exc).__name__} at {url}"
        self._set_ready(name, ready, health, detail)

    def _set_ready(self, name: str, ready: bool, health: str = "", detail: str = "") -> None:
        engine = self.admission.engines[name]
        was = (engine.ready, engine.health)
        self._wake(self.admission.set_ready(name, ready, health, detail))
        if (engine.ready, engine.health) != was:
            if ready:
                log.info("upstream %s is ready", name)
            else:
                log.warning("upstream %s", engine.describe())

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.poll_health()
            except Exception:  # pragma: no cover - keep polling whatever happens
                log.exception("health poll failed")
