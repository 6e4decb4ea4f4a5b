# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which network transport NCCL chose on each host, read from its own log at INFO.

NCCL says it at every communicator's start (``NCCL_DEBUG=INFO``), on each host
(under Ray, the head's log carries the workers' lines too):

- ``NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB ...``: the RDMA
  devices it found; with an RDMA plugin, ``NET/IB : Made virtual device [0]
  name=rocep1s0f1 speed=200000 ...``;
- ``NET/Socket : Using [0]ens3:172.31.12.210<0>``: the socket interfaces;
- ``Using network IB`` / ``IBext`` / ``Socket``: the one it uses (NCCL 2.12 and
  newer), and each channel's ``via NET/IB/0`` or ``via NET/Socket/0``;
- why there is no RDMA: ``NET/IB : No device found.``, ``NCCL WARN Failed to open
  libibverbs.so``, ``NCCL_IB_DISABLE set by environment to 1.``.

The field's silent slow-down: RDMA devices configured (``NCCL_IB_HCA``), and NCCL
quietly on TCP sockets (docs/design/spark-field-facts/06-rdma-link-formats-and-
spark-facts.md). :func:`check` says so, naming the host, the devices and the cause.

Real logs in tests/fixtures/gpu-field/nccl/. Linear in its input; NcclLogError is
the only exception raised.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible.module_utils.shared.text_input import text_input

MAX_TEXT = 256 * 1024 * 1024
_MARKS = (" NCCL INFO ", " NCCL WARN ")
# Bounded quantifiers only: each match attempt is short, the scan linear.
_IB_DEVICE = re.compile(r"\[(\d{1,3})\]([A-Za-z0-9_.-]{1,64}):(\d{1,3})/(IB|RoCE)", re.ASCII)
_VIRTUAL = re.compile(r"NET/IB ?: Made virtual device \[\d{1,3}\] name=([A-Za-z0-9_.-]{1,64}) speed=(\d{1,9})",
                      re.ASCII)
_SOCKET = re.compile(r"\[(\d{1,3})\]([A-Za-z0-9_.@-]{1,64}):([0-9A-Fa-f.:%a-z_-]{1,64})<\d{1,3}>", re.ASCII)
_VIA = re.compile(r"via NET/(IBext|IB|Socket)(?:_v\d{1,3})?/\d{1,3}", re.ASCII)
_HCA = re.compile(r"NCCL_IB_HCA set (?:by environment )?to ([^\s]{1,256})", re.ASCII)

RDMA, SOCKET = "rdma", "socket"


class NcclLogError(ValueError):
    """The text is no log NCCL's lines could be read from (not text, or too large)."""


@dataclass
class HostTransport:
    """What one host's NCCL said about its network."""
    host: str
    network: str | None = None                         # "IB", "IBext", "Socket" (Using network ...)
    rdma_devices: list[str] = field(default_factory=list)       # "mlx5_10:1/RoCE", "rocep1s0f1"
    rdma_speeds_mbps: dict[str, int] = field(default_factory=dict)
    socket_interfaces: list[str] = field(default_factory=list)  # "ens3:172.31.12.210"
    channels: set[str] = field(default_factory=set)             # "IB", "IBext", "Socket"
    hca: str | None = None                             # NCCL_IB_HCA as NCCL read it
    reasons: list[str] = field(default_factory=list)   # why no RDMA, as NCCL said it

    @property
    def transport(self) -> str | None:
        """RDMA or sockets, from what NCCL says it uses first, then from its channels,
        then from which devices it found; None when it said nothing either way."""
        if self.network:
            return SOCKET if self.network == "Socket" else RDMA if self.network.startswith("IB") else None
        if self.channels:
            return RDMA if self.channels & {"IB", "IBext"} else SOCKET
        if self.rdma_devices:
            return RDMA
        if self.socket_interfaces:
            return SOCKET
        return None


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _split(line: str) -> tuple[str, str, str] | None:
    """(host, INFO or WARN, message) of an NCCL line: ``host:pid:tid [rank] [file:line ]NCCL INFO msg``,
    with whatever vLLM or Ray put before it."""
    for mark in _MARKS:
        at = line.find(mark)
        if at >= 0:
            break
    else:
        return None
    words = line[:at].split()
    # The rank's "[n]" is the last word, or the one before a WARN's "file.cc:63".
    for back in (1, 2):
        if len(words) > back and words[-back].startswith("[") and words[-back].endswith("]"):
            host = words[-back - 1].split(":", 1)[0][:128]
            return host, mark.strip().split()[1], line[at + len(mark):]
    return None


