"""Property tests for plugins/module_utils/flags/values.py over hostile input
(tests/hostile.py): every flag of the real ``vllm serve --help=all`` of vLLM
0.32.0 (tests/help_tables.py) typing hostile command-line words, the values of
the real boot logs' ``non-default args`` (test_pyrepr_properties.py), and JSON
of any depth.

What they promise: convert_cli_value, maybe_json and format_value never raise
(not json's RecursionError on deep brackets, not OverflowError from ``1e400k``
or an int past float's range); the to_* helpers and load_json raise ValueError
and nothing else; JSON deeper than MAX_DEPTH is not JSON here; a typed value
is a number written in the word (vLLM's own int() and float() read every
script's digits, so the check reads them too).
"""
from __future__ import annotations

import json
import math
import unicodedata

import pytest
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.flags.values import (
    convert_cli_value,
    format_value,
    json_depth,
    load_json,
    maybe_json,
    to_bool,
    to_float,
    to_int,
)
from ansible.module_utils.shared.pyrepr import MAX_DEPTH, parse_repr
from help_tables import ARGS_LINES, HELP_PATH
from hostile import (
    HUGE_NUMBER,
    NON_ASCII_DIGITS,
    any_text,
    assert_linear,
    assert_numbers_from,
    nested,
    numbers_of,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

TABLE = parse_help(HELP_PATH.read_text())
FLAGS = sorted(TABLE.flags.values(), key=lambda f: f.dest)
KINDS = {kind: next(f for f in FLAGS if f.kind == kind and not f.choices and not f.human_int)
         for kind in ("int", "float", "bool", "json", "str", "list")}
HUMAN = next(f for f in FLAGS if f.human_int)
REAL_VALUES = [str(v) for line in ARGS_LINES for v in parse_repr(line).values()]


def test_the_table_has_every_kind():
    assert set(KINDS) == {"int", "float", "bool", "json", "str", "list"}
    assert HUMAN.kind == "int" and "2048" in REAL_VALUES


WORDS = st.one_of(any_text(100), st.sampled_from(REAL_VALUES),
                  st.sampled_from([HUGE_NUMBER, "-" + HUGE_NUMBER, "9" * 400 + ".5k", "1e400", "-1e400",
                                   "nan", "inf", "1_0", " 7 ", "0x10", nested(5000), nested(5000, "{\"a\": ", "}"),
                                   "9" * 4000 + "K", "1" + "0" * 308 + "t", "٣", "٣.٥k", "auto"]),
                  st.text(alphabet="0123456789.-+_eEkKmMgGtTj " + NON_ASCII_DIGITS, max_size=30))


def ascii_digits(text: str) -> str:
    """Every decimal digit as ASCII: how int() and float() read a word."""
    return "".join(str(unicodedata.decimal(c)) if unicodedata.decimal(c, None) is not None else c for c in text)


@given(st.sampled_from(FLAGS), WORDS)
def test_convert_cli_value_never_raises(flag, word):
    value = convert_cli_value(flag, word)
    format_value(value)
    if not flag.human_int:      # 1k is 1000, not a figure in the word
        assert_numbers_from([n for n in numbers_of(value) if math.isfinite(n)], ascii_digits(word))


@pytest.mark.parametrize("word,value", [
    ("9" * 400 + ".5k", "9" * 400 + ".5k"), ("1e400k", "1e400k"), (HUGE_NUMBER, HUGE_NUMBER),
    ("25.6k", 25600), ("1K", 1024), ("2M", 2 * 2 ** 20), ("auto", -1), ("1.5K", "1.5K"),
])
def test_a_human_int_word_too_big_stays_the_word(word, value):
    assert convert_cli_value(HUMAN, word) == value


@given(st.one_of(WORDS, st.integers(), st.builds(lambda e: 10 ** e, st.integers(300, 5000)),
                 st.floats(), st.none(), st.lists(st.integers(), max_size=2), st.booleans()))
def test_the_to_helpers_raise_only_value_error(value):
    for convert in (to_bool, to_float, to_int, lambda v: to_int(v, human=True)):
        raises_only(ValueError, convert, value)


def test_an_int_past_floats_range_is_a_value_error():
    """float(10**400) raised OverflowError; int(float('1e400') * 1000) too."""
    with pytest.raises(ValueError):
        to_float(10 ** 400)
    with pytest.raises(ValueError):
        to_int("9" * 400 + ".5k", human=True)


# ---- JSON --------------------------------------------------------------------------------------

JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(alphabet='[]{}"\\ab\u00e9', max_size=6)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), inner,
                                                                max_size=3),
    max_leaves=30)


def depth_of(value) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


@given(JSONISH)
def test_json_depth_is_the_depth_of_the_value(value):
    """Brackets inside strings, escaped quotes and backslashes do not count."""
    assert json_depth(json.dumps(value)) == depth_of(value)
    assert load_json(json.dumps(value)) == value


@given(st.one_of(any_text(), st.text(alphabet='[]{}"\\:,1 ', max_size=60)))
def test_load_json_raises_only_value_error_and_maybe_json_never(text):
    raises_only(ValueError, load_json, text)
    maybe_json(text, "{[")


@pytest.mark.parametrize("opening,closing,deepest", [
    ("[", "]", MAX_DEPTH), ('{"a": ', "}", MAX_DEPTH), ('[{"a": ', "}]", MAX_DEPTH // 2)])
def test_json_deeper_than_the_limit_is_not_json(opening, closing, deepest):
    assert load_json(nested(deepest, opening, closing)) is not None
    for deep in (deepest + 1, 100_000):
        text = nested(deep, opening, closing)
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH}"):
            load_json(text)
        assert maybe_json(text, "{[") == text
        assert convert_cli_value(KINDS["json"], text) == text


def test_brackets_in_strings_are_not_depth():
    text = json.dumps(["[" * 1000, "\\", '"{' * 1000])
    assert load_json(text) == ["[" * 1000, "\\", '"{' * 1000]


@pytest.mark.parametrize("value", [None, b"[]", 3, ["[]"]])
def test_load_json_of_no_text_is_a_value_error(value):
    with pytest.raises(ValueError):
        load_json(value)


def test_json_depth_is_linear():
    assert_linear(json_depth, lambda n: '["' + '\\"[' * (n // 3) + '"]')
    assert_linear(json_depth, lambda n: "[" * n)
    assert_linear(lambda t: maybe_json(t, "{["), lambda n: "[" + "1, " * (n // 3) + "1]")


@given(st.sampled_from(ARGS_LINES))
def test_format_value_spells_every_real_value(line):
    for value in parse_repr(line).values():
        assert isinstance(format_value(value), str)
