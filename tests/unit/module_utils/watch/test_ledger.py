"""Tests for plugins/module_utils/watch/ledger.py: the cure ledger's entries,
its lines, the file read back, and whether a cure lasted.

The readings come from what fleet/diagnosis.py's ``diagnose`` returns for the
probe results of tests/unit/module_utils/fleet/test_diagnosis.py (one per
verdict), so the ledger follows the diagnosis' real shape.
"""
from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.fleet import diagnosis as d
from ansible.module_utils.watch import ledger as L
from ansible.module_utils.watch.errors import WatchError

# The diagnosis' own test cases, whichever test directory runs first.
FLEET_TESTS = str(Path(__file__).resolve().parents[1] / "fleet")
if FLEET_TESTS not in sys.path:
    sys.path.insert(0, FLEET_TESTS)
from test_diagnosis import CASES, CONTEXT, GPU_CASES  # noqa: E402

ENGINE = "engine_lab"
AT = "2026-12-01T03:30:00+00:00"
UTC = datetime.UTC
# The first case of each verdict (prefill-degraded: the quiet probe's, with its ratio).
DIAGNOSES: dict = {}
for _case in CASES:
    DIAGNOSES.setdefault(_case[4], d.diagnose(_case[1], _case[2], _case[3], CONTEXT, ENGINE))
for _case in GPU_CASES:
    DIAGNOSES.setdefault(_case[5], d.diagnose(_case[1], _case[2], _case[3], CONTEXT, ENGINE, gpu=_case[4]))


def reading(verdict: str = "healthy", at: str = AT, **kw) -> L.Reading:
    return L.Reading(verdict, at, **kw)


DEGRADED = reading("prefill-degraded", prefill_ratio=1.62, threshold=1.12, uptime_s=3 * 86400.0, pool_tokens=4736)
HEALTHY = reading("healthy", "2026-12-01T03:32:00+00:00", prefill_ratio=1.02, threshold=1.12, uptime_s=60.0,
                  pool_tokens=4736)


def restart(at: str = AT, outcome: str = "not-cured", engine: str = ENGINE, trigger: str = "alert",
            before: L.Reading = DEGRADED, after: L.Reading = HEALTHY, **kw) -> dict:
    """A restart entry; its after reading only where the outcome is known."""
    return L.restart_entry(engine, at, trigger=trigger, before=before,
                           after=after if outcome in ("cured", "not-cured") else None, outcome=outcome,
                           policy=kw.pop("policy", "when-degraded"), settle_s=kw.pop("settle_s", 120), **kw)


def reset(at: str, engine: str = ENGINE) -> dict:
    return L.reset_entry(engine, at, "alice", "replaced the NIC on lab2")


def ledger_of(*entries: dict) -> L.Ledger:
    return L.parse("".join(L.line(e) for e in entries))


# --- entries and lines -------------------------------------------------------------------

def test_a_restart_entry_holds_every_field_in_its_written_form():
    entry = restart(evidence="/var/lib/vllm-fleet/evidence/engine_lab-20261201T033000Z.tar.gz")
    assert entry == {
        "kind": "restart", "engine": ENGINE, "at": AT, "trigger": "alert", "policy": "when-degraded",
        "before": {"verdict": "prefill-degraded", "at": AT, "prefill_ratio": 1.62, "threshold": 1.12,
                   "uptime_s": 259200.0, "pool_tokens": 4736, "passive_ratio": None},
        "after": {"verdict": "healthy", "at": "2026-12-01T03:32:00+00:00", "prefill_ratio": 1.02,
                  "threshold": 1.12, "uptime_s": 60.0, "pool_tokens": 4736, "passive_ratio": None},
        "outcome": "not-cured", "settle_s": 120,
        "evidence": "/var/lib/vllm-fleet/evidence/engine_lab-20261201T033000Z.tar.gz", "why": None}


