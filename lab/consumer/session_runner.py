"""The session client's sessions: N conversations in threads, each request logged.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

import argparse
import os
import threading
import time

from session_conversation import Conversation
from session_endpoint import EndpointError, public_url, read_endpoint
from session_http import RequestFailed, SocketTracker, post_chat
from session_log import ERROR_MAX_CHARS, OUTCOMES, JsonlLog, now_iso

# After SIGTERM, how long to wait for sessions stuck in connect().
STOP_GRACE_S = 2.0


class Client:
    """N sessions in threads, bounded by a duration, a request count or a stop."""

    def __init__(self, opts: argparse.Namespace, log: JsonlLog, stop: threading.Event | None = None) -> None:
        self.opts = opts
        self.log = log
        self.stop = stop or threading.Event()
        self.tracker = SocketTracker()
        self.counts = {outcome: 0 for outcome in OUTCOMES}
        self._lock = threading.Lock()
        self._started = 0
        self._seed = f"{os.getpid()}-{time.time_ns()}"
        self._deadline = time.monotonic() + opts.duration if opts.duration is not None else None
        self.budget = opts.context_tokens - opts.max_tokens

    def drain(self) -> None:
        """Start no new request; those in flight finish and are logged."""
        self._deadline = time.monotonic()

    def abort(self) -> None:
        """Stop now: no new turns, and requests in flight are cut and not logged."""
        self.stop.set()
        self.tracker.abort()

    def _claim(self) -> bool:
        """Take the next request slot, if the bounds leave one."""
        if self.stop.is_set():
            return False
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return False
        with self._lock:
            if self.opts.max_requests is not None and self._started >= self.opts.max_requests:
                return False
            self._started += 1
            return True

    def _pause(self) -> None:
        wait = self.opts.think_ms / 1000.0
        if self._deadline is not None:
            wait = min(wait, max(0.0, self._deadline - time.monotonic()))
        if wait > 0:
            self.stop.wait(wait)

    def run(self) -> dict[str, int]:
        threads = [threading.Thread(target=self._session, args=(n,), name=f"session-{n}", daemon=True)
                   for n in range(1, self.opts.sessions + 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            # Poll so that a signal is handled promptly in the main thread.
            while thread.is_alive() and not self.stop.is_set():
                thread.join(0.2)
        if self.stop.is_set():
            grace = time.monotonic() + STOP_GRACE_S
            for thread in threads:
                thread.join(max(0.0, grace - time.monotonic()))
        return dict(self.counts)

    def _session(self, session: int) -> None:
        conv = Conversation(session, self.opts.prompt_tokens, self._seed)
        turn = 0
        while self._claim():
            turn += 1
            self._turn(conv, session, turn)
            self._pause()

    def _turn(self, conv: Conversation, session: int, turn: int) -> None:
        # ts is taken before the endpoint file is read: every request stamped
        # after a cutover's write saw the new file.
        ts = now_iso()
        start = time.monotonic()
        conv.ask(turn)
        body: dict = {"messages": conv.request_messages(self.budget), "max_tokens": self.opts.max_tokens}
        if self.opts.stream:
            body["stream"] = True
        record: dict = {"ts": ts, "session": session, "turn": turn, "mode": None, "base_url": None}
        failure: RequestFailed
        try:
            endpoint = read_endpoint(self.opts.endpoint_file)
        except EndpointError as exc:
            failure = RequestFailed(str(exc))
        else:
            record["mode"] = endpoint.mode
            record["base_url"] = public_url(endpoint.base_url)
            model = endpoint.model or self.opts.model
            if model:
                body["model"] = model
            try:
                reply = post_chat(endpoint.base_url, body, timeout=self.opts.timeout,
                                  api_key=endpoint.api_key, tracker=self.tracker)
            except RequestFailed as exc:
                failure = exc
            else:
                conv.answer(reply.text)
                self._log(record, "ok", reply.status, start, None)
                return
        if self.stop.is_set():
            return  # cut by a stop: not the endpoint's fault, so not logged
        if not failure.fallback or not self.opts.fallback_url:
            conv.forget_question()
            self._log(record, "error", failure.status, start, str(failure))
            return
        try:
            # The fallback is another service: it never gets the model's API key.
            reply = post_chat(self.opts.fallback_url, body, timeout=self.opts.timeout, tracker=self.tracker)
        except RequestFailed as exc:
            if self.stop.is_set():
                return
            conv.forget_question()
            self._log(record, "error", exc.status if exc.status is not None else failure.status, start,
                      f"{failure}; fallback: {exc}")
            return
        conv.answer(reply.text)
        self._log(record, "fallback", reply.status, start, str(failure))

    def _log(self, record: dict, outcome: str, status: int | None, start: float, error: str | None) -> None:
        record.update(outcome=outcome, status=status,
                      latency_ms=round((time.monotonic() - start) * 1000.0, 1),
                      error=error[:ERROR_MAX_CHARS] if error else None)
        with self._lock:
            self.counts[outcome] += 1
        self.log.write(record)
