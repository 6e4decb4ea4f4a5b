"""Filters that turn the inventory into engines.

An engine (a TP group) is the set of hosts in the engines group that share a
``vllm_fleet_engine`` name; its rank-0 host is the head (Ray head, ``vllm
serve``). ``engine_records`` builds the one record of each engine that every
role, report and restart reads.

The logic lives in ``plugins/module_utils/fleet/``: the record, the host checks
and the gate's URL and upstreams in ``record.py``, vLLM's argv and its systemd
quoting in ``exec_start.py``, a command's ``-i`` options in ``commands.py``,
the versioned installs' names and steps in ``installs.py``. This file
registers them and raises their errors as AnsibleFilterError: no number an
inventory holds (5,000 digits, inf, nan) raises anything else.
"""
from __future__ import annotations

import functools
import runpy
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Makes plugins/module_utils importable as ansible.module_utils, as for a module.
runpy.run_path(str(Path(__file__).resolve().parents[1] / "module_utils_path.py"))

from ansible.module_utils.fleet import exec_start as _exec_start  # noqa: E402
from ansible.module_utils.fleet import installs as _installs  # noqa: E402
from ansible.module_utils.fleet import record as _record  # noqa: E402
from ansible.module_utils.fleet.commands import inventory_args  # noqa: E402


def _filter(logic):
    """``logic`` as a filter: its domain error raised as AnsibleFilterError, with the same message."""
    @functools.wraps(logic)
    def run(*args, **kwargs):
        try:
            return logic(*args, **kwargs)
        except (_record.RecordError, _exec_start.ArgvError, _installs.InstallsError) as exc:
            raise AnsibleFilterError(str(exc)) from None
    return run


engine_heads = _filter(_record.engine_heads)
engine_records = _filter(_record.engine_records)
engine_rank = _filter(_record.engine_rank)
host_problems = _filter(_record.host_problems)
gate_url = _filter(_record.gate_url)
gate_upstreams = _filter(_record.gate_upstreams)
vllm_argv = _filter(_exec_start.vllm_argv)
systemd_quote = _filter(_exec_start.systemd_quote)
install_id = _filter(_installs.install_id)
install_step = _filter(_installs.install_step)
install_prune = _filter(_installs.prune_installs)
comparable_pins = _filter(_installs.comparable_pins)
lock_version_problem = _filter(_installs.lock_version_problem)
pip_list_pins = _filter(_installs.pip_list_pins)
running_model = _filter(_installs.running_model)


class FilterModule:
    def filters(self):
        return {
            "engine_heads": engine_heads,
            "engine_records": engine_records,
            "engine_rank": engine_rank,
            "host_problems": host_problems,
            "gate_url": gate_url,
            "gate_upstreams": gate_upstreams,
            "vllm_argv": vllm_argv,
            "systemd_quote": systemd_quote,
            "inventory_args": inventory_args,
            "install_id": install_id,
            "install_step": install_step,
            "install_prune": install_prune,
            "comparable_pins": comparable_pins,
            "lock_version_problem": lock_version_problem,
            "pip_list_pins": pip_list_pins,
            "running_model": running_model,
        }
