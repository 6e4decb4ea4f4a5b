"""Property tests for plugins/module_utils/watch/ledger.py's ``parse`` over
hostile input (tests/hostile.py): arbitrary text and bytes, real lines
mutated, torn at every point, lines past 64 KiB, garbage between entries.

What it promises: ``parse`` never raises for str or bytes; every entry it
keeps is one ``line`` writes back as read and holds only figures written in
the input; valid lines between garbage are kept in their order and the
garbage is recorded by its line number; a file torn anywhere loses only the
torn line; it reads in linear time.
"""
from __future__ import annotations

import datetime

import pytest
from ansible.module_utils.watch import ledger as L
from hostile import MIB, any_text, assert_linear, assert_numbers_from, mutated, numbers_of
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ledger import reset, restart

UTC = datetime.UTC
LINES = [L.line(e).rstrip("\n") for e in (restart(), restart(outcome="pending"), restart(outcome="cured"),
                                          restart(evidence="/var/lib/vllm-fleet/evidence/a.tar.gz"),
                                          reset("2026-12-01T04:00:00+00:00"))]


def readings() -> st.SearchStrategy[L.Reading]:
    return st.builds(
        L.Reading, st.sampled_from(["healthy", "prefill-degraded", "wedged", "down", "inconclusive"]),
        st.datetimes(min_value=datetime.datetime(2000, 1, 1), timezones=st.just(UTC)),
        prefill_ratio=st.none() | st.floats(0.01, 100), threshold=st.none() | st.floats(1, 10),
        uptime_s=st.none() | st.integers(0, 10 ** 8) | st.floats(0, 1e8),
        pool_tokens=st.none() | st.integers(0, 2 ** 40))


def entries() -> st.SearchStrategy[dict]:
    """Any entry the toolkit writes."""
    at = st.datetimes(min_value=datetime.datetime(2000, 1, 1), timezones=st.just(UTC))
    engine = st.sampled_from(["engine_lab", "engine_b", "e-1", "E" * 63])
    restarts = st.builds(
        lambda engine, at, trigger, outcome, before, after, policy, settle, evidence: L.restart_entry(
            engine, at, trigger=trigger, before=before, outcome=outcome, policy=policy, settle_s=settle,
            after=after if outcome in ("cured", "not-cured") else None, evidence=evidence),
        engine, at, st.sampled_from(L.TRIGGERS), st.sampled_from(L.OUTCOMES), readings(), readings(),
        st.sampled_from((None, "always", "when-degraded")), st.integers(0, 3600) | st.floats(0, 3600),
        st.none() | st.text(min_size=1, max_size=30).filter(lambda s: s.strip() and "\0" not in s
                                                              and not any(0xD800 <= ord(c) < 0xE000 for c in s)))
    resets = st.builds(L.reset_entry, engine, at, st.sampled_from(["alice", "bob@lab1"]),
                       st.sampled_from(["fixed the NIC", "new driver 580.126.09", "caf\u00e9 \u2028 \"quoted\""]))
    return restarts | resets


def garbage() -> st.SearchStrategy[str]:
    """A line that holds no entry and is not blank: arbitrary text, an entry
    cut short, or an entry behind a byte a terminal or a copy put there."""
    cut = st.sampled_from(LINES).flatmap(lambda s: st.integers(1, len(s) - 1).map(lambda at: s[:at]))
    behind = st.builds(lambda noise, s: noise + s, st.sampled_from(["\x00", "\x1b[31m", "\x7f", "\ufffd", "x"]),
                       st.sampled_from(LINES))
    return (any_text(300) | cut | behind).map(lambda s: s.replace("\n", " ")).filter(
        lambda s: s.lstrip("\ufeff").strip())


