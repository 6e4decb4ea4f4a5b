"""The session client's conversations: each session's history, trimmed to the context budget.

Part of session_client.py (standard library only; it lies beside it on the lab hosts).
"""
from __future__ import annotations

import random
from collections.abc import Iterable

CHARS_PER_TOKEN = 4
# Role markers and separators a chat template adds per message.
MESSAGE_OVERHEAD_TOKENS = 4

# Filler for prompts. Code-like words: the lab's tiny model's BPE tokenizer
# was trained on Python sources and packs them at about 6 characters a token,
# so the 4-characters-a-token estimate never overfills its context.
WORDS = (
    "self return import value name args data file line path result error list string object type class "
    "default index count items keys buffer module function method from None True False yield lambda "
    "while break continue raise except finally assert global config option format parse encode decode"
).split()


def estimate_tokens(messages: Iterable[dict]) -> int:
    """Prompt size at 4 characters a token, plus a few tokens per message."""
    return sum(MESSAGE_OVERHEAD_TOKENS + (len(m["content"]) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
               for m in messages)


def trim_messages(messages: list[dict], budget: int) -> list[dict]:
    """Drop the oldest turns until the estimate fits ``budget``.

    A leading system message and the newest message are always kept, and the
    kept history starts at a user message, so roles still alternate.
    """
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    body = messages[len(head):]
    while len(body) > 1 and estimate_tokens(head + body) > budget:
        body = body[1:]
        while len(body) > 1 and body[0]["role"] != "user":
            body = body[1:]
    return head + body


class Conversation:
    """One chat session's history and its prompt generator."""

    def __init__(self, session: int, prompt_tokens: int, seed: str) -> None:
        self.session = session
        self.prompt_tokens = prompt_tokens
        self._rng = random.Random(f"{seed}-{session}")
        self.messages: list[dict] = [{
            "role": "system",
            "content": f"You are chat session {session} of the vllm-fleet lab. Keep every document in mind.",
        }]

    def ask(self, turn: int) -> None:
        lead = f"Session {self.session}, turn {turn}. Read this and keep it for later questions:"
        words = [lead]
        size = len(lead)
        while size < self.prompt_tokens * CHARS_PER_TOKEN:
            word = self._rng.choice(WORDS)
            words.append(word)
            size += len(word) + 1
        self.messages.append({"role": "user", "content": " ".join(words)})

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def forget_question(self) -> None:
        """Drop an unanswered question, so user and assistant keep alternating."""
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()

    def request_messages(self, budget: int) -> list[dict]:
        self.messages = trim_messages(self.messages, budget)
        return list(self.messages)
