"""Property tests for plugins/module_utils/flags/cmdline.py over hostile input
(tests/hostile.py): the real ``/proc/PID/cmdline`` of the lab's vLLM engine
and its unit's ExecStart (tests/fixtures/systemd, see its INDEX.md), typed
against the real ``vllm serve --help=all`` of vLLM 0.32.0
(tests/help_tables.py); words cut, mutated, repeated, glued with NULs, CRs
and non-UTF-8 bytes, and arbitrary text.

What they promise: split_cmdline and parse_cmdline raise CmdlineError and
nothing else (not RecursionError from a deep JSON value or dotted key, not
OverflowError from ``1e400k``), a string splits exactly as shlex.split splits
it but in linear time, a string that holds NULs splits as /proc holds argv,
read_proc_cmdline raises SourceError only; every typed number is written in
its word; the module turns all of it into its message.
"""
from __future__ import annotations

import shlex
import string

import pytest
import vllm_flags_info
from ansible.module_utils.flags.cmdline import parse_cmdline, read_proc_cmdline, split_cmdline
from ansible.module_utils.flags.errors import CmdlineError, SourceError
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.host.systemd import unit_info
from ansible.module_utils.shared.pyrepr import MAX_DEPTH
from help_tables import FIXTURES, HELP_PATH
from hostile import (
    HUGE_NUMBER,
    MIB,
    NOISE,
    any_text,
    assert_linear,
    assert_numbers_from,
    mutated,
    nested,
    non_ascii_number,
    numbers_of,
    raises_only,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_values_properties import ascii_digits

HELP = HELP_PATH.read_text()
TABLE = parse_help(HELP)
PROC_BYTES = (FIXTURES / "systemd" / "proc-cmdline-vllm-lab1.bin").read_bytes()
ARGV = PROC_BYTES.decode().split("\0")[:-1]
EXEC_ARGV = unit_info((FIXTURES / "systemd" / "show-flags-vllm-lab1.txt").read_text()).exec_argv
WORDS = ARGV + ["-tp", "2", "--compilation-config", '{"level": 3}', "-cc.mode=3", "--no-enable-prefix-caching",
                "--max-num-batched-tokens", "2k", "--api-key", "sekrit", "--", "bash", "-c"]


def test_the_words_are_the_captures():
    assert ARGV[:4] == ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "/srv/models/tiny"]
    assert len(ARGV) == 23 and EXEC_ARGV == " ".join(ARGV[1:])


def test_the_real_command_line_reads():
    parsed = parse_cmdline(ARGV, TABLE)
    assert parsed.unknown == [] and parsed.launcher_index == 1
    assert {d: s.value for d, s in parsed.settings.items() if d in (
        "tensor_parallel_size", "max_model_len", "kv_cache_memory_bytes", "enforce_eager", "dtype")} == {
        "tensor_parallel_size": 2, "max_model_len": 2048, "kv_cache_memory_bytes": 67108864,
        "enforce_eager": True, "dtype": "float32"}
    assert split_cmdline(PROC_BYTES.decode()) == ARGV == split_cmdline(" ".join(ARGV))


def assert_parsed_holds(parsed, words: list[str]) -> None:
    text = ascii_digits(" ".join(words))     # vLLM's int() reads every script's digits
    numbers = [n for dest, s in parsed.settings.items() if not TABLE.flags[dest].human_int
               for n in numbers_of(s.value)]
    assert_numbers_from(numbers, text)
    assert all(isinstance(u.evidence, str) for u in parsed.unknown)


HOSTILE_WORD = st.one_of(st.sampled_from(WORDS), mutated(WORDS), any_text(40),
                         st.sampled_from([HUGE_NUMBER, "9" * 400 + ".5k", "1e400", non_ascii_number(), "\udcff",
                                          nested(5000), "--compilation-config." + "a." * 500 + "b=1"]))


@given(st.lists(HOSTILE_WORD, max_size=30), st.booleans())
def test_a_list_of_words_raises_only_cmdline_error(words, head):
    argv = (ARGV[:3] + words) if head else words
    parsed = raises_only(CmdlineError, parse_cmdline, argv, TABLE)
    if parsed is not None:
        assert_parsed_holds(parsed, argv)


@given(st.one_of(any_text(), mutated([" ".join(WORDS), EXEC_ARGV, PROC_BYTES.decode()]),
                 st.lists(st.sampled_from(WORDS + list(NOISE)), max_size=40).map("".join)))
def test_a_string_raises_only_cmdline_error(text):
    parsed = raises_only(CmdlineError, parse_cmdline, text, TABLE)
    if parsed is not None:
        assert_parsed_holds(parsed, parsed.argv)


