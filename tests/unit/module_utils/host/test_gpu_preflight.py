"""Tests for plugins/module_utils/host/gpu_preflight.py: each check over the real
captures in tests/fixtures/nvidia-smi/ and tests/fixtures/host-probes/ (see
each folder's INDEX.md for the sources and expected values), the module's
option checks, and the disk check over a model directory in tmp_path.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ansible.module_utils.host.gpu_preflight import (
    GIB,
    STAGED_FILES_LIMIT,
    Check,
    Link,
    Listener,
    PreflightError,
    PreflightOptionError,
    cgroup_units,
    check_clock_skew,
    check_cuda_version,
    check_disk,
    check_disk_path,
    check_engine_subnet,
    check_from_dict,
    check_gpu_count,
    check_gpu_driver,
    check_gpu_memory,
    check_interface,
    check_link_mtu,
    check_link_up,
    check_ports,
    check_service_address,
    command_failed,
    is_ipv4,
    nearest_existing,
    parse_ip_addr,
    parse_ip_link,
    parse_meminfo,
    parse_ss,
    render_report,
    staged_bytes,
    summarize,
    tool_missing,
    validate_options,
)
from ansible.module_utils.host.nvidia_smi import NvidiaSmiError, merge, parse_csv, parse_table

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SMI = FIXTURES / "nvidia-smi"
HOST = FIXTURES / "host-probes"

GB10_TABLE = "06_gb10_table_580_126_arctictraining345.txt"
GB10_CSV = "01_gb10_csv_memory_na_unsloth10283.txt"
GB10_MEMINFO = (HOST / "meminfo_gb10_dgx_spark_notes.txt").read_text()


def smi(name: str) -> str:
    lines = (SMI / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("$ ")) + "\n"


def host(name: str) -> str:
    return (HOST / name).read_text()


def gb10():
    return merge(parse_table(smi(GB10_TABLE)), parse_csv(smi(GB10_CSV)))


# ---- GPU checks over every table capture -------------------------------------

# (capture, gpu_count, cuda ok against 12.8, memory ok against 100 GiB, memory detail piece)
TABLES = [
    (GB10_TABLE, 1, True, True, "host MemTotal from /proc/meminfo 121.7 GiB"),
    ("19_h100_table_535_gvisor10413.txt", 1, False, False, "GPU 0 NVIDIA H100 80GB HBM3: 79.6 GiB"),
    ("21_rtx4090_2gpu_table_rlinf255.txt", 2, False, False, "GPU 1 NVIDIA GeForce RTX 4090: 24.0 GiB"),
    ("24_b200_kmd_umd_header_sglang27487.txt", 2, True, True, "GPU 1 NVIDIA B200: 179.1 GiB"),
    ("26_a800_mig_enabled_table_exporter203.txt", 1, False, False, "GPU 0 NVIDIA A800-SXM4-80GB: 80.0 GiB"),
]


@pytest.mark.parametrize("name,count,cuda_ok,memory_ok,piece", TABLES, ids=[t[0][:2] for t in TABLES])
def test_gpu_checks_over_tables(name, count, cuda_ok, memory_ok, piece):
    report = parse_table(smi(name))
    driver = check_gpu_driver(report)
    assert driver.ok and f"nvidia-smi sees {count} GPU(s)" in driver.detail
    assert check_gpu_count(report, 1).ok
    assert check_gpu_count(report, 3).ok is False
    assert check_cuda_version(report, "12.8").ok is cuda_ok
    memory, source = check_gpu_memory(report, 100, GB10_MEMINFO)
    assert memory.ok is memory_ok
    assert piece in memory.detail
    assert source == ("host meminfo" if report.unified_memory else "gpu")
    assert bool(memory.hint) is not memory_ok


def test_gb10_memory_falls_back_to_meminfo():
    memory, source = check_gpu_memory(gb10(), 100, GB10_MEMINFO)
    assert source == "host meminfo"
    assert memory == Check(
        "gpu_memory",
        True,
        "GPU 0 NVIDIA GB10: unified memory (nvidia-smi reports [N/A] / Not Supported), host MemTotal from "
        "/proc/meminfo 121.7 GiB (at least 100 GiB each)",
    )
    # 127600748 kB is 121.689 GiB, not 128: the "128 GB" on the box does not pass 122
    assert check_gpu_memory(gb10(), 121.6, GB10_MEMINFO)[0].ok
    short, _ = check_gpu_memory(gb10(), 121.7, GB10_MEMINFO)
    assert short.ok is False
    assert short.detail == (
        "GPU 0 NVIDIA GB10: unified memory (nvidia-smi reports [N/A] / Not Supported), host MemTotal from "
        "/proc/meminfo 121.7 GiB, too small (at least 121.7 GiB each)"
    )


def test_gb10_memory_without_meminfo_fails_and_says_why():
    memory, source = check_gpu_memory(gb10(), 100, None)
    assert source == "host meminfo"
    assert memory.ok is False
    assert memory.detail == (
        "GPU 0 NVIDIA GB10 has unified memory (nvidia-smi: [N/A] / Not Supported)"
        " and /proc/meminfo has no MemTotal line"
    )


def test_memory_not_queried_is_not_unified():
    # 11 queried no memory: no size and no [N/A], so nothing to fall back on.
    memory, source = check_gpu_memory(parse_csv(smi("11_compute_cap_titanv_rtx5880_triton8070.txt")), 1, GB10_MEMINFO)
    assert (memory.ok, source) == (False, None)
    assert memory.detail == "GPU 0 NVIDIA TITAN V: nvidia-smi reported no memory total"


def test_cuda_version_details():
    detail = check_cuda_version(parse_table(smi(GB10_TABLE)), "12.8").detail
    assert detail == "the driver supports CUDA 13.0, 12.8 required"
    old = check_cuda_version(parse_table(smi("21_rtx4090_2gpu_table_rlinf255.txt")), "12.8")
    assert old.detail == "the driver supports CUDA 12.4, 12.8 required (driver 550.163.01)"
    assert "R570" in old.hint
    # a CSV query has no CUDA version at all
    none = check_cuda_version(parse_csv(smi("09_l40s_csv_units_akash99.txt")), "12.8")
    assert none.ok is False and none.detail.startswith("nvidia-smi's header shows no CUDA version")


@pytest.mark.parametrize("name,detail", [
    (GB10_TABLE, "the driver supports CUDA 13.0, no minimum set"),
    # a CSV query alone has no CUDA version: still reported, never failed
    ("09_l40s_csv_units_akash99.txt", "the driver supports CUDA unknown, no minimum set"),
])
def test_cuda_version_without_a_minimum_is_reported_only(name, detail):
    report = (parse_csv if "_csv_" in name else parse_table)(smi(name))
    assert check_cuda_version(report, None) == Check("cuda_version", True, detail)


@pytest.mark.parametrize(
    "name,kind",
    [("35_fail_no_driver_shine_cluster50.txt", "driver_not_loaded"),
     ("36_fail_mismatch_shine_cluster30.txt", "driver_library_mismatch")],
)
def test_driver_failures(name, kind):
    with pytest.raises(NvidiaSmiError) as caught:
        parse_table(smi(name))
    check = check_gpu_driver(None, caught.value)
    assert check.ok is False
    assert check.detail.startswith(f"nvidia-smi failed ({kind}): ")
    assert check.detail.endswith("GPU count, memory and CUDA were not checked.")
    assert check.hint == caught.value.hint


def test_unreadable_output_gets_a_generic_hint():
    check = check_gpu_driver(None, NvidiaSmiError("cannot read the memory cell 'x' of GPU 0"))
    assert check.detail.startswith("nvidia-smi failed (unreadable_output): cannot read")
    assert "tests/fixtures/nvidia-smi/" in check.hint


def test_gpu_driver_detail():
    assert check_gpu_driver(gb10()).detail == "driver 580.126.09, CUDA 13.0; nvidia-smi sees 1 GPU(s): 0 NVIDIA GB10"


# ---- /proc/meminfo ---------------------------------------------------------

def test_meminfo_gb10():
    values = parse_meminfo(GB10_MEMINFO)
    assert values["MemTotal"] == 127600748 * 1024
    assert round(values["MemTotal"] / GIB, 1) == 121.7
    assert round(values["MemAvailable"] / GIB, 1) == 107.3


def test_meminfo_captured():
    values = parse_meminfo(host("meminfo_head_dev_container.txt"))
    assert values["MemTotal"] == 24684092 * 1024
    assert set(values) == {"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached"}


@pytest.mark.parametrize("text", ["", None, "MemFree:        19327500 kB\n"])
def test_meminfo_without_memtotal(text):
    with pytest.raises(PreflightError) as caught:
        parse_meminfo(text)
    assert str(caught.value) == "/proc/meminfo has no MemTotal line"


# ---- interface and subnet --------------------------------------------------

ADDRS = parse_ip_addr(host("ip_o4_addr_dev_container.txt"))
IFACES = ["eth0", "ifb0", "ifb1", "lo"]


def test_parse_ip_addr_captured():
    assert ADDRS == {"lo": ["127.0.0.1/8"], "eth0": ["192.0.2.2/24"]}


@pytest.mark.parametrize(
    "interface,address,ok,detail",
    [
        ("eth0", "192.0.2.2", True,
         "eth0 has 192.0.2.2/24: VLLM_HOST_IP=192.0.2.2, NCCL_SOCKET_IFNAME=eth0, GLOO_SOCKET_IFNAME=eth0"),
        ("eth0", None, True,
         "eth0 has 192.0.2.2/24: VLLM_HOST_IP=192.0.2.2, NCCL_SOCKET_IFNAME=eth0, GLOO_SOCKET_IFNAME=eth0"),
        (None, "192.0.2.2", True,
         "192.0.2.2 is on eth0: VLLM_HOST_IP=192.0.2.2, NCCL_SOCKET_IFNAME=eth0, GLOO_SOCKET_IFNAME=eth0"),
        (None, "10.0.0.11", False, "the engine address 10.0.0.11 is on no interface of this host"),
        ("enp1s0f1np1", "192.0.2.2", False,
         "interface enp1s0f1np1 does not exist; this host has eth0, ifb0, ifb1, lo"),
        ("ifb0", None, False, "interface ifb0 has no IPv4 address"),
        ("eth0", "10.0.0.11", False,
         "the engine address 10.0.0.11 is not on eth0 (192.0.2.2/24); it is on no interface of this host"),
        ("lo", "192.0.2.2", False, "the engine address 192.0.2.2 is not on lo (127.0.0.1/8); it is on eth0"),
    ],
)
def test_check_interface(interface, address, ok, detail):
    check = check_interface(interface, address, IFACES, ADDRS)
    assert (check.check, check.ok, check.detail) == ("engine_interface", ok, detail)
    assert bool(check.hint) is not ok


def test_wrong_interface_hint_names_the_right_one():
    check = check_interface("enp1s0f1np1", "192.0.2.2", IFACES, ADDRS)
    assert ("The engine address 192.0.2.2 is on eth0: set interface, and the engine's NCCL_SOCKET_IFNAME and "
            "GLOO_SOCKET_IFNAME, to eth0.") in check.hint
    assert "ibdev2netdev" in check.hint


def test_nothing_to_check_without_interface_and_address():
    assert check_interface(None, None, IFACES, ADDRS) is None
    assert check_engine_subnet("eth0", "192.0.2.2", [], ADDRS) is None
    assert check_engine_subnet("eth0", "192.0.2.2", ["192.0.2.2"], ADDRS) is None


@pytest.mark.parametrize(
    "peers,ok,detail",
    [
        (["192.0.2.12"], True, "peer(s) 192.0.2.12 on eth0's subnet 192.0.2.0/24"),
        (["192.0.2.12", "10.0.0.12"], False,
         "peer(s) 10.0.0.12 not on eth0's subnet 192.0.2.0/24: traffic to them would leave through another route"),
    ],
)
def test_check_engine_subnet(peers, ok, detail):
    check = check_engine_subnet("eth0", "192.0.2.2", peers, ADDRS)
    assert (check.check, check.ok, check.detail) == ("engine_subnet", ok, detail)


def test_engine_subnet_without_an_address_on_the_interface():
    check = check_engine_subnet("ifb0", None, ["192.0.2.12"], ADDRS)
    assert check.ok is False and check.hint == "Fix engine_interface first."


# ---- the service address, the link's state and MTU -------------------------

def test_service_address_on_an_interface_passes():
    check = check_service_address("192.0.2.2", "10.201.0.11", ADDRS)
    assert (check.check, check.ok, check.detail) == ("service_address", True,
                                                     "192.0.2.2 is on eth0: the API answers there")


def test_service_address_on_no_interface_names_what_the_host_has():
    check = check_service_address("198.51.100.7", "192.0.2.2", ADDRS)
    assert check.ok is False
    assert check.detail == ("the service address 198.51.100.7 is on no interface of this host"
                            " (it has eth0 192.0.2.2/24, lo 127.0.0.1/8)")
    assert "service_address" in check.hint and "one-network" in check.hint


def test_one_network_has_no_service_address_check():
    assert check_service_address("192.0.2.2", "192.0.2.2", ADDRS) is None
    assert check_service_address(None, "192.0.2.2", ADDRS) is None


def test_parse_ip_link_captured():
    links = parse_ip_link(host("ip_o_link_dev_container.txt"))
    assert links == {"lo": Link(65536, True, "UNKNOWN"), "ifb0": Link(1500, False, "DOWN"),
                     "ifb1": Link(1500, False, "DOWN"), "eth0": Link(1400, True, "UP")}


def test_parse_ip_link_veth_ends():
    assert parse_ip_link(host("ip_o_link_veth_peer_down.txt"))["eth1"] == Link(9000, False, "DOWN")
    assert parse_ip_link(host("ip_o_link_veth_mtu9000_end.txt"))["eth1"] == Link(9000, True, "UP")
    ends = parse_ip_link(host("ip_o_link_veth_mtu1400_end.txt"))
    assert ends == {"lo": Link(65536, False, "DOWN"), "eth1": Link(1400, True, "UP")}


def test_a_link_without_carrier_is_down_and_says_how_to_fix_it():
    check = check_link_up("eth1", parse_ip_link(host("ip_o_link_veth_peer_down.txt")))
    assert (check.check, check.ok) == ("engine_link", False)
    assert check.detail == "eth1 is down (state DOWN): no traffic reaches the engine's peers"
    assert "ip link set dev eth1 up" in check.hint and "cable" in check.hint


def test_an_up_link_passes_and_a_missing_one_is_engine_interfaces_to_report():
    links = parse_ip_link(host("ip_o_link_veth_mtu9000_end.txt"))
    assert check_link_up("eth1", links) == check_link_up("eth1", links)
    assert check_link_up("eth1", links).ok and check_link_up("eth1", links).detail == "eth1 is up (mtu 9000)"
    assert check_link_up("enp1s0f1np1", links) is None
    assert check_link_up(None, links) is None


def test_link_mtu_agreeing_ends_pass():
    check = check_link_mtu({"lab1": ("eth1", 9000), "lab2": ("eth1", 9000)}, "lab1", "engine_lab")
    assert (check.check, check.ok, check.detail) == (
        "link_mtu", True, "engine engine_lab: lab1 eth1 mtu 9000, lab2 eth1 mtu 9000")


def test_link_mtu_mismatch_names_both_ends_and_both_mtus():
    mtus = {"spark1": ("enp1s0f1np1", 9000), "spark2": ("enp1s0f1np1", 1500)}
    check = check_link_mtu(mtus, "spark1", "engine_spark")
    assert check.ok is False
    assert check.detail == ("engine engine_spark: the link's ends disagree on the MTU:"
                            " spark1 enp1s0f1np1 mtu 9000, spark2 enp1s0f1np1 mtu 1500")
    assert "mtu: 9000" in check.hint and "ip link set dev IFACE mtu 9000" in check.hint


def test_link_mtu_one_host_or_a_missing_sample():
    assert check_link_mtu({"lab1": ("eth0", 1500)}, "lab1").ok
    check = check_link_mtu({"lab1": ("eth1", 1500), "lab2": None}, "lab1", "e")
    assert check.ok is False and check.detail == "engine e: no MTU read from lab2"
    assert "engine_interface first" in check.hint


# ---- ports -----------------------------------------------------------------

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


# ---- disk ------------------------------------------------------------------

@pytest.mark.parametrize(
    "path,measured,free,staged,need,ok,detail",
    [
        ("/srv/models/model", "/srv/models/model", 500 * GIB, 0, 100, True,
         "/srv/models/model: 500.0 GiB free + 0.0 GiB already staged = 500.0 GiB, 100 GiB required"),
        ("/srv/models/model", "/srv", 50 * GIB, 0, 100, False,
         "/srv/models/model (not there yet: measured on /srv): 50.0 GiB free + 0.0 GiB already staged = 50.0 GiB, "
         "100 GiB required"),
        # a re-run: the staged model itself fills the disk
        ("/srv/models/model", "/srv/models/model", 20 * GIB, 90 * GIB, 100, True,
         "/srv/models/model: 20.0 GiB free + 90.0 GiB already staged = 110.0 GiB, 100 GiB required"),
        # a small disk in MiB, not "0.0 GiB" (the lab's 2 MiB staging tmpfs)
        ("/srv/stage/tiny", "/srv/stage", 2 * 1024 ** 2, 0, 0.005, False,
         "/srv/stage/tiny (not there yet: measured on /srv/stage): 2.0 MiB free + 0.0 GiB already staged = 2.0 MiB, "
         "0.005 GiB required"),
    ],
)
def test_check_disk(path, measured, free, staged, need, ok, detail):
    check = check_disk(path, measured, free, staged, need)
    assert (check.check, check.ok, check.detail) == ("disk_free", ok, detail)


@pytest.fixture
def model(tmp_path):
    """A staged model: weights, a config, a hub-cache style link, a nested folder."""
    root = tmp_path / "models" / "m"
    (root / "sub").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(b"\0" * 4096)
    (root / "config.json").write_bytes(b"{}" * 50)
    (root / "sub" / "tokenizer.json").write_bytes(b"x" * 1000)
    (root / "link.safetensors").symlink_to(root / "model.safetensors")
    (root / "dangling").symlink_to(root / "gone")
    return root


def test_staged_bytes_counts_regular_files_and_skips_links(model):
    assert staged_bytes(str(model)) == 4096 + 100 + 1000
    assert staged_bytes(str(model / "model.safetensors")) == 4096
    # a link given as the path is not followed either
    assert staged_bytes(str(model / "link.safetensors")) == 0


def test_staged_bytes_stops_past_the_limit(model):
    # five entries: four files and links at the top, one in sub/
    assert staged_bytes(str(model), limit=5) == 5196
    assert staged_bytes(str(model), limit=4) is None
    assert STAGED_FILES_LIMIT == 20000


def test_nearest_existing(model):
    assert nearest_existing(str(model)) == str(model)
    assert nearest_existing(str(model / "not" / "yet")) == str(model)
    assert nearest_existing("/") == "/"


def test_check_disk_path_counts_what_is_staged(model):
    st = os.statvfs(model)
    free = st.f_bavail * st.f_frsize
    check = check_disk_path(str(model) + "/", 0.001)
    assert check == check_disk(str(model), str(model), free, 5196, 0.001)
    assert check.ok is True and "already staged" in check.detail


def test_check_disk_path_measures_a_missing_path_on_its_parent(model):
    missing = model / "not" / "yet"
    check = check_disk_path(str(missing), 10 ** 9)
    assert check.ok is False
    assert check.detail.startswith(f"{missing} (not there yet: measured on {model}): ")
    assert "0.0 GiB already staged" in check.detail


def test_check_disk_path_refuses_a_path_that_is_not_a_model_directory(model):
    check = check_disk_path(str(model), 0.001, limit=3)
    assert check == Check("disk_free", False, f"{model} holds more than 3 files; it is not a model directory",
                          "Point disk_path at the model's own directory.")


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
    failing = [
        check_gpu_memory(parse_table(smi("19_h100_table_535_gvisor10413.txt")), 1000)[0],
        check_interface("enp1s0f1np1", "192.0.2.2", IFACES, ADDRS),
        check_interface("lo", "192.0.2.2", IFACES, ADDRS),
        check_interface(None, "10.9.9.9", IFACES, ADDRS),
        check_interface("eth0", "10.9.9.9", IFACES, ADDRS),
        check_engine_subnet("eth0", "192.0.2.2", ["10.0.0.12"], ADDRS),
        check_ports([6379], LISTENERS, {}, []),
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


# ---- clock -----------------------------------------------------------------

@pytest.mark.parametrize(
    "offsets,ok,detail",
    [
        ({"spark1": 0.31, "spark2": 0.35}, True,
         "engine engine_a: spark2 +0.040 s against the head spark1 (at most 2 s)"),
        ({"spark1": 0.31, "spark2": -4.69}, False,
         "engine engine_a: spark2 -5.000 s against the head spark1 (at most 2 s)"),
        ({"spark1": 0.31}, True, "engine engine_a: one host (spark1), nothing to compare"),
        ({"spark1": 0.31, "spark2": None}, False, "engine engine_a: no clock sample from spark2"),
    ],
)
def test_check_clock_skew(offsets, ok, detail):
    check = check_clock_skew(offsets, "spark1", 2.0, "engine_a")
    assert (check.check, check.ok, check.detail) == ("clock_skew", ok, detail)
    assert bool(check.hint) is not ok


def test_clock_skew_without_the_head():
    check = check_clock_skew({"spark2": 0.1}, "spark1", 2.0)
    assert check.ok is False and check.detail == "no clock sample from the head spark1"


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
