# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA devices NCCL is told to use (``NCCL_IB_HCA``), and whether each one's port
is up: read from ``ibstat`` (infiniband-diags), checked before a start.

NCCL skips a device that is down and falls back to TCP sockets without a word at
the default log level, so TP2 slows silently and the prefill diagnosis blames the
engine (issue 43). A DGX Spark's ConnectX-7 shows each physical port as two RoCE
devices (``rocep1s0f0`` and ``roceP2p1s0f0``), and an uncabled twin reads ``State:
Down``, ``Physical state: Disabled``, ``Rate: 40`` (tests/fixtures/gpu-field/rdma/,
each file's first line names its public source).

Linear in its input; RdmaError is the only exception raised.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ansible.module_utils.shared.text_input import text_input

MAX_TEXT = 16 * 1024 * 1024
_CA = re.compile(r"CA '([A-Za-z0-9_.-]{1,64})'$", re.ASCII)
_PORT = re.compile(r"Port ([0-9]{1,3}):$", re.ASCII)
_FIELD = re.compile(r"(State|Physical state|Rate|Link layer|Firmware version): ?(.{0,64})$", re.ASCII)
_RATE = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,3})?$", re.ASCII)
_HCA_ITEM = re.compile(r"([A-Za-z0-9_.-]{1,64})(?::([0-9]{1,3}))?$", re.ASCII)


class RdmaError(ValueError):
    """Not ibstat's output, or an NCCL_IB_HCA that is no device list."""


@dataclass
class Port:
    device: str
    port: int
    state: str | None = None            # "Active", "Down", "Init", ...
    physical_state: str | None = None   # "LinkUp", "Disabled", "Polling", ...
    rate_gbps: float | None = None
    link_layer: str | None = None       # "Ethernet" (RoCE) or "InfiniBand"
    firmware: str | None = None


def read_ibstat(text: str | bytes) -> list[Port]:
    """Every port of every CA ``ibstat`` lists, in its order."""
    ports: list[Port] = []
    device, firmware = None, None
    for raw in text_input(text, "ibstat's output", MAX_TEXT, RdmaError).split("\n"):
        line = raw.strip()
        if not line or len(line) > 200:
            continue
        m = _CA.match(line)
        if m:
            device, firmware = m.group(1), None
            continue
        if device is None:
            continue
        m = _PORT.match(line)
        if m:
            ports.append(Port(device, int(m.group(1)), firmware=firmware))
            continue
        m = _FIELD.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "Firmware version":
            firmware = value or None
            continue
        if not ports or ports[-1].device != device:
            continue
        port = ports[-1]
        if key == "State":
            port.state = value or None
        elif key == "Physical state":
            port.physical_state = value or None
        elif key == "Link layer":
            port.link_layer = value or None
        elif key == "Rate":
            port.rate_gbps = float(value) if _RATE.match(value) else None
    if not ports:
        raise RdmaError("no CA port in the output: run ibstat (infiniband-diags) on the host")
    return ports


def parse_hca(value: str) -> tuple[bool, list[tuple[str, int | None]], bool]:
    """NCCL_IB_HCA as NCCL reads it: (exclude: a leading ^, [(device, port or None)], exact:
    a leading = matches whole names, else each name is a prefix)."""
    if not isinstance(value, str) or not value.strip():
        raise RdmaError("NCCL_IB_HCA must name devices (mlx5_0:1,mlx5_1 or =rocep1s0f0), got %r" % (value,))
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    items = []
    for part in text.split(","):
        m = _HCA_ITEM.match(part.strip())
        if not m:
            raise RdmaError("NCCL_IB_HCA has %r, which is no device[:port]: write it as "
                            "mlx5_0:1,mlx5_1 (or =name for whole names, ^name to exclude)" % part.strip()[:80])
        items.append((m.group(1), int(m.group(2)) if m.group(2) else None))
    return exclude, items, exact


def wanted(ports: list[Port], hca: str) -> tuple[list[Port], list[str]]:
    """The ports NCCL_IB_HCA selects, and the names it lists that no port matches."""
    exclude, items, exact = parse_hca(hca)

    def hit(port: Port, name: str, number: int | None) -> bool:
        same = port.device == name if exact else port.device.startswith(name)
        return same and (number is None or number == port.port)

    if exclude:
        return [p for p in ports if not any(hit(p, n, k) for n, k in items)], []
    chosen = [p for p in ports if any(hit(p, n, k) for n, k in items)]
    missing = [n + (f":{k}" if k else "") for n, k in items if not any(hit(p, n, k) for p in ports)]
    return chosen, missing


def problems(ports: list[Port], hca: str, link_layer: str = "Ethernet", min_rate_gbps: float = 0.0) -> list[str]:
    """What keeps NCCL off a device NCCL_IB_HCA names, one sentence each; empty when every
    selected port is Active, on ``link_layer``, at ``min_rate_gbps`` or more."""
    chosen, missing = wanted(ports, hca)
    found = ", ".join(sorted({p.device for p in ports}))
    out = [f"NCCL_IB_HCA names {name}, which ibstat does not list (it lists {found})" for name in missing]
    if not chosen and not missing:
        out.append(f"NCCL_IB_HCA={hca} selects none of the ports ibstat lists ({found})")
    for p in chosen:
        name = f"{p.device} port {p.port}"
        if p.state != "Active":
            out.append(f"{name} is {p.state or 'in no state'} ({p.physical_state or 'physical state unknown'}):"
                       " NCCL skips it and may fall back to sockets; check its cable and `ip link`")
        elif p.link_layer != link_layer:
            out.append(f"{name} runs {p.link_layer or 'no link layer'}, not {link_layer}")
        elif min_rate_gbps and (p.rate_gbps is None or p.rate_gbps < min_rate_gbps):
            out.append(f"{name} links at {p.rate_gbps if p.rate_gbps is not None else 'an unknown rate'} Gb/s,"
                       f" under {min_rate_gbps:g}")
    return out
