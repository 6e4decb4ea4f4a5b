"""Counting a generation request's prompts: the engine's /tokenize in
tokenize mode, else (or when that fails) the estimate by characters."""
from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from .admission import Demand
from .generation import Plan, estimate_tokens

log = logging.getLogger("vllm_fleet_gate")


class Counting:
    """A part of ``app.Gate``: uses its config, session and metrics."""

    async def _demand(self, plan: Plan, model: str | None) -> Demand:
        """Count each prompt: the engine's /tokenize in tokenize mode,
        else (or when it fails) the estimate."""
        cpt = self.config.chars_per_token
        found: list[int | None] = []
        if self._tokenize_mode:
            asks = [p.tokenize for p in plan.prompts if p.tokenize is not None]
            if model is not None:
                asks = [{"model": model, **ask} for ask in asks]
            if len(asks) == 1:
                found = [await self._tokenize(asks[0])]
            elif asks:
                found = list(await asyncio.gather(*(self._tokenize(ask) for ask in asks)))
        answers = iter(found)
        counts = []
        for p in plan.prompts:
            n = next(answers, None) if p.tokenize is not None else None
            if n is None:
                n = estimate_tokens(p.chars, cpt)
            if p.extra_chars:
                n += estimate_tokens(p.extra_chars, cpt)
            counts.append(p.tokens + n)
        return Demand(tuple(counts), plan.max_tokens, plan.sequences)

    async def _tokenize(self, req: dict) -> int | None:
        """The engine's own count (POST /tokenize), or None to estimate."""
        name = self._pick_any_ready()
        if name is None:
            return self._tokenize_fallback("no_ready_upstream")
        timeout = aiohttp.ClientTimeout(total=self.config.tokenize_timeout_s)
        try:
            async with self.session.post(
                self.bases[name] + "/tokenize", json=req, headers=self._upstream_auth, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    await resp.read()
                    return self._tokenize_fallback("error", f"{name} answered HTTP {resp.status}")
                data = await resp.json(content_type=None)
        except TimeoutError:
            return self._tokenize_fallback("timeout", f"{name} took over {self.config.tokenize_timeout_s:g} s")
        except (aiohttp.ClientError, ValueError) as exc:
            return self._tokenize_fallback("error", f"{name}: {type(exc).__name__}")
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return self._tokenize_fallback("error", f"{name} returned no count")
        return count

    def _tokenize_fallback(self, reason: str, detail: str = "") -> None:
        self.metrics.tokenize_fallbacks.labels(reason).inc()
        now = time.monotonic()
        if now - self._last_fallback_log >= 60:  # at most one line a minute
            self._last_fallback_log = now
            log.warning("tokenize failed (%s%s); counting by estimate", reason, f": {detail}" if detail else "")
        return None
