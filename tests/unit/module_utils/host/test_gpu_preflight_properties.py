"""Property tests for the preflight checks in plugins/module_utils/host/ (gpu_preflight.py,
preflight_*.py) over hostile input
(tests/hostile.py): the host-probe parsers (``/proc/meminfo``, ``ip -o -4
addr``, ``ss -Htlnp``, ``/proc/<pid>/cgroup``) over the real captures in
tests/fixtures/host-probes/ (INDEX.md gives each source) cut, noised and
mutated; the option checks and ``check_from_dict`` over values of any type;
and the gpu_preflight_info module fed hostile tool output end to end.

What each promises: parse_meminfo and parse_ss raise PreflightError and
nothing else, parse_ip_addr and cgroup_units never raise, every figure they
return is written in ASCII digits in the input, and an address they return is
one the subnet check can read. validate_options raises PreflightOptionError
only; check_from_dict raises only the KeyError and TypeError that the report
filters catch.
"""
from __future__ import annotations

import ipaddress
import math
import os
from pathlib import Path

import gpu_preflight_info
import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.gpu_preflight import (
    Check,
    PreflightError,
    PreflightOptionError,
    check_from_dict,
    is_ipv4,
    validate_options,
)
from ansible.module_utils.host.nvidia_smi import SmiReport
from ansible.module_utils.host.preflight_disk import check_disk_path
from ansible.module_utils.host.preflight_gpu import check_cuda_version, parse_meminfo
from ansible.module_utils.host.preflight_network import (
    check_engine_subnet,
    check_interface,
    check_link_up,
    parse_ip_addr,
    parse_ip_link,
)
from ansible.module_utils.host.preflight_ports import cgroup_units, check_ports, parse_ss
from filter_plugins import load_filters
from hostile import (
    HUGE_NUMBER,
    MIB,
    NON_ASCII_DIGITS,
    any_text,
    assert_linear,
    assert_numbers_from,
    cut_points,
    documents,
    mutated,
    non_ascii_number,
    out_of_range,
    raises_only,
)
from hypothesis import given
from hypothesis import strategies as st

FILTERS = load_filters("gpu_preflight")
from ansible.errors import AnsibleFilterError  # noqa: E402  (after load_filters, see filter_plugins.py)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
HOST = FIXTURES / "host-probes"
SMI = FIXTURES / "nvidia-smi"


def capture(*names: str) -> list:
    """The lines of real captures, verbatim."""
    return [line for name in names for line in (HOST / name).read_text().splitlines()]


MEMINFO = capture("meminfo_head_dev_container.txt", "meminfo_gb10_dgx_spark_notes.txt")
IP_ADDR = capture("ip_o4_addr_dev_container.txt")
IP_LINK = capture("ip_o_link_dev_container.txt", "ip_o_link_veth_peer_down.txt", "ip_o_link_veth_mtu9000_end.txt")
SS = capture("ss_Htlnp_dev_container.txt", "ss_Htln_dev_container.txt")
CGROUP = capture("cgroup_dev_container.txt", "cgroup_v1_session_snapd9128.txt", "cgroup_v2_service_laurel228.txt")

MEMTOTAL = MEMINFO[0]            # "MemTotal:       24684092 kB"
ETH0 = IP_ADDR[1]                # "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\ ..."
SS_PYTHON = SS[0]                # "LISTEN 0      128    127.0.0.1:6379 0.0.0.0:* users:(("python3",pid=26192,fd=4))"

# Look-alike figures: Arabic-Indic, superscript and full-width digits.
LOOKALIKES = [non_ascii_number("12"), "¹²", "１２"]


def short_id(value) -> str:
    """A test id pytest can print (its own str() of a 5,000-digit int raises)."""
    try:
        text = repr(value)
    except ValueError:  # a 5,000-digit int, alone or inside a list
        return f"{type(value).__name__}-with-a-huge-int"
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


