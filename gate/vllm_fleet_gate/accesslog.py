"""The access log: one line per proxied request (never the prompt or a
key), to the ``vllm_fleet_gate.access`` logger or to a sink."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

access_log = logging.getLogger("vllm_fleet_gate.access")


@dataclass
class Exchange:
    """What the access log line says about one request (never the prompt
    or a key)."""

    method: str
    path: str
    status: int = 0
    tokens: int | None = None
    queue_ms: float | None = None
    upstream: str = "-"
    stream: bool = False
    reason: str = ""


def escaped(text: str) -> str:
    """``text`` with every space and unprintable character escaped, for a
    log line: a decoded path can hold a newline, which would forge a line."""
    out = []
    for c in text:
        out.append("%20" if c == " " else c if c.isprintable() else ascii(c)[1:-1])
    return "".join(out)


def log_exchange(ex: Exchange, started: float, sink: Callable[[str], None] | None) -> None:
    """Log ``ex``'s line; ``started``: its perf_counter at arrival; ``sink``:
    where the line goes instead of the logger (None: the logger)."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    path = ex.path
    if not path.isprintable() or " " in path:
        path = escaped(path)  # a client's %0a must not start a line of its own
    line = (
        f"{ex.method} {path} {ex.status}"
        f" tokens={'-' if ex.tokens is None else ex.tokens}"
        f" queue_ms={'-' if ex.queue_ms is None else f'{ex.queue_ms:.1f}'}"
        f" upstream={ex.upstream} total_ms={(time.perf_counter() - started) * 1000:.1f}"
        f" stream={'true' if ex.stream else 'false'}{f' reason={ex.reason}' if ex.reason else ''}"
    )
    if sink is not None:
        sink(line)
    else:
        access_log.info(line)
