"""Traffic shapes other than the lab's session client, sent with the official openai client as an
application would (issue 39: a slow-down signal must read a healthy engine as healthy under any
ordinary traffic, not only under the client its margins were first tuned on).

    chat-cached    sessions back to back, each a fixed long prefix (prefix-cached after its first
                   turn) plus a short new turn, 4-token answers: a tool-calling agent's shape
    decode-heavy   sessions back to back, a short prompt, 200-token answers
    bursts         every 4 s, a burst of fresh prompts at once (a new cache_salt each), 1 token each
    session        the lab's session client's shape: a context growing by a turn, 16-token
                   answers, 1.5 s between turns
    mix            one chat-cached session, one decode-heavy session and the bursts, at once
    seed           the field's own: full-context sessions back to back, each a fresh prompt of about
                   1,800 tokens (a new cache_salt) and a 100-token answer; on a pool of 2.31
                   contexts two run and the third waits

Run on the controller against an engine's URL (``http://10.200.0.11:8000``, ``/v1`` added if missing);
imported by the lab tests (tests/integration/test_diagnose.py) and the benchmark
(bench/canary_shapes.py). A word of these prompts is about 2.75 of the lab model's tokens.

    with Load("http://10.200.0.11:8000/v1", key, "chat-cached") as load:
        ...                      # the engine serves the shape until the block ends
    load.ok, load.failed, load.errors
"""
from __future__ import annotations

import random
import secrets
import threading

SHAPES = ("chat-cached", "decode-heavy", "bursts", "session", "mix", "seed")
_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
_BURST_WORDS = "one two three four five six seven eight nine ten".split()


class Load:
    """One traffic shape: threads that send until the block ends; counts answers and errors.

    ``sessions``: concurrent sessions of a session shape (the mix runs one of each);
    ``prefix_words``: chat-cached's fixed prefix; ``burst``: prompts in a burst, of
    ``burst_words`` words each; ``seed_words``: the seed's prompt. The defaults are the
    benchmark's; a small KV pool wants smaller."""

    def __init__(self, base_url: str, api_key: str | None, shape: str, model: str = "tiny", *,
                 sessions: int = 3, prefix_words: int = 600, burst: int = 4, burst_words: int = 256,
                 seed_words: int = 650, timeout: float = 120.0):
        if shape not in SHAPES:
            raise ValueError(f"unknown traffic shape {shape!r}: one of {', '.join(SHAPES)}")
        import openai

        base_url = base_url.rstrip("/")
        base_url = base_url if base_url.endswith("/v1") else base_url + "/v1"
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=0)
        self._api_error = (openai.APIError, OSError)
        self.shape, self.model = shape, model
        self.sessions, self.prefix_words = sessions, prefix_words
        self.burst, self.burst_words, self.seed_words = burst, burst_words, seed_words
        self.stop = threading.Event()
        self.ok = self.failed = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def _send(self, prompt: str, max_tokens: int, salt: str | None = None) -> None:
        extra = {"ignore_eos": True}
        if salt:
            extra["cache_salt"] = salt
        try:
            r = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=max_tokens,
                                               temperature=0, extra_body=extra)
            good = r.usage is not None and r.usage.completion_tokens == max_tokens
            with self._lock:
                self.ok += good
                self.failed += not good
                if not good:
                    self.errors.append(f"{max_tokens} tokens asked, usage {r.usage}")
        except self._api_error as exc:
            with self._lock:
                self.failed += 1
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    def _chat_cached(self, index: int) -> None:
        rnd = random.Random(index)
        prefix = " ".join(rnd.choice(_WORDS) for _ in range(self.prefix_words))
        while not self.stop.is_set():
            self._send(prefix + " " + " ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(10, 40))), 4)

    def _decode_heavy(self, index: int) -> None:
        rnd = random.Random(100 + index)
        while not self.stop.is_set():
            self._send(" ".join(rnd.choice(_WORDS) for _ in range(30)), 200)

    def _session(self, index: int) -> None:
        # About 1,500 tokens of context and 128 new a turn.
        rnd = random.Random(200 + index)
        context = [rnd.choice(_WORDS) for _ in range(540)]
        while not self.stop.is_set():
            context = (context + [rnd.choice(_WORDS) for _ in range(46)])[-540:]
            self._send(" ".join(context), 16)
            self.stop.wait(1.5)

    def _seed(self, index: int) -> None:
        rnd = random.Random(400 + index)
        prompt = " ".join(rnd.choice(_WORDS) for _ in range(self.seed_words))
        while not self.stop.is_set():
            self._send(prompt, 100, secrets.token_hex(8))

    def _bursts(self, index: int) -> None:
        rnd = random.Random(300 + index)
        while not self.stop.is_set():
            burst = [threading.Thread(target=self._send, daemon=True, args=(
                " ".join(rnd.choice(_BURST_WORDS) for _ in range(self.burst_words)), 1, secrets.token_hex(8)))
                for _ in range(self.burst)]
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join()
            self.stop.wait(4)

    def _targets(self) -> list:
        one = {"chat-cached": self._chat_cached, "decode-heavy": self._decode_heavy,
               "session": self._session, "bursts": self._bursts, "seed": self._seed}
        if self.shape == "mix":
            return [(self._chat_cached, 0), (self._decode_heavy, 0), (self._bursts, 0)]
        if self.shape == "bursts":
            return [(self._bursts, 0)]
        return [(one[self.shape], i) for i in range(self.sessions)]

    def start(self) -> Load:
        self.threads = [threading.Thread(target=target, args=(i,), daemon=True) for target, i in self._targets()]
        for thread in self.threads:
            thread.start()
        return self

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(90)

    def __enter__(self) -> Load:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.end()
