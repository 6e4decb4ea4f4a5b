"""Tests for library/vllm_prefill_probe.py end to end: the module in-process
against the fake vLLM 0.32 server of tests/prefill_fake.py on 127.0.0.1, and a
fake ``systemctl`` first on PATH for O(unit).

The probe's steps and verdicts are tested in
tests/unit/module_utils/prefill/test_probe.py; here: the argspec and its
messages, the baseline file (atomic, kept since the unit's start, refreshed),
check mode, and the api_key.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import time
from pathlib import Path

import pytest
import vllm_prefill_probe as module
from ansible.module_utils.prefill import client as pc
from ansible.module_utils.prefill.decision import FLOOR, GROUP_SIZE, Baseline, baseline_from_json, baseline_to_json
from prefill_fake import MODEL, PER_TOKEN, VERSION, FakeVllm, closed_port

UNIT = "vllm.service"
TOKENS = 32
KEY = "sk-fleet-0123456789abcdef"


@pytest.fixture
def fake():
    # The probe's families only: these tests are about the module, not the parser.
    with FakeVllm(trim=True) as server:
        yield server


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "state" / "prefill-baseline.json"


def args(fake, path, **kw) -> dict:
    out = {"url": fake.url, "model": MODEL, "prompt_tokens": TOKENS, "baseline_path": str(path), "window": 0.5,
           "timeout": 2}
    out.update(kw)
    return out


class Systemd:
    """A fake systemctl first on PATH: ``show UNIT`` answers the unit's start time and state."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.dir = tmp_path / "bin"
        self.dir.mkdir()
        self.env = tmp_path / "systemctl.env"
        self.calls = tmp_path / "systemctl.calls"
        script = self.dir / "systemctl"
        script.write_text(f"""#!/bin/sh
echo "$*" >> '{self.calls}'
. '{self.env}'
[ -n "$ERR" ] && echo "$ERR" >&2
[ "$RC" = 0 ] && printf 'ActiveEnterTimestamp=%s\\nActiveState=%s\\n' "$STAMP" "$STATE"
exit "$RC"
""")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        self.set()
        monkeypatch.setenv("PATH", "%s%s%s" % (self.dir, os.pathsep, os.environ["PATH"]))

    def set(self, started: float | None = None, state: str = "active", rc: int = 0, err: str = ""):
        """The unit became active at ``started`` (default: 100 s ago)."""
        self.started = int(time.time() - 100 if started is None else started)
        env = {"STAMP": "@%d" % self.started, "STATE": state, "RC": rc, "ERR": err}
        self.env.write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in env.items()))

    def lines(self) -> list:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    return Systemd(tmp_path, monkeypatch)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def write_baseline(path: Path, **kw) -> Baseline:
    """A baseline as mode=baseline records it on the healthy fake: every sample PER_TOKEN."""
    b = Baseline(**dict(dict(vllm_version=VERSION, model=MODEL, prompt_tokens=TOKENS,
                             recorded_at="2026-12-01T03:30:00+00:00", groups=((PER_TOKEN,) * GROUP_SIZE,) * 2), **kw))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(baseline_to_json(b))
    return b


def record(run_module, fake, path, **kw) -> dict:
    result = run_module(module, args(fake, path, mode="baseline", **kw))
    assert result.get("failed") is not True, result.get("msg")
    return result


# --- argspec -----------------------------------------------------------------------------