def test_a_line_is_one_compact_sorted_ascii_json_line():
    entry = L.reset_entry(ENGINE, AT, "alice", "swapped the GPU\non lab2 \u2028(RMA 1234) \u00e9")
    text = L.line(entry)
    assert text.endswith("\n") and text.count("\n") == 1 and text.isascii()
    assert text == json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
    assert L.parse(text).entries == (entry,)


@pytest.mark.parametrize("entry", [restart(), restart(outcome="pending"), restart(outcome="failed", policy=None),
                                   restart(outcome="cured", trigger="operator"), reset(AT)])
def test_every_entry_reads_back_as_written(entry):
    assert L.parse(L.line(entry)) == L.Ledger((entry,), ())
    assert L.line(L.parse(L.line(entry)).entries[0]) == L.line(entry)


@pytest.mark.parametrize("given, written", [
    ("2026-12-01T03:30:00Z", AT),
    ("2026-12-01T05:30:00+02:00", AT),
    ("2026-12-01T03:30:00.250000+00:00", "2026-12-01T03:30:00.250000+00:00"),
    (datetime.datetime(2026, 12, 1, 3, 30, tzinfo=UTC), AT),
    (datetime.datetime(2026, 11, 30, 22, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))), AT),
])
def test_times_are_written_in_utc(given, written):
    assert L.reset_entry(ENGINE, given, "alice", "fixed")["at"] == written
    assert L.Reading("healthy", given).at == written


# (id, changes to a good restart's fields, words of the WatchError)
BAD_RESTARTS = [
    ("engine-digit-first", {"engine": "1lab"}, "engine '1lab' is no engine name"),
    ("engine-space", {"engine": "engine lab"}, "is no engine name"),
    ("engine-empty", {"engine": ""}, "is no engine name"),
    ("engine-none", {"engine": None}, "engine None is no engine name"),
    ("engine-long", {"engine": "e" * 64}, "is no engine name"),
    ("trigger", {"trigger": "cron"}, "trigger 'cron' is not one of schedule, alert, operator"),
    ("outcome", {"outcome": "ok"}, "outcome 'ok' is not one of cured, not-cured, pending, failed"),
    ("policy-never", {"policy": "never"}, "policy 'never' is not one of always, when-degraded"),
    ("naive-time", {"at": "2026-12-01T03:30:00"}, "has no UTC offset"),
    ("naive-datetime", {"at": datetime.datetime(2026, 12, 1, 3, 30)}, "has no UTC offset"),
    ("a-date", {"at": datetime.date(2026, 12, 1)}, "must be an ISO 8601 time or a datetime"),
    ("not-a-time", {"at": "yesterday"}, "the restart's at 'yesterday' is not an ISO 8601 time"),
    ("non-ascii-digits", {"at": "\u0662026-12-01T03:30:00+00:00"}, "is not an ISO 8601 time"),
    ("settle-inf", {"settle_s": float("inf")}, "settle_s must be a finite number of at least 0, got inf"),
    ("settle-nan", {"settle_s": float("nan")}, "settle_s must be a finite number"),
    ("settle-negative", {"settle_s": -1}, "settle_s must be a finite number of at least 0, got -1"),
    ("settle-bool", {"settle_s": True}, "settle_s must be a finite number"),
    ("settle-huge-int", {"settle_s": 10 ** 400}, "got an integer of 1329 bits"),
    ("settle-text", {"settle_s": "120"}, "settle_s must be a finite number"),
    ("evidence-empty", {"evidence": ""}, "evidence must be non-empty text"),
    ("evidence-nul", {"evidence": "/tmp/a\0b"}, "evidence must be non-empty text"),
    ("cured-without-after", {"outcome": "cured", "after": None}, "a cured restart needs its after reading"),
    ("not-cured-without-after", {"outcome": "not-cured", "after": None}, "a not-cured restart needs its after"),
    # The prefill probe's verdict, not the diagnosis' (which says prefill-degraded).
    ("probe-verdict", {"before": dict(DEGRADED.as_dict(), verdict="degraded")},
     "before: a reading's verdict 'degraded' is not one of healthy, kv-bound"),
    ("reading-unknown-key", {"before": dict(DEGRADED.as_dict(), ratio=1.5)}, "before has unknown keys 'ratio'"),
    ("reading-without-at", {"before": {"verdict": "down"}}, "before lacks at"),
    ("reading-not-a-dict", {"before": "down"}, "before must be a JSON object, got 'down'"),
    ("ratio-zero", {"before": dict(DEGRADED.as_dict(), prefill_ratio=0)},
     "prefill_ratio must be a finite number above 0"),
    ("ratio-inf", {"before": dict(DEGRADED.as_dict(), prefill_ratio=float("inf"))}, "prefill_ratio must be a finite"),
    ("threshold-negative", {"before": dict(DEGRADED.as_dict(), threshold=-1.1)}, "threshold must be a finite number"),
    ("uptime-nan", {"before": dict(DEGRADED.as_dict(), uptime_s=float("nan"))}, "uptime_s must be a finite number"),
    ("pool-float", {"before": dict(DEGRADED.as_dict(), pool_tokens=4736.5)}, "pool_tokens must be a token count"),
    ("pool-bool", {"before": dict(DEGRADED.as_dict(), pool_tokens=True)}, "pool_tokens must be a token count"),
    ("pool-negative", {"before": dict(DEGRADED.as_dict(), pool_tokens=-1)}, "pool_tokens must be a token count"),
    ("pool-huge", {"before": dict(DEGRADED.as_dict(), pool_tokens=2 ** 60)}, "pool_tokens must be a token count"),
]


