"""Property tests for plugins/module_utils/host/nvidia_smi.py over hostile input
(tests/hostile.py), drawn from the real captures in tests/fixtures/nvidia-smi/
(INDEX.md gives each source): the default table, the CSV query and the failure
messages, cut, noised, mutated line by line and shuffled.

What each promises: parse_csv and parse_table raise NvidiaSmiError (or its
NvidiaSmiFailure) and nothing else; classify_failure and merge never raise;
every GPU index and memory figure they return is written in ASCII digits in
the input (memory times its unit), and every Bus-Id is written there too (None
for N/A); a version is ASCII dotted digits; an integrated GPU's table (Bus-Id
N/A) reads one GPU at most; each runs in linear time. The checks the module builds from a report never raise.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.module_utils.host.nvidia_smi import (
    FAILURES,
    QUERY_FIELDS,
    NvidiaSmiError,
    NvidiaSmiFailure,
    SmiReport,
    classify_failure,
    merge,
    parse_csv,
    parse_table,
)
from ansible.module_utils.host.preflight_gpu import (
    check_cuda_version,
    check_gpu_count,
    check_gpu_driver,
    check_gpu_memory,
)
from hostile import (
    HUGE_NUMBER,
    MIB,
    any_text,
    assert_linear,
    cut_points,
    documents,
    mutated,
    non_ascii_number,
    numbers_in,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

SMI = Path(__file__).resolve().parents[3] / "fixtures" / "nvidia-smi"
MEMINFO = (Path(__file__).resolve().parents[3] / "fixtures" / "host-probes"
           / "meminfo_head_dev_container.txt").read_text()


def capture(name: str) -> list:
    """A capture's lines without the ``$ command`` line above them."""
    return [ln for ln in (SMI / name).read_text().splitlines() if not ln.startswith("$ ")]


CAPTURES = {p.name: capture(p.name) for p in sorted(SMI.glob("*.txt"))}
FAILS = {name: lines for name, lines in CAPTURES.items() if "_fail_" in name}
# A table has its header's "Driver Version:" (or "KMD Version:"); the CSV captures have none.
TABLES = {name: lines for name, lines in CAPTURES.items()
          if name not in FAILS and any("Version:" in line for line in lines)}
CSVS = {name: lines for name, lines in CAPTURES.items() if name not in FAILS and name not in TABLES}
TABLE_LINES = [ln for lines in TABLES.values() for ln in lines]
CSV_LINES = [ln for lines in CSVS.values() for ln in lines]
H100 = TABLES["19_h100_table_535_gvisor10413.txt"]
GPU_LINE = next(ln for ln in H100 if "00000000:04:00.0" in ln)
MEMORY_LINE = H100[H100.index(GPU_LINE) + 1]
L40S = CSVS["09_l40s_csv_units_akash99.txt"]
# Integrated GPUs: the Bus-Id cell reads N/A (INDEX.md trap 2).
ORINS = {name: lines for name, lines in TABLES.items() if "_orin_" in name}
ORIN = ORINS["41_orin_table_bus_na_540_4_ultralytics20680.txt"]
ORIN_LINE = next(ln for ln in ORIN if "Orin (nvgpu)" in ln)
KINDS = {kind for kind, _, _ in FAILURES}


def test_the_lines_are_the_captures():
    assert (len(TABLES), len(CSVS), len(FAILS)) == (7, 4, 2)
    assert ORIN_LINE.startswith("|   0  Orin (nvgpu) ") and "| N/A              N/A |" in ORIN_LINE
    assert GPU_LINE.startswith("|   0  NVIDIA H100 80GB HBM3 ") and "72459MiB / 81559MiB" in MEMORY_LINE
    assert L40S[0] == "name, driver_version, memory.total [MiB], pci.bus_id, pci.device_id"


def one_line_mutated(lines: list) -> st.SearchStrategy[str]:
    """A real capture with one of its lines changed by :func:`hostile.mutated`."""
    return st.integers(0, len(lines) - 1).flatmap(
        lambda i: mutated([lines[i]]).map(lambda line: "\n".join(lines[:i] + [line] + lines[i + 1:])))


