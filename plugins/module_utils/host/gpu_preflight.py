"""Preflight checks of one engine host, one verdict per check.

Each check is a :class:`Check` (``{check, ok, detail, hint}`` as a dict, the
DeepOps shape: one JSON verdict per check), built from evidence the
``gpu_preflight_info`` module gathers (``nvidia-smi``, ``/proc/meminfo``,
``ip -o -4 addr``, ``ss -Htlnp``, ``/proc/<pid>/cgroup``) and, for the clock,
from every host's sample (the ``gpu_preflight_clock_skew`` filter). The
module's options are checked by :func:`validate_options` first.

Standard-library only: no AnsibleModule, and of the project's other
module_utils only ``shared/versions.py`` (standard-library only too). Everything is
pure except :func:`check_disk_path`, which measures the filesystem
(``statvfs``) and walks what is already staged there.
The GPU checks take the ``SmiReport`` of :mod:`nvidia_smi`.

Hints name the module's options (``min_gpu_memory_gib``, ``ports``...); a role
that sets them from its own variables says which in its own messages.

The parsers read text a host printed and trust none of it: a figure is ASCII
digits of a length the program can print (``int()`` and ``\\d`` accept
Arabic-Indic digits, ``isdigit()`` superscripts, and ``int()`` refuses 4,300
digits), an address is one :mod:`ipaddress` accepts, and a line is what the
program ends with ``\\n`` (not what ``str.splitlines`` also splits at, such as
U+2028 in a process name). What a line does not hold is skipped; only
:func:`parse_meminfo` (no MemTotal) and :func:`parse_ss` (not ``ss`` output)
raise, and only :class:`PreflightError`.
"""
from __future__ import annotations

import ipaddress
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from ansible.module_utils.shared.versions import version_at_least, version_tuple

GIB = 1024 ** 3

# The checks in report order; the GPU ones are skipped with accelerator=cpu.
GPU_CHECKS = ("gpu_driver", "gpu_count", "gpu_memory", "cuda_version")


class PreflightError(Exception):
    """Evidence that could not be read (a malformed /proc file or command output)."""


class PreflightOptionError(ValueError):
    """An option value the checks cannot use; its text is the module's failure message."""


@dataclass
class Check:
    """One verdict. ``hint`` says what to do; it is empty when ``ok``."""

    check: str
    ok: bool
    detail: str
    hint: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _gib(num_bytes: float) -> str:
    """GiB to one decimal; under 0.1 GiB in MiB, so a small disk does not read as empty."""
    if 0 < num_bytes < GIB / 10:
        return f"{num_bytes / 1024 ** 2:.1f} MiB"
    return f"{num_bytes / GIB:.1f} GiB"


def _num(value: float) -> str:
    return f"{value:g}"


def _lines(text) -> list:
    """``text`` split where a program ends its lines (``\\n``, a CRLF's ``\\r`` dropped);
    no lines for anything but a string."""
    if not isinstance(text, str):
        return []
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _shown(value, quote: bool = False) -> str:
    """``value`` for a message: never raises (``str()`` of a 4,301-digit int does) and stays short;
    with ``quote``, a string is quoted so that "80" does not read as the number 80."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return "a number of more than 30 digits"
    if not isinstance(value, (str, int, float)):
        return f"a {type(value).__name__}"
    text = str(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"'{text}'" if quote and isinstance(value, str) else text


# ---- options ---------------------------------------------------------------

_DOTTED_QUAD = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def is_ipv4(value) -> bool:
    """A dotted-quad IPv4 address (no prefix length, no host name) that :mod:`ipaddress`
    accepts too, so the subnet check can use it; False for anything else, a non-string included."""
    if not isinstance(value, str) or not _DOTTED_QUAD.fullmatch(value):
        return False
    try:
        ipaddress.IPv4Address(value)  # refuses 256 and, from Python 3.9.5, leading zeros
    except ValueError:
        return False
    return True


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """An int or float within float's range (not a bool): math.isfinite() of a larger int raises."""
    return (isinstance(value, float) or _is_int(value) and abs(value) < 2 ** 1023) and not isinstance(value, bool)


