"""The Gate's side of the admission books: waking queued requests as
tickets are admitted or failed, the hold's timer, the state /health and
/admin/state report, and shutdown (stop admitting, wait until idle)."""
from __future__ import annotations

import asyncio
import logging

from .admission import ADMITTED, Ticket

log = logging.getLogger("vllm_fleet_gate")


class Books:
    """A part of ``app.Gate``: uses its admission, metrics, config and
    waiters."""

    def _wake(self, tickets: list[Ticket]) -> None:
        for ticket in tickets:
            if ticket.state == ADMITTED:
                self._count_admitted(ticket)
            fut = self._waiters.get(ticket.id)
            if fut is not None and not fut.done():
                fut.set_result(None)
        self._update_idle()

    def _count_admitted(self, ticket: Ticket) -> None:
        self.metrics.admitted_by[ticket.engine].inc()
        self.metrics.queue_seconds.observe(ticket.wait_s)

    def _finish(self, ticket: Ticket) -> None:
        self._wake(self.admission.release(ticket))

    def hold(self, seconds: float) -> None:
        """Hold admissions for ``seconds``; a new hold replaces the last."""
        self.admission.hold(seconds)
        self._cancel_hold_timer()
        self._hold_timer = asyncio.get_running_loop().call_later(seconds, self._hold_expired)

    def release_hold(self) -> None:
        self._cancel_hold_timer()
        self._wake(self.admission.release_hold())

    def _cancel_hold_timer(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None

    def _hold_expired(self) -> None:
        self._hold_timer = None
        log.info("hold expired")
        self._wake(self.admission.release_hold())

    def state(self) -> dict:
        snap = self.admission.snapshot()
        for name, upstream in snap["upstreams"].items():
            upstream["url"] = self.bases[name]
        snap["queue"]["timeout_s"] = self.config.queue_timeout_s
        # The rolling restart sizes a hold against both limits.
        snap["max_hold_s"] = self.config.max_hold_s
        return {"state": self._state_word(), "shutting_down": self.shutting_down, **snap}

    def _state_word(self) -> str:
        """draining and unavailable are the states /health answers 503 in."""
        if self.shutting_down:
            return "draining"
        if not self.admission.serving():
            return "unavailable"
        return "holding" if self.admission.held else "ok"

    def begin_shutdown(self) -> None:
        """Stop admitting: new requests and queued ones get 503, admitted
        ones carry on. The caller then waits with ``wait_idle``."""
        if self.shutting_down:
            return
        self.shutting_down = True
        failed = self.admission.close()
        log.info(
            "shutting down: %d in flight may finish, %d queued get 503",
            self.admission.inflight, len(failed),
        )
        self._wake(failed)

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is in flight or queued; False on timeout."""
        self._update_idle()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _update_idle(self) -> None:
        if self.admission.inflight == 0 and self.admission.queue_depth == 0 and self._passing == 0:
            self._idle.set()
        else:
            self._idle.clear()
