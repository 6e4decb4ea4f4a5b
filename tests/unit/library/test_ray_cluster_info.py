"""Tests for library/ray_cluster_info.py: argspec, the join barrier, an
unreachable cluster, failures, check mode.

The module runs for real against a fake ``python`` (a tmp_path script given as
the python option) that prints the real capture
tests/fixtures/ray/probe-2node-alive-lab.txt, or fails the way Ray does.
"""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

import ray_cluster_info as module
from ansible.module_utils.ray_cluster import PROBE

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO / "tests" / "fixtures" / "ray" / "probe-2node-alive-lab.txt"
ADDRESS = "10.200.0.11:6379"
LAB_IPS = ["10.200.0.11", "10.200.0.12"]
HEAD_ID = "2c305d019ae9a8904a2a81642277f9bb1bccdc53e0f229687d418f3f"
WORKER_ID = "b1b8b97b6b88765cddc542fa6670f1288cfde540ea554a0f2edab423"
RESULT_KEYS = {"changed", "ok", "message", "nodes", "nodes_alive", "gpus_total", "alive_ips"}
# What ray.init raises when the head does not answer: Ray 2.60's own
# connect_error text (ray/_private/utils.py), after its INFO line.
UNREACHABLE = (
    "2026-11-30 15:50:02,114\tINFO worker.py:1841 -- Connecting to existing Ray cluster at address: "
    "10.200.0.11:6379...\n"
    "Traceback (most recent call last):\n"
    '  File "<string>", line 2, in <module>\n'
    "ConnectionError: Unable to connect to GCS (ray head) at 10.200.0.11:6379. Check that (1) Ray with matching "
    "version started successfully at the specified address, (2) this node can reach the specified address, and "
    "(3) there is no firewall setting preventing access.\n")


