"""lab/traffic/shapes.py against the fake engine of tests/prefill_fake.py: each shape sends what
it says, through the official openai client, and counts what came back."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from prefill_fake import MODEL, FakeVllm

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "traffic"))

from shapes import SHAPES, Load  # noqa: E402


def run(fake: FakeVllm, shape: str, until: int = 6, **kw) -> Load:
    with Load(fake.url, None, shape, MODEL, **kw) as load:
        deadline = time.monotonic() + 20
        while load.ok + load.failed < until and time.monotonic() < deadline:
            time.sleep(0.02)
    return load


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_is_answered_in_full(shape):
    with FakeVllm() as fake:
        load = run(fake, shape, until=2 if shape in ("session", "bursts") else 6)
        bodies = list(fake.completions)
    assert load.ok >= 2 and load.failed == 0, load.errors
    assert all(b["model"] == MODEL and b.get("ignore_eos") for b in bodies)


def test_the_shapes_send_what_they_say():
    with FakeVllm() as fake:
        run(fake, "chat-cached", prefix_words=50)
        chat = list(fake.completions)
    with FakeVllm() as fake:
        run(fake, "decode-heavy")
        decode = list(fake.completions)
    with FakeVllm() as fake:
        run(fake, "bursts", until=3, burst=3, burst_words=20)
        bursts = list(fake.completions)
    # chat-cached: one fixed prefix per session, a short new turn, 4 tokens.
    assert {b["max_tokens"] for b in chat} == {4}
    prefixes = {" ".join(b["prompt"].split()[:50]) for b in chat}
    assert len(prefixes) <= 3
    assert {b["max_tokens"] for b in decode} == {200}
    # bursts: fresh prompts (a cache_salt each), 1 token.
    assert {b["max_tokens"] for b in bursts} == {1}
    assert len({b["cache_salt"] for b in bursts}) == len(bursts)
    assert all(len(b["prompt"].split()) == 20 for b in bursts)


def test_errors_are_counted_not_raised():
    with FakeVllm() as fake:
        url = fake.url
    load = Load(url, None, "decode-heavy", MODEL, timeout=2)
    load._send("hello", 4)
    assert load.failed == 1 and load.ok == 0 and load.errors


def test_an_unknown_shape_is_refused():
    with pytest.raises(ValueError, match="unknown traffic shape 'chatty'"):
        Load("http://127.0.0.1:1", None, "chatty")
