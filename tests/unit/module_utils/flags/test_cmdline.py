"""Tests for plugins/module_utils/flags/cmdline.py, read against the real
``vllm serve --help=all`` of vLLM 0.32.0."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.flags.cmdline import parse_cmdline, read_proc_cmdline
from ansible.module_utils.flags.errors import CmdlineError, SourceError
from ansible.module_utils.flags.help import parse_help
from ansible.module_utils.flags.secrets_mask import MASK
from help_tables import drop_flag

CMDLINES = [
    # id, command line, expected {dest: value}, unknown [(flag, reason)]
    ("space", "vllm serve /m --tensor-parallel-size 2",
     {"model_tag": "/m", "model": "/m", "tensor_parallel_size": 2}, []),
    ("equals", "vllm serve /m --tensor-parallel-size=2 --watermark=0.05",
     {"tensor_parallel_size": 2, "watermark": 0.05}, []),
    ("negative", "vllm serve /m --no-scheduler-reserve-full-isl",
     {"scheduler_reserve_full_isl": False}, []),
    ("positive", "vllm serve /m --scheduler-reserve-full-isl --enforce-eager",
     {"scheduler_reserve_full_isl": True, "enforce_eager": True}, []),
    ("repeat last wins", "vllm serve /m -tp 2 --tensor-parallel-size 4 "
     "--no-enable-prefix-caching --enable-prefix-caching",
     {"tensor_parallel_size": 4, "enable_prefix_caching": True}, []),
    ("short forms", "vllm serve /m -tp 2 -pp 3 -dp=4 -dpe",
     {"tensor_parallel_size": 2, "pipeline_parallel_size": 3, "data_parallel_size": 4,
      "data_parallel_external_lb": True}, []),
    ("json values", "vllm serve /m --compilation-config '{\"level\": 0}' "
     "--kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'",
     {"compilation_config": {"level": 0},
      "kv_transfer_config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}}, []),
    ("dotted json keys", "vllm serve /m --compilation-config '{\"level\": 0}' -cc.mode=3 "
     "--compilation-config.pass_config.fuse true --compilation-config.custom_ops+ a,b",
     {"compilation_config": {"mode": 3, "pass_config": {"fuse": True},
                             "custom_ops": ["a", "b"]}}, []),
    ("underscores", "vllm serve /m --tensor_parallel_size 2 --max_num_seqs=8",
     {"tensor_parallel_size": 2, "max_num_seqs": "8"}, []),
    ("unique prefix", "vllm serve /m --tensor-parallel 2 --distributed-executor ray",
     {"tensor_parallel_size": 2, "distributed_executor_backend": "ray"}, []),
    ("human int", "vllm serve /m --max-model-len 128K --kv-cache-memory-bytes 1k",
     {"max_model_len": 131072, "kv_cache_memory_bytes": 1000}, []),
    ("negative number value", "vllm serve /m --max-model-len -1",
     {"max_model_len": -1}, []),
    ("lists", "vllm serve /m --served-model-name a b --api-key k1 k2",
     {"served_model_name": ["a", "b"], "api_key": [MASK, MASK]}, []),
    ("optional value", "vllm serve /m --hf-token --port 8001",
     {"hf_token": True, "port": 8001}, []),
    ("choices none", "vllm serve /m --dcp-comm-backend None --max-lora-rank 64",
     {"dcp_comm_backend": None, "max_lora_rank": 64}, []),
    ("--model in serve", "vllm serve --model /m -tp 2",
     {"model": "/m", "model_tag": "/m", "tensor_parallel_size": 2}, []),
    ("venv path", "/opt/venv/bin/vllm serve /m --distributed-executor-backend ray",
     {"model_tag": "/m", "distributed_executor_backend": "ray"}, []),
    ("console script under python", "/opt/venv/bin/python3 /opt/venv/bin/vllm serve /m -tp 2",
     {"model_tag": "/m", "tensor_parallel_size": 2}, []),
    ("api_server module", "python -m vllm.entrypoints.openai.api_server --model /m -tp 2",
     {"model": "/m", "tensor_parallel_size": 2}, []),
    ("cli module", "python3 -m vllm.entrypoints.cli.main serve /m -tp 2",
     {"model_tag": "/m", "tensor_parallel_size": 2}, []),
    ("env wrapper", "env VLLM_HOST_IP=10.0.0.1 HF_TOKEN=x vllm serve /m -tp 2",
     {"model_tag": "/m", "tensor_parallel_size": 2}, []),
    ("bash -c wrapper", ["/bin/bash", "-c", "exec /opt/venv/bin/vllm serve /m -tp 2"],
     {"model_tag": "/m", "tensor_parallel_size": 2}, []),
    ("bare argument list", "--tensor-parallel-size 2 --watermark 0.1",
     {"tensor_parallel_size": 2, "watermark": 0.1}, []),
    ("unknown flag", "vllm serve /m --bogus-flag 1 -tp 2",
     {"model_tag": "/m", "tensor_parallel_size": 2}, [("--bogus-flag", "unknown")]),
    ("ambiguous prefix", "vllm serve /m --max-num 4",
     {"model_tag": "/m"}, [("--max-num", "ambiguous")]),
    ("missing value", "vllm serve /m --watermark --port 1",
     {"port": 1}, [("--watermark", "missing value")]),
    ("value to a switch", "vllm serve /m --enforce-eager=yes",
     {"model_tag": "/m"}, [("--enforce-eager", "takes no value")]),
    ("second positional", "vllm serve /m /other",
     {"model_tag": "/m"}, [("/other", "positional")]),
    ("positional in api_server", "python -m vllm.entrypoints.openai.api_server /m",
     {}, [("/m", "positional")]),
]


@pytest.mark.parametrize("cmd,values,unknown", [c[1:] for c in CMDLINES],
                         ids=[c[0] for c in CMDLINES])
def test_parse_cmdline(table, cmd, values, unknown):
    parsed = parse_cmdline(cmd, table)
    got = {dest: s.value for dest, s in parsed.settings.items()}
    for dest, value in values.items():
        assert dest in got, dest
        assert got[dest] == value
        assert type(got[dest]) is type(value)
    if not values:
        assert got == {}
    assert [(u.flag, u.reason) for u in parsed.unknown] == unknown


def test_parse_cmdline_evidence(table):
    parsed = parse_cmdline("vllm serve /m -tp=2 --watermark 0.15 --api-key s3cret", table)
    assert parsed.settings["tensor_parallel_size"].evidence == "-tp=2"
    assert parsed.settings["watermark"].evidence == "--watermark 0.15"
    assert parsed.settings["api_key"].evidence == f"--api-key {MASK}"
    assert parsed.form == "serve"
    assert parsed.args == ["/m", "-tp=2", "--watermark", "0.15", "--api-key", "s3cret"]


@pytest.mark.parametrize("cmd", ["ray start --head", "sleep 60", "python train.py serve"])
def test_parse_cmdline_not_vllm(table, cmd):
    with pytest.raises(CmdlineError) as err:
        parse_cmdline(cmd, table)
    assert str(err.value) == (
        "the command line does not look like a vLLM server: expected `vllm serve ...` or "
        f"`python -m vllm.entrypoints.openai.api_server ...`, got: {cmd}")


@pytest.mark.parametrize("cmd,message", [
    ("", "the command line is empty"),
    ("vllm serve '/m", "cannot split the command line (No closing quotation); check its quoting"),
    (42, "cmdline must be a list or a string, got int"),
])
def test_parse_cmdline_bad_input(table, cmd, message):
    with pytest.raises(CmdlineError) as err:
        parse_cmdline(cmd, table)
    assert str(err.value) == message


def test_abbreviation_of_a_longer_flag(help_all):
    # argparse's allow_abbrev: without --watermark, `--watermark` is a prefix of
    # --watermark-config only, so argparse (and this parser) reads it as that flag
    table = parse_help(drop_flag(help_all, "--watermark"))
    parsed = parse_cmdline("vllm serve /m --watermark 0.05", table)
    assert parsed.unknown == []
    assert parsed.settings["watermark_config"].value == "0.05"
    assert parsed.settings["watermark_config"].evidence == "--watermark 0.05"


def wait_for_exec(pid: int) -> None:
    """Popen may return (vfork) before the kernel has filled the new cmdline."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        time.sleep(0.01)


def test_read_proc_cmdline_real_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "serve", "/m", "--tensor-parallel-size", "2"])
    try:
        wait_for_exec(proc.pid)
        assert read_proc_cmdline(proc.pid) == [sys.executable, "-c", "import time; time.sleep(60)",
                                               "serve", "/m", "--tensor-parallel-size", "2"]
    finally:
        proc.kill()
        proc.wait()


def test_read_proc_cmdline_errors(tmp_path):
    # above the kernel's pid_max ceiling (2**22), so never a live process
    with pytest.raises(SourceError) as err:
        read_proc_cmdline(2 ** 22 + 1)
    assert str(err.value) == (
        "no process with pid 4194305 (/proc/4194305/cmdline does not exist); check that the "
        "vLLM server is running and the pid is current")
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"")
    with pytest.raises(SourceError) as err:
        read_proc_cmdline(7, proc=str(tmp_path))
    assert str(err.value) == "pid 7 has an empty command line (a zombie or a kernel thread)"
