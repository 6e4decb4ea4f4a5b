"""Tests for library/ray_cluster_info.py: argspec, the join barrier, an
unreachable cluster, failures, check mode, and the wait (wait_s) on a fake clock.

The module runs for real against a fake ``python`` (a tmp_path script given as
the python option) that prints the real capture
tests/fixtures/ray/probe-2node-alive-lab.txt, or fails the way Ray does; for a
wait, a fake that answers each of a list of probes in turn.
The wait's loop itself is tested in tests/unit/module_utils/shared/test_polling.py.
"""
from __future__ import annotations

import json
import stat
import types
from pathlib import Path

import pytest
import ray_cluster_info as module
from ansible.module_utils.host.ray_cluster import PROBE

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO / "tests" / "fixtures" / "ray" / "probe-2node-alive-lab.txt"
ADDRESS = "10.200.0.11:6379"
LAB_IPS = ["10.200.0.11", "10.200.0.12"]
HEAD_ID = "2c305d019ae9a8904a2a81642277f9bb1bccdc53e0f229687d418f3f"
WORKER_ID = "b1b8b97b6b88765cddc542fa6670f1288cfde540ea554a0f2edab423"
RESULT_KEYS = {"changed", "ok", "message", "nodes", "nodes_alive", "gpus_total", "alive_ips", "polls"}
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
     "expect_gpus, expect_ips, poll_s, python, timeout, wait_s."),
    ({"address": ADDRESS, "python": "/opt/vllm/bin/python", "wait_s": "3m"},
     "argument 'wait_s' is of type str and we were unable to convert to float: "
     "<class 'str'> cannot be converted to a float"),
    ({"address": ADDRESS, "python": "/opt/vllm/bin/python", "poll_s": "often"},
     "argument 'poll_s' is of type str and we were unable to convert to float: "
     "<class 'str'> cannot be converted to a float"),
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


@pytest.mark.parametrize("extra, msg", [
    # The argspec's int reads "1e999" as a 1,000-digit int, its float "inf" and "nan" as numbers.
    ({"timeout": "1e999"}, "timeout must be at most 86400 seconds (a day), got a number of more than 30 digits."),
    ({"timeout": 86401}, "timeout must be at most 86400 seconds (a day), got 86401."),
    ({"expect_gpus": "nan"}, "expect_gpus must be a number of GPUs, 0 or more, got nan."),
    ({"expect_gpus": "1e999"}, "expect_gpus must be a number of GPUs, 0 or more, got inf."),
    ({"expect_gpus": -2}, "expect_gpus must be a number of GPUs, 0 or more, got -2.0."),
    ({"wait_s": -1}, "wait_s must be 0 (probe once) or a positive number of seconds, got -1."),
    ({"wait_s": "nan"}, "wait_s must be 0 (probe once) or a positive number of seconds, got nan."),
    ({"wait_s": 86401}, "wait_s must be at most 86400 seconds (a day), got 86401."),
    ({"poll_s": 0}, "poll_s must be a positive number of seconds, got 0."),
    ({"poll_s": -1.5}, "poll_s must be a positive number of seconds, got -1.5."),
    ({"poll_s": "inf"}, "poll_s must be at most 86400 seconds (a day), got inf."),
])
def test_bad_wait_options(run_module, tmp_path, extra, msg):
    result = run_module(module, args(fake_python(tmp_path, CAPTURE.read_text()), **extra))
    assert result["failed"] is True
    # ok and message too, for `until: x.ok`; nothing was probed.
    assert (result["msg"], result["ok"], result["message"], result["polls"], result["waited_s"]) == (
        msg, False, msg, 0, 0.0)
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
        "nodes": LAB_NODES, "nodes_alive": 2, "gpus_total": 2.0, "alive_ips": LAB_IPS, "polls": 1}
    assert isinstance(result["waited_s"], float) and result["waited_s"] >= 0
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


def dead_worker_table() -> str:
    """The capture with lab2's raylet gone: Ray still lists it, Alive false."""
    prefix, table = CAPTURE.read_text().strip().split("=", 1)
    raw = json.loads(table)
    raw[1]["Alive"] = raw[1]["alive"] = False
    return prefix + "=" + json.dumps(raw) + "\n"


def test_dead_worker(run_module, tmp_path):
    python = fake_python(tmp_path, dead_worker_table())
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
        # The same but for the probe's own time.
        assert dict(checked, waited_s=0) == dict(normal, waited_s=0)
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
    assert result == {"changed": False, "ok": False, "message": message, "msg": message, "polls": 1,
                      "waited_s": result["waited_s"], "invocation": result["invocation"]}
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


