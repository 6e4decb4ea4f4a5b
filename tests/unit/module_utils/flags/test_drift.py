"""Tests for plugins/module_utils/flags/drift.py."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.cmdline import parse_cmdline
from ansible.module_utils.flags.drift import compare_unit, drift_message, running_unit, split_exec_argv
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.host.systemd import UnitInfo

# The ExecStart format systemd prints (systemctl show, systemd 252):
# `{ path=P ; argv[]=A B C ; ignore_errors=no ; start_time=[...] ; stop_time=[...] ; pid=N ; code=... ; status=... }`
SHOW = """MainPID=4242
LoadState=loaded
ExecStart={{ path=/opt/vllm/venv/bin/vllm ; argv[]={argv} ; ignore_errors=no ; \
start_time=[Sat 2026-11-29 16:01:09 UTC] ; stop_time=[n/a] ; pid=4242 ; code=(null) ; status=0/0 }}
"""


def _unit(argv: str) -> UnitInfo:
    return running_unit(SHOW.format(argv=argv), "vllm.service")


def test_running_unit():
    info = _unit("/opt/vllm/venv/bin/vllm serve /m -tp 2")
    assert (info.load_state, info.main_pid, info.exec_path, info.exec_argv) == (
        "loaded", 4242, "/opt/vllm/venv/bin/vllm", "/opt/vllm/venv/bin/vllm serve /m -tp 2")


@pytest.mark.parametrize("text,message", [
    ("MainPID=0\nLoadState=not-found\nExecStart=\n",
     "unit nope.service not found (LoadState=not-found); check the name with "
     "`systemctl list-unit-files 'nope.service*'`"),
    ("", "unit nope.service not found (LoadState=unknown); check the name with "
         "`systemctl list-unit-files 'nope.service*'`"),
    ("MainPID=0\nLoadState=loaded\nExecStart=\n",
     "unit nope.service has no running main process (MainPID=0); start it, or see "
     "`systemctl status nope.service`"),
])
def test_running_unit_errors(text, message):
    with pytest.raises(SourceError) as err:
        running_unit(text, "nope.service")
    assert str(err.value) == message


def test_split_exec_argv_rejoins_json():
    assert split_exec_argv('vllm serve /m --compilation-config {"level": 0, "x": [1, 2]} -tp 2') == [
        "vllm", "serve", "/m", "--compilation-config", '{"level": 0, "x": [1, 2]}', "-tp", "2"]


RUNNING = ["/opt/vllm/venv/bin/python3", "/opt/vllm/venv/bin/vllm", "serve", "/m",
           "--tensor-parallel-size", "2", "--compilation-config", '{"level": 0}']

DRIFTS = [
    ("same", "/opt/vllm/venv/bin/vllm serve /m --tensor-parallel-size 2 --compilation-config "
     '{"level": 0}', False, []),
    ("reordered and respelled", "/opt/vllm/venv/bin/vllm serve /m -cc {\"level\":0} -tp=2",
     False, []),
    ("bare name", 'vllm serve /m --tensor-parallel-size 2 --compilation-config {"level": 0}',
     False, []),
    ("variables", "/opt/vllm/venv/bin/vllm serve ${MODEL} --tensor-parallel-size $TP "
     '--compilation-config {"level": 0}', False, []),
    ("value changed", "/opt/vllm/venv/bin/vllm serve /m --tensor-parallel-size 4 "
     '--compilation-config {"level": 0}', True,
     ["tensor_parallel_size: unit --tensor-parallel-size 4, running --tensor-parallel-size 2"]),
    ("flag added", "/opt/vllm/venv/bin/vllm serve /m --tensor-parallel-size 2 "
     '--compilation-config {"level": 0} --watermark 0.05', True,
     ["watermark: unit --watermark 0.05, not in the running process"]),
    ("other venv", "/opt/vllm2/bin/vllm serve /m --tensor-parallel-size 2 "
     '--compilation-config {"level": 0}', True,
     ["launcher: unit /opt/vllm2/bin/vllm, running /opt/vllm/venv/bin/vllm"]),
]


@pytest.mark.parametrize("exec_argv,drifted,details", [d[1:] for d in DRIFTS],
                         ids=[d[0] for d in DRIFTS])
def test_compare_unit(table, exec_argv, drifted, details):
    running = parse_cmdline(RUNNING, table)
    info = _unit(exec_argv)
    if exec_argv.startswith("/opt/vllm2"):
        info.exec_path = "/opt/vllm2/bin/vllm"
    drift = compare_unit(running, info, table)
    assert drift.drifted is drifted
    assert drift.details == details


def test_drift_message(table):
    running = parse_cmdline(RUNNING, table)
    drift = compare_unit(running, _unit("/opt/vllm/venv/bin/vllm serve /m -tp 4 "
                                        '--compilation-config {"level": 0}'), table)
    assert drift_message(drift) == (
        "the running process differs from the unit's ExecStart: tensor_parallel_size: unit -tp 4, "
        "running --tensor-parallel-size 2 ; restart the unit to apply it")