def _is_list(value) -> bool:
    return isinstance(value, (list, tuple))


def validate_options(*, min_gpus: int, ports, min_cuda_version: str | None = None, address: str | None = None,
                     peer_addresses=(), service_address: str | None = None, min_gpu_memory_gib: float = 0,
                     min_disk_gib: float | None = None, controller_time: float | None = None) -> None:
    """Raise :class:`PreflightOptionError` for the first option value the checks cannot use.

    Raises nothing else, whatever the values' types (the module's argspec
    converts them; a caller that skips it gets the same messages). A size or
    a time must be a finite number: the argspec's float takes "inf", "nan"
    and "1e999", with which every comparison fails or passes whatever the
    host has."""
    for name, value in (("min_gpu_memory_gib", min_gpu_memory_gib), ("min_disk_gib", min_disk_gib)):
        if value is not None and not (_is_number(value) and 0 <= value < math.inf):
            raise PreflightOptionError(f"{name} must be a number of GiB, 0 or more, got {_shown(value, quote=True)}")
    if controller_time is not None and not (_is_number(controller_time) and math.isfinite(controller_time)):
        raise PreflightOptionError(
            f"controller_time must be epoch seconds (now().timestamp()), got {_shown(controller_time, quote=True)}")
    if min_cuda_version is not None:
        try:
            readable = isinstance(min_cuda_version, str) and min_cuda_version.isascii()
            version_tuple(min_cuda_version if readable else None)
        except ValueError:
            raise PreflightOptionError(
                f"min_cuda_version must be a version such as 12.8, got '{_shown(min_cuda_version)}'") from None
    if not _is_int(min_gpus) or min_gpus < 0:
        raise PreflightOptionError(f"min_gpus must be 0 or more, got {_shown(min_gpus, quote=True)}")
    if not _is_list(ports):
        raise PreflightOptionError(f"ports must be a list of port numbers, got {_shown(ports)}")
    bad = [_shown(x, quote=True) for x in ports if not (_is_int(x) and 1 <= x <= 65535)]
    if bad:
        raise PreflightOptionError(f"ports must be between 1 and 65535, got {', '.join(bad)}")
    if address is not None and not is_ipv4(address):
        raise PreflightOptionError(f"address must be an IPv4 address, got '{_shown(address)}'")
    if service_address is not None and not is_ipv4(service_address):
        raise PreflightOptionError(f"service_address must be an IPv4 address, got '{_shown(service_address)}'")
    if not _is_list(peer_addresses):
        raise PreflightOptionError(f"peer_addresses must be a list of IPv4 addresses, got {_shown(peer_addresses)}")
    bad = [_shown(a) for a in peer_addresses if not is_ipv4(a)]
    if bad:
        raise PreflightOptionError(f"peer_addresses must be IPv4 addresses, got '{', '.join(bad)}'")


# ---- evidence that could not be gathered -----------------------------------

def tool_missing(check: str, tool: str, package: str = "iproute2") -> Check:
    """``check`` failed because ``tool`` is not on the host."""
    return Check(check, False, f"{tool} not found", f"Install {package}.")


def command_failed(check: str, command: str, rc: int, err: str) -> Check:
    """``check`` failed because ``command`` (as the operator would type it) exited ``rc``."""
    return Check(check, False, f"`{command}` failed (rc={rc}): {(err or '').strip()[:200]}",
                 "Run it on the host and fix what it reports.")


# ---- GPU -------------------------------------------------------------------

def check_gpu_driver(report, error=None) -> Check:
    """nvidia-smi ran and read the driver. ``error`` is an ``NvidiaSmiError``
    (a ``NvidiaSmiFailure`` carries its ``kind`` and ``hint``)."""
    if error is not None:
        kind = getattr(error, "kind", "unreadable_output")
        hint = getattr(error, "hint", None) or (
            "Run nvidia-smi on the host and read its output; if it looks normal, "
            "add it to tests/fixtures/nvidia-smi/ and report it."
        )
        return Check(
            "gpu_driver",
            False,
            f"nvidia-smi failed ({kind}): {error}. GPU count, memory and CUDA were not checked.",
            hint,
        )
    names = ", ".join(f"{g.index} {g.name or '?'}" for g in report.gpus) or "none"
    driver = report.driver_version or "not reported"
    cuda = report.cuda_version or "not reported"
    return Check(
        "gpu_driver", True, f"driver {driver}, CUDA {cuda}; nvidia-smi sees {report.gpu_count} GPU(s): {names}"
    )


