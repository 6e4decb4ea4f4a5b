"""plugins/module_utils/host/unified_memory.py: vLLM's start rule on a unified-memory GPU
(free = MemAvailable, refused below ceil(total x utilization)) with a margin, on the figures
Spark operators reported (docs/design/spark-field-facts/02-vllm-uma-free-memory-check.md cites
each), and vLLM's own refusal read from real messages; hostile input: UnifiedMemoryError only."""
from __future__ import annotations

import math

import pytest
from ansible.module_utils.host import unified_memory as u
from hostile import MIB, assert_linear, out_of_range, raises_only
from hypothesis import given
from hypothesis import strategies as st

GIB = u.GIB
KB = 1024


def test_vllm_48140_gb10_at_half_is_refused_and_names_what_fits():
    """GB10, vLLM 0.24: MemAvailable=59063644 kB against 0.5 of 119.56 GiB (59.78 GiB)."""
    fit = u.fits("spark1", 59063644 * KB, int(119.56 * GIB), 0.5, 0)
    assert not fit.ok
    assert fit.requested_bytes == math.ceil(int(119.56 * GIB) * 0.5)
    assert fit.largest_utilization == 0.47
    assert fit.message.startswith("spark1: MemAvailable 56.3 GiB is short of vLLM's 59.8 GiB "
                                  "(gpu_memory_utilization 0.5 of 119.6 GiB) plus the 0.0 GiB margin")
    assert "set vllm_server_args.gpu_memory_utilization to 0.47 or less" in fit.message
    assert "drop_caches" in fit.message and "Nothing was stopped" in fit.message


def test_the_two_spark_report_0_87_never_fits_and_0_83_does():
    """MiaAI-Lab #47: free memory at boot 101.3-102.2 GiB of 121.69 GiB; 0.87 wants 105.87 GiB,
    the operators run 0.82-0.83."""
    total, available = int(121.69 * GIB), int(101.3 * GIB)
    assert not u.fits("spark1", available, total, 0.87, 0).ok
    assert u.fits("spark1", available, total, 0.87, 0).largest_utilization == 0.83
    assert u.fits("spark1", available, total, 0.83, 0).ok
    # The head needs more than the worker: a 2 GiB margin leaves 0.81.
    assert u.fits("spark1", available, total, 0.83, 2 * GIB).largest_utilization == 0.81


def test_the_largest_utilization_fits_by_vllms_own_rounding():
    for available in (1, GIB, 50 * GIB + 12345, 101 * GIB):
        fit = u.fits("h", available, 120 * GIB, 0.9, 0)
        if fit.largest_utilization:
            assert u.fits("h", available, 120 * GIB, fit.largest_utilization, 0).ok
            assert not u.fits("h", available, 120 * GIB, round(fit.largest_utilization + 0.01, 2), 0).ok


def test_nothing_fits():
    fit = u.fits("h", GIB, 120 * GIB, 0.9, 2 * GIB)
    assert (fit.ok, fit.largest_utilization) == (False, 0.0)
    assert "nothing that fits is left" in fit.message


@pytest.mark.parametrize("args, words", [
    ((-1, GIB, 0.5, 0), "MemAvailable"), ((GIB, 0, 0.5, 0), "total memory is 0"),
    ((GIB, GIB, 0, 0), "above 0"), ((GIB, GIB, 1.2, 0), "at most 1"), ((GIB, GIB, float("nan"), 0), "above 0"),
    ((GIB, GIB, True, 0), "above 0"), ((GIB, GIB, 0.5, -1), "margin"), ((2.5, GIB, 0.5, 0), "MemAvailable"),
])
def test_bad_figures_are_the_documented_error(args, words):
    with pytest.raises(u.UnifiedMemoryError, match=words):
        u.fits("h", *args)


@pytest.mark.parametrize("line, want", [
    # https://github.com/vllm-project/vllm/issues/33297
    ("(EngineCore_DP0 pid=972) ERROR 01-28 15:59:42 [core.py:935] ValueError: Free memory on device cuda:0 "
     "(1.53/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU "
     "memory utilization or reduce GPU memory used by other processes.", ("cuda:0", 1.53, 22.05, 0.9, 19.84)),
    # https://github.com/vllm-project/vllm-omni/issues/276 (no device name)
    ("ValueError: Free memory on device (0.49/79.32 GiB) on startup is less than desired GPU memory utilization "
     "(0.6, 47.59 GiB). Decrease GPU memory utilization", ("", 0.49, 79.32, 0.6, 47.59)),
])
def test_vllms_refusal_is_read(line, want):
    r = u.read_refusal("INFO before\n" + line + "\n")
    assert (r.device, r.free_gib, r.total_gib, r.utilization, r.requested_gib) == want


def test_no_refusal_and_a_cut_one_read_none():
    assert u.read_refusal("vLLM API server version 0.32.0\n") is None
    assert u.read_refusal("ValueError: Free memory on device cuda:0 (22.76/24.0 GiB) on startup is less") is None


@given(out_of_range(), out_of_range(), out_of_range(), out_of_range())
def test_any_figures_give_a_fit_or_the_documented_error(available, total, utilization, margin):
    fit = raises_only(u.UnifiedMemoryError, u.fits, "h", available, total, utilization, margin)
    assert fit is None or 0 <= fit.largest_utilization <= 1


@given(st.text(max_size=400))
def test_any_log_reads_a_refusal_or_none(text):
    raises_only(u.UnifiedMemoryError, u.read_refusal, text)


def test_reading_a_log_is_linear():
    assert_linear(u.read_refusal, lambda size: "Free memory on device (1" * (size // 24), small=MIB // 4, factor=8)


@pytest.mark.parametrize("utilization", [10 ** 5000, -10 ** 5000, float("inf"), float("-inf"), 1e308],
                         ids=["5000-digits", "minus-5000-digits", "inf", "-inf", "1e308"])
def test_a_utilization_past_range_is_the_documented_error(utilization):
    with pytest.raises(u.UnifiedMemoryError, match="at most 1"):
        u.fits("h", GIB, GIB, utilization, 0)
