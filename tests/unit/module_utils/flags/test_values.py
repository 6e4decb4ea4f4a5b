"""Tests for plugins/module_utils/flags/values.py, typing values for the flags
of the real ``vllm serve --help=all`` of vLLM 0.32.0."""
from __future__ import annotations

import pytest
from ansible.module_utils.flags.values import (
    JsonBrackets,
    convert_cli_value,
    format_value,
    json_depth,
    to_bool,
    to_float,
    to_int,
)


@pytest.mark.parametrize("dest,raw,value", [
    ("tensor_parallel_size", "2", 2),
    ("tensor_parallel_size", "two", "two"),           # unparsable stays a string
    ("max_model_len", "128K", 131072),                # human-readable: K is 1024
    ("max_model_len", "25.6k", 25600),                # k is 1000
    ("max_model_len", "auto", -1),
    ("max_model_len", "1.5K", "1.5K"),                # binary units take whole numbers only
    ("watermark", "0.05", 0.05),
    ("enforce_eager", "true", True),
    ("compilation_config", '{"level": 0}', {"level": 0}),
    ("allowed_headers", '["*"]', ["*"]),
    ("compilation_config", "{not json", "{not json"),
    ("dcp_comm_backend", "None", None),               # choices include None
    ("max_lora_rank", "64", 64),                      # int choices
    ("distributed_executor_backend", "ray", "ray"),
    ("max_num_seqs", "8", "8"),                       # the help shows no type: kept as written
])
def test_convert_cli_value(table, dest, raw, value):
    got = convert_cli_value(table.flags[dest], raw)
    assert got == value
    assert type(got) is type(value)


@pytest.mark.parametrize("value,out", [
    (True, True), ("yes", True), ("Off", False), (1, True), (0, False), (" t ", True),
])
def test_to_bool(value, out):
    assert to_bool(value) is out


@pytest.mark.parametrize("fn,value", [
    (to_bool, "maybe"), (to_bool, 2), (to_int, True), (to_int, 1.5), (to_int, "1k"), (to_float, False),
    (to_float, "high"), (to_int, None),
])
def test_to_refuses(fn, value):
    with pytest.raises(ValueError):
        fn(value)


def test_to_int_human():
    assert to_int("1k", human=True) == 1000
    assert to_int("1M", human=True) == 2 ** 20
    assert to_int(4.0) == 4


@pytest.mark.parametrize("value,text", [
    (None, "null"), (True, "true"), (False, "false"), ({"b": 1, "a": [1, 2]}, '{"a": [1, 2], "b": 1}'),
    ((1, 2), "[1, 2]"), (0.05, "0.05"), ("ray", "ray"),
])
def test_format_value(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize("pieces, brackets, open_after", [
    (['{"a": [1, {"b": 2}]}'], "{[{}]}", [False]),
    (['{"a]": "[x\\"]"}'], "{}", [False]),                   # brackets and an escaped quote in strings
    (['{"a": "x y', 'z", "b": [1]}'], "{[]}", [True, False]),  # a string goes on into the next piece
    (['["x\\', '" ]'], "[]", [True, False]),                 # a backslash at a piece's end escapes only the join
    (["\\[ ]"], "[]", [False]),                              # a backslash outside a string is no escape
])
def test_json_brackets(pieces, brackets, open_after):
    scan = JsonBrackets()
    found, states = [], []
    for piece in pieces:
        found.extend(scan.brackets(piece))
        states.append(scan.in_string)
    assert "".join(found) == brackets
    assert states == open_after


@pytest.mark.parametrize("text, depth", [("[]", 1), ('[{"a": [1]}]', 3), ('["[[["]', 1), ("[[[[", 4), ("x", 0)])
def test_json_depth(text, depth):
    assert json_depth(text) == depth