def tables() -> st.SearchStrategy[str]:
    return st.one_of(documents(TABLE_LINES), *(one_line_mutated(lines) for lines in TABLES.values()), any_text())


def csvs() -> st.SearchStrategy[str]:
    headed = [lines for lines in CSVS.values() if "," in lines[0] and "NVIDIA" not in lines[0]]
    return st.one_of(
        documents(CSV_LINES),
        *(one_line_mutated(lines) for lines in CSVS.values()),
        *(documents(lines[1:]).map(lambda doc, h=lines[0]: h + "\n" + doc) for lines in headed),
        any_text(),
    )


def assert_from_input(report: SmiReport, text: str) -> None:
    """No GPU index, memory figure or version that the input does not write in ASCII digits;
    no Bus-Id that it does not write (None for N/A)."""
    present = numbers_in(text)
    for position, gpu in enumerate(report.gpus):
        assert gpu.index == position or gpu.index in present, f"index {gpu.index} is not in the input"
        assert gpu.bus_id is None or (gpu.bus_id in text and re.fullmatch(r"[0-9A-Fa-f:.]+", gpu.bus_id))
        for value in (gpu.memory_total_mib, gpu.memory_used_mib):
            if value is not None:
                assert isinstance(value, int) and value >= 0
                assert any(value == round(p * s) for p in present for s in (1, 1 / 1024, 1024)), \
                    f"memory {value} MiB is not a figure in the input"
    for version in (report.driver_version, report.cuda_version):
        assert version is None or (re.fullmatch(r"[0-9]+(\.[0-9]+)+", version) and version in text)


def assert_checks_hold(report: SmiReport) -> None:
    """What gpu_preflight_info builds from a report, without a try: none of it raises."""
    check_gpu_driver(report)
    check_gpu_count(report, 1)
    check_gpu_memory(report, 16, MEMINFO)
    check_gpu_memory(report, 16, "\x00" + HUGE_NUMBER)
    check_cuda_version(report, "12.8")
    check_cuda_version(report, None)
    report.as_dict()


# ---- the table ---------------------------------------------------------------------------------

@given(tables())
def test_table_raises_only_its_error_and_reads_only_given_figures(text):
    report = raises_only(NvidiaSmiError, parse_table, text)
    if report is not None:
        assert_from_input(report, text)
        assert_checks_hold(report)


@given(tables(), csvs())
def test_merge_never_raises_on_what_the_parsers_return(table_text, csv_text):
    table = raises_only(NvidiaSmiError, parse_table, table_text)
    query = raises_only(NvidiaSmiError, parse_csv, csv_text)
    if table is not None:
        merged = merge(table, query)
        assert merged.gpu_count == table.gpu_count
        assert_checks_hold(merged)


@given(st.sampled_from(sorted(ORINS)).flatmap(lambda name: one_line_mutated(ORINS[name])))
def test_an_integrated_gpu_table_reads_at_most_its_one_gpu(text):
    """The N/A Bus-Id makes a row a GPU; one hostile line never makes two, nor a
    Bus-Id or a memory size out of N/A."""
    report = raises_only(NvidiaSmiError, parse_table, text)
    if report is not None:
        assert report.gpu_count <= 1
        for gpu in report.gpus:
            assert gpu.bus_id is None and gpu.memory_total_mib is None
        assert_checks_hold(report)


def test_every_cut_of_an_integrated_gpu_row_is_one_gpu_or_none():
    at = ORIN.index(ORIN_LINE)
    for cut in cut_points(ORIN_LINE):
        report = parse_table("\n".join(ORIN[:at] + [cut] + ORIN[at + 1:]))
        assert [(g.name, g.bus_id) for g in report.gpus] in ([], [("Orin (nvgpu)", None)])


def test_a_cut_gpu_block_never_reads_larger():
    at = H100.index(GPU_LINE)
    for cut in cut_points(MEMORY_LINE):
        text = "\n".join(H100[:at + 1] + [cut] + H100[at + 2:])
        report = raises_only(NvidiaSmiError, parse_table, text)
        for gpu in report.gpus if report else []:
            assert (gpu.memory_total_mib or 0) <= 81559 and (gpu.memory_used_mib or 0) <= 81559


