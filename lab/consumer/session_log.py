"""The session client's log: one JSON line per request, appended, safe across threads.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

import json
import os
import sys
import threading
from datetime import UTC, datetime

OUTCOMES = ("ok", "fallback", "error")
ERROR_MAX_CHARS = 200


def short_error(exc: BaseException) -> str:
    """An exception's text, cut to fit a log line."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[:ERROR_MAX_CHARS]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class JsonlLog:
    """Append-only JSON lines, safe across threads.

    The file is reopened when its path no longer names the open file, so
    logrotate, or a test that deletes the log between runs, just works.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = None
        self._ident: tuple[int, int] | None = None
        self.closed = False
        with self._lock:
            self._file()

    def _file(self):
        if self.path == "-":
            return sys.stdout
        try:
            st = os.stat(self.path)
            ident = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            ident = None
        if self._fh is None or ident is None or ident != self._ident:
            if self._fh is not None:
                self._fh.close()
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._fh = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (held open)
            st = os.fstat(self._fh.fileno())
            self._ident = (st.st_dev, st.st_ino)
        return self._fh

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            if self.closed:
                return
            fh = self._file()
            fh.write(line)
            fh.flush()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._fh is not None:
                self._fh.close()
                self._fh = None
