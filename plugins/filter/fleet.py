"""Filters that turn the inventory into engines.

An engine (a TP group) is the set of hosts in the engines group that share a
``vllm_fleet_engine`` name; its rank-0 host is the head (Ray head, ``vllm
serve``). Kept self-contained: filter plugins cannot import the project's
module_utils through ``ansible.module_utils``.
"""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError


def _address(hv: dict, name: str) -> str:
    return str(hv.get("vllm_fleet_address") or hv.get("ansible_host") or name)


def _rank(value):
    """A non-negative integer rank, or None. The same rule as the preflight
    (``^[0-9]+$``): int() alone would turn 1.5 into 1 and True into 1."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        return int(value)
    return None


def engine_peers(hosts, hostvars, engine):
    """Hosts of ``engine`` as a rank-sorted list of {name, rank, address}."""
    peers = []
    for name in hosts or []:
        hv = hostvars[name]
        if str(hv.get("vllm_fleet_engine", "")) != str(engine):
            continue
        rank = _rank(hv.get("vllm_fleet_rank"))
        if rank is None:
            raise AnsibleFilterError(
                f"host {name} of engine {engine} has no integer vllm_fleet_rank"
                f" (got {hv.get('vllm_fleet_rank')!r}); give the head 0 and the other hosts 1, 2, ..."
            )
        peers.append({"name": name, "rank": rank, "address": _address(hv, name)})
    peers.sort(key=lambda p: p["rank"])
    return peers


def engine_names(hosts, hostvars):
    """The distinct engine names among ``hosts``, in inventory order."""
    seen = []
    for name in hosts or []:
        engine = hostvars[name].get("vllm_fleet_engine")
        if engine is not None and engine not in seen:
            seen.append(engine)
    return seen


def engine_heads(hosts, hostvars):
    """One {engine, name, rank, address} per engine: its rank-0 host."""
    heads = []
    for engine in engine_names(hosts, hostvars):
        peers = engine_peers(hosts, hostvars, engine)
        if not peers or peers[0]["rank"] != 0:
            raise AnsibleFilterError(f"engine {engine} has no host with vllm_fleet_rank 0")
        heads.append(dict(peers[0], engine=engine))
    return heads


def vllm_argv(flags):
    """Render a dict of ``vllm serve`` flags (argparse dest names) as argv.

    ``True`` gives ``--flag``, ``False`` gives ``--no-flag``, ``None`` drops
    the flag, a dict or list is passed as compact JSON with sorted keys;
    insertion order is kept.
    """
    import json

    argv = []
    for dest, value in (flags or {}).items():
        opt = "--" + str(dest).replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(opt)
        elif value is False:
            argv.append("--no-" + opt[2:])
        elif isinstance(value, (dict, list, tuple)):
            argv += [opt, json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            argv += [opt, str(value)]
    return argv


_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@")
# systemd.syntax(7) "Quoting": C escapes inside a quoted item. A raw newline
# would end the ExecStart= line, so control characters must be escaped.
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r",
              "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _escape(c: str) -> str:
    if c in _C_ESCAPES:
        return _C_ESCAPES[c]
    if c == "%":  # specifiers (systemd.unit(5)) are expanded on the whole line first
        return "%%"
    if c == "$":  # environment variables are expanded in each argument at exec time
        return "$$"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return "\\x%02x" % ord(c)
    return c


def systemd_quote(arg):
    """Quote one word for a systemd Exec line (systemd.service(5), "Command
    lines"): safe words stay bare, others are double-quoted with C escapes,
    ``%%`` for ``%`` and ``$$`` for ``$``."""
    arg = str(arg)
    if "\0" in arg:
        raise AnsibleFilterError(f"systemd_quote: {arg!r} contains a NUL byte, which no argument can carry")
    if arg and all(c in _SAFE for c in arg):
        return arg
    return '"' + "".join(_escape(c) for c in arg) + '"'


class FilterModule:
    def filters(self):
        return {
            "engine_peers": engine_peers,
            "engine_names": engine_names,
            "engine_heads": engine_heads,
            "vllm_argv": vllm_argv,
            "systemd_quote": systemd_quote,
        }
