"""KV-pool admission: the gate's accounting and its FIFO wait queue.

Everything here is pure and synchronous: no I/O, no asyncio, an injectable
clock. The gate (``books.py``, ``proxy.py``) turns the tickets handed out
here into waiting requests; this module decides who may go where, and keeps
the books. How a request's body is read into a Demand is ``generation.py``.

The rules:

* A request reserves ``prompt`` tokens, plus its completion budget when
  ``count_max_tokens`` is on (``max_tokens`` times the number of sequences;
  with no ``max_tokens`` the budget is what vLLM would allow, up to the
  engine's ``max_model_len``).
* It is admitted to an engine only when the engine is ready, not drained,
  and ``reserved + this <= kv_cache_tokens``. Among engines that fit, the
  one with the most room left wins; then the fewest in flight; then config
  order.
* Otherwise it waits in one FIFO queue. The queue is strict: nothing is
  admitted past a waiting head, even a small request that would fit. This
  keeps a long-context session from being starved by a stream of short
  ones, at the cost of some idle pool while the head waits.
* A request that exceeds the model's context, or that no engine's pool
  could ever hold, is rejected before it is queued.

Which routes are admitted, and how each one's body is read into prompts
and a completion budget, is the table ``GENERATION_ROUTES`` in
``generation.py``.
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

QUEUED = "queued"
ADMITTED = "admitted"
DONE = "done"
CANCELLED = "cancelled"
FAILED = "failed"


class Rejected(Exception):
    """The request cannot be admitted or queued.

    ``reason`` is the metric label: too_long, never_fits, queue_full or
    shutting_down.
    """

    def __init__(self, reason: str, message: str, tokens: int = 0):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.tokens = tokens


class BadRequest(Exception):
    """The request body is not a valid completion request."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(message)
        self.message = message
        self.code = code


class UnknownUpstream(LookupError):
    def __init__(self, name: str, known: Iterable[str]):
        super().__init__(f"unknown upstream {name!r} (known: {', '.join(known)})")
        self.message = str(self.args[0])


@dataclass(frozen=True)
class Demand:
    """What one request asks of an engine's KV pool."""

    prompt_tokens: tuple[int, ...]  # one per prompt; a batch has several
    max_tokens: int | None = None  # None: up to the model's limit
    sequences: int = 1  # n / best_of

    @property
    def longest_prompt(self) -> int:
        return max(self.prompt_tokens, default=0)


# An engine's health, as its last /health probe (or a failed request) found it.
READY = "ready"
DOWN = "down"  # cannot connect: refused, unreachable, no such host
UNRESPONSIVE = "unresponsive"  # connects, but /health did not answer in time
UNHEALTHY = "unhealthy"  # /health answered, with a status other than 200
UNKNOWN = "unknown"  # not probed yet
NOT_READY = "not ready"  # marked not ready without a reason


@dataclass
class Engine:
    name: str
    kv_cache_tokens: int
    max_model_len: int
    ready: bool = False
    drained: bool = False
    reserved: int = 0
    inflight: int = 0
    health: str = UNKNOWN
    detail: str = ""  # why it is not ready, for people: "connection refused at http://..."

    @property
    def state(self) -> str:
        """ready, drained, or the reason it is not ready."""
        if self.ready:
            return "drained" if self.drained else READY
        return self.health

    def describe(self) -> str:
        """``e1 is down (connection refused at http://...)``."""
        text = f"{self.name} is {self.state}"
        if not self.ready and self.detail:
            text += f" ({self.detail})"
        if not self.ready and self.drained:
            text += " and drained"
        return text


@dataclass(eq=False)
class Ticket:
    """One request's place: queued, then admitted to an engine, then done."""

    id: int
    demand: Demand
    created: float
    state: str = QUEUED
    engine: str | None = None
    tokens: int = 0  # reserved on ``engine`` while admitted
    admitted_at: float | None = None

    @property
    def wait_s(self) -> float:
        return 0.0 if self.admitted_at is None else self.admitted_at - self.created


