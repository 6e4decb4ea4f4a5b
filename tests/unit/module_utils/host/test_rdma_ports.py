"""plugins/module_utils/host/rdma_ports.py on real `ibstat` output (tests/fixtures/gpu-field/rdma/,
each file's first line names its public source): each RDMA port's state, NCCL_IB_HCA as NCCL
reads it, and what keeps NCCL off a device it names; then hostile input: RdmaError only,
linear time."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.host import rdma_ports as r
from hostile import MIB, any_text, assert_linear, mutated, raises_only
from hypothesis import given
from hypothesis import strategies as st

RDMA = Path(__file__).resolve().parents[3] / "fixtures" / "gpu-field" / "rdma"


def capture(name: str) -> str:
    (path,) = RDMA.glob(name + "*")
    return path.read_text()


GB10 = r.read_ibstat(capture("01_gb10"))  # a Spark's twins; the capture lost its 4th CA, rocep1s0f1


def test_a_sparks_twin_ports_one_uncabled():
    assert [(p.device, p.port, p.state, p.physical_state, p.rate_gbps, p.link_layer) for p in GB10] == [
        ("roceP2p1s0f0", 1, "Active", "LinkUp", 200.0, "Ethernet"),
        ("roceP2p1s0f1", 1, "Down", "Disabled", 40.0, "Ethernet"),
        ("rocep1s0f0", 1, "Active", "LinkUp", 200.0, "Ethernet"),
    ]
    assert {p.firmware for p in GB10} == {"28.45.4028"}


def test_a_cut_record_keeps_what_it_has():
    ports = r.read_ibstat(capture("06_ibstat"))
    assert [(p.device, p.state) for p in ports] == [("mlx5_0", "Active"), ("mlx5_1", "Active"),
                                                    ("mlx5_10", "Down")]
    assert ports[-1].rate_gbps is None and ports[-1].firmware == "22.31.1014"


def test_the_cabled_twins_pass_with_a_rate_floor():
    assert r.problems(GB10, "=rocep1s0f0,roceP2p1s0f0", min_rate_gbps=100) == []


def test_an_uncabled_twin_named_in_nccl_ib_hca_is_a_problem_that_says_what_nccl_does():
    (problem,) = r.problems(GB10, "=roceP2p1s0f1")
    assert problem.startswith("roceP2p1s0f1 port 1 is Down (Disabled): NCCL skips it")


def test_a_device_ibstat_does_not_list():
    (problem,) = r.problems(GB10, "mlx5_0:1")
    assert problem == ("NCCL_IB_HCA names mlx5_0:1, which ibstat does not list "
                       "(it lists roceP2p1s0f0, roceP2p1s0f1, rocep1s0f0)")


def test_a_rate_under_the_floor_and_another_link_layer():
    assert r.problems(GB10, "=rocep1s0f0", min_rate_gbps=400) == [
        "rocep1s0f0 port 1 links at 200.0 Gb/s, under 400"]
    assert r.problems(GB10, "=rocep1s0f0", link_layer="InfiniBand") == [
        "rocep1s0f0 port 1 runs Ethernet, not InfiniBand"]


@pytest.mark.parametrize("hca, exclude, items, exact", [
    ("mlx5_0:1,mlx5_1", False, [("mlx5_0", 1), ("mlx5_1", None)], False),
    ("=rocep1s0f0", False, [("rocep1s0f0", None)], True),
    ("^mlx5_2", True, [("mlx5_2", None)], False),
    ("^=mlx5_2:1", True, [("mlx5_2", 1)], True),
])
def test_nccl_ib_hca_as_nccl_reads_it(hca, exclude, items, exact):
    assert r.parse_hca(hca) == (exclude, items, exact)


def test_prefixes_exact_names_and_exclusions_select_as_nccl_does():
    names = lambda hca: [p.device for p in r.wanted(GB10, hca)[0]]  # noqa: E731
    assert names("rocep1s0f") == ["rocep1s0f0"]  # a prefix: names are case-sensitive
    assert names("roce") == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0"]
    assert names("=roceP2p1s0f") == []
    assert names("^roceP2p1s0f1") == ["roceP2p1s0f0", "rocep1s0f0"]


@pytest.mark.parametrize("hca", ["", " ", "mlx5_0;mlx5_1", "mlx5_0:x", None, 3])
def test_a_malformed_nccl_ib_hca_is_the_documented_error(hca):
    with pytest.raises(r.RdmaError):
        r.parse_hca(hca)


@pytest.mark.parametrize("text", ["", "ibstat: command not found\n", capture("02_spark_ibdev2netdev"), None, 3])
def test_no_ca_port_or_not_text_is_the_documented_error(text):
    with pytest.raises(r.RdmaError):
        r.read_ibstat(text)


# --- hostile input -----------------------------------------------------------------------------

REAL_LINES = [line for name in ("01_gb10", "06_ibstat") for line in capture(name).splitlines()
              if not line.startswith("# ")]


def _checked(text, hca="roce") -> None:
    ports = raises_only(r.RdmaError, r.read_ibstat, text)
    if ports is not None:
        assert all(isinstance(p.port, int) for p in ports)
        assert isinstance(raises_only(r.RdmaError, r.problems, ports, hca), (list, type(None)))


@given(any_text())
def test_any_text(text):
    _checked(text)


@given(st.binary(max_size=2000))
def test_any_bytes(raw):
    _checked(raw)


@given(mutated(REAL_LINES), st.text(max_size=40))
def test_real_lines_mutated_with_any_hca(text, hca):
    _checked(text, hca)


def test_reading_is_linear():
    block = capture("01_gb10").split("\n", 1)[1]
    assert_linear(r.read_ibstat, lambda size: block * (size // len(block)), small=MIB // 4, factor=8)
