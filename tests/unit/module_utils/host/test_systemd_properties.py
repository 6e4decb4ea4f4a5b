"""Property tests for plugins/module_utils/host/systemd.py over hostile input
(tests/hostile.py): the real ``systemctl show`` output the modules ask for,
captured on the lab host lab1 (tests/fixtures/systemd, see its INDEX.md), cut,
mutated, mixed with arbitrary text, NULs, CRs and non-UTF-8 bytes.

What they promise: parse_show, active_since, main_pid, exec_command and
unit_info never raise and always return their type, for any text, bytes or
none; only a newline ends a property (as systemctl prints them); a pid or a
stamp is read from ASCII digits only (int() read ``٤٢`` as 42, another
process), so a 5,000-digit or non-ASCII one is no pid and no stamp; exec_command
takes linear time (its regex was quadratic on a line of ``{ path=``); the
modules that read systemctl still answer.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_flags_info
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.systemd import UnitInfo, active_since, exec_command, main_pid, parse_show, unit_info
from help_tables import FIXTURES, HELP_PATH
from hostile import (
    HUGE_NUMBER,
    MIB,
    NOISE,
    any_text,
    assert_linear,
    assert_numbers_from,
    cut_points,
    documents,
    mutated,
    non_ascii_number,
)
from hypothesis import given
from hypothesis import strategies as st

CAPTURES = {p.name: p.read_text() for p in sorted((FIXTURES / "systemd").glob("show-*.txt"))}
LINES = [line for text in CAPTURES.values() for line in text.splitlines()]
FLAGS = CAPTURES["show-flags-vllm-lab1.txt"]
HEALTH = CAPTURES["show-health-vllm-lab1.txt"]
EXEC_LINE = next(line for line in FLAGS.splitlines() if line.startswith("ExecStart="))


def test_the_captures_read():
    info = unit_info(FLAGS)
    assert (info.load_state, info.main_pid, info.exec_path) == ("loaded", 1119, "/opt/vllm/bin/vllm")
    assert info.exec_argv.startswith("/opt/vllm/bin/vllm serve /srv/models/tiny ") and len(info.exec_argv.split()) == 22
    assert active_since(parse_show(HEALTH)) == 1796159235.0
    assert unit_info(CAPTURES["show-flags-not-found-lab1.txt"]) == UnitInfo("not-found", 0, None, None)
    assert unit_info(CAPTURES["show-flags-ray-lab1.txt"]).exec_path == "/opt/vllm/bin/ray"


def assert_props_hold(props: dict, text: str) -> None:
    assert all(isinstance(k, str) and isinstance(v, str) and "\n" not in k + v for k, v in props.items())
    pid = main_pid(props)
    assert isinstance(pid, int) and 0 <= pid < 10 ** 10
    since = active_since(props)
    assert since is None or (isinstance(since, float) and math.isfinite(since) and since >= 0)
    assert_numbers_from([n for n in (pid, since) if n], text)
    path, argv = exec_command(props.get("ExecStart", ""))
    assert (path is None) is (argv is None)
    if path is not None:
        assert path in text and argv in text


TEXTS = st.one_of(documents(LINES), mutated(list(CAPTURES.values())), any_text(),
                  st.lists(st.sampled_from(LINES + list(NOISE)), max_size=20).map("".join))


@given(TEXTS)
def test_parse_show_returns_a_dict_for_any_text(text):
    props = parse_show(text)
    assert_props_hold(props, text)
    info = unit_info(text)
    assert isinstance(info.load_state, str) and info.main_pid == main_pid(props)


@given(st.binary(max_size=600).map(lambda b: FLAGS.encode()[:200] + b))
def test_bytes_read_as_utf8_with_replacement(data):
    assert parse_show(data) == parse_show(data.decode("utf-8", "replace"))


@pytest.mark.parametrize("value", [None, 3, ["MainPID=1"], {"MainPID": "1"}])
def test_no_text_is_no_properties(value):
    assert parse_show(value) == {}
    assert unit_info(value) == UnitInfo("", 0, None, None)


@pytest.mark.parametrize("sep", ["\r", "\u2028", "\x85", "\x0c", "\x1e", "\v"])
def test_only_a_newline_ends_a_property(sep):
    """systemctl ends each property with \\n; a line break inside a value
    (a logged prompt in Description, say) makes no second property."""
    props = parse_show(f"Description=x{sep}MainPID=666{sep}LoadState=evil\n" + FLAGS)
    assert props["MainPID"] == "1119" and props["LoadState"] == "loaded"
    assert parse_show(FLAGS.replace("\n", "\r\n")) == parse_show(FLAGS)


@pytest.mark.parametrize("value", [
    HUGE_NUMBER, non_ascii_number("1119"), "\u0661\u0661\u0661\u0669", "\uff11\uff11", "\u00b9", "4_2", "+42", "-1",
    "0x10", "42.0", "1" * 11, "", "n/a",
])
def test_a_main_pid_that_is_not_ascii_digits_is_no_pid(value):
    assert main_pid(parse_show(f"MainPID={value}\n")) == 0


@pytest.mark.parametrize("value", [
    "@" + HUGE_NUMBER, "@1" + "0" * 20, "@" + non_ascii_number("1796159235"), "@\uff11", "@1." + HUGE_NUMBER,
    "@1796159235.", "@-1", "@1e9", "1796159235", "@", "Mon 2026-12-01 10:00:00 UTC", "@1_796_159_235",
])
def test_a_stamp_that_is_not_ascii_digits_is_no_stamp(value):
    assert active_since(parse_show(f"ActiveState=active\nActiveEnterTimestamp={value}\n")) is None


def test_a_stamp_reads_only_while_active():
    assert active_since(parse_show(HEALTH.replace("=active", "=activating"))) is None
    assert active_since(parse_show(HEALTH.replace("@1796159235", "@1796159235.123456"))) == 1796159235.123456


def test_a_cut_exec_start_is_none_or_the_whole_command():
    whole = exec_command(parse_show(FLAGS)["ExecStart"])
    for cut in cut_points(EXEC_LINE):
        got = exec_command(parse_show(cut).get("ExecStart", ""))
        assert got in ((None, None), whole)
        assert (got == whole) is (" ; ignore_errors=" in cut)


@pytest.mark.parametrize("value", [None, 3, b"{ path=a ; argv[]=b ; ignore_errors=no }"])
def test_exec_command_of_no_text_is_none(value):
    assert exec_command(value) == (None, None)


def test_exec_command_and_parse_show_are_linear():
    assert_linear(exec_command, lambda n: "{ path=" * (n // 7))              # quadratic before
    assert_linear(exec_command, lambda n: "{ path=x ; argv[]=" * (n // 18))
    assert_linear(parse_show, lambda n: "A=" + "=" * n)
    assert_linear(parse_show, lambda n: "MainPID=1\n" * (n // 10))
    assert_linear(lambda t: unit_info(t), lambda n: FLAGS.replace("--dtype", "x " * (n // 2) + "--dtype"))


def test_a_mib_value_reads():
    props = parse_show("ExecStart={ path=/v ; argv[]=/v serve " + "a" * MIB + " ; ignore_errors=no }\nMainPID=7\n")
    assert main_pid(props) == 7 and len(exec_command(props["ExecStart"])[1]) == MIB + len("/v serve ")


# ---- the module that reads a unit --------------------------------------------------------------

@pytest.fixture
def engine():
    """A real process whose /proc cmdline is the lab engine's, after python's own -c."""
    argv = (FIXTURES / "systemd" / "proc-cmdline-vllm-lab1.bin").read_bytes().decode().split("\0")[:-1]
    proc = subprocess.Popen([argv[0], "-c", "import time; time.sleep(60)", *argv[1:]], executable=sys.executable)
    try:
        for _ in range(1000):
            if b"serve" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                break
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def run_unit(run_module, monkeypatch, show: str) -> dict:
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: "/bin/" + name)
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, args, **kw: (0, show, ""))
    return run_module(vllm_flags_info, {"unit": "vllm.service", "help_text": HELP_PATH.read_text()})


def test_the_module_reads_the_real_unit(run_module, monkeypatch, engine):
    result = run_unit(run_module, monkeypatch, FLAGS.replace("MainPID=1119", f"MainPID={engine}"))
    assert not result.get("failed") and result["drift"] is False
    assert result["effective"]["tensor_parallel_size"] == 2


@pytest.mark.parametrize("spell", [
    lambda pid: non_ascii_number(str(pid)), lambda pid: HUGE_NUMBER, lambda pid: f"{pid}\u00b9",
    lambda pid: f"{pid // 10}_{pid % 10}",
], ids=["arabic", "huge", "superscript", "underscore"])
def test_the_module_refuses_a_pid_that_is_no_ascii_number(run_module, monkeypatch, engine, spell):
    """int() read each of these as the engine's pid, or another process's."""
    result = run_unit(run_module, monkeypatch, FLAGS.replace("MainPID=1119", "MainPID=" + spell(engine)))
    assert result["failed"] and result["msg"].startswith("unit vllm.service has no running main process (MainPID=0)")


@pytest.mark.parametrize("exec_argv", ["{ " * 50_000, '{"a": "' + "x " * 50_000, "[" * 100_000])
def test_the_module_reports_drift_for_any_exec_start(run_module, monkeypatch, engine, exec_argv):
    show = FLAGS.replace("MainPID=1119", f"MainPID={engine}").replace("--dtype float32", exec_argv)
    result = run_unit(run_module, monkeypatch, show)
    assert result["drift"] is True and result["failed"]
