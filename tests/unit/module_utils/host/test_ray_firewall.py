"""Tests for plugins/module_utils/host/ray_firewall.py: what the Ray firewall on an
engine host admits (the engine's peers) and resets (Ray's ports and the
ephemeral range, less the open ports), and its input checks, with property
tests over hostile ip_local_port_range text (tests/hostile.py)."""
from __future__ import annotations

import pytest
from ansible.module_utils.host.ray_firewall import FirewallError, ephemeral_range, rules
from hostile import any_text, assert_numbers_from, cut_points, mutated, raises_only
from hypothesis import given
from hypothesis import strategies as st

# The lab hosts' /proc/sys/net/ipv4/ip_local_port_range, as the kernel prints it.
RANGE = "32768\t60999\n"
PEERS = ["10.200.0.11", "10.200.0.12"]


def test_the_lab_engine():
    r = rules(PEERS, 6379, [20100, 20999], RANGE, [8000, 22])
    assert r == {"peers4": PEERS, "peers6": [], "reset": ["6379", "10001", "20100-20999", "32768-60999"],
                 "open": ["22", "8000"]}


def test_the_dashboard_agent_port_is_reset_when_outside_the_ephemeral_range():
    r = rules(PEERS, 6379, [20100, 20999], "10000\t30000\n")
    assert r["reset"] == ["6379", "10000-30000", "52365"]


def test_open_ports_are_cut_out_of_the_ranges():
    r = rules(PEERS, 6379, [20100, 20999], RANGE, [40000, 20100, 60999])
    assert r["reset"] == ["6379", "10001", "20101-20999", "32768-39999", "40001-60998"]
    assert r["open"] == ["20100", "40000", "60999"]


def test_the_mp_master_port_is_reset_for_anything_but_the_engine():
    """torch's store on the mp backend's master port listens on every address."""
    r = rules(PEERS, 6379, [20100, 20999], RANGE, [8000, 22], [29555])
    assert r["reset"] == ["6379", "10001", "20100-20999", "29555", "32768-60999"]
    with pytest.raises(FirewallError, match="port 29555 is the engine's own and cannot also be open to everyone"):
        rules(PEERS, 6379, [20100, 20999], RANGE, [29555], [29555])
    with pytest.raises(FirewallError, match="the engine's ports must be a list of port numbers, got 29555"):
        rules(PEERS, 6379, [20100, 20999], RANGE, [], 29555)
    with pytest.raises(FirewallError):
        rules(PEERS, 6379, [20100, 20999], RANGE, [], [70000])


def test_ipv6_peers_and_duplicates():
    r = rules(["fd00::1", "10.0.0.1", "fd00::1", " 10.0.0.1"], 6379, [20100, 20999], RANGE)
    assert (r["peers4"], r["peers6"]) == (["10.0.0.1"], ["fd00::1"])


@pytest.mark.parametrize("args, message", [
    (([], 6379, [20100, 20999], RANGE), "non-empty list of addresses"),
    (("10.0.0.1", 6379, [20100, 20999], RANGE), "non-empty list of addresses"),
    ((["lab1"], 6379, [20100, 20999], RANGE), "must be an IP address, got 'lab1'"),
    ((["10.0.0.1/24"], 6379, [20100, 20999], RANGE), "must be an IP address"),
    ((PEERS, 0, [20100, 20999], RANGE), "ray_cluster_port must be a port number from 1 to 65535"),
    ((PEERS, True, [20100, 20999], RANGE), "ray_cluster_port must be a port number"),
    ((PEERS, 6379, [20999, 20100], RANGE), "is above ray_cluster_max_worker_port"),
    ((PEERS, 6379, [20100], RANGE), "must be (min, max)"),
    ((PEERS, 6379, [20100, 70000], RANGE), "ray_cluster_max_worker_port must be a port number"),
    ((PEERS, 6379, [20100, 20999], RANGE, [6379]), "is Ray's GCS and cannot also be open"),
    ((PEERS, 6379, [20100, 20999], RANGE, "22"), "must be a list of port numbers"),
    ((PEERS, 6379, [20100, 20999], "60999 32768"), "is not a port range"),
    ((PEERS, 6379, [20100, 20999], "32768"), "must be two port numbers"),
])
def test_bad_input_is_refused_with_what_to_fix(args, message):
    with pytest.raises(FirewallError) as exc:
        rules(*args)
    assert message in str(exc.value)


# --- hostile ip_local_port_range text -------------------------------------------------

@given(st.one_of(any_text(), mutated([RANGE]), st.sampled_from(list(cut_points(RANGE))),
                 st.just("\u0663\u0662\u0667\u0666\u0668\t60999\n"), st.just("9" * 5000 + "\t1\n")))
def test_ephemeral_range_raises_only_its_error_and_reads_only_figures_in_the_text(text):
    got = raises_only(FirewallError, ephemeral_range, text)
    if got is not None:
        low, high = got
        assert 1 <= low <= high <= 65535
        assert_numbers_from([low, high], text)


@given(st.integers(), st.integers())
def test_any_two_numbers_are_a_range_or_refused(low, high):
    got = raises_only(FirewallError, ephemeral_range, f"{low}\t{high}\n")
    assert got is None or got == (low, high)


def test_a_huge_file_is_refused_at_once():
    with pytest.raises(FirewallError):
        ephemeral_range("1 " * (5 * 1024 * 1024))
