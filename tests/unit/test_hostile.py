"""The hostile-input helpers' own checks: ``assert_linear`` fails a quadratic
function and passes a linear one (else every linear-time property could not fail),
and reads a run by its CPU time, so a busy machine does not fail a linear one."""
from __future__ import annotations

import re
import time

import pytest
from hostile import assert_linear


def quadratic(text: str) -> int:
    # every character compared with every one before it, in Python's own loop
    return sum(1 for i in range(len(text)) for j in range(i) if text[j] == text[i])


def test_a_quadratic_function_fails():
    with pytest.raises(AssertionError, match="not linear"):
        assert_linear(quadratic, lambda n: "a" * n, small=200, noise_s=0.001)


def test_a_quadratic_regex_fails():
    # the shape that made parsers here quadratic: a search that rescans a run
    # of spaces from each start position (about 66x at 1,000 and 8,000 spaces)
    rescan = re.compile(r"[ \t]+x").search
    with pytest.raises(AssertionError, match="not linear"):
        assert_linear(rescan, lambda n: " " * n, small=1000, noise_s=0.001)


def test_a_linear_function_passes():
    assert_linear(lambda text: text.count("a"), lambda n: "a" * n, small=1_000_000, noise_s=0.001)


def test_time_off_the_cpu_does_not_count():
    """A linear function kept off the CPU longer the longer it runs, as a busy
    machine preempts a long run more often than a short one: its wall-clock
    ratio is about 50 (past the bound), its CPU ratio about 8."""
    small = 20_000

    def preempted(text: str) -> int:
        time.sleep(0.1 * (len(text) / (8 * small)) ** 2)
        return sum(1 for _ in text)

    assert_linear(preempted, lambda n: "a" * n, small=small, noise_s=0.001)
