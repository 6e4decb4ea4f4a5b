# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The toolkit's own series for node-exporter's textfile collector: one
engine's restarts and cures (the ledger), its restart budget, its last
diagnosis and its prefill baseline, in the Prometheus text exposition format
0.0.4, every sample labelled ``fleet_engine``.

roles/fleet_watch's rules read these names: the baseline's seconds per token
and threshold ratio, and the probe's prompt length, judge the engines' own
prefill rate (VllmPrefillDegraded); an exhausted budget pages
(VllmNotCuredByRestart). A family whose source is not given is left out, and
so is one whose value is not known (no restart yet, no cure yet, no ratio
read); the counters always carry every trigger and outcome.

The baseline's figures are the prefill probe's own (prefill/decision.py's
``reference`` and ``threshold``), never restated here. Everything here raises
WatchError and nothing else.
"""

from __future__ import annotations

import datetime
import json
import typing as t

from ansible.module_utils.fleet.diagnosis import VERDICTS
from ansible.module_utils.prefill.decision import FLOOR, baseline_from_json, reference, threshold
from ansible.module_utils.prefill.errors import PrefillError
from ansible.module_utils.shared.numeric import brief, finite
from ansible.module_utils.watch.budget import BudgetState
from ansible.module_utils.watch.errors import WatchError
from ansible.module_utils.watch.ledger import (
    OUTCOMES,
    TRIGGERS,
    Ledger,
    check_engine,
    diagnosis_figures,
    parse_time,
    restarts,
)

LABEL = "fleet_engine"
# The alert's limit for the engine's own (passive) prefill rate, in multiples of the probe's
# threshold. Traffic's prompts are not the probe's: short new turns on long cached prefixes cost
# more per computed token. On the lab (threshold 1.5) a healthy engine under the session client
# read 1.4x to 1.6x its baseline in the recording and up to 2.65x (1.77 thresholds) in a fresh
# make test after an upgrade; the slow-prefill knob reads 5.6x (3.7 thresholds). 2.5 thresholds
# sits between the two in log space (sqrt(1.77 * 3.7) = 2.56). It is above the diagnosis's own
# passive margin (diagnosis.PASSIVE_MARGIN, a test holds it so), so the diagnosis that the
# healing loop runs before a restart agrees with every alert.
WATCH_MARGIN = 2.5
# The probe's floor as vllm_prefill_probe takes it (threshold_floor).
FLOOR_RANGE = (1.0, 10.0)

_Sample = tuple[t.Sequence[tuple[str, str]], int | float]


def escape(value: str) -> str:
    """A label value as the format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: int | float) -> str:
    return str(int(value)) if isinstance(value, (bool, int)) else repr(float(value))


def _family(engine: str, name: str, kind: str, text: str, samples: t.Sequence[_Sample]) -> list[str]:
    out = ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind)]
    for labels, value in samples:
        pairs = ",".join('%s="%s"' % (k, escape(v)) for k, v in ((LABEL, engine), *labels))
        out.append("%s{%s} %s" % (name, pairs, _number(value)))
    return out


def _epoch(iso: str) -> float:
    return parse_time(iso).timestamp()


def _ledger(engine: str, ledger: Ledger) -> list[list[str]]:
    done = restarts(ledger, engine)
    out = [
        _family(engine, "vllm_fleet_restarts_total", "counter",
                "Restarts of the engine in its cure ledger, by trigger.",
                [((("trigger", x),), sum(e["trigger"] == x for e in done)) for x in TRIGGERS]),
        _family(engine, "vllm_fleet_restart_outcomes_total", "counter",
                "Restarts of the engine in its cure ledger, by outcome (a restart's latest line).",
                [((("outcome", x),), sum(e["outcome"] == x for e in done)) for x in OUTCOMES]),
    ]
    if done:
        out.append(_family(engine, "vllm_fleet_last_restart_timestamp_seconds", "gauge",
                           "When the engine's newest restart began.", [((), _epoch(done[-1]["at"]))]))
    cures = [e for e in done if e["outcome"] == "cured"]
    if cures:
        out.append(_family(engine, "vllm_fleet_last_cure_timestamp_seconds", "gauge",
                           "When the engine's newest restart that cured it began.", [((), _epoch(cures[-1]["at"]))]))
    out.append(_family(engine, "vllm_fleet_ledger_skipped_lines", "gauge",
                       "Lines of the cure ledger that hold no entry (torn, hand-edited).", [((), len(ledger.skipped))]))
    return out


