"""Tests for plugins/module_utils/watch/textfile.py: the toolkit's series
for node-exporter's textfile collector.

Every exposition is read back with prometheus_client's parser (the one vLLM
itself writes /metrics with) and a strict line check of the 0.0.4 format. The
baseline is the lab's: two of the healthy probe groups of
tests/fixtures/prefill/lab-healthy-groups.json, in the prefill baseline file's
shape (decision.baseline_to_json); the diagnoses are what fleet/diagnosis.py
returns (test_ledger's DIAGNOSES). The series the watchers' rules read
(roles/fleet_watch/templates/etc/prometheus/vllm-fleet/rules.yml.j2) are all written.
"""
from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path

import pytest
from ansible.module_utils.fleet.diagnosis import PASSIVE_MARGIN, VERDICTS
from ansible.module_utils.prefill import decision
from ansible.module_utils.watch import budget as B
from ansible.module_utils.watch import ledger as L
from ansible.module_utils.watch import textfile as T
from ansible.module_utils.watch.errors import WatchError
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from test_ledger import DIAGNOSES, ENGINE, ledger_of, reset, restart

REPO = Path(__file__).resolve().parents[4]
RULES = REPO / "roles" / "fleet_watch" / "templates" / "etc" / "prometheus" / "vllm-fleet" / "rules.yml.j2"
GROUPS = json.loads((REPO / "tests" / "fixtures" / "prefill" / "lab-healthy-groups.json").read_text())["groups"]
BASELINE = decision.Baseline("0.32.0", "tiny", 1024, "2026-12-01T13:24:31+00:00", tuple(map(tuple, GROUPS[:2])))
BASELINE_FILE = json.loads(decision.baseline_to_json(BASELINE))
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)

LEDGER = ledger_of(
    restart("2026-12-01T03:30:00+00:00", "cured", trigger="schedule"),
    restart("2026-12-01T08:00:00+00:00", "pending", trigger="alert"),
    restart("2026-12-01T08:00:00+00:00", "not-cured", trigger="alert"),   # the same restart, its outcome known
    restart("2026-12-01T09:00:00+00:00", "failed", trigger="alert"),
    restart("2026-12-01T10:00:00+00:00", "cured", trigger="operator", engine="engine_b"),
    reset("2026-12-01T09:30:00+00:00"),
    restart("2026-12-01T11:00:00+00:00", "pending", trigger="operator"),
)
LEDGER = L.Ledger(LEDGER.entries, ((3, "no JSON object on the line (torn, or not an entry)"),))
STATE = B.state(LEDGER, ENGINE, NOW, B.Budget(3, 6 * 3600))

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(r'(%s)\{(%s="(?:[^"\\\n]|\\[\\"n])*"(?:,%s="(?:[^"\\\n]|\\[\\"n])*")*)\} (\S+)'
                     % (_NAME, _NAME, _NAME))


def strict(text: str) -> dict:
    """``text`` read as format 0.0.4 strictly: each family a HELP, a TYPE, then
    its samples, named once; every sample labelled with the engine; each value
    a finite number. Returns {family: type}."""
    assert text == "" or text.endswith("\n")
    types: dict = {}
    family = None
    lines = text.split("\n")[:-1]
    for i, line in enumerate(lines):
        if line.startswith("# HELP "):
            family = line.split(" ")[2]
            assert family not in types and lines[i + 1].startswith("# TYPE %s " % family)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == family and kind in ("counter", "gauge")
            types[name] = kind
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, line
        assert match.group(1) == family
        assert match.group(2).startswith('fleet_engine="')
        assert math.isfinite(float(match.group(3)))
    return types


def read(text: str) -> dict:
    """{(sample name, labels less the engine): value}, through prometheus_client and the strict check."""
    strict(text)
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            assert labels.pop("fleet_engine") == ENGINE
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def render(**kw) -> str:
    args = dict(ledger=LEDGER, budget_state=STATE, diagnosis=DIAGNOSES["prefill-degraded"], baseline=BASELINE_FILE,
                diagnosed_at=NOW)
    args.update(kw)
    return T.render(ENGINE, **args)


