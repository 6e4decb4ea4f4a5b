"""Hostile input for the parsers' property tests, in one place.

Every parser in ``plugins/module_utils/`` reads text that someone else wrote:
a journal that logs prompts, a tool's output, a file on a host. Its property
tests draw from the strategies here and assert with the checks here:

- ``raises_only(documented, fn, *args)``: no exception but the documented one;
- ``assert_numbers_from(values, text)``: no number that is not in the input;
- ``numbers_of(value)``: every number in a parsed value, for that check;
- ``cut_points(line)``: a real line cut at every point (a cut line never yields
  a larger number than the whole line);
- ``assert_linear(fn, build)``: the CPU time grows linearly with the input
  (one run, a ratio of CPU times, so a busy machine does not fail it; speed
  targets live in ``bench/``).

The kinds of input that broke the parsers before (the hardening issue): numbers
past Python's 4,300-digit limit or float's range, inf and nan (``OUT_OF_RANGE``,
``out_of_range()``, for every parser and plan input that takes a number),
non-ASCII digits, deep brackets, bad Python
literals, runs of spaces after a matching prefix, a keyword's prefix repeated
for a MiB, and look-alike lines quoted inside logged prompts (``SHAPES``: how
vLLM logs request text, ``request_line(shape, text)``).
"""
from __future__ import annotations

import gc
import math
import re
import time
import typing as t

from hypothesis import strategies as st

# Digits that str.isdigit() and an un-ASCII `\d` accept, but no tool prints
# as a figure: Arabic-Indic, Extended Arabic-Indic, Devanagari, superscripts,
# full-width.
NON_ASCII_DIGITS = "٠١٢٣٤٥٦٧٨٩" "۰۱۲۳۴۵۶۷۸۹" "०१२३४५६७८९" "¹²³⁴⁵⁶⁷⁸⁹⁰" "０１２３４５６７８９"

# Bytes a journal, a terminal or a careless copy puts into a line.
NOISE = ("\x00", "\r", "\r\n", "\x1b[31m", "\x1b[0m", "\x1b]0;title\x07", "\ufeff", "\u00a0",
         "\t", "\x7f", "\ufffd", "\u2028", "\x0c", "\x85")

# Python's int() refuses more than 4,300 digits (sys.int_info.default_max_str_digits).
HUGE_DIGITS = 5000
HUGE_NUMBER = "9" * HUGE_DIGITS

MIB = 1024 * 1024


def non_ascii_number(digits: str = "12345") -> str:
    """``digits`` written in Arabic-Indic digits (a look-alike of a figure)."""
    return digits.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))


# Numbers past what an int or a float holds, as a program prints them or an
# operator writes them: float() reads "1e999" and 5,000 digits as inf, float()
# of an int past 1.8e308 raises OverflowError, int(), %d and round() raise on
# inf and nan, and str(), %s and json.dumps raise on an int of 4,301 digits.
OUT_OF_RANGE = (
    HUGE_NUMBER, "-" + HUGE_NUMBER, "1" + "0" * 400, "1e999", "-1e999", "1e-999", "inf", "-inf", "+Inf",
    "Infinity", "nan", "NaN", "1.5", non_ascii_number(), "\u00b9\u00b2", "\uff11\uff12",
    10 ** HUGE_DIGITS, -10 ** HUGE_DIGITS, 10 ** 400, -10 ** 400, 2 ** 63, -1,
    float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324,
)


def out_of_range() -> st.SearchStrategy:
    """A number no knob or reading means: :data:`OUT_OF_RANGE`, or any int,
    float (inf and nan too) or numeric text."""
    return st.one_of(
        st.sampled_from(OUT_OF_RANGE),
        st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 400).map(lambda n: n * (10 ** 4000)),
        st.floats(), st.from_regex(r"\A[-+]?[0-9]{1,400}(\.[0-9]{0,20})?([eE][-+]?[0-9]{1,4})?\Z"),
    )


def nested(depth: int = 2000, opening: str = "[", closing: str = "]", inner: str = "1") -> str:
    return opening * depth + inner + closing * depth


# --- strategies ------------------------------------------------------------

def any_text(max_size: int = 2000) -> st.SearchStrategy[str]:
    """Arbitrary text, arbitrary bytes read as UTF-8 or Latin-1, and noise."""
    return st.one_of(
        st.text(max_size=max_size),
        st.binary(max_size=max_size).map(lambda b: b.decode("utf-8", "replace")),
        st.binary(max_size=max_size).map(lambda b: b.decode("latin-1")),
        st.lists(st.sampled_from(NOISE + tuple(NON_ASCII_DIGITS) + ("9", "0", " ", "\n", ",", ".")),
                 max_size=200).map("".join),
    )


