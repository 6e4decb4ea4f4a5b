# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why the latest boot has no capacity line: :func:`gather_hints` collects
the hints (a failed start, a worker node's log, Ray still waiting) and
:func:`not_found_message` says what was searched and what to do next.

The hints are only needed on failure, so they are gathered in a second,
line-by-line pass over the latest boot alone (``kv/scanner.py`` reads the
pool in the first).
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from ansible.module_utils.kv.pool import EVIDENCE_LINE_MAX, KvCacheReport
from ansible.module_utils.kv.sources import MAX_LINE
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.log.lines import RAY_WORKER

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
_HINTS_KEPT = 3


@dataclasses.dataclass
class MissingPoolHints:
    """Hints from the latest boot that explain a missing capacity line."""

    failed: list[str] = dataclasses.field(default_factory=list)
    root_cause: str | None = None
    worker_node: list[str] = dataclasses.field(default_factory=list)
    ray_only: list[str] = dataclasses.field(default_factory=list)
    pending: list[str] = dataclasses.field(default_factory=list)
    head_lines: bool = False
    tp_ranks: set[int] = dataclasses.field(default_factory=set)
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
                if len(self.failed) < _HINTS_KEPT:
                    self.failed.append(short)
            if self.root_cause is None:
                m = _EXC.search(line)
                if m:
                    self.root_cause = ("%s: %s" % m.groups())[:EVIDENCE_LINE_MAX]
        if "headless" in line or "rank" in line:
            if ("--headless" in line or "headless multiproc" in line or "headless mode" in line
                    or _NODE_RANK.search(line)):
                if len(self.worker_node) < _HINTS_KEPT:
                    self.worker_node.append(short)
        m = _WORKER_TP.search(line)
        if m:
            self.tp_ranks.add(int(m.group(1)))
        if RAY_WORKER.search(line):
            self.ray_worker_lines = True
        if _RAY_NODE.search(line) and len(self.ray_only) < _HINTS_KEPT:
            self.ray_only.append(short)
        if _PENDING.search(line) and len(self.pending) < _HINTS_KEPT:
            self.pending.append(short)


def gather_hints(chunks: t.Iterable[bytes]) -> MissingPoolHints:
    """Line-by-line pass (slow path, failure only) over the latest boot."""
    hints = MissingPoolHints()
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
                hints.add(seg)
    if carry:
        hints.add(carry.decode("utf-8", "replace"))
    return hints


def _quote(line: str, limit: int = 200) -> str:
    line = line.strip().rstrip(".")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def not_found_message(report: KvCacheReport, hints: MissingPoolHints, source: str) -> str:
    """Say what was searched, what the log looks like and what to do next."""
    where = "the latest boot of %s" % source if report.boot_offset else source
    parts = [
        "No KV cache capacity line in %s (searched %d bytes%s for 'KV cache size: N tokens', "
        "'# GPU blocks: N' and 'Maximum concurrency for M tokens per request: X.XXx')."
        % (where, report.bytes_read,
           ", latest boot from byte %d" % report.boot_offset if report.boot_offset else "")
    ]
    if hints.looks_like_worker_node:
        if hints.worker_node:
            seen = "this looks like a worker node's log (%s)" % _quote(hints.worker_node[0])
        elif hints.ray_only:
            seen = "this looks like a Ray node's own `ray start` output, not a vLLM server log (%s)" % (
                _quote(hints.ray_only[0]))
        else:
            seen = "this looks like a worker node's log (only Ray worker or Worker_TP1+ output)"
        parts.append(
            "On a multi-node deployment %s: only the node that runs the engine core prints the "
            "line. Read the head node's log instead (node rank 0, where `vllm serve` runs "
            "without --headless)." % seen)
    if hints.failed:
        parts.append(
            "The engine failed to start: %s. Fix that and restart vLLM; the capacity line is "
            "printed once the KV cache has been allocated." % _quote(hints.root_cause or hints.failed[0], 400))
    elif hints.pending:
        parts.append(
            "The engine was still waiting for Ray resources (%s): check `ray status` on the "
            "head node and that every node joined the cluster." % _quote(hints.pending[-1]))
    elif not hints.looks_like_worker_node:
        parts.append(
            "The engine may still be starting (the line follows model loading and memory "
            "profiling), or this is not the vLLM server's output. Wait for startup to finish, "
            "or check that the source is the engine's log.")
    if report.vllm_version:
        parts.append("vLLM version in that boot: %s." % report.vllm_version)
    return " ".join(parts)
