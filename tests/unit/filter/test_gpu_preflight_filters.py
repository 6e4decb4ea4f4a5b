"""Tests for plugins/filter/gpu_preflight.py: the engine's clock check from
every host's registered probe, and the per-host report and summary."""
from __future__ import annotations

import pytest
from filter_plugins import load_filters

# Loaded before ansible.errors is imported here: load_filters keeps the controller flag as it was.
FILTERS = load_filters("gpu_preflight")
from ansible.errors import AnsibleFilterError  # noqa: E402

PEERS = [
    {"name": "spark1", "rank": 0, "address": "192.168.177.11"},
    {"name": "spark2", "rank": 1, "address": "192.168.177.12"},
]


def probe(offset):
    return {"__gpu_preflight_info": {"clock_offset_s": offset, "checks": []}}


def test_filters_are_registered():
    assert set(FILTERS) == {"gpu_preflight_clock_skew", "gpu_preflight_link_mtu", "gpu_preflight_report",
                            "gpu_preflight_summary"}


@pytest.mark.parametrize(
    "hostvars,ok,detail",
    [
        ({"spark1": probe(0.412), "spark2": probe(0.398)}, True,
         "engine engine_a: spark2 -0.014 s against the head spark1 (at most 2 s)"),
        ({"spark1": probe(0.412), "spark2": probe(7.412)}, False,
         "engine engine_a: spark2 +7.000 s against the head spark1 (at most 2 s)"),
        ({"spark1": probe(0.412), "spark2": {}}, False, "engine engine_a: no clock sample from spark2"),
        ({"spark1": probe(0.412)}, False, "engine engine_a: no clock sample from spark2"),
    ],
)
def test_clock_skew(hostvars, ok, detail):
    check = FILTERS["gpu_preflight_clock_skew"](list(reversed(PEERS)), hostvars, "2.0", "engine_a")
    assert check["check"] == "clock_skew"
    assert (check["ok"], check["detail"]) == (ok, detail)


def test_clock_skew_needs_peers():
    with pytest.raises(AnsibleFilterError):
        FILTERS["gpu_preflight_clock_skew"]([], {}, 2, "engine_a")


def link(mtu, interface="enp1s0f1np1"):
    return {"__gpu_preflight_info": {"link_interface": interface, "link_mtu": mtu, "checks": []}}


@pytest.mark.parametrize(
    "hostvars,ok,detail",
    [
        ({"spark1": link(9000), "spark2": link(9000)}, True,
         "engine engine_a: spark1 enp1s0f1np1 mtu 9000, spark2 enp1s0f1np1 mtu 9000"),
        ({"spark1": link(9000), "spark2": link(1500, "enP2p1s0f1np1")}, False,
         "engine engine_a: the link's ends disagree on the MTU: spark1 enp1s0f1np1 mtu 9000,"
         " spark2 enP2p1s0f1np1 mtu 1500"),
        ({"spark1": link(9000), "spark2": link(None)}, False, "engine engine_a: no MTU read from spark2"),
        ({"spark1": link(9000)}, False, "engine engine_a: no MTU read from spark2"),
    ],
)
def test_link_mtu(hostvars, ok, detail):
    check = FILTERS["gpu_preflight_link_mtu"](list(reversed(PEERS)), hostvars, "engine_a")
    assert check["check"] == "link_mtu"
    assert (check["ok"], check["detail"]) == (ok, detail)


def test_link_mtu_needs_peers():
    with pytest.raises(AnsibleFilterError):
        FILTERS["gpu_preflight_link_mtu"]([], {}, "engine_a")


def test_report_and_summary():
    checks = [
        {"check": "gpu_driver", "ok": True, "detail": "driver 580.126.09", "hint": ""},
        {"check": "clock_skew", "ok": False, "detail": "spark2 +7.000 s", "hint": "Synchronise the clocks."},
    ]
    assert FILTERS["gpu_preflight_report"](checks) == [
        "PASS gpu_driver: driver 580.126.09",
        "FAIL clock_skew: spark2 +7.000 s",
        "     fix: Synchronise the clocks.",
    ]
    assert FILTERS["gpu_preflight_summary"](checks) == {
        "ok": False,
        "failed_checks": ["clock_skew"],
        "message": "1 of 2 preflight checks failed:\n- clock_skew: spark2 +7.000 s\n  fix: Synchronise the clocks.",
    }


def test_report_refuses_other_data():
    with pytest.raises(AnsibleFilterError):
        FILTERS["gpu_preflight_report"]([{"detail": "no name"}])
