"""No secret in any output: the last lab phase.

The lab sets every key (inventory/lab/group_vars/all/secrets.yml: the
engines' API key, the gate's client key, the gate's admin token) and every
earlier lab phase ran with them: site.yml, both cutovers, every role's
molecule scenario, the rolling restarts (the cron path through ansible-runner
checks its own private dir), the diagnosis. (The two one-host engines of
test_restart.py are the keyless site: only the admin token is set there, and
the engines and the consumers' file have their keys again by this phase.) Here everything those runs wrote
is searched for the values: each ansible-runner private dir (stdout,
job_events with every task's result, the command file with the whole
environment), the reports, and on every lab host the whole journal and the
files under /etc, /var, /tmp, /root, /home, /srv and /opt/vllm-fleet-gate.
Only the three files meant to hold a key may, and only at their modes.
"""
from __future__ import annotations

import re
import shlex
import subprocess

from labtools import REPO, RUNNER_DIRS, files_holding, on_host, secret_values

HOSTS = ("lab1", "lab2", "lab3")
SANDBOX_DOC = REPO / "docs" / "ports-and-secrets.md"
# Where each unit runs in the lab.
UNIT_HOSTS = {"vllm-fleet-gate.service": "lab3", "vllm.service": "lab1", "ray.service": "lab1",
              "vllm-fleet-recover.service": "lab1", "vllm-fleet-recover-check.service": "lab2"}
# The files that hold a key by design, and their modes.
KEY_FILES = {"/etc/default/vllm": "600", "/etc/vllm-fleet/gate.json": "600", "/etc/vllm-fleet/endpoint.env": "640",
             "/etc/prometheus/blackbox.yml": "640", "/etc/prometheus/alertmanager.yml": "640"}


def test_the_runs_wrote_no_secret_on_the_controller():
    assert RUNNER_DIRS, "no playbook ran in this session: run the whole lab suite (make lab-e2e)"
    found = [f for d in RUNNER_DIRS for f in files_holding(d, secret_values())]
    found += files_holding(REPO / "reports", secret_values())
    assert found == []


def test_no_host_holds_a_secret_outside_its_key_files():
    patterns = " ".join(f"-e {shlex.quote(v)}" for v in secret_values())
    allowed = " ".join(f"-e {shlex.quote(path)}" for path in KEY_FILES)
    for host in HOSTS:
        journal = on_host(host, f"journalctl --no-pager -o cat | grep -cF {patterns}; true").strip()
        assert journal == "0", f"{host}'s journal holds a secret on {journal} line(s)"
        files = on_host(host, f"grep -rlF {patterns} /etc /var /tmp /root /home /srv /opt/vllm-fleet-gate"
                              f" --exclude-dir=journal 2>/dev/null | grep -vxF {allowed}; true").split()
        assert files == [], f"{host}: {files}"
        modes = on_host(host, f"stat -c '%n %a' {' '.join(KEY_FILES)} 2>/dev/null; true").split("\n")
        for line in filter(None, modes):
            path, mode = line.rsplit(" ", 1)
            assert mode == KEY_FILES[path], f"{host}: {path} is {mode}, not {KEY_FILES[path]}"


def listeners(host: str) -> set[str]:
    """The host's listening TCP sockets, as address:port (IPv4-mapped IPv6 written as IPv4)."""
    found = set()
    for line in on_host(host, "ss -Hltn").splitlines():
        if line.strip():
            address, _, port = line.split()[3].rpartition(":")
            found.add(address.removeprefix("[::ffff:").strip("[]") + ":" + port)
    return found