def mutated(lines: t.Sequence[str]) -> st.SearchStrategy[str]:
    """A real line with one hostile change: cut, noise inserted, digits made
    non-ASCII or 5,000 long, or repeated, or its tail replaced with spaces."""
    def mutate(line: str, how: str, where: float, noise: str) -> str:
        at = int(len(line) * where)
        if how == "cut":
            return line[:at]
        if how == "noise":
            return line[:at] + noise + line[at:]
        if how == "non_ascii_digits":
            return line.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
        if how == "huge_digits":
            return re.sub(r"\d+", lambda m: m.group(0) + HUGE_NUMBER, line, count=1)
        if how == "spaces":
            return line[:at] + " " * 5000
        if how == "doubled":
            return line[:at] + line
        return line

    return st.builds(
        mutate,
        st.sampled_from(list(lines)),
        st.sampled_from(["cut", "noise", "non_ascii_digits", "huge_digits", "spaces", "doubled", "same"]),
        st.floats(0, 1),
        st.sampled_from(NOISE),
    )


def documents(lines: t.Sequence[str], max_lines: int = 30) -> st.SearchStrategy[str]:
    """A document of real lines, mutated lines and arbitrary text, joined by
    newlines (sometimes CRLF, sometimes with the last line cut)."""
    line = st.one_of(st.sampled_from(list(lines)), mutated(lines), any_text(200))
    return st.builds(lambda ls, sep: sep.join(ls),
                     st.lists(line, max_size=max_lines), st.sampled_from(["\n", "\r\n", "\n\n"]))


# --- checks ----------------------------------------------------------------

def raises_only(documented, fn: t.Callable, *args, **kwargs):
    """Call ``fn``; return its result, or None when it raised ``documented``.

    Any other exception propagates, so hypothesis shrinks the input and the
    test names the undocumented exception."""
    try:
        return fn(*args, **kwargs)
    except documented:
        return None


# "3.e2" is a figure too (300: Python's float() and the parsers read it), so the
# fraction's digits may be none.
_FIGURE = re.compile(r"[0-9][0-9,_]*(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?", re.ASCII)


def numbers_in(text: str) -> set:
    """Every figure written in ``text`` in ASCII digits, as int and float
    values: with and without thousands separators, and each digit run alone."""
    found: set = set()
    for match in _FIGURE.finditer(text):
        token = match.group(0).rstrip(",_")
        for candidate in {token.replace(",", "").replace("_", ""), *re.split(r"[,_]", token)}:
            if not candidate or len(candidate) > 4000:
                continue
            try:
                value = float(candidate)
            except ValueError:
                continue
            if not math.isfinite(value):
                continue  # past float range: no parser's figure, and inf would match anything
            found.add(value)
            if value.is_integer():
                found.add(int(value))
    for run in re.findall(r"[0-9]+", text, re.ASCII):
        if len(run) <= 4000:
            found.add(int(run))
    return found


