"""Tests for plugins/module_utils/host/preflight_gpu.py: the GPU checks over every
nvidia-smi capture in tests/fixtures/nvidia-smi/ and /proc/meminfo over tests/fixtures/host-probes/
(each folder's INDEX.md gives the sources and expected values).
"""
from __future__ import annotations

import pytest
from ansible.module_utils.host.gpu_preflight import GIB, Check, PreflightError
from ansible.module_utils.host.nvidia_smi import NvidiaSmiError, merge, parse_csv, parse_table
from ansible.module_utils.host.preflight_gpu import (
    check_cuda_version,
    check_gpu_count,
    check_gpu_driver,
    check_gpu_memory,
    parse_meminfo,
)
from host_probes import GB10_CSV, GB10_TABLE, HOST, host, smi

GB10_MEMINFO = (HOST / "meminfo_gb10_dgx_spark_notes.txt").read_text()


def gb10():
    return merge(parse_table(smi(GB10_TABLE)), parse_csv(smi(GB10_CSV)))


# (capture, gpu_count, cuda ok against 12.8, memory ok against 100 GiB, memory detail piece)
TABLES = [
    (GB10_TABLE, 1, True, True, "host MemTotal from /proc/meminfo 121.7 GiB"),
    ("19_h100_table_535_gvisor10413.txt", 1, False, False, "GPU 0 NVIDIA H100 80GB HBM3: 79.6 GiB"),
    ("21_rtx4090_2gpu_table_rlinf255.txt", 2, False, False, "GPU 1 NVIDIA GeForce RTX 4090: 24.0 GiB"),
    ("24_b200_kmd_umd_header_sglang27487.txt", 2, True, True, "GPU 1 NVIDIA B200: 179.1 GiB"),
    ("26_a800_mig_enabled_table_exporter203.txt", 1, False, False, "GPU 0 NVIDIA A800-SXM4-80GB: 80.0 GiB"),
]


@pytest.mark.parametrize("name,count,cuda_ok,memory_ok,piece", TABLES, ids=[t[0][:2] for t in TABLES])
def test_gpu_checks_over_tables(name, count, cuda_ok, memory_ok, piece):
    report = parse_table(smi(name))
    driver = check_gpu_driver(report)
    assert driver.ok and f"nvidia-smi sees {count} GPU(s)" in driver.detail
    assert check_gpu_count(report, 1).ok
    assert check_gpu_count(report, 3).ok is False
    assert check_cuda_version(report, "12.8").ok is cuda_ok
    memory, source = check_gpu_memory(report, 100, GB10_MEMINFO)
    assert memory.ok is memory_ok
    assert piece in memory.detail
    assert source == ("host meminfo" if report.unified_memory else "gpu")
    assert bool(memory.hint) is not memory_ok


def test_gb10_memory_falls_back_to_meminfo():
    memory, source = check_gpu_memory(gb10(), 100, GB10_MEMINFO)
    assert source == "host meminfo"
    assert memory == Check(
        "gpu_memory",
        True,
        "GPU 0 NVIDIA GB10: unified memory (nvidia-smi reports [N/A] / Not Supported), host MemTotal from "
        "/proc/meminfo 121.7 GiB (at least 100 GiB each)",
    )
    # 127600748 kB is 121.689 GiB, not 128: the "128 GB" on the box does not pass 122
    assert check_gpu_memory(gb10(), 121.6, GB10_MEMINFO)[0].ok
    short, _ = check_gpu_memory(gb10(), 121.7, GB10_MEMINFO)
    assert short.ok is False
    assert short.detail == (
        "GPU 0 NVIDIA GB10: unified memory (nvidia-smi reports [N/A] / Not Supported), host MemTotal from "
        "/proc/meminfo 121.7 GiB, too small (at least 121.7 GiB each)"
    )