def check(text) -> L.Ledger:
    """``parse`` holds its promises on ``text``."""
    got = L.parse(text)
    read = text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")
    numbers = [n for n, _ in got.skipped]
    assert numbers == sorted(set(numbers)) and all(1 <= n <= read.count("\n") + 1 for n in numbers)
    assert all(isinstance(r, str) and 0 < len(r) <= L.MAX_SKIP_REASON for _, r in got.skipped)
    for entry in got.entries:
        assert L.parse(L.line(entry)).entries == (entry,)
    assert_numbers_from(numbers_of([[v for k, v in e.items() if k not in ("at", "before", "after")]
                                    + [v for r in (e.get("before"), e.get("after")) if r for k, v in r.items()
                                       if k != "at"] for e in got.entries]), read)
    return got


@given(any_text(3000))
def test_arbitrary_text(text):
    check(text)


@given(st.binary(max_size=3000))
def test_arbitrary_bytes(data):
    check(data)


@given(st.lists(mutated(LINES) | st.sampled_from(LINES), max_size=20), st.sampled_from(["\n", "\r\n"]))
def test_mutated_lines(lines, sep):
    text = sep.join(lines)
    got = check(text)
    assert len(got.entries) + len(got.skipped) <= text.count("\n") + 1


@settings(max_examples=60)
@given(st.lists(st.tuples(st.booleans(), entries(), garbage()), max_size=25), st.booleans())
def test_entries_between_garbage_keep_their_order(items, as_bytes):
    lines = [L.line(e).rstrip("\n") if valid else g for valid, e, g in items]
    text = "\n".join(lines)
    got = check(text.encode("utf-8", "surrogatepass") if as_bytes else text)
    assert list(got.entries) == [e for valid, e, _ in items if valid]
    assert [n for n, _ in got.skipped] == [i for i, (valid, _, _) in enumerate(items, 1) if not valid]


@settings(max_examples=40)
@given(st.lists(entries(), min_size=1, max_size=8), st.data())
def test_a_torn_file_loses_only_its_torn_line(written, data):
    lines = [L.line(e) for e in written]
    text = "".join(lines)
    cut = data.draw(st.integers(0, len(text)))
    got = check(text[:cut])
    start, whole, torn = 0, [], 0
    for entry, line in zip(written, lines):
        if start + len(line) - 1 <= cut:  # all of it but perhaps its newline
            whole.append(entry)
        elif start < cut:
            torn = 1
        start += len(line)
    assert list(got.entries) == whole
    assert len(got.skipped) == torn


@pytest.mark.parametrize("huge", [
    "x" * (L.MAX_LINE + 1),
    LINES[0] + " " * L.MAX_LINE,                                   # a valid entry, padded past the limit
    "\u20ac" * (L.MAX_LINE // 3 + 1),                              # under the limit in characters, not in bytes
    "[" * MIB,
    '{"kind":"reset","reason":"' + "\\u00e9" * (L.MAX_LINE // 6) + '"}',
])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_huge_line_is_skipped_unread(huge, as_bytes):
    text = "\n".join([LINES[0], huge, LINES[4]])
    got = L.parse(text.encode() if as_bytes else text)
    assert len(got.entries) == 2
    assert [n for n, _ in got.skipped] == [2]
    assert got.skipped[0][1].endswith("bytes, over 65536: not read")


SMALL = 64 * 1024


@pytest.mark.parametrize("build", [
    lambda n: "\n".join([LINES[0]] * (n // len(LINES[0]))),
    lambda n: ("x\n" * (n // 2)),
    lambda n: ('{"a":' * 3000 + "}\n") * (n // 15002),
    lambda n: "{" * n,
    lambda n: ("\u20ac" * 30000 + "\n") * (n // 30001),
    lambda n: (LINES[0][:-1] + "\n") * (n // len(LINES[0])),
], ids=["entries", "short-garbage", "deep", "one-huge-line", "multi-byte", "torn-entries"])
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_parse_is_linear(build, as_bytes):
    assert_linear(L.parse, (lambda n: build(n).encode()) if as_bytes else build, small=SMALL)