def test_every_series_from_every_source():
    got = read(render())
    threshold = decision.threshold(BASELINE)
    assert got == {
        ("vllm_fleet_restarts_total", (("trigger", "schedule"),)): 1,
        ("vllm_fleet_restarts_total", (("trigger", "alert"),)): 2,
        ("vllm_fleet_restarts_total", (("trigger", "operator"),)): 1,
        ("vllm_fleet_restart_outcomes_total", (("outcome", "cured"),)): 1,
        ("vllm_fleet_restart_outcomes_total", (("outcome", "not-cured"),)): 1,
        ("vllm_fleet_restart_outcomes_total", (("outcome", "pending"),)): 1,
        ("vllm_fleet_restart_outcomes_total", (("outcome", "failed"),)): 1,
        ("vllm_fleet_last_restart_timestamp_seconds", ()): datetime.datetime(
            2026, 12, 1, 11, tzinfo=datetime.UTC).timestamp(),
        ("vllm_fleet_last_cure_timestamp_seconds", ()): datetime.datetime(
            2026, 12, 1, 3, 30, tzinfo=datetime.UTC).timestamp(),
        ("vllm_fleet_ledger_skipped_lines", ()): 1,
        ("vllm_fleet_restart_budget_limit", ()): 3,
        ("vllm_fleet_restart_budget_used", ()): 1,
        ("vllm_fleet_restart_budget_exhausted", ()): 0,
        **{("vllm_fleet_verdict", (("verdict", v),)): int(v == "prefill-degraded") for v in VERDICTS},
        ("vllm_fleet_diagnosis_timestamp_seconds", ()): NOW.timestamp(),
        ("vllm_fleet_prefill_ratio", ()): 3.0,
        ("vllm_fleet_prefill_baseline_seconds_per_token", ()): decision.reference(BASELINE),
        ("vllm_fleet_prefill_threshold_ratio", ()): threshold.value,
        ("vllm_fleet_prefill_passive_limit_ratio", ()): threshold.value * T.WATCH_MARGIN,
        ("vllm_fleet_prefill_probe_prompt_tokens", ()): 1024,
    }
    # The lab's first two groups vary by 1.17x: the threshold is their noise's, over the floor.
    assert threshold.value > decision.FLOOR
    assert strict(render())["vllm_fleet_restarts_total"] == "counter"


def test_the_alerts_limit_is_past_the_diagnosis_own_passive_margin():
    """The healing loop diagnoses before it restarts: every alert must be a reading the diagnosis
    also calls degraded, or the loop would answer the alert with nothing."""
    assert T.WATCH_MARGIN > PASSIVE_MARGIN


def test_the_rules_read_only_series_written_here():
    names = set(re.findall(r"\bvllm_fleet_[a-z_]+", RULES.read_text()))
    assert names >= {"vllm_fleet_prefill_baseline_seconds_per_token", "vllm_fleet_prefill_passive_limit_ratio",
                     "vllm_fleet_prefill_probe_prompt_tokens", "vllm_fleet_restart_budget_exhausted"}
    assert names <= {name for name, _ in read(render())}


def test_no_source_no_series():
    assert T.render(ENGINE, ledger=None, budget_state=None, diagnosis=None, baseline=None) == ""


@pytest.mark.parametrize("source, families", [
    ("ledger", {"vllm_fleet_restarts_total", "vllm_fleet_restart_outcomes_total", "vllm_fleet_ledger_skipped_lines",
                "vllm_fleet_last_restart_timestamp_seconds", "vllm_fleet_last_cure_timestamp_seconds"}),
    ("budget_state", {"vllm_fleet_restart_budget_limit", "vllm_fleet_restart_budget_used",
                      "vllm_fleet_restart_budget_exhausted"}),
    ("diagnosis", {"vllm_fleet_verdict", "vllm_fleet_prefill_ratio"}),
    ("baseline", {"vllm_fleet_prefill_baseline_seconds_per_token", "vllm_fleet_prefill_threshold_ratio",
                  "vllm_fleet_prefill_passive_limit_ratio",
                  "vllm_fleet_prefill_probe_prompt_tokens"}),
])
def test_each_source_writes_its_own_families(source, families):
    given_ = {k: None for k in ("ledger", "budget_state", "diagnosis", "baseline")}
    given_[source] = {"ledger": LEDGER, "budget_state": STATE, "diagnosis": DIAGNOSES["prefill-degraded"],
                      "baseline": BASELINE_FILE}[source]
    assert set(strict(T.render(ENGINE, **given_))) == families


def test_an_empty_ledger_has_zero_counters_and_no_times():
    got = read(render(ledger=L.Ledger(), budget_state=None, diagnosis=None, baseline=None))
    assert got == {**{("vllm_fleet_restarts_total", (("trigger", x),)): 0 for x in L.TRIGGERS},
                   **{("vllm_fleet_restart_outcomes_total", (("outcome", x),)): 0 for x in L.OUTCOMES},
                   ("vllm_fleet_ledger_skipped_lines", ()): 0}


def test_no_cure_no_cure_time():
    got = read(render(ledger=ledger_of(restart(outcome="failed")), budget_state=None, diagnosis=None, baseline=None))
    assert ("vllm_fleet_last_restart_timestamp_seconds", ()) in got
    assert ("vllm_fleet_last_cure_timestamp_seconds", ()) not in got


