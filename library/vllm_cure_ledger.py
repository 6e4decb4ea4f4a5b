#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an engine's restart budget from its cure ledger, and append the ledger's lines
(logic: module_utils/watch/ledger.py and budget.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_cure_ledger
short_description: An engine's cure ledger on its head, and its restart budget
description:
  - The cure ledger (JSONL) records every restart of an engine, whoever started it, and whether it cured the engine
    (docs/watch.md says how to read it). This module reads it and appends to it, on the engine's head.
  - C(action=budget) reads the engine's restart budget and decides whether a restart under O(policy) may go on. It
    changes nothing.
  - C(action=begin) appends a restart's first line (outcome C(pending)), with the diagnosis before it.
  - C(action=failed) appends the line that says the restart begun at O(at) failed, and why.
  - C(action=settled) appends the line that says whether the restart begun at O(at) cured the engine, from the
    reading right after it (O(after_first)) and the diagnosis once it settled (O(after)).
  - C(action=reset) appends an operator's reset of the budget (playbooks/watch-reset.yml).
  - A line is appended whole, in one write, and synced; a torn line (a power cut) is skipped when read.
options:
  engine:
    description: The engine's name (vllm_fleet_engine).
    type: str
    required: true
  ledger_path:
    description: The ledger file (vllm_fleet_cure_ledger); its folder must exist.
    type: path
    required: true
  action:
    description: What to do (above).
    type: str
    required: true
    choices: [budget, begin, failed, settled, reset]
  budget_limit:
    description: Restarts without a lasting cure the engine may have in O(budget_window_s) (vllm_fleet_restart_budget).
    type: int
    default: 3
  budget_window_s:
    description: The budget's window in seconds (vllm_fleet_restart_budget_window_s).
    type: float
    default: 21600
  policy:
    description: >-
      Needed by O(action=budget). The run's restart policy; C(always) overrides a spent budget, with a
      warning.
    type: str
    choices: [always, when-degraded]
  inventory_arg:
    description: The run's -i options, for the reset command a refusal names.
    type: str
    default: ""
  trigger:
    description: Who started the restart (C(action=begin)).
    type: str
    choices: [schedule, alert, operator]
    default: operator
  before:
    description: Needed by O(action=begin). The diagnosis before the restart (vllm_diagnose's result).
    type: dict
  evidence:
    description: Where the evidence kept before the restart is (C(action=begin)).
    type: str
  at:
    description: >-
      Needed by O(action=failed) and O(action=settled). When the restart began, ISO 8601 with its offset (the
      C(at) that O(action=begin) returned).
    type: str
  why:
    description: Needed by O(action=failed). Why the restart failed.
    type: str
  after_first:
    description: >-
      Needed by O(action=settled). The reading right after the restart, with C(verdict), C(at) and optionally
      C(prefill_ratio), C(threshold), C(uptime_s), C(pool_tokens), C(passive_ratio).
    type: dict
  after:
    description: Needed by O(action=settled). The diagnosis once the restart settled (vllm_diagnose's result).
    type: dict
  threshold:
    description: Needed by O(action=settled). The prefill ratio under which the engine is cured.
    type: float
  by:
    description: Needed by O(action=reset). Who reset the budget.
    type: str
  reason:
    description: Needed by O(action=reset). What was fixed.
    type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Read the restart budget
  vllm_cure_ledger:
    engine: engine_a
    ledger_path: /var/lib/vllm-fleet/cure-ledger.jsonl
    action: budget
    policy: when-degraded
    budget_limit: 3
    budget_window_s: 21600
    inventory_arg: -i inventory/site

- name: Record a restart's first line
  vllm_cure_ledger:
    engine: engine_a
    ledger_path: /var/lib/vllm-fleet/cure-ledger.jsonl
    action: begin
    trigger: alert
    policy: when-degraded
    before: "{{ vllm_diagnose_result }}"
"""

RETURN = r"""
at:
  description: When the restart began (C(action=begin)), the name of its later lines.
  returned: when action is begin
  type: str
entry:
  description: The line appended (or that would be), as an object.
  returned: when a line is appended
  type: dict
budget:
  description: >-
    The engine's budget (C(limit), C(window_s), C(used), C(remaining), C(exhausted), C(entries) (the restarts
    counted), C(since)).
  returned: when action is budget
  type: dict
decision:
  description: >-
    C(restart) (whether the restart may go on), C(warning) (the override's, or null) and C(message) (the budget
    in words, or the refusal, which begins "not cured by restart").
  returned: when action is budget
  type: dict
skipped_lines:
  description: Lines of the ledger that hold no entry (line number and why).
  returned: always
  type: list
  elements: list
msg:
  description: What was done.
  returned: always
  type: str
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleet.restart_plan import POLICIES
from ansible.module_utils.watch import budget as budget_mod
from ansible.module_utils.watch import ledger as ledger_mod
from ansible.module_utils.watch.errors import WatchError

ARGUMENT_SPEC = dict(
    engine=dict(type="str", required=True),
    ledger_path=dict(type="path", required=True),
    action=dict(type="str", required=True, choices=["budget", "begin", "failed", "settled", "reset"]),
    budget_limit=dict(type="int", default=3),
    budget_window_s=dict(type="float", default=21600),
    policy=dict(type="str", choices=list(POLICIES)),
    inventory_arg=dict(type="str", default=""),
    trigger=dict(type="str", choices=list(ledger_mod.TRIGGERS), default="operator"),
    before=dict(type="dict"),
    evidence=dict(type="str"),
    at=dict(type="str"),
    why=dict(type="str"),
    after_first=dict(type="dict"),
    after=dict(type="dict"),
    threshold=dict(type="float"),
    by=dict(type="str"),
    reason=dict(type="str"),
)
REQUIRED_IF = [
    ("action", "budget", ["policy"]),
    ("action", "begin", ["before"]),
    ("action", "failed", ["at", "why"]),
    ("action", "settled", ["at", "after_first", "after", "threshold"]),
    ("action", "reset", ["by", "reason"]),
]


def _now():
    # To the microsecond: a restart's at names it, and two may begin in one second in a test.
    return datetime.datetime.now(datetime.UTC)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _append(path, text):
    """One write of a whole line, synced: a reader sees the line or not, a power cut tears at most it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _entry(p, ledger):
    action = p["action"]
    if action == "begin":
        at = _now()
        return ledger_mod.restart_entry(p["engine"], at, trigger=p["trigger"], policy=p["policy"],
                                        before=ledger_mod.reading_from_diagnosis(p["before"], at),
                                        evidence=p["evidence"] or None)
    if action == "failed":
        return ledger_mod.failed(ledger, p["engine"], p["at"], p["why"])
    if action == "settled":
        return ledger_mod.settled(ledger, p["engine"], p["at"], p["after_first"],
                                  ledger_mod.reading_from_diagnosis(p["after"], _now()), p["threshold"])
    return ledger_mod.reset_entry(p["engine"], _now(), p["by"], p["reason"])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    p = module.params
    path = p["ledger_path"]
    try:
        ledger_mod.check_engine(p["engine"])
        ledger = ledger_mod.parse(_read(path))
        skipped = [list(s) for s in ledger.skipped]
        if p["action"] == "budget":
            state = budget_mod.state(ledger, p["engine"], _now(),
                                     budget_mod.Budget(p["budget_limit"], p["budget_window_s"]))
            decision = budget_mod.decide(state, p["policy"], p["inventory_arg"], path)
            budget = state.as_dict()
            del budget["engine"]
            module.exit_json(changed=False, budget=budget, decision=decision.as_dict(), skipped_lines=skipped,
                             msg="engine %s: %s" % (p["engine"], decision.message))
        entry = _entry(p, ledger)
        text = ledger_mod.line(entry)
    except WatchError as exc:
        module.fail_json(msg="engine %s's cure ledger %s: %s. Nothing was written." % (p["engine"], path, exc))
    if not os.path.isdir(os.path.dirname(path) or "."):
        module.fail_json(msg="the cure ledger's folder %s does not exist (vllm_fleet_cure_ledger): converge the "
                             "engine first (playbooks/engine.yml). Nothing was written." % os.path.dirname(path))
    if not module.check_mode:
        _append(path, text)
    result = dict(changed=True, entry=entry, skipped_lines=skipped,
                  msg="%s: %s line for engine %s%s" % (path, p["action"], p["engine"],
                                                      ", outcome %s" % entry["outcome"] if "outcome" in entry else ""))
    if p["action"] == "begin":
        result["at"] = entry["at"]
    if module._diff:
        result["diff"] = dict(before="", after=text, before_header=path, after_header=path + " (appended)")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
