# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide whether an engine's prefill got slower than its own baseline.

Pure logic for the ``vllm_prefill_probe`` module: no AnsibleModule, no
network. The facts behind every constant are in ``docs/reference/restart.md``
(section 6 for the statistics); reading ``/metrics`` is metrics.py's.

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
import json
import math
import typing as t

from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.shared.isotime import iso_timestamp
from ansible.module_utils.shared.numeric import brief, quoted

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
# Under load, a sample the engine timed itself is the same fixed work as the
# baseline's, and traffic can only add other rows to its engine step: the
# threshold is widened by this much. Measured on the lab (bench/canary_shapes.py,
# docs/diagnose.md): healthy under four traffic shapes at most 1.20x, the slow-prefill
# knob at least 2.5x.
LOAD_MARGIN = 1.25
# The passive reading widens its window, one window at a time up to its
# longest, until this many prefills finished in it: a few multi-turn requests,
# mostly served from the prefix cache, say little (a lab run read 1.5x over
# 5 s where 15 s read 32x).
PASSIVE_PREFILLS = 4
# A quiet sample spoiled by a lone request beside it (a watcher's canary) is
# taken again while the engine reads quiet at once, up to this many tries.
SAMPLE_TRIES = 3
# A baseline file is a few kB; the module reads at most this much of one.
MAX_BASELINE = 1 << 20
# Past any served model's context (10M tokens at most): a larger count is garbage.
MAX_PROMPT_TOKENS = 1 << 24
# The probe's prompt length when none is given: the default of the role
# variable vllm_fleet_probe_prompt_tokens, which the playbooks pass (a test
# holds the two equal, as FLOOR and vllm_fleet_prefill_threshold_floor).
PROMPT_TOKENS = 4096

SCHEMA = 1
UNITS = ("seconds_per_token", "ttft_seconds")
VERDICTS = ("healthy", "degraded", "inconclusive", "down")


# --- baseline ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Baseline:
    """Probe groups recorded right after a verified start, with what they depend on."""

    vllm_version: str
    model: str
    prompt_tokens: int
    recorded_at: str
    groups: tuple[tuple[float, ...], ...]
    unit: str = "seconds_per_token"

    def __post_init__(self) -> None:
        _check_baseline(self)


def check_samples(samples: t.Any, what: str, size: int | None = GROUP_SIZE) -> tuple[float, ...]:
    """``samples`` (``size`` of them, any count when None) as floats, or PrefillError naming ``what``."""
    if not isinstance(samples, (list, tuple)):
        raise PrefillError("%s must be a list of numbers, got %s" % (what, type(samples).__name__))
    if size is not None and len(samples) != size:
        raise PrefillError("%s has %d samples; it needs exactly %d (the statistic's bias depends on "
                           "the count, so baseline and probe groups must match)" % (what, len(samples), size))
    out = []
    for i, x in enumerate(samples):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise PrefillError("%s[%d] is %s, not a number" % (what, i, brief(x)))
        # Compared before float(): an int past float's range would raise OverflowError.
        if not (MIN_SAMPLE <= x <= MAX_SAMPLE):
            raise PrefillError("%s[%d] is %s: a sample must be a finite time between %g and %g seconds"
                               % (what, i, brief(x), MIN_SAMPLE, MAX_SAMPLE))
        out.append(float(x))
    return tuple(out)


def _check_baseline(b: Baseline) -> None:
    for name in ("vllm_version", "model", "recorded_at"):
        value = getattr(b, name)
        if not isinstance(value, str) or not value.strip():
            raise PrefillError("baseline %s must be a non-empty string, got %s" % (name, brief(value)))
    try:
        iso_timestamp(b.recorded_at)
    except ValueError:
        raise PrefillError("baseline recorded_at %s is not an ISO 8601 time (e.g. 2026-12-01T03:30:00+00:00)"
                           % brief(b.recorded_at)) from None
    if (isinstance(b.prompt_tokens, bool) or not isinstance(b.prompt_tokens, int)
            or not 0 < b.prompt_tokens <= MAX_PROMPT_TOKENS):
        raise PrefillError("baseline prompt_tokens must be a positive integer up to %d, got %s"
                           % (MAX_PROMPT_TOKENS, brief(b.prompt_tokens)))
    if not isinstance(b.unit, str) or b.unit not in UNITS:
        raise PrefillError("baseline unit %s is not one of %s" % (brief(b.unit), ", ".join(UNITS)))
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


def baseline_from_json(text: str | bytes) -> Baseline:
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
                           % quoted(str(exc), 120)) from None
    if not isinstance(data, dict):
        raise PrefillError("baseline file must hold a JSON object, got %s" % type(data).__name__)
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA:
        raise PrefillError("baseline schema is %s, this toolkit reads %d: record the baseline again"
                           % (brief(schema), SCHEMA))
    fields = {f.name for f in dataclasses.fields(Baseline)}
    missing = sorted(fields - set(data) - {"unit"})
    if missing:
        raise PrefillError("baseline lacks %s: record the baseline again" % ", ".join(missing))
    unknown = sorted(set(data) - fields - {"schema"})
    if unknown:
        more = " and %d more" % (len(unknown) - 5) if len(unknown) > 5 else ""
        raise PrefillError("baseline has unknown keys %s%s" % (", ".join(quoted(k, 40) for k in unknown[:5]), more))
    return Baseline(**{k: v for k, v in data.items() if k in fields})


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, t.Any]]) -> dict:
    # json.loads keeps the last of two equal keys: a hand-edited file is ambiguous.
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey("'%s'" % quoted(key, 40))
            seen.add(key)
    return data


def _norm_version(v: str) -> str:
    v = v.strip()
    return v[1:] if v[:1] in ("v", "V") else v


def comparable(baseline: Baseline, version: str, model: str, prompt_tokens: int) -> tuple[bool, str]:
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
    ratio: float | None
    threshold: float | None
    reason: str
    samples_used: int
    needs_more: bool = False
    spread: float | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def decide(baseline: Baseline | None, first_two: t.Sequence[float] = (),
           more: t.Sequence[float] | None = None, busy: bool = False, down: bool = False,
           version: str | None = None, model: str | None = None,
           prompt_tokens: int | None = None, limit: Threshold | None = None) -> Verdict:
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
