"""Tests for plugins/module_utils/fleet/schedule.py: AWX's RRULE rules
(docs/reference/restart.md section 1.4) and the cron entry's ansible-runner
command, run for real through sh and flock with a fake ansible-runner."""
from __future__ import annotations

import os
import re
import stat
import subprocess

import pytest
from ansible.module_utils.fleet import schedule as s

GOOD = [
    "DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1",
    "DTSTART:20261201T023000Z RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=SU",
    "DTSTART;TZID=America/New_York:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1;COUNT=999",
    "DTSTART;TZID=UTC:20261201T033000 RRULE:FREQ=MONTHLY;INTERVAL=1;BYDAY=MO;BYSETPOS=1",
    "DTSTART;TZID=Europe/Berlin:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1;UNTIL=20270101T000000Z "
    "EXRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=SA,SU",
    "DTSTART;TZID=America/Argentina/Buenos_Aires:20261201T033000 RRULE:FREQ=HOURLY;INTERVAL=6",
]


@pytest.mark.parametrize("rrule", GOOD)
def test_rules_awx_saves(rrule):
    assert s.rrule_problems(rrule) == []


@pytest.mark.parametrize("rrule,match", [
    ("", "non-empty"),
    (None, "non-empty"),
    ("RRULE:FREQ=DAILY;INTERVAL=1", "exactly one DTSTART"),
    ("DTSTART:20261201T033000 RRULE:FREQ=DAILY;INTERVAL=1", "must carry its timezone"),
    ("DTSTART;TZID=Europe/Berlin:20261201T033000", "at least one RRULE"),
    ("DTSTART:20261201T033000Z DTSTART:20261202T033000Z RRULE:FREQ=DAILY;INTERVAL=1", "exactly one DTSTART"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY", "needs INTERVAL"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=SECONDLY;INTERVAL=1", "SECONDLY"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=FORTNIGHTLY;INTERVAL=1", "FREQ must be one of"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=0", "positive integer"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1;COUNT=3;UNTIL=20270101T000000Z", "not both"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1;COUNT=1000", "COUNT must be 1 to 999"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1;UNTIL=20270101T000000", "UNTIL must be UTC"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=MONTHLY;INTERVAL=1;BYDAY=1MO", "numbered BYDAY"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=MONTHLY;INTERVAL=1;BYDAY=-1FR", "numbered BYDAY"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1 RDATE:20261224T033000Z", "does not take RDATE"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1 EXDATE:20261224T033000Z", "does not take EXDATE"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1;INTERVAL=2", "given twice"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=1 timezone=Europe/Berlin", "unknown part"),
    ("DTSTART:20261201T033000Z RRULE:FREQ=DAILY;INTERVAL=\u0661", "not NAME=VALUE"),
    ("DTSTART;TZID=Europe/Berlin:20261201T033000 " + "x" * 5000, "characters long"),
])
def test_rules_awx_refuses(rrule, match):
    problems = s.rrule_problems(rrule)
    assert any(match in p for p in problems), problems


def test_cron_escape():
    assert s.cron_escape("date +%Y") == "date +\\%Y"
    with pytest.raises(s.ScheduleError, match="one line"):
        s.cron_escape("a\nb")


@pytest.fixture
def venv(tmp_path):
    """A venv whose bin/ansible-runner prints its argv and exits with $FAKE_RC."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    runner = bin_dir / "ansible-runner"
    runner.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n[ -n "$HOLD" ] && sleep "$HOLD"\nexit "${FAKE_RC:-0}"\n')
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
    return tmp_path / "venv"


def _argv(venv, tmp_path, **kw):
    return s.runner_argv(str(venv), str(tmp_path / "pdd"), "/opt/vllm-fleet", "/opt/vllm-fleet/inventory/site",
                         "playbooks/rolling-restart.yml", str(tmp_path / "restart.lock"), **kw)


def _as_cron_runs_it(job: str, **env) -> subprocess.CompletedProcess:
    # cron turns "\%" back into "%" and runs the line with /bin/sh and a bare PATH.
    line = job.replace("\\%", "%")
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_the_cron_job_runs_the_venvs_runner_with_a_utc_ident(venv, tmp_path):
    job = s.cron_job(_argv(venv, tmp_path))
    assert "%" not in job.replace("\\%", "")
    r = _as_cron_runs_it(job)
    assert r.returncode == 0, r.stderr
    args = r.stdout.split("\n")
    assert args[:4] == ["run", str(tmp_path / "pdd"), "-p", "playbooks/rolling-restart.yml"]
    ident = args[args.index("--ident") + 1]
    assert re.fullmatch(r"\d{8}T\d{6}Z", ident), ident
    assert "--omit-env-files" in args and args[args.index("--rotate-artifacts") + 1] == "30"
    assert "-e" not in args  # ansible-runner has no -e


def test_a_failed_run_keeps_its_exit_status(venv, tmp_path):
    assert _as_cron_runs_it(s.cron_job(_argv(venv, tmp_path)), FAKE_RC="2").returncode == 2


def test_an_overlapping_run_exits_75_not_1(venv, tmp_path):
    job = s.cron_job(_argv(venv, tmp_path))
    first = subprocess.Popen(["/bin/sh", "-c", job.replace("\\%", "%")], env={"PATH": "/usr/bin:/bin", "HOLD": "5"},
                             stdout=subprocess.DEVNULL)
    try:
        lock = tmp_path / "restart.lock"
        for _ in range(200):  # the first run holds the lock once flock created it
            if lock.exists() and subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0:
                break
            subprocess.run(["sleep", "0.02"])
        assert _as_cron_runs_it(job).returncode == s.LOCKED_EXIT
    finally:
        first.kill()
        first.wait()


@pytest.mark.parametrize("kw,match", [
    ({"rotate": 0}, "rotate must be an integer from 1 to 10000"),
    ({"rotate": True}, "rotate"),
])
def test_runner_argv_refuses(venv, tmp_path, kw, match):
    with pytest.raises(s.ScheduleError, match=match):
        _argv(venv, tmp_path, **kw)


def test_runner_argv_needs_absolute_paths(tmp_path):
    with pytest.raises(s.ScheduleError, match="venv must be an absolute path"):
        s.runner_argv("venv", "/pdd", "/p", "/i", "pb.yml", "/lock")
    assert os.path.isabs(str(tmp_path))


def test_the_syslog_line_names_the_run_and_keeps_its_status(venv, tmp_path):
    logger = venv / "bin" / "logger"
    log = tmp_path / "syslog"
    logger.write_text('#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\n' % log)
    logger.chmod(0o755)
    job = s.cron_job(_argv(venv, tmp_path), syslog_tag="vllm-fleet-restart")
    r = _as_cron_runs_it(job.replace("logger", str(logger)), FAKE_RC="2")
    assert r.returncode == 2
    line = log.read_text().strip()
    assert re.fullmatch(r"-t vllm-fleet-restart -- run \d{8}T\d{6}Z exit 2", line), line


def test_the_syslog_tag_is_checked():
    with pytest.raises(s.ScheduleError, match="syslog_tag"):
        s.cron_job(["true"], syslog_tag="a b; rm -rf /")
