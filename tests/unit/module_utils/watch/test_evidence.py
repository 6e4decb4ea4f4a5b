"""Tests for plugins/module_utils/watch/evidence.py: the masking of everything
the evidence bundle writes (named secrets and secret-looking words, over real
lines and hostile text, in linear time), which processes get their stacks
dumped, and the bundle's name."""
from __future__ import annotations

import datetime

import pytest
from ansible.module_utils.watch import evidence as E
from ansible.module_utils.watch.errors import WatchError
from hostile import any_text, assert_linear
from hypothesis import given, settings
from hypothesis import strategies as st

KEY = "lab-engine-key-0d9c41f7-not-a-secret"
TOKEN = "lab-heal-token-9a41c0d3-not-a-secret"


@pytest.mark.parametrize("line, masked", [
    # vLLM's own start line, as the journal keeps it.
    ("vllm serve /opt/model --api-key lab-engine-key-0d9c41f7-not-a-secret --port 8000",
     "vllm serve /opt/model --api-key ******** --port 8000"),
    ("--api-key=abc123def --hf-token hf_abcdefgh", "--api-key=******** --hf-token ********"),
    ("Authorization: Bearer sk-live-123456", "Authorization: Bearer ********"),
    ("HF_TOKEN=hf_abc VLLM_API_KEY: 'xyz123' ok", "HF_TOKEN=******** VLLM_API_KEY: '********' ok"),
    ('{"api_key": "s3cr3t-value", "n": 1}', '{"api_key": "********", "n": 1}'),
    # Evidence, not secrets: lower-case *tokens settings and figures stay.
    ("max_num_batched_tokens=2048, prompt_tokens: 1024, monkey: banana",
     "max_num_batched_tokens=2048, prompt_tokens: 1024, monkey: banana"),
    ("KV cache size: 65,536 tokens; Maximum concurrency for 2,048 tokens per request: 32.00x",
     "KV cache size: 65,536 tokens; Maximum concurrency for 2,048 tokens per request: 32.00x"),
])
def test_mask(line, masked):
    assert E.mask(line) == masked


def test_named_secrets_are_masked_wherever_they_are():
    text = f"key{KEY}tail {TOKEN}\nx{KEY}"
    assert E.mask(text, E.secrets_of([KEY, TOKEN])) == "key********tail ********\nx********"


@pytest.mark.parametrize("values, kept", [
    (None, []),
    (["short", "******", "abcdef", "abcdefgh"], ["abcdefgh", "abcdef"]),
    (["abcdef", "abcdef"], ["abcdef"]),
])
def test_secrets_of(values, kept):
    assert E.secrets_of(values) == kept


@pytest.mark.parametrize("values", ["abc", [1], ["x"] * 257])
def test_secrets_of_refuses_what_is_no_list_of_text(values):
    with pytest.raises(WatchError):
        E.secrets_of(values)


@settings(max_examples=300, deadline=None)
@given(prefix=any_text(200), suffix=any_text(200), secret=st.text(min_size=6, max_size=40).filter(
    lambda s: s.strip("*")))
def test_no_named_secret_survives_masking(prefix, suffix, secret):
    out = E.mask(prefix + secret + suffix, E.secrets_of([secret]))
    assert secret not in out


@settings(max_examples=300, deadline=None)
@given(text=any_text(2000))
def test_mask_takes_any_text_and_is_stable(text):
    once = E.mask(text)
    assert E.mask(once) == once


@pytest.mark.parametrize("value", [None, b"bytes", 3])
def test_mask_refuses_what_is_not_text(value):
    with pytest.raises(WatchError, match="must be text"):
        E.mask(value)


@pytest.mark.parametrize("build", [
    lambda n: "A" * n,
    lambda n: "AB_TOKEN " * (n // 9),
    lambda n: "Bearer " * (n // 7),
    lambda n: ("x" * 63 + "_TOKEN" + " ") * (n // 70),
    lambda n: "api_key" + " " * n,
], ids=["one word", "names without =", "bearers without a token", "long names", "a name then spaces"])
def test_mask_is_linear(build):
    assert_linear(E.mask, build)


def test_the_engines_python_processes_are_picked_by_their_command_line():
    procs = [
        (812, ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "/opt/model", "--api-key", KEY]),
        (900, ["VLLM::EngineCore"]),
        (901, ["ray::RayWorkerWrapper.execute_method"]),
        (700, ["/opt/vllm/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server", "--x"]),
        (701, ["/usr/bin/python3.11", "-m", "ray.util.client.server"]),
        (702, ["/bin/sh", "-c", "sleep 1"]),
        (703, []),
    ]
    got = E.python_processes(procs)
    assert [pid for pid, _ in got] == [701, 812, 900, 901]
    assert KEY not in str(got) and "--api-key ********" in dict(got)[812]


@pytest.mark.parametrize("pid", [0, -1, True, "12"])
def test_a_bad_pid_is_refused(pid):
    with pytest.raises(WatchError, match="positive integer"):
        E.python_processes([(pid, ["python"])])


def test_bundle_name():
    at = datetime.datetime(2026, 12, 6, 11, 5, 9, tzinfo=datetime.UTC)
    assert E.bundle_name("engine_lab", "lab1", at) == "engine_lab-lab1-20261206T110509Z"
    with pytest.raises(WatchError, match="no host name"):
        E.bundle_name("engine_lab", "../etc", at)
