"""Tests for plugins/filter/restart.py: the rolling restart's filters reach
restart_plan.py and schedule.py and turn their
PlanError and ScheduleError into AnsibleFilterError with the same message.

The logic itself is tested in tests/unit/module_utils/fleet/test_restart_plan.py
and test_schedule.py; here only the wiring.
"""
from __future__ import annotations

from collections.abc import Mapping

import pytest
from ansible.module_utils.fleet import restart_plan as rp
from filter_plugins import load_filters

# Loaded before ansible.errors is imported here: load_filters keeps the controller flag as it was.
FILTERS = load_filters("restart")
from ansible.errors import AnsibleFilterError  # noqa: E402

URL1 = "http://10.0.0.1:8000/v1"
FALLBACK = "http://fallback.example:8000/v1"
ENGINES = [{"name": "engine_lab", "head": "lab1", "hosts": ["lab1", "lab2"], "api_url": URL1}]
VERDICTS = {"engine_lab": {"verdict": "prefill-degraded", "summary": "prefill 2.8x"}}


class JinjaLike(Mapping):
    """A mapping that is not a dict, as Jinja hands over its own types."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


def test_filters_are_registered():
    assert set(FILTERS) == {"restart_plan", "restart_pool_check", "restart_prefill_check", "restart_report",
                            "restart_report_line", "rrule_problems", "restart_cron_job",
                            "golden_record_name", "golden_reference"}


# --- restart_plan -------------------------------------------------------------------------

def test_restart_plan_plain_inputs():
    p = FILTERS["restart_plan"](ENGINES, VERDICTS, consumer_url=URL1, fallback_url=FALLBACK)
    # The same plan the logic makes.
    assert p == rp.plan(ENGINES, VERDICTS, consumer_url=URL1, fallback_url=FALLBACK)
    assert p["consumers_engine"]["name"] == "engine_lab"
    assert p["consumers_engine"]["drain"] == {"kind": "fallback", "url": FALLBACK,
                                 "why": "the consumers use the fallback %s while it restarts (planned)" % FALLBACK}
    assert (p["hosts"], p["batches"], p["refused"]) == ([], [], [])


def test_restart_plan_takes_mappings_that_are_not_dicts():
    """The logic checks isinstance(..., dict); the filter makes Jinja's mappings plain first."""
    engines = (JinjaLike(dict(ENGINES[0], hosts=("lab1", "lab2"))),)
    p = FILTERS["restart_plan"](engines, JinjaLike({"engine_lab": JinjaLike(VERDICTS["engine_lab"])}),
                                mode="gate", gate=JinjaLike({"queue_timeout_s": 300}))
    assert p["engines"][0]["drain"]["kind"] == "gate-hold"
    assert p["hosts"] == ["lab1", "lab2"]


@pytest.mark.parametrize("kwargs", [
    dict(policy="sometimes"),
    dict(accept_outage="maybe"),
    dict(expected_restart_s=0),
])
def test_restart_plan_error_is_a_filter_error(kwargs):
    with pytest.raises(rp.PlanError) as logic:
        rp.plan(ENGINES, VERDICTS, **kwargs)
    with pytest.raises(AnsibleFilterError) as filt:
        FILTERS["restart_plan"](ENGINES, VERDICTS, **kwargs)
    assert filt.value.message == str(logic.value)
    assert str(logic.value) in str(filt.value)


def test_restart_plan_empty_engines_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="engines must be the non-empty list"):
        FILTERS["restart_plan"]([], {})


# --- restart_pool_check -------------------------------------------------------------------

def test_restart_pool_check():
    got = FILTERS["restart_pool_check"](1000, 800, 0.1)
    assert got["ok"] is False
    assert "vllm_restart_pool_tolerance" in got["message"]
    assert FILTERS["restart_pool_check"](4736, 4736, 0.05)["ok"] is True


def test_restart_prefill_check():
    got = FILTERS["restart_prefill_check"]("0.001", 0.002, 1.5)
    assert got["ok"] is False and "vllm_restart_prefill_limit" in got["message"]
    with pytest.raises(AnsibleFilterError, match="the prefill limit must be a ratio of 1 or more"):
        FILTERS["restart_prefill_check"](0.001, 0.001, 0.5)


