"""Tests for plugins/module_utils/flags/history.py."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.history import FLAG_HISTORY, missing_flag_message


@pytest.mark.parametrize("option,dest,version,message", [
    ("--scheduler-reserve-full-isl", "scheduler_reserve_full_isl", "0.18.0",
     "vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)"),
    ("--watermark", "watermark", "0.23.0", "vLLM 0.23.0 has no --watermark (added in 0.24.0)"),
    ("--watermark", "watermark", None, "this vLLM has no --watermark (added in 0.24.0)"),
    ("--kv-cache-memory-bytes", "kv_cache_memory_bytes", "0.10.1.1",
     "vLLM 0.10.1.1 has no --kv-cache-memory-bytes (added in 0.11.0)"),
    ("--bogus", "bogus", "0.32.0", "vLLM 0.32.0 has no --bogus"),
    ("--watermark", "watermark", "0.32.0",
     "vLLM 0.32.0 has no --watermark, although it exists since 0.24.0; "
     "is the help text from this version?"),
])
def test_missing_flag_message(option, dest, version, message):
    assert missing_flag_message(option, dest, version) == message


def test_history_is_cited():
    assert FLAG_HISTORY["scheduler_reserve_full_isl"].added_in == "0.19.0"
    assert FLAG_HISTORY["watermark"].added_in == "0.24.0"
    for hist in FLAG_HISTORY.values():
        assert hist.citation.startswith("docs/reference/vllm.md 2.")
