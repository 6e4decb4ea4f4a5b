"""Tests for plugins/module_utils/host/nvidia_smi.py, table-driven over every real
capture in tests/fixtures/nvidia-smi/ and asserted to the values its INDEX.md
gives. A leading ``$ command`` line in a capture is the pasted prompt, not
nvidia-smi's output, and is split off before parsing.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.host.nvidia_smi import (
    FAILURES,
    QUERY_ARGS,
    QUERY_FIELDS,
    NvidiaSmiError,
    NvidiaSmiFailure,
    classify_failure,
    merge,
    parse_csv,
    parse_table,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-smi"


def load(name: str) -> str:
    """A capture's nvidia-smi output, without the pasted ``$ command`` line."""
    lines = (FIXTURES / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("$ ")) + "\n"


def gpu_view(report) -> list:
    return [
        {
            "index": g.index,
            "name": g.name,
            "bus_id": g.bus_id,
            "memory_total_mib": g.memory_total_mib,
            "memory_used_mib": g.memory_used_mib,
            "mig_mode": g.mig_mode,
            "compute_cap": g.compute_cap,
            "unified_memory": g.unified_memory,
            "extra": g.extra,
        }
        for g in report.gpus
    ]


def gpu(index, name=None, bus=None, total=None, used=None, mig=None, cc=None, unified=False, extra=None):
    return {
        "index": index,
        "name": name,
        "bus_id": bus,
        "memory_total_mib": total,
        "memory_used_mib": used,
        "mig_mode": mig,
        "compute_cap": cc,
        "unified_memory": unified,
        "extra": extra or {},
    }


# (fixture, parser, columns for header-less CSV, driver, cuda, gpus) -- from INDEX.md.
CASES = [
    (
        "01_gb10_csv_memory_na_unsloth10283.txt", "csv", None, None, None,
        [gpu(0, unified=True)],
    ),
    (
        "06_gb10_table_580_126_arctictraining345.txt", "table", None, "580.126.09", "13.0",
        [gpu(0, "NVIDIA GB10", "0000000F:01:00.0", unified=True)],
    ),
    (
        "09_l40s_csv_units_akash99.txt", "csv", None, "595.71.05", None,
        [
            gpu(0, "NVIDIA L40S", "00000000:01:00.0", 46068, extra={"pci.device_id": "0x26B910DE"}),
            gpu(1, "NVIDIA L40S", "00000000:91:00.0", 46068, extra={"pci.device_id": "0x26B910DE"}),
        ],
    ),
    (
        "10_h100nvl_csv_noheader_akash91.txt", "csv", ["name", "pci.device_id"], None, None,
        [gpu(0, "NVIDIA H100 NVL", extra={"pci.device_id": "0x232110DE"})],
    ),
    (
        "11_compute_cap_titanv_rtx5880_triton8070.txt", "csv", None, "570.86.15", None,
        [
            gpu(0, "NVIDIA TITAN V", cc="7.0", extra={"compute_mode": "Default"}),
            gpu(1, "NVIDIA RTX 5880 Ada Generation", cc="8.9", extra={"compute_mode": "Default"}),
        ],
    ),
    (
        "19_h100_table_535_gvisor10413.txt", "table", None, "535.129.03", "12.2",
        [gpu(0, "NVIDIA H100 80GB HBM3", "00000000:04:00.0", 81559, 72459, "Disabled")],
    ),
    (
        "21_rtx4090_2gpu_table_rlinf255.txt", "table", None, "550.163.01", "12.4",
        [
            gpu(0, "NVIDIA GeForce RTX 4090", "00000000:4E:00.0", 24564, 507),
            gpu(1, "NVIDIA GeForce RTX 4090", "00000000:4F:00.0", 24564, 459),
        ],
    ),
    (
        "24_b200_kmd_umd_header_sglang27487.txt", "table", None, "610.43.02", "13.3",
        [
            gpu(0, "NVIDIA B200", "00000000:63:00.0", 183359, 0, "Disabled"),
            gpu(1, "NVIDIA B200", "00000000:68:00.0", 183359, 0, "Disabled"),
        ],
    ),
    (
        "26_a800_mig_enabled_table_exporter203.txt", "table", None, "535.86.10", "12.2",
        [gpu(0, "NVIDIA A800-SXM4-80GB", "00000000:18:00.0", 81920, 36537, "Enabled")],
    ),
    (
        "40_orin_table_bus_na_driver_na_oe4t17.txt", "table", None, None, "12.2",
        [gpu(0, "Orin (nvgpu)", unified=True)],
    ),
    (
        "41_orin_table_bus_na_540_4_ultralytics20680.txt", "table", None, "540.4.0", "12.6",
        [gpu(0, "Orin (nvgpu)", unified=True)],
    ),
]