@pytest.mark.parametrize("params, msg", [
    ({}, "missing required arguments: baseline_path, model, url"),
    ({"url": "http://127.0.0.1:8000", "model": MODEL}, "missing required arguments: baseline_path"),
    ({"mode": "record"}, "value of mode must be one of: probe, baseline, got: record"),
    ({"prompt_tokens": "many"}, "argument 'prompt_tokens' is of type str and we were unable to convert to int: "
                                "\"'many'\" cannot be converted to an int"),
    ({"window": "soon"}, "argument 'window' is of type str and we were unable to convert to float: "
                         "<class 'str'> cannot be converted to a float"),
    ({"refresh": "maybe"}, "argument 'refresh' is of type str and we were unable to convert to bool: "
                           "The value 'maybe' is not a valid boolean. Valid booleans include: "),
    ({"service": UNIT}, "Unsupported parameters for (basic.py) module: service. Supported parameters include: "
                        "api_key, baseline_path, groups, keep_known_good, load_margin, mode, model, prompt_tokens, "
                        "refresh, threshold_floor, timed, timeout, unit, url, window, window_max."),
])
def test_argument_errors(run_module, fake, path, params, msg):
    base = {} if "url" in params or params == {} else {"url": fake.url, "model": MODEL, "baseline_path": str(path)}
    result = run_module(module, dict(base, **params))
    assert result["failed"] is True
    assert result["msg"].startswith(msg)
    assert fake.requests == []


@pytest.mark.parametrize("params, msg", [
    ({"prompt_tokens": 8}, "prompt_tokens must be between 16 and 16777216, got 8."),
    ({"prompt_tokens": -1}, "prompt_tokens must be between 16 and 16777216, got -1."),
    # The argspec's int reads "1e999" as a 1,000-digit int: the probe went on to build a prompt that long.
    ({"prompt_tokens": "1e999"}, "prompt_tokens must be between 16 and 16777216, got a number of more than 30 digits."),
    ({"prompt_tokens": 16777217}, "prompt_tokens must be between 16 and 16777216, got 16777217."),
    ({"groups": "1e999"}, "groups must be between 2 and 16, got a number of more than 30 digits."),
    # The argspec's float reads "inf", "nan" and "1e999" as numbers; every range refuses them.
    ({"window": "nan"}, "window must be between 0.5 and 300 seconds, got nan."),
    ({"window_max": "1e999"}, "window_max must be between 0.5 and 600 seconds, got inf."),
    ({"threshold_floor": "-inf"}, "threshold_floor must be between 1.0 and 10, got -inf."),
    ({"timeout": "nan"}, "timeout must be between 0 and 3600 seconds, got nan."),
    ({"groups": 1}, "groups must be between 2 and 16, got 1."),
    ({"groups": 17}, "groups must be between 2 and 16, got 17."),
    ({"window": 0.1}, "window must be between 0.5 and 300 seconds, got 0.1."),
    ({"window": 301}, "window must be between 0.5 and 300 seconds, got 301."),
    ({"window_max": 0.4}, "window_max must be between 0.5 and 600 seconds, got 0.4."),
    ({"window_max": 601}, "window_max must be between 0.5 and 600 seconds, got 601."),
    ({"threshold_floor": 0.5}, "threshold_floor must be between 1.0 and 10, got 0.5."),
    ({"threshold_floor": 11}, "threshold_floor must be between 1.0 and 10, got 11."),
    ({"timeout": 0}, "timeout must be between 0 and 3600 seconds, got 0."),
    ({"timeout": 3601}, "timeout must be between 0 and 3600 seconds, got 3601."),
])
def test_bad_values(run_module, fake, path, params, msg):
    result = run_module(module, args(fake, path, **params))
    assert result["failed"] is True
    assert result["msg"] == msg
    assert fake.requests == []


@pytest.mark.parametrize("url", ["https://127.0.0.1:8000", "127.0.0.1:8000"])
def test_url_must_be_http(run_module, path, url):
    result = run_module(module, {"url": url, "model": MODEL, "baseline_path": str(path)})
    assert result["failed"] is True
    assert result["msg"] == "url %r must be http://HOST:PORT, the engine's own API address" % url


# --- mode probe ----------------------------------------------------------------------------

