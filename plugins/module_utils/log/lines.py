# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's log lines taken apart: who logged a line, and where its message starts.

Each line kind counts only where vLLM prints it: at the start of the message,
right after vLLM's own prefix (level, ``MM-DD HH:MM:SS`` or the ``...`` a
paste elides it to, ``[file.py:N]``), from the file that logs it
(:data:`FROM_CAPACITY` for the capacity lines, :data:`FROM_SERVER` for the API
server's banner; :func:`logged_by`). A prompt that the request logger quotes
(``[logger.py:N] Received request ...: prompt: '... GPU KV cache size: 1 tokens
...'``) is neither a capacity line nor a new boot. Outer prefixes (journald,
docker, process labels) may stand before vLLM's; ANSI colour is stripped
first (:mod:`log.ansi`).

:func:`split_line` takes one line apart (:class:`LogLine`), :class:`LogLines`
reads a log's lines in order, :func:`unglue` cuts the lines Ray's driver glues
onto a worker's, and :func:`boot_marker` tells the lines that open a boot.
Used by ``kv/scanner.py`` and ``flags/bootlog.py``: one reading of vLLM's log
format. Formats and prefixes per version are in docs/reference/vllm.md
section 1. Standard library only; every match is linear in the line.
"""

from __future__ import annotations

import re
import typing as t

# Each line kind is read only where vLLM prints it (docs/reference/vllm.md 1.1,
# 1.4 and 2.4): at the start of the message after vLLM's own prefix, from the
# file that logs it. Text from a request (the request logger's ``prompt: %r``,
# an error message; NewLineFormatter repeats the prefix after each newline of
# a message) always follows a prefix of its own, from another file.

# vllm/logger.py's _FORMAT in every version: level, the "%m-%d %H:%M:%S" stamp,
# then "file.py:N] " (<=0.7) or "[file.py:N] " (>=0.8; with a path, shortened
# with "...", when VLLM_LOGGING_LEVEL=DEBUG). The first one in a line is
# vLLM's: whatever a request quotes comes after it. A log pasted into an issue
# or a note often has its stamps elided to "..." ("INFO ... [kv_cache_utils.py:
# 1087] GPU KV cache size: ..."): the same prefix, with no stamp.
_PREFIX_BODY = (
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?:([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})|\.\.\.) "
    r"\[?(?:[\w.-]{1,100}/){0,16}([\w.-]{1,100}\.py):[0-9]{1,9}\] ")
_PREFIX = re.compile(r"(?<![A-Za-z0-9_])" + _PREFIX_BODY, re.ASCII)
# What may stand before vLLM's prefix, or before the text of a line pasted
# without one (bootlogs/04): process labels ("(EngineCore_DP0 pid=N)", Ray's
# "(RayWorkerProc pid=N, ip=A)", nested), kubectl's "[pod/x/c]", ISO stamps
# (docker --timestamps, an outer logger's), a syslog or journald stamp with
# its "host ident[pid]:", a kubelet log file's "stdout F", docker compose's
# "name  |", quote bars and k9s box edges. Nothing else: a line that starts
# with other text (an exception's "ValueError: ...", a request's words) is not
# vLLM's, whatever prefix it quotes later. No token starts with a blank and
# each has one shape, so matching a lead does not backtrack far.
_HOST_IDENT = r"(?: [^\s:]+ [^\s:]+:)?"
_LEAD = re.compile(
    r"(?:(?:"
    r"\((?:[A-Za-z_][\w-]* )?(?:rank=[0-9]+ )?pid=[0-9]+(?:, ip=[^\s()]*)?\)"
    r"|\[[^\s\[\]]*\]"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?" + _HOST_IDENT +
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?" + _HOST_IDENT +
    r"|(?:stdout|stderr) [FP]"
    r"|[A-Za-z0-9][\w.-]* +\|"
    r"|[>\u2502|]"
    r")[ \t]*)*", re.ASCII)
# Longer than any real lead (a few labels, a journald and a docker stamp), and
# it bounds what matching a lead costs per line.
_LEAD_MAX = 1024


class LogLine(t.NamedTuple):
    """One log line taken apart (ANSI already stripped)."""

    lead: str  # what stands before vLLM's prefix (outer prefixes, process labels), or before the message
    source: str | None  # the file in vLLM's prefix ("kv_cache_utils.py"); None without one
    stamp: int | None  # seconds into the year of the prefix's "MM-DD HH:MM:SS"; None when elided
    message: str
    text: str  # the whole line


# The prefix's end, a literal a search finds fast; then _PREFIX is searched
# only in the window before each end, so a line costs one pass.
_PREFIX_END = re.compile(r"\.py:[0-9]{1,9}\] ")
_PREFIX_MAX = 2000  # longer than any prefix _PREFIX matches


def _first_prefix(text: str) -> re.Match[str] | None:
    """The first vLLM prefix in ``text``. Its path holds no ".py:N] ", so it
    starts after the previous end, if any."""
    after = 0
    for end in _PREFIX_END.finditer(text):
        m = _PREFIX.search(text, max(after, end.start() - _PREFIX_MAX), end.end())
        if m:
            return m
        after = end.end()
    return None


def split_line(text: str) -> LogLine:
    """Take ``text`` apart at its vLLM prefix: the first one, when only a lead
    stands before it. Without one, the message starts after the lead."""
    m = _first_prefix(text)
    if m and m.start() <= _LEAD_MAX and _LEAD.fullmatch(text, 0, m.start()):
        stamp = None
        if m.group(2) is not None:
            mon, day, hh, mm, ss = (int(g) for g in m.group(2, 3, 4, 5, 6))
            stamp = ((((mon - 1) * 31 + day - 1) * 24 + hh) * 60 + mm) * 60 + ss
        return LogLine(text[:m.start()], m.group(7), stamp, text[m.end():], text)
    end = _LEAD.match(text, 0, _LEAD_MAX).end()
    return LogLine(text[:end], None, None, text[end:], text)


# The label Ray puts on a worker's forwarded output (also a hint of a worker node: kv/not_found.py).
RAY_WORKER = re.compile(r"\((?:RayWorkerProc|RayWorkerWrapper) pid=")

# Ray's driver prints a worker's line in two writes, the text and then its
# newline (ray/_private/worker.py, print_worker_logs: print()). The engine
# core is that driver, and a line it logs between the two writes lands glued
# onto the worker's text, its own newline ending both (the lab, 2026-12-03):
#   (RayWorkerProc pid=9747) (Worker_TP0 pid=9747) INFO 12-03 09:54:28
#   [cpu_worker.py:260] Explicitly set (0.06/10.96) GiB for KV cache on node
#   0.(EngineCore pid=9685) INFO 12-03 09:54:28 [kv_cache_utils.py:2327] CPU
#   KV cache size: 65,536 tokens, ...
# So a line that Ray forwarded from a worker, in vLLM's format, is cut where a
# process label and vLLM's prefix follow, and each part is its own line. Only
# there: a worker never logs a request's text, so a logged prompt still
# cannot start a line. The label's parts are bounded, so the search is linear.
_GLUED = re.compile(
    r"\([A-Za-z_][\w-]{0,63} pid=[0-9]{1,9}(?:, ip=[^\s()]{0,63})?\) " + _PREFIX_BODY,
    re.ASCII)


def unglue(text: str) -> t.Iterator[str]:
    """The lines in ``text``: itself, or the parts of a Ray worker's line with
    other lines glued on (see _GLUED)."""
    start = 0
    while True:
        line = split_line(text[start:start + _LEAD_MAX + _PREFIX_MAX])
        if line.source is None or not RAY_WORKER.search(line.lead):
            break
        m = _GLUED.search(text, start + len(line.lead))
        if not m:
            break
        yield text[start:m.start()]
        start = m.start()
    yield text[start:]


class LogLines:
    """Splits the lines of one log in order.

    A log written by vLLM's formatter has its prefix on every line vLLM logs,
    so once one such line is seen, a line without it is someone else's text (a
    traceback, a message's continuation) and ``read`` returns None for it.
    Excerpts pasted without prefixes are still read while no prefix is seen.
    """

    def __init__(self) -> None:
        self.formatted = False

    def read(self, text: str) -> LogLine | None:
        line = split_line(text)
        if line.source is not None:
            self.formatted = True
        elif self.formatted:
            return None
        return line


# The files that log each kind, by name: capacity in v1/core/kv_cache_utils.py
# (V1 >= 0.7.3) or the V0 executors (executor_base.py, gpu_executor.py,
# distributed_gpu_executor.py, cpu_/tpu_/hpu_executor.py, v1/executor/*_executor.py
# in 0.6; llm_engine.py before 0.4); memory in v1/worker/{gpu,cpu,...}_worker.py;
# banners and args in the API server's entrypoints (api_server.py <= 0.11,
# cli_args.py 0.9, utils.py 0.10-0.11, api_utils.py 0.29-0.32, startup.py 0.33,
# serve.py for the headless launcher); engine init in core.py (V1) and llm_engine.py (V0).
FROM_CAPACITY = re.compile(r"kv_cache_utils\.py|\w*executor\w*\.py|llm_engine\.py", re.ASCII)
FROM_WORKER = re.compile(r"\w*worker\w*\.py", re.ASCII)
FROM_SERVER = re.compile(r"api_server\.py|api_utils\.py|startup\.py|utils\.py|cli_args\.py|serve\.py|"
                         r"launcher\.py", re.ASCII)
FROM_ENGINE = re.compile(r"core\.py|llm_engine\.py", re.ASCII)


def logged_by(line: LogLine, files: t.Pattern[str]) -> bool:
    """``line`` comes from one of ``files``, or has no vLLM prefix to tell."""
    return line.source is None or files.fullmatch(line.source) is not None


_VERSION = r"v?(?P<v>[0-9]{1,9}\.[0-9]{1,9}[\w.+-]*)"
# (kind, pattern, the files that print it)
_MARKERS = (
    ("banner", re.compile(r"vLLM API server version " + _VERSION, re.ASCII), FROM_SERVER),
    ("banner", re.compile(r"vLLM server version " + _VERSION, re.ASCII), FROM_SERVER),
    ("args", re.compile(r"non-default args: \{"), FROM_SERVER),
    # No anchor of its own: always printed right after the "vLLM API server
    # version" banner (<=0.6), which already starts the boot.
    ("args", re.compile(r"args: Namespace\("), FROM_SERVER),
    ("engine", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(" + _VERSION + r"\)", re.ASCII), FROM_ENGINE),
    ("headless", re.compile(r"Launching vLLM \(" + _VERSION + r"\) headless", re.ASCII), FROM_SERVER),
)
# The >=0.12 ASCII-art banner: block elements and blanks, then "version X".
# The art is checked apart: one pattern for it would backtrack.
_LOGO = re.compile(r"(?P<art>[\s\u2580-\u259f]*)version\s+" + _VERSION + r"\s*$", re.ASCII)
_BLOCK_ELEMENT = re.compile(r"[\u2580-\u259f]")


def boot_marker(line: LogLine) -> tuple[str, str | None] | None:
    """``(kind, version)`` when ``line`` is one of the lines that open a boot
    (kind ``banner``, ``args``, ``engine`` or ``headless``), else None."""
    message = line.message
    for kind, rx, files in _MARKERS:
        m = rx.match(message)
        if m:
            return (kind, m.groupdict().get("v")) if logged_by(line, files) else None
    m = _LOGO.match(message)
    if m and logged_by(line, FROM_SERVER):
        art = m.group("art")
        if art[-1:].isspace() and _BLOCK_ELEMENT.search(art):
            return "banner", m.group("v")
    return None