def test_the_lines_are_the_captures():
    # so that the properties below start from what the programs really print
    assert MEMTOTAL == "MemTotal:       24684092 kB"
    assert ETH0.startswith("4: eth0    inet 192.0.2.2/24 brd ")
    assert 'users:(("python3",pid=26192,fd=4))' in SS_PYTHON
    assert "0::/system.slice/nginx.service" in CGROUP


# ---- /proc/meminfo -----------------------------------------------------------------------------

@given(st.one_of(documents(MEMINFO), any_text()))
def test_meminfo_raises_only_preflight_error_and_reads_only_given_figures(text):
    values = raises_only(PreflightError, parse_meminfo, text)
    if values is None:
        return
    assert "MemTotal" in values
    assert all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in values.items())
    assert_numbers_from(values.values(), text, scale=(1, 1024))


def test_a_cut_memtotal_line_never_reads_larger():
    whole = parse_meminfo(MEMTOTAL)["MemTotal"]
    for cut in cut_points(MEMTOTAL):
        values = raises_only(PreflightError, parse_meminfo, cut)
        assert values is None or values["MemTotal"] <= whole


@pytest.mark.parametrize("value", [HUGE_NUMBER, "9" * 21, *LOOKALIKES, "12" + NON_ASCII_DIGITS[3]], ids=short_id)
def test_meminfo_skips_a_figure_no_kernel_prints(value):
    """Past 20 digits (a u64) or in look-alike digits: the line is not read, so
    MemTotal is missing, not garbage (and never int()'s ValueError)."""
    with pytest.raises(PreflightError, match="no MemTotal line"):
        parse_meminfo(f"MemTotal:       {value} kB")
    # a hostile line beside the real one leaves the real one
    assert parse_meminfo(f"MemFree: {value} kB\n{MEMTOTAL}") == {"MemTotal": 24684092 * 1024}


def test_meminfo_lines_end_at_newline_only():
    assert parse_meminfo(MEMTOTAL + "\r\n") == {"MemTotal": 24684092 * 1024}
    # U+2028 splits for str.splitlines, not for the kernel: no "MemTotal: 24684092" line appears
    with pytest.raises(PreflightError):
        parse_meminfo("MemTotal:       24684092\u2028 kB")


@pytest.mark.parametrize("value", [None, b"MemTotal: 1 kB", 12, ["MemTotal: 1 kB"]])
def test_meminfo_of_no_text(value):
    with pytest.raises(PreflightError):
        parse_meminfo(value)


