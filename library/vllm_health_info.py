#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe a vLLM server's /health, together with its systemd unit, once or until it is ready or dead
(logic: module_utils/host/vllm_health.py, the wait: module_utils/shared/polling.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health_info
short_description: Probe a vLLM server's /health, and say whether its unit is still alive
description:
  - GETs the server's C(/health) and reads the state of the systemd unit that runs it; once,
    or with O(wait_s) again every O(poll_s) until it is ready or its unit is dead.
  - Meant for waiting for a start. While vLLM loads, its port refuses
    connections; that is reported as RV(ready=false), not as a failure. When the unit has
    stopped or failed, RV(dead) is true and RV(journal_tail) shows why, so the wait ends
    at once instead of running out its time.
  - >-
    A long wait is best split into calls of O(wait_s) under an C(until) loop with C(delay: 0):
    the first 200 is seen within O(poll_s), and Ansible prints a retry line after each call.
  - When the unit is dead, RV(root_cause) names the exception that stopped it, read from the
    unit's last 1000 journal lines, so a failed start says why without reading the journal.
  - When the server is not ready yet, RV(msg) says why with the same evidence, so an C(until) loop
    that runs out of retries shows it instead of Ansible's C(Unknown error).
  - Proxy variables (C(http_proxy), C(https_proxy)) are ignored; the probe always connects directly.
options:
  url:
    description: The server's base URL, for example C(http://10.0.0.11:8000); http or https.
    type: str
    required: true
  unit:
    description: The systemd unit that runs the server on this host. Omit to probe the URL only.
    type: str
  timeout:
    description: Seconds one probe may take; must be positive and at most 86400 (a day).
    type: int
    default: 5
  journal_lines:
    description: How many of the unit's last journal lines to return when it is dead; 0 or more.
    type: int
    default: 20
  wait_s:
    description:
      - Seconds to keep probing until /health answers 200 or the unit is dead; 0 probes once.
      - 0 or more and at most 86400 (a day). A probe begun before the time is up runs to its end
        (at most O(timeout)).
    type: float
    default: 0
  poll_s:
    description: Seconds to pause between two probes of a wait; positive and at most 86400.
    type: float
    default: 0.5
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - A failure (a bad URL or option, an unknown unit, no C(systemctl)) returns every key as well, with
    RV(dead=true), so an C(until) loop on RV(ready) or RV(dead) ends at once and shows the failure's message.
seealso:
  - module: vllm_kv_cache_info
    description: Reads the KV cache pool from the same unit's journal once the server is ready.
  - name: journalctl
    description: >-
      How the current run's lines are selected (C(_SYSTEMD_INVOCATION_ID)). C(docs/modules.md) in this repository
      says how the root cause is found, with real failed starts.
    link: https://www.freedesktop.org/software/systemd/man/latest/journalctl.html
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
# Up to 15 minutes in calls of 30 s: the first 200 is seen within half a
# second, and Ansible prints a retry line every 30 s.
- name: Wait for /health, but stop as soon as the unit dies
  vllm_health_info:
    url: http://10.0.0.11:8000
    unit: vllm.service
    wait_s: 30
  register: health
  until: health.ready or health.dead
  retries: 29
  delay: 0

- name: Say why it died
  ansible.builtin.fail:
    msg: "vllm.service stopped ({{ health.unit_result }}): {{ health.root_cause | default('see journal_tail', true) }}"
  when: health.dead
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
msg:
  description:
    - Why the server is not ready yet (the last answer, the unit's state and age, the root cause and the journal's
      last lines), so a C(until) loop that runs out of retries says why.
  returned: when RV(ready) and RV(dead) are both false
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
  description:
    - Whether the unit is neither active nor activating, so the server will never answer.
    - Also true when the module fails.
  returned: always
  type: bool
uptime_s:
  description:
    - Seconds since the unit last became active, or null without O(unit) or when it is not active.
    - Read at the first RV(ready) answer, it is how long the server took to boot.
  returned: always
  type: float
  sample: 27.4
journal_tail:
  description:
    - The last O(journal_lines) lines the unit's current run logged, when it is dead or not ready yet.
    - When C(journalctl) fails, one line that says so and why.
  returned: always
  type: list
  elements: str
root_cause:
  description:
    - >-
      When the unit is dead or not ready yet, the last exception line (C(SomethingError: ...)) in its current run's
      journal, without vLLM's wrappers that only point elsewhere (C(Engine core initialization failed. See root cause
      above), C(... See stack trace for root cause.)).
    - Null when the server is ready, without O(unit), or when its journal holds no exception.
  returned: always
  type: str
  sample: "ValueError: current platform cpu does not support ray."
waited_s:
  description:
    - Seconds from the first /health probe's start to the last one's end; one probe's own time without O(wait_s).
    - On a failure, the time until the failing probe ended.
  returned: always
  type: float
  sample: 12.504
polls:
  description: How many times /health was probed (1 without O(wait_s); on a failure, the failing probe counted).
  returned: always
  type: int
  sample: 25
