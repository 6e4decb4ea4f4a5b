#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write an engine's vllm_fleet_* series into node-exporter's textfile directory
(logic: module_utils/watch/textfile.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_watch_metrics
short_description: Write an engine's own series (baseline, last diagnosis, cure ledger, budget) for node-exporter
description:
  - Renders the engine's C(vllm_fleet_*) series from the files the toolkit keeps on the engine's head (the prefill
    baseline, the cure ledger, the last diagnosis) and writes them, atomically, to
    C(<textfile_dir>/vllm-fleet-<engine>.prom), which node-exporter's textfile collector serves. The watch rules
    read them (docs/watch.md).
  - With O(diagnosis), keeps it in O(diagnosis_path) first, so that a later call without one (after a restart)
    still exports it.
  - Without O(textfile_dir) on the host (no node-exporter, so no watch) it changes nothing and says so.
options:
  engine:
    description: The engine's name (vllm_fleet_engine), the C(fleet_engine) label of every series.
    type: str
    required: true
  textfile_dir:
    description: node-exporter's textfile directory.
    type: path
    required: true
  baseline_path:
    description: The prefill baseline the probe records (vllm_prefill_probe); absent leaves its series out.
    type: path
    required: true
  ledger_path:
    description: The cure ledger (JSONL); absent leaves the ledger's series out.
    type: path
    required: true
  diagnosis_path:
    description: Where the last diagnosis is kept.
    type: path
    required: true
  diagnosis:
    description: A diagnosis just made (vllm_diagnose's result) to keep and export.
    type: dict
  floor:
    description: The engine's prefill threshold floor (vllm_fleet_prefill_threshold_floor), 1 to 10.
    type: float
    required: true
  budget_limit:
    description: >-
      The engine's restart budget (vllm_fleet_restart_budget). O(budget_limit) and O(budget_window_s) come
      together; with them, the budget's series are exported from the ledger.
    type: int
  budget_window_s:
    description: The restart budget's window in seconds (vllm_fleet_restart_budget_window_s).
    type: float
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Export the engine's baseline and last diagnosis
  vllm_watch_metrics:
    engine: engine_a
    textfile_dir: /var/lib/prometheus/node-exporter
    baseline_path: /var/lib/vllm-fleet/prefill-baseline.json
    ledger_path: /var/lib/vllm-fleet/cure-ledger.jsonl
    diagnosis_path: /var/lib/vllm-fleet/last-diagnosis.json
    floor: 1.12
"""

RETURN = r"""
file:
  description: The file written (or that would be), empty when there is no textfile directory.
  returned: always
  type: str
series:
  description: The metric families written.
  returned: always
  type: list
  elements: str
msg:
  description: What was done.
  returned: always
  type: str
"""

import datetime
import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.watch import budget as budget_mod
from ansible.module_utils.watch import ledger as ledger_mod
from ansible.module_utils.watch.errors import WatchError
from ansible.module_utils.watch.textfile import render

ARGUMENT_SPEC = dict(
    engine=dict(type="str", required=True),
    textfile_dir=dict(type="path", required=True),
    baseline_path=dict(type="path", required=True),
    ledger_path=dict(type="path", required=True),
    diagnosis_path=dict(type="path", required=True),
    diagnosis=dict(type="dict"),
    floor=dict(type="float", required=True),
    budget_limit=dict(type="int"),
    budget_window_s=dict(type="float"),
)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _json(path, what):
    raw = _read(path)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise WatchError("%s %s is not JSON (%s): fix or remove it" % (what, path, exc)) from None


def _write(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".vllm-fleet-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_together=[("budget_limit", "budget_window_s")])
    p = module.params
    if not os.path.isdir(p["textfile_dir"]):
        module.exit_json(changed=False, file="", series=[],
                         msg="no %s here (node-exporter's textfile directory): nothing to export" % p["textfile_dir"])
    try:
        ledger_mod.check_engine(p["engine"])
        kept = None
        if p["diagnosis"] is not None:
            kept = {"at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
                    "diagnosis": p["diagnosis"]}
            stored = kept
        else:
            stored = _json(p["diagnosis_path"], "the last diagnosis")
        raw_ledger = _read(p["ledger_path"])
        ledger = None if raw_ledger is None else ledger_mod.parse(raw_ledger)
        state = None
        if p["budget_limit"] is not None:
            now = datetime.datetime.now(datetime.UTC)
            state = budget_mod.state(ledger or ledger_mod.Ledger(), p["engine"], now,
                                     budget_mod.Budget(p["budget_limit"], p["budget_window_s"]))
        text = render(p["engine"], ledger=ledger, budget_state=state,
                      diagnosis=None if stored is None else stored["diagnosis"],
                      diagnosed_at=None if stored is None else stored["at"],
                      baseline=_json(p["baseline_path"], "the prefill baseline"), floor=p["floor"])
    except (WatchError, KeyError, TypeError) as exc:
        module.fail_json(msg="cannot export engine %s's series: %s" % (p["engine"], exc))
    path = os.path.join(p["textfile_dir"], "vllm-fleet-%s.prom" % p["engine"])
    old = (_read(path) or b"").decode("utf-8", "replace")
    # The diagnosis' time changes at every diagnosis; the rest only when a figure does.
    changed = old != text
    if not module.check_mode:
        if kept is not None:
            _write(p["diagnosis_path"], json.dumps(kept, sort_keys=True) + "\n")
        if changed:
            _write(path, text)
    series = sorted(set(re.findall(r"(?m)^# TYPE (\S+)", text)))
    result = dict(changed=changed, file=path, series=series,
                  msg="%s: %d series families" % (path, len(series)))
    if module._diff:
        result["diff"] = dict(before=old, after=text, before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