def test_the_engine_and_the_gate_listen_only_where_the_inventory_says():
    """vllm serve on the head's service address (vllm_server_host), the gate on its host's
    (gate_service_listen_host), Ray's client server on the node's link address and loopback, no
    dashboard; none of them on every interface. (Ray's GCS, raylet and worker ports bind
    every address whatever Ray is told: docs/ports-and-secrets.md.)"""
    where = {"lab1": ("10.200.0.11", "10.201.0.11"), "lab2": ("10.200.0.12", "10.201.0.12"),
             "lab3": ("10.200.0.13", "10.200.0.13")}
    for host, (address, link) in where.items():
        seen = listeners(host)
        for port, allowed in (("8000", {f"{address}:8000"}), ("8100", {f"{address}:8100"}),
                              ("10001", {f"{link}:10001", "127.0.0.1:10001"}), ("8265", set()),
                              # The watch: node-exporter and Prometheus on the service address, the
                              # canary's blackbox-exporter (which holds the key) and Alertmanager on loopback.
                              ("9100", {f"{address}:9100"}), ("9090", {f"{address}:9090"}),
                              ("9115", {"127.0.0.1:9115"}), ("9093", {"127.0.0.1:9093"})):
            on_port = {s for s in seen if s.rsplit(":", 1)[1] == port}
            assert on_port <= allowed, f"{host} listens on {sorted(on_port)}; only {sorted(allowed)} may"
    assert "10.200.0.11:8000" in listeners("lab1"), "the engine's API is not listening on the head's address"


def connects(source: str, address: str, port: int) -> bool:
    """Whether a new TCP connection from ``source`` (a lab host, or the controller) to
    address:port is accepted. A reset or no listener reads false, at once."""
    probe = f"timeout 5 bash -c '</dev/tcp/{address}/{port}' 2>/dev/null && echo open || echo closed"
    if source == "controller":
        out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30).stdout
    else:
        out = on_host(source, probe)
    return out.strip().endswith("open")


def test_only_the_engines_hosts_reach_rays_ports():
    """ray_cluster's firewall (its own nftables table, docs/ports-and-secrets.md): Ray's GCS and
    the raylet's ports on the head take connections from the engine's other host (lab2) over
    the link, and refuse the consumer host (lab3) and the controller on the service network,
    where Ray binds too; vLLM's API and ssh stay open there. Nothing but lab1 and lab2 reaches
    the link at all."""
    link, service = "10.201.0.11", "10.200.0.11"
    raylet = sorted({line.split()[3].rpartition(":")[2] for line in on_host("lab1", "ss -Hltnp").splitlines()
                     if '"raylet"' in line and line.split()[3].startswith("*:")})
    assert raylet, "no raylet port listens on every address of lab1"
    for port in [6379, int(raylet[0])]:
        assert connects("lab2", link, port), f"lab2, the engine's other host, cannot reach {link}:{port}"
        assert not connects("lab2", service, port), f"lab2 reaches Ray's {service}:{port} off the link"
        for source in ("lab3", "controller"):
            assert not connects(source, service, port), f"{source} reaches Ray's {service}:{port}"
    for source in ("lab3", "controller"):
        assert connects(source, service, 8000), f"{source} cannot reach vLLM's API"
        assert connects(source, service, 22), f"{source} cannot reach ssh"
        for port in (22, 8000, 6379):
            assert not connects(source, link, port), f"{source} reaches the link address {link}:{port}"
    rules = on_host("lab1", "nft list table inet vllm_fleet_ray")
    assert "10.201.0.11, 10.201.0.12" in rules and 'iifname "eth1"' in rules, rules
    assert "reject with tcp reset" in rules, rules


def test_each_unit_runs_as_sandboxed_as_the_docs_say():
    """systemd-analyze security's exposure for each unit is the figure in the docs'
    sandboxing table (the gate's unit stays installed after the last cutover archived it)."""
    documented = dict(re.findall(r"^\| `([a-z-]+\.service)` \| ([0-9.]+) \|", SANDBOX_DOC.read_text(), re.M))
    assert set(documented) == set(UNIT_HOSTS), documented
    for unit, host in UNIT_HOSTS.items():
        out = on_host(host, f"systemd-analyze security --no-pager {unit}")
        measured = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
        assert measured, out[-2000:]
        assert measured.group(1) == documented[unit], (
            f"{unit} on {host}: exposure {measured.group(1)}, the docs say {documented[unit]}")