def numbers_of(value) -> list:
    """Every int and finite float in a parsed value (complex: both parts; the
    sign dropped, as the hostile check compares magnitudes)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, complex):
        return [abs(p) for p in (value.real, value.imag) if p and math.isfinite(p)]
    if isinstance(value, (int, float)):
        return [abs(value)] if not isinstance(value, float) or math.isfinite(value) else []
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in numbers_of(k) + numbers_of(v)]
    return [n for item in value for n in numbers_of(item)]


def assert_numbers_from(values: t.Iterable, text: str, scale: t.Iterable[float] = (1,)) -> None:
    """Every number in ``values`` is written in ``text`` (times one of
    ``scale``, for a parser that converts units). Bools and None are skipped."""
    present = numbers_in(text)
    for value in values:
        if value is None or isinstance(value, bool):
            continue
        assert isinstance(value, (int, float)), f"not a number: {value!r}"
        assert any(_close(value, p * s) for p in present for s in scale), \
            f"{value!r} is not a figure in the input"


def _close(a: float, b: float) -> bool:
    if a == b:
        return True
    try:
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)
    except OverflowError:  # an int past float range is only ever equal to itself
        return False


def cut_points(line: str, step: int = 1) -> t.Iterator[str]:
    """Every prefix of ``line`` (a line cut at every point), longest last."""
    for at in range(0, len(line) + 1, step):
        yield line[:at]


def assert_linear(fn: t.Callable[[t.Any], t.Any], build: t.Callable[[int], t.Any],
                  small: int = 256 * 1024, factor: int = 8, bound: float = 24.0,
                  noise_s: float = 0.05) -> None:
    """``fn(build(n))`` grows about linearly with ``n``.

    Times ``small`` and ``small * factor`` (best of three each, in one run), in
    the CPU time of the calling thread: ``fn`` must do its work in that thread.
    Linear growth gives a ratio near ``factor``, quadratic near ``factor**2``;
    the test fails past ``bound``. A large input done within ``noise_s`` of
    CPU passes whatever the ratio (timer noise)."""
    def best(n: int) -> float:
        data = build(n)
        times = []
        for _ in range(3):
            # A collection costs what the whole test process holds, not what
            # ``fn`` does; in a 4,000-test run, ones landing in the large run
            # alone are the likeliest reason CI once read a linear parser as 29x.
            gc.disable()
            try:
                # CPU time, not wall time: on a busy machine a run of a few ms
                # can fit in one time slice while one 8 times longer cannot, so
                # the wall-clock ratio grows with the load (CI read the linear
                # parse_meminfo as 24.2x; with spinners on its core, 8x of CPU
                # read up to 14.7x on the wall).
                start = time.thread_time()
                fn(data)
                times.append(time.thread_time() - start)
            finally:
                gc.enable()
        return min(times)

    # Up to five rounds, each keeping the fastest time seen so far for either
    # size: what other work still costs a run on the CPU (cold caches after a
    # switch) only ever slows it down, so the fastest times converge on the
    # parser's own, while a quadratic parser's fastest large run stays
    # ``factor`` times too slow in every round.
    t_small = t_large = float("inf")
    for _ in range(5):
        t_small = min(t_small, best(small))
        t_large = min(t_large, best(small * factor))
        ratio = t_large / max(t_small, 1e-6)
        if t_large <= noise_s or ratio < bound:
            return
    raise AssertionError(f"{small * factor} chars took {t_large:.3f} s of CPU, {ratio:.1f}x the time of "
                         f"{small} chars ({t_small:.4f} s) at best in five rounds: not linear")


# ---- vLLM's log lines, for the log readers' tests (kv cache, boot log) -------------------------

# How vLLM logs request text. {q} is the text as %r gives it; {raw} as is
# (an error message: NewLineFormatter repeats the prefix after its newlines).
SHAPES = [
    "INFO 12-01 10:00:00 [logger.py:39] Received request cmpl-5d1e-0: prompt: {q}, params: SamplingParams(n=1, "
    "temperature=0.0, max_tokens=16), prompt_token_ids: [1, 2, 3], prompt_embeds shape: None, lora_request: None, "
    "prompt_adapter_request: None.",
    "(APIServer pid=1) DEBUG 12-01 10:00:00 [logger.py:48] Request cmpl-5d1e-0 details: prompt: {q}, "
    "prompt_token_ids: [1, 2, 3], prompt_embeds shape: None.",
    "(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:57] Received request cmpl-5d1e-0: params: SamplingParams(n=1, "
    "stop=[{q}], max_tokens=16), lora_request: None.",
    "(APIServer pid=1) INFO 12-01 10:00:01 [logger.py:79] Generated response chatcmpl-5d1e: output: {q}, "
    "output_token_ids: [4, 5], finish_reason: stop",
    "(APIServer pid=1) INFO 12-01 10:00:01 [request_logger.py:57] Received request cmpl-5d1e-0: params: "
    "SamplingParams(n=1, stop=[{q}]), lora_request: None.",
    "(APIServer pid=1) ERROR 12-01 10:00:01 [serving_chat.py:200] Error in preprocessing prompt inputs\r\n"
    "(APIServer pid=1) ERROR 12-01 10:00:01 [serving_chat.py:200] {raw}",
    # journald, then vLLM's ANSI-coloured process label (docker run -t)
    "Dec 01 10:00:00 head-1 vllm[123]: \x1b[0;36m(APIServer pid=1)\x1b[0;0m INFO 12-01 10:00:00 [logger.py:39] "
    "Received request cmpl-5d1e-0: prompt: {q}, params: None",
    # Text with no vLLM prefix in a log that has them: a traceback's last
    # line, a print() to stderr.
    "ValueError: {raw}",
    "{raw}",
]
# A whole line of someone else's text that copies vLLM's prefix is vLLM's line
# as far as any reader can tell; vLLM never prints one (%r keeps a prompt on
# its line, and a message's newlines get vLLM's prefix again).
WHOLE = "{raw}"


def request_line(shape: str, text: str) -> str:
    return shape.format(q=repr(text), raw=text)


# 128 KiB to 1 MiB: the line the hardening issue timed, and within the readers' MAX_LINE
# (past it a line is cut, and a longer copy costs more per byte for the cache,
# not the algorithm). A MiB done within FLOOR_S passes whatever the ratio: a
# busy machine's pause is no finding, and the quadratic cases took seconds.
SMALL_INPUT = 128 * 1024
FLOOR_S = 0.25
