"""Wait inside one module call: probe until an answer is final, or the time is up.

An Ansible ``until`` loop runs the whole module for each poll (about a second of
overhead, and its ``delay`` between polls); :class:`Poller` polls within one
call instead, with sub-second pauses, and the role slices a long wait into
calls so that Ansible still prints a retry line now and then.

Pure: the clock and the sleep are given (``time.monotonic`` and ``time.sleep``
in a module, fakes in a test). :func:`validate_poll` raises
:class:`PollArgumentError` and nothing else.
"""
from __future__ import annotations

# The longest wait one call may take; a day is plenty (and keeps the deadline a finite number).
MAX_WAIT_S = 86400
# Less time left than this is none: a float clock's last digits must not buy one more probe.
_AT_DEADLINE_S = 0.001


class PollArgumentError(ValueError):
    """A wait_s or poll_s the poller cannot use; its text is the module's failure message."""


def _shown(value) -> str:
    """A number as the task wrote it (AnsibleModule's float makes -1 into -1.0), never raising."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"a {type(value).__name__}"
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return "a number of more than 30 digits"
    if isinstance(value, float) and value.is_integer() and abs(value) < 10 ** 15:
        return str(int(value))
    return str(value)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_poll(wait_s, poll_s) -> None:
    """Raise :class:`PollArgumentError` (and nothing else) for a wait or pause the poller cannot use."""
    # `not >=` and `not >`: NaN fails them too.
    if not _number(wait_s) or not wait_s >= 0:
        raise PollArgumentError(f"wait_s must be 0 (probe once) or a positive number of seconds, got {_shown(wait_s)}")
    if wait_s > MAX_WAIT_S:
        raise PollArgumentError(f"wait_s must be at most {MAX_WAIT_S} seconds (a day), got {_shown(wait_s)}")
    if not _number(poll_s) or not poll_s > 0:
        raise PollArgumentError(f"poll_s must be a positive number of seconds, got {_shown(poll_s)}")
    if poll_s > MAX_WAIT_S:
        raise PollArgumentError(f"poll_s must be at most {MAX_WAIT_S} seconds (a day), got {_shown(poll_s)}")


class Poller:
    """Call a probe until ``done(answer)``, or until ``wait_s`` seconds have passed since the first call began.

    The probe runs at least once (``wait_s`` 0 probes once), and once more at the
    deadline. Between calls it pauses ``poll_s`` seconds after the end of one
    probe (never past the deadline), so a slow probe is never run back to back.
    A probe that has begun runs to its end: the wait may pass ``wait_s`` by one
    probe's own time. :attr:`polls` and :attr:`waited_s` count as it goes, so a
    probe that fails the module midway can still say how far the wait got.
    """

    def __init__(self, wait_s: float, poll_s: float, clock, sleep):
        self.wait_s = wait_s
        self.poll_s = poll_s
        self._clock = clock
        self._sleep = sleep
        self._start = None
        self._end = None
        self.polls = 0

    @property
    def waited_s(self) -> float:
        """Seconds from the first probe's start to the last one's end (so far, while it runs)."""
        if self._start is None:
            return 0.0
        end = self._clock() if self._end is None else self._end
        return round(max(0.0, end - self._start), 3)

    def until(self, probe, done):
        """The first answer that is ``done``, or the last one when the time is up."""
        self._start = self._clock()
        deadline = self._start + self.wait_s
        while True:
            self.polls += 1
            answer = probe()
            now = self._clock()
            if done(answer) or deadline - now < _AT_DEADLINE_S:
                self._end = now
                return answer
            self._sleep(min(self.poll_s, deadline - now))
