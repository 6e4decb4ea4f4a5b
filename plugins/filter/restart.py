"""Filters of the rolling restart and its schedules.

The logic lives in ``plugins/module_utils/fleet/restart_plan.py`` (the plan) and
``restart_report.py`` (the checks and the report),
``golden.py`` and ``schedule.py``, imported at the first call.
"""
from __future__ import annotations

import importlib
import runpy
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Makes plugins/module_utils importable as ansible.module_utils, as for a module.
runpy.run_path(str(Path(__file__).resolve().parents[1] / "module_utils_path.py"))


def _call(module: str, error: str, func: str, *args, **kwargs):
    """``func`` of ansible.module_utils.<module>, its ``error`` as AnsibleFilterError."""
    logic = importlib.import_module("ansible.module_utils." + module)
    try:
        return getattr(logic, func)(*args, **kwargs)
    except getattr(logic, error) as exc:
        raise AnsibleFilterError(str(exc)) from None


def restart_plan(engines, verdicts, **kwargs):
    """Engine records + {engine: diagnosis} -> the plan (restart_plan.plan)."""
    # Jinja hands over its own mapping types; the logic wants plain dicts.
    return _call("fleet.restart_plan", "PlanError", "plan", _plain(engines), _plain(verdicts), **_plain(kwargs))


def restart_pool_check(before, after, tolerance):
    return _call("fleet.restart_report", "PlanError", "pool_check", before, after, tolerance)


def _plain(value):
    """Jinja's mappings and lists as plain ones, all the way down."""
    if hasattr(value, "keys"):
        return {str(k): _plain(v) for k, v in dict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def restart_prefill_check(before, after, limit):
    return _call("fleet.restart_report", "PlanError", "prefill_check", before, after, limit)


def restart_report(plan, results, consumers_t=None, failed=""):
    return _call("fleet.restart_report", "PlanError", "report", _plain(plan), _plain(results), _plain(consumers_t),
                 failed)


def restart_report_line(report):
    return _call("fleet.restart_report", "PlanError", "report_line", _plain(report))


def golden_record_name(model_path):
    """The file of a model's own golden answers (golden.record_name)."""
    return _call("fleet.golden", "GoldenError", "record_name", model_path)


def golden_reference(model, model_changes, live=None, kept=None, live_error=""):
    """What an upgrade's candidate must answer (golden.reference)."""
    return _call("fleet.golden", "GoldenError", "reference", model, model_changes, live, kept, live_error)


def rrule_problems(rrule):
    return _call("fleet.schedule", "ScheduleError", "rrule_problems", rrule)


def restart_cron_job(venv, private_dir, project_dir, inventory, playbook, lock, rotate=30, syslog_tag=""):
    """The /etc/cron.d command of a scheduled rolling restart (schedule.cron_job)."""
    argv = _call("fleet.schedule", "ScheduleError", "runner_argv", venv, private_dir, project_dir, inventory, playbook,
                 lock, rotate)
    return _call("fleet.schedule", "ScheduleError", "cron_job", argv, syslog_tag)


class FilterModule:
    def filters(self):
        return {
            "restart_plan": restart_plan,
            "restart_pool_check": restart_pool_check,
            "restart_prefill_check": restart_prefill_check,
            "restart_report": restart_report,
            "restart_report_line": restart_report_line,
            "golden_record_name": golden_record_name,
            "golden_reference": golden_reference,
            "rrule_problems": rrule_problems,
            "restart_cron_job": restart_cron_job,
        }