def test_probe_healthy_then_degraded(run_module, fake, path):
    write_baseline(path)
    healthy = run_module(module, args(fake, path))
    assert (healthy["verdict"], healthy["changed"], len(healthy["samples"])) == ("healthy", False, 2)
    assert healthy["ratio"] == pytest.approx(1.0) and healthy["threshold"] == FLOOR
    assert healthy["baseline"] == json.loads(path.read_text())
    assert healthy["uptime_s"] is None
    fake.scale = 3.0
    degraded = run_module(module, args(fake, path))
    assert (degraded["verdict"], len(degraded["samples"])) == ("degraded", 4)
    assert degraded["ratio"] == pytest.approx(3.0)


def test_probe_with_unit_gives_the_uptime(run_module, fake, path, systemd):
    write_baseline(path)
    systemd.set(started=time.time() - 3600)
    result = run_module(module, args(fake, path, unit=UNIT))
    assert result["verdict"] == "healthy"
    assert 3599 <= result["uptime_s"] < 3700
    assert systemd.lines() == [f"show {UNIT} --timestamp=unix -p ActiveEnterTimestamp -p ActiveState"]


def test_probe_unit_not_active_has_no_uptime(run_module, fake, path, systemd):
    systemd.set(state="inactive")
    assert run_module(module, args(fake, path, unit=UNIT))["uptime_s"] is None


def test_probe_systemctl_fails(run_module, fake, path, systemd):
    systemd.set(rc=1, err="Failed to connect to bus: No such file or directory")
    result = run_module(module, args(fake, path, unit=UNIT))
    assert result["failed"] is True
    assert result["msg"] == ("systemctl show vllm.service failed (rc 1): Failed to connect to bus: No such file or "
                             "directory")


def test_probe_without_a_baseline_file(run_module, fake, path):
    result = run_module(module, args(fake, path))
    assert "failed" not in result
    assert (result["verdict"], result["baseline"], result["answered"]) == ("inconclusive", None, True)
    assert result["reason"] == "no baseline at %s: it is recorded right after a verified start" % path
    assert len(fake.completions) == 1


def test_probe_with_an_unusable_baseline_file(run_module, fake, path):
    path.parent.mkdir()
    path.write_text("{")
    result = run_module(module, args(fake, path))
    assert result["verdict"] == "inconclusive"
    assert result["reason"].startswith("baseline %s is unusable: baseline file is not JSON" % path)


def test_probe_with_another_baseline(run_module, fake, path):
    write_baseline(path)
    result = run_module(module, args(fake, path, prompt_tokens=64))
    assert (result["verdict"], result["samples"]) == ("inconclusive", [])
    assert "baseline used 32-token prompts, the probe 64" in result["reason"]


def test_probe_busy(run_module, fake, path):
    write_baseline(path)
    fake.running = 1.0
    result = run_module(module, args(fake, path))
    assert (result["verdict"], result["busy"], result["threshold"]) == ("inconclusive", True, FLOOR)
    assert result["passive"]["window_s"] == 0.5
    assert fake.completions == []


def test_probe_down(run_module, path):
    result = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "model": MODEL,
                                 "baseline_path": str(path)})
    assert "failed" not in result
    assert (result["verdict"], result["health_status"], result["changed"]) == ("down", None, False)


def test_probe_503(run_module, fake, path):
    fake.health_status = 503
    result = run_module(module, args(fake, path))
    assert (result["verdict"], result["health_status"]) == ("down", 503)


def test_probe_wedged(run_module, fake, path):
    fake.hang_from = 0
    result = run_module(module, args(fake, path, timeout=0.2))
    assert (result["verdict"], result["answered"], result["health_status"]) == ("inconclusive", False, 200)


def test_not_vllm_fails_with_the_reason(run_module, fake, path):
    fake.version_status = 404
    result = run_module(module, args(fake, path))
    assert result["failed"] is True
    assert result["msg"] == 'GET /version answered HTTP 404: {"detail": "Not Found"}'
    assert (result["baseline"], result["uptime_s"]) == (None, None)


def test_check_mode_probe_runs_the_same(run_module, fake, path):
    write_baseline(path)
    result = run_module(module, args(fake, path), check_mode=True)
    assert (result["verdict"], result["changed"]) == ("healthy", False)