@pytest.mark.parametrize("change, words", [c[1:] for c in BAD_RESTARTS], ids=[c[0] for c in BAD_RESTARTS])
def test_a_bad_restart_is_refused(change, words):
    fields = dict(engine=ENGINE, at=AT, trigger="alert", policy="when-degraded", before=DEGRADED, after=HEALTHY,
                  outcome="not-cured", settle_s=120, evidence=None)
    fields.update(change)
    engine, at = fields.pop("engine"), fields.pop("at")
    with pytest.raises(WatchError) as exc:
        L.restart_entry(engine, at, **fields)
    assert words in str(exc.value)
    assert len(str(exc.value)) < 300


@pytest.mark.parametrize("by, reason, words", [
    ("", "fixed", "by must be non-empty text"),
    ("  ", "fixed", "by must be non-empty text"),
    ("alice", None, "reason must be non-empty text"),
    ("alice", "x" * 2049, "reason must be non-empty text of at most 2048 characters"),
    ("alice", "bad \ud800 surrogate", "is not UTF-8 text"),
])
def test_a_bad_reset_is_refused(by, reason, words):
    with pytest.raises(WatchError, match=words):
        L.reset_entry(ENGINE, AT, by, reason)


@pytest.mark.parametrize("entry, words", [
    ({"kind": "restart"}, "a restart entry lacks engine, at, trigger, before, outcome, settle_s"),
    ({"kind": "reboot"}, "kind 'reboot' is not one of restart, reset"),
    (dict(reset(AT), extra=1), "a reset entry has unknown keys 'extra'"),
    ([reset(AT)], "a ledger entry must be a JSON object, got a list of 1"),
])
def test_line_checks_what_it_writes(entry, words):
    with pytest.raises(WatchError, match=words):
        L.line(entry)


# --- the file ----------------------------------------------------------------------------

GOOD = L.line(restart())
RESET = L.line(reset("2026-12-01T04:00:00+00:00"))

