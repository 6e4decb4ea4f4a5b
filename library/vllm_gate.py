#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drain, undrain, hold or release at the admission gate, and read what it holds."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_gate
short_description: Drain, undrain, hold or release at the admission gate, and read what it holds
description:
  - The one client of the gate's admin API (gate/vllm_fleet_gate/openapi.json) for the playbooks, in the shape of
    community.general's haproxy module. Reads C(GET /admin/state), then asks for the wanted state only when the
    gate is not in it already.
  - "What the playbooks wait on comes back as RV(idle) and RV(ready) (their one meaning:
    plugins/module_utils/fleet/gate_admin.py); wait with C(until:) on them, so each try shows."
  - Runs where the gate's URL is reachable (the controller, with C(delegate_to) localhost).
options:
  url:
    description: The gate's base URL, without C(/v1) (C(vllm_fleet_gate_url)).
    type: str
    required: true
  admin_token:
    description: The gate's admin token (C(gate_service_admin_token)). Never logged.
    type: str
    required: true
    no_log: true
  state:
    description:
      - C(present) only reads. C(drained) and C(undrained) act on O(upstream); C(held) holds every admission for
        O(hold_s), asked again each time since that restarts the hold's clock; C(released) ends a hold.
    type: str
    choices: [present, drained, undrained, held, released]
    default: present
  upstream:
    description: An engine's name, as the gate's config names it. Needed for C(drained) and C(undrained).
    type: str
  hold_s:
    description: Seconds to hold admissions for (C(state=held)), at most the gate's C(max_hold_s).
    type: float
  timeout:
    description: Seconds to wait for each of the gate's answers.
    type: int
    default: 5
attributes:
  check_mode:
    support: full
    details: Reads the gate and says what would change; asks for nothing.
  diff_mode:
    support: none
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Drain engine-a at the gate
  vllm_gate:
    url: "{{ vllm_fleet_gate_url }}"
    admin_token: "{{ vllm_fleet_gate_admin_token }}"
    upstream: engine-a
    state: drained
  delegate_to: localhost

- name: Wait until its in-flight requests are done
  vllm_gate:
    url: "{{ vllm_fleet_gate_url }}"
    admin_token: "{{ vllm_fleet_gate_admin_token }}"
    upstream: engine-a
  register: gate
  until: gate.idle
  retries: 300
  delay: 1
  delegate_to: localhost
"""

RETURN = r"""
idle:
  description: >-
    With O(upstream), nothing in flight to it; without, nothing in flight or queued at the gate.
  type: bool
  returned: success
ready:
  description: Whether the gate's health check sees O(upstream) ready; null without O(upstream).
  type: bool
  returned: success
held:
  description: Whether the gate holds every admission (after the change).
  type: bool
  returned: success
drained:
  description: The upstreams the gate keeps drained (after the change).
  type: list
  elements: str
  returned: success
inflight:
  description: Requests in flight to O(upstream), or at the whole gate without one.
  type: int
  returned: success
queued:
  description: Requests waiting in the gate's queue.
  type: int
  returned: success
queue_timeout_s:
  description: The gate's longest wait in its queue.
  type: float
  returned: success
max_hold_s:
  description: The longest hold the gate grants.
  type: float
  returned: success
status:
  description: The HTTP status of the gate's last answer (-1 when it did not answer).
  type: int
  returned: always
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleet.gate_admin import GateAdminError, call_for, facts, read_state
from ansible.module_utils.urls import fetch_url


class _NoAnswer(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _request(module, url: str, method: str = "GET", body: dict | None = None):
    headers = {"Authorization": "Bearer " + module.params["admin_token"], "Accept": "application/json"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body)
    resp, info = fetch_url(module, url, data=data, headers=headers, method=method,
                           timeout=module.params["timeout"], force=True)
    status = int(info.get("status", -1))
    path = url[len(module.params["url"].rstrip("/")):]
    if status in (401, 403):
        raise _NoAnswer(status, "the gate at %s refused the admin token on %s (%d): check gate_service_admin_token"
                        % (module.params["url"], path, status))
    if status != 200:
        reason = info.get("msg", "") if status == -1 else (info.get("body") or b"")[:300]
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise _NoAnswer(status, "the gate at %s did not answer %s %s (%s: %s)"
                        % (module.params["url"], method, path, "no answer" if status == -1 else status, reason))
    try:
        return json.loads(resp.read())
    except ValueError:
        raise _NoAnswer(status, "the gate at %s answered %s %s with no JSON"
                        % (module.params["url"], method, path)) from None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            admin_token=dict(type="str", required=True, no_log=True),
            state=dict(type="str", default="present",
                       choices=["present", "drained", "undrained", "held", "released"]),
            upstream=dict(type="str"),
            hold_s=dict(type="float"),
            timeout=dict(type="int", default=5),
        ),
        required_if=[("state", "drained", ["upstream"]), ("state", "undrained", ["upstream"]),
                     ("state", "held", ["hold_s"])],
        supports_check_mode=True,
    )
    p = module.params
    base = p["url"].rstrip("/")
    status, call, asked = -1, None, False
    try:
        state = read_state(_request(module, base + "/admin/state"))
        status = 200
        call = call_for(state, p["state"], p["upstream"], p["hold_s"])
        if call is not None and not module.check_mode:
            asked = True
            _request(module, base + call.path, "POST", call.body)
            state = read_state(_request(module, base + "/admin/state"))
        result = facts(state, p["upstream"])
    except _NoAnswer as exc:
        module.fail_json(msg=str(exc), status=exc.status, changed=asked)
    except GateAdminError as exc:
        done = "after POST %s, " % call.path if asked else "Nothing was changed at the gate: "
        module.fail_json(msg=done + str(exc), status=status, changed=asked)
    module.exit_json(changed=call is not None, status=status, **result)


if __name__ == "__main__":
    main()