@pytest.mark.parametrize("index", [HUGE_NUMBER, non_ascii_number("0"), "¹", "０", "1234567"],
                         ids=["huge", "arabic-indic", "superscript", "full-width", "seven-digits"])
def test_a_gpu_line_whose_index_is_no_index_is_no_gpu(index):
    """int() raised ValueError on 5,000 digits; `\\d` read look-alikes as GPU 0."""
    text = "\n".join(H100).replace("|   0  NVIDIA", f"|   {index}  NVIDIA")
    assert parse_table(text).gpus == []


@pytest.mark.parametrize("cell", [non_ascii_number("72459") + "MiB / 81559MiB", "72459MiB / ٨١٥٥٩MiB",
                                  HUGE_NUMBER + "MiB / 81559MiB", "72459MiB / 1234567890MiB"],
                         ids=["arabic-used", "arabic-total", "huge-used", "ten-digit-total"])
def test_a_memory_cell_of_look_alike_or_huge_figures_is_unreadable(cell):
    text = "\n".join(H100).replace("72459MiB / 81559MiB", cell)
    with pytest.raises(NvidiaSmiError, match="cannot read the memory cell"):
        parse_table(text)


@pytest.mark.parametrize("header, driver, cuda", [
    ("| NVIDIA-SMI 535.129.03   Driver Version: ٥٣٥.129.03   CUDA Version: 12.2 |", None, "12.2"),
    (f"| NVIDIA-SMI 535.129.03   Driver Version: 535.129.03   CUDA Version: {HUGE_NUMBER}.2 |", "535.129.03", None),
    ("| NVIDIA-SMI 535.129.03   Driver Version: 535.129.03   CUDA Version: 1²․2 |", "535.129.03", None),
], ids=["arabic-driver", "huge-cuda", "superscript-cuda"])
def test_a_version_in_look_alike_or_huge_figures_is_no_version(header, driver, cuda):
    """A 5,000-digit CUDA version reached version_tuple's int() in check_cuda_version."""
    lines = [header if "Driver Version" in ln else ln for ln in H100]
    report = parse_table("\n".join(lines))
    assert (report.driver_version, report.cuda_version) == (driver, cuda)
    check = check_cuda_version(report, "12.0")
    assert check.ok is (cuda is not None)