# (id, the file, entries read (their indexes in ENTRIES), skipped: (line, reason's start))
ENTRIES = [restart(), reset("2026-12-01T04:00:00+00:00")]
FILES = [
    ("empty", "", [], []),
    ("two", GOOD + RESET, [0, 1], []),
    ("no-newline-at-the-end", GOOD + RESET.rstrip("\n"), [0, 1], []),
    ("blank-lines", "\n\n" + GOOD + "  \n\t\n" + RESET + "\n", [0, 1], []),
    ("crlf", GOOD.replace("\n", "\r\n") + RESET.replace("\n", "\r\n"), [0, 1], []),
    ("byte-order-mark", "\ufeff" + GOOD + RESET, [0, 1], []),
    ("torn-last-line", GOOD + RESET[:40], [0], [(2, "no JSON object on the line (torn, or not an entry)")]),
    ("torn-then-appended", GOOD[:100] + RESET, [], [(1, "not JSON (")]),
    ("garbage-between", GOOD + "oops, hand edit\n" + RESET, [0, 1], [(2, "no JSON object on the line")]),
    ("nul-bytes", "\0" * 30 + "\n" + RESET, [1], [(1, "no JSON object on the line")]),
    ("an-array", "[1, 2]\n" + RESET, [1], [(1, "no JSON object on the line")]),
    ("two-objects", RESET.rstrip("\n") + RESET, [], [(1, "not JSON (Extra data")]),
    ("not-json-inside", '{"kind": restart}\n', [], [(1, "not JSON (Expecting value")]),
    ("twice-a-key", GOOD.replace('{"after"', '{"kind":"reset","after"'), [], [(1, "names 'kind' twice")]),
    ("nan", GOOD.replace('"settle_s":120', '"settle_s":NaN'), [], [(1, "holds NaN, which is no number")]),
    ("infinity", GOOD.replace('"settle_s":120', '"settle_s":-Infinity'), [], [(1, "holds -Infinity")]),
    ("past-float", GOOD.replace('"settle_s":120', '"settle_s":1e999'), [], [(1, "holds '1e999', a number past")]),
    ("huge-int", GOOD.replace('"settle_s":120', '"settle_s":' + "9" * 5000), [], [(1, "holds an integer of 5000")]),
    ("unknown-key", GOOD.replace('{"after"', '{"note":"x","after"'), [], [(1, "a restart entry has unknown keys")]),
    ("bad-field", GOOD.replace('"trigger":"alert"', '"trigger":"cron"'), [], [(1, "trigger 'cron' is not one of")]),
    ("deep", "{" * 30000 + "}" * 30000 + "\n" + RESET, [1], [(1, "not JSON (")]),
    ("over-64-kib", GOOD.rstrip("\n") + " " * 65536 + "\n" + RESET, [1],
     [(1, "%d bytes, over 65536: not read" % (len(GOOD) - 1 + 65536))]),
    ("over-64-kib-in-utf-8", "\u20ac" * 21846 + "\n" + RESET, [1], [(1, "65538 bytes, over 65536: not read")]),
]


@pytest.mark.parametrize("text, kept, skipped", [c[1:] for c in FILES], ids=[c[0] for c in FILES])
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_a_file_is_read_line_by_line(text, kept, skipped, as_bytes):
    got = L.parse(text.encode("utf-8") if as_bytes else text)
    assert list(got.entries) == [ENTRIES[i] for i in kept]
    assert [n for n, _ in got.skipped] == [n for n, _ in skipped]
    for (_, reason), (_, start) in zip(got.skipped, skipped):
        assert reason.startswith(start), reason
        assert len(reason) <= L.MAX_SKIP_REASON


def test_a_line_just_within_64_kib_is_read():
    padded = GOOD.rstrip("\n") + " " * (L.MAX_LINE - len(GOOD) + 1)
    assert len(padded.encode()) == L.MAX_LINE
    assert L.parse(padded).entries == (ENTRIES[0],)


def test_invalid_utf8_is_replaced_not_raised():
    text = GOOD.encode() + b"\xff\xfe\xc3(\n" + b'{"kind":"reset","engine":"engine_lab","at":"' + AT.encode() \
        + b'","by":"\xc3\xa9ric","reason":"fixed \xff"}\n'
    got = L.parse(text)
    assert got.entries == (ENTRIES[0], L.reset_entry(ENGINE, AT, "\u00e9ric", "fixed \ufffd"))
    assert [n for n, _ in got.skipped] == [2]


