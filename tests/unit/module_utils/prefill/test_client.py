"""Tests for plugins/module_utils/prefill/client.py: EngineClient against a fake
vLLM 0.32 API server on 127.0.0.1 (tests/prefill_fake.py, built from the real
captures in tests/fixtures/prefill/).

What the probe depends on: one kept-alive connection (and one reconnect when
the server closed it), a bearer token on every request, /tokenize-counted
prompts of the length asked, and a sample's engine-side seconds read from the
prefill counters across exactly one completion.
"""
from __future__ import annotations

import re

import pytest
from ansible.module_utils.prefill import client as pc
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.prefill.metrics import parse_metrics
from prefill_fake import IDLE, MODEL, PER_TOKEN, VERSION, FakeVllm, closed_port


@pytest.fixture
def fake():
    with FakeVllm() as server:
        yield server


# --- the address ----------------------------------------------------------------------

@pytest.mark.parametrize("url", ["https://10.0.0.11:8000", "10.0.0.11:8000", "http://", "ftp://10.0.0.11"])
def test_url_must_be_http(url):
    with pytest.raises(PrefillError, match="must be http://HOST:PORT"):
        pc.EngineClient(url)


@pytest.mark.parametrize("url, host, port, prefix", [
    ("http://10.0.0.11:8000", "10.0.0.11", 8000, ""),
    ("http://10.0.0.11:8000/", "10.0.0.11", 8000, ""),
    ("http://10.0.0.11:8000/v1", "10.0.0.11", 8000, ""),       # an OpenAI base URL works too
    ("http://10.0.0.11/engine/v1/", "10.0.0.11", 80, "/engine"),
])
def test_url_parts(url, host, port, prefix):
    c = pc.EngineClient(url)
    assert (c.host, c.port, c.prefix) == (host, port, prefix)


def test_v1_suffix_reaches_the_same_server(fake):
    with pc.EngineClient(fake.url + "/v1") as c:
        assert c.health() == 200
    assert fake.paths == ["/health"]


# --- one request each ------------------------------------------------------------------

def test_health(fake, client):
    assert client.health() == 200
    fake.health_status = 503
    assert client.health() == 503


def test_refused_is_unreachable():
    with pc.EngineClient("http://127.0.0.1:%d" % closed_port()) as c:
        with pytest.raises(pc.EngineUnreachable, match="Connection refused"):
            c.health()


def test_metrics_is_the_capture(client):
    snap = client.metrics()
    assert snap == parse_metrics(IDLE)
    assert (snap.prompt_tokens, snap.generation_tokens, snap.waiting_capacity) == (636762.0, 546.0, 0.0)
    assert snap.busy is False


def test_metrics_elsewhere_is_not_vllm(fake):
    with pc.EngineClient(fake.url + "/other") as c:
        with pytest.raises(PrefillError, match=r"GET /metrics answered HTTP 404: is this vLLM's API port\?"):
            c.metrics()


def test_version(fake, client):
    assert client.version() == VERSION == "0.32.0"
    fake.version_status = 404
    with pytest.raises(PrefillError, match="GET /version answered HTTP 404"):
        client.version()


def test_json_rejects_text(client):
    with pytest.raises(PrefillError, match="did not answer JSON"):
        client.json("GET", "/metrics")


def test_count_tokens(client):
    assert client.count_tokens(MODEL, "alpha bravo charlie") == 4


def test_count_tokens_unknown_model(client):
    with pytest.raises(PrefillError, match="POST /tokenize answered HTTP 404: .*The model `other` does not exist"):
        client.count_tokens("other", "alpha")


# --- build_prompt -----------------------------------------------------------------------

@pytest.mark.parametrize("tokens", [16, 17, 32, 100, 1024, 4096])
def test_build_prompt_hits_the_count(fake, client, tokens):
    prompt, counted = client.build_prompt(MODEL, tokens)
    assert counted == tokens
    assert fake.count(prompt) == tokens
    assert set(prompt.split()) <= set(pc._WORDS)
    assert len([p for p in fake.paths if p == "/tokenize"]) <= 8


def test_build_prompt_nearest_below_when_exact_is_impossible(fake, client):
    # Two tokens a word plus the BOS: only odd counts exist.
    fake.tokens_per_word = 2
    prompt, counted = client.build_prompt(MODEL, 32)
    assert counted == 31 == fake.count(prompt)


@pytest.mark.parametrize("tokens", [0, 8, 15])
def test_build_prompt_too_short(client, tokens):
    with pytest.raises(PrefillError, match="too short to time a prefill; use at least 16"):
        client.build_prompt(MODEL, tokens)


def test_build_prompt_gives_up_when_far(fake, client):
    fake.tokens_per_word = 40  # even one word is over the count
    with pytest.raises(PrefillError, match="could not build a 32-token prompt"):
        client.build_prompt(MODEL, 32)


# --- sample -----------------------------------------------------------------------------

