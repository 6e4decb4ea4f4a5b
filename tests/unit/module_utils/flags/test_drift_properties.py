"""Property tests for plugins/module_utils/flags/drift.py over hostile input
(tests/hostile.py): the real ``systemctl show`` of the lab's vllm.service and
its engine's ``/proc/PID/cmdline`` (tests/fixtures/systemd, see its INDEX.md),
typed against the real ``vllm serve --help=all`` of vLLM 0.32.0; ExecStart
lines cut, mutated, holding JSON words of any depth and ``$VAR`` words.

What they promise: split_exec_argv and compare_unit never raise (not json's
RecursionError on deep brackets) and take linear time (gluing JSON words tried
every later word, json.loads each time; ``$VAR`` words became a regex that
backtracked exponentially); split_exec_argv loses no word and glues exactly
what the old gluing glued; running_unit raises SourceError only.
"""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.flags.cmdline import parse_cmdline
from ansible.module_utils.flags.drift import compare_unit, drift_message, running_unit, split_exec_argv
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.host.systemd import UnitInfo, unit_info
from ansible.module_utils.shared.pyrepr import MAX_DEPTH
from help_tables import FIXTURES, HELP_PATH
from hostile import MIB, any_text, assert_linear, mutated, nested, raises_only
from hypothesis import given
from hypothesis import strategies as st

TABLE = parse_help(HELP_PATH.read_text())
SHOW = (FIXTURES / "systemd" / "show-flags-vllm-lab1.txt").read_text()
UNIT = unit_info(SHOW)
ARGV = (FIXTURES / "systemd" / "proc-cmdline-vllm-lab1.bin").read_bytes().decode().split("\0")[:-1]
RUNNING = parse_cmdline(ARGV, TABLE)
JSON_WORDS = ['{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}', '{"a": "x } y", "b": "\\" ]"}', "[1, [2, 3]]"]


def test_the_real_unit_runs_what_it_says():
    assert split_exec_argv(UNIT.exec_argv) == ARGV[1:]
    assert compare_unit(RUNNING, UNIT, TABLE).drifted is False
    assert running_unit(SHOW, "vllm.service").main_pid == 1119


def old_glue(tokens: list[str]) -> list[str]:
    """The gluing before the hardening, as the oracle: each later word tried,
    json.loads of every candidate (cubic; RecursionError on deep input)."""
    out, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        if token[:1] in "{[":
            for j in range(i, len(tokens)):
                candidate = " ".join(tokens[i:j + 1])
                try:
                    json.loads(candidate)
                except ValueError:
                    continue
                token, i = candidate, j
                break
        out.append(token)
        i += 1
    return out


JSONISH_LINE = st.lists(st.sampled_from(['{"a":', "1}", "[1,", "2]", '"x', 'y"', "{", "}", "[", "]", '"\\"', "\\",
                                         ":", ",", "-tp", "2", *JSON_WORDS]), max_size=14).map(" ".join)


@given(st.one_of(JSONISH_LINE, st.text(alphabet='{}[]" \\:,1a\t', max_size=40)))
def test_gluing_is_the_old_gluing(line):
    tokens = [t for t in line.split(" ") if t]
    assert split_exec_argv(line) == old_glue(tokens)


@given(st.one_of(any_text(), JSONISH_LINE, mutated([UNIT.exec_argv])))
def test_split_exec_argv_loses_no_word(line):
    words = split_exec_argv(line)
    assert " ".join(words) == " ".join(t for t in line.split(" ") if t)
    assert all(words)


def test_json_words_too_deep_stay_split():
    head = UNIT.exec_argv + " --compilation-config "
    # the outer levels stay split; the innermost MAX_DEPTH levels are JSON, and glued
    words = split_exec_argv(head + nested(100_000, "[ ", " ]"))
    outer = 100_000 - MAX_DEPTH
    assert words == ARGV[1:] + ["--compilation-config"] + ["["] * outer + [nested(MAX_DEPTH, "[ ", " ]")] \
        + ["]"] * outer
    # the closing braces in one word: no level inside it is JSON on its own
    word = nested(MAX_DEPTH + 1, '{"a": ', "}")
    assert split_exec_argv(head + word) == ARGV[1:] + ["--compilation-config"] + word.split(" ")


def test_a_json_word_at_the_limit_is_glued():
    word = nested(MAX_DEPTH - 1, "[", "]", "[1, 2]")
    assert split_exec_argv("vllm serve /m -cc " + word) == ["vllm", "serve", "/m", "-cc", word]


@given(st.one_of(mutated([SHOW]), any_text(), st.sampled_from([SHOW.replace("--dtype float32", w) for w in [
    "--compilation-config " + nested(5000), "--compilation-config " + JSON_WORDS[0], "${MODEL} $TP$$", "$" * 50]])))
def test_compare_unit_never_raises(show):
    unit = unit_info(show)
    drift = compare_unit(RUNNING, unit, TABLE)
    assert drift.drifted is (drift.details != [])
    if drift.drifted:
        assert isinstance(drift_message(drift), str)
    raises_only(SourceError, running_unit, show, "vllm.service")


@pytest.mark.parametrize("exec_argv,drifted", [
    (UNIT.exec_argv.replace("/srv/models/tiny", "${MODEL}"), False),
    (UNIT.exec_argv.replace("2048", "$LEN"), False),
    (UNIT.exec_argv.replace("2048", "$LEN 1"), True),
])
def test_variables_in_exec_start(exec_argv, drifted):
    unit = UnitInfo("loaded", 1119, UNIT.exec_path, exec_argv)
    assert compare_unit(RUNNING, unit, TABLE).drifted is drifted


def test_split_and_compare_are_linear():
    small = 32 * 1024
    assert_linear(split_exec_argv, lambda n: "[ " * (n // 2), small=small)
    assert_linear(split_exec_argv, lambda n: "[ " * (n // 4) + "] " * (n // 4), small=small)
    assert_linear(split_exec_argv, lambda n: '{"a": "' + "x " * (n // 2), small=small)
    assert_linear(split_exec_argv, lambda n: "[1] " * (n // 4), small=small)
    # every other word opens a JSON word the scans before it saw inside a string
    assert_linear(split_exec_argv, lambda n: '["' + ' \\" ["' * (n // 6), small=small)
    # nests of invalid JSON: each level is tried, and fails where its inner level closed
    assert_linear(split_exec_argv, lambda n: ("[ " * 90 + "1 " + "] x " * 90) * (n // 540), small=small)

    def compare(exec_argv):
        return compare_unit(RUNNING, UnitInfo("loaded", 1, None, exec_argv), TABLE)

    # a regex of one .*? per $VAR took longer than 600 s for 16 words
    assert_linear(compare, lambda n: "vllm serve $A" + " x$A" * (n // 4) + " x", small=16 * 1024)
    assert_linear(compare, lambda n: "vllm serve /m --compilation-config " + "{ " * (n // 2), small=16 * 1024)


def test_a_mib_exec_start_reads():
    show = SHOW.replace("--dtype float32", "--served-model-name " + "a" * MIB)
    assert compare_unit(RUNNING, unit_info(show), TABLE).drifted is True