# --- mode baseline -------------------------------------------------------------------------

def test_baseline_is_written_atomically(run_module, fake, path, umask_022):
    result = record(run_module, fake, path)
    assert (result["changed"], result["verdict"]) == (True, "recorded")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .tmp left
    written = baseline_from_json(path.read_text())
    assert (written.vllm_version, written.model, written.prompt_tokens) == (VERSION, MODEL, TOKENS)
    assert [len(g) for g in written.groups] == [GROUP_SIZE] * 2
    assert [x for g in written.groups for x in g] == pytest.approx([PER_TOKEN] * 8)
    assert result["baseline"] == json.loads(path.read_text())
    assert (result["threshold"], result["too_noisy"]) == (FLOOR, False)
    assert result["noise"] == pytest.approx(1.0) and result["reference"] == pytest.approx(PER_TOKEN)
    assert len(result["samples"]) == 8
    assert len(fake.completions) == 1 + 8
    assert fake.connections == 1


def test_baseline_replaces_the_file_in_place(run_module, fake, path):
    record(run_module, fake, path)
    os.chmod(path, 0o640)
    first = path.read_text()
    fake.scale = 2.0
    record(run_module, fake, path, groups=3)
    assert path.read_text() != first
    assert len(baseline_from_json(path.read_text()).groups) == 3
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the file's own mode is kept


def test_baseline_kept_since_the_units_start(run_module, fake, path, systemd):
    first = record(run_module, fake, path, unit=UNIT)
    assert (first["changed"], first["verdict"]) == (True, "recorded")
    written = path.read_text()
    sent = len(fake.requests)
    again = record(run_module, fake, path, unit=UNIT)
    assert (again["changed"], again["verdict"]) == (False, "kept")
    assert again["reason"].startswith("baseline from %s was recorded since the engine's start"
                                      % first["baseline"]["recorded_at"])
    assert again["baseline"] == first["baseline"]
    assert path.read_text() == written
    assert len(fake.requests) == sent  # nothing sent
    assert 99 <= again["uptime_s"] < 200


def test_baseline_refresh_records_again(run_module, fake, path, systemd):
    record(run_module, fake, path, unit=UNIT)
    sent = len(fake.completions)
    result = record(run_module, fake, path, unit=UNIT, refresh=True)
    assert (result["changed"], result["verdict"]) == (True, "recorded")
    assert len(fake.completions) == sent + 9


@pytest.mark.parametrize("change", ["restarted", "prompt_tokens", "model", "no unit"])
def test_baseline_recorded_again_when_stale(run_module, fake, path, systemd, change):
    record(run_module, fake, path, unit=UNIT)
    kw = {"unit": UNIT}
    if change == "restarted":
        systemd.set(started=time.time() + 5)
    elif change == "prompt_tokens":
        kw["prompt_tokens"] = 48
    elif change == "model":
        fake.model = kw["model"] = "other"
    else:
        del kw["unit"]
    result = record(run_module, fake, path, **kw)
    assert (result["changed"], result["verdict"]) == (True, "recorded")


# --- keep_known_good: a restart that did not cure keeps the known-good baseline ---------------

def test_keep_known_good_keeps_the_baseline_when_the_start_is_slower(run_module, fake, path, systemd):
    known = record(run_module, fake, path, unit=UNIT)
    written = path.read_text()
    systemd.set(started=time.time() + 5)  # restarted since, with the slow-down still there
    fake.scale = 3.0
    result = record(run_module, fake, path, unit=UNIT, keep_known_good=True)
    assert (result["changed"], result["verdict"]) == (False, "slower")
    assert 2.5 < result["ratio"] < 3.5, result["ratio"]
    assert result["reason"].startswith("prefill right after the start is %.2fx the known-good baseline from %s"
                                       % (result["ratio"], known["baseline"]["recorded_at"]))
    assert path.read_text() == written and result["baseline"] == known["baseline"]
    # The new measurement is what the restart compares with before (its after reading).
    assert result["reference"] == pytest.approx(known["reference"] * result["ratio"])