def check_gpu_count(report, min_gpus: int) -> Check:
    count = report.gpu_count
    if count >= min_gpus:
        return Check("gpu_count", True, f"{count} GPU(s) visible, {min_gpus} required")
    return Check(
        "gpu_count",
        False,
        f"{count} GPU(s) visible, {min_gpus} required",
        "Compare `nvidia-smi -L` with the hardware; a GPU that fell off the bus shows as an Xid 79 "
        "in `dmesg` and needs a power cycle. Inside a container, pass every GPU in.",
    )


# The kernel prints each value as an unsigned 64-bit number: at most 20 digits.
_MEMINFO_LINE = re.compile(r"([A-Za-z0-9_()]+):[ \t]+([0-9]{1,20})(?:[ \t]+(kB))?[ \t]*")


def parse_meminfo(text: str) -> dict:
    """``/proc/meminfo`` as ``{key: bytes}`` (values are printed in kB).

    A line that is not ``Key: <digits> [kB]`` is skipped. Raises
    :class:`PreflightError` (only) when no readable MemTotal line is left.
    """
    values = {}
    for line in _lines(text):
        match = _MEMINFO_LINE.fullmatch(line)
        if match:
            values[match.group(1)] = int(match.group(2)) * (1024 if match.group(3) else 1)
    if "MemTotal" not in values:
        raise PreflightError("/proc/meminfo has no MemTotal line")
    return values


def check_gpu_memory(report, min_gib: float, meminfo_text: str | None = None):
    """Every GPU has at least ``min_gib``. Return ``(Check, memory_source)``.

    A unified-memory GPU (GB10: nvidia-smi reports ``[N/A]`` / ``Not
    Supported``) is measured by the host's MemTotal instead; ``memory_source``
    is then ``"host meminfo"``, otherwise ``"gpu"``.
    """
    parts, short = [], []
    source = "gpu"
    host_total = None
    for gpu in report.gpus:
        label = f"GPU {gpu.index} {gpu.name or '?'}"
        if gpu.unified_memory or gpu.memory_total_mib is None:
            if not gpu.unified_memory:
                return Check(
                    "gpu_memory",
                    False,
                    f"{label}: nvidia-smi reported no memory total",
                    "Run `nvidia-smi --query-gpu=memory.total --format=csv` on the host and compare.",
                ), None
            source = "host meminfo"
            if host_total is None:
                try:
                    host_total = parse_meminfo(meminfo_text)["MemTotal"]
                except PreflightError as exc:
                    return Check(
                        "gpu_memory",
                        False,
                        f"{label} has unified memory (nvidia-smi: [N/A] / Not Supported) and {exc}",
                        "Check that /proc is mounted and readable on the host.",
                    ), source
            have = host_total
            parts.append(
                f"{label}: unified memory (nvidia-smi reports [N/A] / Not Supported), "
                f"host MemTotal from /proc/meminfo {_gib(have)}"
            )
        else:
            have = gpu.memory_total_mib * 1024 ** 2
            parts.append(f"{label}: {_gib(have)}")
        if have < min_gib * GIB:
            short.append(label)
            parts[-1] += ", too small"
    detail = "; ".join(parts) or "no GPU"
    detail += f" (at least {_num(min_gib)} GiB each)"
    if short:
        return Check(
            "gpu_memory",
            False,
            detail,
            "The model's share of the weights plus its KV cache must fit on each GPU. Use a host with "
            "more GPU memory, or lower min_gpu_memory_gib if the model is known to fit.",
        ), source
    return Check("gpu_memory", True, detail), source


