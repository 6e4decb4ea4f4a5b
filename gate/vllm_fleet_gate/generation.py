"""Reading a generation request's body into prompts and a completion
budget (a Plan; the gate counts it into a Demand), and the table of the
routes that are admitted, ``GENERATION_ROUTES``, at the end.

Pure and synchronous, as ``admission.py``: a body that cannot be read
raises BadRequest, with the message and code the client gets.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .admission import BadRequest

# -- reading a request into a Demand ------------------------------------
# The largest budget field the gate takes (int64, as the engine's own
# arithmetic): JSON carries integers of up to 4,300 digits, whose sums the
# messages below could no longer print.
MAX_INT_FIELD = 2**63 - 1


def _int_field(payload: dict, key: str, *, minimum: int) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be an integer, got {type(value).__name__}", "invalid_" + key)
    if value < minimum:
        got = value if value.bit_length() <= 63 else "a number below -2**63"
        raise BadRequest(f"{key} must be at least {minimum}, got {got}", "invalid_" + key)
    if value > MAX_INT_FIELD:
        raise BadRequest(f"{key} must be at most {MAX_INT_FIELD}, got a larger number", "invalid_" + key)
    return value


def read_limits(payload: dict) -> tuple[int | None, int]:
    """(max_tokens, sequences) of a completion or chat request.

    Chat's ``max_completion_tokens`` wins over ``max_tokens`` as in vLLM.
    """
    max_tokens = _int_field(payload, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _int_field(payload, "max_tokens", minimum=1)
    n = _int_field(payload, "n", minimum=1) or 1
    best_of = _int_field(payload, "best_of", minimum=1) or 1
    return max_tokens, max(n, best_of)


_PROMPT_SHAPE = "prompt must be a string, a list of strings, a list of token IDs or a list of lists of token IDs"


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def prompt_parts(payload: dict) -> list[str | int]:
    """A completion request's prompts: text to count, or a token count
    already known (token-ID prompts)."""
    prompt = payload.get("prompt")
    if prompt is None:
        raise BadRequest("prompt is required", "prompt_required")
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest(_PROMPT_SHAPE, "invalid_prompt")
    if _is_ids(prompt):
        return [len(prompt)]
    if all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if all(_is_ids(p) and p for p in prompt):
        return [len(p) for p in prompt]
    raise BadRequest(_PROMPT_SHAPE, "invalid_prompt")


def chat_messages(payload: dict) -> list:
    messages = payload.get("messages")
    if messages is None:
        raise BadRequest("messages is required", "messages_required")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("messages must be a non-empty list of message objects", "invalid_messages")
    return messages


def text_chars(value: Any) -> int:
    """Characters in every string inside ``value`` (messages, tools)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(text_chars(v) for v in value)
    return 0


def estimate_tokens(chars: int, chars_per_token: float) -> int:
    return math.ceil(chars / chars_per_token) if chars > 0 else 0


# -- the generation routes: each body read into prompts and a budget ------------
@dataclass(frozen=True)
class Prompt:
    """One prompt to count: ``tokens`` known exactly (token IDs), plus either
    the engine's count for ``tokenize`` (a /tokenize body, without the model)
    or, without one, an estimate from ``chars``; plus an estimate from
    ``extra_chars``, for what the /tokenize body cannot carry (Responses and
    Anthropic tools)."""

    tokens: int = 0
    tokenize: dict | None = None
    chars: int = 0
    extra_chars: int = 0


@dataclass(frozen=True)
class Plan:
    """What a generation request asks for, before its prompts are counted."""

    prompts: tuple[Prompt, ...]
    max_tokens: int | None  # None: up to the model's limit
    sequences: int = 1


def read_completion(payload: dict) -> Plan:
    """POST /v1/completions: ``prompt``, ``max_tokens``, ``n``/``best_of``."""
    prompts = tuple(
        Prompt(tokens=p) if isinstance(p, int) else Prompt(tokenize={"prompt": p}, chars=len(p))
        for p in prompt_parts(payload)
    )
    return Plan(prompts, *read_limits(payload))


def read_chat(payload: dict) -> Plan:
    """POST /v1/chat/completions: ``messages`` and ``tools``, counted as the
    chat template renders them."""
    messages = chat_messages(payload)
    tools = payload.get("tools")
    body = {"messages": messages, "tools": tools} if tools else {"messages": messages}
    return Plan((Prompt(tokenize=body, chars=text_chars(messages) + text_chars(tools)),), *read_limits(payload))


