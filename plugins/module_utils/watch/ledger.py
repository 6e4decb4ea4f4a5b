# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cure ledger: what every restart of an engine did, kept on its head.

``PATH`` holds one JSON object a line (``line``), appended by every restart,
whoever started it (the schedule, an alert through the healing loop, an
operator), and by an operator's budget reset (playbooks/watch-reset.yml):

restart  ``{"kind": "restart", "engine", "at" (the restart began, UTC),
         "trigger" (TRIGGERS), "policy" (restart_plan.POLICIES or null),
         "before": <Reading>, "after": <Reading or null>, "outcome" (OUTCOMES),
         "settle_s", "evidence" (a path or null), "why" (the outcome in one
         sentence, or null)}``
reset    ``{"kind": "reset", "engine", "at", "by", "reason"}``

A ``Reading`` is the engine's diagnosis (fleet/diagnosis.py) at one moment,
reduced to what the budget and the metrics need. A cured or not-cured
restart has its ``after`` reading. A restart written twice (pending, then its
outcome) is the same restart: its engine and ``at`` name it, and its latest
line wins (``restarts``).

``parse`` reads the file as hostile text: a torn last line (a power cut), a
hand edit, a line of garbage is skipped and recorded in ``Ledger.skipped``,
never raised; every entry it keeps passed the same checks as one built here.
Linear in the input; a line over ``MAX_LINE`` bytes is skipped unread.

``cured`` says whether a restart's cure lasted. Everything here raises
WatchError and nothing else.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import typing as t

from ansible.module_utils.fleet.diagnosis import VERDICTS
from ansible.module_utils.fleet.record import ENGINE_NAME
from ansible.module_utils.fleet.restart_plan import POLICIES
from ansible.module_utils.shared import strict_json
from ansible.module_utils.shared.numeric import brief, finite, quoted
from ansible.module_utils.watch.errors import WatchError

PATH = "/var/lib/vllm-fleet/cure-ledger.jsonl"
KINDS = ("restart", "reset")
TRIGGERS = ("schedule", "alert", "operator")
OUTCOMES = ("cured", "not-cured", "pending", "failed")
# An entry is some 600 bytes; a longer line is no entry, and is not read.
MAX_LINE = 64 * 1024
MAX_ISO = 64
MAX_PATH = 4096
MAX_BY = 256
MAX_REASON = 2048
# No GPU pool holds 2**53 tokens; a larger count is garbage.
MAX_POOL = 2 ** 53
MAX_SKIP_REASON = 200

_RESTART_KEYS = ("kind", "engine", "at", "trigger", "policy", "before", "after", "outcome", "settle_s", "evidence",
                 "why")
_RESTART_OPTIONAL = ("policy", "after", "evidence", "why")
_RESET_KEYS = ("kind", "engine", "at", "by", "reason")
_READING_KEYS = ("verdict", "at", "prefill_ratio", "threshold", "uptime_s", "pool_tokens", "passive_ratio")
_UTC = datetime.UTC


# --- times -------------------------------------------------------------------------------

def parse_time(value: t.Any, what: str = "a time") -> datetime.datetime:
    """``value`` (an aware datetime, or ISO 8601 text with its UTC offset) as a UTC datetime.
    A time without an offset is refused: the ledger's hosts may not share a zone."""
    if isinstance(value, str):
        text = value
        if not text.isascii() or len(text) > MAX_ISO:
            raise WatchError("%s %s is not an ISO 8601 time (e.g. 2026-12-01T03:30:00+00:00)" % (what, brief(value)))
        # fromisoformat() reads "Z" from Python 3.11 only.
        text = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
        try:
            value = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise WatchError("%s %s is not an ISO 8601 time (e.g. 2026-12-01T03:30:00+00:00)"
                             % (what, brief(value))) from None
    if not isinstance(value, datetime.datetime):
        raise WatchError("%s must be an ISO 8601 time or a datetime, got %s" % (what, brief(value)))
    if value.tzinfo is None or value.utcoffset() is None:
        raise WatchError("%s %s has no UTC offset: give it in UTC (e.g. 2026-12-01T03:30:00+00:00)"
                         % (what, brief(value.isoformat())))
    try:
        return value.astimezone(_UTC)
    except (OverflowError, ValueError):  # year 1 at +01:00 is before year 1 in UTC
        raise WatchError("%s %s is outside the years a datetime holds" % (what, brief(value.isoformat()))) from None


