"""What the Ray firewall (roles/ray_cluster, ray-firewall.nft) admits and resets.

Pure logic: the role hands in the engine's peers and ports and the host's
ephemeral port range as the kernel prints it; :func:`rules` returns what the
nftables template writes.

Ray binds its GCS, raylet, agents and workers on every address whatever
``--node-ip-address`` says: the GCS and client ports, the worker range, and
random ports the kernel picks from its ephemeral range. New connections to
those from anywhere but the engine's hosts (and loopback) are reset; every
other port on the host is left alone. Bad input raises
:class:`FirewallError`, and nothing else is raised.
"""
from __future__ import annotations

import ipaddress
import re
import typing as t

# Ray's defaults that no flag of ray_cluster moves: the client server and the
# dashboard agent's HTTP port.
RAY_CLIENT_PORT = 10001
RAY_DASHBOARD_AGENT_PORT = 52365
# /proc/sys/net/ipv4/ip_local_port_range: two numbers, tab-separated.
_RANGE = re.compile(r"[ \t]*([0-9]{1,5})[ \t]+([0-9]{1,5})[ \t]*\n?")


class FirewallError(ValueError):
    """The firewall's input is not usable; the message says which part."""


def ephemeral_range(text: t.Any) -> tuple[int, int]:
    """The kernel's ephemeral port range from ``ip_local_port_range``'s text."""
    if not isinstance(text, str) or len(text) > 64:
        raise FirewallError("ip_local_port_range must be two port numbers, got %r" % (str(text)[:64],))
    m = _RANGE.fullmatch(text)
    if not m:
        raise FirewallError("ip_local_port_range must be two port numbers, got %r" % (text,))
    low, high = int(m.group(1)), int(m.group(2))
    if not 1 <= low <= high <= 65535:
        raise FirewallError("ip_local_port_range %d-%d is not a port range" % (low, high))
    return low, high


def _port(name: str, value: t.Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise FirewallError("%s must be a port number, got %r" % (name, value))
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= 65535:
        raise FirewallError("%s must be a port number from 1 to 65535, got %r" % (name, value))
    return int(text)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _subtract(spans: list[tuple[int, int]], holes: list[int]) -> list[tuple[int, int]]:
    for hole in sorted(set(holes)):
        cut = []
        for low, high in spans:
            if low <= hole <= high:
                cut += [s for s in ((low, hole - 1), (hole + 1, high)) if s[0] <= s[1]]
            else:
                cut.append((low, high))
        spans = cut
    return spans


def rules(peers: t.Any, ray_port: t.Any, worker_ports: t.Any, ephemeral: t.Any, open_ports: t.Any = (),
          engine_ports: t.Any = ()) -> dict:
    """{peers4, peers6, reset, open} for the template.

    ``peers`` are the engine's host addresses (IPv4 or IPv6); ``worker_ports``
    is (min, max) of Ray's worker range; ``ephemeral`` the text of
    ``ip_local_port_range``; ``open_ports`` are ports that stay reachable from
    anywhere even inside those ranges (vLLM's API, ssh, the operator's own);
    ``engine_ports`` are the engine's other ports between its hosts only (the
    mp backend's master port, where torch's store listens on every address).
    ``reset`` and ``open`` are nftables set elements (``"6379"``,
    ``"20100-20999"``), merged, with the open ports cut out of ``reset``.
    """
    if not isinstance(peers, (list, tuple)) or not peers:
        raise FirewallError("the engine's peers must be a non-empty list of addresses, got %r" % (peers,))
    v4, v6 = [], []
    for p in peers:
        try:
            address = ipaddress.ip_address(p.strip() if isinstance(p, str) else p)
        except ValueError:
            raise FirewallError("a peer's address must be an IP address, got %r" % (p,)) from None
        (v4 if address.version == 4 else v6).append(str(address))
    if not isinstance(worker_ports, (list, tuple)) or len(worker_ports) != 2:
        raise FirewallError("Ray's worker ports must be (min, max), got %r" % (worker_ports,))
    wmin, wmax = (_port("ray_cluster_min_worker_port", worker_ports[0]),
                  _port("ray_cluster_max_worker_port", worker_ports[1]))
    if wmin > wmax:
        raise FirewallError("ray_cluster_min_worker_port %d is above ray_cluster_max_worker_port %d" % (wmin, wmax))
    if not isinstance(open_ports, (list, tuple)):
        raise FirewallError("the open ports must be a list of port numbers, got %r" % (open_ports,))
    opened = sorted({_port("an open port", p) for p in open_ports})
    gcs = _port("ray_cluster_port", ray_port)
    if gcs in opened:
        raise FirewallError("port %d is Ray's GCS and cannot also be open to everyone" % gcs)
    if not isinstance(engine_ports, (list, tuple)):
        raise FirewallError("the engine's ports must be a list of port numbers, got %r" % (engine_ports,))
    own = sorted({_port("an engine port", p) for p in engine_ports})
    both = sorted(set(own) & set(opened))
    if both:
        raise FirewallError("port %d is the engine's own and cannot also be open to everyone" % both[0])
    spans = [(gcs, gcs), (RAY_CLIENT_PORT, RAY_CLIENT_PORT), (RAY_DASHBOARD_AGENT_PORT, RAY_DASHBOARD_AGENT_PORT),
             (wmin, wmax), ephemeral_range(ephemeral)] + [(p, p) for p in own]
    reset = _subtract(_merge(spans), opened)
    fmt = lambda s: str(s[0]) if s[0] == s[1] else "%d-%d" % s  # noqa: E731
    return {"peers4": sorted(set(v4)), "peers6": sorted(set(v6)), "reset": [fmt(s) for s in reset],
            "open": [str(p) for p in opened]}