"""

import http.client
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.systemd import active_since, parse_show, show_argv
from ansible.module_utils.host.vllm_health import (
    POLL_S,
    HealthArgumentError,
    JournalEvidence,
    health_url,
    is_dead,
    is_ready,
    journal_argv,
    journal_evidence,
    validate_options,
)
from ansible.module_utils.shared.polling import Poller

ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    unit=dict(type="str"),
    timeout=dict(type="int", default=5),
    journal_lines=dict(type="int", default=20),
    wait_s=dict(type="float", default=0),
    poll_s=dict(type="float", default=POLL_S),
)

# Never through a proxy: the server is on the fleet's own network.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def probe(url: str, timeout: int):
    try:
        with _OPENER.open(health_url(url), timeout=timeout) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason)
    except http.client.HTTPException as exc:
        # Something answered, but not HTTP (a wrong port).
        return None, f"not an HTTP answer ({type(exc).__name__}: {exc})"
    except ValueError as exc:
        # A host name the resolver's IDNA step refuses (UnicodeError), which the
        # URL check did not foresee: no answer, never a traceback.
        return None, f"cannot send to this URL ({type(exc).__name__}: {exc})"


def unit_state(module, unit: str, fail):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        fail(f"systemctl not found on this host: unit={unit} needs systemd; omit unit to probe the URL only")
    properties = ("ActiveState", "Result", "InvocationID", "LoadState", "ActiveEnterTimestamp")
    rc, out, err = module.run_command(show_argv(systemctl, unit, properties, unix_time=True))
    props = parse_show(out)
    if rc != 0:
        why = " ".join(err.split()) or "no output"
        fail(f"cannot read the state of {unit}: systemctl show failed (exit {rc}: {why}); "
             "run this on the host whose systemd runs the unit, or omit unit")
    if props.get("LoadState") == "not-found":
        fail(f"systemd has no unit {unit} on this host (not-found); "
             "check the unit name or run the provisioning play first")
    return props


def journal(module, unit: str, invocation: str, lines: int) -> JournalEvidence:
    """The last ``lines`` lines and the root cause of the unit's current run."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl:
        return JournalEvidence([])
    rc, out, err = module.run_command(journal_argv(journalctl, unit, invocation, lines))
    return journal_evidence(unit, lines, rc, out, err)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    result = dict(changed=False, ready=False, status=None, error="", unit_state=None, unit_result=None,
                  dead=False, journal_tail=[], root_cause=None, uptime_s=None)
    poller = Poller(p["wait_s"], p["poll_s"], clock=time.monotonic, sleep=time.sleep)

    def fail(msg):
        # Every key comes back, dead included, so `until: x.ready or x.dead`
        # ends at once and shows msg instead of an undefined-key error.
        module.fail_json(msg=msg, **dict(result, dead=True, waited_s=poller.waited_s, polls=poller.polls))

    try:
        validate_options(p["url"], p["timeout"], p["journal_lines"], p["wait_s"], p["poll_s"])
    except HealthArgumentError as exc:
        fail(str(exc))

    def probe_once():
        """One poll: /health, then the unit; the unit's properties for the journal."""
        status, error = probe(p["url"], p["timeout"])
        result.update(ready=is_ready(status), status=status, error=error)
        if not p["unit"]:
            return {}
        props = unit_state(module, p["unit"], fail)
        started = active_since(props)
        result.update(unit_state=props.get("ActiveState"), unit_result=props.get("Result"),
                      dead=is_dead(props.get("ActiveState")),
                      # Read at the poll that first sees 200: the server's boot time.
                      uptime_s=None if started is None else round(max(0.0, time.time() - started), 3))
        return props

    props = poller.until(probe_once, lambda _props: result["ready"] or result["dead"])
    result.update(waited_s=poller.waited_s, polls=poller.polls)
    if p["unit"] and not result["ready"]:
        evidence = journal(module, p["unit"], props.get("InvocationID"), p["journal_lines"])
        result.update(journal_tail=evidence.tail, root_cause=evidence.root_cause)
    if not result["ready"] and not result["dead"]:
        # An until loop that runs out of retries shows this, not Ansible's "Unknown error".
        result["msg"] = not_ready_message(p["url"], p["unit"], result)
    module.exit_json(**result)


def not_ready_message(url: str, unit: str | None, result: dict) -> str:
    """Why the server is not ready yet, and where to look: the last call's evidence."""
    if result["status"] is not None:
        answer = f"HTTP {result['status']}"
    else:
        answer = f"no answer: {result['error']}" if result["error"] else "no answer"
    text = f"{url}/health gave no 200 in {result['waited_s']} s ({answer})"
    if not unit:
        return text + "."
    text += f"; {unit} is {result['unit_state']}"
    if result["uptime_s"] is not None:
        text += f", up {result['uptime_s']:.0f} s"
    text += f". Root cause: {result['root_cause'] or 'not found in the journal'}."
    if result["journal_tail"]:
        text += " Last lines of its journal: " + " | ".join(result["journal_tail"][-5:]) + "."
    return text + f" Read `journalctl -u {unit}` on this host: still loading, or stuck."


if __name__ == "__main__":
    main()
