"""Property tests for plugins/module_utils/flags/help.py over hostile input
(tests/hostile.py): the real ``vllm serve --help=all`` of vLLM 0.32.0
(tests/help_tables.py, HELP_PATH) with its lines cut, mutated, replaced by
arbitrary text, and flags added whose defaults and metavars are hostile.

What they promise: parse_help returns a FlagTable or raises HelpTextError,
nothing else: not RecursionError from a deep default, not SyntaxError from a
bad literal in a default or a choices list, not int()'s ValueError past 4,300
digits; a default in non-ASCII digits stays text; every number default is
written in the help; its time grows linearly with the help (joining a flag's
wrapped lines and reading ``X [X ...]`` were quadratic).
"""
from __future__ import annotations

import math

import pytest
from ansible.module_utils.flags.errors import HelpTextError
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.shared.pyrepr import MAX_DEPTH
from help_tables import HELP_PATH
from hostile import (
    HUGE_NUMBER,
    MIB,
    any_text,
    assert_linear,
    assert_numbers_from,
    mutated,
    nested,
    non_ascii_number,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

HELP = HELP_PATH.read_text()
LINES = HELP.splitlines()
ENTRY_LINES = [line for line in LINES if line.startswith("  -")]
HELP_LINES = [line for line in LINES if line.startswith("      ") and line.strip()]

def test_the_lines_are_the_capture():
    assert LINES[0] == "usage: vllm serve [model_tag] [options]"
    assert len(ENTRY_LINES) > 300 and len(HELP_LINES) > 1000


def with_flag(invocation: str, help_text: str = "Help.") -> str:
    """The real help with one more flag at the end, in argparse's layout."""
    return HELP.rstrip("\n") + f"\n\nZZTest:\n  {invocation}\n                        {help_text}\n"


def assert_table_holds(table, text: str) -> None:
    numbers = []
    for dest, flag in table.flags.items():
        assert isinstance(dest, str) and isinstance(flag.help, str)
        assert flag.kind in ("bool", "int", "float", "str", "json", "list", "unknown")
        if isinstance(flag.default, (int, float)) and not isinstance(flag.default, bool):
            if not isinstance(flag.default, float) or math.isfinite(flag.default):
                numbers.append(abs(flag.default))
        for opt in flag.option_strings + flag.negative_strings:
            assert opt in table.options
    assert_numbers_from(numbers, text)


@st.composite
def hostile_helps(draw) -> str:
    """The real help with up to five lines replaced by a mutated help line or arbitrary text."""
    lines = list(LINES)
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(st.one_of(mutated(ENTRY_LINES), mutated(HELP_LINES), any_text(200)))
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


@given(hostile_helps())
def test_parse_help_raises_only_help_text_error(text):
    table = raises_only(HelpTextError, parse_help, text)
    if table is not None:
        assert_table_holds(table, text)


@given(st.one_of(any_text(), mutated(LINES[:5])))
def test_text_that_is_no_help_is_the_help_text_error(text):
    assert raises_only(HelpTextError, parse_help, text) is None or "--tensor-parallel-size" in text


@given(st.one_of(any_text(300), st.sampled_from([nested(2000), HUGE_NUMBER, non_ascii_number()])),
       st.sampled_from(["--zz-test ZZ_TEST", "--zz-test {a,b}", "--zz-test ['a', 'b']", "--zz-test [ZZ ...]"]))
def test_any_default_and_metavar_read(default, invocation):
    text = with_flag(invocation, f"Help. (default: {default})")
    table = parse_help(text)
    assert_table_holds(table, text)


@pytest.mark.parametrize("default", [
    nested(2000), nested(100_000, "{'a': ", "}"), nested(MAX_DEPTH + 1, "(", ")"),
    "[08]", "{'a': '\\x'}", "['\\N{no such}']", "[1e999]", "[" + HUGE_NUMBER + "]", "[0x]",
    HUGE_NUMBER, "-" + HUGE_NUMBER, "1" + "0" * 400 + ".5e999999", "1e999999",
    non_ascii_number(), "-" + non_ascii_number(), non_ascii_number("3") + ".5", "\u00b9\u00b2",
], ids=lambda s: repr(s[:30]))
def test_a_default_that_is_no_literal_stays_text(default):
    table = parse_help(with_flag("--zz-test ZZ_TEST", f"Help. (default: {default})"))
    flag = table.flags["zz_test"]
    assert flag.default == default and flag.default_known and flag.kind == "str"


@pytest.mark.parametrize("default,value,kind", [
    ("8", 8, "int"), ("-3", -3, "int"), ("0.9", 0.9, "float"), ("1e-05", 1e-05, "float"),
    ("9" * 4300, int("9" * 4300), "int"), ("[1, 2]", [1, 2], "json"), ("{'a': 1}", {"a": 1}, "json"),
    (nested(MAX_DEPTH - 1, inner="[]"), eval(nested(MAX_DEPTH - 1, inner="[]")), "json"),
], ids=lambda v: repr(v)[:20])
def test_a_literal_default_still_reads(default, value, kind):
    flag = parse_help(with_flag("--zz-test ZZ_TEST", f"Help. (default: {default})")).flags["zz_test"]
    assert flag.default == value and flag.kind == kind


@pytest.mark.parametrize("metavar", ["[" + "'a', " * 3 + nested(5000) + "]", "['a', '\\x']", "['a', 08]", "['a'"])
def test_a_choices_list_that_is_no_literal_gives_no_choices(metavar):
    flag = parse_help(with_flag(f"--zz-test {metavar}")).flags["zz_test"]
    assert flag.choices is None


def test_a_choices_list_still_reads():
    flag = parse_help(with_flag("--zz-test ['auto', 'fp8']")).flags["zz_test"]
    assert flag.choices == ("auto", "fp8") and flag.kind == "str"
    flag = parse_help(with_flag("--zz-test {1,2,\u0663}")).flags["zz_test"]
    assert flag.kind == "str"       # a choice in Arabic-Indic digits is no int


def test_nargs_plus_still_reads_and_only_its_exact_form():
    assert parse_help(with_flag("--zz-test ZZ_TEST [ZZ_TEST ...]")).flags["zz_test"].nargs == "+"
    assert parse_help(with_flag("--zz-test a [b ...]")).flags["zz_test"].nargs is None
    assert parse_help(with_flag("--zz-test  [ ...]")).flags["zz_test"].nargs != "+"


@pytest.mark.parametrize("value", [None, b"usage: vllm serve", 3, ["--tensor-parallel-size"], ""])
def test_no_text_is_the_help_text_error(value):
    with pytest.raises(HelpTextError):
        parse_help(value)


def test_parse_help_is_linear():
    def parse(text):
        return raises_only(HelpTextError, parse_help, text)

    small = 128 * 1024
    # a flag's help wrapped over many lines (joined with += before, and searched whole for "x-")
    assert_linear(parse, lambda n: with_flag("--zz-test ZZ", "x-\n      " * (n // 9)), small=small)
    # "X [X ...]" read by a regex with two lazy groups
    assert_linear(parse, lambda n: with_flag("--zz-test " + "x [" * (n // 3)), small=small)
    assert_linear(parse, lambda n: with_flag("--zz-test ZZ", "(default: " + "[" * n + ")"), small=small)
    assert_linear(parse, lambda n: with_flag("--zz-test ZZ" + " " * n + "x"), small=small)
    assert_linear(parse, lambda n: with_flag("--zz-test " + "-" * n), small=small)
    assert_linear(parse, lambda n: HELP + "\n".join(ENTRY_LINES) * (n // len(HELP)), small=len(HELP))


def test_a_mib_line_reads():
    table = parse_help(with_flag("--zz-test ZZ_TEST", "y" * MIB + " (default: 7)"))
    assert table.flags["zz_test"].default == 7