@given(st.binary(max_size=300).map(lambda b: PROC_BYTES[:len(PROC_BYTES) // 2] + b))
def test_proc_bytes_of_any_kind_read(tmp_path_factory, data):
    proc = tmp_path_factory.mktemp("proc")
    (proc / "42").mkdir()
    (proc / "42" / "cmdline").write_bytes(data)
    words = data.decode("utf-8", "replace").split("\0")
    if words[-1] == "":
        words.pop()
    argv = raises_only(SourceError, read_proc_cmdline, 42, proc=str(proc))
    assert argv == (words or None)
    if argv is not None:
        raises_only(CmdlineError, parse_cmdline, argv, TABLE)


def test_a_proc_file_that_is_no_file_is_the_source_error(tmp_path):
    (tmp_path / "7" / "cmdline").mkdir(parents=True)
    with pytest.raises(SourceError, match=r"cannot read .*/7/cmdline: Is a directory"):
        read_proc_cmdline(7, proc=str(tmp_path))


# ---- splitting a string --------------------------------------------------------------------------

SHELLISH = st.one_of(st.text(alphabet="ab '\"\\\t\n\r$\x0b\u00a0", max_size=40), st.text(max_size=40))


@given(SHELLISH.filter(lambda s: "\0" not in s))
def test_a_string_splits_as_shlex_splits_it(text):
    try:
        want = shlex.split(text)
    except ValueError as exc:
        with pytest.raises(CmdlineError, match=f"cannot split the command line \\({exc}\\); check its quoting"):
            split_cmdline(text)
        return
    if want:
        assert split_cmdline(text) == want
    else:
        with pytest.raises(CmdlineError, match="the command line is empty"):
            split_cmdline(text)


@given(st.lists(st.text(alphabet=string.printable + "\u00e9\udcff", max_size=12), min_size=1, max_size=8))
def test_a_string_with_nuls_splits_as_proc_holds_argv(words):
    assert split_cmdline("\0".join(words) + "\0") == words
    if len(words) > 1 and words[-1]:
        assert split_cmdline("\0".join(words)) == words       # the last NUL cut off


@pytest.mark.parametrize("cmdline,message", [
    ([["vllm"], "serve"], "cmdline word 1 is a list, not a word"),
    (["vllm", None], "cmdline word 2 is a NoneType, not a word"),
    (["vllm", {"a": 1}], "cmdline word 2 is a dict, not a word"),
    ("\0", "does not look like a vLLM server"),
    ("", "the command line is empty"),
    ("vllm serve '" + "a" * MIB, "No closing quotation"),
    ("vllm serve \\", "No escaped character"),
    ('vllm serve "a\\', "No escaped character"),
])
def test_what_is_no_command_line_is_the_cmdline_error(cmdline, message):
    with pytest.raises(CmdlineError, match=message):
        parse_cmdline(cmdline, TABLE)


def test_words_that_are_numbers_still_read():
    parsed = parse_cmdline(["vllm", "serve", "/m", "-tp", 2, "--gpu-memory-utilization", 0.5], TABLE)
    assert parsed.settings["tensor_parallel_size"].value == 2
    assert parsed.settings["gpu_memory_utilization"].value == 0.5


# ---- what broke it before ------------------------------------------------------------------------

def test_a_deep_dotted_key_is_an_unknown_word():
    keys = "a." * MAX_DEPTH + "b"
    argv = ["vllm", "serve", "/m", f"--compilation-config.{keys}=1", f"--compilation-config.{keys}=2",
            "-cc." + "a." * (MAX_DEPTH - 1) + "b=3"]
    parsed = parse_cmdline(argv, TABLE)
    assert [u.reason for u in parsed.unknown] == [f"keys nested deeper than {MAX_DEPTH}"] * 2
    value = parsed.settings["compilation_config"].value
    for _ in range(MAX_DEPTH - 1):
        value = value["a"]
    assert value == {"b": 3}


@pytest.mark.parametrize("value", [nested(100_000), nested(MAX_DEPTH + 1, '{"a": ', "}"), "[" + HUGE_NUMBER + "]"])
def test_a_json_value_too_deep_or_too_long_stays_the_word(value):
    parsed = parse_cmdline(["vllm", "serve", "/m", "--compilation-config", value, "-cc.x", value], TABLE)
    assert parsed.settings["compilation_config"].value == {"x": value}
    parsed = parse_cmdline(["vllm", "serve", "/m", "--compilation-config", value], TABLE)
    assert parsed.settings["compilation_config"].value == value


def test_split_and_parse_are_linear():
    def parse(text):
        return raises_only(CmdlineError, parse_cmdline, text, TABLE)

    assert_linear(parse, lambda n: "vllm serve /m --served-model-name " + "a" * n)   # shlex: quadratic
    assert_linear(parse, lambda n: "vllm serve /m --served-model-name '" + "a b" * (n // 3) + "'")
    assert_linear(parse, lambda n: 'vllm serve /m --chat-template "' + '\\"' * (n // 2))
    assert_linear(parse, lambda n: "vllm serve /m " + "-tp 2 " * (n // 6), small=32 * 1024)
    assert_linear(parse, lambda n: "\0".join(ARGV) + "\0" + "x\0" * (n // 2), small=32 * 1024)


# ---- the module ----------------------------------------------------------------------------------

def no_surrogates(text: str) -> str:
    """Ansible cannot pass a lone surrogate as a module argument (JSON as UTF-8)."""
    return text.encode("utf-8", "replace").decode()


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.lists(HOSTILE_WORD.map(no_surrogates), min_size=1, max_size=12).map(lambda w: ARGV[:3] + w),
                 mutated([" ".join(WORDS)]), any_text(200).map(no_surrogates)))
def test_the_module_answers_any_command_line(run_module, cmdline):
    result = run_module(vllm_flags_info, {"cmdline": cmdline, "help_text": HELP, "on_mismatch": "warn"})
    assert result.get("failed") is not True or isinstance(result["msg"], str)
    assert "exception" not in result
