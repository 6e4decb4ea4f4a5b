"""The network checks of a host's preflight: the engine interface and its address
(``ip -o -4 addr``), the peers' subnet, the service address, and the link's state
and MTU (``ip -o link``). Pure; see :mod:`gpu_preflight` for the verdict's shape."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ansible.module_utils.host.gpu_preflight import Check, program_lines

_IP_ADDR_LINE = re.compile(
    r"[0-9]{1,10}:[ \t]+([^ \t]+)[ \t]+inet[ \t]+([0-9]{1,3}(?:\.[0-9]{1,3}){3}/[0-9]{1,2})(?![0-9./])")


def parse_ip_addr(text: str) -> dict:
    """``ip -o -4 addr show`` as ``{ifname: ["10.0.0.11/24", ...]}``.

    Never raises: a line whose address :mod:`ipaddress` refuses (``/99``,
    ``999.1.1.1``, a leading zero) is skipped, so :func:`check_engine_subnet`
    can read every address it returns.
    """
    addresses = {}
    for line in program_lines(text):
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
    for line in program_lines(text):
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