def test_table_is_linear():
    """A GPU line padded with spaces took the lazy-name pattern cubic time
    (2,000 spaces: 19 s); digits without MiB took the memory pattern quadratic."""
    head = "\n".join(H100[:H100.index(GPU_LINE)]) + "\n"

    def parse(text):
        return raises_only(NvidiaSmiError, parse_table, text)

    assert_linear(parse, lambda n: head + "|   0" + " " * n)
    assert_linear(parse, lambda n: head + "|   0  NVIDIA" + " On" * (n // 3))
    assert_linear(parse, lambda n: head + GPU_LINE + "\n| N/A | " + "1" * n + " |  |")
    assert_linear(parse, lambda n: head + GPU_LINE + "\n| N/A | " + "1 MiB " * (n // 6) + " |  |")
    assert_linear(parse, lambda n: "Driver Version:" + " " * n)
    assert_linear(parse, lambda n: head + "|   0  Orin  N/A  | N/A" + " " * n)
    assert_linear(parse, lambda n: head + (ORIN_LINE + "\n") * (n // len(ORIN_LINE)))


# ---- the CSV query -----------------------------------------------------------------------------

@given(csvs())
def test_csv_raises_only_its_error_and_reads_only_given_figures(text):
    for columns in (None, QUERY_FIELDS):
        report = raises_only(NvidiaSmiError, parse_csv, text, columns)
        if report is not None:
            assert_from_input(report, text)
            assert_checks_hold(report)


def test_a_field_past_the_csv_modules_limit_is_unreadable_output():
    """csv.Error: field larger than field limit (131072) escaped the module's except."""
    with pytest.raises(NvidiaSmiError, match="field larger than field limit"):
        parse_csv(L40S[0] + "\nNVIDIA L40S, " + "5" * (128 * 1024 + 1) + ", 46068 MiB, 00000000:01:00.0, 0x26B9")
    with pytest.raises(NvidiaSmiError):
        parse_csv(L40S[0] + '\n"' + "x" * (200 * 1024))  # an open quote swallows every line after it


@pytest.mark.parametrize("index", [HUGE_NUMBER, "¹", non_ascii_number("1"), "１", "1234567"],
                         ids=["huge", "superscript", "arabic-indic", "full-width", "seven-digits"])
def test_an_index_that_is_no_index_falls_back_to_the_row(index):
    """isdigit() passed a superscript to int() (ValueError); int() refused 5,000 digits."""
    lines = CSVS["11_compute_cap_titanv_rtx5880_triton8070.txt"]
    text = "\n".join(lines[:2] + [lines[2].rsplit(",", 1)[0] + ", " + index])
    assert [g.index for g in parse_csv(text).gpus] == [0, 1]


@pytest.mark.parametrize("value", [HUGE_NUMBER + " MiB", HUGE_NUMBER + ".5", "1" * 13,
                                   non_ascii_number("46068") + " MiB", "46068 \u212aiB", "4.6e4 MiB"],
                         ids=["huge", "huge-float", "thirteen-digits", "arabic-indic", "kelvin-sign", "exponent"])
def test_a_memory_value_no_gpu_prints_is_unreadable(value):
    """float() took 5,000 digits as inf and round(inf) raised OverflowError."""
    text = "\n".join([L40S[0], L40S[1].replace("46068 MiB", value)])
    with pytest.raises(NvidiaSmiError, match="cannot read the memory value"):
        parse_csv(text)


@pytest.mark.parametrize("unit", ["MHz", "%", "MİB", "TiB"])
def test_a_memory_unit_no_gpu_prints_is_unreadable(unit):
    """The unit table's KeyError escaped."""
    text = f"index, memory.total [{unit}]\n0, 46068"
    with pytest.raises(NvidiaSmiError, match="unknown unit"):
        parse_csv(text)


def test_csv_driver_version_in_look_alike_digits_is_none():
    text = "\n".join([L40S[0], L40S[1].replace("595.71.05", "٥٩٥.٧١.٠٥")])
    assert parse_csv(text).driver_version is None


def test_csv_is_linear():
    def parse(text):
        return raises_only(NvidiaSmiError, parse_csv, text)

    assert_linear(parse, lambda n: L40S[0] + "\n" + (L40S[1] + "\n") * (n // len(L40S[1])))
    assert_linear(parse, lambda n: "index, memory.total [MiB]\n0, " + "1" * n)
    assert_linear(parse, lambda n: "index" + " " * n + "x")


# ---- whole-output failures -------------------------------------------------------------------------

@given(st.one_of(any_text(), documents(TABLE_LINES + [ln for lines in FAILS.values() for ln in lines])))
def test_classify_failure_never_raises(text):
    failure = classify_failure(text)
    if failure is not None:
        assert isinstance(failure, NvidiaSmiFailure) and failure.kind in KINDS
        assert len(failure.message) <= 300


@pytest.mark.parametrize("value", [None, b"No devices were found", 3])
def test_no_text_is_no_failure(value):
    assert classify_failure(value) is None
    with pytest.raises(NvidiaSmiError):
        parse_table(value)
    with pytest.raises(NvidiaSmiError):
        parse_csv(value)


def test_classify_failure_is_linear():
    """`^\\s*No devices` rescanned every blank line after each one (quadratic)."""
    assert_linear(classify_failure, lambda n: "\n" * n + "x")
    assert_linear(classify_failure, lambda n: " \n" * (n // 2))
    assert_linear(classify_failure, lambda n: 'Field "' * (n // 7))


def test_a_huge_failure_line_is_cut_in_the_message():
    failure = classify_failure("Failed to initialize NVML: Unknown Error" + " x" * MIB)
    assert failure.kind == "nvml_unknown_error" and len(failure.message) == 300
