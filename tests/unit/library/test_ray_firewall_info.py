"""Tests for library/ray_firewall_info.py: it reads the host's ephemeral port
range and returns what the Ray firewall resets, fails clearly on bad input or
an unreadable range file, and changes nothing (check mode too).

The range file is a tmp_path copy of the lab hosts' own
/proc/sys/net/ipv4/ip_local_port_range ("32768\\t60999\\n")."""
from __future__ import annotations

import pytest
import ray_firewall_info as module

PEERS = ["10.200.0.11", "10.200.0.12"]


@pytest.fixture
def range_file(tmp_path, monkeypatch):
    path = tmp_path / "ip_local_port_range"
    path.write_text("32768\t60999\n")
    monkeypatch.setattr(module, "RANGE_FILE", str(path))
    return path


def args(**kw) -> dict:
    return dict({"peers": PEERS, "ray_port": 6379, "worker_ports": [20100, 20999], "open_ports": [8000, 22]}, **kw)


def test_the_lab_engine(run_module, range_file):
    result = run_module(module, args())
    assert result["changed"] is False and not result.get("failed")
    assert result["peers4"] == PEERS and result["peers6"] == []
    assert result["reset"] == ["6379", "10001", "20100-20999", "32768-60999"]
    assert result["open"] == ["22", "8000"]


def test_check_mode_returns_the_same(run_module, range_file):
    assert run_module(module, args(_ansible_check_mode=True))["reset"] == run_module(module, args())["reset"]


@pytest.mark.parametrize("kw, msg", [
    ({"peers": ["lab1"]}, "a peer's address must be an IP address, got 'lab1'"),
    ({"worker_ports": [20999, 20100]}, "ray_cluster_min_worker_port 20999 is above ray_cluster_max_worker_port 20100"),
    ({"open_ports": [6379]}, "port 6379 is Ray's GCS and cannot also be open to everyone"),
])
def test_bad_input_fails_with_what_to_fix(run_module, range_file, kw, msg):
    result = run_module(module, args(**kw))
    assert result["failed"] is True and result["msg"] == msg


def test_a_range_file_that_does_not_read_as_two_ports_fails(run_module, range_file):
    range_file.write_text("32768\n")
    result = run_module(module, args())
    assert result["failed"] is True and "ip_local_port_range must be two port numbers" in result["msg"]


def test_a_missing_range_file_fails_naming_it(run_module, tmp_path, monkeypatch):
    monkeypatch.setattr(module, "RANGE_FILE", str(tmp_path / "absent"))
    result = run_module(module, args())
    assert result["failed"] is True and result["msg"].startswith(f"cannot read {tmp_path / 'absent'}")
