# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduling the rolling restart: AWX schedule rules and the cron entry (pure).

Used by playbooks/schedule-restart.yml and playbooks/awx-restart.yml through
plugins/filter/restart.py; the facts are in
docs/reference/restart.md (section 1.4 for AWX's RRULE rules, section 2 for
ansible-runner and cron).

* ``rrule_problems`` checks an RRULE string against the rules AWX applies
  when a schedule is saved, so a bad one is refused before any API call
  (awx.awx 24.6.1's rrule lookups are unusable here: write the string).
* ``runner_argv`` is the ansible-runner command a cron entry runs, with the
  traps avoided: an explicit PATH (cron's has no venv: rc 127), ``flock -n -E
  75`` (an overlap exits 75, "still running", not 1), ``--ident`` from the UTC
  time, ``--rotate-artifacts``, ``--omit-env-files`` (no ``env/cmdline``
  replayed by a later run).
* ``cron_escape`` makes a command safe in a crontab line, where ``%`` ends
  the command.
"""

from __future__ import annotations

import re
import shlex
import typing as t

from ansible.module_utils.shared.numeric import shown

LOCKED_EXIT = 75
# The run's ident, set by the shell line cron_job writes.
IDENT = "$ident"
_TAG = re.compile(r"^[A-Za-z0-9_.\-]{1,32}$", re.ASCII)
MAX_COUNT = 999
# Runs' artifact directories kept at most: a bound, so str() never meets an int
# of 4,300 digits (a role's argument spec passes one through as an int).
MAX_ROTATE = 10000

_DTSTART = re.compile(r"^DTSTART(?:;TZID=(?P<tz>[A-Za-z_]+(?:/[A-Za-z0-9_+\-]+)+|UTC)):(?P<stamp>\d{8}T\d{6})(?P<z>Z?)$"
                      r"|^DTSTART:(?P<utc>\d{8}T\d{6}Z)$", re.ASCII)
_PART = re.compile(r"^[A-Z]+=[A-Za-z0-9,+\-]+$", re.ASCII)
_NUMBERED_DAY = re.compile(r"^[+\-]?\d+(MO|TU|WE|TH|FR|SA|SU)$", re.ASCII)
_FREQS = ("MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY")


class ScheduleError(ValueError):
    """A schedule the toolkit refuses; the message says what to write instead."""


def rrule_problems(text: t.Any) -> list[str]:
    """What AWX would refuse in ``text`` (empty when it would save it)."""
    if not isinstance(text, str) or not text.strip():
        return ["the rrule must be a non-empty string such as "
                "'DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1'"]
    if len(text) > 4096:
        return ["the rrule is %d characters long; AWX rules are one DTSTART and a few RRULEs" % len(text)]
    problems = []
    words = text.split()
    starts = [w for w in words if w.startswith("DTSTART")]
    rules = [w for w in words if w.startswith("RRULE:")]
    if len(starts) != 1:
        problems.append("it needs exactly one DTSTART, found %d" % len(starts))
    elif not _DTSTART.match(starts[0]):
        problems.append("DTSTART %r must carry its timezone: DTSTART;TZID=Area/City:YYYYMMDDTHHMMSS or "
                        "DTSTART:YYYYMMDDTHHMMSSZ" % starts[0][:60])
    if not rules:
        problems.append("it needs at least one RRULE:...")
    for word in words:
        if word in starts or word in rules or word.startswith("EXRULE:"):
            continue
        if word.startswith(("RDATE", "EXDATE")):
            problems.append("AWX does not take %s; use an EXRULE" % word.split(":")[0].split(";")[0])
        else:
            problems.append("unknown part %r: AWX takes DTSTART, RRULE and EXRULE" % word[:40])
    for rule in rules + [w for w in words if w.startswith("EXRULE:")]:
        problems += _rule_problems(rule)
    return problems


def _rule_problems(rule: str) -> list[str]:
    kind, _, body = rule.partition(":")
    parts: dict[str, str] = {}
    problems = []
    for part in body.split(";"):
        if not _PART.match(part):
            problems.append("%s: %r is not NAME=VALUE" % (kind, part[:40]))
            continue
        name, value = part.split("=", 1)
        if name in parts:
            problems.append("%s: %s given twice" % (kind, name))
        parts[name] = value
    freq = parts.get("FREQ")
    if freq == "SECONDLY":
        problems.append("%s: AWX does not take FREQ=SECONDLY" % kind)
    elif freq not in _FREQS:
        problems.append("%s: FREQ must be one of %s, got %r" % (kind, ", ".join(_FREQS), freq))
    if "INTERVAL" not in parts:
        problems.append("%s: AWX needs INTERVAL (INTERVAL=1 for every day, hour...)" % kind)
    elif not parts["INTERVAL"].isdigit() or int(parts["INTERVAL"]) < 1:
        problems.append("%s: INTERVAL must be a positive integer, got %r" % (kind, parts["INTERVAL"]))
    if "COUNT" in parts and "UNTIL" in parts:
        problems.append("%s: AWX takes COUNT or UNTIL, not both" % kind)
    if "COUNT" in parts and (not parts["COUNT"].isdigit() or not 1 <= int(parts["COUNT"]) <= MAX_COUNT):
        problems.append("%s: COUNT must be 1 to %d, got %r" % (kind, MAX_COUNT, parts["COUNT"]))
    if "UNTIL" in parts and not re.fullmatch(r"\d{8}T\d{6}Z", parts["UNTIL"], re.ASCII):
        problems.append("%s: UNTIL must be UTC, YYYYMMDDTHHMMSSZ, got %r" % (kind, parts["UNTIL"]))
    for day in parts.get("BYDAY", "").split(",") if "BYDAY" in parts else []:
        if _NUMBERED_DAY.match(day):
            problems.append("%s: AWX does not take a numbered BYDAY (%s); use BYSETPOS" % (kind, day))
    return problems


def cron_escape(command: str) -> str:
    """``command`` for a crontab line: ``%`` would end the command there, and a newline the entry."""
    if "\n" in command or "\r" in command:
        raise ScheduleError("a cron command must be one line")
    return command.replace("%", "\\%")


def runner_argv(venv: str, private_dir: str, project_dir: str, inventory: str, playbook: str,
                lock: str, rotate: int = 30) -> list[str]:
    """The ansible-runner command of one scheduled run, as argv for ``sh -c``'s caller.

    The ident is the run's UTC time, expanded by the shell when cron runs it.
    """
    for name, value in (("venv", venv), ("private_dir", private_dir), ("project_dir", project_dir),
                        ("inventory", inventory), ("lock", lock)):
        if not isinstance(value, str) or not value.startswith("/"):
            raise ScheduleError("%s must be an absolute path (cron runs from /), got %r" % (name, value))
    if isinstance(rotate, bool) or not isinstance(rotate, int) or not 1 <= rotate <= MAX_ROTATE:
        raise ScheduleError("rotate must be an integer from 1 to %d (the artifact directories kept), got %s"
                            % (MAX_ROTATE, shown(rotate)))
    path = "%s/bin:/usr/local/bin:/usr/bin:/bin" % venv.rstrip("/")
    return ["flock", "-n", "-E", str(LOCKED_EXIT), lock,
            "env", "PATH=" + path,
            "ansible-runner", "run", private_dir, "-p", playbook,
            "--project-dir", project_dir, "--inventory", inventory,
            "--ident", IDENT,
            "--rotate-artifacts", str(rotate), "--omit-env-files", "-q"]


def cron_job(argv: t.Sequence[str], syslog_tag: str = "") -> str:
    """One crontab command from ``runner_argv``: quoted, ``%`` escaped.

    The shell sets the ident once from the UTC time. With ``syslog_tag``,
    every run, an overlap and a runner that cannot start included, logs one
    line with its ident and exit status (``logger``), and the entry still
    exits with the run's status.
    """
    if syslog_tag and not _TAG.match(syslog_tag):
        raise ScheduleError("syslog_tag must be letters, digits, '_', '.' or '-', got %r" % (syslog_tag,))
    words = ['"$ident"' if word == IDENT else shlex.quote(word) for word in argv]
    line = "ident=$(date -u +%Y%m%dT%H%M%SZ); " + " ".join(words)
    if syslog_tag:
        # 75 is an overlap (the last run still holds the lock), not a failure.
        line += '; rc=$?; logger -t %s -- "run $ident exit $rc"; exit $rc' % syslog_tag
    return cron_escape(line)