@pytest.mark.parametrize("text", [None, 1, ["a"], {"a": 1}, memoryview(b"")])
def test_only_text_or_bytes_is_a_ledger(text):
    with pytest.raises(WatchError, match="a ledger must be str or bytes, got "):
        L.parse(text)


def test_a_restart_written_twice_is_one_restart_with_its_latest_outcome():
    other = restart("2026-12-01T03:00:00+00:00", engine="engine_b")
    led = ledger_of(restart("2026-12-01T05:00:00+00:00", "failed"), restart(outcome="pending"), other,
                    restart(outcome="cured"), reset("2026-12-01T06:00:00+00:00"))
    assert [(e["at"], e["outcome"]) for e in L.restarts(led, ENGINE)] == [
        (AT, "cured"), ("2026-12-01T05:00:00+00:00", "failed")]
    assert L.restarts(led, "engine_b") == [other]
    assert [e["at"] for e in L.resets(led, ENGINE)] == ["2026-12-01T06:00:00+00:00"]
    with pytest.raises(WatchError, match="is no engine name"):
        L.restarts(led, "engine b")
    with pytest.raises(WatchError, match="the ledger must be what parse"):
        L.resets("", ENGINE)


# --- readings from the diagnosis ---------------------------------------------------------

def test_a_reading_takes_the_diagnosis_figures():
    diagnosis = dict(DIAGNOSES["prefill-degraded"], uptime_s=3 * 86400.0)
    assert L.reading_from_diagnosis(diagnosis, AT) == L.Reading(
        "prefill-degraded", AT, prefill_ratio=3.0, threshold=1.12, uptime_s=3 * 86400.0, pool_tokens=4736)


@pytest.mark.parametrize("verdict", d.VERDICTS)
def test_every_verdict_the_diagnosis_names_is_a_reading(verdict):
    got = L.reading_from_diagnosis(DIAGNOSES[verdict], AT)
    assert got.verdict == verdict
    assert got.prefill_ratio == DIAGNOSES[verdict]["evidence"]["ratio"]
    assert L.Reading.from_dict(got.as_dict()) == got


@pytest.mark.parametrize("figures, read", [
    ({"ratio": float("inf"), "threshold": float("nan"), "kv_cache_tokens": 4736.5, "uptime_s": -1.0,
      "passive_ratio": float("nan")},
     {"prefill_ratio": None, "threshold": None, "pool_tokens": None, "uptime_s": None, "passive_ratio": None}),
    ({"ratio": 10 ** 400, "threshold": 0, "kv_cache_tokens": 2.0 ** 60, "uptime_s": True, "passive_ratio": -2},
     {"prefill_ratio": None, "threshold": None, "pool_tokens": None, "uptime_s": None, "passive_ratio": None}),
    ({"ratio": 1.5, "threshold": 1.12, "kv_cache_tokens": 4736.0, "uptime_s": 30, "passive_ratio": None},
     {"prefill_ratio": 1.5, "threshold": 1.12, "pool_tokens": 4736, "uptime_s": 30, "passive_ratio": None}),
    # A busy engine: no probe, the passive reading's ratio.
    ({"ratio": None, "threshold": 1.5, "kv_cache_tokens": 65536, "uptime_s": 195.0, "passive_ratio": 13.51},
     {"prefill_ratio": None, "threshold": 1.5, "pool_tokens": 65536, "uptime_s": 195.0, "passive_ratio": 13.51}),
])
def test_a_figure_that_is_no_reading_is_left_out(figures, read):
    diagnosis = dict(DIAGNOSES["healthy"], evidence=dict(DIAGNOSES["healthy"]["evidence"], **figures))
    diagnosis.pop("uptime_s", None)
    assert L.diagnosis_figures(diagnosis) == dict(read, verdict="healthy")


