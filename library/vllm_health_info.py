#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe a vLLM server's /health once, together with its systemd unit."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health_info
short_description: Probe a vLLM server's /health once, and say whether its unit is still alive
description:
  - GETs the server's C(/health) once and reads the state of the systemd unit that runs it.
  - Meant for C(until) loops that wait for a start. While vLLM loads, its port refuses
    connections; that is reported as RV(ready=false), not as a failure. When the unit has
    stopped or failed, RV(dead) is true and RV(journal_tail) shows why, so the loop can end
    at once instead of waiting out its timeout.
options:
  url:
    description: The server's base URL, for example C(http://10.0.0.11:8000).
    type: str
    required: true
  unit:
    description: The systemd unit that runs the server on this host. Omit to probe the URL only.
    type: str
  timeout:
    description: Seconds one probe may take.
    type: int
    default: 5
  journal_lines:
    description: How many of the unit's last journal lines to return when it is dead.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Wait for /health, but stop as soon as the unit dies
  vllm_health_info:
    url: http://10.0.0.11:8000
    unit: vllm.service
  register: health
  until: health.ready or health.dead
  retries: 180
  delay: 5
"""

RETURN = r"""
ready:
  description: Whether /health answered 200.
  returned: always
  type: bool
status:
  description: The HTTP status of /health, or null when nothing answered.
  returned: always
  type: int
error:
  description: Why nothing answered (connection refused while loading, timeout...).
  returned: always
  type: str
unit_state:
  description: The unit's ActiveState (active, activating, failed, inactive...), or null without O(unit).
  returned: always
  type: str
unit_result:
  description: The unit's Result (success, exit-code, signal...), or null without O(unit).
  returned: always
  type: str
dead:
  description: Whether the unit is neither active nor activating, so the server will never answer.
  returned: always
  type: bool
journal_tail:
  description: The last lines the unit's current run logged, when it is dead.
  returned: always
  type: list
  elements: str
"""

import json
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    unit=dict(type="str"),
    timeout=dict(type="int", default=5),
    journal_lines=dict(type="int", default=20),
)


def probe(url: str, timeout: int):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason)


def unit_state(module, unit: str):
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", "-p", "ActiveState", "-p", "Result",
                                       "-p", "InvocationID", "-p", "LoadState", unit])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if rc != 0 or props.get("LoadState") == "not-found":
        module.fail_json(msg=f"systemd has no unit {unit} on this host ({err.strip() or 'not-found'}); "
                             "check the unit name or run the provisioning play first")
    return props


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    status, error = probe(p["url"], p["timeout"])
    result = dict(changed=False, ready=status == 200, status=status, error=error,
                  unit_state=None, unit_result=None, dead=False, journal_tail=[])
    if p["unit"]:
        props = unit_state(module, p["unit"])
        result["unit_state"] = props.get("ActiveState")
        result["unit_result"] = props.get("Result")
        result["dead"] = props.get("ActiveState") not in ("active", "activating", "reloading")
        if result["dead"]:
            journalctl = module.get_bin_path("journalctl")
            if journalctl:
                cmd = [journalctl, "-u", p["unit"], "-o", "cat", "--no-pager", "-n", str(p["journal_lines"])]
                if props.get("InvocationID"):
                    cmd.append("_SYSTEMD_INVOCATION_ID=" + props["InvocationID"])
                _rc, out, _err = module.run_command(cmd)
                result["journal_tail"] = out.splitlines()[-p["journal_lines"]:]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
