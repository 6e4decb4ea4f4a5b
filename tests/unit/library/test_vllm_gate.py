"""vllm_gate against the real gate (gate/, as `python -m vllm_fleet_gate`
runs it on a gate host) in front of two loopback engines that answer
/health: drain, undrain, hold and release, each only when needed, check
mode asking for nothing, and the refusals.

Only loopback traffic; every wait is bounded and polls, none sleeps fixed.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import vllm_gate

REPO = Path(__file__).resolve().parents[3]
ADMIN = "admin-token-of-the-test-0123456789"
ENGINES = ("engine-a", "engine-b")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Engine(http.server.BaseHTTPRequestHandler):
    """An engine as the gate's health check sees it: /health answers 200."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def running_gate(folder: Path):
    """The real gate in front of two engines, its base URL once it sees both ready."""
    engines = []
    for _ in ENGINES:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        engines.append(server)
    port = _free_port()
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstreams": [{"name": name, "url": "http://127.0.0.1:%d" % server.server_address[1],
                       "kv_cache_tokens": 1000, "max_model_len": 100} for name, server in zip(ENGINES, engines)],
        "admin_token": ADMIN,
        "max_hold_s": 120,
        "health_check": {"interval_s": 1, "timeout_s": 1},
        "shutdown_timeout_s": 2,
    }
    path = folder / "gate.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=str(REPO / "gate"))
    proc = subprocess.Popen([sys.executable, "-m", "vllm_fleet_gate", "--config", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                state = _state(url)
                if all(state["upstreams"][name]["ready"] for name in ENGINES):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the gate did not come up: %s" % proc.stdout.read().decode()[-2000:])
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        for server in engines:
            server.shutdown()


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    with running_gate(tmp_path_factory.mktemp("gate")) as url:
        yield url


def _state(url: str) -> dict:
    request = urllib.request.Request(url + "/admin/state", headers={"Authorization": "Bearer " + ADMIN})
    with urllib.request.urlopen(request, timeout=5) as resp:
        return json.load(resp)


def _run(run_module, gate, check_mode=False, **args):
    return run_module(vllm_gate, dict({"url": gate, "admin_token": ADMIN}, **args), check_mode=check_mode)


def test_present_reads_and_changes_nothing(run_module, gate):
    result = _run(run_module, gate, upstream="engine-a")
    assert result["changed"] is False and result["status"] == 200
    assert result["ready"] is True and result["idle"] is True and result["held"] is False
    assert result["drained"] == [] and result["max_hold_s"] == 120 and result["queue_timeout_s"] == 600


def test_without_an_upstream_idle_is_the_whole_gate(run_module, gate):
    result = _run(run_module, gate)
    assert result["ready"] is None and result["idle"] is True and result["inflight"] == 0


def test_drain_then_undrain_each_only_when_needed(run_module, gate):
    check = _run(run_module, gate, check_mode=True, upstream="engine-a", state="drained")
    assert check["changed"] is True and check["drained"] == []
    assert _state(gate)["upstreams"]["engine-a"]["drained"] is False

    first = _run(run_module, gate, upstream="engine-a", state="drained")
    assert first["changed"] is True and first["drained"] == ["engine-a"]
    assert _state(gate)["upstreams"]["engine-a"]["drained"] is True
    again = _run(run_module, gate, upstream="engine-a", state="drained")
    assert again["changed"] is False and again["drained"] == ["engine-a"]

    back = _run(run_module, gate, upstream="engine-a", state="undrained")
    assert back["changed"] is True and back["drained"] == []
    assert _run(run_module, gate, upstream="engine-a", state="undrained")["changed"] is False


def test_hold_then_release(run_module, gate):
    held = _run(run_module, gate, state="held", hold_s=30)
    assert held["changed"] is True and held["held"] is True
    assert _state(gate)["held"] is True
    released = _run(run_module, gate, state="released")
    assert released["changed"] is True and released["held"] is False
    assert _run(run_module, gate, state="released")["changed"] is False


@pytest.mark.parametrize("args, message", [
    (dict(state="held", hold_s=121), "Nothing was changed at the gate: a 121 s hold is past the gate's longest "
                                     "(max_hold_s 120 s): raise gate_service_max_hold_s or hold for less"),
    (dict(state="drained", upstream="engine-z"), "Nothing was changed at the gate: the gate has no upstream "
                                                 "'engine-z' (it has: engine-a, engine-b)"),
    (dict(state="drained"), "state is drained but all of the following are missing: upstream"),
])
def test_bad_input_is_refused_and_changes_nothing(run_module, gate, args, message):
    before = _state(gate)
    result = _run(run_module, gate, **args)
    assert result["failed"] is True and result["msg"] == message
    assert _state(gate)["held"] == before["held"]
    assert {n: u["drained"] for n, u in _state(gate)["upstreams"].items()} == {n: False for n in ENGINES}


def test_a_wrong_token_is_named_and_never_shown(run_module, gate):
    result = run_module(vllm_gate, {"url": gate, "admin_token": "wrong-token-wrong-token", "state": "drained",
                                    "upstream": "engine-a"})
    assert result["failed"] is True and result["status"] == 403
    assert result["msg"] == ("the gate at %s refused the admin token on /admin/state (403): "
                             "check gate_service_admin_token" % gate)
    assert "wrong-token" not in json.dumps(result)


def test_a_gate_that_does_not_answer(run_module):
    url = "http://127.0.0.1:%d" % _free_port()
    result = run_module(vllm_gate, {"url": url, "admin_token": ADMIN, "timeout": 2})
    assert result["failed"] is True and result["status"] == -1
    assert result["msg"].startswith("the gate at %s did not answer GET /admin/state (no answer: " % url)