def check_cuda_version(report, min_cuda: str | None) -> Check:
    """The driver supports ``min_cuda``; with no minimum, the version is reported only."""
    have = report.cuda_version
    if min_cuda is None:
        return Check("cuda_version", True, f"the driver supports CUDA {have or 'unknown'}, no minimum set")
    if have is None:
        return Check(
            "cuda_version",
            False,
            f"nvidia-smi's header shows no CUDA version; CUDA {min_cuda} or newer required",
            f"Install a driver whose header reads CUDA Version {min_cuda} or newer (CUDA 12.8 came with the "
            "R570 branch; GB10 ships R580 with CUDA 13.0).",
        )
    if version_at_least(have, min_cuda):
        return Check("cuda_version", True, f"the driver supports CUDA {have}, {min_cuda} required")
    return Check(
        "cuda_version",
        False,
        f"the driver supports CUDA {have}, {min_cuda} required (driver {report.driver_version or '?'})",
        f"Upgrade the NVIDIA driver to a branch that supports CUDA {min_cuda} (12.8 came with R570); "
        "Blackwell GPUs and vLLM's CUDA wheels need it.",
    )


# ---- network ---------------------------------------------------------------

_IP_ADDR_LINE = re.compile(
    r"[0-9]{1,10}:[ \t]+([^ \t]+)[ \t]+inet[ \t]+([0-9]{1,3}(?:\.[0-9]{1,3}){3}/[0-9]{1,2})(?![0-9./])")


def parse_ip_addr(text: str) -> dict:
    """``ip -o -4 addr show`` as ``{ifname: ["10.0.0.11/24", ...]}``.

    Never raises: a line whose address :mod:`ipaddress` refuses (``/99``,
    ``999.1.1.1``, a leading zero) is skipped, so :func:`check_engine_subnet`
    can read every address it returns.
    """
    addresses = {}
    for line in _lines(text):
        match = _IP_ADDR_LINE.match(line)
        if not match:
            continue
        try:
            ipaddress.IPv4Interface(match.group(2))
        except ValueError:
            continue
        name = match.group(1).split("@", 1)[0]
        addresses.setdefault(name, []).append(match.group(2))
    return addresses


def _holder(address: str, addresses: dict) -> str | None:
    for name, cidrs in addresses.items():
        if any(c.split("/", 1)[0] == address for c in cidrs):
            return name
    return None


def check_interface(interface, address, interfaces, addresses: dict) -> Check | None:
    """The engine interface exists and holds the engine address (IPv4).

    ``interfaces`` lists the host's interface names (``/sys/class/net``);
    ``addresses`` is :func:`parse_ip_addr`'s result. With no interface, the
    address alone is looked up; with neither, there is nothing to check.
    """
    if not interface and not address:
        return None
    holder = _holder(address, addresses) if address else None
    if not interface:
        if holder:
            return Check(
                "engine_interface",
                True,
                f"{address} is on {holder}: VLLM_HOST_IP={address}, NCCL_SOCKET_IFNAME={holder}, "
                f"GLOO_SOCKET_IFNAME={holder}",
            )
        return Check(
            "engine_interface",
            False,
            f"the engine address {address} is on no interface of this host",
            "Set address to this host's address on the engine's subnet (`ip -o -4 addr`).",
        )
    fix_name = (
        f" The engine address {address} is on {holder}: set interface, and the engine's NCCL_SOCKET_IFNAME "
        f"and GLOO_SOCKET_IFNAME, to {holder}." if holder and holder != interface else ""
    )
    if interface not in interfaces:
        return Check(
            "engine_interface",
            False,
            f"interface {interface} does not exist; this host has {', '.join(sorted(interfaces)) or 'none'}",
            "Name the interface of the engine's subnet (on a DGX Spark the QSFP link, such as enp1s0f1np1: "
            "see `ibdev2netdev`)." + fix_name,
        )
    own = addresses.get(interface, [])
    if not own:
        return Check(
            "engine_interface",
            False,
            f"interface {interface} has no IPv4 address",
            "Give it its address on the engine's subnet (netplan) and bring it up (`ip link`)." + fix_name,
        )
    if address and address not in [c.split("/", 1)[0] for c in own]:
        where = f"it is on {holder}" if holder else "it is on no interface of this host"
        return Check(
            "engine_interface",
            False,
            f"the engine address {address} is not on {interface} ({', '.join(own)}); {where}",
            (fix_name.strip() if holder else
             "Set address to this host's address on the engine's subnet, or assign it to "
             f"{interface}."),
        )
    ip = address or own[0].split("/", 1)[0]
    return Check(
        "engine_interface",
        True,
        f"{interface} has {', '.join(own)}: VLLM_HOST_IP={ip}, NCCL_SOCKET_IFNAME={interface}, "
        f"GLOO_SOCKET_IFNAME={interface}",
    )


