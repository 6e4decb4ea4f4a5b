"""Tests for plugins/module_utils/host/gpu_preflight.py: the module's option checks, the
checks for evidence that could not be gathered, every check's hint (over the real captures in
tests/fixtures/nvidia-smi/ and tests/fixtures/host-probes/), and the report.
"""
from __future__ import annotations

import re

import pytest
from ansible.module_utils.host.gpu_preflight import (
    Check,
    PreflightOptionError,
    check_from_dict,
    command_failed,
    is_ipv4,
    render_report,
    summarize,
    tool_missing,
    validate_options,
)
from ansible.module_utils.host.nvidia_smi import parse_table
from ansible.module_utils.host.preflight_disk import check_disk
from ansible.module_utils.host.preflight_gpu import (
    check_cuda_version,
    check_gpu_count,
    check_gpu_driver,
    check_gpu_memory,
)
from ansible.module_utils.host.preflight_network import check_engine_subnet, check_interface, parse_ip_addr
from ansible.module_utils.host.preflight_ports import check_ports, parse_ss
from host_probes import GB10_TABLE, host, smi

# ---- options and missing evidence -----------------------------------------

OPTIONS = dict(min_gpus=1, ports=[6379, 8000], min_cuda_version="12.8", address="192.0.2.2",
               peer_addresses=["192.0.2.12"])


@pytest.mark.parametrize("changes", [
    {}, {"min_gpus": 0}, {"ports": []}, {"ports": [1, 65535]}, {"min_cuda_version": None}, {"address": None},
    {"peer_addresses": []}, {"min_cuda_version": "13"}, {"address": "255.255.255.255"},
    {"min_gpu_memory_gib": 100}, {"min_disk_gib": 0.5}, {"min_disk_gib": None}, {"controller_time": 1.7e9},
])
def test_valid_options(changes):
    assert validate_options(**dict(OPTIONS, **changes)) is None


@pytest.mark.parametrize("changes,msg", [
    ({"min_cuda_version": "twelve"}, "min_cuda_version must be a version such as 12.8, got 'twelve'"),
    ({"min_cuda_version": "v12.8"}, "min_cuda_version must be a version such as 12.8, got 'v12.8'"),
    ({"min_gpus": -1}, "min_gpus must be 0 or more, got -1"),
    ({"ports": [8000, 0, 70000]}, "ports must be between 1 and 65535, got 0, 70000"),
    ({"address": "10.0.0.300"}, "address must be an IPv4 address, got '10.0.0.300'"),
    ({"address": "10.0.0.1/24"}, "address must be an IPv4 address, got '10.0.0.1/24'"),
    ({"peer_addresses": ["10.0.0.12", "spark2"]}, "peer_addresses must be IPv4 addresses, got 'spark2'"),
    ({"peer_addresses": ["::1", "spark2"]}, "peer_addresses must be IPv4 addresses, got '::1, spark2'"),
    # the first bad option is the one reported
    ({"min_gpus": -1, "address": "x"}, "min_gpus must be 0 or more, got -1"),
    # The argspec's float takes "inf", "nan" and "1e999": every comparison with them fails or passes.
    ({"min_gpu_memory_gib": float("nan")}, "min_gpu_memory_gib must be a number of GiB, 0 or more, got nan"),
    ({"min_gpu_memory_gib": float("inf")}, "min_gpu_memory_gib must be a number of GiB, 0 or more, got inf"),
    ({"min_disk_gib": float("-inf")}, "min_disk_gib must be a number of GiB, 0 or more, got -inf"),
    ({"min_disk_gib": -1.0}, "min_disk_gib must be a number of GiB, 0 or more, got -1.0"),
    ({"min_disk_gib": 10 ** 5000},
     "min_disk_gib must be a number of GiB, 0 or more, got a number of more than 30 digits"),
    ({"controller_time": float("nan")}, "controller_time must be epoch seconds (now().timestamp()), got nan"),
    ({"controller_time": 10 ** 400}, "controller_time must be epoch seconds (now().timestamp()), got a number of more "
                                     "than 30 digits"),
])
def test_bad_options(changes, msg):
    with pytest.raises(PreflightOptionError) as exc:
        validate_options(**dict(OPTIONS, **changes))
    assert str(exc.value) == msg