def read_chat_batch(payload: dict) -> Plan:
    """POST /v1/chat/completions/batch (vLLM): ``messages`` is a list of
    conversations, one prompt each."""
    conversations = payload.get("messages")
    if not isinstance(conversations, list):
        conversations = []
    prompts = tuple(
        Prompt(tokenize={"messages": c}, chars=text_chars(c)) for c in conversations if isinstance(c, list)
    )
    return Plan(prompts, *read_limits(payload))


def read_responses(payload: dict) -> Plan:
    """POST /v1/responses: ``instructions`` and ``input`` (a string or a
    list of items), ``tools``; ``max_output_tokens``; one sequence. An
    ``input`` that is not plain text messages (images, tool calls) is
    counted by estimate."""
    instructions, given = payload.get("instructions"), payload.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    prompt = _system_and_items(instructions, given, items, payload.get("tools"))
    return Plan((prompt,), _int_field(payload, "max_output_tokens", minimum=1))


def read_anthropic(payload: dict) -> Plan:
    """POST /v1/messages (Anthropic's Messages API): ``system``,
    ``messages`` (text blocks or strings), ``tools``; ``max_tokens``."""
    system, given = payload.get("system"), payload.get("messages")
    prompt = _system_and_items(system, given, given, payload.get("tools"))
    return Plan((prompt,), _int_field(payload, "max_tokens", minimum=1))


def read_generate(payload: dict) -> Plan:
    """POST /inference/v1/generate (vLLM's tokens in, tokens out):
    ``token_ids``, counted exactly; ``sampling_params.max_tokens`` and ``n``."""
    ids = payload.get("token_ids")
    params = payload.get("sampling_params")
    prompt = Prompt(tokens=len(ids) if isinstance(ids, list) else 0)
    return Plan((prompt,), *read_limits(params if isinstance(params, dict) else {}))


def read_generative_scoring(payload: dict) -> Plan:
    """POST /generative_scoring (vLLM): one prompt per item, the query and
    the item together, each for one step. Text is counted by estimate."""
    query, items = payload.get("query"), payload.get("items")

    def prompt(item: Any) -> Prompt:
        parts = (query, item)
        return Prompt(
            tokens=sum(len(p) for p in parts if _is_ids(p)),
            chars=sum(len(p) for p in parts if isinstance(p, str)),
        )

    return Plan(tuple(prompt(i) for i in items) if isinstance(items, list) else (), 1)


def read_invocations(payload: dict) -> Plan | None:
    """POST /invocations (SageMaker): vLLM serves it as a chat request when
    the body has ``messages``, else as a completion. None: neither, so not
    a generation request (a pooling engine's); it is passed through."""
    if isinstance(payload.get("messages"), list):
        return read_chat(payload)
    if "prompt" in payload:
        return read_completion(payload)
    return None


# The routes of vLLM's API server (0.32, generate runner) that generate and
# so hold KV cache while they run: each is admitted. Every other route is
# passed through to a ready engine without admission.
GENERATION_ROUTES: dict[str, Callable[[dict], Plan | None]] = {
    "/v1/completions": read_completion,
    "/v1/chat/completions": read_chat,
    "/v1/chat/completions/batch": read_chat_batch,
    "/v1/responses": read_responses,
    "/v1/messages": read_anthropic,
    "/inference/v1/generate": read_generate,
    "/generative_scoring": read_generative_scoring,
    "/invocations": read_invocations,
}


def _system_and_items(system: Any, given: Any, items: Any, tools: Any) -> Prompt:
    """A prompt of a system text and conversation items (Responses,
    Anthropic): tokenized as chat messages when they are plain text; every
    string in ``given`` and ``system`` estimated otherwise; ``tools`` (in a
    shape /tokenize does not take) always estimated."""
    messages = _plain_messages(system, items)
    return Prompt(
        tokenize={"messages": messages} if messages else None,
        chars=text_chars(system) + text_chars(given),
        extra_chars=text_chars(tools),
    )


def _text_of(content: Any) -> str | None:
    """A message's content as plain text: a string, or a list of parts that
    all carry text (OpenAI's text parts, Anthropic's text blocks); else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return None


def _plain_messages(system: Any, items: Any) -> list[dict] | None:
    """Chat messages for /tokenize, when the system text and every item are
    plain text messages; else None (count by estimate)."""
    if not isinstance(items, list) or not items:
        return None
    messages = []
    if system is not None:
        text = _text_of(system)
        if text is None:
            return None
        messages.append({"role": "system", "content": text})
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            return None
        text = _text_of(item.get("content"))
        if text is None:
            return None
        messages.append({"role": item["role"], "content": text})
    return messages