def read(text: str | bytes) -> dict[str, HostTransport]:
    """Each host's NCCL network transport, by host name (NCCL's own prefix), in the log's order."""
    text = text_input(text, "the log (read the engine's start only)", MAX_TEXT, NcclLogError)
    hosts: dict[str, HostTransport] = {}
    for raw in text.replace("\r", "\n").split("\n"):
        parts = _split(raw)
        if parts is None:
            continue
        host, level, msg = parts
        h = hosts.setdefault(host, HostTransport(host))
        if level == "WARN":
            if "Failed to open libibverbs" in msg:
                _add(h.reasons, "libibverbs is missing (NCCL WARN Failed to open libibverbs.so)")
            continue
        if msg.startswith("Using network "):
            words = msg[len("Using network "):].split(None, 1)
            h.network = words[0][:32] if words else None
        elif msg.startswith(("NET/IB : Using ", "NET/IB: Using ")):
            for _, name, port, link in _IB_DEVICE.findall(msg):
                _add(h.rdma_devices, f"{name}:{port}/{link}")
        elif msg.startswith(("NET/IB : Made virtual device", "NET/IB: Made virtual device")):
            m = _VIRTUAL.match(msg)
            if m:
                _add(h.rdma_devices, m.group(1))
                h.rdma_speeds_mbps[m.group(1)] = int(m.group(2))
        elif msg.startswith(("NET/Socket : Using ", "NET/Socket: Using ")):
            for _, name, address in _SOCKET.findall(msg):
                _add(h.socket_interfaces, f"{name}:{address}")
        elif msg.startswith(("NET/IB : No device found", "NET/IB: No device found")):
            _add(h.reasons, "no RDMA device found (NET/IB : No device found)")
        elif msg.startswith("NCCL_IB_DISABLE set by environment to 1"):
            _add(h.reasons, "NCCL_IB_DISABLE=1 in its environment")
        elif msg.startswith("NCCL_NET set by environment to Socket"):
            _add(h.reasons, "NCCL_NET=Socket in its environment")
        elif msg.startswith("NCCL_IB_HCA set"):
            m = _HCA.match(msg)
            if m:
                h.hca = m.group(1).rstrip(".")
        elif "via NET/" in msg:
            for kind in _VIA.findall(msg):
                h.channels.add(kind)
    return hosts


def check(hosts: dict[str, HostTransport], rdma_wanted: bool) -> tuple[bool | None, str]:
    """Whether NCCL runs where the inventory wants it: (True, why) when every host that
    said anything uses RDMA (or RDMA is not wanted); (False, what to do) when a host fell
    back to sockets; (None, why) when the log says nothing about NCCL's network."""
    said = {name: h for name, h in hosts.items() if h.transport}
    if not said:
        return None, ("NCCL said nothing about its network in this log: start the engine with NCCL_DEBUG=INFO "
                      "(vllm_server_environment) to read which transport it chose")
    if not rdma_wanted:
        return True, "RDMA is not configured; NCCL uses " + ", ".join(
            f"{name}: {h.transport}" for name, h in said.items())
    slow = [h for h in said.values() if h.transport == SOCKET]
    if not slow:
        return True, "NCCL uses RDMA on every host: " + "; ".join(
            f"{name}: {', '.join(h.rdma_devices) or h.network}" for name, h in said.items())
    parts = []
    for h in slow:
        why = "; ".join(h.reasons) or "NCCL gave no reason at INFO"
        wanted = f" (NCCL_IB_HCA={h.hca})" if h.hca else ""
        parts.append(f"{h.host} uses TCP sockets{wanted} over {', '.join(h.socket_interfaces) or 'its sockets'}:"
                     f" {why}")
    return False, ("RDMA is configured but NCCL fell back to sockets, which slows tensor parallel silently: "
                   + " | ".join(parts) + ". Check the RDMA devices (ibstat: State Active, Link layer Ethernet for "
                   "RoCE), that libibverbs is installed on the host, and that NCCL_IB_DISABLE is unset")
