# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a unified-memory GPU host (GB10, GH200) has the memory vLLM will ask for at
start, measured the way vLLM measures it, before anything stops.

On an integrated GPU vLLM takes the device's free memory from psutil's
``virtual_memory().available``, the kernel's ``MemAvailable``, and its total from CUDA;
every rank refuses to start when free < ceil(total x gpu_memory_utilization)
(vllm 0.31/0.32 ``utils/mem_utils.py`` MemorySnapshot.measure and
``v1/worker/utils.py`` request_memory; quoted in
docs/design/spark-field-facts/02-vllm-uma-free-memory-check.md). It refuses only after
both ranks joined and NCCL took its buffers, late and on one host; Spark reports have
it short by a few GiB at 0.85-0.87, the head more than the worker.

:func:`fits` is that rule with a margin, and names the largest utilization that fits
now; :func:`read_refusal` reads vLLM's own refusal from a log. Pure logic, linear in its
input; UnifiedMemoryError is the only exception raised.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ansible.module_utils.shared.numeric import brief
from ansible.module_utils.shared.text_input import text_input

GIB = 1024 ** 3
MAX_TEXT = 256 * 1024 * 1024
# vLLM's message, every shape seen (with and without the device name).
_REFUSAL = re.compile(
    r"Free memory on device ?([A-Za-z0-9:_-]{0,32}) \(([0-9]{1,9}(?:\.[0-9]{1,6})?)/([0-9]{1,9}(?:\.[0-9]{1,6})?)"
    r" GiB\) on startup is less than desired GPU memory utilization \(([0-9]{1,3}(?:\.[0-9]{1,6})?),"
    r" ([0-9]{1,9}(?:\.[0-9]{1,6})?) GiB\)", re.ASCII)


class UnifiedMemoryError(ValueError):
    """A figure that is no memory size or utilization."""


@dataclass(frozen=True)
class Fit:
    ok: bool
    requested_bytes: int            # what vLLM will ask for: ceil(total x utilization)
    available_bytes: int            # MemAvailable now
    margin_bytes: int
    largest_utilization: float      # the largest utilization (2 decimals) that fits now, 0.0 if none
    message: str


def _bytes(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 2 ** 62:
        raise UnifiedMemoryError(f"{what} must be a number of bytes (an int from 0 to 2**62), got {brief(value)}")
    return value


def fits(host: str, available_bytes: int, total_bytes: int, utilization: float, margin_bytes: int) -> Fit:
    """Whether ``available_bytes`` (MemAvailable) covers vLLM's request at ``utilization`` of
    ``total_bytes`` plus ``margin_bytes``; the message says what to do when it does not."""
    available, total, margin = (_bytes(available_bytes, "MemAvailable"), _bytes(total_bytes, "the total"),
                                _bytes(margin_bytes, "the margin"))
    # Compared, never converted: NaN fails both bounds, and an int of 5,000 digits is no float.
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
        raise UnifiedMemoryError("gpu_memory_utilization must be a number above 0 and at most 1, got "
                                 + brief(utilization))
    if total == 0:
        raise UnifiedMemoryError("the total memory is 0: read MemTotal, or CUDA's total, of the host")
    requested = math.ceil(total * utilization)
    room = available - margin
    largest = max(0.0, math.floor(room / total * 100) / 100) if room > 0 else 0.0
    while largest > 0 and math.ceil(total * largest) > room:  # floor's rounding, then vLLM's ceil
        largest = round(largest - 0.01, 2)
    gib = lambda n: f"{n / GIB:.1f} GiB"  # noqa: E731
    if available >= requested + margin:
        return Fit(True, requested, available, margin, largest,
                   f"{host}: MemAvailable {gib(available)} covers vLLM's {gib(requested)} "
                   f"(gpu_memory_utilization {utilization:g} of {gib(total)}) and the {gib(margin)} margin")
    advice = (f"set vllm_server_args.gpu_memory_utilization to {largest:.2f} or less" if largest > 0
              else "free memory on the host first: nothing that fits is left")
    return Fit(False, requested, available, margin, largest,
               f"{host}: MemAvailable {gib(available)} is short of vLLM's {gib(requested)} "
               f"(gpu_memory_utilization {utilization:g} of {gib(total)}) plus the {gib(margin)} margin, "
               f"so every rank would refuse to start after joining. Nothing was stopped: {advice}, or drop the "
               "page cache before the start (sync; echo 3 > /proc/sys/vm/drop_caches), or stop what else "
               "holds memory on the host")


@dataclass(frozen=True)
class Refusal:
    device: str
    free_gib: float
    total_gib: float
    utilization: float
    requested_gib: float


def read_refusal(text: str | bytes) -> Refusal | None:
    """vLLM's own refusal at start (``Free memory on device cuda:0 (55.87/119.56 GiB) on startup is
    less than desired GPU memory utilization (0.5, 59.78 GiB)``), the first in the text; None if
    none."""
    text = text_input(text, "the log", MAX_TEXT, UnifiedMemoryError)
    at = text.find("Free memory on device")
    while at >= 0:
        m = _REFUSAL.match(text, at)
        if m:
            return Refusal(m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
        at = text.find("Free memory on device", at + 1)
    return None