@pytest.mark.parametrize("verdict", VERDICTS)
def test_the_verdict_is_one_hot(verdict):
    got = read(render(diagnosis=DIAGNOSES[verdict], diagnosed_at=None, ledger=None, budget_state=None, baseline=None))
    assert {dict(k[1])["verdict"]: v for k, v in got.items() if k[0] == "vllm_fleet_verdict"} == {
        v: int(v == verdict) for v in VERDICTS}
    assert ("vllm_fleet_diagnosis_timestamp_seconds", ()) not in got
    ratio = DIAGNOSES[verdict]["evidence"]["ratio"]
    assert got.get(("vllm_fleet_prefill_ratio", ())) == ratio


def test_an_exhausted_budget_reads_1():
    state = B.state(ledger_of(*[restart("2026-12-01T%02d:00:00+00:00" % h) for h in (7, 8, 9)]), ENGINE, NOW,
                    B.Budget(3, 6 * 3600))
    got = read(render(budget_state=state))
    assert got[("vllm_fleet_restart_budget_exhausted", ())] == 1
    assert got[("vllm_fleet_restart_budget_used", ())] == 3


def test_the_floor_is_the_engines_own():
    got = read(render(floor=1.5))
    assert got[("vllm_fleet_prefill_threshold_ratio", ())] == decision.threshold(BASELINE, floor=1.5).value == 1.5


def test_a_ttft_baseline_gives_no_seconds_per_token():
    ttft = dict(BASELINE_FILE, unit="ttft_seconds", groups=[[0.068, 0.07, 0.069, 0.071], [0.07, 0.068, 0.07, 0.069]])
    got = {name for name, _ in read(render(baseline=ttft))}
    assert "vllm_fleet_prefill_baseline_seconds_per_token" not in got
    assert {"vllm_fleet_prefill_threshold_ratio", "vllm_fleet_prefill_probe_prompt_tokens"} <= got


@pytest.mark.parametrize("value, written", [
    ("engine_lab", "engine_lab"),
    ('say "hi"', 'say \\"hi\\"'),
    ("C:\\path", "C:\\\\path"),
    ("two\nlines", "two\\nlines"),
    ('\\"\n', '\\\\\\"\\n'),
])
def test_escape(value, written):
    assert T.escape(value) == written


@settings(max_examples=50)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_any_label_value_reads_back(value):
    text = '# HELP x y\n# TYPE x gauge\nx{fleet_engine="%s"} 1\n' % T.escape(value)
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"fleet_engine": value}


@pytest.mark.parametrize("kw, words", [
    ({"budget_state": B.state(L.Ledger(), "engine_b", NOW, B.Budget(3, 60))},
     "the budget state is engine 'engine_b''s, not 'engine_lab''s"),
    ({"budget_state": {"used": 1}}, "budget_state must be a BudgetState or none, got a dict of 1"),
    ({"ledger": "{}"}, "ledger must be a Ledger or none, got '{}'"),
    ({"diagnosis": {"verdict": "degraded"}}, "the diagnosis' verdict 'degraded' is not one of healthy"),
    ({"diagnosis": "healthy"}, "the diagnosis must be what engine_diagnosis returned (a dict), got 'healthy'"),
    ({"diagnosed_at": "2026-12-01T12:00:00"}, "diagnosed_at '2026-12-01T12:00:00' has no UTC offset"),
    ({"baseline": dict(BASELINE_FILE, schema=2)}, "the baseline cannot be read: baseline schema is 2"),
    ({"baseline": {k: v for k, v in BASELINE_FILE.items() if k != "groups"}},
     "the baseline cannot be read: baseline lacks groups"),
    ({"baseline": dict(BASELINE_FILE, groups=[[float("nan")] * 4] * 2)}, "baseline group 0[0] is nan"),
    ({"baseline": dict(BASELINE_FILE, prompt_tokens=10 ** 5000)}, "the baseline cannot be read: ValueError"),
    ({"baseline": dict(BASELINE_FILE, model=object())}, "the baseline cannot be read: TypeError"),
    ({"baseline": [BASELINE_FILE]}, "the baseline must be the prefill baseline file's JSON object, got a list of 1"),
    ({"floor": 0.5}, "the threshold floor must be a number from 1 to 10"),
    ({"floor": float("inf")}, "the threshold floor must be a number from 1 to 10 (vllm_fleet_prefill_threshold_floor)"),
    ({"floor": "1.2"}, "got '1.2'"),
])
def test_what_cannot_be_written_is_refused(kw, words):
    with pytest.raises(WatchError) as exc:
        render(**kw)
    assert words in str(exc.value)


@pytest.mark.parametrize("engine", ["", "engine lab", 'a"b', None, "e" * 64])
def test_the_engine_must_be_an_engine_name(engine):
    with pytest.raises(WatchError, match="is no engine name"):
        T.render(engine, ledger=None, budget_state=None, diagnosis=None, baseline=None)