def check_engine_subnet(interface, address, peers, addresses: dict) -> Check | None:
    """Every peer of the engine is on a subnet of the engine interface, so
    Ray, NCCL and Gloo reach it directly and not through the default route."""
    peers = [p for p in peers or [] if p != address]
    if not peers:
        return None
    name = interface or (_holder(address, addresses) if address else None)
    networks = [ipaddress.ip_interface(c).network for c in addresses.get(name, [])] if name else []
    if not networks:
        return Check(
            "engine_subnet",
            False,
            f"cannot check the peers {', '.join(peers)}: no engine interface with an IPv4 address",
            "Fix engine_interface first.",
        )
    away = [p for p in peers if not any(ipaddress.ip_address(p) in n for n in networks)]
    nets = ", ".join(str(n) for n in networks)
    if away:
        return Check(
            "engine_subnet",
            False,
            f"peer(s) {', '.join(away)} not on {name}'s subnet {nets}: traffic to them would leave "
            "through another route",
            "Put every host of the engine on one subnet of the engine interface, or correct their "
            "peer_addresses.",
        )
    return Check("engine_subnet", True, f"peer(s) {', '.join(peers)} on {name}'s subnet {nets}")


def check_service_address(service_address, address, addresses: dict) -> Check | None:
    """The service address (where the API answers the consumers) is on an
    interface of this host. None when it is the engine address, which
    ``engine_interface`` checks."""
    if not service_address or service_address == address:
        return None
    holder = _holder(service_address, addresses)
    if holder:
        return Check("service_address", True, f"{service_address} is on {holder}: the API answers there")
    held = ", ".join(f"{name} {' '.join(cidrs)}" for name, cidrs in sorted(addresses.items())) or "none"
    return Check(
        "service_address",
        False,
        f"the service address {service_address} is on no interface of this host (it has {held})",
        "Set service_address to this host's address on the network its consumers reach it on (the LAN), "
        "or leave it unset on a one-network site.",
    )


@dataclass
class Link:
    """One interface from ``ip -o link show``."""

    mtu: int
    up: bool  # administratively up and with a carrier (UP and LOWER_UP)
    state: str


# `3: eth1@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode ...`. An
# MTU is at most 7 digits here (Linux's largest is 65536; loopback's is 65536 too).
_IP_LINK_LINE = re.compile(
    r"[0-9]{1,10}:[ \t]+([^ \t:]{1,64}):[ \t]+<([A-Z0-9_,-]{0,256})>[ \t]+mtu[ \t]+([0-9]{1,7})(?![0-9])")
_LINK_STATE = re.compile(r"[A-Z]{1,20}")


def parse_ip_link(text: str) -> dict:
    """``ip -o link show`` as ``{ifname: Link}``. Never raises; a line it
    cannot read is skipped."""
    links = {}
    for line in _lines(text):
        match = _IP_LINK_LINE.match(line)
        if not match:
            continue
        flags = match.group(2).split(",")
        name = match.group(1).split("@", 1)[0]
        words = line[match.end():].split()
        state = next((b for a, b in zip(words, words[1:]) if a == "state"), "")
        links[name] = Link(int(match.group(3)), "UP" in flags and "LOWER_UP" in flags,
                           state if _LINK_STATE.fullmatch(state) else "UNKNOWN")
    return links


