"""Filters of the rolling restart and its schedules.

The logic lives in ``plugins/module_utils/restart_plan.py`` and
``schedule.py`` (standard library only); filter plugins cannot import the
project's module_utils through ``ansible.module_utils``, so they are loaded by
file path, after the ``numeric.py`` they import.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

_DIR = Path(__file__).resolve().parent.parent / "module_utils"


def _load(stem: str, name: str):
    """plugins/module_utils/<stem>.py as the module ``name``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _DIR / ("%s.py" % stem))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _logic(stem: str):
    # Under the name the logic imports it by, as Ansible ships it to a module.
    _load("numeric", "ansible.module_utils.numeric")
    _load("commands", "ansible.module_utils.commands")
    return _load(stem, "vllm_fleet_%s_logic" % stem)


def _call(stem: str, error: str, func: str, *args, **kwargs):
    logic = _logic(stem)
    try:
        return getattr(logic, func)(*args, **kwargs)
    except getattr(logic, error) as exc:
        raise AnsibleFilterError(str(exc)) from None


def restart_plan(engines, verdicts, **kwargs):
    """Engine records + {engine: diagnosis} -> the plan (restart_plan.plan)."""
    # Jinja hands over its own mapping types; the logic wants plain dicts.
    return _call("restart_plan", "PlanError", "plan", _plain(engines), _plain(verdicts), **_plain(kwargs))


def restart_pool_check(before, after, tolerance):
    return _call("restart_plan", "PlanError", "pool_check", before, after, tolerance)


def _plain(value):
    """Jinja's mappings and lists as plain ones, all the way down."""
    if hasattr(value, "keys"):
        return {str(k): _plain(v) for k, v in dict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def restart_report(plan, results, consumers_t=None, failed=""):
    return _call("restart_plan", "PlanError", "report", _plain(plan), _plain(results), _plain(consumers_t), failed)


def restart_report_line(report):
    return _call("restart_plan", "PlanError", "report_line", _plain(report))


def rrule_problems(rrule):
    return _call("schedule", "ScheduleError", "rrule_problems", rrule)


def restart_cron_job(venv, private_dir, project_dir, inventory, playbook, lock, rotate=30, syslog_tag=""):
    """The /etc/cron.d command of a scheduled rolling restart (schedule.cron_job)."""
    argv = _call("schedule", "ScheduleError", "runner_argv", venv, private_dir, project_dir, inventory, playbook,
                 lock, rotate)
    return _call("schedule", "ScheduleError", "cron_job", argv, syslog_tag)


class FilterModule:
    def filters(self):
        return {
            "restart_plan": restart_plan,
            "restart_pool_check": restart_pool_check,
            "restart_report": restart_report,
            "restart_report_line": restart_report_line,
            "rrule_problems": rrule_problems,
            "restart_cron_job": restart_cron_job,
        }
