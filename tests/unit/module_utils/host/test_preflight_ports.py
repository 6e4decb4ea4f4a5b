"""Tests for plugins/module_utils/host/preflight_ports.py: `ss -Htlnp` and
/proc/<pid>/cgroup over the captures in tests/fixtures/host-probes/ (INDEX.md gives the
sources), and the ports check over them.
"""
from __future__ import annotations

import pytest
from ansible.module_utils.host.gpu_preflight import PreflightError
from ansible.module_utils.host.preflight_ports import Listener, cgroup_units, check_ports, parse_ss
from host_probes import host


def test_parse_ss_captured_with_processes():
    assert parse_ss(host("ss_Htlnp_dev_container.txt")) == [
        Listener("127.0.0.1", 6379, [("python3", 26192)]),
        Listener("0.0.0.0", 2024, []),
        Listener("*", 8000, [("python3", 26192)]),
    ]


def test_parse_ss_captured_without_processes():
    assert parse_ss(host("ss_Htln_dev_container.txt")) == [
        Listener("127.0.0.1", 6379, []),
        Listener("0.0.0.0", 2024, []),
        Listener("*", 8000, []),
    ]


def test_parse_ss_refuses_a_header():
    with pytest.raises(PreflightError):
        parse_ss("State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n")


@pytest.mark.parametrize(
    "name,units",
    [
        ("cgroup_v2_service_laurel228.txt", ["nginx.service"]),
        ("cgroup_v1_session_snapd9128.txt", ["session-1.scope"]),
        ("cgroup_dev_container.txt", []),
    ],
)
def test_cgroup_units(name, units):
    assert cgroup_units(host(name)) == units


LISTENERS = parse_ss(host("ss_Htlnp_dev_container.txt"))
# The captured listener's pid placed in the laurel capture's unit.
IN_UNIT = {26192: cgroup_units(host("cgroup_v2_service_laurel228.txt"))}
NO_UNIT = {26192: cgroup_units(host("cgroup_dev_container.txt"))}


@pytest.mark.parametrize(
    "ports,units,owners,ok,detail",
    [
        ([29555, 6380], NO_UNIT, [], True, "29555, 6380 free"),
        ([6379, 8000, 29555], NO_UNIT, ["ray.service"], False,
         "6379 held by python3 (pid 26192); 8000 held by python3 (pid 26192); 29555 free"),
        ([8000], IN_UNIT, ["ray.service", "vllm.service"], False, "8000 held by python3 (pid 26192, nginx.service)"),
        ([6379, 8000, 29555], IN_UNIT, ["nginx.service"], True,
         "6379 held by the toolkit's own nginx.service (python3, pid 26192); "
         "8000 held by the toolkit's own nginx.service (python3, pid 26192); 29555 free"),
        ([2024], NO_UNIT, ["ray.service"], False, "2024 held by a process ss did not name (run the check as root)"),
    ],
)
def test_check_ports(ports, units, owners, ok, detail):
    check = check_ports(ports, LISTENERS, units, owners)
    assert (check.check, check.ok, check.detail) == ("ports_free", ok, detail)
    assert bool(check.hint) is not ok


def test_ports_without_process_names_are_busy():
    check = check_ports([6379], parse_ss(host("ss_Htln_dev_container.txt")), {}, ["ray.service"])
    assert check.ok is False and "did not name" in check.detail


def test_no_ports_no_check():
    assert check_ports([], LISTENERS, {}, []) is None