def _iso(value: t.Any, what: str) -> str:
    return parse_time(value, what).isoformat()


# --- checks ------------------------------------------------------------------------------

def check_engine(value: t.Any) -> str:
    """``value`` when it is an engine's name (record.ENGINE_NAME), else WatchError."""
    if not isinstance(value, str) or not ENGINE_NAME.fullmatch(value):
        raise WatchError("engine %s is no engine name (letters, digits, '_' and '-', starting with a letter, at most "
                         "63: vllm_fleet_engine)" % brief(value))
    return value


def _choice(value: t.Any, what: str, choices: t.Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise WatchError("%s %s is not one of %s" % (what, brief(value), ", ".join(choices)))
    return value


def _number(value: t.Any, what: str, positive: bool = False) -> int | float:
    """A finite number, at least 0 (above 0 when ``positive``), as given (an int stays an int)."""
    number = finite(value)
    if number is None or number < 0 or (positive and number == 0):
        raise WatchError("%s must be a finite number %s 0, got %s" % (what, "above" if positive else "of at least",
                                                                     brief(value)))
    return number


def _text(value: t.Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or "\0" in value:
        raise WatchError("%s must be non-empty text of at most %d characters, got %s" % (what, limit, brief(value)))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, from a \\ud800 in a hand-edited line
        raise WatchError("%s %s is not UTF-8 text" % (what, brief(value))) from None
    return value


def _keys(data: t.Any, what: str, keys: t.Sequence[str], optional: t.Sequence[str]) -> dict:
    if not isinstance(data, dict):
        raise WatchError("%s must be a JSON object, got %s" % (what, brief(data)))
    unknown = [k for k in data if k not in keys]
    if unknown:
        raise WatchError("%s has unknown keys %s" % (what, ", ".join(brief(k) for k in unknown[:3])))
    missing = [k for k in keys if k not in data and k not in optional]
    if missing:
        raise WatchError("%s lacks %s" % (what, ", ".join(missing)))
    return data


# --- readings ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Reading:
    """An engine's diagnosis at one moment: its verdict (diagnosis.VERDICTS), the
    quiet probe's prefill ratio and threshold, its uptime and KV pool, when; on
    a busy engine, whose probe does not run, the passive reading's ratio (the
    engine's own prefill sums against the baseline over a few seconds of
    traffic: the verdict weighs it with the diagnosis' margin, the cure does
    not compare it with the threshold)."""

    verdict: str
    at: str
    prefill_ratio: float | None = None
    threshold: float | None = None
    uptime_s: float | None = None
    pool_tokens: int | None = None
    passive_ratio: float | None = None

    def __post_init__(self) -> None:
        _choice(self.verdict, "a reading's verdict", VERDICTS)
        object.__setattr__(self, "at", _iso(self.at, "a reading's at"))
        for name in ("prefill_ratio", "threshold", "passive_ratio"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(_number(value, "a reading's %s" % name, positive=True)))
        if self.uptime_s is not None:
            object.__setattr__(self, "uptime_s", _number(self.uptime_s, "a reading's uptime_s"))
        pool = self.pool_tokens
        if pool is not None and (isinstance(pool, bool) or not isinstance(pool, int) or not 0 <= pool <= MAX_POOL):
            raise WatchError("a reading's pool_tokens must be a token count from 0 to %d, got %s"
                             % (MAX_POOL, brief(pool)))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: t.Any, what: str = "a reading") -> Reading:
        """The reading a ledger line's ``before`` or ``after`` holds; WatchError naming ``what`` otherwise."""
        _keys(data, what, _READING_KEYS, _READING_KEYS[2:])
        try:
            return cls(**data)
        except WatchError as exc:
            raise WatchError("%s: %s" % (what, exc)) from None


def diagnosis_figures(diagnosis: t.Any) -> dict:
    """What a reading takes from ``engine_diagnosis``'s result (with the uptime
    vllm_diagnose adds): ``verdict``, ``prefill_ratio`` and ``threshold`` (the
    quiet probe's, in its evidence), ``uptime_s``, ``pool_tokens``,
    ``passive_ratio`` (the passive reading's, under traffic). A figure
    that is no reading (none, inf, a pool that is no count) is None; the
    verdict must be one of diagnosis.VERDICTS."""
    if not isinstance(diagnosis, dict):
        raise WatchError("the diagnosis must be what engine_diagnosis returned (a dict), got %s" % brief(diagnosis))
    verdict = _choice(diagnosis.get("verdict"), "the diagnosis' verdict", VERDICTS)
    evidence = diagnosis.get("evidence") if isinstance(diagnosis.get("evidence"), dict) else {}

    def positive(value: t.Any) -> float | None:
        number = finite(value)
        return float(number) if number is not None and number > 0 else None

    uptime = finite(diagnosis.get("uptime_s"))
    uptime = finite(evidence.get("uptime_s")) if uptime is None else uptime
    pool = finite(evidence.get("kv_cache_tokens"))
    return {"verdict": verdict, "prefill_ratio": positive(evidence.get("ratio")),
            "threshold": positive(evidence.get("threshold")),
            "uptime_s": uptime if uptime is not None and uptime >= 0 else None,
            "pool_tokens": int(pool) if pool is not None and 0 <= pool <= MAX_POOL and pool == int(pool) else None,
            "passive_ratio": positive(evidence.get("passive_ratio"))}


def reading_from_diagnosis(diagnosis: t.Any, at: str | datetime.datetime) -> Reading:
    """The reading of what ``engine_diagnosis`` returned at ``at`` (``diagnosis_figures``)."""
    return Reading(at=at, **diagnosis_figures(diagnosis))


def _reading(value: t.Any, what: str) -> Reading:
    return value if isinstance(value, Reading) else Reading.from_dict(value, what)


# --- entries -----------------------------------------------------------------------------

def _check_entry(data: t.Any) -> dict:
    """The entry ``data`` holds, checked and in its written form (times in UTC, readings as dicts)."""
    if not isinstance(data, dict):
        raise WatchError("a ledger entry must be a JSON object, got %s" % brief(data))
    kind = _choice(data.get("kind"), "kind", KINDS)
    if kind == "reset":
        _keys(data, "a reset entry", _RESET_KEYS, ())
        return {"kind": kind, "engine": check_engine(data["engine"]), "at": _iso(data["at"], "the reset's at"),
                "by": _text(data["by"], "by", MAX_BY), "reason": _text(data["reason"], "reason", MAX_REASON)}
    _keys(data, "a restart entry", _RESTART_KEYS, _RESTART_OPTIONAL)
    policy, after, evidence, why = data.get("policy"), data.get("after"), data.get("evidence"), data.get("why")
    outcome = _choice(data["outcome"], "outcome", OUTCOMES)
    if after is None and outcome in ("cured", "not-cured"):
        raise WatchError("a %s restart needs its after reading" % outcome)
    return {
        "kind": kind, "engine": check_engine(data["engine"]), "at": _iso(data["at"], "the restart's at"),
        "trigger": _choice(data["trigger"], "trigger", TRIGGERS),
        "policy": None if policy is None else _choice(policy, "policy", POLICIES),
        "before": _reading(data["before"], "before").as_dict(),
        "after": None if after is None else _reading(after, "after").as_dict(),
        "outcome": outcome, "settle_s": _number(data["settle_s"], "settle_s"),
        "evidence": None if evidence is None else _text(evidence, "evidence", MAX_PATH),
        "why": None if why is None else _text(why, "why", MAX_REASON),
    }


def restart_entry(engine: str, at: str | datetime.datetime, *, trigger: str, before: Reading | dict,
                  outcome: str = "pending", after: Reading | dict | None = None,
                  policy: str | None = None, settle_s: float = 0, evidence: str | None = None,
                  why: str | None = None) -> dict:
    """The ledger entry of a restart of ``engine`` that began ``at``; WatchError on any bad field."""
    return _check_entry({"kind": "restart", "engine": engine, "at": at, "trigger": trigger, "policy": policy,
                         "before": before, "after": after, "outcome": outcome, "settle_s": settle_s,
                         "evidence": evidence, "why": why})


def reset_entry(engine: str, at: str | datetime.datetime, by: str, reason: str) -> dict:
    """The ledger entry of an operator's budget reset; WatchError on any bad field."""
    return _check_entry({"kind": "reset", "engine": engine, "at": at, "by": by, "reason": reason})


def line(entry: dict) -> str:
    """``entry`` as its ledger line: compact JSON, sorted keys, ASCII, ending in a newline."""
    return json.dumps(_check_entry(entry), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


# --- the file ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Ledger:
    """A ledger file's entries (checked, in file order) and the lines it
    skipped: (line number from 1, why)."""

    entries: tuple[dict, ...] = ()
    skipped: tuple[tuple[int, str], ...] = ()


class _Refused(Exception):
    """Why a line holds no entry: the line is skipped with its message."""


def _entry_of(text: str) -> dict | None:
    """The entry one line holds, None for a blank line; _Refused saying why it is none."""
    text = text.strip()
    if not text:
        return None
    # Most garbage (a torn line, a note) is told without the JSON reader.
    if text[0] != "{" or text[-1] != "}":
        raise _Refused("no JSON object on the line (torn, or not an entry)")
    try:
        data = strict_json.loads(text)
    except strict_json.Refused as exc:
        raise _Refused(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise _Refused("not JSON (%s)" % quoted(str(exc), 80)) from None
    try:
        return _check_entry(data)
    except WatchError as exc:
        raise _Refused(str(exc)) from None


def parse(text: str | bytes) -> Ledger:
    """The ledger file ``text`` holds (bytes are read as UTF-8, errors
    replaced). A line that is no entry is skipped and recorded; blank lines
    are neither. WatchError only when ``text`` is not str or bytes."""
    if isinstance(text, (bytes, bytearray)):
        raw: list[t.Any] = bytes(text).split(b"\n")
    elif isinstance(text, str):
        raw = text.split("\n")
    else:
        raise WatchError("a ledger must be str or bytes, got %s" % type(text).__name__)
    entries, skipped = [], []
    for number, item in enumerate(raw, 1):
        if isinstance(item, bytes):
            size = len(item)
        else:  # a character is at most 4 bytes: measure only a line that may be over
            size = len(item) if len(item) * 4 <= MAX_LINE else len(item.encode("utf-8", "surrogatepass"))
        if size > MAX_LINE:
            skipped.append((number, "%d bytes, over %d: not read" % (size, MAX_LINE)))
            continue
        item = item.decode("utf-8", "replace") if isinstance(item, bytes) else item
        if number == 1:
            item = item.lstrip("\ufeff")  # an editor's byte-order mark
        try:
            entry = _entry_of(item)
        except _Refused as exc:
            skipped.append((number, str(exc)[:MAX_SKIP_REASON]))
            continue
        if entry is not None:
            entries.append(entry)
    return Ledger(tuple(entries), tuple(skipped))


def restarts(ledger: Ledger, engine: str) -> list[dict]:
    """``engine``'s restarts, oldest first: the latest line of each (a
    restart is named by its engine and ``at``)."""
    if not isinstance(ledger, Ledger):
        raise WatchError("the ledger must be what parse() returned, got %s" % brief(ledger))
    check_engine(engine)
    latest: dict[str, dict] = {}
    for entry in ledger.entries:
        if entry["kind"] == "restart" and entry["engine"] == engine:
            latest[entry["at"]] = entry
    return sorted(latest.values(), key=lambda e: parse_time(e["at"]))


def resets(ledger: Ledger, engine: str) -> list[dict]:
    """``engine``'s budget resets, oldest first."""
    if not isinstance(ledger, Ledger):
        raise WatchError("the ledger must be what parse() returned, got %s" % brief(ledger))
    check_engine(engine)
    return sorted((e for e in ledger.entries if e["kind"] == "reset" and e["engine"] == engine),
                  key=lambda e: parse_time(e["at"]))


# --- the cure ----------------------------------------------------------------------------

def ratio_text(reading: Reading | dict | None) -> str:
    """A reading's prefill ratio in words: the quiet probe's ("1.22x"), else the
    passive one's ("3.10x under load"), else "unread". A line's dict or None
    (no reading yet) is taken as it is."""
    if isinstance(reading, Reading):
        reading = reading.as_dict()
    reading = reading if isinstance(reading, dict) else {}
    for key, words in (("prefill_ratio", "%.2fx"), ("passive_ratio", "%.2fx under load")):
        value = finite(reading.get(key))
        if value is not None:
            return words % value
    return "unread"


def cured(after_first: Reading | dict, after_settled: Reading | dict,
          threshold: float) -> tuple[bool, str]:
    """Whether a restart's cure lasted, and why in one sentence: both readings
    (right after the restart, and once it settled) healthy, and each prefill
    ratio read under ``threshold``."""
    first, settled = _reading(after_first, "after_first"), _reading(after_settled, "after_settled")
    limit = finite(threshold)
    if limit is None or not limit > 0:
        raise WatchError("the threshold must be a finite ratio above 0, got %s" % brief(threshold))
    gap = (parse_time(settled.at) - parse_time(first.at)).total_seconds()
    if gap < 0:
        raise WatchError("the settled reading (%s) is older than the first (%s)" % (settled.at, first.at))
    after = "%.0f s" % gap
    if first.verdict != "healthy":
        return False, "%s right after the restart, not healthy" % first.verdict
    if settled.verdict != "healthy":
        return False, "healthy right after the restart, then %s after %s" % (settled.verdict, after)
    ratios = (first.prefill_ratio, settled.prefill_ratio)
    if all(r is None for r in ratios):
        return True, "healthy right after the restart and after %s; no prefill ratio read" % after
    # A ratio under load is told, not held to the threshold: the verdict weighed it.
    told = "prefill %s then %s" % (ratio_text(first), ratio_text(settled))
    held = "the probe's " if None in ratios else ""
    if any(r is not None and not r < limit for r in ratios):
        return False, "%s, %snot under %.2fx; healthy verdicts over %s" % (told, held, limit, after)
    return True, "%s, %sunder %.2fx; healthy after %s" % (told, held, limit, after)


# --- a restart's outcome -----------------------------------------------------------------

def _begun(ledger: Ledger, engine: str, at: t.Any) -> dict:
    """The restart of ``engine`` that began ``at``, as its latest line has it."""
    began = _iso(at, "the restart's at")
    for entry in restarts(ledger, engine):
        if entry["at"] == began:
            return entry
    raise WatchError("the ledger has no restart of engine %s that began %s: the outcome of a restart is written "
                     "after its first line" % (engine, began))


def failed(ledger: Ledger, engine: str, at: t.Any, why: str) -> dict:
    """The line that says the restart of ``engine`` begun ``at`` failed (``why``)."""
    return _check_entry(dict(_begun(ledger, engine, at), outcome="failed", why=why))


def settled(ledger: Ledger, engine: str, at: t.Any, after_first: Reading | dict,
            after_settled: Reading | dict, threshold: float) -> dict:
    """The line that says whether the restart of ``engine`` begun ``at`` cured it
    (``cured``): its ``after`` is the settled reading, ``settle_s`` the time
    between the two readings and ``why`` the reason, with both ratios."""
    begun = _begun(ledger, engine, at)
    first, last = _reading(after_first, "after_first"), _reading(after_settled, "after_settled")
    ok, why = cured(first, last, threshold)
    gap = max(0.0, (parse_time(last.at) - parse_time(first.at)).total_seconds())
    return _check_entry(dict(begun, outcome="cured" if ok else "not-cured", after=last.as_dict(),
                             settle_s=round(gap, 1), why=why))
