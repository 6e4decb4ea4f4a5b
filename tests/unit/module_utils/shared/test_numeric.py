"""Tests for plugins/module_utils/shared/numeric.py: finite() and finite_float() read
a number or nothing, shown() and text() quote any value; none of them raises."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from ansible.module_utils.shared.numeric import SHOWN_CHARS, finite, finite_float, shown, text
from filter_plugins import top_level_imports
from hostile import HUGE_DIGITS, OUT_OF_RANGE, out_of_range
from hypothesis import given
from hypothesis import strategies as st


def ids(value) -> str:
    """A test id that does not repr a 5,000-digit int (pytest's would raise)."""
    return shown(value, 20)

NUMERIC_PY = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "shared" / "numeric.py"


@pytest.mark.parametrize("value, expected", [
    (0, 0), (3, 3), (-2.5, -2.5), (1e308, 1e308), (10 ** 300, 10 ** 300),
    (float("inf"), None), (float("-inf"), None), (float("nan"), None), (10 ** 400, None), (-10 ** HUGE_DIGITS, None),
    (True, None), ("3", None), (None, None), ([1], None),
], ids=ids)
def test_finite(value, expected):
    assert finite(value) == expected
    assert finite(value) is None or type(finite(value)) is type(value)


@pytest.mark.parametrize("value, expected", [
    (2, 2.0), ("2.5", 2.5), (" 3 ", 3.0), (1e308, 1e308), ("1e308", 1e308),
    ("1e999", None), ("9" * 5000, None), (10 ** 400, None), ("inf", None), ("nan", None), (float("nan"), None),
    (True, None), (None, None), ("many", None), ([1], None),
], ids=ids)
def test_finite_float(value, expected):
    """float() of an int past float's range raised OverflowError; "1e999" read as inf."""
    assert finite_float(value) == expected


@given(st.one_of(out_of_range(), st.lists(out_of_range(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                                          out_of_range(), max_size=2)))
def test_nothing_raises_and_every_number_is_finite(value):
    number = finite(value)
    assert number is None or math.isfinite(float(number))
    assert finite_float(value) is None or math.isfinite(finite_float(value))
    assert len(shown(value)) <= SHOWN_CHARS
    text(value)


@pytest.mark.parametrize("value, expected", [
    ("latest", "'latest'"), (12, "12"), (1.5, "1.5"), (float("nan"), "nan"), (None, "None"),
    (10 ** HUGE_DIGITS, "a number of more than 30 digits"), (-(10 ** 40), "a number of more than 30 digits"),
    ([10 ** HUGE_DIGITS], "a list"), ("x" * 100, "'" + "x" * 76 + "..."),
], ids=ids)
def test_shown(value, expected):
    """repr() of a 5,000-digit int, or of a list holding one, raised ValueError."""
    assert shown(value) == expected


@pytest.mark.parametrize("value, expected", [
    ("8000", "8000"), (8000, "8000"), (None, "None"), ("x" * 100, "x" * 100), (10 ** 40, "1" + "0" * 40),
    (10 ** HUGE_DIGITS, "a number of more than 30 digits"), ([10 ** HUGE_DIGITS], "a list"),
], ids=ids)
def test_text(value, expected):
    assert text(value) == expected


def test_out_of_range_holds_what_broke_the_parsers():
    assert {"1e999", "inf", "nan"} <= set(OUT_OF_RANGE) and 10 ** HUGE_DIGITS in OUT_OF_RANGE


def test_standard_library_only():
    # a leaf that any module_utils file may import (its docstring)
    assert top_level_imports(NUMERIC_PY) <= {"__future__", "math"}