def fake_python(tmp_path: Path, stdout: str = "", stderr: str = "", rc: int = 0, sleep: int = 0) -> Path:
    """A python that logs its argv and environment, then prints ``stdout``."""
    (tmp_path / "stdout").write_text(stdout)
    (tmp_path / "stderr").write_text(stderr)
    script = tmp_path / "python"
    script.write_text(f"""#!/bin/sh
for a in "$@"; do printf '%s\\0' "$a"; done > '{tmp_path}/argv'
echo "$RAY_USAGE_STATS_ENABLED" > '{tmp_path}/usage_stats'
cat '{tmp_path}/stdout'
cat '{tmp_path}/stderr' >&2
{f'exec sleep {sleep}' if sleep else ''}
exit {rc}
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def args(python, **kw) -> dict:
    return dict({"address": ADDRESS, "python": str(python)}, **kw)


# --- argspec ---------------------------------------------------------------------------------

@pytest.mark.parametrize("params, msg", [
    ({}, "missing required arguments: address, python"),
    ({"address": ADDRESS}, "missing required arguments: python"),
    ({"python": "/opt/vllm/bin/python"}, "missing required arguments: address"),
    ({"address": ADDRESS, "python": "/opt/vllm/bin/python", "expect_gpus": "two"},
     "argument 'expect_gpus' is of type str and we were unable to convert to float: "
     "<class 'str'> cannot be converted to a float"),
    ({"address": ADDRESS, "python": "/opt/vllm/bin/python", "timeout": "1m"},
     "argument 'timeout' is of type str and we were unable to convert to int: "
     "\"'1m'\" cannot be converted to an int"),
    ({"address": ADDRESS, "python": "/opt/vllm/bin/python", "expect_ip": ["10.200.0.11"]},
     "Unsupported parameters for (basic.py) module: expect_ip. Supported parameters include: address, "
     "expect_gpus, expect_ips, python, timeout."),
])
def test_argument_errors(run_module, params, msg):
    result = run_module(module, params)
    assert result["failed"] is True
    assert result["msg"] == msg


@pytest.mark.parametrize("timeout", [0, -5])
def test_timeout_must_be_positive(run_module, tmp_path, timeout):
    result = run_module(module, args(fake_python(tmp_path, CAPTURE.read_text()), timeout=timeout))
    assert result["failed"] is True
    assert result["msg"] == f"timeout must be a positive number of seconds, got {timeout}."
    assert not (tmp_path / "argv").exists()


@pytest.mark.parametrize("kind", ["missing", "directory", "not executable"])
def test_python_must_be_an_executable_file(run_module, tmp_path, kind):
    python = tmp_path / "venv" / "bin" / "python"
    if kind == "directory":
        python.mkdir(parents=True)
    elif kind == "not executable":
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o644)
    result = run_module(module, args(python))
    # Not retryable, so a failure; ok and message still come back for `until: x.ok`.
    assert result["failed"] is True
    msg = (f"python {python} is not an executable file: point it at the python of the venv that holds Ray "
           "(the engine's venv, for example /opt/vllm/bin/python).")
    assert (result["msg"], result["ok"], result["message"]) == (msg, False, msg)


# --- the join barrier over the real capture ----------------------------------------------------

LAB_NODES = [
    {"node_ip": "10.200.0.11", "alive": True, "gpus": 1.0, "cpus": 1.0, "node_id": HEAD_ID},
    {"node_ip": "10.200.0.12", "alive": True, "gpus": 1.0, "cpus": 1.0, "node_id": WORKER_ID},
]


def test_both_lab_nodes_joined(run_module, tmp_path):
    python = fake_python(tmp_path, CAPTURE.read_text())
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2))
    assert "failed" not in result, result.get("msg")
    assert {k: result[k] for k in RESULT_KEYS} == {
        "changed": False, "ok": True, "message": "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)",
        "nodes": LAB_NODES, "nodes_alive": 2, "gpus_total": 2.0, "alive_ips": LAB_IPS}
    # The probe ran under timeout(1)'s limit with the address as its argument, usage stats off.
    argv = (tmp_path / "argv").read_text().split("\0")[:-1]
    assert argv == ["-c", PROBE, ADDRESS]
    assert (tmp_path / "usage_stats").read_text() == "0\n"


@pytest.mark.parametrize("extra, ok, message", [
    ({"expect_ips": LAB_IPS + ["10.200.0.13"], "expect_gpus": 2}, False, "nodes not joined: 10.200.0.13"),
    ({"expect_ips": LAB_IPS, "expect_gpus": "4"}, False, "the cluster offers 2 GPU(s), the engine needs 4"),
    ({}, True, "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)"),
])
def test_barrier_not_met_is_not_a_failure(run_module, tmp_path, extra, ok, message):
    result = run_module(module, args(fake_python(tmp_path, CAPTURE.read_text()), **extra))
    assert "failed" not in result
    assert (result["ok"], result["message"], result["nodes_alive"]) == (ok, message, 2)


def test_dead_worker(run_module, tmp_path):
    # The capture with lab2's raylet gone: Ray still lists it, Alive false.
    prefix, table = CAPTURE.read_text().strip().split("=", 1)
    raw = json.loads(table)
    raw[1]["Alive"] = raw[1]["alive"] = False
    python = fake_python(tmp_path, prefix + "=" + json.dumps(raw) + "\n")
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2))
    assert "failed" not in result
    assert (result["ok"], result["message"]) == (
        False, "nodes not joined: 10.200.0.12; the cluster offers 1 GPU(s), the engine needs 2")
    assert (result["nodes_alive"], result["alive_ips"], result["gpus_total"]) == (1, ["10.200.0.11"], 1.0)
    assert [n["alive"] for n in result["nodes"]] == [True, False]


def test_ray_noise_around_the_table(run_module, tmp_path):
    noise = UNREACHABLE.splitlines()[0] + "\n"
    python = fake_python(tmp_path, noise + CAPTURE.read_text() + "(raylet) some late line\n", stderr=noise)
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2))
    assert (result["ok"], result["nodes"]) == (True, LAB_NODES)


def test_check_mode_gives_the_same_result(run_module, tmp_path):
    python = fake_python(tmp_path, CAPTURE.read_text())
    for extra in ({"expect_ips": LAB_IPS, "expect_gpus": 2}, {"expect_gpus": 4}):
        normal = run_module(module, args(python, **extra))
        checked = run_module(module, args(python, **extra), check_mode=True)
        assert checked == normal
        assert checked["changed"] is False


# --- the cluster does not answer: ok false, not failed, so `until` retries --------------------------

@pytest.mark.parametrize("fake, timeout, message", [
    ({"stderr": UNREACHABLE, "rc": 1}, 60,
     "cannot reach the Ray cluster at 10.200.0.11:6379 (rc=1): Traceback (most recent call last): | "
     'File "<string>", line 2, in <module> | ConnectionError: Unable to connect to GCS (ray head) at '
     "10.200.0.11:6379. Check that (1) Ray with matching version started successfully at the specified address, "
     "(2) this node can reach the specified address, and (3) there is no firewall setting preventing access. "
     "Check that the head's Ray unit is active and the address is the head's Ray node IP."),
    ({"sleep": 30}, 1,
     "cannot reach the Ray cluster at 10.200.0.11:6379 (no answer within 1 s): no output. "
     "Check that the head's Ray unit is active and the address is the head's Ray node IP."),
    ({"rc": 3}, 60,
     "cannot reach the Ray cluster at 10.200.0.11:6379 (rc=3): no output. "
     "Check that the head's Ray unit is active and the address is the head's Ray node IP."),
])
def test_unreachable_cluster(run_module, tmp_path, fake, timeout, message):
    python = fake_python(tmp_path, **fake)
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2, timeout=timeout))
    assert "failed" not in result
    assert result == {"changed": False, "ok": False, "message": message, "msg": message,
                      "invocation": result["invocation"]}
    # The same in check mode.
    assert run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2, timeout=timeout),
                      check_mode=True)["message"] == message


# --- failures: not retryable, but ok and message still come back ------------------------------------

@pytest.mark.parametrize("fake, msg", [
    ({"stderr": "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
                "ModuleNotFoundError: No module named 'ray'\n", "rc": 1},
     "{python} cannot import Ray (No module named 'ray'): install Ray in that venv or point python at the venv "
     "that holds it."),
    ({}, "the Ray probe printed no node table; output was: (nothing)"),
    ({"stdout": "RAY_NODES_JSON=[{\"NodeID\": \n"},
     "the Ray probe printed invalid JSON: Expecting value: line 1 column 13 (char 12); "
     "output was: RAY_NODES_JSON=[{\"NodeID\":"),
])
def test_probe_failures(run_module, tmp_path, fake, msg):
    python = fake_python(tmp_path, **fake)
    result = run_module(module, args(python))
    msg = msg.replace("{python}", str(python))
    assert result["failed"] is True
    assert (result["msg"], result["ok"], result["message"]) == (msg, False, msg)
