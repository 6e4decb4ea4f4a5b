"""Reading a generation request's body (generation.py): the budget fields,
the prompt shapes, the estimate, and every admitted route's reader."""
from __future__ import annotations

import pytest

from vllm_fleet_gate.admission import BadRequest
from vllm_fleet_gate.generation import (
    GENERATION_ROUTES,
    Plan,
    Prompt,
    chat_messages,
    estimate_tokens,
    prompt_parts,
    read_limits,
    text_chars,
)


# -- reading requests -------------------------------------------------------------
@pytest.mark.parametrize(
    "payload, expected",
    [
        ({}, (None, 1)),
        ({"max_tokens": 5}, (5, 1)),
        ({"max_tokens": None}, (None, 1)),
        ({"max_tokens": 5, "max_completion_tokens": 7}, (7, 1)),
        ({"n": 3}, (None, 3)),
        ({"n": 2, "best_of": 4}, (None, 4)),
    ],
)
def test_read_limits(payload, expected):
    assert read_limits(payload) == expected


_PROMPT_SHAPES = "prompt must be a string, a list of strings, a list of token IDs or a list of lists of token IDs"
_MESSAGES_SHAPE = "messages must be a non-empty list of message objects"


@pytest.mark.parametrize(
    "prompt, parts",
    [
        ("hello", ["hello"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [3]),
        ([[1, 2], [3]], [2, 1]),
    ],
)
def test_prompt_parts(prompt, parts):
    assert prompt_parts({"prompt": prompt}) == parts


@pytest.mark.parametrize(
    "reader, payload, message",
    [
        (read_limits, {"max_tokens": -1}, "max_tokens must be at least 1, got -1"),
        (read_limits, {"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
        (read_limits, {"max_tokens": "10"}, "max_tokens must be an integer, got str"),
        (read_limits, {"max_tokens": 1.5}, "max_tokens must be an integer, got float"),
        (read_limits, {"max_tokens": True}, "max_tokens must be an integer, got bool"),
        (read_limits, {"max_completion_tokens": -3}, "max_completion_tokens must be at least 1, got -3"),
        (read_limits, {"n": 0}, "n must be at least 1, got 0"),
        (prompt_parts, {}, "prompt is required"),
        (prompt_parts, {"prompt": []}, _PROMPT_SHAPES),
        (prompt_parts, {"prompt": 5}, _PROMPT_SHAPES),
        (prompt_parts, {"prompt": ["a", 1]}, _PROMPT_SHAPES),
        (prompt_parts, {"prompt": [[1], []]}, _PROMPT_SHAPES),
        (chat_messages, {}, "messages is required"),
        (chat_messages, {"messages": []}, _MESSAGES_SHAPE),
        (chat_messages, {"messages": ["hi"]}, _MESSAGES_SHAPE),
    ],
)
def test_readers_reject(reader, payload, message):
    with pytest.raises(BadRequest) as exc:
        reader(payload)
    assert exc.value.message == message


def test_estimate_counts_every_string():
    messages = [
        {"role": "user", "content": "abcd" * 10},
        {"role": "assistant", "content": [{"type": "text", "text": "xy"}]},
    ]
    assert text_chars(messages) == 4 + 40 + 9 + 4 + 2  # values only, not keys
    assert estimate_tokens(63, 4) == 16
    assert estimate_tokens(0, 4) == 0
    assert estimate_tokens(10, 2.5) == 4


# -- the generation routes ------------------------------------------------------------
USER = [{"role": "user", "content": "hi there"}]


@pytest.mark.parametrize(
    "path, payload, plan",
    [
        ("/v1/completions", {"prompt": "a b", "max_tokens": 3},
         Plan((Prompt(tokenize={"prompt": "a b"}, chars=3),), 3, 1)),
        ("/v1/completions", {"prompt": [[1, 2], [3]], "n": 2},
         Plan((Prompt(tokens=2), Prompt(tokens=1)), None, 2)),
        ("/v1/chat/completions", {"messages": USER, "max_completion_tokens": 4},
         Plan((Prompt(tokenize={"messages": USER}, chars=12),), 4, 1)),
        ("/v1/chat/completions", {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
         Plan((Prompt(tokenize={"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
                      chars=12 + 9),), None, 1)),
        ("/v1/chat/completions/batch", {"messages": [USER, USER], "max_tokens": 2},
         Plan((Prompt(tokenize={"messages": USER}, chars=12),) * 2, 2, 1)),
        ("/v1/responses", {"input": "hi there", "max_output_tokens": 5},
         Plan((Prompt(tokenize={"messages": USER}, chars=8),), 5, 1)),
        ("/v1/responses", {"instructions": "be brief", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi there"}]}]},
         Plan((Prompt(tokenize={"messages": [{"role": "system", "content": "be brief"}] + USER},
                      chars=8 + 7 + 4 + 10 + 8),), None, 1)),
        # an image: no plain text to tokenize, so all of it by estimate; tools always by estimate
        ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
                           "tools": [{"type": "function", "name": "lookup"}]},
         Plan((Prompt(chars=4 + 11 + 1, extra_chars=8 + 6),), None, 1)),
        ("/v1/responses", {"previous_response_id": "resp_1"}, Plan((Prompt(),), None, 1)),
        ("/v1/messages", {"system": "be brief", "messages": USER, "max_tokens": 7, "tools": [{"name": "t"}]},
         Plan((Prompt(tokenize={"messages": [{"role": "system", "content": "be brief"}] + USER}, chars=8 + 12,
                      extra_chars=1),), 7, 1)),
        ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]},
         Plan((Prompt(tokenize={"messages": USER}, chars=4 + 4 + 8),), None, 1)),
        ("/inference/v1/generate", {"token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 9, "n": 2}},
         Plan((Prompt(tokens=3),), 9, 2)),
        ("/inference/v1/generate", {"token_ids": [5]}, Plan((Prompt(tokens=1),), None, 1)),
        ("/generative_scoring", {"query": [1, 2], "items": [[3], [4, 5]], "label_token_ids": [9]},
         Plan((Prompt(tokens=3), Prompt(tokens=4)), 1, 1)),
        ("/generative_scoring", {"query": "is it", "items": ["yes", "no"]},
         Plan((Prompt(chars=8), Prompt(chars=7)), 1, 1)),
        ("/invocations", {"messages": USER, "max_tokens": 2},
         Plan((Prompt(tokenize={"messages": USER}, chars=12),), 2, 1)),
        ("/invocations", {"prompt": "a b"}, Plan((Prompt(tokenize={"prompt": "a b"}, chars=3),), None, 1)),
        ("/invocations", {"input": "embed me"}, None),
    ],
)
def test_generation_routes_read_their_bodies(path, payload, plan):
    assert GENERATION_ROUTES[path](payload) == plan


@pytest.mark.parametrize("seed", range(3))
def test_generation_readers_take_any_json_object(seed):
    """Hostile bodies: every reader returns a plan (or None) or raises
    BadRequest, never anything else."""
    import random

    rnd = random.Random(seed)
    keys = ["prompt", "messages", "input", "instructions", "system", "tools", "max_tokens", "max_output_tokens",
            "max_completion_tokens", "n", "best_of", "token_ids", "sampling_params", "query", "items", "content"]

    def value(depth=0):
        kinds = [None, True, -1, 0, 3, 2.5, "", "w w", [], {}]
        if depth < 3:
            kinds += [[value(depth + 1) for _ in range(rnd.randint(1, 3))],
                      {rnd.choice(keys + ["role", "text"]): value(depth + 1) for _ in range(rnd.randint(1, 3))}]
        return rnd.choice(kinds)

    for _ in range(1000):
        payload = {rnd.choice(keys): value() for _ in range(rnd.randint(0, 5))}
        for reader in GENERATION_ROUTES.values():
            try:
                plan = reader(payload)
            except BadRequest:
                continue
            assert plan is None or all(p.tokens >= 0 and p.chars >= 0 for p in plan.prompts)