FAILURE_CASES = [
    ("35_fail_no_driver_shine_cluster50.txt", "driver_not_loaded", "couldn't communicate with the NVIDIA driver"),
    ("36_fail_mismatch_shine_cluster30.txt", "driver_library_mismatch", "Driver/library version mismatch"),
]


def test_every_capture_is_asserted():
    covered = {c[0] for c in CASES} | {c[0] for c in FAILURE_CASES}
    on_disk = {p.name for p in FIXTURES.glob("*.txt")}
    assert on_disk - covered == set(), "a capture without a test case"


@pytest.mark.parametrize("name,parser,columns,driver,cuda,gpus", CASES, ids=[c[0][:2] for c in CASES])
def test_capture(name, parser, columns, driver, cuda, gpus):
    text = load(name)
    report = parse_table(text) if parser == "table" else parse_csv(text, columns=columns)
    assert report.driver_version == driver
    assert report.cuda_version == cuda
    assert report.gpu_count == len(gpus)
    assert gpu_view(report) == gpus
    assert report.unified_memory == any(g["unified_memory"] for g in gpus)


@pytest.mark.parametrize("name,kind,words", FAILURE_CASES, ids=[c[0][:2] for c in FAILURE_CASES])
@pytest.mark.parametrize("parser", [parse_table, parse_csv], ids=["table", "csv"])
def test_failure_capture(name, kind, words, parser):
    with pytest.raises(NvidiaSmiFailure) as caught:
        parser(load(name))
    assert caught.value.kind == kind
    assert words in str(caught.value)
    assert caught.value.hint


@pytest.mark.parametrize("name", ["01_gb10_csv_memory_na_unsloth10283.txt",
                                  "06_gb10_table_580_126_arctictraining345.txt",
                                  "40_orin_table_bus_na_driver_na_oe4t17.txt",
                                  "41_orin_table_bus_na_540_4_ultralytics20680.txt"])
def test_unified_memory_is_none_never_zero(name):
    text = load(name)
    report = parse_csv(text) if "csv" in name else parse_table(text)
    assert report.gpus[0].memory_total_mib is None
    assert report.gpus[0].memory_total_mib != 0
    assert report.unified_memory is True


def test_merge_gb10_table_and_csv():
    report = merge(parse_table(load("06_gb10_table_580_126_arctictraining345.txt")),
                   parse_csv(load("01_gb10_csv_memory_na_unsloth10283.txt")))
    assert report.source == "table+csv"
    assert (report.driver_version, report.cuda_version) == ("580.126.09", "13.0")
    assert report.gpu_count == 1
    g = report.gpus[0]
    assert (g.name, g.bus_id, g.memory_total_mib, g.unified_memory) == ("NVIDIA GB10", "0000000F:01:00.0", None, True)


@pytest.mark.parametrize("name", ["40_orin_table_bus_na_driver_na_oe4t17.txt",
                                  "41_orin_table_bus_na_540_4_ultralytics20680.txt"])
def test_an_integrated_gpu_whose_bus_id_reads_na_is_one_gpu(name):
    """Jetson prints N/A where the Bus-Id goes; a row anchored on a PCI address
    read zero GPUs and no error, so gpu_count failed on a host that has one."""
    report = parse_table(load(name))
    assert report.gpu_count == 1
    g = report.gpus[0]
    assert (g.index, g.name, g.bus_id, g.memory_total_mib, g.unified_memory) == (0, "Orin (nvgpu)", None, None, True)


def test_merge_an_integrated_gpu_with_its_query():
    # The GB10 query stands in for the Orin host's own (both one GPU, memory [N/A]).
    report = merge(parse_table(load("41_orin_table_bus_na_540_4_ultralytics20680.txt")),
                   parse_csv(load("01_gb10_csv_memory_na_unsloth10283.txt")))
    assert report.gpu_count == 1
    g = report.gpus[0]
    assert (g.name, g.bus_id, g.memory_total_mib, g.unified_memory) == ("Orin (nvgpu)", None, None, True)


