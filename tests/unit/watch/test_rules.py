"""Every watch rule, under `promtool test rules`, on series recorded on the lab.

Each scenario is a fixture (tests/fixtures/watch/<scenario>.json, recorded by
lab/watch/record_series.py under a fault knob or none) and what must fire, and
by when: the healthy ones fire nothing at any moment; each fault fires its
alerts within the bound docs/watch.md states, and nothing before its knob. A
fault the lab has no knob for is a recorded scenario with one named edit (the
table says which), never a series written by hand.

Every scenario runs twice: on the rules with production's for: (the role's
defaults) and with the lab's (inventory/lab). A fault's bound is the time its
alerts' expressions take to hold after the knob, plus the longest for: of
those alerts in that rendering.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.watch import textfile
from prometheus_client.parser import text_string_to_metric_families
from rule_tests import (
    ENGINE,
    FIXTURES,
    RENDERINGS,
    duration,
    edited,
    firing_at,
    load,
    promtool,
    rules_file,
    run,
    seconds,
    settings,
)

# The lab's floor (inventory/lab/group_vars/vllm_engines/engine.yml).
LAB_FLOOR = 1.5
# What node-exporter serves from the head's textfile directory, as the engine host writes it:
# the baseline the lab's probe recorded, through the same renderer.
TOOLKIT = {
    sample.name: sample.value
    for family in text_string_to_metric_families(textfile.render(
        ENGINE, ledger=None, budget_state=None, diagnosis=None,
        baseline=json.loads((FIXTURES / "prefill-baseline.json").read_text()), floor=LAB_FLOOR))
    for sample in family.samples
}
HEAL = {"severity": "page", "fleet_engine": ENGINE, "fleet_cure": "restart"}
HEAD_API = "10.200.0.11:8000"
WEDGED = {"alertname": "VllmEngineWedged", **HEAL}
DEGRADED = {"alertname": "VllmPrefillDegraded", **HEAL}
DOWN = {"alertname": "VllmEngineDown", **HEAL, "instance": HEAD_API}
NOT_CURED = {"alertname": "VllmNotCuredByRestart", "severity": "page", "fleet_engine": ENGINE}
PREEMPTING = {"alertname": "VllmPreempting", "severity": "warning", "fleet_engine": ENGINE}
KV_BOUND = {"alertname": "VllmKvBound", "severity": "info", "fleet_engine": ENGINE}
THROTTLED = {"alertname": "VllmGpuThrottled", "severity": "page", "fleet_engine": ENGINE}


def watcher_down(job, instance, **labels):
    return {"alertname": "FleetWatcherDown", "severity": "page", "job": job, "instance": instance, **labels}


# name -> (fixture, edit or None, extra toolkit series, alerts firing by the bound, seconds after the
#          knob allowed for their expressions to hold). The bound is that plus the alerts' longest for:
#          in the rendering: with a site's, 210, 120, 120, 90, 75, 15 and 10 s.
FAULTS = {
    "slow-prefill": ("slow-prefill", None, {}, [DEGRADED], 150),
    "wedge": ("wedge", None, {}, [WEDGED], 105),
    # /health turns 503, /metrics still answers: the canary gets no token and nothing steps.
    "kill-ray-worker": ("kill-ray-worker", None, {}, [WEDGED], 105),
    # The head powered off: its /metrics and its node-exporter stop answering.
    "host-stop": ("host-stop", None, {}, [DOWN, watcher_down("node", "10.200.0.11:9100", fleet_engine=ENGINE)], 30),
    # Alertmanager stopped 30 s in (the recorded idle engine otherwise).
    "alertmanager-stopped": ("healthy-idle", ({"job": "alertmanager"}, 30, 0), {},
                             [watcher_down("alertmanager", "localhost:9093")], 15),
    # Three preemptions 30 s in, on the recorded loaded engine.
    "preempting": ("healthy-loaded", ({"__name__": "vllm:num_preemptions_total"}, 30, 3), {}, [PREEMPTING], 15),
    # The seed's shape (issue 39.2): three full-context sessions on the field's 2.31-context pool,
    # two running and the third waiting, turn after turn; the pool reads 83 %, never over 90.
    "kv-bound": ("kv-bound", None, {}, [KV_BOUND], 30),
    # The last diagnosis read throttled (a GPU's thermal or power throttle during a slow-down), as
    # the head's textfile says it: the idle engine otherwise, whose verdict series says healthy.
    "gpu-throttled": ("healthy-idle", None, {("vllm_fleet_verdict", (("verdict", "throttled"),)): 1},
                      [THROTTLED], 10),
    # The restart budget spent, as the ledger's series say it.
    "budget-spent": ("healthy-idle", None, {"vllm_fleet_restart_budget_exhausted": 1}, [NOT_CURED], 10),
}


@pytest.fixture(params=RENDERINGS)
def rules(request, tmp_path) -> Path:
    return rules_file(tmp_path, request.param)


def alerting_rules(path: Path) -> dict:
    """alert name -> its rule, as rendered."""
    return {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"] if "alert" in r}


def _quiet_throughout(doc, until=None):
    end = until if until is not None else duration(doc)
    return [firing_at(t, []) for t in range(0, end + 1, 15)]


@pytest.mark.parametrize("scenario", ["healthy-idle", "healthy-loaded"])
def test_a_healthy_engine_fires_nothing(tmp_path, rules, scenario):
    doc = load(scenario)
    result = run(tmp_path, rules, doc, TOOLKIT, _quiet_throughout(doc))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_fault_fires_its_alerts_in_time_and_nothing_before(tmp_path, rules, name):
    fixture, edit, extra, alerts, holds = FAULTS[name]
    doc = load(fixture)
    if edit is not None:
        doc = edited(doc, *edit)
        knob = edit[1]
    else:
        knob = int(doc["knob_at"] - doc["start"])
    step = doc["step_s"]
    # Quiet up to the last evaluation before the knob.
    last_before = int(knob) - step - int(knob) % step
    before = [] if extra else _quiet_throughout(doc, until=last_before)
    rendered = alerting_rules(rules)
    bound = holds + max(seconds(rendered[a["alertname"]].get("for", "0s")) for a in alerts)
    fired_by = int(min(knob + bound, duration(doc)))
    result = run(tmp_path, rules, doc, {**TOOLKIT, **extra},
                 before + [firing_at(fired_by - fired_by % step, alerts)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_seeds_shape_pages_nothing_at_any_moment(tmp_path, rules):
    """The field's story is a healthy engine with a full pool, misread as a stall: held for 7
    minutes, past every for:, nothing of severity page fires at any evaluation."""
    doc = load("kv-bound")
    pages = [{"expr": 'ALERTS{alertstate="firing",severity="page"}', "eval_time": f"{t}s", "exp_samples": []}
             for t in range(0, duration(doc) + 1, doc["step_s"])]
    result = run(tmp_path, rules, doc, TOOLKIT, pages)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_each_for_is_the_inventorys_and_no_alert_fires_on_one_reading(tmp_path, rendering):
    values = settings("fleet_watch", rendering)
    rendered = alerting_rules(rules_file(tmp_path, rendering))
    assert {name: r["for"] for name, r in rendered.items() if "for" in r} == values["fleet_watch_alert_for"]
    evaluation = seconds(values["fleet_watch_evaluation_interval"])
    short = {name: f for name, f in values["fleet_watch_alert_for"].items() if seconds(f) < evaluation}
    assert not short, f"a for: under one evaluation ({evaluation:.0f} s) fires on one reading: {short}"


def test_every_alert_is_proven_by_a_scenario(tmp_path):
    alerts = set(alerting_rules(rules_file(tmp_path, "production")))
    proven = {a["alertname"] for *_, fired, _holds in FAULTS.values() for a in fired}
    # The heartbeat fires always: the healthy scenarios' queries leave it out, a watcher test proves it.
    assert alerts - {"FleetWatchHeartbeat"} <= proven, sorted(alerts - proven)


def test_the_rules_pass_promtools_check(rules):
    result = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
