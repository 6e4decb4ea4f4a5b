#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the GPU's own state on an engine host: throttle reasons and temperatures."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_state_info
short_description: Read an engine host's GPU throttle reasons and temperatures
description:
  - Runs C(nvidia-smi -q -d PERFORMANCE,TEMPERATURE) and reads which clock-event (throttle) reasons are
    active and how hot each GPU is (C(plugins/module_utils/host/gpu_throttle.py)).
  - RV(throttled) names an active thermal or power reason (C(SW Power Cap), C(HW Slowdown),
    C(HW Thermal Slowdown), C(HW Power Brake Slowdown), C(SW Thermal Slowdown)) in one sentence. The
    diagnosis then reads a prefill slow-down as C(throttled), not C(prefill-degraded), since a restart
    cools the GPU for a while and cures nothing.
  - A host without C(nvidia-smi) (the CPU lab, a host that is no NVIDIA one) returns RV(present=false) and
    says so in RV(reason); that is no failure. Neither is an C(nvidia-smi) that fails; RV(reason) holds its
    words and RV(throttled) is null.
options:
  nvidia_smi:
    description: The C(nvidia-smi) to run, a name looked up on C(PATH) or a path.
    type: str
    default: nvidia-smi
  timeout:
    description: Seconds C(nvidia-smi) may take (a hung driver must not hold the diagnosis).
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
seealso:
  - name: nvidia-smi's documentation (clocks event reasons)
    description: What each reason means; C(docs/diagnose.md) says what to do about C(throttled).
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Read the GPU's state on each of the engine's hosts
  gpu_state_info:
    nvidia_smi: nvidia-smi
  delegate_to: "{{ item }}"
  loop: "{{ engine_hosts }}"
  register: gpu_state
"""

RETURN = r"""
present:
  description: Whether the host has an C(nvidia-smi) to run.
  returned: always
  type: bool
throttled:
  description: The active thermal or power throttles, one sentence; null when none is active or nothing was read.
  returned: always
  type: str
  sample: "GPU 0000000F:01:00.0: SW Thermal Slowdown active at 96 C, 2 C below its slowdown point"
reason:
  description: Why nothing was read (no C(nvidia-smi), or its failure), else empty.
  returned: always
  type: str
gpus:
  description: Each GPU's state as read.
  returned: always
  type: list
  elements: dict
  sample: [{bus_id: "00000000:01:00.0", performance_state: P0, active: [SW Power Cap], counters_us: {},
            temp_c: 84, t_limit_margin_c: null, slowdown_temp_c: 98}]
"""

import dataclasses
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.gpu_throttle import GpuStateError, read, throttled

ARGS = ["-q", "-d", "PERFORMANCE,TEMPERATURE"]


def main():
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                                          "timeout": {"type": "int", "default": 20}},
                           supports_check_mode=True)
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 second or more, got %d" % module.params["timeout"])
    name = module.params["nvidia_smi"]
    smi = name if os.sep in name else module.get_bin_path(name)
    out = {"changed": False, "present": False, "throttled": None, "reason": "", "gpus": []}
    if not smi or not os.access(smi, os.X_OK):
        module.exit_json(**dict(out, reason="no %s here: not an NVIDIA host" % name))
    out["present"] = True
    try:
        rc, stdout, stderr = module.run_command(["timeout", str(module.params["timeout"]), smi] + ARGS)
    except OSError as exc:
        module.exit_json(**dict(out, reason="%s did not run: %s" % (smi, exc)))
    if rc != 0:
        words = (stderr or stdout or "").strip().splitlines()
        module.exit_json(**dict(out, reason="%s %s exited %d%s" % (
            smi, " ".join(ARGS), rc, (": " + words[-1][:300]) if words else "")))
    try:
        gpus = read(stdout)
    except GpuStateError as exc:
        module.exit_json(**dict(out, reason=str(exc)))
    module.exit_json(**dict(out, throttled=throttled(gpus), gpus=[dataclasses.asdict(g) for g in gpus]))


if __name__ == "__main__":
    main()