# --- the wait: wait_s, on a fake clock ------------------------------------------------------------------

def fake_pythons(tmp_path: Path, *probes) -> Path:
    """A python that answers each of ``probes`` ({stdout, stderr, rc}) in turn, then the last, and
    counts its runs."""
    for n, probe in enumerate(probes, 1):
        (tmp_path / f"stdout.{n}").write_text(probe.get("stdout", ""))
        (tmp_path / f"stderr.{n}").write_text(probe.get("stderr", ""))
    rcs = " ".join(str(probe.get("rc", 0)) for probe in probes)
    script = tmp_path / "python"
    script.write_text(f"""#!/bin/sh
echo run >> '{tmp_path}/runs'
n=$(wc -l < '{tmp_path}/runs')
[ "$n" -gt {len(probes)} ] && n={len(probes)}
cat "{tmp_path}/stdout.$n"
cat "{tmp_path}/stderr.$n" >&2
set -- {rcs}
shift $((n - 1))
exit "$1"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text().splitlines())


class FakeTime:
    """The module's clock and sleep: time moves only when the module sleeps."""

    def __init__(self):
        self.now = 5000.0
        self.sleeps = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


UNANSWERED = {"stderr": UNREACHABLE, "rc": 1}
JOINED = {"stdout": CAPTURE.read_text()}


def test_joined_on_the_third_probe(run_module, tmp_path, fake_time):
    # The head not answering yet, then the worker not joined, then both.
    python = fake_pythons(tmp_path, UNANSWERED, {"stdout": dead_worker_table()}, JOINED)
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2, wait_s=180))
    assert "failed" not in result, result.get("msg")
    assert {k: result[k] for k in RESULT_KEYS} == {
        "changed": False, "ok": True, "message": "2 node(s) alive (10.200.0.11, 10.200.0.12), 2 GPU(s)",
        "nodes": LAB_NODES, "nodes_alive": 2, "gpus_total": 2.0, "alive_ips": LAB_IPS, "polls": 3}
    assert "msg" not in result
    # A pause of poll_s (1 s by default) after each probe; the last one stopped the wait.
    assert (runs(tmp_path), fake_time.sleeps, result["waited_s"]) == (3, [1.0, 1.0], 2.0)


def test_the_wait_runs_out(run_module, tmp_path, fake_time):
    python = fake_pythons(tmp_path, {"stdout": dead_worker_table()})
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2, wait_s=3, poll_s=1))
    # Not a failure: the role's until loop calls again, and says msg when its retries run out.
    assert "failed" not in result
    message = "nodes not joined: 10.200.0.12; the cluster offers 1 GPU(s), the engine needs 2"
    assert (result["ok"], result["message"], result["msg"], result["nodes_alive"]) == (False, message, message, 1)
    # A probe at 0, 1, 2 and at the deadline.
    assert (runs(tmp_path), result["polls"], fake_time.sleeps, result["waited_s"]) == (4, 4, [1.0, 1.0, 1.0], 3.0)


def test_a_cluster_that_never_answers(run_module, tmp_path, fake_time):
    python = fake_pythons(tmp_path, UNANSWERED)
    result = run_module(module, args(python, wait_s=1.5, poll_s=1))
    assert "failed" not in result
    assert result["message"].startswith("cannot reach the Ray cluster at 10.200.0.11:6379 (rc=1): ")
    # Probes at 0, 1 and the deadline (1.5).
    assert (result["ok"], result["polls"], fake_time.sleeps) == (False, 3, [1.0, 0.5])


@pytest.mark.parametrize("fatal, msg", [
    ({"stderr": "ModuleNotFoundError: No module named 'ray'\n", "rc": 1},
     "{python} cannot import Ray (No module named 'ray'): install Ray in that venv or point python at the venv "
     "that holds it."),
    ({"stdout": "RAY_NODES_JSON={}\n"}, "ray.nodes() did not return a list; output was: RAY_NODES_JSON={}"),
])
def test_a_failure_no_retry_can_fix_ends_the_wait_at_once(run_module, tmp_path, fake_time, fatal, msg):
    python = fake_pythons(tmp_path, UNANSWERED, fatal, JOINED)
    result = run_module(module, args(python, expect_ips=LAB_IPS, expect_gpus=2, wait_s=180))
    msg = msg.replace("{python}", str(python))
    assert result["failed"] is True
    assert (result["msg"], result["ok"], result["message"]) == (msg, False, msg)
    assert (runs(tmp_path), result["polls"], fake_time.sleeps, result["waited_s"]) == (2, 2, [1.0], 1.0)
