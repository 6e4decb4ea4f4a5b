"""Build `promtool test rules` files from the series recorded on the lab (tests/fixtures/watch/).

A fixture is what the lab's Prometheus scraped while one scenario ran
(lab/watch/record_series.py): every series a rule reads, as [unix time, value]
pairs on a 5 s grid. Here it becomes promtool's input_series on the same grid,
time 0 being the fixture's start; the toolkit's own vllm_fleet_* series (which
node-exporter's textfile collector serves on the head) come from the baseline
the lab's prefill probe recorded (prefill-baseline.json), through the same
renderer the engine hosts use.

The rules are roles/fleet_watch's template, rendered as Ansible renders it,
with the role's defaults (production) or with the lab inventory's values
over them (each alert's for:, which the lab shortens).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import subprocess

import jinja2
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "watch"
ROLES = REPO / "roles"
RULES = ROLES / "fleet_watch" / "templates" / "etc" / "prometheus" / "vllm-fleet" / "rules.yml.j2"
LAB_GROUP_VARS = REPO / "inventory" / "lab" / "group_vars"
# The lab's monitoring host (lab3) takes group_vars/all, then its monitoring group's over them;
# the controller, where the healing loop runs, all's only.
LAB_GROUPS = ("all", "monitoring")
RENDERINGS = ("production", "lab")
PROMTOOL = pathlib.Path(os.environ.get("PROMTOOL", REPO / ".cache" / "watch-tools" / "usr" / "bin" / "promtool"))
ENGINE = "engine_lab"


def seconds(text: str) -> float:
    """A duration as the inventory writes it: Prometheus's (`1m30s`) or ansible-rulebook's (`45 seconds`)."""
    units = {"s": 1, "m": 60, "h": 3600, "second": 1, "minute": 60, "hour": 3600}
    found = re.findall(r"(\d+) ?(hours?|minutes?|seconds?|[smh])", str(text))
    assert found and "".join(n + u for n, u in found) == str(text).replace(" ", ""), f"not a duration: {text!r}"
    return sum(float(n) * units[u if len(u) == 1 else u.rstrip("s")] for n, u in found)


def settings(role: str, rendering: str) -> dict:
    """A role's variables as its templates see them: its defaults (production), with the lab's
    group_vars over them for the lab, and its constants (vars/main.yml's `_` names) on top."""
    values = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    if rendering == "lab":
        for group in LAB_GROUPS:
            for path in sorted((LAB_GROUP_VARS / group).glob("*.yml")):
                values.update(yaml.safe_load(path.read_text()) or {})
    constants = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    values.update({k: v for k, v in constants.items() if k.startswith("_") and not k.startswith("__")})
    return values


def render(template: pathlib.Path, values: dict) -> str:
    """``template`` rendered as Ansible's template module renders it, with ``values``."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters["comment"] = lambda text: f"# {text}"
    env.filters["to_json"] = json.dumps
    return env.from_string(template.read_text()).render(ansible_managed="Ansible managed", **values)


def rules_file(tmp_path: pathlib.Path, rendering: str) -> pathlib.Path:
    """The rules as the monitoring host gets them, with production's or the lab's values."""
    path = tmp_path / f"rules-{rendering}.yml"
    path.write_text(render(RULES, settings("fleet_watch", rendering)))
    return path


def promtool() -> str:
    if not PROMTOOL.is_file():
        raise AssertionError(f"promtool is missing at {PROMTOOL}: run `make watch-tools` (make unit does it)")
    return str(PROMTOOL)


def load(scenario: str) -> dict:
    return json.loads((FIXTURES / f"{scenario}.json").read_text())


def _series_name(labels: dict) -> str:
    name = labels["__name__"]
    rest = ",".join(f'{k}={json.dumps(v)}' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def _values(points: list, start: float, step: float, count: int) -> str:
    grid = ["_"] * count
    for t, v in points:
        i = round((float(t) - start) / step)
        if 0 <= i < count:
            value = float(v)
            grid[i] = "stale" if math.isnan(value) else repr(value)
    return " ".join(grid)


def edited(doc: dict, match: dict, from_s: float, value: float) -> dict:
    """``doc`` with the series whose labels include ``match`` set to ``value`` from ``from_s``
    (seconds after the start) on: a recorded scenario with one named change, for a fault the
    lab has no knob for. The edit is in the test's table, never in the fixture."""
    out = dict(doc, series=[])
    hit = False
    for s in doc["series"]:
        if all(s["metric"].get(k) == v for k, v in match.items()):
            hit = True
            s = dict(s, values=[[t, str(value) if float(t) - doc["start"] >= from_s else v] for t, v in s["values"]])
        out["series"].append(s)
    assert hit, f"no series of {doc['scenario']} matches {match}"
    return out


def input_series(doc: dict, toolkit: dict) -> list:
    """promtool's input_series: the fixture's series, then the toolkit's constant ones."""
    step = doc["step_s"]
    count = int((doc["end"] - doc["start"]) // step) + 1
    out = [{"series": _series_name(s["metric"]), "values": _values(s["values"], doc["start"], step, count)}
           for s in doc["series"] if not s["metric"]["__name__"].startswith("vllm_fleet_")]
    for key, value in toolkit.items():
        # A name, or (name, ((label, value), ...)) for a labelled series.
        name, own = key if isinstance(key, tuple) else (key, ())
        labels = {"__name__": name, **dict(own), "fleet_engine": ENGINE, "job": "node", "instance": "10.200.0.11:9100"}
        out.append({"series": _series_name(labels), "values": f"{value!r}x{count - 1}"})
    return out


def duration(doc: dict) -> int:
    return int((doc["end"] - doc["start"]) // doc["step_s"]) * doc["step_s"]


def firing_at(eval_s: int, alerts: list) -> dict:
    """A promql_expr_test: at eval_s, exactly these alerts fire (the heartbeat aside)."""
    return {
        "expr": 'ALERTS{alertstate="firing",alertname!="FleetWatchHeartbeat"}',
        "eval_time": f"{eval_s}s",
        "exp_samples": [{"labels": _series_name({"__name__": "ALERTS", "alertstate": "firing", **a}), "value": 1}
                        for a in alerts],
    }


def run(tmp_path: pathlib.Path, rules: pathlib.Path, doc: dict, toolkit: dict,
        expr_tests: list) -> subprocess.CompletedProcess:
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{doc['step_s']}s",
        "tests": [{"name": doc["scenario"], "interval": f"{doc['step_s']}s",
                   "input_series": input_series(doc, toolkit), "promql_expr_test": expr_tests}],
    }
    path = tmp_path / f"{doc['scenario']}.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 20))
    return subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