def _budget(engine: str, state: BudgetState) -> list[list[str]]:
    if state.engine != engine:
        raise WatchError("the budget state is engine %s's, not %s's" % (brief(state.engine), brief(engine)))
    return [
        _family(engine, "vllm_fleet_restart_budget_limit", "gauge",
                "Restarts without a cure the engine may have in the budget's window.", [((), state.limit)]),
        _family(engine, "vllm_fleet_restart_budget_used", "gauge",
                "Restarts without a cure counted against the engine's budget now.", [((), state.used)]),
        _family(engine, "vllm_fleet_restart_budget_exhausted", "gauge",
                "1 when the budget is spent: the engine is not restarted again until a reset.",
                [((), int(state.exhausted))]),
    ]


def _diagnosis(engine: str, diagnosis: dict, at: t.Any) -> list[list[str]]:
    figures = diagnosis_figures(diagnosis)
    out = [_family(engine, "vllm_fleet_verdict", "gauge",
                   "1 for the engine's last diagnosis verdict, 0 for the others.",
                   [((("verdict", v),), int(v == figures["verdict"])) for v in VERDICTS])]
    if at is not None:
        out.append(_family(engine, "vllm_fleet_diagnosis_timestamp_seconds", "gauge",
                           "When the engine was last diagnosed.", [((), parse_time(at, "diagnosed_at").timestamp())]))
    if figures["prefill_ratio"] is not None:
        out.append(_family(engine, "vllm_fleet_prefill_ratio", "gauge",
                           "The last quiet probe's prefill time over the engine's baseline.",
                           [((), figures["prefill_ratio"])]))
    return out


def _baseline(engine: str, data: t.Any, floor: t.Any) -> list[list[str]]:
    lowest, highest = FLOOR_RANGE
    number = finite(floor)
    if number is None or not lowest <= number <= highest:
        raise WatchError("the threshold floor must be a number from %g to %g (vllm_fleet_prefill_threshold_floor), "
                         "got %s" % (lowest, highest, brief(floor)))
    if not isinstance(data, dict):
        raise WatchError("the baseline must be the prefill baseline file's JSON object, got %s" % brief(data))
    try:
        # The probe's own reader checks it (schema, keys, every sample).
        baseline = baseline_from_json(json.dumps(data))
        ref, limit = reference(baseline), threshold(baseline, floor=float(number))
    except (ValueError, TypeError, RecursionError) as exc:  # PrefillError, or a dict json cannot write
        raise WatchError("the baseline cannot be read: %s" % (exc if isinstance(exc, PrefillError)
                                                              else type(exc).__name__)) from None
    out = []
    # The rules divide a rate of seconds per prompt token by it: a TTFT baseline is no such figure.
    if baseline.unit == "seconds_per_token":
        out.append(_family(engine, "vllm_fleet_prefill_baseline_seconds_per_token", "gauge",
                           "The prefill baseline's reference, seconds per prompt token.", [((), ref)]))
    out.append(_family(engine, "vllm_fleet_prefill_threshold_ratio", "gauge",
                       "The slow-down over the baseline at which prefill is degraded.", [((), limit.value)]))
    # Under traffic the engine's own sums are a passive reading, judged at WATCH_MARGIN thresholds.
    out.append(_family(engine, "vllm_fleet_prefill_passive_limit_ratio", "gauge",
                       "The slow-down of the engine's own prefill rate (passive) at which it is degraded.",
                       [((), limit.value * WATCH_MARGIN)]))
    out.append(_family(engine, "vllm_fleet_prefill_probe_prompt_tokens", "gauge",
                       "The prompt length the baseline was recorded with.", [((), baseline.prompt_tokens)]))
    return out


def render(engine: str, *, ledger: Ledger | None, budget_state: BudgetState | None,
           diagnosis: dict | None, baseline: dict | None, floor: float = FLOOR,
           diagnosed_at: str | datetime.datetime | None = None) -> str:
    """``engine``'s series, a whole exposition ending in a newline. ``diagnosis``
    is what engine_diagnosis returned, ``diagnosed_at`` when (its timestamp is
    left out without it); ``baseline`` the prefill baseline file's object and
    ``floor`` the engine's threshold floor (vllm_fleet_prefill_threshold_floor)."""
    check_engine(engine)
    for name, value, kind in (("ledger", ledger, Ledger), ("budget_state", budget_state, BudgetState)):
        if value is not None and not isinstance(value, kind):
            raise WatchError("%s must be a %s or none, got %s" % (name, kind.__name__, brief(value)))
    families: list[list[str]] = []
    if ledger is not None:
        families += _ledger(engine, ledger)
    if budget_state is not None:
        families += _budget(engine, budget_state)
    if diagnosis is not None:
        families += _diagnosis(engine, diagnosis, diagnosed_at)
    if baseline is not None:
        families += _baseline(engine, baseline, floor)
    return "".join(line + "\n" for family in families for line in family)