def test_gb10_memory_without_meminfo_fails_and_says_why():
    memory, source = check_gpu_memory(gb10(), 100, None)
    assert source == "host meminfo"
    assert memory.ok is False
    assert memory.detail == (
        "GPU 0 NVIDIA GB10 has unified memory (nvidia-smi: [N/A] / Not Supported)"
        " and /proc/meminfo has no MemTotal line"
    )


def test_memory_not_queried_is_not_unified():
    # 11 queried no memory: no size and no [N/A], so nothing to fall back on.
    memory, source = check_gpu_memory(parse_csv(smi("11_compute_cap_titanv_rtx5880_triton8070.txt")), 1, GB10_MEMINFO)
    assert (memory.ok, source) == (False, None)
    assert memory.detail == "GPU 0 NVIDIA TITAN V: nvidia-smi reported no memory total"


def test_cuda_version_details():
    detail = check_cuda_version(parse_table(smi(GB10_TABLE)), "12.8").detail
    assert detail == "the driver supports CUDA 13.0, 12.8 required"
    old = check_cuda_version(parse_table(smi("21_rtx4090_2gpu_table_rlinf255.txt")), "12.8")
    assert old.detail == "the driver supports CUDA 12.4, 12.8 required (driver 550.163.01)"
    assert "R570" in old.hint
    # a CSV query has no CUDA version at all
    none = check_cuda_version(parse_csv(smi("09_l40s_csv_units_akash99.txt")), "12.8")
    assert none.ok is False and none.detail.startswith("nvidia-smi's header shows no CUDA version")


@pytest.mark.parametrize("name,detail", [
    (GB10_TABLE, "the driver supports CUDA 13.0, no minimum set"),
    # a CSV query alone has no CUDA version: still reported, never failed
    ("09_l40s_csv_units_akash99.txt", "the driver supports CUDA unknown, no minimum set"),
])
def test_cuda_version_without_a_minimum_is_reported_only(name, detail):
    report = (parse_csv if "_csv_" in name else parse_table)(smi(name))
    assert check_cuda_version(report, None) == Check("cuda_version", True, detail)


@pytest.mark.parametrize(
    "name,kind",
    [("35_fail_no_driver_shine_cluster50.txt", "driver_not_loaded"),
     ("36_fail_mismatch_shine_cluster30.txt", "driver_library_mismatch")],
)
def test_driver_failures(name, kind):
    with pytest.raises(NvidiaSmiError) as caught:
        parse_table(smi(name))
    check = check_gpu_driver(None, caught.value)
    assert check.ok is False
    assert check.detail.startswith(f"nvidia-smi failed ({kind}): ")
    assert check.detail.endswith("GPU count, memory and CUDA were not checked.")
    assert check.hint == caught.value.hint


def test_unreadable_output_gets_a_generic_hint():
    check = check_gpu_driver(None, NvidiaSmiError("cannot read the memory cell 'x' of GPU 0"))
    assert check.detail.startswith("nvidia-smi failed (unreadable_output): cannot read")
    assert "tests/fixtures/nvidia-smi/" in check.hint


def test_gpu_driver_detail():
    assert check_gpu_driver(gb10()).detail == "driver 580.126.09, CUDA 13.0; nvidia-smi sees 1 GPU(s): 0 NVIDIA GB10"


# ---- /proc/meminfo ---------------------------------------------------------

def test_meminfo_gb10():
    values = parse_meminfo(GB10_MEMINFO)
    assert values["MemTotal"] == 127600748 * 1024
    assert round(values["MemTotal"] / GIB, 1) == 121.7
    assert round(values["MemAvailable"] / GIB, 1) == 107.3


def test_meminfo_captured():
    values = parse_meminfo(host("meminfo_head_dev_container.txt"))
    assert values["MemTotal"] == 24684092 * 1024
    assert set(values) == {"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached"}


@pytest.mark.parametrize("text", ["", None, "MemFree:        19327500 kB\n"])
def test_meminfo_without_memtotal(text):
    with pytest.raises(PreflightError) as caught:
        parse_meminfo(text)
    assert str(caught.value) == "/proc/meminfo has no MemTotal line"