def test_sample_reads_the_engines_prefill(fake, client):
    prompt, counted = client.build_prompt(MODEL, 32)
    sample, before, after = client.sample(MODEL, prompt)
    assert sample.prompt_tokens == counted == 32
    assert sample.server_seconds == pytest.approx(PER_TOKEN * 32)
    assert sample.seconds_per_token == pytest.approx(PER_TOKEN)
    assert 0 < sample.client_seconds < 1
    assert after.prefill_time_count == before.prefill_time_count + 1
    assert after.prompt_tokens == before.prompt_tokens + 32
    assert set(sample.as_dict()) == {"server_seconds", "client_seconds", "prompt_tokens", "seconds_per_token"}


def test_sample_scaled(fake, client):
    prompt, _ = client.build_prompt(MODEL, 32)
    fake.scale = 3.0
    assert client.sample(MODEL, prompt)[0].seconds_per_token == pytest.approx(3 * PER_TOKEN)


def test_every_completion_is_one_token_with_a_fresh_salt(fake, client):
    prompt, _ = client.build_prompt(MODEL, 32)
    for _ in range(4):
        client.sample(MODEL, prompt)
    bodies = fake.completions
    assert len(bodies) == 4
    assert all(b["max_tokens"] == 1 and b["temperature"] == 0 and b["model"] == MODEL and b["prompt"] == prompt
               for b in bodies)
    salts = [b["cache_salt"] for b in bodies]
    assert len(set(salts)) == 4
    assert all(re.fullmatch(r"[0-9a-f]{32}", s) for s in salts)


def test_sample_waits_for_the_metrics_to_settle(fake, client):
    # The finished request reaches /metrics two scrapes late: the sample still counts it.
    prompt, _ = client.build_prompt(MODEL, 32)
    fake.lag = 2
    sample, before, after = client.sample(MODEL, prompt)
    assert sample.server_seconds == pytest.approx(PER_TOKEN * 32)
    assert after.prefill_time_count == before.prefill_time_count + 1
    assert fake.paths.count("/metrics") == 1 + 3


def test_sample_metric_did_not_move(fake, client, fast_settle):
    prompt, _ = client.build_prompt(MODEL, 32)
    fake.frozen = True
    with pytest.raises(PrefillError, match="did not move by exactly one request"):
        client.sample(MODEL, prompt)


def test_sample_another_request_finished_too(fake, client):
    prompt, _ = client.build_prompt(MODEL, 32)
    fake.on_completion = lambda f, i: f.finish(100, 1.0)  # someone else's prefill in the same window
    with pytest.raises(PrefillError, match="did not move by exactly one request"):
        client.sample(MODEL, prompt)


def test_sample_without_usage(fake, client, monkeypatch):
    prompt, _ = client.build_prompt(MODEL, 32)

    def no_usage(h, body):
        fake.finish(32, PER_TOKEN * 32)
        fake._answer(h, 200, {"choices": []})

    monkeypatch.setattr(fake, "_complete", no_usage)
    with pytest.raises(PrefillError, match="usage has no prompt_tokens"):
        client.sample(MODEL, prompt)


# --- the connection ---------------------------------------------------------------------

def test_one_connection_for_everything(fake, client):
    client.health()
    client.version()
    prompt, _ = client.build_prompt(MODEL, 32)
    for _ in range(3):
        client.sample(MODEL, prompt)
    assert len(fake.requests) > 10
    assert fake.connections == 1
    assert all(h.get("Connection") == "keep-alive" for _, _, h, _ in fake.requests)


def test_reconnects_once_when_the_server_closed_it(fake, client):
    # uvicorn closes a connection idle past its keep-alive; the next request goes on a fresh one.
    fake.drop_connections = True
    assert [client.health() for _ in range(3)] == [200, 200, 200]
    assert fake.paths == ["/health"] * 3
    assert fake.connections == 3


def test_timeout_closes_the_connection(fake):
    fake.hang_from = 0
    with pc.EngineClient(fake.url, timeout=0.2) as c:
        with pytest.raises(pc.EngineTimeout, match=r"POST /v1/completions got no answer in 0.2 s"):
            c.json("POST", "/v1/completions", {"model": MODEL, "prompt": "alpha"})
        assert c._conn is None
        assert c.health() == 200  # a fresh connection
    assert fake.connections == 2


def test_per_request_timeout(fake):
    fake.hang_from = 0
    with pc.EngineClient(fake.url, timeout=30) as c:
        with pytest.raises(pc.EngineTimeout, match="in 0.1 s"):
            c.json("POST", "/v1/completions", {"model": MODEL, "prompt": "alpha"}, timeout=0.1)


@pytest.mark.parametrize("key", ["sk-test-123", None])
def test_api_key_is_a_bearer_token(fake, key):
    with pc.EngineClient(fake.url, api_key=key) as c:
        c.health()
        c.version()
    assert [h.get("Authorization") for _, _, h, _ in fake.requests] == (
        ["Bearer " + key] * 2 if key else [None, None])


def test_wrong_key_is_refused_on_v1(fake):
    fake.api_key = "sk-right"
    with pc.EngineClient(fake.url, api_key="sk-wrong") as c:
        assert c.health() == 200  # vLLM guards /v1 only
        with pytest.raises(PrefillError, match="answered HTTP 401"):
            c.json("POST", "/v1/completions", {"model": MODEL, "prompt": "alpha"})
