"""Property tests for plugins/module_utils/flags/help_cache.py over hostile input
(tests/hostile.py): a cache entry made from the real ``vllm serve --help=all``
of vLLM 0.32.0 (tests/help_tables.py) and a real ``vllm --version`` output,
cut anywhere, mutated, replaced by arbitrary text or bytes, and JSON of any
depth and shape, as a file on a host can be after a full disk or a crash.

What they promise: read_entry and HelpCache.load return a CachedHelp or None,
and never raise (not json's RecursionError on deep brackets, not int()'s
ValueError past 4,300 digits, not a TypeError for a file that holds no text);
a cut entry is a miss, never a smaller table; a miss is linear in the file.
"""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.flags.help_cache import FORMAT, CachedHelp, HelpCache, entry_text, read_entry
from help_tables import HELP_PATH
from hostile import HUGE_NUMBER, any_text, assert_linear, cut_points, mutated, nested
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HELP = HELP_PATH.read_text()
VERSION_OUT = "INFO 11-29 16:01:11 [__init__.py:1] Automatically detected platform cpu.\n0.32.0\n"
ENTRY = entry_text("/opt/vllm/bin/vllm", HELP, VERSION_OUT)
WHOLE = read_entry(ENTRY)

def test_the_entry_reads():
    assert isinstance(WHOLE, CachedHelp) and WHOLE.version == "0.32.0"
    assert "tensor_parallel_size" in WHOLE.table.flags


def assert_hit_or_miss(hit) -> None:
    assert hit is None or (isinstance(hit, CachedHelp) and "tensor_parallel_size" in hit.table.flags)


SMALL_ENTRY = json.dumps({"format": FORMAT, "vllm_bin": "/v", "help": "usage: vllm serve\n  --tensor-parallel-size T",
                          "version": "0.32.0"})


@given(st.one_of(any_text(), mutated([SMALL_ENTRY, ENTRY[:3000], ENTRY[-3000:]]),
                 st.sampled_from([nested(100_000), nested(100_000, '{"a": ', "}"), f'{{"format": {HUGE_NUMBER}}}',
                                  '{"format": true, "help": "x", "version": "0.32.0"}', "NaN", "null", '"x"'])))
def test_read_entry_never_raises(text):
    assert_hit_or_miss(read_entry(text))


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=10)


@given(st.fixed_dictionaries({}, optional={"format": JSONISH, "help": st.one_of(JSONISH, st.just(HELP)),
                                            "version": st.one_of(JSONISH, st.just(VERSION_OUT))}))
def test_an_entry_of_any_shape_is_a_hit_or_a_miss(data):
    hit = read_entry(json.dumps(data))
    assert_hit_or_miss(hit)
    if hit is not None:
        assert type(data["format"]) is int and data["format"] == FORMAT and data["help"] == HELP


def test_a_format_of_true_is_a_miss():
    """true == 1 in Python: the format is compared as an int."""
    data = json.loads(ENTRY)
    assert FORMAT == 1 and read_entry(json.dumps(dict(data, format=True))) is None


def test_a_cut_entry_is_a_miss():
    for cut in cut_points(ENTRY, step=997):
        assert read_entry(cut) is None or cut == ENTRY
    assert read_entry(ENTRY[:-1]) is None


@pytest.mark.parametrize("value", [None, 3, b"\xff\xfe", bytearray(b"{}"), ["{}"]])
def test_what_is_no_text_is_a_miss(value):
    assert read_entry(value) is None


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=2000), st.just(ENTRY.encode()[:5000] + b"\xff\x00")))
def test_a_file_of_any_bytes_is_a_miss(tmp_path, data):
    cache = HelpCache(str(tmp_path))
    (tmp_path / "k.json").write_bytes(data)
    assert cache.load("k") is None


def test_a_file_that_is_no_file_is_a_miss(tmp_path):
    (tmp_path / "k.json").mkdir()
    assert HelpCache(str(tmp_path)).load("k") is None
    assert HelpCache(str(tmp_path / "missing")).load("k") is None


def test_a_miss_is_linear():
    assert_linear(read_entry, lambda n: "[" * n)
    assert_linear(read_entry, lambda n: '{"format": 1, "help": "' + "x" * n)
    assert_linear(read_entry, lambda n: json.dumps({"format": FORMAT, "help": "x\n" * (n // 2), "version": "0.32.0"}))