@pytest.mark.parametrize("case", ["as fast", "off", "another version", "no baseline before"])
def test_keep_known_good_records_otherwise(run_module, fake, path, systemd, case):
    kw = {"unit": UNIT, "keep_known_good": case != "off"}
    if case != "no baseline before":
        record(run_module, fake, path, unit=UNIT)
    if case == "another version":
        write_baseline(path, vllm_version="0.31.0")
    systemd.set(started=time.time() + 5)
    fake.scale = 1.0 if case == "as fast" else 3.0
    result = record(run_module, fake, path, **kw)
    assert (result["changed"], result["verdict"]) == (True, "recorded"), result["reason"]


def test_check_mode_baseline_sends_nothing(run_module, fake, path):
    result = run_module(module, args(fake, path, mode="baseline"), check_mode=True)
    assert (result["changed"], result["verdict"]) == (True, "recorded")
    assert result["reason"] == "check mode: a baseline would be recorded (no baseline at %s: it is recorded right " \
                               "after a verified start)" % path
    assert fake.requests == []
    assert not path.parent.exists()


def test_check_mode_baseline_kept(run_module, fake, path, systemd):
    record(run_module, fake, path, unit=UNIT)
    sent = len(fake.requests)
    result = run_module(module, args(fake, path, mode="baseline", unit=UNIT), check_mode=True)
    assert (result["changed"], result["verdict"]) == (False, "kept")
    assert len(fake.requests) == sent


def test_check_mode_baseline_stale(run_module, fake, path, systemd):
    record(run_module, fake, path, unit=UNIT)
    written = path.read_text()
    sent = len(fake.requests)
    systemd.set(started=time.time() + 5)
    result = run_module(module, args(fake, path, mode="baseline", unit=UNIT), check_mode=True)
    assert (result["changed"], result["verdict"]) == (True, "recorded")
    assert result["reason"] == "check mode: a baseline would be recorded (stale)"
    assert path.read_text() == written and len(fake.requests) == sent


def test_baseline_busy_writes_nothing(run_module, fake, path):
    fake.waiting = 2.0
    result = record(run_module, fake, path)
    assert (result["changed"], result["verdict"], result["busy"]) == (False, "inconclusive", True)
    assert not path.exists()
    assert fake.completions == []


def test_baseline_down_writes_nothing(run_module, fake, path):
    fake.health_status = 503
    result = record(run_module, fake, path)
    assert (result["changed"], result["verdict"]) == (False, "down")
    assert not path.exists()


def test_baseline_contended_writes_nothing(run_module, fake, path, monkeypatch):
    monkeypatch.setattr(pc, "METRICS_SETTLE_S", 0.05)
    fake.on_completion = lambda f, i: setattr(f, "running", 1.0) if i == 3 else None
    result = record(run_module, fake, path)
    assert (result["changed"], result["verdict"]) == (False, "inconclusive")
    assert not path.exists()


# --- the api key -----------------------------------------------------------------------------

def test_api_key_is_a_bearer_token_and_never_returned(run_module, fake, path):
    fake.api_key = KEY
    results = [record(run_module, fake, path, api_key=KEY), run_module(module, args(fake, path, api_key=KEY))]
    assert [r["verdict"] for r in results] == ["recorded", "healthy"]
    assert {h.get("Authorization") for _, _, h, _ in fake.requests} == {"Bearer " + KEY}
    for r in results:
        assert KEY not in json.dumps(r)
    assert KEY not in path.read_text()


def test_without_the_key_the_completion_is_refused(run_module, fake, path):
    fake.api_key = KEY
    result = run_module(module, args(fake, path))
    assert (result["verdict"], result["busy"], result["answered"]) == ("inconclusive", False, True)
    assert "POST /v1/completions answered HTTP 401" in result["reason"]
