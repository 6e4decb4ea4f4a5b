#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report which nodes have joined a Ray cluster."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_cluster_info
short_description: Report the nodes and GPUs of a running Ray cluster
description:
  - Connects to a running Ray cluster with Ray's own API, from the engine's venv, and
    reports the alive nodes, their addresses and the GPUs they offer.
  - >-
    With O(expect_ips) or O(expect_gpus) it is a join barrier: with O(wait_s) it probes again
    every O(poll_s) until every node has joined and the GPU count matches the engine (RV(ok)).
    A long wait is best split into calls of O(wait_s) under an C(until) loop on RV(ok) with
    C(delay: 0), so that Ansible prints a retry line after each call.
options:
  address:
    description: The cluster's GCS address, C(HEAD_IP:PORT).
    type: str
    required: true
  python:
    description: The Python of the venv that holds Ray.
    type: path
    required: true
  expect_ips:
    description: Node addresses that must be alive.
    type: list
    elements: str
    default: []
  expect_gpus:
    description: The total number of GPUs the alive nodes must offer (the engine's tensor parallel size); 0 or more.
    type: float
  timeout:
    description: Seconds to wait for one Ray probe before giving up; positive and at most 86400 (a day).
    type: int
    default: 60
  wait_s:
    description:
      - Seconds to keep probing until RV(ok); 0 probes once. 0 or more and at most 86400 (a day).
      - A probe begun before the time is up runs to its end (at most O(timeout)).
    type: float
    default: 0
  poll_s:
    description:
      - Seconds to pause between the end of one probe and the start of the next; positive and at most 86400.
      - Each probe starts a Python that imports Ray (a second or more of CPU on the head), so probes never run
        back to back.
    type: float
    default: 1.0
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Run it as the user the Ray processes run as.
  - A cluster that does not answer yet is reported as RV(ok=false), not as a failure, so a wait (or C(until))
    probes again. A wrong O(python), a venv without Ray or unreadable probe output fail the task at once, with
    RV(ok) and RV(message) set.
seealso:
  - name: ray.nodes
    description: The Ray API the probe calls; RV(nodes) is read from its answer.
    link: https://docs.ray.io/en/latest/ray-core/api/doc/ray.nodes.html
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
# Up to 3 minutes in calls of 30 s; Ansible prints a retry line between them.
- name: Wait until both nodes joined and the engine's two GPUs are there
  ray_cluster_info:
    address: 10.0.0.11:6379
    python: /opt/vllm/bin/python
    expect_ips: [10.0.0.11, 10.0.0.12]
    expect_gpus: 2
    wait_s: 30
  register: ray
  until: ray.ok
  retries: 5
  delay: 0
"""

RETURN = r"""
ok:
  description: Whether every expected node is alive and the GPU count matches.
  returned: always
  type: bool
message:
  description: What is missing, or a one-line summary of the cluster.
  returned: always
  type: str
msg:
  description: The same as RV(message) when RV(ok) is false, so a C(until) loop that runs out of retries says why.
  returned: when RV(ok) is false
  type: str
nodes:
  description: Every node Ray knows, alive or dead.
  returned: success
  type: list
  elements: dict
nodes_alive:
  description: How many nodes are alive.
  returned: success
  type: int
gpus_total:
  description: GPUs offered by the alive nodes.
  returned: success
  type: float
alive_ips:
  description: Addresses of the alive nodes.
  returned: success
  type: list
  elements: str
waited_s:
  description:
    - Seconds from the first probe's start to the last one's end; a single probe's own time without O(wait_s).
    - On a failure, the time until it.
  returned: always
  type: float
  sample: 4.127
polls:
  description: How many probes ran (1 without O(wait_s); on a failure, the failing probe counted).
  returned: always
  type: int
  sample: 2
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.ray_cluster import POLL_S, PROBE, RayProbeError, parse_probe_output, verdict
from ansible.module_utils.shared.numeric import finite, shown
from ansible.module_utils.shared.polling import MAX_WAIT_S, PollArgumentError, Poller, validate_poll

ARGUMENT_SPEC = dict(
    address=dict(type="str", required=True),
    python=dict(type="path", required=True),
    expect_ips=dict(type="list", elements="str", default=[]),
    expect_gpus=dict(type="float"),
    timeout=dict(type="int", default=60),
    wait_s=dict(type="float", default=0),
    poll_s=dict(type="float", default=POLL_S),
)

NO_RAY = "No module named 'ray'"


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    poller = Poller(p["wait_s"], p["poll_s"], clock=time.monotonic, sleep=time.sleep)

    def fail(msg):
        # ok and message come back with a failure too: an until loop on
        # ray.ok would otherwise die on an undefined key and hide msg.
        module.fail_json(msg=msg, ok=False, message=msg, waited_s=poller.waited_s, polls=poller.polls)

    if p["timeout"] <= 0:
        # timeout(1) with 0 never times out.
        fail(f"timeout must be a positive number of seconds, got {p['timeout']}.")
    if p["timeout"] > MAX_WAIT_S:
        # The argspec's int reads "1e999" as a 1,000-digit int, which timeout(1) refuses.
        fail(f"timeout must be at most {MAX_WAIT_S} seconds (a day), got {shown(p['timeout'])}.")
    # The argspec's float takes "inf" and "nan", which no cluster offers.
    gpus = p["expect_gpus"]
    if gpus is not None and (finite(gpus) is None or gpus < 0):
        fail(f"expect_gpus must be a number of GPUs, 0 or more, got {shown(gpus)}.")
    try:
        validate_poll(p["wait_s"], p["poll_s"])
    except PollArgumentError as exc:
        fail(f"{exc}.")
    if not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
        fail(f"python {p['python']} is not an executable file: point it at the python of the venv "
             "that holds Ray (the engine's venv, for example /opt/vllm/bin/python).")
    cmd = ["timeout", str(p["timeout"]), p["python"], "-c", PROBE, p["address"]]

    def probe_once() -> dict:
        """One probe: the verdict, or why the cluster did not answer; fails the module when no retry can help."""
        rc, out, err = module.run_command(cmd, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
        if rc != 0:
            if NO_RAY in err:
                fail(f"{p['python']} cannot import Ray ({NO_RAY}): install Ray in that venv or point python "
                     "at the venv that holds it.")
            tail = " | ".join([ln.strip() for ln in (err or out).splitlines() if ln.strip()][-3:]).rstrip(".")
            why = f"no answer within {p['timeout']} s" if rc == 124 else f"rc={rc}"
            # Not a failure: the head may still be starting; the wait (or an until loop) probes again.
            message = (f"cannot reach the Ray cluster at {p['address']} ({why}): {tail or 'no output'}. "
                       "Check that the head's Ray unit is active and the address is the head's Ray node IP.")
            return dict(ok=False, message=message, msg=message)
        try:
            cluster = parse_probe_output(out)
        except RayProbeError as exc:
            fail(f"{exc}; output was: {out[-500:].strip() or '(nothing)'}")
        ok, message = verdict(cluster, p["expect_ips"], p["expect_gpus"])
        # Not ok is not a failure (the wait goes on), but msg says why when an
        # until loop runs out of retries: Ansible reports "Unknown error" otherwise.
        return dict(ok=ok, message=message, **({} if ok else {"msg": message}), **cluster.as_dict())

    answer = poller.until(probe_once, lambda a: a["ok"])
    module.exit_json(changed=False, **answer, waited_s=poller.waited_s, polls=poller.polls)


if __name__ == "__main__":
    main()