def test_meminfo_is_linear():
    assert_linear(lambda t: raises_only(PreflightError, parse_meminfo, t), lambda n: "MemTotal:" + " " * n + "x")
    assert_linear(parse_meminfo, lambda n: "Buffers: 1 kB\n" * (n // 14) + MEMTOTAL)


# ---- ip -o -4 addr show ------------------------------------------------------------------------

@given(documents(IP_ADDR))
def test_ip_addr_never_raises_and_the_subnet_check_reads_what_it_returns(text):
    addresses = parse_ip_addr(text)
    figures = []
    for name, cidrs in addresses.items():
        assert isinstance(name, str) and "@" not in name
        for cidr in cidrs:
            assert cidr.isascii()
            interface = ipaddress.IPv4Interface(cidr)
            figures += [*interface.ip.packed, interface.network.prefixlen]
    assert_numbers_from(figures, text)
    for interface in (None, "eth0", "lo"):
        for check in (check_interface(interface, "192.0.2.2", list(addresses), addresses),
                      check_engine_subnet(interface, "192.0.2.2", ["192.0.2.3", "10.0.0.1"], addresses)):
            assert check is None or isinstance(check, Check)


@pytest.mark.parametrize("cidr", [
    "192.0.2.2/99", "192.0.2.2/33", "999.0.2.2/24", "192.0.2.256/24", "010.0.2.2/24", "192.0.2.2/024",
    f"192.0.2.{HUGE_NUMBER}/24", f"192.0.2.2/{HUGE_NUMBER}",
    non_ascii_number("192") + ".0.2.2/24", "192.0.2.2/" + non_ascii_number("24"), "192.0.2.2/²⁴", "192.0.2.2/２４",
], ids=short_id)
def test_an_address_ipaddress_refuses_is_skipped(cidr):
    """A /99 prefix used to pass the pattern and fail in ipaddress.ip_interface
    (ValueError) inside check_engine_subnet."""
    line = ETH0.replace("192.0.2.2/24", cidr)
    assert parse_ip_addr(line) == {}
    check = check_engine_subnet("eth0", "192.0.2.2", ["192.0.2.3"], parse_ip_addr(line))
    assert not check.ok and "no engine interface with an IPv4 address" in check.detail
    # beside the real capture, the real lines still count
    assert parse_ip_addr("\n".join([line, *IP_ADDR])) == {"lo": ["127.0.0.1/8"], "eth0": ["192.0.2.2/24"]}


def test_ip_addr_index_in_look_alike_digits_is_no_line():
    assert parse_ip_addr(ETH0.replace("4:", non_ascii_number("4") + ":", 1)) == {}
    assert parse_ip_addr(ETH0.replace("4:", HUGE_NUMBER + ":", 1)) == {}


@pytest.mark.parametrize("value", [None, b"x", 3, [ETH0]])
def test_ip_addr_of_no_text(value):
    assert parse_ip_addr(value) == {}


def test_ip_addr_is_linear():
    assert_linear(parse_ip_addr, lambda n: "4: eth0" + " " * n + "inet")
    assert_linear(parse_ip_addr, lambda n: (ETH0 + "\n") * (n // len(ETH0)))


# ---- ip -o link show ---------------------------------------------------------------------------

@given(documents(IP_LINK))
def test_ip_link_never_raises_and_reads_only_written_mtus(text):
    links = parse_ip_link(text)
    for name, link in links.items():
        assert isinstance(name, str) and "@" not in name and ":" not in name and name
        assert isinstance(link.mtu, int) and isinstance(link.up, bool)
        assert link.state.isascii() and link.state.isupper()
        assert check_link_up(name, links).ok is link.up
    assert_numbers_from([link.mtu for link in links.values()], text)


def test_ip_link_look_alike_and_huge_mtus_are_no_line():
    eth0 = IP_LINK[3]  # "4: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1400 ..."
    assert parse_ip_link(eth0)["eth0"].mtu == 1400
    for mtu in (non_ascii_number("1400"), HUGE_NUMBER, "１４００"):
        assert parse_ip_link(eth0.replace("mtu 1400", f"mtu {mtu}")) == {}


@pytest.mark.parametrize("value", [None, b"x", 3, [IP_LINK[0]]])
def test_ip_link_of_no_text(value):
    assert parse_ip_link(value) == {}


def test_ip_link_is_linear():
    eth0 = IP_LINK[3]
    assert_linear(parse_ip_link, lambda n: "4: eth0: <" + "UP," * (n // 3) + "> mtu 1")
    assert_linear(parse_ip_link, lambda n: "4: eth0: <UP> mtu 1" + " state" * (n // 6))
    assert_linear(parse_ip_link, lambda n: (eth0 + "\n") * (n // len(eth0)))


# ---- is_ipv4 and the options -------------------------------------------------------------------

# 5,000-digit ints built, not sampled: hypothesis prints a sampled value (str() of it raises).
HUGE_INTS = st.builds(lambda negative: -10 ** 5000 if negative else 10 ** 5000, st.booleans())
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(),
    any_text(60), mutated(["192.0.2.2", "10.200.0.11", "12.8", "8000"]),
    st.lists(st.one_of(st.integers(), HUGE_INTS, any_text(20), st.none()), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@given(ANY_VALUE)
def test_is_ipv4_is_what_ipaddress_reads(value):
    ok = is_ipv4(value)
    assert ok is True or ok is False
    if ok:
        assert str(ipaddress.IPv4Address(value)) == value


@pytest.mark.parametrize("value", [
    "¹.1.1.1", non_ascii_number("10") + ".0.0.1", "１０.0.0.1", HUGE_NUMBER + ".1.1.1", "010.0.0.1", "256.0.0.1",
    " 10.0.0.1", "10.0.0.1\n", "10.0.0.1/24", 10 ** 5000, 167772161, None,
], ids=short_id)
def test_is_ipv4_refuses(value):
    """Superscripts passed isdigit() and then failed int(); Arabic-Indic digits
    passed both and then failed ipaddress in the subnet check."""
    assert is_ipv4(value) is False


@given(min_gpus=ANY_VALUE, ports=ANY_VALUE, min_cuda=ANY_VALUE, address=ANY_VALUE, peers=ANY_VALUE,
       memory=ANY_VALUE | out_of_range(), disk=ANY_VALUE | out_of_range(), clock=ANY_VALUE | out_of_range())
def test_validate_options_raises_only_its_error_and_what_it_passes_the_checks_can_use(
        min_gpus, ports, min_cuda, address, peers, memory, disk, clock):
    try:
        validate_options(min_gpus=min_gpus, ports=ports, min_cuda_version=min_cuda, address=address,
                         peer_addresses=peers, min_gpu_memory_gib=memory, min_disk_gib=disk, controller_time=clock)
    except PreflightOptionError as exc:
        assert len(str(exc)) < 1000
        return
    # Sizes and the time that pass are finite numbers (or None where optional).
    assert math.isfinite(memory) and memory >= 0
    assert disk is None or (math.isfinite(disk) and disk >= 0)
    assert clock is None or math.isfinite(clock)
    addresses = {"eth0": ["192.0.2.2/24"]}
    check_engine_subnet(None, address, peers, addresses)
    check_engine_subnet("eth0", address, peers, addresses)
    check_interface("eth0", address, ["eth0"], addresses)
    check_cuda_version(SmiReport(source="table", cuda_version="13.0"), min_cuda)
    check_ports(ports, [], {}, [])


@pytest.mark.parametrize("options, msg", [
    (dict(address="¹.1.1.1"), "address must be an IPv4 address, got '¹.1.1.1'"),
    (dict(address="010.0.0.1"), "address must be an IPv4 address, got '010.0.0.1'"),
    (dict(address=HUGE_NUMBER + ".1.1.1"), "address must be an IPv4 address, got '" + "9" * 77 + "...'"),
    (dict(address=10 ** 5000), "address must be an IPv4 address, got 'a number of more than 30 digits'"),
    (dict(peer_addresses=[non_ascii_number("10") + ".0.0.2"]),
     "peer_addresses must be IPv4 addresses, got '" + non_ascii_number("10") + ".0.0.2'"),
    (dict(peer_addresses="10.0.0.2"), "peer_addresses must be a list of IPv4 addresses, got 10.0.0.2"),
    (dict(service_address="lan.example"), "service_address must be an IPv4 address, got 'lan.example'"),
    (dict(service_address="010.0.0.1"), "service_address must be an IPv4 address, got '010.0.0.1'"),
    (dict(ports=["80"]), "ports must be between 1 and 65535, got '80'"),
    (dict(ports=[10 ** 5000, True]), "ports must be between 1 and 65535, got a number of more than 30 digits, True"),
    (dict(ports=None), "ports must be a list of port numbers, got None"),
    (dict(min_gpus=-10 ** 5000), "min_gpus must be 0 or more, got a number of more than 30 digits"),
    (dict(min_gpus="1"), "min_gpus must be 0 or more, got '1'"),
    (dict(min_cuda_version="١٢.٨"), "min_cuda_version must be a version such as 12.8, got '١٢.٨'"),
    (dict(min_cuda_version=HUGE_NUMBER), "min_cuda_version must be a version such as 12.8, got '" + "9" * 77 + "...'"),
    (dict(min_cuda_version=12.8), "min_cuda_version must be a version such as 12.8, got '12.8'"),
], ids=lambda v: short_id(v) if not isinstance(v, dict) else ",".join(f"{k}={short_id(x)}" for k, x in v.items()))
def test_bad_option_values_of_any_type(options, msg):
    args = dict(min_gpus=1, ports=[]) | options
    with pytest.raises(PreflightOptionError) as exc:
        validate_options(**args)
    assert str(exc.value) == msg


# ---- ss -Htlnp ---------------------------------------------------------------------------------

@given(documents(SS))
def test_ss_raises_only_preflight_error_and_reads_only_given_figures(text):
    listeners = raises_only(PreflightError, parse_ss, text)
    if listeners is None:
        return
    figures = []
    for listener in listeners:
        assert isinstance(listener.port, int) and 0 <= listener.port <= 65535
        figures.append(listener.port)
        for name, pid in listener.processes:
            assert isinstance(name, str) and isinstance(pid, int) and pid >= 0
            figures.append(pid)
    assert_numbers_from(figures, text)
    check_ports([6379, 8000, 2024], listeners, {}, ["ray.service"])


def test_a_cut_ss_line_never_reads_larger():
    for cut in cut_points(SS_PYTHON):
        for listener in raises_only(PreflightError, parse_ss, cut) or []:
            assert listener.port <= 6379
            assert all(pid <= 26192 for _, pid in listener.processes)


@pytest.mark.parametrize("port", [HUGE_NUMBER, "65536", "99999", "¹", non_ascii_number("6379"), "６３７９", ""],
                         ids=short_id)
def test_ss_skips_a_listener_whose_port_is_no_port(port):
    """A 5,000-digit port or a superscript made int() raise ValueError; a
    look-alike port was read as the port it imitates."""
    assert parse_ss(SS_PYTHON.replace(":6379 ", f":{port} ")) == []


@pytest.mark.parametrize("pid", [HUGE_NUMBER, non_ascii_number("26192"), "²⁶¹⁹²", ""], ids=short_id)
def test_ss_leaves_out_a_process_whose_pid_is_no_pid(pid):
    """`_SS_PROCESS`'s `\\d+` took Arabic-Indic digits (int() read them as the
    pid they imitate) and 5,000 digits (int() raised ValueError)."""
    (listener,) = parse_ss(SS_PYTHON.replace("pid=26192", f"pid={pid}"))
    assert (listener.address, listener.port, listener.processes) == ("127.0.0.1", 6379, [])


def test_ss_reads_a_comm_with_escapes_and_leaves_out_a_name_no_comm_has():
    escaped = SS_PYTHON.replace('"python3"', '"py\\"th on3"')   # ss's escaped quote, and a space
    assert parse_ss(escaped)[0].processes == [('py\\"th on3', 26192)]
    (listener,) = parse_ss(SS_PYTHON.replace('"python3"', '"' + "p" * 257 + '"'))
    assert listener.processes == []


@pytest.mark.parametrize("recv_q", ["¹", non_ascii_number("0"), "Recv-Q"])
def test_ss_refuses_a_line_whose_recv_q_is_no_number(recv_q):
    with pytest.raises(PreflightError, match="not `ss -Htln` output"):
        parse_ss(SS_PYTHON.replace("LISTEN 0 ", f"LISTEN {recv_q} ", 1))


def test_ss_lines_end_at_newline_only():
    # U+2028 in a process name (it is one to ss) does not start a second listener
    line = SS_PYTHON.replace('"python3"', '"py\u2028LISTEN 0 1 0.0.0.0:1 0.0.0.0:*"')
    (listener,) = parse_ss(line)
    assert listener.port == 6379 and [pid for _, pid in listener.processes] == [26192]
    assert parse_ss(SS_PYTHON + "\r\n") == parse_ss(SS_PYTHON)


@pytest.mark.parametrize("value", [None, b"x", 3])
def test_ss_of_no_text(value):
    assert parse_ss(value) == []


def test_ss_is_linear():
    assert_linear(lambda t: raises_only(PreflightError, parse_ss, t), lambda n: SS_PYTHON + " " * n + "x")
    assert_linear(parse_ss, lambda n: SS_PYTHON + ' users:(("' + "\\x" * (n // 2))
    assert_linear(parse_ss, lambda n: (SS_PYTHON + "\n") * (n // len(SS_PYTHON)))


# ---- /proc/<pid>/cgroup ------------------------------------------------------------------------

@given(documents(CGROUP))
def test_cgroup_units_never_raises_and_names_units_on_the_path(text):
    units = cgroup_units(text)
    assert len(set(units)) == len(units)
    for unit in units:
        assert unit.endswith((".service", ".scope")) and "/" not in unit and "\n" not in unit
        assert unit in text


def test_cgroup_units_lines_end_at_newline_only():
    assert cgroup_units("0::/system.slice/nginx.service\r\n") == ["nginx.service"]
    assert cgroup_units("0::/system.slice/a\u2028b.service") == ["a\u2028b.service"]


@pytest.mark.parametrize("value", [None, b"0::/a.service", 3])
def test_cgroup_units_of_no_text(value):
    assert cgroup_units(value) == []


def test_cgroup_units_is_linear():
    """A list's `in` made every new unit compare with all before it (quadratic:
    about a second for the 11,000 units of the large size, where a dict takes
    milliseconds; past that size the dict's own cache misses make the ratio noisy)."""
    assert_linear(cgroup_units, lambda n: "0::/" + "/".join(f"u{i}.service" for i in range(n // 12)), small=16 * 1024)


# ---- check_from_dict, as the report filters use it ---------------------------------------------

JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(), st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
CHECKISH = st.fixed_dictionaries({"check": JSONISH, "ok": JSONISH}, optional={"detail": JSONISH, "hint": JSONISH})


@given(st.one_of(JSONISH, CHECKISH))
def test_check_from_dict_raises_only_what_the_filters_catch(data):
    check = raises_only((KeyError, TypeError), check_from_dict, data)
    if check is not None:
        assert check.ok is data["ok"] and check.check == data["check"]
        assert isinstance(check.detail, str) and isinstance(check.hint, str)
    try:
        FILTERS["gpu_preflight_summary"]([data])
    except AnsibleFilterError:
        pass


@pytest.mark.parametrize("data", [
    {"check": "gpu_count", "ok": "false"},     # bool("false") is True: a failed check read as passed
    {"check": "gpu_count", "ok": 0},
    {"check": 10 ** 5000, "ok": True},          # str() of it raised ValueError past the filter's catch
    {"check": "gpu_count", "ok": True, "detail": 10 ** 5000},
    ["gpu_count"],
], ids=["ok-string", "ok-int", "huge-int-name", "huge-int-detail", "a-list"])
def test_check_from_dict_refuses(data):
    with pytest.raises(TypeError):
        check_from_dict(data)
    with pytest.raises(AnsibleFilterError, match="not a list of preflight checks"):
        FILTERS["gpu_preflight_report"]([data])


# ---- the disk check's path -------------------------------------------------------------------------

def test_a_relative_disk_path_is_a_failed_check():
    """statvfs('') raised FileNotFoundError through the module: type=path does not make a path absolute."""
    check = check_disk_path("models/tiny", 1)
    assert not check.ok and check.detail == "disk_path models/tiny is not an absolute path"


# ---- the module over hostile output ------------------------------------------------------------

def smi(name: str) -> str:
    return "\n".join(ln for ln in (SMI / name).read_text().splitlines() if not ln.startswith("$ ")) + "\n"


H100_TABLE = smi("19_h100_table_535_gvisor10413.txt")
GPU_LINE = next(ln for ln in H100_TABLE.splitlines() if "00000000:04:00.0" in ln)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The module with its commands answered from ``outputs`` (by program name;
    ``nvidia-smi-csv`` for the query) and its /proc and /sys in tmp_path."""
    outputs = {}

    def run_command(self, args, **kwargs):
        name = os.path.basename(args[0]) + ("-csv" if any(a.startswith("--query-gpu") for a in args) else "")
        return outputs.get(name, (0, "", ""))

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: f"/usr/bin/{name}")
    smi_path = tmp_path / "nvidia-smi"
    smi_path.write_text("#!/bin/sh\n")
    smi_path.chmod(0o755)
    (tmp_path / "meminfo").write_text("\n".join(MEMINFO))
    (tmp_path / "net" / "eth0").mkdir(parents=True)
    (tmp_path / "proc" / "26192").mkdir(parents=True)
    (tmp_path / "proc" / "26192" / "cgroup").write_text("0::/" + "/".join(f"u{i}.service" for i in range(50000)))
    monkeypatch.setattr(gpu_preflight_info, "MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(gpu_preflight_info, "SYS_CLASS_NET", str(tmp_path / "net"))
    monkeypatch.setattr(gpu_preflight_info, "PROC", str(tmp_path / "proc"))
    outputs["nvidia-smi"] = (0, H100_TABLE, "")
    outputs["ip"] = (0, "\n".join(IP_ADDR), "")
    outputs["ss"] = (0, "\n".join(SS), "")
    return outputs, {"nvidia_smi": str(smi_path), "on_failure": "warn", "address": "192.0.2.2",
                     "interface": "eth0", "peer_addresses": ["192.0.2.3"], "ports": [6379]}


def verdicts(result) -> dict:
    assert "exception" not in result and result.get("checks"), result
    return {c["check"]: c for c in result["checks"]}


def test_the_module_reads_the_real_captures(run_module, host):
    outputs, args = host
    checks = verdicts(run_module(gpu_preflight_info, args))
    assert checks["gpu_count"]["ok"] and checks["engine_interface"]["ok"] and checks["engine_subnet"]["ok"]
    assert "6379 held by python3 (pid 26192" in checks["ports_free"]["detail"]


@pytest.mark.parametrize("program, output, check, ok", [
    # a GPU line padded with a MiB of spaces took the old pattern cubic time
    ("nvidia-smi", H100_TABLE.replace(GPU_LINE, GPU_LINE[:5] + " " * MIB), "gpu_count", False),
    ("nvidia-smi", H100_TABLE.replace("|   0  NVIDIA", f"|   {HUGE_NUMBER}  NVIDIA"), "gpu_count", False),
    ("nvidia-smi-csv", "index, name\n0, " + "x" * 200_000, "gpu_count", True),   # csv.Error past 128 KiB
    ("nvidia-smi-csv", f"index, memory.total [MiB]\n0, {HUGE_NUMBER}", "gpu_memory", True),
    ("ip", "\n".join(IP_ADDR).replace("/24", "/99"), "engine_interface", False),
    ("ss", SS_PYTHON.replace(":6379 ", f":{HUGE_NUMBER} "), "ports_free", True),
    ("ss", SS_PYTHON.replace("pid=26192", f"pid={HUGE_NUMBER}"), "ports_free", False),
    ("ss", SS_PYTHON.replace("LISTEN 0 ", "LISTEN ¹ ", 1), "ports_free", False),
], ids=["smi-spaces", "smi-huge-index", "csv-big-field", "csv-huge-memory", "ip-prefix-99", "ss-huge-port",
        "ss-huge-pid", "ss-superscript-recv-q"])
def test_the_module_gives_a_verdict_on_hostile_output(run_module, host, program, output, check, ok):
    outputs, args = host
    outputs[program] = (0, output, "")
    assert verdicts(run_module(gpu_preflight_info, args))[check]["ok"] is ok


@pytest.mark.parametrize("options, msg", [
    ({"address": "¹.1.1.1"}, "address must be an IPv4 address, got '¹.1.1.1'"),
    ({"peer_addresses": ["010.0.0.2"]}, "peer_addresses must be IPv4 addresses, got '010.0.0.2'"),
])
def test_the_module_refuses_look_alike_addresses(run_module, host, options, msg):
    outputs, args = host
    result = run_module(gpu_preflight_info, dict(args, **options))
    assert result["failed"] and result["msg"] == msg