@pytest.mark.parametrize("value,ok", [
    ("192.0.2.2", True), ("0.0.0.0", True), ("256.0.0.1", False), ("1.2.3", False), ("1.2.3.4.5", False),
    ("a.b.c.d", False), ("", False), (None, False), ("fe80::1", False), (" 1.2.3.4", False),
])
def test_is_ipv4(value, ok):
    assert is_ipv4(value) is ok


def test_evidence_that_could_not_be_gathered():
    assert tool_missing("ports_free", "ss") == Check("ports_free", False, "ss not found", "Install iproute2.")
    assert command_failed("ports_free", "ss -Htlnp", 1, "  Cannot open netlink socket\n") == Check(
        "ports_free", False, "`ss -Htlnp` failed (rc=1): Cannot open netlink socket",
        "Run it on the host and fix what it reports.")
    assert len(command_failed("engine_interface", "ip -o -4 addr show", 2, "x" * 1000).detail) == len(
        "`ip -o -4 addr show` failed (rc=2): ") + 200


def test_hints_name_the_modules_options_not_a_roles_variables():
    """A module message names the module's own option; the role maps its variables itself."""
    gpu = parse_table(smi(GB10_TABLE))
    addrs, ifaces = parse_ip_addr(host("ip_o4_addr_dev_container.txt")), ["eth0", "ifb0", "ifb1", "lo"]
    listeners = parse_ss(host("ss_Htlnp_dev_container.txt"))
    failing = [
        check_gpu_memory(parse_table(smi("19_h100_table_535_gvisor10413.txt")), 1000)[0],
        check_interface("enp1s0f1np1", "192.0.2.2", ifaces, addrs),
        check_interface("lo", "192.0.2.2", ifaces, addrs),
        check_interface(None, "10.9.9.9", ifaces, addrs),
        check_interface("eth0", "10.9.9.9", ifaces, addrs),
        check_engine_subnet("eth0", "192.0.2.2", ["10.0.0.12"], addrs),
        check_ports([6379], listeners, {}, []),
        check_disk("/srv/m", "/srv", 0, 0, 100),
        check_cuda_version(gpu, "99.0"),
        check_gpu_count(gpu, 8),
    ]
    assert all(not c.ok and c.hint for c in failing)
    # Role and inventory variables are snake_case with a role's prefix.
    role_variable = re.compile(r"\b(?:gpu_preflight|vllm_fleet|vllm_server|vllm_install|ray_cluster)_\w+")
    assert [(c.check, role_variable.findall(c.hint)) for c in failing if role_variable.search(c.hint)] == []
    assert "lower min_gpu_memory_gib" in failing[0].hint
    assert "Set address to this host's address" in failing[3].hint
    assert "correct their peer_addresses" in failing[5].hint
    assert "list them in ports" in failing[6].hint
    assert "point disk_path at it" in failing[7].hint


# ---- the verdict -----------------------------------------------------------

def test_summary_lists_every_failure_with_its_fix():
    report = parse_table(smi("19_h100_table_535_gvisor10413.txt"))
    checks = [
        check_gpu_driver(report),
        check_gpu_count(report, 1),
        check_gpu_memory(report, 100)[0],
        check_cuda_version(report, "12.8"),
    ]
    ok, failed, message = summarize(checks)
    assert ok is False
    assert failed == ["gpu_memory", "cuda_version"]
    lines = message.splitlines()
    assert lines[0] == "2 of 4 preflight checks failed:"
    assert lines[1] == "- gpu_memory: GPU 0 NVIDIA H100 80GB HBM3: 79.6 GiB, too small (at least 100 GiB each)"
    assert lines[2].startswith("  fix: ")
    assert lines[3] == "- cuda_version: the driver supports CUDA 12.2, 12.8 required (driver 535.129.03)"
    assert lines[4].startswith("  fix: Upgrade the NVIDIA driver")
    assert summarize(checks[:2]) == (True, [], "all 2 preflight checks passed")


def test_render_report_and_round_trip():
    checks = [Check("a", True, "fine"), Check("b", False, "broken", "mend it")]
    assert render_report(checks) == ["PASS a: fine", "FAIL b: broken", "     fix: mend it"]
    assert [check_from_dict(c.as_dict()) for c in checks] == checks
