"""Property tests for plugins/module_utils/shared/versions.py over hostile input
(tests/hostile.py): a version an operator writes (min_cuda_version,
vllm_version) and one a program prints (``vllm --version``, a boot log).

What it promises: version_tuple, version_at_least and release_tuple raise
ValueError with a "not a version" message and nothing else, whatever the
numbers (5,000 digits, inf, nan, non-ASCII digits); every number they return
is written in ASCII digits in the input; version_from_output never raises and
returns only a version release_tuple reads; each runs in linear time.
"""
from __future__ import annotations

import pytest
from ansible.module_utils.shared.versions import (
    MAX_DIGITS,
    release_tuple,
    version_at_least,
    version_from_output,
    version_tuple,
)
from hostile import (
    HUGE_NUMBER,
    OUT_OF_RANGE,
    any_text,
    assert_linear,
    assert_numbers_from,
    non_ascii_number,
    out_of_range,
)
from hypothesis import given
from hypothesis import strategies as st

REAL = ["0.32.0", "v0.19.0", "0.20.2rc1.dev9+g01d4d1ad3", "0.6.6.post1", "12.8", "13.0", "580.126.09", "595.84"]


def versions() -> st.SearchStrategy[str]:
    """A real version with one number replaced by a hostile one, glued to text, or arbitrary text."""
    number = out_of_range().map(lambda n: n if isinstance(n, str) else str(n) if abs(n) < 10 ** 4000 else HUGE_NUMBER
                                if isinstance(n, int) else repr(n))

    def replace(version: str, at: int, by: str) -> str:
        parts = version.split(".")
        parts[at % len(parts)] = by
        return ".".join(parts)

    return st.one_of(st.sampled_from(REAL), st.builds(replace, st.sampled_from(REAL), st.integers(0, 3), number),
                     st.builds(lambda a, b: a + b, any_text(50), st.sampled_from(REAL)), any_text(200))


def refuses(fn, *args) -> None:
    """``fn(*args)`` raises ValueError saying "not a ... version", or returns."""
    try:
        fn(*args)
    except ValueError as exc:
        assert str(exc).startswith("not a ") and len(str(exc)) < 200, str(exc)[:200]


@given(versions())
def test_version_tuple_raises_only_its_value_error(text):
    refuses(version_tuple, text)
    refuses(version_at_least, text, "12.8")
    refuses(version_at_least, "12.8", text)
    try:
        parts = version_tuple(text)
    except ValueError:
        return
    assert all(len(str(p)) <= MAX_DIGITS for p in parts)
    assert_numbers_from(parts, text)


@given(versions())
def test_release_tuple_raises_only_its_value_error(text):
    refuses(release_tuple, text)
    try:
        parts = release_tuple(text)
    except ValueError:
        return
    assert_numbers_from([p for p in parts if p], text)


@given(versions())
def test_version_from_output_returns_only_a_readable_version(text):
    found = version_from_output(text)
    assert found is None or (found in text and release_tuple(found))


@pytest.mark.parametrize("value", [v for v in OUT_OF_RANGE if v != "1.5"] + [None, b"12.8", 12.8, 13],
                         ids=lambda v: type(v).__name__ + ":" + (v[:12] if isinstance(v, str) else ""))
def test_a_number_past_range_is_not_a_version(value):
    """int() raised "Exceeds the limit (4300 digits)" on a 5,000-digit part; `\\d` read Arabic-Indic digits."""
    with pytest.raises(ValueError, match="^not a version"):
        version_tuple(value)
    with pytest.raises(ValueError, match="^not a vLLM version"):
        release_tuple(value)
    if isinstance(value, str):
        with pytest.raises(ValueError, match="^not a version"):
            version_tuple("12." + value)


@pytest.mark.parametrize("text", ["12." + HUGE_NUMBER, "12." + "9" * (MAX_DIGITS + 1), non_ascii_number("12") + ".8",
                                  "\uff11\uff12.8", "12.\u00b2"])
def test_version_tuple_refuses_numbers_no_version_has(text):
    with pytest.raises(ValueError, match="^not a version"):
        version_tuple(text)
    with pytest.raises(ValueError, match="^not a version"):
        version_at_least("12.8", text)


@pytest.mark.parametrize("text", ["0." + HUGE_NUMBER, "0.32." + HUGE_NUMBER, "0.32." + "9" * (MAX_DIGITS + 1),
                                  non_ascii_number("0.32.0"), "\uff10.32.0"])
def test_release_tuple_refuses_numbers_no_release_has(text):
    """A cut number is never read: 0.32.<10 digits> is refused, not (0, 32, 0)."""
    with pytest.raises(ValueError, match="^not a vLLM version"):
        release_tuple(text)


def test_version_from_output_skips_a_version_release_tuple_cannot_read():
    assert version_from_output("vllm 0.32.0\n0." + HUGE_NUMBER) == "0.32.0"
    assert version_from_output("0." + HUGE_NUMBER) is None
    assert version_from_output(non_ascii_number("0.32.0")) is None


def test_the_parsers_are_linear():
    def each(text):
        for fn in (version_tuple, release_tuple):
            try:
                fn(text)
            except ValueError:
                pass
        version_from_output(text)

    assert_linear(each, lambda n: "1." * (n // 2) + "x")
    assert_linear(each, lambda n: "0." + "9" * n)
    assert_linear(each, lambda n: "v0.1 " * (n // 5))
