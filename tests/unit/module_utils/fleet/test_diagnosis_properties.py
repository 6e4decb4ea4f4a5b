"""Property tests for plugins/module_utils/fleet/diagnosis.py and its filter over
numbers past range (tests/hostile.py): every figure the modules hand it (the
probe's, its /metrics snapshots', the passive reading's, the KV pool's, a
flag's, the context) replaced by 5,000 digits, inf, nan, an int past float's
range or numeric text.

What it promises: diagnose returns one of VERDICTS or raises DiagnosisError
(the filter: AnsibleFilterError), nothing else; its evidence holds finite
numbers only, so the result is JSON without NaN or Infinity.
"""
from __future__ import annotations

import json

import pytest
from ansible.module_utils.fleet import diagnosis as d
from filter_plugins import load_filters
from hostile import OUT_OF_RANGE, out_of_range
from hypothesis import given
from hypothesis import strategies as st
from test_diagnosis import CASES, CONTEXT

FILTERS = load_filters("diagnosis")
from ansible.errors import AnsibleFilterError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

PROBE_FIGURES = ("ratio", "threshold", "reference", "uptime_s", "health_status", "noise", "prompt_tokens")
METRICS_FIGURES = ("kv_cache_usage", "running", "waiting", "waiting_capacity", "preemptions")
PASSIVE_FIGURES = ("window_s", "seconds_per_token", "requests", "tokens", "seconds", "preemptions", "ratio")
# (where, key): every figure diagnose reads.
FIGURES = ([("probe", k) for k in PROBE_FIGURES] + [("metrics_before", k) for k in METRICS_FIGURES]
           + [("metrics_after", k) for k in METRICS_FIGURES] + [("passive", k) for k in PASSIVE_FIGURES]
           + [("kv", "kv_cache_tokens"), ("kv", "full_context_sessions"), ("flags", "watermark"),
              ("context", None)])


def with_figures(case, changes):
    """The case's inputs with each (where, key) set to its value."""
    _, probe, kv, flags, _, _ = case
    probe, kv, flags, context = dict(probe), dict(kv or {}), dict(flags or {}), CONTEXT
    for (where, key), value in changes:
        if where == "probe":
            probe[key] = value
        elif where in ("metrics_before", "metrics_after", "passive"):
            probe[where] = dict(probe.get(where) or {}, **{key: value})
        elif where == "kv":
            kv[key] = value
        elif where == "flags":
            flags[key] = value
        else:
            context = value
    return probe, kv, flags, context


def changes():
    return st.lists(st.tuples(st.sampled_from(FIGURES), out_of_range()), min_size=1, max_size=6)


def assert_verdict(verdict: dict) -> None:
    assert verdict["verdict"] in d.VERDICTS
    # allow_nan=False: a NaN or Infinity is no JSON; a 4,301-digit int raises.
    json.dumps(verdict, allow_nan=False)


@given(st.sampled_from(CASES), changes())
def test_figures_past_range_give_a_verdict_or_diagnosis_error(case, change):
    probe, kv, flags, context = with_figures(case, change)
    try:
        verdict = d.diagnose(probe, kv, flags, context, "engine_a")
    except d.DiagnosisError:
        return
    assert_verdict(verdict)


@given(st.sampled_from(CASES), changes())
def test_the_filter_raises_only_its_error(case, change):
    probe, kv, flags, context = with_figures(case, change)
    try:
        verdict = FILTERS["engine_diagnosis"](probe, kv, flags, context, "engine_a")
    except AnsibleFilterError:
        return
    assert_verdict(verdict)


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=[str(i) for i in range(len(OUT_OF_RANGE))])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_figure_past_range_in_each_case(case, value):
    """float() of a 5,000-digit int raised OverflowError, %d of inf OverflowError, %d of nan ValueError."""
    for figure in FIGURES:
        probe, kv, flags, context = with_figures(case, [(figure, value)])
        assert_verdict(d.diagnose(probe, kv, flags, context, "engine_a"))


def test_a_figure_past_range_is_no_figure():
    _, probe, kv, flags, _, _ = next(c for c in CASES if c[0] == "kv-bound")
    verdict = d.diagnose(dict(probe, ratio=10 ** 5000, uptime_s=float("inf")), dict(kv, kv_cache_tokens=float("nan")),
                         flags, 10 ** 400, "engine_a")
    assert (verdict["evidence"]["ratio"], verdict["evidence"]["uptime_s"]) == (None, None)
    assert (verdict["evidence"]["kv_cache_tokens"], verdict["evidence"]["context_tokens"]) == (None, None)