def check_link_up(interface, links: dict) -> Check | None:
    """The engine interface is up with a carrier: a pulled cable or a peer's
    port down leaves it without one. None when there is no interface to check
    (``engine_interface`` says why)."""
    link = links.get(interface) if interface else None
    if link is None:
        return None
    if link.up:
        return Check("engine_link", True, f"{interface} is up (mtu {link.mtu})")
    return Check(
        "engine_link",
        False,
        f"{interface} is down (state {link.state}): no traffic reaches the engine's peers",
        f"Check the cable and the peer's end, then bring it up (`ip link set dev {interface} up`, or its "
        "netplan file and `netplan apply`).",
    )


def check_link_mtu(mtus: dict, reference: str, engine: str = "") -> Check:
    """Both ends of an engine's link agree on the MTU.

    ``mtus`` maps each host to ``(interface, mtu)``, ``None`` when its probe
    read none. Frames larger than the far end takes are dropped: the small
    packets of a TCP handshake pass, and Ray, NCCL and Gloo then stall."""
    label = f"engine {engine}: " if engine else ""
    missing = [h for h, m in mtus.items() if m is None]
    if missing:
        return Check("link_mtu", False, f"{label}no MTU read from {', '.join(missing)}",
                     "Their engine interface is missing or their probe failed; fix engine_interface first.")
    if len(mtus) < 2:
        return Check("link_mtu", True, f"{label}one host ({reference}), nothing to compare")
    ends = ", ".join(f"{h} {i} mtu {m}" for h, (i, m) in mtus.items())
    if len({m for _, m in mtus.values()}) == 1:
        return Check("link_mtu", True, f"{label}{ends}")
    top = max(m for _, m in mtus.values())
    return Check(
        "link_mtu",
        False,
        f"{label}the link's ends disagree on the MTU: {ends}",
        f"Give the link one MTU on every host (netplan `mtu: {top}` on the interface, or "
        f"`ip link set dev IFACE mtu {top}`): frames one end sends are dropped by the other.",
    )


# ---- ports -----------------------------------------------------------------

@dataclass
class Listener:
    address: str
    port: int
    processes: list = field(default_factory=list)  # [(name, pid)]


# The name is the process's comm (15 characters at most; 256 leave room for escapes), so a
# hostile run of escapes never stacks a backtracking point per character. Linux pids stop at
# 2**22 (pid_max): 7 digits; ten leave room and stay far below int()'s limit.
_SS_PROCESS = re.compile(r'\("((?:[^"\\]|\\.){0,256})",pid=([0-9]{1,10})(?![0-9])')
_ASCII_NUMBER = re.compile(r"[0-9]+")


def parse_ss(text: str) -> list:
    """``ss -Htln`` / ``ss -Htlnp`` (no header) as :class:`Listener` s.

    The process column appears only with ``-p`` and only for sockets the
    caller may inspect (root sees all). A listener whose port is not a port
    number (0 to 65535 in ASCII digits) is skipped, a process whose pid is not
    a pid is left out. Raises :class:`PreflightError` (only) for a line whose
    Recv-Q is not a number: a header or another program's output.
    """
    listeners = []
    for line in _lines(text):
        parts = line.split()
        if len(parts) < 5:
            continue
        if not _ASCII_NUMBER.fullmatch(parts[1]):
            raise PreflightError(f"not `ss -Htln` output (a header or another format?): {line.strip()[:200]}")
        local = parts[3]
        host, _, port = local.rpartition(":")
        if not (_ASCII_NUMBER.fullmatch(port) and len(port) <= 5 and int(port) <= 65535):
            continue
        procs = [(m.group(1), int(m.group(2))) for m in _SS_PROCESS.finditer(" ".join(parts[5:]))]
        listeners.append(Listener(address=host, port=int(port), processes=procs))
    return listeners


def cgroup_units(text: str) -> list:
    """The systemd units (``*.service``, ``*.scope``) on a ``/proc/<pid>/cgroup`` path,
    in order, each once. Never raises (no units for anything but a string)."""
    units = {}  # a dict keeps the order and finds a repeat in constant time
    for line in _lines(text):
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            if part.endswith((".service", ".scope")):
                units.setdefault(part, None)
    return list(units)


