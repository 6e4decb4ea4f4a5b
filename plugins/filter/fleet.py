"""Filters that turn the inventory into engines.

An engine (a TP group) is the set of hosts in the engines group that share a
``vllm_fleet_engine`` name; its rank-0 host is the head (Ray head, ``vllm
serve``). Kept self-contained: filter plugins cannot import the project's
module_utils through ``ansible.module_utils``.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _address(hv: dict, name: str) -> str:
    return str(hv.get("vllm_fleet_address") or hv.get("ansible_host") or name)


def engine_peers(hosts, hostvars, engine):
    """Hosts of ``engine`` as a rank-sorted list of {name, rank, address}."""
    peers = []
    for name in hosts or []:
        hv = hostvars[name]
        if str(hv.get("vllm_fleet_engine", "")) != str(engine):
            continue
        try:
            rank = int(hv.get("vllm_fleet_rank"))
        except (TypeError, ValueError):
            raise AnsibleFilterError(
                f"host {name} of engine {engine} has no integer vllm_fleet_rank"
            ) from None
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


def vllm_argv(flags):
    """Render a dict of ``vllm serve`` flags (argparse dest names) as argv.

    ``True`` gives ``--flag``, ``False`` gives ``--no-flag``, ``None`` drops
    the flag, a dict or list is passed as JSON; insertion order is kept.
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
        elif isinstance(value, (dict, list)):
            argv += [opt, json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            argv += [opt, str(value)]
    return argv


_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@")


def systemd_quote(arg):
    """Quote one word for a systemd Exec line (quotes, backslashes, %, $)."""
    arg = str(arg)
    if arg and all(c in _SAFE for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"' + escaped + '"'


class FilterModule:
    def filters(self):
        return {
            "engine_peers": engine_peers,
            "engine_names": engine_names,
            "vllm_argv": vllm_argv,
            "systemd_quote": systemd_quote,
        }
