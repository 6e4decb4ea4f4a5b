"""Tests for plugins/module_utils/kv/not_found.py: why a real capture has
no capacity line, and what the message says to do."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.module_utils.kv.not_found import gather_hints, not_found_message
from ansible.module_utils.kv.scanner import scan_text
from ansible.module_utils.kv.sources import file_chunks, text_chunks
from kv_logs import BOOTLOGS, CPU, RAY, concat, parse


def explain(path: Path) -> str:
    report = parse(path)
    assert not report.found
    diag = gather_hints(file_chunks(str(path), report.boot_offset))
    return not_found_message(report, diag, path.name)


SEARCHED = ("(searched %d bytes for 'KV cache size: N tokens', '# GPU blocks: N' and 'Maximum concurrency for M "
            "tokens per request: X.XXx').")
HEAD_LOG = ("only the node that runs the engine core prints the line. Read the head node's log instead (node rank 0, "
            "where `vllm serve` runs without --headless).")
STARTING = ("The engine may still be starting (the line follows model loading and memory profiling), or this is not "
            "the vLLM server's output.")


@pytest.mark.parametrize("path, parts, absent", [
    (CPU / "boot-11-twonode-tp2-mp-node1-headless.log",
     ["this looks like a worker node's log ((MainProcess pid=31686) INFO 11-29 16:12:39 [arg_utils.py:2472] "
      "Inferred data_parallel_rank 0 from node_rank 1)", HEAD_LOG, "vLLM version in that boot: 0.32.0."],
     ["failed", STARTING]),
    (RAY / "ray-start-2node-worker.log", ["a Ray node's own `ray start` output", HEAD_LOG], ["failed"]),
    (CPU / "boot-05-tp2-mp-autobind-FAIL.log",
     ["The engine failed to start: AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local "
      "CPUWorkers."], [HEAD_LOG, STARTING]),
    (CPU / "boot-07-no-kv-size-FAIL.log",
     ["The engine failed to start: ValueError: Available memory on node 0 (12.32/13.96 GiB) on startup is less "
      "than desired CPU memory utilization"], [HEAD_LOG]),
    (CPU / "boot-10-tp2-ray-FAIL.log",
     ["The engine failed to start: ValueError: current platform cpu does not support ray. Fix that"], [HEAD_LOG]),
    (RAY / "boot-11-VLLM_TARGET_DEVICE-cpu-bypasses-plugin-FAIL.log",
     ["The engine failed to start: ValueError: current platform cpu does not support ray."], [HEAD_LOG]),
    (BOOTLOGS / "26_v1_failed_start_after_available_mem_issue32105.log",
     ["The engine failed to start: (EngineCore_DP0 pid=3258054) ERROR 01-11 03:46:48 [core.py:936] EngineCore "
      "failed to start. Fix that"], [HEAD_LOG]),
    (RAY / "boot-10-second-server-pg-pending-KILLED.log",
     ["The engine was still waiting for Ray resources ((EngineCore pid=29325) INFO 11-29 17:19:41", "`ray status`"],
     [HEAD_LOG, "failed"]),
    # The head's EngineCore output: not a worker node, just no line yet.
    (BOOTLOGS / "25_v1_ray_nested_prefixes_no_kv_dgx_spark_1.log", [STARTING], [HEAD_LOG, "failed"]),
    (BOOTLOGS / "30_v1_083_health_and_usage_lines_no_size_issue16259.log", [STARTING], [HEAD_LOG]),
])
def test_not_found_messages(path, parts, absent):
    msg = explain(path)
    assert msg.startswith("No KV cache capacity line in %s %s" % (path.name, SEARCHED % path.stat().st_size))
    for part in parts:
        assert part in msg
    for part in absent:
        assert part not in msg


def test_not_found_message_names_the_latest_boot():
    text = concat(CPU / "boot-04-scheduler-flags-blocks-override-40.log", CPU / "boot-05-tp2-mp-autobind-FAIL.log")
    report = scan_text(text)
    diag = gather_hints(text_chunks(text, report.boot_offset))
    msg = not_found_message(report, diag, "content")
    assert re.match(r"No KV cache capacity line in the latest boot of content \(searched %d bytes, latest boot "
                    r"from byte %d for" % (len(text.encode()), report.boot_offset), msg)
    assert "AssertionError: Not enough allowed NUMA nodes" in msg