def check_ports(ports, listeners, units_by_pid: dict, owner_units) -> Check | None:
    """The required ports are free, or held by the toolkit's own units.

    A listener counts as the toolkit's own when one of its processes runs in
    the cgroup of a unit in ``owner_units`` (``ray.service``,
    ``vllm.service``): on a re-run Ray and vLLM hold these ports themselves.
    """
    if not ports:
        return None
    owners = set(owner_units or [])
    free, ours, busy = [], [], []
    for port in ports:
        held = [lst for lst in listeners if lst.port == port]
        if not held:
            free.append(str(port))
            continue
        procs = [p for lst in held for p in lst.processes]
        if not procs:
            busy.append(f"{port} held by a process ss did not name (run the check as root)")
            continue
        unit_names = {pid: units_by_pid.get(pid, []) for _, pid in procs}
        foreign = [(n, pid) for n, pid in procs if not owners.intersection(unit_names[pid])]
        if foreign:
            who = ", ".join(
                f"{n} (pid {pid}{', ' + ' '.join(unit_names[pid]) if unit_names[pid] else ''})" for n, pid in foreign
            )
            busy.append(f"{port} held by {who}")
        else:
            name, pid = procs[0]
            unit = next(u for u in unit_names[pid] if u in owners)
            ours.append(f"{port} held by the toolkit's own {unit} ({name}, pid {pid})")
    parts = busy + ours + ([", ".join(free) + " free"] if free else [])
    detail = "; ".join(parts)
    if busy:
        return Check(
            "ports_free",
            False,
            detail,
            "Stop the other service, or move the engine to free ports (Ray's GCS port, the vLLM API port, "
            "the mp master port) and list them in ports. See `ss -Htlnp 'sport = :PORT'`.",
        )
    return Check("ports_free", True, detail)


# ---- disk ------------------------------------------------------------------

# A model directory has a few dozen files; stop counting a path that is not one.
STAGED_FILES_LIMIT = 20000

def check_disk(path: str, measured_path: str, free_bytes: int, staged_bytes: int, min_gib: float) -> Check:
    """Room for the model at ``path``: free space plus what is already staged
    there (a re-run must not fail because the model itself fills the disk)."""
    where = "" if measured_path == path else f" (not there yet: measured on {measured_path})"
    have = free_bytes + staged_bytes
    detail = (
        f"{path}{where}: {_gib(free_bytes)} free + {_gib(staged_bytes)} already staged = {_gib(have)}, "
        f"{_num(min_gib)} GiB required"
    )
    if have >= min_gib * GIB:
        return Check("disk_free", True, detail)
    return Check(
        "disk_free",
        False,
        detail,
        "Free space on that filesystem, or stage the model elsewhere and point disk_path at it.",
    )


