"""Tests for plugins/module_utils/host/preflight_network.py: the engine interface,
its subnet, the service address and the link's state and MTU over the captures in
tests/fixtures/host-probes/ (INDEX.md gives the sources).
"""
from __future__ import annotations

import pytest
from ansible.module_utils.host.preflight_network import (
    Link,
    check_engine_subnet,
    check_interface,
    check_link_mtu,
    check_link_up,
    check_service_address,
    parse_ip_addr,
    parse_ip_link,
)
from host_probes import host

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
