"""The hostile-input helpers' own checks: ``assert_linear`` fails a quadratic
function and passes a linear one (else every linear-time property could not fail)."""
from __future__ import annotations

import pytest

from hostile import assert_linear


def quadratic(text: str) -> int:
    # every character compared with every one before it, in Python's own loop
    return sum(1 for i in range(len(text)) for j in range(i) if text[j] == text[i])


def test_a_quadratic_function_fails():
    with pytest.raises(AssertionError, match="not linear"):
        assert_linear(quadratic, lambda n: "a" * n, small=200, floor_s=0.001)


def test_a_linear_function_passes():
    assert_linear(lambda text: text.count("a"), lambda n: "a" * n, small=1_000_000, floor_s=0.001)