@pytest.mark.parametrize("cell", ["N/AN/A", "NA", "N/A", "n/a", "N/A0000:01:00.0"],
                         ids=["glued", "no-slash", "no-space-after", "lower-case", "glued-address"])
def test_a_bus_id_cell_that_is_neither_an_address_nor_na_is_no_gpu(cell):
    lines = load("41_orin_table_bus_na_540_4_ultralytics20680.txt").splitlines()
    row = next(i for i, line in enumerate(lines) if "Orin (nvgpu)" in line)
    lines[row] = lines[row].replace("| N/A              N/A |", f"|{cell}|" if cell == "N/A" else f"| {cell}  N/A |")
    assert parse_table("\n".join(lines)).gpus == []


def test_merge_takes_full_names_from_the_query():
    # Two hosts' captures stand in for one host's table and query (both 2 GPUs).
    table = parse_table(load("21_rtx4090_2gpu_table_rlinf255.txt"))
    query = parse_csv(load("11_compute_cap_titanv_rtx5880_triton8070.txt"))
    report = merge(table, query)
    assert [g.name for g in report.gpus] == ["NVIDIA TITAN V", "NVIDIA RTX 5880 Ada Generation"]
    assert [g.compute_cap for g in report.gpus] == ["7.0", "8.9"]
    # memory was not in that query: the table's stays
    assert [g.memory_total_mib for g in report.gpus] == [24564, 24564]
    assert report.cuda_version == "12.4"


def test_merge_without_query_or_with_another_gpu_count_keeps_the_table():
    table = parse_table(load("24_b200_kmd_umd_header_sglang27487.txt"))
    assert merge(table, None) is table
    assert merge(table, parse_csv(load("01_gb10_csv_memory_na_unsloth10283.txt"))) is table


def test_noheader_csv_needs_the_column_order():
    with pytest.raises(NvidiaSmiError) as caught:
        parse_csv(load("10_h100nvl_csv_noheader_akash91.txt"))
    assert str(caught.value) == "the CSV output has no header; pass the query's column order (columns=...)"


def test_csv_row_with_the_wrong_width_is_refused():
    with pytest.raises(NvidiaSmiError) as caught:
        parse_csv(load("10_h100nvl_csv_noheader_akash91.txt"), columns=["name"])
    assert str(caught.value) == "CSV row 1 has 2 values for 1 columns: NVIDIA H100 NVL, 0x232110DE"


def test_table_parser_refuses_csv():
    with pytest.raises(NvidiaSmiError) as caught:
        parse_table(load("09_l40s_csv_units_akash99.txt"))
    assert str(caught.value) == "this is not nvidia-smi's table: no driver version and no GPU row"


def test_empty_output_is_an_error():
    with pytest.raises(NvidiaSmiError) as caught:
        parse_csv("")
    assert str(caught.value) == "nvidia-smi printed no CSV rows"


# Whole-output failure strings as INDEX.md's trap 7 quotes them (captures 37-39
# of the larger set, not in this folder).
@pytest.mark.parametrize(
    "text,kind",
    [
        ("No devices were found\n", "no_devices"),
        ("Failed to initialize NVML: Unknown Error\n", "nvml_unknown_error"),
        ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n",
         "driver_library_mismatch"),
        ('Field "compute_cap" is not a valid field to query.\n', "invalid_query"),
    ],
)
def test_whole_output_failures(text, kind):
    failure = classify_failure(text)
    assert failure is not None and failure.kind == kind
    assert str(failure) == text.splitlines()[0].strip()
    with pytest.raises(NvidiaSmiFailure):
        parse_table(text)


def test_no_failure_in_a_good_table():
    assert classify_failure(load("06_gb10_table_580_126_arctictraining345.txt")) is None


def test_every_failure_kind_has_a_hint():
    assert all(hint for _kind, _pattern, hint in FAILURES)


def test_bracketed_not_supported_is_accepted_defensively():
    # Seen only in third-party parser fixtures (INDEX.md trap 1), never in a real paste.
    report = parse_csv("memory.total [MiB], memory.used [MiB]\n[Not Supported], [Not Supported]\n")
    assert report.gpus[0].memory_total_mib is None and report.unified_memory


def test_the_module_query_is_documented():
    assert QUERY_FIELDS == ("index", "name", "uuid", "memory.total", "memory.used", "driver_version", "compute_cap")
    assert QUERY_ARGS == [
        "--query-gpu=index,name,uuid,memory.total,memory.used,driver_version,compute_cap",
        "--format=csv,nounits",
    ]
