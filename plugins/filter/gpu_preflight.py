"""Filters of the gpu_preflight role: the engine-wide clock and link MTU
checks and the per-host report.

The logic lives in ``plugins/module_utils/host/``: ``preflight_clock.py``, ``preflight_network.py``
(the link MTU) and ``gpu_preflight.py`` (the report).
"""
from __future__ import annotations

import runpy
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Makes plugins/module_utils importable as ansible.module_utils, as for a module.
runpy.run_path(str(Path(__file__).resolve().parents[1] / "module_utils_path.py"))

from ansible.module_utils.host import gpu_preflight as _logic  # noqa: E402
from ansible.module_utils.host.preflight_clock import check_clock_skew  # noqa: E402
from ansible.module_utils.host.preflight_network import check_link_mtu  # noqa: E402
from ansible.module_utils.shared import numeric as _numeric  # noqa: E402


def _checks(checks):
    try:
        return [_logic.check_from_dict(c) for c in checks or []]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"not a list of preflight checks: {exc}") from None


def clock_skew(peers, hostvars, max_skew_s, engine="", result="__gpu_preflight_info"):
    """The ``clock_skew`` check of one engine, as a dict.

    ``peers`` is ``engine_peers``' rank-sorted list; the rank-0 host is the
    reference. Each host's offset is read from its registered module result
    (``result``), ``None`` when the host has none or it is no finite number.
    ``max_skew_s`` is a finite number of seconds, 0 or more.
    """
    if not peers:
        raise AnsibleFilterError("gpu_preflight_clock_skew: the engine has no hosts")
    max_skew = _numeric.finite_float(max_skew_s)
    if max_skew is None or max_skew < 0:
        raise AnsibleFilterError(f"gpu_preflight_clock_skew: gpu_preflight_max_clock_skew_s must be a number of "
                                 f"seconds, 0 or more, got {_numeric.shown(max_skew_s)}")
    offsets = {}
    for peer in peers:
        registered = hostvars[peer["name"]].get(result) if peer["name"] in hostvars else None
        offset = registered.get("clock_offset_s") if hasattr(registered, "get") else None
        offsets[peer["name"]] = _numeric.finite_float(offset)
    ranked = [p for p in peers if _numeric.finite(p.get("rank")) is not None]
    if len(ranked) != len(peers):
        raise AnsibleFilterError("gpu_preflight_clock_skew: peers must be engine_peers' list, each with its rank, "
                                 f"got {_numeric.shown(peers)}")
    head = min(ranked, key=lambda p: p["rank"])["name"]
    return check_clock_skew(offsets, head, max_skew, _numeric.text(engine)).as_dict()


def link_mtu(peers, hostvars, engine="", result="__gpu_preflight_info"):
    """The ``link_mtu`` check of one engine, as a dict: every host's MTU on
    its engine interface, read from its registered module result
    (``result``), compared."""
    if not peers:
        raise AnsibleFilterError("gpu_preflight_link_mtu: the engine has no hosts")
    mtus = {}
    for peer in sorted(peers, key=lambda p: int(p["rank"])):
        registered = hostvars[peer["name"]].get(result) if peer["name"] in hostvars else None
        get = registered.get if hasattr(registered, "get") else (lambda key: None)
        mtu = get("link_mtu")
        mtus[peer["name"]] = None if mtu is None else (str(get("link_interface")), int(mtu))
    head = min(peers, key=lambda p: int(p["rank"]))["name"]
    return check_link_mtu(mtus, head, str(engine)).as_dict()


def report(checks):
    """The checks as readable lines (``PASS name: detail`` / ``FAIL ...`` + ``fix:``)."""
    return _logic.render_report(_checks(checks))


def summary(checks):
    """``{ok, failed_checks, message}`` of a list of checks; the message lists every failure."""
    ok, failed, message = _logic.summarize(_checks(checks))
    return {"ok": ok, "failed_checks": failed, "message": message}


class FilterModule:
    def filters(self):
        return {
            "gpu_preflight_clock_skew": clock_skew,
            "gpu_preflight_link_mtu": link_mtu,
            "gpu_preflight_report": report,
            "gpu_preflight_summary": summary,
        }