@pytest.mark.parametrize("diagnosis, words", [
    (None, "the diagnosis must be what engine_diagnosis returned"),
    ({"verdict": "degraded"}, "the diagnosis' verdict 'degraded' is not one of"),
    ({}, "the diagnosis' verdict None"),
])
def test_a_diagnosis_needs_a_verdict(diagnosis, words):
    with pytest.raises(WatchError, match=words):
        L.reading_from_diagnosis(diagnosis, AT)


# --- the cure ----------------------------------------------------------------------------

SETTLED = "2026-12-01T03:34:00+00:00"

# (id, first, settled, threshold, cured, reason)
CURES = [
    ("lasting", reading(prefill_ratio=1.02), reading(at=SETTLED, prefill_ratio=1.05), 1.5, True,
     "prefill 1.02x then 1.05x, under 1.50x; healthy after 240 s"),
    ("no-ratio-read", reading(), reading(at=SETTLED), 1.5, True,
     "healthy right after the restart and after 240 s; no prefill ratio read"),
    ("one-ratio-read", reading(), reading(at=SETTLED, prefill_ratio=1.1), 1.12, True,
     "prefill unread then 1.10x, the probe's under 1.12x; healthy after 240 s"),
    ("slow-again", reading(prefill_ratio=1.02), reading(at=SETTLED, prefill_ratio=1.62), 1.5, False,
     "prefill 1.02x then 1.62x, not under 1.50x; healthy verdicts over 240 s"),
    ("at-the-threshold", reading(prefill_ratio=1.5), reading(at=SETTLED, prefill_ratio=1.0), 1.5, False,
     "prefill 1.50x then 1.00x, not under 1.50x; healthy verdicts over 240 s"),
    ("not-healthy-at-once", reading("down"), reading(at=SETTLED), 1.5, False,
     "down right after the restart, not healthy"),
    ("relapsed", reading(prefill_ratio=1.02), reading("prefill-degraded", SETTLED, prefill_ratio=3.0), 1.5, False,
     "healthy right after the restart, then prefill-degraded after 240 s"),
    ("inconclusive-is-no-cure", reading(), reading("inconclusive", SETTLED), 1.5, False,
     "healthy right after the restart, then inconclusive after 240 s"),
    ("same-moment", reading(prefill_ratio=1.02), reading(prefill_ratio=1.02), 1.12, True,
     "prefill 1.02x then 1.02x, under 1.12x; healthy after 0 s"),
]


@pytest.mark.parametrize("first, settled, threshold, ok, reason", [c[1:] for c in CURES], ids=[c[0] for c in CURES])
def test_cured(first, settled, threshold, ok, reason):
    assert L.cured(first, settled, threshold) == (ok, reason)
    assert L.cured(first.as_dict(), settled.as_dict(), threshold) == (ok, reason)


@pytest.mark.parametrize("first, settled, threshold, words", [
    (reading(at=SETTLED), reading(), 1.5, "the settled reading (2026-12-01T03:30:00+00:00) is older than the first"),
    (reading(), reading(), float("inf"), "the threshold must be a finite ratio above 0, got inf"),
    (reading(), reading(), 0, "the threshold must be a finite ratio above 0, got 0"),
    (reading(), reading(), "1.5", "the threshold must be a finite ratio"),
    ({"verdict": "healthy"}, reading(), 1.5, "after_first lacks at"),
    (reading(), None, 1.5, "after_settled must be a JSON object, got None"),
])
def test_cured_refuses_what_is_no_reading(first, settled, threshold, words):
    with pytest.raises(WatchError) as exc:
        L.cured(first, settled, threshold)
    assert words in str(exc.value)


# --- a restart's outcome, written after its first line -----------------------------------

FIRST = reading("healthy", "2026-12-01T03:32:00+00:00", prefill_ratio=1.01, threshold=1.12, pool_tokens=4736)