def staged_bytes(path: str, limit: int = STAGED_FILES_LIMIT) -> int | None:
    """Bytes of the regular files under ``path`` (links not followed, so a hub
    cache's snapshot links do not count twice); None past ``limit`` files."""
    if not os.path.isdir(path):
        st = os.lstat(path)
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            files += 1
            if files > limit:
                return None
            try:
                st = os.lstat(os.path.join(root, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def nearest_existing(path: str) -> str:
    """``path``, or its nearest parent that exists: the filesystem a model not staged yet will land on."""
    measured = path
    while not os.path.exists(measured) and measured != os.path.dirname(measured):
        measured = os.path.dirname(measured)
    return measured


def check_disk_path(disk_path: str, min_gib: float, limit: int = STAGED_FILES_LIMIT) -> Check:
    """:func:`check_disk` for ``disk_path``, measured on this host: the free
    space of its filesystem and what is already staged at it.

    A relative path (no filesystem to measure: the module's working directory
    is a temporary one) or a filesystem that cannot be measured is a failed
    check, not an error."""
    if not os.path.isabs(disk_path):
        return Check("disk_free", False, f"disk_path {disk_path} is not an absolute path",
                     "Set disk_path to the absolute path the model is staged at.")
    path = os.path.normpath(disk_path)
    measured = nearest_existing(path)
    try:
        st = os.statvfs(measured)
    except OSError as exc:
        return Check("disk_free", False, f"cannot measure the filesystem of {path} at {measured}: {exc}",
                     "Check that the path is readable by the user the module runs as.")
    staged = staged_bytes(path, limit) if measured == path else 0
    if staged is None:
        return Check("disk_free", False, f"{path} holds more than {limit} files; it is not a model directory",
                     "Point disk_path at the model's own directory.")
    return check_disk(path, measured, st.f_bavail * st.f_frsize, staged, min_gib)


# ---- clock -----------------------------------------------------------------

def check_clock_skew(offsets: dict, reference: str, max_skew_s: float, engine: str = "") -> Check:
    """Clocks of one engine's hosts agree within ``max_skew_s`` seconds.

    ``offsets`` maps each host to its clock minus the controller's when the
    probe was sent (``None``: no sample). The dispatch delay is in every
    offset alike, so host-to-host differences are the skew. Measured against
    ``reference`` (the engine's head).
    """
    label = f"engine {engine}: " if engine else ""
    missing = [h for h, o in offsets.items() if o is None]
    if missing:
        return Check(
            "clock_skew",
            False,
            f"{label}no clock sample from {', '.join(missing)}",
            "Their preflight probe did not run or failed; fix that first.",
        )
    if reference not in offsets:
        return Check("clock_skew", False, f"{label}no clock sample from the head {reference}",
                     "The head's preflight probe did not run; fix that first.")
    others = {h: o - offsets[reference] for h, o in offsets.items() if h != reference}
    if not others:
        return Check("clock_skew", True, f"{label}one host ({reference}), nothing to compare")
    parts = [f"{h} {s:+.3f} s" for h, s in others.items()]
    worst = max(abs(s) for s in others.values())
    detail = f"{label}{', '.join(parts)} against the head {reference} (at most {_num(max_skew_s)} s)"
    if worst <= max_skew_s:
        return Check("clock_skew", True, detail)
    return Check(
        "clock_skew",
        False,
        detail,
        "Synchronise the clocks from one NTP source on every host (`timedatectl set-ntp true`, "
        "`chronyc tracking` shows the offset); skewed clocks scramble the engine's logs and break TLS "
        "and token expiry checks.",
    )


# ---- the verdict -----------------------------------------------------------

def summarize(checks) -> tuple:
    """``(ok, failed_check_names, message)``; the message lists every failure."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return True, [], f"all {len(checks)} preflight checks passed"
    lines = [f"{len(failed)} of {len(checks)} preflight checks failed:"]
    for c in failed:
        lines.append(f"- {c.check}: {c.detail}")
        if c.hint:
            lines.append(f"  fix: {c.hint}")
    return False, [c.check for c in failed], "\n".join(lines)


def render_report(checks) -> list:
    """One line per check (``PASS``/``FAIL``), a ``fix:`` line under each failure."""
    lines = []
    for c in checks:
        lines.append(f"{'PASS' if c.ok else 'FAIL'} {c.check}: {c.detail}")
        if not c.ok and c.hint:
            lines.append(f"     fix: {c.hint}")
    return lines


def check_from_dict(data: dict) -> Check:
    """A check back from its dict (as registered by the module).

    Raises KeyError when ``check`` or ``ok`` is missing and TypeError for
    anything else that is not a check's dict (the report filters catch both):
    ``ok`` must be a boolean, since the string "false" would read as passed.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"a check is a dict, got {_shown(data)}")
    name, ok = data["check"], data["ok"]
    if not isinstance(name, str):
        raise TypeError(f"a check's name is a string, got {_shown(name, quote=True)}")
    if not isinstance(ok, bool):
        raise TypeError(f"check {name[:80]}: ok must be true or false, got {_shown(ok, quote=True)}")
    text = {}
    for key in ("detail", "hint"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"check {name[:80]}: {key} must be a string, got {_shown(value, quote=True)}")
        text[key] = value or ""
    return Check(name, ok, text["detail"], text["hint"])
