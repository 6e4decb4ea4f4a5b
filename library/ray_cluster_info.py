#!/usr/bin/python
# -*- coding: utf-8 -*-
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
    With O(expect_ips) or O(expect_gpus) it is a join barrier: retry it with C(until)
    on RV(ok) until every node has joined and the GPU count matches the engine.
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
    description: The total number of GPUs the alive nodes must offer (the engine's tensor parallel size).
    type: float
  timeout:
    description: Seconds to wait for the Ray probe before giving up; must be positive.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Run it as the user the Ray processes run as.
  - A cluster that does not answer yet is reported as RV(ok=false), not as a failure, so C(until) can retry.
    A wrong O(python), a venv without Ray or unreadable probe output fail the task, with RV(ok) and RV(message) set.
seealso:
  - name: ray.nodes
    description: The Ray API the probe calls; RV(nodes) is read from its answer.
    link: https://docs.ray.io/en/latest/ray-core/api/doc/ray.nodes.html
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Wait until both nodes joined and the engine's two GPUs are there
  ray_cluster_info:
    address: 10.0.0.11:6379
    python: /opt/vllm/bin/python
    expect_ips: [10.0.0.11, 10.0.0.12]
    expect_gpus: 2
  register: ray
  until: ray.ok
  retries: 60
  delay: 3
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
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ray_cluster import PROBE, RayProbeError, parse_probe_output, verdict

ARGUMENT_SPEC = dict(
    address=dict(type="str", required=True),
    python=dict(type="path", required=True),
    expect_ips=dict(type="list", elements="str", default=[]),
    expect_gpus=dict(type="float"),
    timeout=dict(type="int", default=60),
)

NO_RAY = "No module named 'ray'"


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params

    def fail(msg):
        # ok and message come back with a failure too: an until loop on
        # ray.ok would otherwise die on an undefined key and hide msg.
        module.fail_json(msg=msg, ok=False, message=msg)

    if p["timeout"] <= 0:
        # timeout(1) with 0 never times out.
        fail(f"timeout must be a positive number of seconds, got {p['timeout']}.")
    if not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
        fail(f"python {p['python']} is not an executable file: point it at the python of the venv "
             "that holds Ray (the engine's venv, for example /opt/vllm/bin/python).")
    cmd = ["timeout", str(p["timeout"]), p["python"], "-c", PROBE, p["address"]]
    rc, out, err = module.run_command(cmd, environ_update={"RAY_USAGE_STATS_ENABLED": "0"})
    if rc != 0:
        if NO_RAY in err:
            fail(f"{p['python']} cannot import Ray ({NO_RAY}): install Ray in that venv or point python "
                 "at the venv that holds it.")
        tail = " | ".join([ln.strip() for ln in (err or out).splitlines() if ln.strip()][-3:]).rstrip(".")
        why = f"no answer within {p['timeout']} s" if rc == 124 else f"rc={rc}"
        # Not a failure: the head may still be starting; an until loop retries.
        message = (f"cannot reach the Ray cluster at {p['address']} ({why}): {tail or 'no output'}. "
                   "Check that the head's Ray unit is active and the address is the head's Ray node IP.")
        module.exit_json(changed=False, ok=False, message=message, msg=message)
    try:
        cluster = parse_probe_output(out)
    except RayProbeError as exc:
        fail(f"{exc}; output was: {out[-500:].strip() or '(nothing)'}")
    ok, message = verdict(cluster, p["expect_ips"], p["expect_gpus"])
    # Not ok is not a failure (an until loop retries), but msg says why when
    # the retries run out: Ansible reports "Unknown error" otherwise.
    module.exit_json(changed=False, ok=ok, message=message, **({} if ok else {"msg": message}), **cluster.as_dict())


if __name__ == "__main__":
    main()
