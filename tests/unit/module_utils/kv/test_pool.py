"""Tests for plugins/module_utils/kv/pool.py: full-context sessions from
the real captures, and the module's return keys."""
from __future__ import annotations

import pytest
from kv_logs import BOOTLOGS, parse


@pytest.mark.parametrize("name, context, sessions", [
    ("02_v1_080dev_kv_tokens_pr13596.log", None, 997),
    ("02_v1_080dev_kv_tokens_pr13596.log", 4096, 498),
    # Hybrid before v0.20.1: the token figure gives 0, the ratio 2.
    ("13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log", 120000, 0),
    ("13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log", None, 2),
    # V0: no token figure; the ratio counts for its own context only.
    ("04_v0_stripped_prefix_issue10517.log", 29000, 0),
    ("04_v0_stripped_prefix_issue10517.log", 20000, None),
    ("05_v0_04x_tp2_distributed_gpu_executor_issue5248.log", None, None),
    ("11_v1_tp4_no_concurrency_line_issue21348.log", None, None),
    ("11_v1_tp4_no_concurrency_line_issue21348.log", 32768, 5),
])
def test_full_context_sessions(name, context, sessions):
    assert parse(BOOTLOGS / name).full_context_sessions(context) == sessions


def test_the_result_keys_in_the_modules_order():
    report = parse(BOOTLOGS / "13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log")
    result = report.as_result(120000)
    assert list(result) == ["found", "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "device",
                            "gpu_blocks", "cpu_blocks", "available_kv_cache_memory_gib", "engines", "per_engine",
                            "vllm_version", "full_context_sessions", "evidence"]
    assert result["per_engine"] == [{
        "label": "EngineCore_DP0", "kv_cache_tokens": 75840, "max_concurrency": 2.48, "concurrency_tokens": 120000,
        "device": "GPU", "gpu_blocks": None, "cpu_blocks": None, "available_kv_cache_memory_gib": 2.3,
        "capacity_lines": 3}]
    assert list(result["per_engine"][0]) == ["label", "kv_cache_tokens", "max_concurrency", "concurrency_tokens",
                                             "device", "gpu_blocks", "cpu_blocks", "available_kv_cache_memory_gib",
                                             "capacity_lines"]
    # The report's figures are its smallest engine's.
    engine = result["per_engine"][0]
    assert report.figures() == {k: v for k, v in engine.items() if k not in ("label", "capacity_lines")}