class Admission:
    """The books: per-engine reservations, the wait queue, hold and drain."""

    def __init__(
        self,
        engines: Iterable[tuple[str, int, int]],
        *,
        max_queue_depth: int,
        count_max_tokens: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.engines: dict[str, Engine] = {
            name: Engine(name, kv, mml) for name, kv, mml in engines
        }
        if not self.engines:
            raise ValueError("at least one engine is required")
        self.max_queue_depth = max_queue_depth
        self.count_max_tokens = count_max_tokens
        self.clock = clock
        self.closed = False
        # Totals kept as counters: they are read on every request.
        self._reserved = 0
        self._inflight = 0
        self._max_model_len = max(e.max_model_len for e in self.engines.values())
        self._max_pool = max(e.kv_cache_tokens for e in self.engines.values())
        self._queue: deque[Ticket] = deque()
        self._ids = itertools.count(1)
        self._held_until: float | None = None

    # -- the numbers ---------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def reserved_tokens(self) -> int:
        return self._reserved

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def held(self) -> bool:
        if self._held_until is None:
            return False
        if self.clock() >= self._held_until:
            self._held_until = None
            return False
        return True

    def hold_remaining_s(self) -> float:
        return max(0.0, self._held_until - self.clock()) if self.held else 0.0

    def queued(self) -> list[Ticket]:
        return list(self._queue)

    # -- cost and limits -----------------------------------------------
    def cost(self, demand: Demand, engine: Engine) -> int | None:
        """KV tokens ``demand`` reserves on ``engine``; None when it exceeds
        that engine's max_model_len."""
        mml = engine.max_model_len
        total = 0
        for prompt in demand.prompt_tokens:
            if prompt > mml:
                return None
            if demand.max_tokens is not None and prompt + demand.max_tokens > mml:
                return None
            total += prompt
            if self.count_max_tokens:
                budget = demand.max_tokens if demand.max_tokens is not None else mml - prompt
                total += budget * demand.sequences
        return total

    def tokens_for(self, demand: Demand) -> int:
        """The smallest reservation ``demand`` would make on any engine (for logs)."""
        costs = [c for c in (self.cost(demand, e) for e in self.engines.values()) if c is not None]
        return min(costs, default=0)

    def check(self, demand: Demand) -> None:
        """Raise Rejected when ``demand`` could never be admitted."""
        mml = self._max_model_len
        prompt = demand.longest_prompt
        if prompt > mml:
            raise Rejected(
                "too_long",
                f"This model's maximum context length is {mml} tokens. However, your prompt is "
                f"{prompt} tokens. Please reduce the length of the prompt.",
                tokens=prompt,
            )
        if demand.max_tokens is not None and prompt + demand.max_tokens > mml:
            raise Rejected(
                "too_long",
                f"This model's maximum context length is {mml} tokens. However, you requested "
                f"{prompt + demand.max_tokens} tokens ({prompt} in the prompt, {demand.max_tokens} "
                f"for the completion). Please reduce the length of the prompt or max_tokens.",
                tokens=prompt + demand.max_tokens,
            )
        costs = [(self.cost(demand, e), e) for e in self.engines.values()]
        if any(c is not None and c <= e.kv_cache_tokens for c, e in costs):
            return
        need = min(c for c, _ in costs if c is not None)
        pool = self._max_pool
        raise Rejected(
            "never_fits",
            f"This request needs {need} KV-cache tokens, more than the largest engine's KV "
            f"cache pool ({pool} tokens), so it could never be admitted. Please reduce the "
            f"prompt or max_tokens.",
            tokens=need,
        )

    # -- the lifecycle of a request ------------------------------------
    def submit(self, demand: Demand) -> Ticket:
        """Admit ``demand`` now or queue it. Raises Rejected."""
        if self.closed:
            raise Rejected("shutting_down", "The gate is shutting down; retry shortly.")
        self.check(demand)
        ticket = Ticket(next(self._ids), demand, self.clock())
        if not self._queue and not self.held:
            picked = self._pick(demand)
            if picked is not None:
                self._admit(ticket, *picked, at=ticket.created)  # waited 0, exactly
                return ticket
        if len(self._queue) >= self.max_queue_depth:
            raise Rejected(
                "queue_full",
                f"The admission queue is full ({len(self._queue)} requests waiting); retry later.",
                tokens=self.tokens_for(demand),
            )
        self._queue.append(ticket)
        return ticket

    def release(self, ticket: Ticket) -> list[Ticket]:
        """End ``ticket`` in any state: a queued one leaves the queue, an
        admitted one frees its reservation. Idempotent. Returns the tickets
        this admitted from the queue."""
        if ticket.state == QUEUED:
            try:
                self._queue.remove(ticket)
            except ValueError:
                pass
            ticket.state = CANCELLED
            return self._pump()
        if ticket.state == ADMITTED:
            engine = self.engines[ticket.engine]
            engine.reserved -= ticket.tokens
            engine.inflight -= 1
            self._reserved -= ticket.tokens
            self._inflight -= 1
            ticket.state = DONE
            return self._pump()
        return []

    def close(self) -> list[Ticket]:
        """Stop admitting (shutdown). Returns the queued tickets, now failed."""
        self.closed = True
        failed = list(self._queue)
        self._queue.clear()
        for ticket in failed:
            ticket.state = FAILED
        return failed

    # -- engine state and operator controls -----------------------------
    def engine(self, name: str) -> Engine:
        try:
            return self.engines[name]
        except KeyError:
            raise UnknownUpstream(name, self.engines) from None

    def set_ready(self, name: str, ready: bool, health: str = "", detail: str = "") -> list[Ticket]:
        """Record an engine's health: ``health`` says why it is not ready
        (DOWN, UNRESPONSIVE, UNHEALTHY) and ``detail`` says it for people."""
        engine = self.engine(name)
        engine.ready = ready
        engine.health = READY if ready else (health or NOT_READY)
        engine.detail = "" if ready else detail
        return self._pump()

    def serving(self) -> bool:
        """Whether any engine could take a request now (ready, not drained)."""
        return any(e.ready and not e.drained for e in self.engines.values())

    def none_ready(self) -> str | None:
        """None when an engine could take a request; otherwise why not, by
        engine: ``no engine is ready: e1 is down (...); e2 is drained``."""
        if self.serving():
            return None
        return "no engine is ready: " + "; ".join(e.describe() for e in self.engines.values())

    def not_ready(self) -> list[str]:
        """The engines that cannot take requests, described."""
        return [e.describe() for e in self.engines.values() if not e.ready or e.drained]

    def drain(self, name: str) -> None:
        self.engine(name).drained = True

    def undrain(self, name: str) -> list[Ticket]:
        self.engine(name).drained = False
        return self._pump()

    def hold(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("hold seconds must be positive")
        self._held_until = self.clock() + seconds

    def release_hold(self) -> list[Ticket]:
        self._held_until = None
        return self._pump()

    def pump(self) -> list[Ticket]:
        """Admit what now fits (e.g. when a hold runs out)."""
        return self._pump()

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        oldest = self._queue[0].created if self._queue else None
        return {
            "held": self.held,
            "hold_remaining_s": round(self.hold_remaining_s(), 3),
            "inflight": self.inflight,
            "queued": self.queue_depth,
            "reserved_tokens": self.reserved_tokens,
            "queue": {
                "depth": self.queue_depth,
                "max_depth": self.max_queue_depth,
                "oldest_wait_s": round(now - oldest, 3) if oldest is not None else 0.0,
                "head_tokens": self.tokens_for(self._queue[0].demand) if self._queue else 0,
            },
            "upstreams": {
                e.name: {
                    "ready": e.ready,
                    "drained": e.drained,
                    "state": e.state,
                    "detail": e.detail,
                    "inflight": e.inflight,
                    "reserved_tokens": e.reserved,
                    "kv_cache_tokens": e.kv_cache_tokens,
                    "max_model_len": e.max_model_len,
                }
                for e in self.engines.values()
            },
        }

    # -- internals -------------------------------------------------------
    def _pick(self, demand: Demand) -> tuple[Engine, int] | None:
        best: tuple[Engine, int] | None = None
        best_key: tuple[int, int] | None = None
        for engine in self.engines.values():
            if not engine.ready or engine.drained:
                continue
            cost = self.cost(demand, engine)
            if cost is None or engine.reserved + cost > engine.kv_cache_tokens:
                continue
            key = (engine.kv_cache_tokens - engine.reserved - cost, -engine.inflight)
            if best_key is None or key > best_key:
                best, best_key = (engine, cost), key
        return best

    def _admit(self, ticket: Ticket, engine: Engine, cost: int, at: float | None = None) -> None:
        engine.reserved += cost
        engine.inflight += 1
        self._reserved += cost
        self._inflight += 1
        ticket.state = ADMITTED
        ticket.engine = engine.name
        ticket.tokens = cost
        ticket.admitted_at = self.clock() if at is None else at

    def _pump(self) -> list[Ticket]:
        admitted: list[Ticket] = []
        if self.closed or self.held:
            return admitted
        while self._queue:
            picked = self._pick(self._queue[0].demand)
            if picked is None:
                break  # strict FIFO: nothing overtakes the head
            ticket = self._queue.popleft()
            self._admit(ticket, *picked)
            admitted.append(ticket)
        return admitted
