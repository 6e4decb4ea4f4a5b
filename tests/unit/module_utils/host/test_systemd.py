"""Tests for plugins/module_utils/host/systemd.py, over the output shapes of
``systemctl show -p ...`` (systemd 252) that the modules ask for."""
from __future__ import annotations

import pytest
from ansible.module_utils.host.systemd import exec_command, main_pid, parse_show, show_argv, unit_info

# vllm_flags_info's `systemctl show -p MainPID -p ExecStart -p LoadState vllm.service`
FLAGS_SHOW = (
    "MainPID=4242\nLoadState=loaded\n"
    "ExecStart={ path=/opt/vllm/venv/bin/vllm ; argv[]=/opt/vllm/venv/bin/vllm serve /m -tp 2 ; "
    "ignore_errors=no ; start_time=[Sat 2026-11-29 16:01:09 UTC] ; stop_time=[n/a] ; pid=4242 ; "
    "code=(null) ; status=0/0 }\n")
# vllm_kv_cache_info's `-p LoadState -p ActiveState -p InvocationID`
KV_SHOW = "LoadState=loaded\nActiveState=active\nInvocationID=ab12\n"
# vllm_health_info's `-p ActiveState -p Result -p InvocationID -p LoadState` of a failed unit
HEALTH_SHOW = "ActiveState=failed\nResult=exit-code\nInvocationID=\nLoadState=loaded\n"


@pytest.mark.parametrize("text,props", [
    (KV_SHOW, {"LoadState": "loaded", "ActiveState": "active", "InvocationID": "ab12"}),
    (HEALTH_SHOW, {"ActiveState": "failed", "Result": "exit-code", "InvocationID": "", "LoadState": "loaded"}),
    # a value may hold '='; CRLF and blank lines are not properties
    ("Environment=A=1 B=2\r\n\r\nLoadState=loaded\r\n", {"Environment": "A=1 B=2", "LoadState": "loaded"}),
    # the first of a repeated key wins (two units' blocks, one after the other)
    ("LoadState=loaded\n\nLoadState=not-found\n", {"LoadState": "loaded"}),
    ("no equals sign\n=value\n", {}),
    ("", {}),
    (None, {}),
])
def test_parse_show(text, props):
    assert parse_show(text) == props


@pytest.mark.parametrize("props,pid", [
    ({"MainPID": "4242"}, 4242), ({"MainPID": "0"}, 0), ({"MainPID": ""}, 0), ({"MainPID": "n/a"}, 0), ({}, 0),
])
def test_main_pid(props, pid):
    assert main_pid(props) == pid


def test_exec_command():
    value = parse_show(FLAGS_SHOW)["ExecStart"]
    assert exec_command(value) == ("/opt/vllm/venv/bin/vllm", "/opt/vllm/venv/bin/vllm serve /m -tp 2")
    assert exec_command("") == (None, None)


def test_unit_info():
    info = unit_info(FLAGS_SHOW)
    assert (info.load_state, info.main_pid, info.exec_path, info.exec_argv) == (
        "loaded", 4242, "/opt/vllm/venv/bin/vllm", "/opt/vllm/venv/bin/vllm serve /m -tp 2")
    missing = unit_info("MainPID=0\nLoadState=not-found\nExecStart=\n")
    assert (missing.load_state, missing.main_pid, missing.exec_path, missing.exec_argv) == (
        "not-found", 0, None, None)


@pytest.mark.parametrize("properties,options,argv", [
    # vllm_flags_info's
    (("MainPID", "ExecStart", "LoadState"), {},
     ["/bin/systemctl", "show", "-p", "MainPID", "-p", "ExecStart", "-p", "LoadState", "vllm.service"]),
    # vllm_kv_cache_info's: a unit name that starts with '-' is no option
    (("LoadState", "ActiveState", "InvocationID"), {"end_of_options": True},
     ["/bin/systemctl", "show", "-p", "LoadState", "-p", "ActiveState", "-p", "InvocationID", "--", "vllm.service"]),
    # vllm_health_info's: stamps as @N
    (("ActiveState", "ActiveEnterTimestamp"), {"unix_time": True},
     ["/bin/systemctl", "show", "--timestamp=unix", "-p", "ActiveState", "-p", "ActiveEnterTimestamp", "vllm.service"]),
])
def test_show_argv(properties, options, argv):
    assert show_argv("/bin/systemctl", "vllm.service", properties, **options) == argv
