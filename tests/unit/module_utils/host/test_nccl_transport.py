"""plugins/module_utils/host/nccl_transport.py on real NCCL logs (tests/fixtures/gpu-field/nccl/,
each file's first line names its public source): which transport each host chose, and the
check that fails RDMA configured with NCCL on sockets. Then hostile input: NcclLogError is the
only exception, and the reading is linear in the text."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.host import nccl_transport as n
from hostile import MIB, any_text, assert_linear, mutated, raises_only
from hypothesis import given
from hypothesis import strategies as st

NCCL = Path(__file__).resolve().parents[3] / "fixtures" / "gpu-field" / "nccl"


def log(name: str) -> str:
    (path,) = NCCL.glob(name + "*")
    return path.read_text()


# (file, host, transport, what NCCL named: devices or interfaces, why no RDMA)
CASES = [
    ("01_spark", "spark-3995", n.RDMA, ["rocep1s0f1", "roceP2p1s0f1"], []),
    ("02_h100", "dgxh100-4", n.RDMA, ["mlx5_10:1/RoCE", "mlx5_11:1/RoCE"], []),
    ("03_a800", "nodeb", n.RDMA, ["mlx5_6:1/RoCE"], []),
    ("04_socket", "ip-172-31-12-210", n.SOCKET, ["ens3:172.31.12.210"], []),
    ("05_socket", "instance-8g-96c-3", n.SOCKET, ["ens7:10.128.0.32"],
     ["no RDMA device found (NET/IB : No device found)"]),
    ("06_socket", "0d2e39cf9b5e", n.SOCKET, ["eth0:172.17.0.5"],
     ["libibverbs is missing (NCCL WARN Failed to open libibverbs.so)"]),
    ("07_socket", "axa", n.SOCKET, ["lo:127.0.0.1"], ["NCCL_IB_DISABLE=1 in its environment"]),
    ("08_socket", "gpu01", n.SOCKET, ["enp225s0f1:10.10.10.2"], []),
    ("09_infiniband", "e05r3n09", n.RDMA, ["mlx5_3:1/IB", "mlx5_2:1/IB", "mlx5_1:1/IB", "mlx5_0:1/IB"], []),
    ("10_vllm", "master", n.RDMA, ["rxe0:1/RoCE"], []),
    ("11_roce", "pytorchjob-summarization-long-data-8vry-ravi-agrawa-worker-2", n.RDMA,
     ["rocep204s0f0v6:1/RoCE"], []),
    # Only its channels say it: "via NET/IB/0".
    ("12_spark", "spark2", n.RDMA, [], []),
]


@pytest.mark.parametrize("name, host, transport, named, reasons", CASES, ids=[c[0] for c in CASES])
def test_each_real_log_reads_its_hosts_transport(name, host, transport, named, reasons):
    h = n.read(log(name))[host]
    assert h.transport == transport
    assert (h.rdma_devices if transport == n.RDMA else h.socket_interfaces)[:len(named)] == named
    assert h.reasons == reasons


def test_the_spark_plugins_virtual_devices_keep_their_speed():
    h = n.read(log("01_spark"))["spark-3995"]
    assert h.rdma_speeds_mbps == {"rocep1s0f1": 200000, "roceP2p1s0f1": 200000}
    assert h.channels == {"IBext"}


def test_the_hca_nccl_read_is_kept():
    assert n.read(log("10_vllm"))["master"].hca == "rxe0"


@pytest.mark.parametrize("name", [c[0] for c in CASES if c[2] == n.RDMA])
def test_rdma_everywhere_passes(name):
    ok, why = n.check(n.read(log(name)), rdma_wanted=True)
    assert ok is True and why.startswith("NCCL uses RDMA on every host"), why


@pytest.mark.parametrize("name, cause", [
    ("05_socket", "no RDMA device found"),
    ("06_socket", "libibverbs is missing"),
    ("07_socket", "NCCL_IB_DISABLE=1"),
    ("08_socket", "NCCL gave no reason at INFO"),
])
def test_rdma_configured_but_sockets_chosen_fails_naming_the_host_and_the_cause(name, cause):
    hosts = n.read(log(name))
    ok, why = n.check(hosts, rdma_wanted=True)
    assert ok is False
    assert why.startswith("RDMA is configured but NCCL fell back to sockets")
    (slow,) = [h for h in hosts.values() if h.transport == n.SOCKET]
    assert f"{slow.host} uses TCP sockets" in why and cause in why
    assert "libibverbs is installed" in why  # what to do


def test_sockets_are_fine_when_no_rdma_is_configured():
    ok, why = n.check(n.read(log("08_socket")), rdma_wanted=False)
    assert ok is True and "gpu01: socket" in why


@pytest.mark.parametrize("text", ["", "INFO 12-01 vLLM API server version 0.32.0\n", "NCCL version 2.27.3\n"])
def test_a_log_without_ncccls_network_says_how_to_get_it(text):
    ok, why = n.check(n.read(text), rdma_wanted=True)
    assert ok is None and "NCCL_DEBUG=INFO" in why


def test_a_vllm_prefixed_line_and_a_carriage_return_are_read():
    text = ("(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.12) spark2:2:3 [0] NCCL INFO "
            "Using network Socket\r(EngineCore_DP0 pid=1) spark1:4:5 [0] NCCL INFO Using network IB\n")
    hosts = n.read(text)
    assert (hosts["spark2"].transport, hosts["spark1"].transport) == (n.SOCKET, n.RDMA)


@pytest.mark.parametrize("value, words", [(None, "str or bytes"), (12, "str or bytes"), (["x"], "str or bytes")])
def test_not_text_is_the_documented_error(value, words):
    with pytest.raises(n.NcclLogError, match=words):
        n.read(value)


# --- hostile input -----------------------------------------------------------------------------

REAL_LINES = [line for path in sorted(NCCL.iterdir()) for line in path.read_text().splitlines()
              if " NCCL " in line][:80]


def _checked(text) -> None:
    hosts = raises_only(n.NcclLogError, n.read, text)
    if hosts is not None:
        for h in hosts.values():
            assert h.transport in (None, n.RDMA, n.SOCKET)
        ok, why = n.check(hosts, rdma_wanted=True)
        assert ok in (True, False, None) and why


@given(any_text())
def test_any_text(text):
    _checked(text)


@given(st.binary(max_size=2000))
def test_any_bytes(raw):
    _checked(raw)


@given(mutated(REAL_LINES))
def test_real_lines_mutated(text):
    _checked(text)


def test_reading_is_linear():
    line = "spark:1:1 [0] NCCL INFO NET/IB : Using " + "[0]mlx5_0:1/RoCE " * 20 + "\n"
    assert_linear(n.read, lambda size: line * (size // len(line)), small=MIB // 4, factor=8)
    assert_linear(n.read, lambda size: "a" * size + " NCCL INFO " + "[" * size, small=MIB // 4, factor=8)