def test_restart_pool_check_error_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="the pool tolerance must be a fraction"):
        FILTERS["restart_pool_check"](4736, 4736, 1.0)


# --- restart_report / restart_report_line -------------------------------------------------

def test_restart_report_and_line():
    p = FILTERS["restart_plan"](ENGINES, VERDICTS, consumer_url=URL1, fallback_url=FALLBACK)
    results = JinjaLike({"engine_lab": JinjaLike({"outcome": "restarted", "downtime_s": 40.0, "drained_s": 5.0,
                                                   "overhead_s": 10.0})})
    report = FILTERS["restart_report"](p, results, {"away": 1000.0, "back": 1060.0})
    assert report["outcome"] == "succeeded"
    assert report["engines"][0]["drained_s"] == 60.0
    assert report["engines"][0]["overhead_s"] == 65.0
    line = FILTERS["restart_report_line"](report)
    assert "engine_lab restarted (was prefill-degraded, drain fallback, down 40.0 s)" in line
    assert "\n" not in line


def test_restart_report_line_takes_a_mapping():
    report = JinjaLike({"outcome": "failed", "policy": "always",
                        "engines": [JinjaLike({"name": "e1", "outcome": "failed", "step": "verify"})]})
    assert FILTERS["restart_report_line"](report) == "vllm-fleet rolling restart failed, policy always: " \
                                                     "e1 FAILED at verify"


@pytest.mark.parametrize("name,args,match", [
    ("restart_report", (None, {}), "the plan must be what restart_plan returned"),
    ("restart_report_line", (None,), "the report must be"),
])
def test_report_errors_are_filter_errors(name, args, match):
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS[name](*args)


# --- rrule_problems / restart_cron_job ----------------------------------------------------

def test_rrule_problems_good():
    assert FILTERS["rrule_problems"]("DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1") == []


def test_rrule_problems_without_interval():
    problems = FILTERS["rrule_problems"]("DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY")
    assert problems
    assert any("INTERVAL" in p for p in problems), problems


CRON_ARGS = ("/opt/vllm-fleet/.venv", "/var/lib/vllm-fleet/runner", "/opt/vllm-fleet", "/opt/vllm-fleet/inventory",
             "playbooks/rolling-restart.yml", "/run/lock/vllm-fleet-restart.lock")


def test_restart_cron_job():
    line = FILTERS["restart_cron_job"](*CRON_ARGS)
    assert "\n" not in line
    assert "flock -n -E 75" in line
    assert "--omit-env-files" in line
    # cron turns a bare % into a newline: every one is escaped.
    assert line.startswith(r"ident=$(date -u +\%Y\%m\%dT\%H\%M\%SZ); ")
    assert "logger" not in line
    assert "ansible-runner run /var/lib/vllm-fleet/runner -p playbooks/rolling-restart.yml" in line
    assert "PATH=/opt/vllm-fleet/.venv/bin:" in line
    assert "--rotate-artifacts 30" in line


def test_restart_cron_job_logs_to_syslog():
    line = FILTERS["restart_cron_job"](*CRON_ARGS, rotate=7, syslog_tag="vllm-fleet-restart")
    assert "\n" not in line
    assert "logger -t vllm-fleet-restart" in line
    assert "--rotate-artifacts 7" in line


@pytest.mark.parametrize("index,name", [(0, "venv"), (1, "private_dir"), (2, "project_dir"), (3, "inventory"),
                                        (5, "lock")])
def test_restart_cron_job_relative_path(index, name):
    args = list(CRON_ARGS)
    args[index] = args[index].lstrip("/")
    with pytest.raises(AnsibleFilterError, match="%s must be an absolute path" % name):
        FILTERS["restart_cron_job"](*args)


@pytest.mark.parametrize("kwargs,match", [
    (dict(syslog_tag="vllm fleet"), "syslog_tag must be"),
    (dict(rotate=0), "rotate must be an integer from 1 to 10000"),
])
def test_restart_cron_job_bad_options(kwargs, match):
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS["restart_cron_job"](*CRON_ARGS, **kwargs)
