"""Tests for plugins/module_utils/host/preflight_clock.py: the clock skew of an
engine's hosts against its head.
"""
from __future__ import annotations

import pytest
from ansible.module_utils.host.preflight_clock import check_clock_skew


@pytest.mark.parametrize(
    "offsets,ok,detail",
    [
        ({"spark1": 0.31, "spark2": 0.35}, True,
         "engine engine_a: spark2 +0.040 s against the head spark1 (at most 2 s)"),
        ({"spark1": 0.31, "spark2": -4.69}, False,
         "engine engine_a: spark2 -5.000 s against the head spark1 (at most 2 s)"),
        ({"spark1": 0.31}, True, "engine engine_a: one host (spark1), nothing to compare"),
        ({"spark1": 0.31, "spark2": None}, False, "engine engine_a: no clock sample from spark2"),
    ],
)
def test_check_clock_skew(offsets, ok, detail):
    check = check_clock_skew(offsets, "spark1", 2.0, "engine_a")
    assert (check.check, check.ok, check.detail) == ("clock_skew", ok, detail)
    assert bool(check.hint) is not ok


def test_clock_skew_without_the_head():
    check = check_clock_skew({"spark2": 0.1}, "spark1", 2.0)
    assert check.ok is False and check.detail == "no clock sample from the head spark1"