def _settled_at(seconds: int, ratio: float, verdict: str = "healthy") -> L.Reading:
    at = (datetime.datetime(2026, 12, 1, 3, 32, tzinfo=UTC) + datetime.timedelta(seconds=seconds)).isoformat()
    return reading(verdict, at, prefill_ratio=ratio, threshold=1.12, uptime_s=float(seconds))


@pytest.mark.parametrize("settled_reading, outcome, words", [
    (_settled_at(300, 1.03), "cured", "prefill 1.01x then 1.03x, under 1.12x; healthy after 300 s"),
    (_settled_at(300, 1.9, "prefill-degraded"), "not-cured", "healthy right after the restart, then prefill-degraded"),
    (_settled_at(300, 1.2), "not-cured", "not under 1.12x"),
])
def test_a_settled_restart_keeps_its_first_line_and_says_why(settled_reading, outcome, words):
    ledger = ledger_of(restart(outcome="pending", evidence="/tmp/e.tar.gz"))
    entry = L.settled(ledger, ENGINE, "2026-12-01T05:30:00+02:00", FIRST, settled_reading, 1.12)
    assert entry["outcome"] == outcome and words in entry["why"]
    assert entry["after"] == settled_reading.as_dict() and entry["settle_s"] == 300.0
    assert {k: entry[k] for k in ("at", "trigger", "before", "evidence", "policy")} == {
        "at": AT, "trigger": "alert", "before": DEGRADED.as_dict(), "evidence": "/tmp/e.tar.gz",
        "policy": "when-degraded"}
    # Appended, it is the restart's latest line: one restart, with its outcome.
    both = L.parse(L.line(restart(outcome="pending")) + L.line(entry))
    assert [e["outcome"] for e in L.restarts(both, ENGINE)] == [outcome]


def test_a_failed_restart_says_where():
    ledger = ledger_of(restart(outcome="pending"))
    entry = L.failed(ledger, ENGINE, AT, "the server did not answer /health in 600 s")
    assert (entry["outcome"], entry["after"], entry["why"]) == (
        "failed", None, "the server did not answer /health in 600 s")


@pytest.mark.parametrize("engine, at", [("engine_b", AT), (ENGINE, "2026-12-01T03:31:00+00:00")])
def test_an_outcome_needs_its_restarts_first_line(engine, at):
    ledger = ledger_of(restart(outcome="pending"))
    with pytest.raises(WatchError, match="has no restart of engine %s that began" % engine):
        L.failed(ledger, engine, at, "boom")


@pytest.mark.parametrize("reading, words", [
    (L.Reading("healthy", AT, prefill_ratio=1.224), "1.22x"),
    (L.Reading("prefill-degraded", AT, passive_ratio=13.511), "13.51x under load"),
    (L.Reading("healthy", AT, prefill_ratio=0.9, passive_ratio=2.0), "0.90x"),
    ({"prefill_ratio": None, "passive_ratio": 3.1}, "3.10x under load"),
    (L.Reading("healthy", AT), "unread"),
    (None, "unread"),
    ({"passive_ratio": "3"}, "unread"),
])
def test_a_ratio_in_words_is_the_probe_s_else_the_passive_one(reading, words):
    assert L.ratio_text(reading) == words


def test_a_passive_ratio_is_told_but_not_held_to_the_threshold():
    """The busy engine's settled reading: healthy by the diagnosis (which weighs a passive ratio
    with its own margin), 1.8x the baseline under traffic: cured, and the why says both."""
    first = L.Reading("healthy", AT, prefill_ratio=0.78)
    busy = L.Reading("healthy", "2026-12-01T03:30:18+00:00", passive_ratio=1.8)
    assert L.cured(first, busy, 1.5) == (
        True, "prefill 0.78x then 1.80x under load, the probe's under 1.50x; healthy after 18 s")
    slow = L.Reading("healthy", AT, prefill_ratio=6.33)
    assert L.cured(slow, busy, 1.5) == (
        False, "prefill 6.33x then 1.80x under load, the probe's not under 1.50x; healthy verdicts over 18 s")
