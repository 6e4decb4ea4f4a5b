"""A log handler that writes once per event-loop turn, not once per record.

The gate logs one line per request. Written one ``write()`` each, those
lines cost more CPU than the rest of the gate's own work together (see
docs/benchmarks.md): at 64 concurrent requests many of them finish in the
same turn of the event loop, so this handler keeps the turn's lines and
writes them with one call scheduled for the end of that turn.

The access log goes further: ``Gate(access_sink=...)`` hands each request's
finished line straight to ``write_line``, skipping the logging module's
record, which cost as much again.

What that trades: a line waits for the loop to come round, which is
microseconds to a millisecond; on SIGKILL the lines of that one turn are
lost. ``flush()`` and ``close()`` (``logging.shutdown`` at exit) write
whatever is pending, and so does a record logged with no loop running.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TextIO


class LoopBatchedHandler(logging.StreamHandler):
    """A ``StreamHandler`` that batches the lines of one event-loop turn."""

    def __init__(self, stream: TextIO | None = None):
        super().__init__(stream)
        self._pending: list[str] = []
        self._last: logging.LogRecord | None = None
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(record)
            return
        self._last = record
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Queue one finished line (ending in a newline) for this turn's
        write: the access log's way in, with no LogRecord per request."""
        self._pending.append(line)
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_pending()
            return
        self._scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        self.acquire()
        try:
            self._scheduled = False
            self._write_pending()
        finally:
            self.release()

    def close(self) -> None:
        self.flush()
        super().close()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        lines, self._pending = self._pending, []
        try:
            self.stream.write("".join(lines))
            self.stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(self._last or logging.makeLogRecord({"msg": "(a batched log line)"}))
